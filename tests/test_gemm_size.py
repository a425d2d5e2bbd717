"""GEMM efficiency by size (issue 11, item 5): a layer's dense GEMMs run at
``eff_gemm * M/(M + gemm_m_half)`` for the ``M = b*s/cp`` tokens of a micro-batch.

Expected values are computed by hand in each test.
"""

from __future__ import annotations

import pytest
import sympy as sp

from symcost import predict_training
from symcost import symbols as S
from symcost import training as T
from symcost.ops.gemm import size_efficiency
from symcost.params import FALLBACK, params_from_dict


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(sp.sympify(expr).xreplace({S.lookup(k): v for k, v in values.items()}))


def test_size_efficiency_by_hand():
    """0.7 * 350/(350 + 128) = 0.512552...; at M = M_half exactly half; M_half = 0 gives eff."""
    assert _bind(size_efficiency(sp.Float(0.7), sp.Integer(350), sp.Integer(128)), {}) == \
        pytest.approx(0.7 * 350 / 478)
    assert _bind(size_efficiency(sp.Float(0.7), sp.Integer(128), sp.Integer(128)), {}) == \
        pytest.approx(0.35)
    assert _bind(size_efficiency(sp.Float(0.7), sp.Integer(5), sp.Integer(0)), {}) == 0.7


def test_dense_gemm_efficiency_uses_the_micro_batch_tokens():
    """M = b*s/cp: micro-batch 2 of 350 tokens, cp 1 -> 700/(700 + 128) of eff_gemm 0.6;
    cp 2 halves M: 350/478."""
    v = {"micro_batch": 2, "seq_len": 350, "cp": 1, "eff_gemm": 0.6, "gemm_m_half": 128}
    assert _bind(T.dense_gemm_efficiency(), v) == pytest.approx(0.6 * 700 / 828)
    assert _bind(T.dense_gemm_efficiency(), {**v, "cp": 2}) == pytest.approx(0.6 * 350 / 478)


def test_output_projection_time_by_hand():
    """Llama-2-7B on one A100 at 350 tokens (micro-batch 1): the output projection is a
    350 x 4096 x 4096 GEMM, 2*350*4096^2 = 11,744,051,200 FLOP; bytes 2*(350*4096*2 +
    4096^2) = 39,288,832, i.e. 299 FLOP/byte, far above the A100's ridge (312 TFLOP/s over
    2,039 GB/s, about 150 FLOP/byte), so compute-bound at 312 TFLOP/s * matmul_ceiling * eff_gemm *
    350/(350 + gemm_m_half)."""
    r = predict_training("llama2-7b", "a100-sxm4-80gb", num_gpus=1, micro_batch=1,
                         global_batch=1, seq_len=350, flash_attention=True)
    v = r.inputs
    assert v["gemm_m_half"] > 0
    eff = v["eff_gemm"] * 350 / (350 + v["gemm_m_half"])
    fwd = T.layer_forward_compute()["out_proj"].time
    assert _bind(fwd, v) == pytest.approx(2 * 350 * 4096**2 / (v["peak_flops_16"]
                                                            * v["matmul_ceiling"] * eff),
                                          rel=1e-12)


def test_short_micro_batches_slow_the_layer_gemms_only():
    """Setting gemm_m_half to 0 (no size penalty) speeds up the layer GEMMs of a 350-token
    micro-batch by (350 + M_half)/350 and leaves the attention kernel unchanged."""
    kw = dict(num_gpus=1, micro_batch=1, global_batch=1, seq_len=350, flash_attention=True)
    r = predict_training("llama2-7b", "a100-sxm4-80gb", **kw)
    v = dict(r.inputs)
    half = v["gemm_m_half"]
    fwd = T.layer_forward_compute()
    for name in ("qkv_proj", "mlp_up", "mlp_down"):
        slow = _bind(fwd[name].time, v)
        fast = _bind(fwd[name].time, {**v, "gemm_m_half": 0})
        assert slow / fast == pytest.approx((350 + half) / 350, rel=1e-9), name
    assert _bind(fwd["attention"].time, v) == _bind(fwd["attention"].time,
                                                     {**v, "gemm_m_half": 0})


def test_parameter_file_without_gemm_m_half_loads_with_zero(old_generation_values):
    """A parameter file from before gemm_m_half existed loads with 0 (no size effect: the
    model as it was)."""
    assert FALLBACK["gemm_m_half"] == 0.0
    vals = old_generation_values
    p = params_from_dict({"generations": {"hopper": vals}})
    assert p.generations["hopper"]["gemm_m_half"] == 0.0
