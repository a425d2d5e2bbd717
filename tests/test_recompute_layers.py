"""Block recomputation (``recompute_layers``, Megatron-Core ``--recompute-method block
--recompute-num-layers``): the recomputed share of each pipeline chunk's layers pays its
forward again and keeps only its input, the rest keep their activations. Checked against the
all-layer and no-recomputation limits, by linearity in the share, against a sweep, and the
rule's one-line error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import predict_training
from symcost.bottleneck import bottleneck
from symcost.fields import ConfigError
from symcost.sweep import sweep

#: Llama-3-70B on 64 H100 (TP8, SP, PP4: 20 layers per stage), fp8, micro-batch 1
LLAMA = dict(num_gpus=64, tp=8, sp=True, pp=4, global_batch=128, micro_batch=1, seq_len=8192,
             dtype="fp8")
MODEL, HW = "llama-3-70b", "h100-sxm5-80gb"


def _run(**kw: object) -> dict[str, float]:
    return predict_training(MODEL, HW, **{**LLAMA, **kw}).values


def test_zero_and_a_whole_chunk_are_full_recomputation():
    """0 (the default) and any count of at least the chunk's 20 layers recompute them all:
    every output equals plain full recomputation."""
    full = _run(recompute="full")
    for k in (0, 20, 25):
        got = _run(recompute="full", recompute_layers=k)
        for key in ("step_time", "time_recompute", "mem_activations", "flops_hardware"):
            assert got[key] == pytest.approx(full[key], rel=1e-12), (k, key)


@settings(max_examples=8, deadline=None)
@given(k=st.integers(min_value=1, max_value=19))
def test_recompute_time_and_flops_scale_with_the_share(k: int) -> None:
    """Recomputing k of a stage's 20 layers costs k/20 of full recomputation's time and
    FLOPs (hand value: the share k/(L/pp) = k/20)."""
    full, none = _run(recompute="full"), _run(recompute="none")
    got = _run(recompute="full", recompute_layers=k)
    assert got["time_recompute"] == pytest.approx(full["time_recompute"] * k / 20, rel=1e-9)
    extra = full["flops_hardware"] - none["flops_hardware"]
    assert got["flops_hardware"] - none["flops_hardware"] == pytest.approx(extra * k / 20,
                                                                           rel=1e-9)
    assert none["step_time"] < got["step_time"] < full["step_time"]


def test_activation_memory_is_affine_in_the_share():
    """The stored activations interpolate between keeping every layer's activations and
    keeping only the inputs, linearly in the share: 5, 10 and 15 of 20 layers are evenly
    spaced, the rest of the memory unchanged; more recomputation, less memory."""
    m = [_run(recompute="full", recompute_layers=k)["mem_activations"] for k in (5, 10, 15)]
    assert m[0] - m[1] == pytest.approx(m[1] - m[2], rel=1e-9)
    assert m[0] > m[1] > m[2] > _run(recompute="full")["mem_activations"]
    assert m[0] < _run(recompute="none")["mem_activations"]


def test_the_count_is_per_virtual_chunk():
    """With VPP 2 a chunk holds 10 layers: 5 recomputed layers per chunk are half of them,
    as 10 per stage are without interleaving."""
    half_v2 = _run(recompute="full", recompute_layers=5, vpp=2)
    full_v2 = _run(recompute="full", vpp=2)
    assert half_v2["time_recompute"] == pytest.approx(full_v2["time_recompute"] / 2, rel=1e-9)


def test_bottleneck_operators_still_sum_to_the_step():
    """The per-operator view charges the recomputed share's forward too: its operators sum to
    the step, and each compute operator lies between no and full recomputation."""
    part = bottleneck(MODEL, HW, recompute="full", recompute_layers=7, **LLAMA)
    assert sum(r.time for r in part.operators) == pytest.approx(part.step_time, rel=1e-9)
    full = {r.name: r.time for r in bottleneck(MODEL, HW, recompute="full", **LLAMA).operators}
    none = {r.name: r.time for r in bottleneck(MODEL, HW, recompute="none", **LLAMA).operators}
    for r in part.operators:
        if r.name in ("qkv_proj", "mlp_up"):
            assert none[r.name] < r.time < full[r.name], r.name


def test_sweep_over_the_field_equals_predict_training():
    """The lowered model reads the field like the symbolic one."""
    df = sweep(MODEL, HW, vary={"recompute_layers": [0, 3, 12]}, recompute="full", **LLAMA)
    for k in (0, 3, 12):
        got = df.loc[df["recompute_layers"] == k, "step_time"].iloc[0]
        want = predict_training(MODEL, HW, recompute="full", recompute_layers=k,
                                **LLAMA).step_time
        assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.parametrize("mode", ["none", "selective"])
def test_needs_full_recomputation(mode: str) -> None:
    """A count without full recomputation is refused with the field, the rule and
    Megatron-Core's flags in one line."""
    with pytest.raises(ConfigError, match=r"^recompute_layers: 5 needs recompute = full .*"
                                          r"--recompute-num-layers\)$"):
        _run(recompute=mode, recompute_layers=5)
