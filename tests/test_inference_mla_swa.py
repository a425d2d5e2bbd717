"""Serving with multi-head latent attention (DeepSeek-V3) and sliding-window attention (gpt-oss,
Mistral-7B): latent KV cache, absorbed MLA decode, windowed KV and attention (issue 11)."""

from __future__ import annotations

import pytest

from symcost import predict_inference
from symcost.models import get_model


def test_mla_kv_cache_by_hand():
    """DeepSeek-V3: 61 layers x (r + d_r) = 512 + 64 = 576 latent elements per token, 16-bit:
    61 * 576 * 2 = 70,272 bytes on every GPU whatever the TP (the latent is not split); fp8
    KV halves it. A GQA model of the same KV width would need 2*128*128 = 32,768 elements per
    layer, 57x more."""
    for tp in (1, 8):
        r = predict_inference("deepseek-v3", "h200-sxm-141gb", tp=tp, batch=1,
                              input_len=1024, output_len=16, check_memory=False)
        assert r.values["kv_bytes_per_token"] == 61 * 576 * 2
    r8 = predict_inference("deepseek-v3", "h200-sxm-141gb", tp=8, batch=1, input_len=1024,
                           output_len=16, kv_dtype="fp8", dtype="fp8", check_memory=False)
    assert r8.values["kv_bytes_per_token"] == 61 * 576
    assert r8.values["kv_bytes_per_sequence"] == 61 * 576 * (1024 + 16)


def test_mla_decode_attention_by_hand():
    """Absorbed decode of 64 sequences at mean context 4096 + 64 = 4160 (input 4096, output
    128), tp 8 (16 local heads), one layer: FLOP 2*64*4160*16*(2*512 + 64) = 9,269,411,840;
    bytes: the latent cache read once, 64*4160*576*2 = 306,708,480, plus the query/output
    latents 64*16*(2*512 + 64)*2 = 2,228,224. The stage's decode attention is 61 such layers."""
    r = predict_inference("deepseek-v3", "h200-sxm-141gb", tp=8, batch=64, input_len=4096,
                          output_len=128, dtype="fp8", kv_dtype="bf16", check_memory=False)
    flops = 2 * 64 * 4160 * 16 * (2 * 512 + 64)
    nbytes = 64 * 4160 * 576 * 2 + 64 * 16 * (2 * 512 + 64) * 2
    v = r.inputs
    t_layer = max(flops / (v["peak_flops_16"] * v["eff_attn_infer"]),
                  nbytes / (v["hbm_bw"] * v["eff_hbm_infer"]))
    assert r.values["decode_attention"] == pytest.approx(61 * t_layer, rel=1e-9)
    assert 0 < r.values["tpot"] < 1 and 0 < r.values["ttft"] < 100


def test_sliding_window_kv_by_hand():
    """gpt-oss-120b at 4096 + 1024 = 5120 tokens, tp 1: 18 full layers keep 5120 tokens, 18
    windowed layers 128; 8 KV heads x 64 x 2 (K, V) x 2 bytes = 2,048 bytes per token and
    layer: 2048*(18*5120 + 18*128) = 193,462,272 bytes per sequence (the full-attention cache
    would be 2048*36*5120 = 377,487,360). Mistral-7B (every layer windowed at 4096) at 8192
    tokens keeps 4096: 2*32*8*128*2 * 4096 = 536,870,912."""
    r = predict_inference("gpt-oss-120b", "h200-sxm-141gb", tp=1, batch=1, input_len=4096,
                          output_len=1024, dtype="fp8", kv_dtype="bf16", check_memory=False)
    assert r.values["kv_bytes_per_token"] == 2048 * 36
    assert r.values["kv_bytes_per_sequence"] == pytest.approx(2048 * (18 * 5120 + 18 * 128),
                                                              rel=1e-12)
    full = predict_inference(get_model("gpt-oss-120b").replace(sliding_window=0,
                                                               full_attention_step=0),
                             "h200-sxm-141gb", tp=1, batch=1, input_len=4096, output_len=1024,
                             dtype="fp8", kv_dtype="bf16", check_memory=False)
    assert full.values["kv_bytes_per_sequence"] == 2048 * 36 * 5120
    assert r.values["decode_attention"] < full.values["decode_attention"]
    assert r.values["prefill_attention"] < full.values["prefill_attention"]
    m = predict_inference("mistral-7b", "h100-sxm5-80gb", tp=1, batch=1, input_len=7168,
                          output_len=1024, check_memory=False)
    assert m.values["kv_bytes_per_sequence"] == 2 * 32 * 8 * 128 * 2 * 4096


def test_window_longer_than_context_changes_nothing():
    """At 3,072 tokens Mistral-7B's 4,096-token window covers the whole context: every output
    equals the same model without a window."""
    kw = dict(tp=1, batch=8, input_len=2048, output_len=1024)
    a = predict_inference("mistral-7b", "h100-sxm5-80gb", **kw).values
    b = predict_inference(get_model("mistral-7b").replace(sliding_window=0), "h100-sxm5-80gb",
                          **kw).values
    assert a == pytest.approx(b, rel=1e-12)
