"""Tensor-parallel communication overlap (``tp_overlap``): hand-computed exposure, limits, rule.

The expected values are recomputed here from the ring all-reduce of Thakur et al. 2005 and the
overlap rule of :func:`symcost.training.tp_comm_layer_exposed` (each all-gather/reduce-scatter
hidden behind the GEMM it feeds or drains, except one of ``t`` chunks), written out in plain
Python.
"""

from __future__ import annotations

import pytest
import sympy as sp

from symcost import ConfigError, predict_training
from symcost import symbols as S
from symcost import training as T

H100 = "h100-sxm5-80gb"


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(sp.sympify(expr).xreplace({S.lookup(k): v for k, v in values.items()}))


def _run(**kw):
    base = dict(num_gpus=8, tp=8, sp=True, micro_batch=1, global_batch=4, seq_len=4096)
    return predict_training("llama-3-70b", H100, **{**base, **kw})


@pytest.mark.parametrize("recompute", ["none", "full"])
def test_exposed_tp_comm_by_hand(recompute):
    """Llama-3-70B, TP8 + SP inside one H100 node, 4 micro-batches of 4096 tokens, 80 layers.

    One collective (all-gather or reduce-scatter of the 4096 x 8192 bf16 activations) is half
    a ring all-reduce: C = 7/8 * 4096*8192*2 B / (intra_bw*eff_intra) + 7*intra_lat.
    Without overlap: 4 collectives in the forward and (full recomputation) the recomputed
    forward; in the backward (Transformer Engine without userbuffers) the output projection's
    and MLP down's output-gradient all-gathers, C each, and the QKV and MLP-up input-gradient
    reduce-scatters behind their weight-gradient GEMMs, max(C - G, 0) each; without sequence
    parallelism (all-reduces, the same volume) all 4 in the backward too. With overlap:
    max(C - G*7/8, 0) per collective and GEMM G (QKV, output, MLP up, MLP down) in each forward
    pass, max(C - 2*G*7/8, 0) in the backward.
    """
    off, on = _run(recompute=recompute), _run(recompute=recompute, tp_overlap=True)
    no_sp = _run(recompute=recompute, sp=False)
    v = on.inputs
    nbytes = 4096 * 8192 * 2
    c = 7 / 8 * nbytes / (v["intra_bw"] * v["eff_intra"]) + 7 * v["intra_lat"]
    passes = 3 if recompute == "full" else 2
    layers, micro = 80, 4
    fwd = T.layer_forward_compute()
    gemms = [_bind(fwd[k].time, v) for k in ("qkv_proj", "out_proj", "mlp_up", "mlp_down")]
    backward_async = 2 * c + max(c - gemms[0], 0.0) + max(c - gemms[2], 0.0)
    assert 2 * c < backward_async < 4 * c  # the reduce-scatters are partly hidden
    assert off.values["time_tp_comm"] == pytest.approx(
        micro * layers * (4 * c * (passes - 1) + backward_async), rel=1e-9)
    assert no_sp.values["time_tp_comm"] == pytest.approx(micro * layers * 4 * c * passes,
                                                         rel=1e-9)
    exposed_f = sum(max(c - g * 7 / 8, 0.0) for g in gemms)
    exposed_b = sum(max(c - 2 * g * 7 / 8, 0.0) for g in gemms)
    want = micro * layers * (exposed_f * (passes - 1) + exposed_b)
    assert on.values["time_tp_comm"] == pytest.approx(want, rel=1e-9)
    assert on.values["time_tp_comm"] < off.values["time_tp_comm"]
    # everything else is unchanged
    for k in ("time_forward", "time_backward", "time_recompute", "mem_total"):
        assert on.values[k] == pytest.approx(off.values[k], rel=1e-12)


def test_overlap_limits():
    """GEMMs 1000x slower hide every collective; GEMMs 1000x faster hide none (the exposed
    time tends to the non-overlapped 4 collectives per pass). Without userbuffers the
    backward's reduce-scatters hide behind slow weight-gradient GEMMs (half the backward's
    collectives exposed) and not behind fast ones (all of them)."""
    expr = T.tp_comm_layer_exposed(sp.Integer(2))
    v = _run(tp_overlap=True).inputs
    whole = _bind(T.tp_comm_layer_forward().time, v) * 2
    slow = {**v, "peak_flops_16": v["peak_flops_16"] / 1e3, "hbm_bw": v["hbm_bw"] / 1e3}
    fast = {**v, "peak_flops_16": v["peak_flops_16"] * 1e3, "hbm_bw": v["hbm_bw"] * 1e3}
    assert _bind(expr, slow) == 0.0
    assert _bind(expr, fast) == pytest.approx(whole, rel=1e-2)
    assert _bind(expr, {**slow, "tp_overlap": 0}) == pytest.approx(whole * 3 / 4, rel=1e-12)
    assert _bind(expr, {**fast, "tp_overlap": 0}) == pytest.approx(whole, rel=1e-2)
    assert _bind(expr, {**v, "tp_overlap": 0, "sp_on": 0}) == pytest.approx(whole, rel=1e-12)


def test_tp_overlap_needs_sequence_parallelism():
    with pytest.raises(ConfigError, match=r"^tp_overlap: needs sp when tp > 1"):
        _run(sp=False, tp_overlap=True)
    # with tp = 1 there is nothing to overlap and no rule to break
    r = predict_training("llama-3-8b", H100, num_gpus=8, tp=1, tp_overlap=True,
                         global_batch=8)
    assert r.values["time_tp_comm"] == 0.0
    # across nodes the userbuffers exchange is not available
    with pytest.raises(ConfigError, match=r"^tp_overlap: needs the tensor-parallel group inside "
                                          r"one NVLink domain \(tp = 16 > 8 GPUs per node\)"):
        predict_training("llama-3-70b", H100, num_gpus=16, tp=16, sp=True, tp_overlap=True,
                         global_batch=4)
