"""Full-iteration CUDA graphs (``cuda_graph``): the fixed host-side times ``t_layer_overhead``
and ``t_moe_layer`` are not paid, everything else is unchanged; hand values from the model's
own inputs, the bottleneck operators, a sweep against ``predict_training``, and which
Megatron-Bridge rows ``validate`` predicts with it."""

from __future__ import annotations

import pandas as pd
import pytest

from symcost import predict_training
from symcost.bottleneck import bottleneck
from symcost.sweep import sweep
from symcost.validate import BRIDGE_EP_OVERLAP, BRIDGE_FULL_ITERATION_GRAPH, prepare_rows

#: Qwen3-30B-A3B on 8 GB200 as Megatron-Bridge runs it (EP8, micro-batch 4, 512 sequences)
QWEN = dict(num_gpus=8, ep=8, micro_batch=4, global_batch=512, seq_len=4096, dtype="mxfp8",
            zero=1)


def test_moe_step_loses_exactly_the_host_times():
    """Without pipelining or recomputation every layer pass pays ``t_layer_overhead`` once
    forward and twice backward, and every MoE layer ``t_moe_layer`` likewise: 16
    micro-batches x 48 layers x 3 passes x (t_layer_overhead + t_moe_layer) is the whole
    difference; the FLOPs, memory and communication do not move."""
    off = predict_training("qwen3-30b-a3b", "gb200", **QWEN)
    on = predict_training("qwen3-30b-a3b", "gb200", cuda_graph=True, **QWEN)
    host = off.inputs["t_layer_overhead"] + off.inputs["t_moe_layer"]
    assert host > 0
    m, layers = 512 // (4 * 8), 48
    assert off.step_time - on.step_time == pytest.approx(m * layers * 3 * host, rel=1e-9)
    assert (off.values["time_forward"] - on.values["time_forward"]
            == pytest.approx(m * layers * host, rel=1e-9))
    for k in ("time_ep_comm", "time_dp_comm", "time_optimizer", "mem_total", "flops_model"):
        assert on.values[k] == off.values[k]


def test_dense_model_loses_the_launch_time_only():
    """A dense model has no MoE layers: only ``t_layer_overhead`` goes, 4 passes per layer
    with full recomputation (its recomputed forward launches again)."""
    kw = dict(num_gpus=8, tp=8, micro_batch=1, global_batch=16, seq_len=4096,
              recompute="full")
    off = predict_training("llama-3-70b", "h100-sxm5-80gb", **kw)
    on = predict_training("llama-3-70b", "h100-sxm5-80gb", cuda_graph=True, **kw)
    assert (off.step_time - on.step_time
            == pytest.approx(16 * 80 * 4 * off.inputs["t_layer_overhead"], rel=1e-9))


def test_bottleneck_drops_the_overhead_operators():
    """The two overhead operators fall to 0; every other operator keeps its time and the
    operators still sum to the step."""
    off = {r.name: r.time for r in bottleneck("qwen3-30b-a3b", "gb200", **QWEN).operators}
    res = bottleneck("qwen3-30b-a3b", "gb200", cuda_graph=True, **QWEN)
    on = {r.name: r.time for r in res.operators}
    assert off["moe_overhead"] > 0 and off["layer_overhead"] > 0
    assert on["moe_overhead"] == 0 and on["layer_overhead"] == 0
    for name in set(on) - {"moe_overhead", "layer_overhead"}:
        assert on[name] == pytest.approx(off[name], rel=1e-12, abs=1e-15), name
    assert sum(on.values()) == pytest.approx(res.step_time, rel=1e-9)


def test_sweep_over_the_field_equals_predict_training():
    """The lowered model reads the field like the symbolic one."""
    df = sweep("qwen3-30b-a3b", "gb200", vary={"cuda_graph": [0, 1]}, **QWEN)
    for flag in (False, True):
        got = df.loc[df["cuda_graph"] == int(flag), "step_time"].iloc[0]
        want = predict_training("qwen3-30b-a3b", "gb200", cuda_graph=flag, **QWEN).step_time
        assert got == pytest.approx(want, rel=1e-9)


def test_validate_sets_it_from_the_recipe_table(bridge_row):
    """From 26.06 the Qwen3-30B-A3B GB200 MXFP8 recipe captured the whole iteration (and
    overlapped the all-to-all); 26.04 did neither; DeepSeek-V3 on B200 overlapped from
    26.04.01 under TE-scoped graphs only; rows of another source never get it."""
    rows = pd.DataFrame([
        bridge_row("26.06", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
        bridge_row("26.08", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
        bridge_row("26.04", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
        {**bridge_row("26.04.01", "DeepSeek-V3-671B", "B200", "b200", "mxfp8"),
         "n_gpus": 256, "ep": 32, "pp": 8, "global_batch": 4096, "micro_batch": 1},
        {**bridge_row("26.06", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
         "case_id": "OTHER-qwen-tpsg"},
    ])
    prepared, skipped = prepare_rows(rows)
    assert not skipped
    got = {r.case_id.split("-")[1]: (r.config.cuda_graph, r.config.ep_overlap)
           for r in prepared}
    assert got["26.06"] == (True, True) and got["26.08"] == (True, True)
    assert got["26.04"] == (False, False)
    assert got["26.04.01"] == (False, True)
    assert got["qwen"] == (False, False)
    # one table: every full-iteration-graph recipe overlaps its all-to-all
    assert all(BRIDGE_EP_OVERLAP[k] == v for k, v in BRIDGE_FULL_ITERATION_GRAPH.items())
