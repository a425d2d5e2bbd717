"""Properties of the lowered training model: compiled == SymPy, exact ceil-division, no NaN/inf
at edge configurations.

The SymPy value (``CompiledModel.evaluate_sympy``, 30-digit arithmetic) is a second,
independent implementation of every output: the compiled float32 and float64 functions must
agree with it over random valid configurations.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from symcost import symbols as S
from symcost.api import training_inputs, training_model
from symcost.config import ConfigError, TrainingConfig, resolve
from symcost.functions import CeilDiv, free_symbols_shared, xreplace_shared
from symcost.lower import lower
from symcost.models import get_model

MODELS = ("gpt3-175b", "gpt-1.7b", "llama-2-70b", "llama-3-8b", "mpt-7b")
HARDWARE = ("a100-sxm4-80gb", "h100-sxm5-80gb", "b200", "mi300x")


@st.composite
def valid_configs(draw):
    """(model id, hardware id, resolved TrainingConfig): a random valid configuration."""
    model = draw(st.sampled_from(MODELS))
    hw = draw(st.sampled_from(HARDWARE))
    tp = draw(st.sampled_from((1, 2, 4, 8)))
    pp = draw(st.sampled_from((1, 2, 4)))
    dp = draw(st.sampled_from((1, 2, 3, 8, 64)))
    mb = draw(st.sampled_from((1, 2, 4)))
    k = draw(st.integers(1, 16))
    vpp = draw(st.sampled_from((1, 1, 2)))
    cfg = TrainingConfig(
        tp=tp, pp=pp, dp=dp, micro_batch=mb, global_batch=mb * dp * k, vpp=vpp,
        sp=draw(st.booleans()), recompute=draw(st.sampled_from(("none", "selective", "full"))),
        zero=draw(st.sampled_from((0, 1) if pp > 1 else (0, 1, 2, 3))),
        flash_attention=draw(st.booleans()), dp_overlap=draw(st.booleans()),
        dtype=draw(st.sampled_from(("bf16", "fp8"))))
    from hwspecs import load_hardware

    try:
        cfg = resolve(get_model(model), load_hardware(hw), cfg)
    except ConfigError:
        assume(False)
    return model, hw, cfg


def _scale(name: str, ref: dict) -> float:
    """Magnitude a term is compared against: time terms against the step time, memory terms
    against the total (a zero or cancelling term has no relative error of its own)."""
    if name.startswith("time_"):
        return abs(ref["step_time"])
    if name.startswith("mem_"):
        return max(abs(ref["mem_total"]), abs(ref["mem_usable"]))
    return abs(ref[name])


# 25 examples: each evaluates every output in SymPy (about 0.1 s with the shared-subexpression
# evaluation of CompiledModel.evaluate_sympy; the regression snapshot replays 1,000 stored
# configurations through the compiled model as well)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.filter_too_much,
                                                                 HealthCheck.too_slow])
@given(valid_configs())
def test_compiled_float32_and_float64_agree_with_sympy(case):
    model, hw, cfg = case
    values = training_inputs(model, hw, cfg)
    cm64, cm32 = training_model("float64"), training_model("float32")
    args = {n: values[n] for n in cm64.input_names}
    ref = cm64.evaluate_sympy({S.lookup(n): v for n, v in args.items()})
    got64, got32 = cm64(**args), cm32(**args)
    for name, r in ref.items():
        scale = _scale(name, ref)
        assert abs(float(got64[name]) - r) <= 1e-10 * scale, (name, float(got64[name]), r)
        assert abs(float(got32[name]) - r) <= 1e-4 * scale, (name, float(got32[name]), r)


@pytest.mark.parametrize("fields", [dict(tp=2, pp=2, dp=2, global_batch=16, zero=1),
                                    dict(tp=1, pp=1, dp=4, global_batch=8, zero=3,
                                         recompute="full")])
def test_shared_replacement_equals_xreplace(fields):
    """``xreplace_shared`` (the reference evaluation above) gives exactly SymPy's
    ``xreplace`` on the mid-sized outputs (the largest take seconds with plain ``xreplace``),
    with one memo carried across them."""
    values = training_inputs("llama2-7b", "a100-sxm4-80gb", TrainingConfig(**fields))
    cm = training_model("float64")
    repl = {s: sp.Float(values[s.name], 30) for s in cm.inputs}
    memo: dict = {}
    names = ["time_tp_comm", "time_ep_comm", "time_optimizer", "mem_total", "mem_headroom",
             "flops_hardware", "time_layer_backward"]
    for name in names:
        e = cm.expressions[name]
        assert xreplace_shared(e, repl, memo) == e.xreplace(repl), name
    assert len(memo) > 1000  # the subexpressions were shared, not re-walked


def test_shared_free_symbols_equal_sympys():
    """``free_symbols_shared`` (the lowering's and the input list's walk) gives exactly SymPy's
    ``free_symbols`` on the mid-sized training outputs and on nodes that bind a symbol
    (the bound one is not free)."""
    exprs = training_model("float64").expressions
    names = ["time_tp_comm", "time_ep_comm", "time_optimizer", "mem_total", "flops_hardware"]
    for name in names:
        assert free_symbols_shared([exprs[name]]) == exprs[name].free_symbols, name
    assert free_symbols_shared(exprs[n] for n in names) == set().union(
        *(exprs[n].free_symbols for n in names))
    x, y, i = sp.symbols("x y i")
    bound = [sp.Lambda(x, x * y), sp.Sum(x**i, (i, 0, S.n_layers)), sp.Integer(3)]
    assert free_symbols_shared(bound) == {y, x, S.n_layers}
    assert free_symbols_shared([bound[0]]) == {y}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_ceil_division_exact_on_integer_grid(dtype):
    cm = lower({"c": CeilDiv(S.n_layers, S.pp), "q": S.n_layers / S.pp},
               (S.n_layers, S.pp), dtype)
    L, p = np.meshgrid(np.arange(1, 257), np.arange(1, 65), indexing="ij")
    out = cm(n_layers=L.astype(float), pp=p.astype(float))
    expected = np.array([[-(-li // pi) for pi in range(1, 65)] for li in range(1, 257)])
    assert out["c"].dtype == np.dtype(dtype)
    np.testing.assert_array_equal(out["c"], expected)
    # the trap it avoids: ceil(L * (1/p)) is wrong for some pairs in float32/float64
    recip = np.ceil(L.astype(dtype) * (np.asarray(1, dtype) / p.astype(dtype)))
    assert (recip != expected).any() or dtype == "float64"


EDGE_CONFIGS = [
    dict(tp=1, pp=1, dp=1, global_batch=1),
    *[dict(tp=1, pp=1, dp=1, global_batch=4, micro_batch=4, recompute=r)
      for r in ("none", "selective", "full")],
    *[dict(tp=2, pp=1, dp=4, global_batch=8, zero=z, dp_overlap=o)
      for z, o in itertools.product((0, 1, 2, 3), (True, False))],
    dict(tp=8, pp=4, dp=2, vpp=2, global_batch=16, recompute="selective"),
    dict(tp=8, pp=2, dp=1, vpp=3, global_batch=12, micro_batch=1, sp=True),
    dict(tp=8, pp=1, dp=1, global_batch=1, flash_attention=False, recompute="selective"),
    dict(tp=1, pp=24, dp=1, global_batch=24),
]


@pytest.mark.parametrize("fields", EDGE_CONFIGS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_no_nan_or_inf_at_edge_configurations(fields, dtype):
    values = training_inputs("gpt-1.7b", "h100-sxm5-80gb", TrainingConfig(**fields))
    cm = training_model(dtype)
    out = cm(**{n: values[n] for n in cm.input_names})
    bad = {k: float(v) for k, v in out.items() if not np.all(np.isfinite(v))}
    assert not bad
    assert out["step_time"] > 0 and out["mem_total"] > 0
    assert math.isclose(float(out["mfu"]) * float(out["step_time"]),
                        float(out["flops_model"]) / (float(out["num_gpus"])
                                                     * values["peak_flops_16"]), rel_tol=1e-5)
