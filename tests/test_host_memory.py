"""Host (CPU system) memory: what ZeRO-Offload and activation offloading put there
(``mem_host``) and the fit check against the GPU's share of its node's memory
(``hardware host_memory_gb``, folded into ``mem_headroom``).

Checked by conservation (offloading moves bytes from HBM to the host, it does not make them
vanish), by hand from the model's own per-layer outputs, against the DGX datasheets' 2 TB per
8-GPU node, and by the sweep's masks against ``predict_training``.
"""

from __future__ import annotations

import math
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hwspecs import HardwareSpecError, load_hardware
from optimizers.search import SearchError, search
from symcost.api import predict_training
from symcost.config import HOST_MEMORY_UNSTATED, TrainingConfig
from symcost.sweep import sweep

GIB = 2**30
#: Llama-3-70B as Megatron-Bridge's GB200 FP8 recipe lays it out on 64 GPUs (TP1 PP1, FSDP,
#: micro-batch 2, sequence 8192; perf_recipes/llama/gb200/llama3.py)
KW = dict(num_gpus=64, global_batch=256, micro_batch=2, seq_len=8192, zero=3, dtype="fp8")
MODEL = "llama-3-70b"


def _run(hw: str, k: int) -> dict[str, float]:
    return predict_training(MODEL, hw, activation_offload_layers=k, **KW).values


def test_dgx_nodes_share_2_tb_over_8_gpus():
    """DGX A100 (640GB), H100, H200 and B200 ship 2 TB of system memory for 8 GPUs (their
    datasheets / user guides, cited in the YAML): 256 GiB per GPU. GB200 states none."""
    for hw in ("a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200"):
        spec = load_hardware(hw)
        assert spec.host_memory == 2048 * GIB
        r = predict_training("gpt-1.7b", hw, TrainingConfig(num_gpus=8))
        assert r.inputs["host_mem_cap"] == 256 * GIB
    assert load_hardware("gb200").host_memory is None
    assert predict_training("gpt-1.7b", "gb200", TrainingConfig(num_gpus=8)).inputs[
        "host_mem_cap"] == HOST_MEMORY_UNSTATED


@given(k=st.integers(1, 79))
@settings(max_examples=6, deadline=None)
def test_activation_offload_moves_k_layers_to_the_host(k):
    """Host: ``k`` layers' activations; HBM keeps ``L - k + 1``: HBM + host grows by exactly
    the one layer in flight (held on both sides), nothing else changes."""
    base, off = _run("b200", 0), _run("b200", k)
    per_layer = base["mem_activations_layer"]
    assert base["mem_host"] == 0.0
    assert off["mem_host"] == pytest.approx(k * per_layer, rel=1e-12)
    assert off["mem_total"] + off["mem_host"] == pytest.approx(
        base["mem_total"] + per_layer, rel=1e-12)


@pytest.mark.parametrize("zero,offload", [(2, "optimizer"), (3, "optimizer+params")])
def test_zero_offload_conserves_bytes(zero, offload):
    """ZeRO-Offload (Ren et al. 2021): the optimizer partition (fp32 master and Adam moments)
    and the gradients, and with ``optimizer+params`` the 16-bit parameter partition, leave HBM
    for the host: HBM + host equals the HBM total without offload."""
    cfg = TrainingConfig(num_gpus=8, micro_batch=1, seq_len=350, zero=zero)
    on = predict_training("llama-2-7b", "a100-sxm4-80gb", cfg.replace(offload=offload)).values
    off = predict_training("llama-2-7b", "a100-sxm4-80gb", cfg).values
    moved = off["mem_gradients"] + off["mem_optimizer"]
    if offload == "optimizer+params":
        moved += off["mem_weights"] - on["mem_weights"]   # all but the ZeRO-3 gather buffer
    assert on["mem_host"] == pytest.approx(moved, rel=1e-12)
    assert on["mem_total"] + on["mem_host"] == pytest.approx(off["mem_total"], rel=1e-12)
    # by hand, per parameter of the 1/8 partition: 2 (16-bit gradient) + 12 (fp32 master and
    # Adam moments), + 2 (16-bit parameter) with optimizer+params
    per = 14 if offload == "optimizer" else 16
    assert on["mem_host"] == pytest.approx(per * on["params_total"] / 8, rel=1e-12)


def test_host_memory_limits_the_fit():
    """On B200 (2 TB per 8 GPUs, 256 GiB each) offloading 40 of Llama-3-70B's 80 layers fits
    (about 145 GiB on the host); 79 layers need about 287 GiB of host memory per GPU and do
    not fit, although HBM then has room to spare; the headroom is the host's then. GB200
    states no host memory, so it is not checked there."""
    ok, over = _run("b200", 40), _run("b200", 79)
    assert 140 * GIB < ok["mem_host"] < 150 * GIB and ok["mem_headroom"] >= 0
    assert over["mem_usable"] - over["mem_total"] > 100 * GIB
    assert over["mem_headroom"] == pytest.approx(256 * GIB - over["mem_host"], rel=1e-12)
    assert over["mem_headroom"] < -20 * GIB
    assert not predict_training(MODEL, "b200", activation_offload_layers=79, **KW).fits
    assert predict_training(MODEL, "gb200", activation_offload_layers=79, **KW).fits


def test_sweep_masks_what_predict_rejects():
    """The sweep's ``memory_fits`` mask (one rule, the headroom) agrees with ``fits``."""
    base = TrainingConfig(**KW)
    df = sweep(MODEL, "b200", base, vary={"activation_offload_layers": [0, 40, 60, 79]},
               precision="float64")
    seen = set()
    for row in df.to_dict("records"):
        ref = predict_training(MODEL, "b200", base.replace(
            activation_offload_layers=int(row["activation_offload_layers"])))
        assert row["valid"] == ref.fits
        assert math.isclose(row["mem_headroom"], ref.values["mem_headroom"], rel_tol=1e-12)
        seen.add(ref.fits)
    assert seen == {True, False}


def test_bad_host_memory_is_a_one_line_error(tmp_path):
    text = (textwrap.dedent("""\
        name: my-node
        description: test node
        generation: hopper
        gpus_per_node: 8
        peak_tflops: {bf16: 989.4, fp8: 1978.9}
        hbm_capacity_gb: 288
        hbm_bandwidth_gbps: 3350
        intra_node: {technology: NVLink, gbps_per_direction: 450, latency_us: 1.9}
        network: {technology: IB, nics_per_node: 8, nic_gbit_per_s: 400, latency_us: 4.0}
        host_memory_gb: HOST
        sources:
          peak_tflops: a citation long enough to pass
          hbm_capacity_gb: a citation long enough to pass
          hbm_bandwidth_gbps: a citation long enough to pass
          gpus_per_node: a citation long enough to pass
          intra_node: a citation long enough to pass
          network: a citation long enough to pass
        """))
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("HOST", "-1"))
    with pytest.raises(HardwareSpecError, match=r"host_memory_gb.*-1"):
        load_hardware(str(bad))
    uncited = tmp_path / "uncited.yaml"
    uncited.write_text(text.replace("HOST", "1024"))
    with pytest.raises(HardwareSpecError, match=r"sources.*'host_memory_gb'"):
        load_hardware(str(uncited))
    good = tmp_path / "good.yaml"
    good.write_text(text.replace("HOST", "1024")
                    + "  host_memory_gb: a citation of the node's system memory\n")
    assert load_hardware(str(good)).host_memory == 1024 * GIB
    # a user's node (288 GB HBM; 1 TB for 8 GPUs, 128 GiB each): 40 offloaded layers
    # (~145 GiB) do not fit on its host, 30 (~109 GiB) do
    r40 = predict_training(MODEL, str(good), activation_offload_layers=40, **KW)
    r30 = predict_training(MODEL, str(good), activation_offload_layers=30, **KW)
    assert r40.values["mem_headroom"] == pytest.approx(128 * GIB - r40.values["mem_host"])
    assert r40.values["mem_host"] > 128 * GIB > r30.values["mem_host"]


def test_search_removes_layouts_the_host_cannot_hold():
    """``search`` filters on the same headroom: at micro-batch 2, 79 offloaded layers need
    about 287 GiB of host memory per GPU on B200 (256 GiB) and no candidate fits; the error
    names host memory. With 40 layers the kept candidates all fit both."""
    kw = dict(seq_len=8192, dtype="fp8", fix={"tp": 1, "cp": 1, "micro_batch": 2})
    with pytest.raises(SearchError, match=r"on b200: .* host memory .*needs"):
        search(MODEL, "b200", 64, 256, activation_offload_layers=79, **kw)
    res = search(MODEL, "b200", 64, 256, activation_offload_layers=40, **kw)
    assert len(res.table) > 0
    assert (res.table["mem_host"] <= 256 * GIB).all()
    assert (res.table["mem_headroom"] >= 0).all()
