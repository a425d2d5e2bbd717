"""The softmax's exponentials as a bound of FlashAttention kernels (special function units).

FlashAttention's matmuls run on the tensor cores and its softmax exponentials on the special
function units (``MUFU.EX2``); the kernel takes the longer of the two
(:func:`symcost.ops.attention.exp_equivalent_flops`). Checked here against hand-computed
times, against the architecture ratios each hardware file's rate implies, and the
sensitivity's autodiff gradient against a finite difference.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sympy as sp

from hwspecs import HardwareSpecError, list_hardware, load_hardware
from hwspecs.technology import derive_accelerator
from optimizers.dissect import hybrid
from symcost import symbols as S
from symcost.api import predict_training, training_inputs
from symcost.config import TrainingConfig, hardware_bindings
from symcost.ops import attention as att
from symcost.ops.cost import Cost
from symcost.sensitivity import elasticities

#: efficiencies of the hand computations; the matmul ceiling at 1 (the kernels' own arithmetic;
#: the ceiling's division is checked in tests/test_matmul_ceiling.py)
EFF = {"eff_attn": 0.5, "eff_hbm": 0.8, "matmul_ceiling": 1.0}


def _time(cost: Cost, hw: str) -> float:
    """The cost's time (s) on ``hw`` at :data:`EFF`, 16-bit activations."""
    vals = {**hardware_bindings(load_hardware(hw)), **EFF, "BYTES_ACT": 2.0}
    return float(cost.time.xreplace({s: sp.Float(vals[s.name])
                                     for s in cost.time.free_symbols}))


#: dense BF16 tensor FLOP per exponential, per clock and SM (CUDA C++ Programming Guide:
#: 16 MUFU.EX2 per SM per clock; Blackwell Ultra 32), by generation: A100 2,048 FLOP per SM
#: per clock, H100 4,096, B200 8,192; GeForce Ampere/Ada with FP32 accumulate 512; the
#: professional Ada parts (L40S, RTX 6000 Ada) 1,024; MI300X 2,048 per CU against 16.
RATIO = {"ampere": 128, "hopper": 256, "blackwell": 512, "blackwell_ultra": 256,
         "ampere_ga10x": 32, "cdna3": 128}
ADA = {"rtx-4090": 32, "l40s": 64, "rtx-6000-ada": 64}


@pytest.mark.parametrize("hw_id", list_hardware())
def test_every_file_states_an_exponential_rate_at_its_architecture_ratio(hw_id: str) -> None:
    """Each file's rate (SMs x per-SM rate x clock) against its dense BF16 peak gives the
    architecture's tensor-FLOP-per-exponential ratio: a second derivation of the number."""
    hw = load_hardware(hw_id)
    assert hw.peak_exp is not None and "peak_exp" in hw.sources
    ratio = ADA[hw_id] if hw.generation == "ada" else RATIO[hw.generation]
    assert hw.peak("bf16") / hw.peak_exp == pytest.approx(ratio, rel=0.01)


def test_forward_is_bound_by_exponentials_at_head_dim_64_on_b200() -> None:
    """B200: 512 FLOP of peak per exponential; a d = 64 forward does 4*64 = 256 FLOP of
    matmul per exponential, so it takes twice its matmul time; at d = 128 the two tie (the
    matmul side by 512 against 511.95); H100 (256 per exponential) is never bound."""
    b, s, a, k = 2, 4096, 16, 4
    cf = 0.5 + 64 / s
    for d, hw, bound in ((64, "b200", "exp"), (128, "b200", "mma"), (64, "h100-sxm5-80gb", "mma"),
                         (128, "h100-sxm5-80gb", "mma")):
        spec = load_hardware(hw)
        t = _time(att.attention_flash(b, s, a, k, d, S.peak_flops_16), hw)
        mma = 4 * b * s**2 * a * d * cf / (0.5 * spec.peak("bf16"))
        exp = b * s**2 * a * cf / (0.5 * spec.peak_exp)
        assert t == pytest.approx(exp if bound == "exp" else mma, rel=1e-12), (d, hw)
        assert t == pytest.approx(max(mma, exp), rel=1e-12)
    t64 = _time(att.attention_flash(b, s, a, k, 64, S.peak_flops_16), "b200")
    t64_b300 = _time(att.attention_flash(b, s, a, k, 64, S.peak_flops_16), "b300")
    # same dense peak, twice the exponential rate: back to the matmul time, half of B200's
    assert t64_b300 == pytest.approx(t64 / 2, rel=1e-3)


def test_backward_stays_matmul_bound() -> None:
    """The backward does 2.5x the forward's matmuls (10*d FLOP per recomputed exponential):
    at d = 64 on B200, 640 FLOP against 512, still matmul-bound."""
    b, s, a, k, d = 1, 2048, 8, 8, 64
    spec = load_hardware("b200")
    t = _time(att.attention_flash_backward(b, s, a, k, d, S.peak_flops_16), "b200")
    assert t == pytest.approx(2.5 * 4 * b * s**2 * a * d * (0.5 + 64 / s)
                              / (0.5 * spec.peak("bf16")), rel=1e-12)
    t32 = _time(att.attention_flash_backward(b, s, a, k, 32, S.peak_flops_16), "b200")
    assert t32 == pytest.approx(b * s**2 * a * (0.5 + 64 / s) / (0.5 * spec.peak_exp),
                                rel=1e-12)


GPT_OSS = TrainingConfig(num_gpus=8, ep=8, micro_batch=1, global_batch=8, seq_len=4096)


def test_step_time_moves_with_the_exponential_rate_only_where_it_binds() -> None:
    """gpt-oss-120b (head dim 64) on B200 gets faster with twice the exponential rate, by the
    forward attention's excess; Llama-3-8B (head dim 128) on B200 and gpt-oss on H100 do
    not move."""
    b200 = load_hardware("b200")
    fast = dataclasses.replace(b200, peak_exp=2 * b200.peak_exp)
    slow = predict_training("gpt-oss-120b", b200, GPT_OSS).step_time
    quick = predict_training("gpt-oss-120b", fast, GPT_OSS).step_time
    assert quick < slow * (1 - 1e-4)
    llama = TrainingConfig(num_gpus=8, micro_batch=1, global_batch=8, seq_len=8192)
    assert (predict_training("llama3-8b", fast, llama).step_time
            == pytest.approx(predict_training("llama3-8b", b200, llama).step_time, rel=1e-12))
    h100 = load_hardware("h100-sxm5-80gb")
    h_fast = dataclasses.replace(h100, peak_exp=4 * h100.peak_exp)
    assert (predict_training("gpt-oss-120b", h_fast, GPT_OSS).step_time
            == pytest.approx(predict_training("gpt-oss-120b", h100, GPT_OSS).step_time,
                             rel=1e-12))


def test_gradient_in_the_exponential_rate_matches_finite_differences() -> None:
    inputs = training_inputs("gpt-oss-120b", "b200", GPT_OSS)
    el = elasticities(inputs, wrt=["peak_exp"], outputs=["step_time"])["step_time"]
    t0 = float(el["value"][0])
    h = 1e-4
    up = dict(inputs, peak_exp=inputs["peak_exp"] * (1 + h))
    dn = dict(inputs, peak_exp=inputs["peak_exp"] * (1 - h))
    tu = float(elasticities(up, wrt=["peak_exp"], outputs=["step_time"])["step_time"]["value"][0])
    td = float(elasticities(dn, wrt=["peak_exp"], outputs=["step_time"])["step_time"]["value"][0])
    fd = (tu - td) / (2 * h) / t0
    assert float(el["peak_exp"][0]) == pytest.approx(fd, rel=1e-3)
    assert float(el["peak_exp"][0]) < -1e-4


def test_a_file_without_a_rate_never_binds() -> None:
    """``exp_tera_per_s`` is optional; without it ``peak_exp`` is bound to the 16-bit peak (one
    exponential per FLOP), so attention times are the matmul's."""
    b200 = load_hardware("b200")
    bare = dataclasses.replace(b200, peak_exp=None)
    assert hardware_bindings(bare)["peak_exp"] == b200.peak("bf16")
    t = predict_training("gpt-oss-120b", bare, GPT_OSS).step_time
    infinite = dataclasses.replace(b200, peak_exp=1e30)
    assert t == pytest.approx(predict_training("gpt-oss-120b", infinite, GPT_OSS).step_time,
                              rel=1e-12)


def _yaml_without(path: Path, tmp: Path, value: str | None, cite: bool) -> Path:
    lines = []
    skip = False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("exp_tera_per_s:"):
            if value is not None:
                lines.append(f"exp_tera_per_s: {value}")
            continue
        if line.startswith("  exp_tera_per_s:"):
            skip = True
            if cite:
                lines.append("  exp_tera_per_s: a citation long enough to be one, for the test")
            continue
        if skip and line.startswith("    "):
            continue
        skip = False
        lines.append(line)
    out = tmp / path.name
    out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return out


def test_loader_rules(tmp_path: Path) -> None:
    src = Path(__file__).resolve().parents[1] / "hwspecs" / "data" / "h100-sxm5-80gb.yaml"
    ok = load_hardware(_yaml_without(src, tmp_path, "7.5", cite=True))
    assert ok.peak_exp == 7.5e12
    assert load_hardware(_yaml_without(src, tmp_path, None, cite=False)).peak_exp is None
    with pytest.raises(HardwareSpecError, match="exp_tera_per_s"):
        load_hardware(_yaml_without(src, tmp_path, "-1", cite=True))
    with pytest.raises(HardwareSpecError, match="exp_tera_per_s"):
        load_hardware(_yaml_without(src, tmp_path, "7.5", cite=False))


def test_derived_and_hybrid_hardware_carry_the_rate() -> None:
    """A derived chip scales the rate with its peaks (more SMs or clock); the dissection's
    ``compute`` factor swaps it with the 16-bit peak."""
    d = derive_accelerator("3", "hbm3e", "nvlink5", "ib-ndr", die_area_mm2=814, power_w=700,
                           reference="h100-sxm5-80gb")
    h100 = load_hardware("h100-sxm5-80gb")
    assert d.peak_exp / h100.peak_exp == pytest.approx(d.peak("bf16") / h100.peak("bf16"))
    assert "peak_exp" in d.sources
    b200 = load_hardware("b200")
    spec, _ = hybrid(h100, b200, ["compute"], "bf16", "bf16")
    assert spec.peak_exp == b200.peak_exp and spec.peak("bf16") == b200.peak("bf16")
