"""Per-layer metrics (issue 11, item 7): ``validate`` predicts a layer's forward, backward and
recomputation time and its activation memory (Korthikanti et al. 2022, Tables 2 and 4 report
these), in the metric's unit, from the same outputs the API returns."""

from __future__ import annotations

import pytest

from symcost import predict_training
from symcost.schema import json_key
from symcost.validate import (LAYER_METRICS, OTHER_METRICS, load_measurements,
                              predict_other_rows, prepare_other_rows, prepare_rows)

HEADER = ("case_id,workload,model,n_params_b,layers,hidden,heads,kv_heads,ffn_hidden,gated_mlp,"
          "experts,top_k,shared_experts,moe_ffn_hidden,dense_layers,moe_layer_step,seq_len,vocab,"
          "global_batch,micro_batch,gpu,hardware,n_gpus,tp,pp,vpp,dp,cp,ep,sp,recompute,"
          "zero_stage,precision,flash_attention,offload,finetune,lora_rank,quant,"
          "intra_node_link,dtype,input_len,output_len,metric,value,unit,flops_convention,"
          "source,notes\n")
#: GPT-3 175B, 8-way TP with SP, 8-way PP, selective recomputation, A100, micro-batch 1
ROW = ("T4-175B-{metric},train,GPT-3 175B,175,96,12288,96,96,49152,0,,,,,,,2048,51200,64,1,"
       "A100-80GB,a100-sxm4-80gb,64,8,8,,1,1,,1,selective,0,bf16,0,,,,,,bf16,,,{metric},"
       "{value},,,test,\n")


def _frame(tmp_path, metrics: dict[str, float]):
    path = tmp_path / "layers.csv"
    path.write_text(HEADER + "".join(ROW.format(metric=m, value=v) for m, v in metrics.items()))
    return load_measurements(path)


def test_activation_memory_per_layer_is_table_2(tmp_path):
    """Korthikanti et al. 2022 Table 2, selective recomputation with SP: ``34*s*b*h/t`` bytes
    = 34 * 2048 * 1 * 12288 / 8 = 106,954,752 B = 102 MiB exactly (second implementation:
    the paper's closed form)."""
    df = _frame(tmp_path, {"activation_memory_per_layer_mib": 102.0,
                           "activation_memory_per_layer_bytes": 106_954_752})
    rows, skipped = prepare_other_rows(df)
    assert not skipped and len(rows) == 2
    pred = predict_other_rows(rows)
    assert list(pred.predicted) == pytest.approx([102.0, 106_954_752.0], rel=1e-12)
    assert list(pred.error_pct) == pytest.approx([0.0, 0.0], abs=1e-9)


def test_layer_times_match_the_api(tmp_path):
    """The validate path reports the API's ``time_layer_*`` outputs in ms; with unfused
    attention, selective recomputation recomputes the attention core, so 0 < recompute <
    forward < backward; 64 micro-batches of 12 layers bound the step's forward time."""
    metrics = {m: 1.0 for m in ("layer_forward_time_ms", "layer_backward_time_ms",
                                "layer_recompute_time_ms")}
    rows, _ = prepare_other_rows(_frame(tmp_path, metrics))
    pred = predict_other_rows(rows).set_index("metric").predicted
    api = predict_training("gpt3-175b", "a100-sxm4-80gb", num_gpus=64, tp=8, pp=8, sp=True,
                           global_batch=64, micro_batch=1, seq_len=2048, recompute="selective",
                           flash_attention=False, dtype="bf16")
    for m in metrics:
        assert pred[m] == pytest.approx(api.values[LAYER_METRICS[m][0]] * 1e3, rel=1e-6)
    assert 0 < pred["layer_recompute_time_ms"] < pred["layer_forward_time_ms"] \
        < pred["layer_backward_time_ms"]
    assert api.values["time_forward"] >= 64 * 12 * api.values["time_layer_forward"]


def test_layer_metrics_are_other_metrics_and_have_json_keys(tmp_path):
    """They are not step-time metrics (prepare_rows skips them with the reason) and every
    output they read has a unit-suffixed JSON key."""
    assert set(LAYER_METRICS) <= set(OTHER_METRICS)
    _, skipped = prepare_rows(_frame(tmp_path, {"layer_forward_time_ms": 3.0}))
    assert "predicted by predict_other_rows" in skipped[0].reason
    assert json_key("time_layer_forward") == "time_layer_forward_s"
    assert json_key("mem_activations_layer") == "memory_activations_per_layer_bytes"
