"""Serving with multi-head latent attention (DeepSeek-V3) and sliding-window attention (gpt-oss,
Mistral-7B): latent KV cache, absorbed MLA decode, windowed KV and attention (issue 11)."""

from __future__ import annotations

import pytest

from symcost import predict_inference
from symcost.infer_api import InferenceConfigError
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
    t_layer = max(flops / (v["peak_flops_16"] * v["matmul_ceiling"] * v["eff_attn_infer"]),
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


# --- issue 11 follow-up (helper "serve"): capacity, prefill and the dense path by hand -------
def _roofline(r, flops: float, nbytes: float) -> float:
    """One attention kernel's time from the request's own bindings (16-bit peak, serving
    efficiencies, at the GPU's measured matmul ceiling), as :mod:`symcost.inference` computes it."""
    v = r.inputs
    return max(flops / (v["peak_flops_16"] * v["matmul_ceiling"] * v["eff_attn_infer"]),
               nbytes / (v["hbm_bw"] * v["eff_hbm_infer"]))


def test_deepseek_v3_fits_eight_h200_with_fp8_weights():
    """DeepSeek-V3 on 8 H200, tp 8, fp8 weights and GEMMs, bf16 KV, batch 64 of 4096 + 512.

    Weights per GPU by hand (bytes): 61 layers of MLA attention, per rank
    h*r_q + r_q*(a/t)*(d+d_r) + h*(r+d_r) + r*(a/t)*2d + (a/t)*d*h = 36,634,624 elements
    (h 7168, r_q 1536, a/t 16, d 128, d_r 64, r 512); 3 dense MLPs 3*h*f/t = 49,545,216
    (f 18432); 58 MoE layers of 257 experts split by TP plus the router,
    257*3*h*2048/8 + h*256 = 1,416,626,176; all at 1 byte; the 16-bit vocabulary-parallel
    embedding and LM head 2*(129,280*7168/8*2) and the norms 2*(2*61*h + h):
    85,012,768,768 bytes. The batch fits (no error is raised), the largest batch is
    floor(kv_budget / (70,272*4608 + 4*129,280/8)), and with bf16 weights (about 168 GB per
    GPU) even batch 1 does not fit."""
    kw = dict(tp=8, batch=64, input_len=4096, output_len=512, kv_dtype="bf16")
    r = predict_inference("deepseek-v3", "h200-sxm-141gb", dtype="fp8", **kw)
    v = r.values
    attn = 7168 * 1536 + 1536 * 16 * 192 + 7168 * 576 + 512 * 16 * 256 + 16 * 128 * 7168
    assert attn == 36_634_624
    weights = (61 * attn + 3 * 3 * 7168 * 18432 // 8
               + 58 * (257 * 3 * 7168 * 2048 // 8 + 7168 * 256)
               + 2 * (129_280 * 7168 // 8 * 2 + 2 * 61 * 7168 + 7168))
    assert weights == 85_012_768_768
    assert v["mem_weights"] == pytest.approx(weights, rel=1e-12)
    assert r.fits and v["mem_kv_cache"] == 64 * 70_272 * 4608
    per_seq = 70_272 * 4608 + 4 * 129_280 / 8
    assert r.max_batch == int(v["mem_kv_budget"] // per_seq) > 64
    assert 0 < r.tpot < 1 and 0 < r.ttft < 100 and r.throughput > 0
    with pytest.raises(InferenceConfigError, match="memory: even batch 1"):
        predict_inference("deepseek-v3", "h200-sxm-141gb", dtype="bf16", **kw)


def test_deepseek_v3_prefill_attention_up_projected_by_hand():
    """Prefill runs MLA up-projected: multi-head FlashAttention over a/t = 16 query and 16 KV
    heads of width d + d_r/2 = 160 (scores over d + d_r = 192, values over d = 128). 64
    prompts of 4096 tokens in ceil(64*4096/8192) = 32 chunks; per layer and chunk 1/32 of
    FLOP 4*64*4096^2*16*160 (executed: the causal tiles of 128 on and below the diagonal,
    1/2 + 64/4096 of it) and Q/K/V/O bytes 2*64*4096*160*(2*16 + 2*16); the stage has 61
    layers."""
    r = predict_inference("deepseek-v3", "h200-sxm-141gb", tp=8, batch=64, input_len=4096,
                          output_len=512, dtype="fp8", kv_dtype="bf16")
    f = 4 * 64 * 4096**2 * 16 * 160
    nbytes = 2 * 64 * 4096 * 160 * (2 * 16 + 2 * 16)
    assert r.values["prefill_chunks"] == 32
    executed = f * (1 / 2 + 64 / 4096)
    assert r.values["prefill_attention"] == pytest.approx(
        61 * _roofline(r, executed, nbytes) / 32, rel=1e-9)


@pytest.mark.parametrize("tp, expected", [(1, 2048 * (18 * 4096 + 18 * 128)),
                                          (8, 256 * (18 * 4096 + 18 * 128))])
def test_gpt_oss_kv_at_4096_tokens_by_hand(tp, expected):
    """gpt-oss-120b at 3584 + 512 = 4096 tokens: 18 full layers keep 4096 tokens and 18
    windowed layers 128; 8 KV heads x 64 x 2 (K, V) x 2 bytes = 2,048 bytes per token and
    layer on one GPU at tp 1 (155,713,536 bytes per sequence), one KV head per GPU at tp 8
    (256 bytes, 19,464,192). gpt-oss-20b: 12 + 12 layers, 103,809,024 at tp 1."""
    r = predict_inference("gpt-oss-120b", "h200-sxm-141gb", tp=tp, batch=1, input_len=3584,
                          output_len=512, dtype="fp8", kv_dtype="bf16")
    assert r.values["kv_bytes_per_sequence"] == pytest.approx(expected, rel=1e-12)
    assert r.values["kv_bytes_per_token"] == 36 * 2048 / tp  # a token inside the window
    s = predict_inference("gpt-oss-20b", "h200-sxm-141gb", tp=1, batch=1, input_len=3584,
                          output_len=512, dtype="fp8", kv_dtype="bf16")
    assert s.values["kv_bytes_per_sequence"] == pytest.approx(103_809_024, rel=1e-12)


def test_windowed_kv_capacity_by_hand():
    """The largest batch divides the KV budget by the windowed per-sequence bytes plus the
    fp32 logits row (4*V/t): gpt-oss-120b on one H200, fp8 weights, 8192 + 1024 tokens:
    2048*(18*9216 + 18*128) + 4*201,088 bytes per sequence; continuous batching with
    on-demand blocks holds 8192 + 512 tokens on the full layers. Without the window the
    cache is 2048*36*9216 per sequence and about 1.97x fewer sequences fit."""
    kw = dict(tp=1, batch=1, input_len=8192, output_len=1024, dtype="fp8", kv_dtype="bf16")
    r = predict_inference("gpt-oss-120b", "h200-sxm-141gb", **kw)
    v = r.values
    per_seq = 2048 * (18 * 9216 + 18 * 128) + 4 * 201_088
    assert v["max_batch"] == int(v["mem_kv_budget"] // per_seq)
    on_demand = predict_inference("gpt-oss-120b", "h200-sxm-141gb", kv_on_demand=True, **kw)
    held = 2048 * (18 * 8704 + 18 * 128) + 4 * 201_088
    assert on_demand.values["serve_max_batch"] == int(v["mem_kv_budget"] // held)
    full = predict_inference(get_model("gpt-oss-120b").replace(sliding_window=0,
                                                               full_attention_step=0),
                             "h200-sxm-141gb", **kw)
    assert full.values["max_batch"] == int(v["mem_kv_budget"] // (2048 * 36 * 9216
                                                                   + 4 * 201_088))
    assert v["max_batch"] / full.values["max_batch"] == pytest.approx(1.97, abs=0.02)


def test_windowed_decode_attention_at_long_context_by_hand():
    """gpt-oss-120b, tp 1, 16 sequences, 32768 + 512 tokens: mean decode context 33,024; the
    average layer reads (33,024 + 128)/2 = 16,576 tokens (18 full, 18 windowed layers).
    Per layer FLOP 4*16*16576*64*64 and bytes 16*16576*2*8*64*2 + 2*16*64*64*2 (flash
    decoding reads each KV head once); the stage has 36 layers. Without the window the
    context is 33,024 and the attention time about twice as long."""
    kw = dict(tp=1, batch=16, input_len=32768, output_len=512, dtype="fp8", kv_dtype="bf16",
              check_memory=False)
    r = predict_inference("gpt-oss-120b", "h200-sxm-141gb", **kw)
    ctx = (33_024 + 128) / 2
    t = _roofline(r, 4 * 16 * ctx * 64 * 64, 16 * ctx * 2 * 8 * 64 * 2 + 2 * 16 * 64 * 64 * 2)
    assert r.values["decode_attention"] == pytest.approx(36 * t, rel=1e-9)
    full = predict_inference(get_model("gpt-oss-120b").replace(sliding_window=0,
                                                               full_attention_step=0),
                             "h200-sxm-141gb", **kw)
    assert full.values["decode_attention"] / r.values["decode_attention"] == pytest.approx(
        33_024 / ctx, rel=0.01)


def test_window_filling_during_decode_by_hand():
    """Mistral-7B (every layer windowed at W = 4096), 2,048 + 4,096 tokens: the context runs
    from 2,048 to 6,144, so the window fills halfway. The mean attended context is
    (4096^2 - 2048^2)/2/4096 + 4096*2048/4096 = 1,536 + 2,048 = 3,584 tokens (not
    min(4,096 mean, W) = 4,096). Per layer (tp 1, 8 sequences, 32 heads, 8 KV heads, d 128):
    FLOP 4*8*3584*32*128, bytes 8*3584*2*8*128*2 + 2*8*32*128*2; 32 layers. With W at or
    below the input length every step attends to W; with W above input + output the plain
    mean (4,096) applies, as without a window."""
    kw = dict(tp=1, batch=8, input_len=2048, output_len=4096, check_memory=False)
    r = predict_inference("mistral-7b", "h100-sxm5-80gb", **kw)
    ctx = 3584
    t = _roofline(r, 4 * 8 * ctx * 32 * 128, 8 * ctx * 2 * 8 * 128 * 2 + 2 * 8 * 32 * 128 * 2)
    assert r.values["decode_attention"] == pytest.approx(32 * t, rel=1e-9)
    mistral = get_model("mistral-7b")
    for window, expected in ((1024, 1024), (2048, 2048), (8192, 4096), (6144, 4096)):
        rw = predict_inference(mistral.replace(sliding_window=window), "h100-sxm5-80gb", **kw)
        t = _roofline(rw, 4 * 8 * expected * 32 * 128,
                      8 * expected * 2 * 8 * 128 * 2 + 2 * 8 * 32 * 128 * 2)
        assert rw.values["decode_attention"] == pytest.approx(32 * t, rel=1e-9), window


def test_windowed_prefill_flops_by_hand():
    """Model FLOPs of the prefill drop by the banded attention of the windowed layers: a
    token at position i attends to min(i, W) tokens, on average W - W(W-1)/(2s) against s/2,
    so each windowed layer counts (2W - W(W-1)/s)/s of 4*B*s^2*a*d. gpt-oss-120b, 2 prompts
    of s = 4096, a = 64, d = 64, W = 128, 18 windowed layers."""
    kw = dict(tp=1, batch=2, input_len=4096, output_len=16, dtype="fp8", kv_dtype="bf16")
    r = predict_inference("gpt-oss-120b", "h200-sxm-141gb", **kw)
    full = predict_inference(get_model("gpt-oss-120b").replace(sliding_window=0,
                                                               full_attention_step=0),
                             "h200-sxm-141gb", **kw)
    s, w = 4096, 128
    banded = (2 * w - w * (w - 1) / s) / s
    drop = 18 * 4 * 2 * s**2 * 64 * 64 * (1 - banded)
    assert full.values["prefill_flops"] - r.values["prefill_flops"] == pytest.approx(drop,
                                                                                     rel=1e-9)
    assert r.values["prefill_attention"] < full.values["prefill_attention"]


def test_dense_model_without_window_unchanged():
    """Llama-2-70B (no window, no MLA) on 4 H100, tp 4, batch 32, 2048 + 256 tokens: the
    calibration-free outputs equal those stored from the code before MLA and sliding-window
    serving (commit 6c0b77b; KV by hand 2*80*2*128*2 = 81,920 bytes per token on each GPU,
    x 2304 tokens), and the GQA decode attention equals the flash-decoding formula by hand at
    the mean context 2048 + 128 = 2176 (16 query and 2 KV heads of 128 per GPU, 80 layers)."""
    r = predict_inference("llama-2-70b", "h100-sxm5-80gb", tp=4, batch=32, input_len=2048,
                          output_len=256, check_memory=False)
    v = r.values
    stored = {"kv_bytes_per_token": 81_920, "kv_bytes_per_sequence": 188_743_680,
              "mem_weights": 34_490_302_464, "mem_activations": 696_254_464,
              "mem_kv_cache": 6_039_797_760, "prefill_flops": 9_323_875_380_756_480,
              "decode_flops_per_step": 1_145_487_984_640}
    assert {k: v[k] for k in stored} == stored
    ctx = 2176
    t = _roofline(r, 4 * 32 * ctx * 16 * 128,
                  32 * ctx * 2 * 2 * 128 * 2 + 2 * 32 * 16 * 128 * 2)
    assert v["decode_attention"] == pytest.approx(80 * t, rel=1e-12)
