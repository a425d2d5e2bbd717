"""FP8 attention (``fp8_attention``, Transformer Engine ``fp8_dot_product_attention``): the
FlashAttention matmuls run at the fp8 peak, the softmax's exponentials do not speed up; hand
values from the GPUs' peak ratios, the validity rule, a sweep against ``predict_training``, and
which Megatron-Bridge rows ``validate`` predicts with it."""

from __future__ import annotations

import pandas as pd
import pytest

from symcost import predict_training
from symcost.bottleneck import bottleneck
from symcost.fields import ConfigError
from symcost.sweep import sweep
from symcost.validate import BRIDGE_FP8_ATTENTION, BRIDGE_FULL_ITERATION_GRAPH, prepare_rows

#: Llama-3-70B (head dimension 128) on 8 H100 in fp8, TP8: attention compute-bound
LLAMA = dict(num_gpus=8, tp=8, sp=True, micro_batch=1, global_batch=8, seq_len=8192,
             dtype="fp8")
#: gpt-oss-120b (head dimension 64) on 64 GB200 as Megatron-Bridge's MXFP8 recipe runs it
GPT_OSS = dict(num_gpus=64, ep=64, micro_batch=4, global_batch=1280, seq_len=4096,
               dtype="mxfp8", zero=1)


def _attention_time(model: str, hw: str, **kw) -> float:
    ops = {r.name: r.time for r in bottleneck(model, hw, **kw).operators}
    return ops["attention"]


def test_h100_head_dim_128_attention_time_halves():
    """H100's tensor cores do 256 FLOP per exponential of its special function units; a head
    dimension of 128 makes the forward's matmuls 4*128 = 512 FLOP per score element and the
    backward's 10*128 = 1280. At the fp8 peak (2x) both are still at or above the
    exponentials' 256, so the whole attention core (forward, backward, recomputation) takes
    half as long (to the datasheet peaks' 1e-4); nothing else moves."""
    off = predict_training("llama-3-70b", "h100-sxm5-80gb", **LLAMA)
    on = predict_training("llama-3-70b", "h100-sxm5-80gb", fp8_attention=True, **LLAMA)
    # the datasheet's 1,978.9 and 989.4 TFLOP/s: a ratio of 2 to 1e-4
    assert on.inputs["peak_flops_8"] / on.inputs["peak_flops_16"] == pytest.approx(2, rel=1e-4)
    t_off = _attention_time("llama-3-70b", "h100-sxm5-80gb", **LLAMA)
    t_on = _attention_time("llama-3-70b", "h100-sxm5-80gb", fp8_attention=True, **LLAMA)
    assert t_off > 0
    assert t_on == pytest.approx(t_off / 2, rel=2e-4)
    assert off.step_time - on.step_time == pytest.approx(t_off - t_on, rel=1e-9)
    for k in ("flops_model", "flops_hardware", "mem_total", "time_tp_comm"):
        assert on.values[k] == off.values[k]


def test_exponential_bound_forward_does_not_speed_up():
    """B200 does 512 tensor-core FLOP per exponential: gpt-oss's head dimension of 64 gives
    4*64 = 256 matmul FLOP per score element forward, already below the exponentials, so the
    forward is unchanged; the backward's 10*64 = 640 fall to 320 equivalent, below the 512,
    so its attention becomes exponential-bound at 512/640 of its time: faster, not halved."""
    off = predict_training("gpt-oss-120b", "b200", **GPT_OSS)
    on = predict_training("gpt-oss-120b", "b200", fp8_attention=True, **GPT_OSS)
    assert on.inputs["peak_flops_16"] / on.inputs["peak_exp"] == pytest.approx(512, rel=0.01)
    assert on.values["time_layer_forward"] == pytest.approx(off.values["time_layer_forward"],
                                                            rel=1e-12)
    assert on.values["time_layer_backward"] < off.values["time_layer_backward"]


def test_rule_names_the_field():
    """FP8 attention needs an 8- or 4-bit recipe and FlashAttention: one line naming the
    field, for the API and for a sweep's mask alike."""
    with pytest.raises(ConfigError, match=r"^fp8_attention: needs an fp8, mxfp8 or nvfp4"):
        predict_training("llama-3-70b", "h100-sxm5-80gb",
                         **{**LLAMA, "dtype": "bf16"}, fp8_attention=True)
    with pytest.raises(ConfigError, match=r"^fp8_attention: .*FlashAttention"):
        predict_training("llama-3-70b", "h100-sxm5-80gb", flash_attention=False,
                         fp8_attention=True, **LLAMA)
    df = sweep("llama-3-70b", "h100-sxm5-80gb", vary={"dtype": ["bf16", "fp8"],
                                                      "fp8_attention": [0, 1]},
               **{k: v for k, v in LLAMA.items() if k != "dtype"})
    # the sweep's dtype column holds the enum code (bf16 0, fp8 2); 70B at ZeRO-0 on 8 GPUs
    # does not fit either way, which the mask reports after the configuration rules
    broken = df["reason"].str.startswith("fp8_attention:")
    assert broken.tolist() == [False, True, False, False]
    assert df.loc[broken, ["dtype", "fp8_attention"]].values.tolist() == [[0.0, 1.0]]


def test_sweep_over_the_field_equals_predict_training():
    """The lowered model reads the field like the symbolic one."""
    df = sweep("llama-3-70b", "h100-sxm5-80gb", vary={"fp8_attention": [0, 1]}, **LLAMA)
    for flag in (False, True):
        got = df.loc[df["fp8_attention"] == int(flag), "step_time"].iloc[0]
        want = predict_training("llama-3-70b", "h100-sxm5-80gb", fp8_attention=flag,
                                **LLAMA).step_time
        assert got == pytest.approx(want, rel=1e-6)  # the sweep evaluates in float32


def test_validate_sets_it_from_the_recipe_table(bridge_row):
    """Qwen3-30B-A3B's GB200 MXFP8 recipe ran FP8 attention from 26.06 (not in 26.04, not in
    BF16, never for another source); DeepSeek-V3's GB200 MXFP8 recipe captured the whole
    iteration from 26.06 but kept BF16 attention."""
    deepseek = {"n_gpus": 256, "ep": 64, "pp": 4, "global_batch": 2048, "micro_batch": 1}
    rows = pd.DataFrame([
        bridge_row("26.06", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
        bridge_row("26.08", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
        bridge_row("26.04", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
        {**bridge_row("26.06", "Qwen3-30B-A3B", "GB200", "gb200", "bf16"),
         "case_id": "MBRIDGE-26.06-bf16-tpsg"},
        {**bridge_row("26.06", "DeepSeek-V3-671B", "GB200", "gb200", "mxfp8"), **deepseek,
         "case_id": "MBRIDGE-26.06-dsv3-tpsg"},
        {**bridge_row("26.06", "Qwen3-30B-A3B", "GB200", "gb200", "mxfp8"),
         "case_id": "OTHER-qwen-tpsg"},
    ])
    prepared, skipped = prepare_rows(rows)
    assert not skipped
    got = {r.case_id: (r.config.fp8_attention, r.config.cuda_graph) for r in prepared}
    ids = [r["case_id"] for r in rows.to_dict("records")]
    assert got[ids[0]] == (True, True) and got[ids[1]] == (True, True)
    assert got[ids[2]] == (False, False)
    assert got[ids[3]] == (False, False)
    assert got[ids[4]] == (False, True)
    assert got[ids[5]] == (False, False)
    # every FP8-attention recipe is a full-iteration-graph recipe of the same container
    for first, runs in BRIDGE_FP8_ATTENTION.items():
        assert runs <= BRIDGE_FULL_ITERATION_GRAPH[first]
