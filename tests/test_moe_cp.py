"""Mixture of experts, expert parallelism, multi-head latent attention and context parallelism.

Every expected value here is computed by hand (or by a second implementation: the exact
parameter count of :class:`symcost.models.ModelSpec`, written independently of the SymPy
formulas of :mod:`symcost.training`).
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from hwspecs import load_hardware
from symcost import ConfigError, get_model, predict_training
from symcost import symbols as S
from symcost import training as T
from symcost.config import model_bindings
from symcost.params import load_params
from symcost.ops import collectives as coll

H100 = "h100-sxm5-80gb"


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(expr.xreplace({S.lookup(k): v for k, v in values.items()}))


@pytest.mark.parametrize("name", ["mixtral-8x7b", "deepseek-v3", "qwen3-30b-a3b", "kimi-k2",
                                  "llama-4-maverick", "gpt-oss-120b"])
def test_params_total_equals_modelspec_count(name):
    """Two implementations of the parameter count agree: the SymPy average-layer formula
    (attention + dense/MoE MLP weighted by the MoE fraction, MLA projections) and
    ModelSpec.num_params (integer arithmetic per layer kind)."""
    m = get_model(name)
    got = _bind(T.params_total(), model_bindings(m))
    assert got == pytest.approx(m.num_params(), rel=1e-12)


def test_mixtral_weights_split_over_expert_parallel_ranks():
    """tp=1, pp=1, ep=8, ZeRO-0: every GPU holds all non-expert weights and 1/8 of the
    experts: 2 bytes x (P - 32*8*P_e + 32*8*P_e/8)."""
    m = get_model("mixtral-8x7b")
    r = predict_training(m, H100, num_gpus=8, tp=1, ep=8, global_batch=8, micro_batch=1)
    p_expert = 3 * 4096 * 14336                      # SwiGLU expert: 3 * h * f_e
    routed = 32 * 8 * p_expert
    want = 2 * (m.num_params() - routed + routed / 8)
    assert r.values["mem_weights"] == pytest.approx(want, rel=1e-12)
    # ZeRO-1: optimizer states of the non-expert weights over dp*cp = 8 ranks, of the experts
    # over the expert data-parallel group tp*cp*dp/ep = 1 rank
    r1 = predict_training(m, H100, num_gpus=8, tp=1, ep=8, global_batch=8, micro_batch=1,
                          zero=1)
    want_opt = 12 * ((m.num_params() - routed) / 8 + routed / 8)
    assert r1.values["mem_optimizer"] == pytest.approx(want_opt, rel=1e-12)


def test_moe_model_flops_count_active_parameters():
    """flops_model = 3 * B * (L * (2 s (attention weights + k*3*h*f_e + h*E) + 4 s^2 a d)
    + 2 s h V) for Mixtral (no dense layers, top-2 of 8 experts)."""
    m = get_model("mixtral-8x7b")
    B, s = 16, 4096
    r = predict_training(m, H100, num_gpus=8, ep=8, global_batch=B, micro_batch=1, seq_len=s)
    h, a, k, d, L, V = 4096, 32, 8, 128, 32, 32000
    attn = h * d * (a + 2 * k) + a * d * h
    mlp = 2 * 3 * h * 14336 + h * 8
    want = 3 * B * (L * (2 * s * (attn + mlp) + 4 * s**2 * a * d) + 2 * s * h * V)
    assert r.values["flops_model"] == pytest.approx(want, rel=1e-12)


def test_all_to_all_inside_a_node_is_hand_computed():
    """8 ranks on one 8-GPU node: (n-1)/n of the buffer over NVLink plus one latency."""
    hw = load_hardware(H100)
    vals = {"intra_bw": hw.intra_node_bandwidth, "eff_intra": 0.7,
            "inter_bw": hw.inter_node_bandwidth, "eff_inter": 0.8,
            "gpus_per_node": 8, "intra_lat": 2e-6, "inter_lat": 5e-6}
    nbytes = 64e6
    got = _bind(coll.all_to_all(sp.Float(nbytes), sp.Integer(8)).time, vals)
    want = 7 / 8 * nbytes / (hw.intra_node_bandwidth * 0.7) + 2e-6
    assert got == pytest.approx(want, rel=1e-12)
    # 32 ranks, 8 per node: 7/32 over NVLink, 24/32 over the NIC in parallel; the slower wins
    got = _bind(coll.all_to_all(sp.Float(nbytes), sp.Integer(32)).time, vals)
    want = max(7 / 32 * nbytes / (hw.intra_node_bandwidth * 0.7),
               24 / 32 * nbytes / (hw.inter_node_bandwidth * 0.8)) + 5e-6
    assert got == pytest.approx(want, rel=1e-12)
    # one rank: nothing to send, no latency
    assert _bind(coll.all_to_all(sp.Float(nbytes), sp.Integer(1)).time, vals) == 0.0


def test_expert_parallel_all_to_all_volume():
    """time_ep_comm of a one-micro-batch step on one node: per layer forward dispatch and
    combine of b*s*k*h 16-bit values, backward the same again (no recomputation)."""
    m = get_model("mixtral-8x7b")
    r = predict_training(m, H100, num_gpus=8, ep=8, global_batch=8, micro_batch=1)
    v = r.inputs
    n_tok, k, h = m.seq_len, 2, 4096
    one = 7 / 8 * 2 * n_tok * k * h / (v["intra_bw"] * v["eff_intra"]) + v["intra_lat"]
    assert r.values["time_ep_comm"] == pytest.approx(32 * 4 * one, rel=1e-9)
    assert predict_training(m, H100, num_gpus=8, ep=1, global_batch=8).values[
        "time_ep_comm"] == 0.0


def test_context_parallelism_halves_activation_memory():
    """With FlashAttention every per-layer activation term is linear in the local tokens
    b*s/cp: cp = 2 holds exactly half of cp = 1 (same dp, batch and layout)."""
    m = get_model("llama-3-8b")
    base = dict(tp=1, pp=1, micro_batch=1, global_batch=4, seq_len=8192, recompute="none")
    one = predict_training(m, H100, num_gpus=4, cp=1, **base).values
    two = predict_training(m, H100, num_gpus=8, cp=2, **base).values
    assert two["mem_activations"] == pytest.approx(one["mem_activations"] / 2, rel=1e-12)
    assert two["flops_model"] == one["flops_model"]          # same work, more GPUs
    assert two["num_gpus"] == 8


def test_ring_exchange_exposed_only_beyond_attention():
    """cp_comm_layer_forward: (c-1) p2p steps of n*k_t*(d_qk+d) 16-bit values, minus the
    attention time it hides behind, never negative; zero at cp = 1."""
    expr = T.cp_comm_layer_forward()
    # (a model without a sliding window: SymPy cannot prove the windowed attention factor
    # positive, though it is; the numeric checks below cover windows)
    assert sp.simplify(expr.time.subs({S.cp: 1, S.sliding_window: 0})) == 0
    vals = {"cp": 1, "sliding_window": 128, "full_attention_step": 2, "n_layers": 36,
            "seq_len": 4096}
    assert _bind(expr.time, {**predict_training(get_model("gpt-oss-120b"), H100, num_gpus=8,
                                                ep=8, global_batch=8).inputs, **vals}) == 0
    m = get_model("llama-3-8b")
    r = predict_training(m, H100, num_gpus=16, cp=16, micro_batch=1, global_batch=1,
                         seq_len=16384)
    assert r.values["time_cp_comm"] >= 0.0
    v = r.inputs
    n = 16384 / 16
    step = n * 8 * (128 + 128) * 2 / (v["inter_bw"] * v["eff_inter"]) + v["inter_lat"]
    comm = 15 * step
    assert _bind(coll.p2p(sp.Float(n * 8 * 256 * 2), sp.false).time, v) == pytest.approx(step)
    attn = _bind(T.attention_core_forward().time, v)
    assert _bind(expr.time, v) == pytest.approx(max(comm - attn, 0.0), rel=1e-9)


def test_mla_attention_weights_and_flops():
    """DeepSeek-V3 attention per layer: q 7168*1536 + 1536*128*192, kv 7168*576 +
    512*128*256, o 128*128*7168 (+ latent norms 1536 + 512 in the parameter count)."""
    m = get_model("deepseek-v3")
    vals = model_bindings(m)
    lin = 7168 * 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 * 128 * 256 + 128 * 128 * 7168
    assert _bind(T.attention_linear_params(), vals) == lin
    assert _bind(T.params_attention(), vals) == lin + 1536 + 512 + 2 * 7168
    # QK^T over 192, PV over 128: the attention core counts an average width of 160
    assert _bind(T.attention_head_dim(), vals) == 160


def test_nvfp4_runs_linear_layers_at_the_fp4_peak():
    """nvfp4 on GB200: same model FLOPs, linear GEMMs at the fp4 peak, so faster than mxfp8;
    MFU is measured against the fp4 peak."""
    m = get_model("llama-3-8b")
    kw = dict(num_gpus=8, global_batch=8, micro_batch=1)
    fp4 = predict_training(m, "gb200", dtype="nvfp4", **kw)
    fp8 = predict_training(m, "gb200", dtype="mxfp8", **kw)
    assert fp4.values["flops_model"] == fp8.values["flops_model"]
    assert fp4.step_time < fp8.step_time
    with pytest.raises(ConfigError, match="^dtype: .*no mxfp8"):
        predict_training(m, H100, dtype="mxfp8", **kw)


def test_nvfp4_at_half_efficiency_is_exactly_fp8_on_b200():
    """``eff_fp4`` scales only the NVFP4 GEMM rate: B200's fp4 peak is twice its fp8 peak
    (9 vs 4.5 PFLOP/s dense) and its MXFP8 GEMMs run at the measured fp8 ceiling over the bf16
    one (3,432.5/4,500 over 1,745/2,250, 0.9835), so NVFP4 at ``eff_fp4`` = 0.9835/2 predicts
    every time of MXFP8 (casts and communication are the same); at the shipped value it is
    faster, and halving ``eff_fp4`` lengthens the step. The activations differ only by the linear layers' saved
    inputs, 1/2 byte per element instead of 1 (``training.gemm_input_bytes``): by hand, per
    layer ``(2*n*h + n*a*d + n*f)/2`` for the QKV and MLP inputs, the output projection's copy
    and the down-projection's input, n = 8,192 tokens, h = a*d = 4,096, f = 14,336; 32
    layers, one micro-batch in flight. MFU and HFU are against each dtype's datasheet peak."""
    m = get_model("llama-3-8b")
    kw = dict(num_gpus=8, global_batch=64, micro_batch=1)
    p = load_params()
    ratio = (3432.5 / 4500) / (1745.0 / 2250)
    b200 = load_hardware("b200")
    assert b200.matmul_ceiling_fp8 / b200.matmul_ceiling == pytest.approx(ratio, rel=1e-12)
    half = dataclasses.replace(p, generations={
        g: {**v, "eff_fp4": ratio / 2} for g, v in p.generations.items()})
    fp8 = predict_training(m, "b200", dtype="mxfp8", params=half, **kw)
    fp4 = predict_training(m, "b200", dtype="nvfp4", params=half, **kw)
    activations = {"mem_activations", "mem_activations_layer", "mem_total", "mem_headroom"}
    for k, v in fp8.values.items():
        if k not in activations | {"mfu", "hfu"}:
            assert fp4.values[k] == pytest.approx(v, rel=1e-12, abs=1e-15), k
    # MFU and HFU divide by the datasheet peak of the GEMM dtype, never by the calibrated
    # eff_fp4: the same FLOPs in the same time against 9 instead of 4.5 PFLOP/s
    for k in ("mfu", "hfu"):
        assert fp4.values[k] == pytest.approx(fp8.values[k] * 4.5 / 9, rel=1e-12), k
    n, h, f = 8192, 4096, 14336
    by_hand = 32 * (2 * n * h + n * h + n * f) / 2
    assert fp8.values["mem_activations"] - fp4.values["mem_activations"] == pytest.approx(
        by_hand, rel=1e-12)
    assert fp8.values["mem_total"] - fp4.values["mem_total"] == pytest.approx(by_hand,
                                                                              rel=1e-12)
    shipped = predict_training(m, "b200", dtype="nvfp4", **kw)
    assert p.for_generation("blackwell")["eff_fp4"] > ratio / 2
    assert shipped.step_time < fp4.step_time
    assert shipped.values["mfu"] == pytest.approx(
        shipped.values["flops_model"] / (shipped.step_time * 8 * 9e15), rel=1e-12)


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="llama-3-8b", ep=2, num_gpus=2), "^ep: 2 > 1 needs a mixture-of-experts"),
    (dict(model="mixtral-8x7b", ep=3, num_gpus=3), "^ep: 3 does not divide the number of experts"),
    (dict(model="mixtral-8x7b", ep=8, num_gpus=4), "^ep: 8 does not divide tp\\*cp\\*dp = 4"),
    (dict(model="mixtral-8x7b", tp=2, num_gpus=2), "^sp: must be on for a mixture-of-experts"),
    (dict(model="llama-3-8b", cp=3, num_gpus=3, seq_len=8192), "^cp: 2\\*cp = 6 does not divide"),
    (dict(model="llama-3-8b", cp=2, num_gpus=2, flash_attention=False),
     "^cp: 2 > 1 needs flash_attention"),
])
def test_new_rules_name_field_and_rule(kwargs, match):
    kwargs = dict(kwargs)
    model = kwargs.pop("model")
    with pytest.raises(ConfigError, match=match):
        predict_training(model, H100, **kwargs)


def test_hsdp_shards_within_a_group_and_all_reduces_across_replicas():
    """ZeRO-3 on 16 GPUs (tp = pp = 1): FSDP shards the optimizer states over 16 ranks, HSDP
    with 2 replicas over 8; the replicas add one all-reduce of the 1/8 gradient shard."""
    m = get_model("llama-3-8b")
    kw = dict(num_gpus=16, zero=3, global_batch=16, micro_batch=1)
    fsdp = predict_training(m, H100, **kw).values
    hsdp = predict_training(m, H100, dp_replicate=2, **kw).values
    P = m.num_params()
    assert fsdp["mem_optimizer"] == pytest.approx(12 * P / 16, rel=1e-12)
    assert hsdp["mem_optimizer"] == pytest.approx(12 * P / 8, rel=1e-12)
    with pytest.raises(ConfigError, match="^dp_replicate: 3 does not divide dp\\*cp = 16"):
        predict_training(m, H100, dp_replicate=3, **kw)


def test_moe_serving_reads_the_experts_a_batch_activates():
    """E(1-(1-k/E)^rows) distinct experts: k for one token, all E for a large batch."""
    from symcost import inference as INF
    vals = {"n_experts": 8, "top_k": 2}
    assert _bind(INF.active_experts(sp.Integer(1)), vals) == pytest.approx(2.0)
    assert _bind(INF.active_experts(sp.Integer(2)), vals) == pytest.approx(8 * (1 - 0.75**2))
    assert _bind(INF.active_experts(sp.Integer(512)), vals) == pytest.approx(8.0)


def test_moe_serving_weights_per_gpu_by_hand():
    """Mixtral 8x7B, TP 2, bf16: every expert split over the two GPUs, router replicated.
    Per GPU, bytes: 2 * (32 * (attention/2 + 8*3*h*f_e/2 + h*8 + 2h) + 2*V*h/2 + h)."""
    from symcost import predict_inference
    r = predict_inference("mixtral-8x7b", H100, tp=2, batch=8)
    h, a, k, d, fe, V = 4096, 32, 8, 128, 14336, 32000
    attention = h * d * (a / 2 + 2 * k / 2) + a / 2 * d * h
    layer = attention + 8 * 3 * h * fe / 2 + h * 8
    want = 2 * (32 * layer + 32 * 2 * h + 2 * V * h / 2 + h)
    assert r.values["mem_weights"] == pytest.approx(want, rel=1e-12)
    # MLA models serve with their latent KV cache (tests/test_inference_mla_swa.py)
    mla = predict_inference("deepseek-v3", "b200", tp=8, batch=1)
    assert mla.values["kv_bytes_per_token"] == 61 * 576 * 2
