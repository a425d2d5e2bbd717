"""The slowest pipeline stage when the layers do not divide evenly: the embedding and the loss
count as one layer each in the split (Megatron-Core ``account_for_embedding_in_pipeline_split``
and ``account_for_loss_in_pipeline_split``), so the last stage, which runs the output head,
holds one layer fewer (``training.last_stage_layers``, ``training.bottleneck_stage``)."""

from __future__ import annotations

import math

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import predict_training
from symcost import symbols as S
from symcost.api import training_inputs
from symcost.bottleneck import bottleneck
from symcost.breakdown import evaluate_terms, training_module_terms
from symcost.config import TrainingConfig
from symcost.training import (bottleneck_stage, critical_stage, last_stage_layers,
                              layers_per_stage)

H100 = "h100-sxm5-80gb"


def ev(expr: sp.Expr, layers: int, pp: int) -> float:
    return float(expr.xreplace({S.n_layers: layers, S.pp: pp}))


@pytest.mark.parametrize("layers, pp, last", [
    (126, 16, 7),    # Llama-3.1-405B: 128 units, 8 per stage, the last 7 layers + loss
    (126, 8, 15),
    (94, 4, 23),     # Qwen3-235B-A22B: 96 units
    (80, 4, 20),     # even split: every stage L/p
    (80, 8, 10),
    (61, 8, 7),      # DeepSeek-V3: ceil(63/8) - 1
    (32, 1, 32),     # no pipeline: the one stage holds every layer
])
def test_last_stage_layers_by_hand(layers, pp, last):
    assert ev(last_stage_layers(), layers, pp) == last


@pytest.mark.parametrize("layers, pp, head, expect", [
    (126, 16, 0.6, (8, 0)),   # a head lighter than a layer: the 8-layer stages set the pace
    (126, 16, 1.5, (7, 1)),   # heavier: the last stage, 7 + 1.5 > 8
    (80, 4, 0.6, (20, 1)),    # even split: every stage 20 layers, the last one + head
    (32, 1, 0.6, (32, 1)),
])
def test_bottleneck_stage_by_hand(layers, pp, head, expect):
    n, h = bottleneck_stage(sp.Integer(1), sp.Float(head))
    assert (ev(n, layers, pp), ev(h, layers, pp)) == expect


@settings(max_examples=200, deadline=None)
@given(pp=st.integers(1, 64), units=st.integers(1, 12), accounted=st.booleans(),
       t_layer=st.floats(0.01, 10), t_head=st.floats(0, 30))
def test_bottleneck_is_the_slower_of_the_two_stages(pp, units, accounted, t_layer, t_head):
    """Second implementation, Megatron-Core's two splits: ``L = p*u`` layers, ``u`` on every
    stage (the head on the last), or ``L = p*u - 2`` (not a multiple of ``p``), ``u`` units
    per stage with the embedding and the loss counting as one each, so ``u - 1`` layers and
    the head on the last stage (Megatron-Core asserts that ``p`` divides ``L + 2``). The
    returned pair reproduces the slowest stage's time."""
    layers = pp * units - 2 if accounted and pp > 2 and units > 1 else pp * units
    if pp == 1:
        full = last = layers
    elif layers % pp == 0:
        full = last = units
    else:
        full, last = math.ceil(layers / pp), units - 1
    slowest = max(full * t_layer, last * t_layer + t_head)
    n, h = bottleneck_stage(sp.Float(t_layer), sp.Float(t_head))
    got_n, got_h = ev(n, layers, pp), ev(h, layers, pp)
    assert (ev(layers_per_stage(), layers, pp), ev(last_stage_layers(), layers, pp)) == (
        full, last)
    assert (got_n, got_h) in ((full, 0.0), (last, 1.0))
    assert got_n * t_layer + got_h * t_head == pytest.approx(slowest, rel=1e-12)


def test_405b_on_16_stages_runs_eight_layers_without_the_head():
    """Llama-3.1-405B (126 layers) at TP8: on 16 stages every micro-batch's forward and
    backward take exactly 8 layers' time (the head's stage has 7 layers); on 14 stages (9
    layers each, an even split) the last stage's 9 layers and the output head."""
    m = 64 / 2

    def ratio(pp):
        r = predict_training("llama3.1-405b", H100, num_gpus=16 * pp, tp=8, pp=pp,
                             global_batch=64, micro_batch=1, seq_len=8192, sp=True)
        v = r.values
        return (v["time_forward"] / (m * v["time_layer_forward"]),
                v["time_backward"] / (m * v["time_layer_backward"]))

    assert ratio(16) == pytest.approx((8.0, 8.0), rel=1e-12)
    assert ratio(8) == pytest.approx((16.0, 16.0), rel=1e-12)
    fwd, bwd = ratio(14)
    assert 9.3 < fwd < 10 and 9.3 < bwd < 10   # 9 layers + a head of 0.3-1 layer


@pytest.mark.parametrize("model, pp, heads", [
    ("llama3.1-405b", 16, 0),   # 8-layer stages set the pace, the head's stage has 7 layers
    ("llama-3-8b", 5, 1),       # 7-layer stages, but the last (6 layers + a 128K-word head)
])
def test_breakdowns_scale_by_the_critical_stage(model, pp, heads):
    """The operator attribution (``bottleneck``) and the module breakdown
    (``training_module_terms``) take the critical stage's layers and head
    (``training.critical_stage``), so both still sum to the step time with an uneven split."""
    cfg = TrainingConfig(num_gpus=8 * pp, tp=8, pp=pp, global_batch=32, micro_batch=1,
                         seq_len=4096, sp=True)
    v = training_inputs(model, H100, cfg)
    bind = {S.lookup(k): val for k, val in v.items()}
    assert float(critical_stage()[1].xreplace(bind)) == heads
    step = predict_training(model, H100, cfg).step_time
    b = bottleneck(model, H100, cfg)
    assert sum(o.time for o in b.operators) == pytest.approx(step, rel=1e-12)
    out = evaluate_terms(training_module_terms(), v)
    rope = out["forward"]["rope"] + out["backward"]["rope"]
    total = sum(sum(m.values()) for m in out.values())
    assert total - rope == pytest.approx(step, rel=1e-9)
    assert all(x >= 0 for m in out.values() for x in m.values())
