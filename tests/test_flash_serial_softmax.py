"""FlashAttention-2's softmax between its matmuls (``attention_backend = fa2``, and every
FlashAttention kernel of a GPU without asynchronous warpgroup MMA, ``async_mma`` 0).

A FlashAttention-2 warp computes a tile's scores, its softmax and the next matmul in sequence,
so the softmax's exponentials (special function units) and its FP32 FLOP (CUDA cores) add to
the matmul time; FlashAttention-3 and cuDNN on Hopper and Blackwell overlap them with another
warpgroup's matmuls and take the longest of the three (:func:`symcost.ops.attention.
flash_work`, :func:`symcost.training.flash_serial`). Checked against hand-computed kernel times
on A100, end to end against the step-time difference with unbounded softmax rates, and the
sensitivity's autodiff gradient in the FP32 peak against a finite difference.
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from hwspecs import load_hardware
from symcost import symbols as S
from symcost import training as T
from symcost.api import predict_training, training_inputs
from symcost.config import TrainingConfig, hardware_bindings
from symcost.ops import attention as att
from symcost.ops.cost import Cost

#: efficiencies of the hand computations; the matmul ceiling at 1 (the kernels' own arithmetic;
#: the ceiling's division is checked in tests/test_matmul_ceiling.py)
EFF = {"eff_attn": 0.5, "eff_hbm": 0.8, "matmul_ceiling": 1.0}
A100 = "a100-sxm4-80gb"


def _time(cost: Cost, hw: str) -> float:
    """The cost's time (s) on ``hw`` at :data:`EFF`, 16-bit activations."""
    vals = {**hardware_bindings(load_hardware(hw)), **EFF, "BYTES_ACT": 2.0}
    return float(cost.time.xreplace({s: sp.Float(vals[s.name])
                                     for s in cost.time.free_symbols}))


def test_a100_forward_adds_the_softmax_to_the_matmuls() -> None:
    """A100: 312 TFLOP/s of BF16 matmul, 2.436 T exponentials/s, 19.5 TFLOP/s of FP32. Per
    score element a forward does 4*d FLOP of matmul, one exponential (128.08 FLOP of matmul
    time) and 4 FP32 FLOP (64 FLOP of matmul time): at d = 128 FlashAttention-2 takes
    (512 + 128.08 + 64) / 512 = 1.375x the matmul time, at d = 64 1.75x; the overlapping
    kernels take the matmul time (the largest of the three)."""
    b, s, a, k = 2, 4096, 16, 8
    cf = 0.5 + 64 / s
    peak, exp_rate, fp32 = 312e12, 2.436e12, 19.5e12
    for d in (64, 128):
        mma = 4 * b * s**2 * a * d * cf / (0.5 * peak)
        soft = b * s**2 * a * cf * (1 / exp_rate + 4 / fp32) / 0.5
        serial = _time(att.attention_flash(b, s, a, k, d, S.peak_flops_16, sp.Integer(1)), A100)
        overlapped = _time(att.attention_flash(b, s, a, k, d, S.peak_flops_16), A100)
        assert serial == pytest.approx(mma + soft, rel=1e-12), d
        assert overlapped == pytest.approx(mma, rel=1e-12), d
        # the README's figures: 1.75x at d = 64, 1.38x at d = 128
        assert serial / overlapped == pytest.approx({64: 1.7503, 128: 1.3751}[d], abs=1e-4), d


def test_a100_backward_adds_the_recomputed_softmax() -> None:
    """The backward's 10*d FLOP of matmul per element, plus the recomputed exponential and
    its 4 FP32 FLOP: at d = 128, (1280 + 192.08) / 1280 = 1.15x."""
    b, s, a, k, d = 1, 2048, 8, 8, 128
    cf = 0.5 + 64 / s
    t = _time(att.attention_flash_backward(b, s, a, k, d, S.peak_flops_16, sp.Integer(1)), A100)
    mma = 10 * b * s**2 * a * d * cf / (0.5 * 312e12)
    soft = b * s**2 * a * cf * (1 / 2.436e12 + 4 / 19.5e12) / 0.5
    assert t == pytest.approx(mma + soft, rel=1e-12)
    assert t / mma == pytest.approx(1.15, abs=1e-3)


def test_overlapped_kernels_are_bound_by_the_fp32_units_only_when_they_are_slowest() -> None:
    """With an FP32 peak 1/64 of the tensor peak, 4 FP32 FLOP per element take 256 FLOP of
    matmul time: more than a d = 32 forward's 128, so such a kernel is FP32-bound."""
    hw = load_hardware(A100)
    slow = dataclasses.replace(hw, peak_flops={**hw.peak_flops, "fp32": 312e12 / 64},
                               peak_exp=1e30)
    vals = {**hardware_bindings(slow), **EFF, "BYTES_ACT": 2.0}
    b, s, a, k = 1, 4096, 8, 8
    cf = 0.5 + 64 / s
    for d, bound in ((32, 256), (128, 512)):
        c = att.attention_flash(b, s, a, k, d, S.peak_flops_16)
        t = float(c.time.xreplace({x: sp.Float(vals[x.name]) for x in c.time.free_symbols}))
        assert t == pytest.approx(bound * b * s**2 * a * cf / (0.5 * 312e12), rel=1e-12), d


CFG = dict(num_gpus=1, micro_batch=8, global_batch=8, seq_len=2048)


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(sp.sympify(expr).xreplace({S.lookup(k): v for k, v in values.items()}))


def test_without_async_mma_the_native_kernels_are_serial_too() -> None:
    """MPT-125m (12 layers, 12 heads of 64) on one A100, 8 sequences of 2,048 tokens. A100 has
    no asynchronous warpgroup MMA, so its native kernels are FlashAttention-2's and the two
    backends give the same step (``fa2_ratio`` is 1 on Ampere). Where the GPU could overlap
    (``async_mma`` 1), the native kernel's forward and backward attention each lose the
    softmax: ``(1/2.436e12 + 4/19.5e12) s`` per executed score element at ``eff_attn`` of the
    measured ceiling (271.2 of 312 TFLOP/s)."""
    fa2 = predict_training("mpt-125m", A100, attention_backend="fa2", **CFG)
    native = predict_training("mpt-125m", A100, **CFG)
    assert native.inputs["async_mma"] == 0.0 and fa2.inputs["fa2_ratio"] == 1.0
    assert fa2.step_time == pytest.approx(native.step_time, rel=1e-12)
    elements = 8 * 2048**2 * 12 * (0.5 + 64 / 2048)
    softmax = elements * (1 / 2.436e12 + 4 / 19.5e12) / (native.inputs["eff_attn"]
                                                         * native.inputs["matmul_ceiling"])
    fwd = T.attention_core_forward()
    bwd = T.layer_backward_compute()["attention"]
    for cost in (fwd, bwd):
        serial = _bind(cost.time, native.inputs)
        overlapped = _bind(cost.time, {**native.inputs, "async_mma": 1.0})
        assert serial - overlapped == pytest.approx(softmax, rel=1e-9)
    hw = load_hardware(A100)
    unbounded = dataclasses.replace(hw, peak_exp=1e30,
                                    peak_flops={**hw.peak_flops, "fp32": 1e30})
    free = predict_training("mpt-125m", unbounded, **CFG).step_time
    assert native.step_time - free == pytest.approx(12 * 2 * softmax, rel=1e-6)


@pytest.mark.parametrize("hw_id, flag", [("a100-sxm4-80gb", 0.0), ("rtx-4090", 0.0),
                                         ("mi300x", 0.0), ("h100-sxm5-80gb", 1.0),
                                         ("b200", 1.0), ("gb300", 1.0)])
def test_async_mma_by_generation(hw_id: str, flag: float) -> None:
    assert hardware_bindings(load_hardware(hw_id))["async_mma"] == flag


def test_hopper_native_kernels_overlap_fa2_does_not() -> None:
    """On H100 the native kernel's forward at head dimension 64 (256 FLOP of matmul per
    element) hides its exponential (256 FLOP at H100's ratio) and FP32 FLOP; fa2 pays them."""
    kw = dict(CFG, num_gpus=8, global_batch=64)
    native = predict_training("mpt-125m", "h100-sxm5-80gb", **kw)
    fa2 = predict_training("mpt-125m", "h100-sxm5-80gb", attention_backend="fa2", **kw)
    assert native.inputs["async_mma"] == 1.0
    assert fa2.step_time > native.step_time * 1.01


def test_a_file_without_an_fp32_peak_binds_it_to_the_16_bit_peak() -> None:
    gb200 = load_hardware("gb200")
    assert "fp32" not in gb200.peak_flops
    assert hardware_bindings(gb200)["peak_flops_fp32"] == gb200.peak("bf16")
    assert hardware_bindings(load_hardware(A100))["peak_flops_fp32"] == 19.5e12


def test_gradient_in_the_fp32_peak_matches_finite_differences(step_time_elasticity) -> None:
    inputs = training_inputs("mpt-125m", A100, TrainingConfig(attention_backend="fa2", **CFG))
    e0, fd = step_time_elasticity(inputs, "peak_flops_fp32")
    assert e0 == pytest.approx(fd, rel=1e-3)
    assert e0 < -1e-3
    native = training_inputs("mpt-125m", "h100-sxm5-80gb", TrainingConfig(**CFG))
    assert step_time_elasticity(native, "peak_flops_fp32")[0] == pytest.approx(0.0, abs=1e-12)
