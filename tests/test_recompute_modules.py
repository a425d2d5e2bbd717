"""Selective recomputation by module (``recompute_modules``, Megatron-Core
``--recompute-modules``): hand counts of the bytes each module drops, the recomputed FLOPs,
additivity of the recomputed time, the rule, and the breakdown by module."""

from __future__ import annotations

import pytest
import sympy as sp

from symcost import symbols as S
from symcost import training as T
from symcost.api import predict_training, training_inputs
from symcost.breakdown import evaluate_terms, training_module_terms
from symcost.config import ConfigError, TrainingConfig
from symcost.fields import RECOMPUTE_MODULES, TRAINING_FIELDS, coerce, subset_bindings

s, b, h, t = sp.symbols("s b h t", positive=True)

#: Korthikanti et al. 2022's GPT layer: MHA, f = 4h, GeLU, dropout, SP on, no FlashAttention
GPT_SP = {S.n_kv_heads: S.n_heads, S.ffn_hidden: 4 * S.hidden, S.gated_mlp: 0,
          S.has_dropout: 1, S.train_framework: 0, S.n_experts: 0, S.top_k: 0,
          S.shared_experts: 0, S.moe_ffn_hidden: 0, S.dense_layers: 0, S.moe_layer_step: 1,
          S.kv_lora_rank: 0, S.q_lora_rank: 0, S.rope_head_dim: 0, S.head_dim_given: 0,
          S.cp: 1, S.hybrid: 0, S.sliding_window: 0, S.sp_on: 1, S.flash_attn: 0,
          S.recompute: 1, S.fp8: 0, S.fp4: 0}


def _modules(names: str) -> dict[sp.Symbol, float]:
    return {S.lookup(k): x for k, x in subset_bindings("recompute_modules", names).items()}


def _per_layer_gpt(names: str) -> sp.Expr:
    expr = T.activation_bytes_layer().subs(GPT_SP).subs(_modules(names))
    # Table 2 assumes the KV heads split evenly over the TP ranks: Max(k, t) -> k
    expr = expr.replace(sp.Max, lambda *args: next(x for x in args if x.has(S.n_heads)))
    return sp.simplify(expr.subs({S.hidden: h, S.seq_len: s, S.micro_batch: b, S.tp: t}))


@pytest.mark.parametrize("names, per_sbh_over_t", [
    ("core_attn", 34),                  # Korthikanti et al. 2022, Table 2, selective with SP
    ("core_attn,layernorm", 34 - 4),    # the two norm outputs, 2 bytes each
    ("core_attn,mlp", 34 - 16),         # GeLU MLP: 4h activation input and output, 2 bytes
    ("core_attn,layernorm,mlp", 34 - 20),
])
def test_gpt_layer_bytes_by_module_are_table2_minus_hand_counts(names, per_sbh_over_t):
    assert sp.simplify(_per_layer_gpt(names) - per_sbh_over_t * s * b * h / t) == 0


def test_without_core_attn_the_scores_stay():
    scores = _per_layer_gpt("layernorm") - _per_layer_gpt("core_attn,layernorm")
    # softmax output 2 + dropout mask 1 + dropout output 2 bytes per score, a*s^2*b/t
    a = S.n_heads
    assert sp.simplify(scores - 5 * a * s * s * b / t) == 0


DSV3 = dict(num_gpus=2048, pp=16, ep=64, micro_batch=1, global_batch=15360, seq_len=4096,
            zero=1, recompute="selective")
#: DeepSeek-V3 (arXiv:2412.19437): 61 layers, the first 3 dense (SwiGLU 18432); MLA with 128
#: heads of 128 + 64 RoPE, latents 1536/512; top-8 of 256 experts of 2048 and one shared
N, HID, A, D, DR, FE, K, F = 4096, 7168, 128, 128, 64, 2048, 8, 18432
MOE, DENSE_FRAC = 58 / 61, 3 / 61


def _layer_bytes(modules: str, dtype: str = "bf16") -> float:
    r = predict_training("deepseek-v3", "h800-sxm5-80gb", recompute_modules=modules,
                         dtype=dtype, **DSV3)
    return r.values["mem_activations_layer"]


def test_deepseek_v3_bytes_each_module_drops_hand_counted():
    """The average layer's bytes at 4,096 tokens per micro-batch, tp = 1, bf16."""
    base = _layer_bytes("core_attn")
    drops = {
        "layernorm": 2 * 2 * N * HID,                        # two norm outputs
        "mla_up_proj": 2 * N * A * (2 * (D + DR) + D),       # Q and K (d + d_r wide), V
        "moe_act": MOE * 2 * N * K * FE,                      # the routed SwiGLU outputs
        "mlp": DENSE_FRAC * 2 * N * F * 3,                    # the dense SwiGLU MLP's tensors
        "shared_experts": MOE * 2 * N * 1 * FE * 3,           # the shared expert's
    }
    for module, drop in drops.items():
        got = base - _layer_bytes(f"core_attn,{module}")
        assert got == pytest.approx(drop, rel=1e-9), module
    every = ",".join(RECOMPUTE_MODULES)
    assert base - _layer_bytes(every) == pytest.approx(sum(drops.values()), rel=1e-9)


def test_fp8_keeps_the_linear_inputs_in_fp8_hand_counted():
    """Transformer Engine keeps fp8 copies of the linear layers' inputs (1 byte instead of 2):
    the QKV and MLP inputs of both blocks, the dense and shared down-projections' inputs, the
    routed expert GEMMs' two inputs; the output projection keeps its copy besides the 16-bit
    attention output FlashAttention's backward needs (one byte more)."""
    saved = (2 * N * HID - N * A * D + DENSE_FRAC * N * F
             + MOE * (N * FE + N * K * FE + N * K * HID))
    assert _layer_bytes("core_attn") - _layer_bytes("core_attn", "fp8") == pytest.approx(
        saved, rel=1e-9)
    # with moe_act the down-projection's fp8 input is dropped instead of a 16-bit one
    got = _layer_bytes("core_attn", "fp8") - _layer_bytes("core_attn,moe_act", "fp8")
    assert got == pytest.approx(MOE * N * K * FE, rel=1e-9)


LLAMA = dict(num_gpus=8, micro_batch=1, global_batch=8, seq_len=8192, recompute="selective")


def _llama(modules: str, **kw):
    return predict_training("llama-3-8b", "h100-sxm5-80gb", recompute_modules=modules,
                            **{**LLAMA, **kw})


def test_recomputed_flops_hand_counted():
    """HFU - MFU: the recomputed SwiGLU MLP forward, ``B * L * 2*s*3*h*f`` FLOP; the
    recomputed attention core (FlashAttention's forward runs again, Megatron-Core), ``B * L *
    4*s^2*a*d`` (the full ``s x s`` matrix, as the model FLOPs count it)."""
    def extra(modules: str) -> float:
        r = _llama(modules)
        return r.values["flops_hardware"] - r.values["flops_model"]
    mlp = 8 * 32 * 2 * 8192 * 3 * 4096 * 14336
    attn = 8 * 32 * 4 * 8192**2 * 32 * 128
    assert extra("mlp") == pytest.approx(mlp, rel=1e-12)
    assert extra("core_attn") == pytest.approx(attn, rel=1e-12)
    assert extra("core_attn,mlp") == pytest.approx(mlp + attn, rel=1e-12)


def test_recompute_time_adds_up_over_modules_and_is_below_full():
    rec = {m: _llama(m).breakdown["recompute"]
           for m in ("core_attn", "layernorm", "mlp", "layernorm,mlp", "core_attn,mlp")}
    assert rec["core_attn"] > 0   # FlashAttention's forward again
    assert rec["layernorm"] > 0 and rec["mlp"] > 10 * rec["layernorm"]
    assert rec["layernorm,mlp"] == pytest.approx(rec["layernorm"] + rec["mlp"], rel=1e-12)
    assert rec["core_attn,mlp"] == pytest.approx(rec["core_attn"] + rec["mlp"], rel=1e-12)
    full = _llama("core_attn", recompute="full").breakdown["recompute"]
    assert rec["layernorm,mlp"] < full
    # nothing overlaps the recomputation on one node without pipelining: the step grows by it
    grow = _llama("layernorm,mlp").step_time - _llama("core_attn").step_time
    assert grow == pytest.approx(rec["layernorm,mlp"] - rec["core_attn"], rel=1e-9)


def test_module_breakdown_sums_to_step_time_with_modules():
    cfg = TrainingConfig(**LLAMA, recompute_modules="layernorm,mlp")
    v = training_inputs("llama-3-8b", "h100-sxm5-80gb", cfg)
    out = evaluate_terms(training_module_terms(), v)
    step = predict_training("llama-3-8b", "h100-sxm5-80gb", cfg).step_time
    rope = out["forward"]["rope"] + out["backward"]["rope"]
    assert sum(sum(m.values()) for m in out.values()) - rope == pytest.approx(step, rel=1e-9)
    base = evaluate_terms(training_module_terms(), training_inputs(
        "llama-3-8b", "h100-sxm5-80gb", TrainingConfig(**LLAMA)))
    rec = _llama("layernorm,mlp").breakdown["recompute"]
    grown = sum(out["backward"][m] - base["backward"][m] for m in ("rmsnorm", "mlp"))
    assert grown == pytest.approx(rec, rel=1e-9)


@pytest.mark.parametrize("fields, match", [
    (dict(recompute="none", recompute_modules="layernorm"),
     "recompute_modules: modules other than core_attn need recompute = selective"),
    (dict(recompute="full", recompute_modules="mlp"),
     "recompute_modules: modules other than core_attn need recompute = selective"),
    (dict(recompute="selective", recompute_modules="layernorm,attn"),
     "recompute_modules: must be a comma-separated subset of core_attn,layernorm"),
    (dict(recompute="selective", recompute_modules=""),
     "recompute_modules: must be a comma-separated subset"),
])
def test_bad_recompute_modules_name_the_field(fields, match):
    with pytest.raises(ConfigError, match=match):
        predict_training("llama-3-8b", "h100-sxm5-80gb", num_gpus=8, **fields)


def test_module_lists_are_canonical():
    f = TRAINING_FIELDS["recompute_modules"]
    assert coerce(f, " MLP, layernorm") == "layernorm,mlp"
    assert coerce(f, ["moe_act", "core_attn"]) == "core_attn,moe_act"
    assert _llama("mlp, layernorm").config.recompute_modules == "layernorm,mlp"


def test_search_prices_selective_candidates_with_the_modules():
    """``search(recompute_modules=...)``: selective candidates are no longer duplicates of no
    recomputation, each is priced with the modules (the table equals ``predict_training`` of
    its configuration), and the space is the default one plus those candidates."""
    from optimizers.search import search

    kw = dict(top=400, fix={"tp": 1, "pp": 1})
    plain = search("llama-3-8b", "h100-sxm5-80gb", 8, 64, **kw)
    res = search("llama-3-8b", "h100-sxm5-80gb", 8, 64, recompute_modules="mlp, layernorm",
                 **kw)
    assert res.recompute_modules == "layernorm,mlp"
    assert "selective" not in set(plain.table["recompute"])
    selective = res.table.index[res.table["recompute"] == "selective"]
    assert len(selective) > 0
    assert res.candidates == plain.candidates + len(res.extra["space"].frame().query(
        "recompute == 'selective'"))
    for i in selective[:5]:
        cfg = res.config(int(i))
        assert cfg.recompute_modules == "layernorm,mlp"
        r = predict_training("llama-3-8b", "h100-sxm5-80gb", cfg)
        assert r.step_time == pytest.approx(res.table["step_time"].iloc[int(i)], rel=1e-9)
        assert r.breakdown["recompute"] > 0
    none = res.table.index[res.table["recompute"] == "none"]
    assert res.config(int(none[0])).recompute_modules == "core_attn"
