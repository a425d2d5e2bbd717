"""Training model: hand-checked formulas, Korthikanti Table 2, properties and bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from symcost import symbols as S
from symcost import training as T
from symcost.api import evaluate_training, predict_training, training_inputs, training_model
from symcost.config import ConfigError, TrainingConfig
from symcost.fields import subset_bindings
from symcost.models import get_model

GPT3 = dict(model="gpt3-175b", hardware="a100-sxm4-80gb")
MEGATRON_175B = dict(num_gpus=1024, tp=8, pp=16, micro_batch=1, global_batch=1536,
                     recompute="full", flash_attention=False, dtype="fp16")

L, h, a, s, b, t, V = sp.symbols("L h a s b t V", positive=True)

# A GPT-style (Megatron) architecture: MHA, f = 4h, GeLU, biases, dropout.
#: a dense model without MLA or an explicit head width, no context or expert parallelism
DENSE = {S.n_experts: 0, S.top_k: 0, S.shared_experts: 0, S.moe_ffn_hidden: 0,
         S.dense_layers: 0, S.moe_layer_step: 1, S.kv_lora_rank: 0, S.q_lora_rank: 0,
         S.rope_head_dim: 0, S.head_dim_given: 0, S.cp: 1, S.ep: 1, S.fp8: 0, S.fp4: 0,
         S.hybrid: 0}  # a transformer, not a hybrid Mamba-Transformer
GPT_SUBS = {S.n_kv_heads: S.n_heads, S.ffn_hidden: 4 * S.hidden, S.gated_mlp: 0,
            S.has_dropout: 1, S.norm_bias: 1, S.has_bias: 1, **DENSE,
            S.train_framework: 0,  # Megatron's memory layout (Korthikanti et al. 2022)
            S.sliding_window: 0, S.mtp_layers: 0,  # GPT: full attention, no MTP module
            S.doc_len: 0,  # one document per sequence (the papers' pretraining)
            # selective recomputation of the core attention only (Table 2; the default)
            **{S.lookup(k): x for k, x in subset_bindings("recompute_modules",
                                                          "core_attn").items()}}


def _kv_not_replicated(*args):
    """Max(k, t) -> k: Table 2 assumes the KV heads split evenly over TP ranks."""
    return next(x for x in args if x.has(S.n_heads))


def _gpt(expr):
    return sp.simplify(expr.subs(GPT_SUBS).subs({
        S.n_layers: L, S.hidden: h, S.n_heads: a, S.seq_len: s, S.micro_batch: b, S.tp: t,
        S.vocab: V}))


def test_gpt3_parameter_count_hand_checked():
    # 12*L*h^2 + 13*L*h + V*h + s*h (learned positions) + 2*h (final LayerNorm);
    # Narayanan et al. 2021 report 174.6B for L=96, h=12288, V=51200, s=2048.
    Lv, hv, Vv, sv = 96, 12288, 51200, 2048
    expected = 12 * Lv * hv**2 + 13 * Lv * hv + Vv * hv + sv * hv + 2 * hv
    r = predict_training(**GPT3, **MEGATRON_175B)
    assert r.values["params_total"] == expected
    assert abs(expected / 174.6e9 - 1) < 1e-3
    assert get_model("gpt3-175b").num_params() == expected


@pytest.mark.parametrize("name", ["gpt3-175b", "gpt-1.7b", "mpt-7b", "llama-2-70b",
                                  "llama-3.1-405b", "mistral-7b"])
def test_parameter_count_agrees_with_model_spec(name):
    """Two implementations: the symbolic count (training.params_total) and the closed form
    of ModelSpec.num_params, for GPT (LayerNorm with bias), MPT (bias-free LayerNorm) and
    Llama/Mistral (RMSNorm, GQA, SwiGLU, untied)."""
    from symcost.config import model_bindings

    model = get_model(name)
    values = {S.lookup(k): v for k, v in model_bindings(model).items()}
    assert int(T.params_total().xreplace(values)) == model.num_params()
    rms_bias = model.replace(bias=True) if model.norm == "rmsnorm" else model
    values = {S.lookup(k): v for k, v in model_bindings(rms_bias).items()}
    assert int(T.params_total().xreplace(values)) == rms_bias.num_params()


def test_model_flops_equal_megatron_formula():
    # Korthikanti et al. 2022, Sec. 6: model FLOPs per step 72*B*s*L*h^2*(1 + s/(6h) + V/(12*L*h)).
    B = S.global_batch
    expr = T.training_expressions()["flops_model"].subs(GPT_SUBS)
    expected = 72 * B * S.seq_len * S.n_layers * S.hidden**2 * (
        1 + S.seq_len / (6 * S.hidden) + S.vocab / (12 * S.n_layers * S.hidden))
    assert sp.simplify(expr - expected) == 0


def test_hardware_flops_full_recompute_equal_nar21_formula():
    # Narayanan et al. 2021, Sec. 5.1: F = 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)).
    B = S.global_batch
    expr = T.training_expressions()["flops_hardware"].subs(GPT_SUBS).subs(
        {S.recompute: 2, S.recompute_layers: 0, S.flash_attn: 0})
    expected = 96 * B * S.seq_len * S.n_layers * S.hidden**2 * (
        1 + S.seq_len / (6 * S.hidden) + S.vocab / (16 * S.n_layers * S.hidden))
    assert sp.simplify(expr - expected) == 0


@pytest.mark.parametrize("sp_on, recompute, expected", [
    # Korthikanti et al. 2022, Table 2 (activation bytes per layer).
    (0, 0, s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    (1, 0, s * b * h / t * (34 + 5 * a * s / h)),
    (0, 1, s * b * h * (10 + 24 / t)),
    (1, 1, s * b * h * 34 / t),
    (0, 2, 2 * s * b * h),
])
def test_activation_memory_equals_korthikanti_table2(sp_on, recompute, expected):
    expr = T.activation_bytes_layer().subs({S.sp_on: sp_on, S.recompute: recompute,
                                            S.recompute_layers: 0, S.flash_attn: 0})
    # Table 2 assumes MHA and k divisible by t (no KV replication): Max(k, t) = k.
    expr = expr.subs(GPT_SUBS).replace(sp.Max, _kv_not_replicated)
    assert sp.simplify(_gpt(expr) - expected) == 0


def test_activation_memory_no_parallelism_is_34sbh_plus_5as2b():
    expr = T.activation_bytes_layer().subs({S.sp_on: 0, S.recompute: 0, S.flash_attn: 0,
                                            S.tp: 1})
    expr = expr.subs(GPT_SUBS).replace(sp.Max, _kv_not_replicated)
    assert sp.simplify(_gpt(expr) - (34 * s * b * h + 5 * a * s**2 * b)) == 0


def test_flash_attention_removes_s_squared_memory():
    expr = T.activation_bytes_layer().subs({S.sp_on: 0, S.recompute: 0, S.flash_attn: 1})
    assert sp.degree(sp.expand(_gpt(expr)), s) == 1


def test_breakdown_and_memory_sum_and_match_sympy():
    r = predict_training(**GPT3, **MEGATRON_175B)
    assert math.isclose(sum(r.breakdown.values()), r.step_time, rel_tol=1e-12)
    mem = r.memory
    assert math.isclose(mem["weights"] + mem["gradients"] + mem["optimizer"]
                        + mem["activations"], mem["total"], rel_tol=1e-12)
    ref = training_model("float64").evaluate_sympy(
        {S.lookup(k): v for k, v in r.inputs.items()})
    for k in ("step_time", "mfu", "hfu", "mem_total", "tokens_per_s"):
        assert math.isclose(r.values[k], ref[k], rel_tol=1e-11), k


def test_megatron_gpt3_memory_hand_checked():
    # TP8/PP16, ZeRO-0: the first stage holds 6 layers + embedding + positions.
    r = predict_training(**GPT3, **MEGATRON_175B)
    hv, Vv = 12288, 51200
    layer = 12 * hv**2 + 13 * hv
    psi = (6 * layer + Vv * hv + 2048 * hv) / 8
    assert r.memory["weights"] == pytest.approx(2 * psi, rel=1e-12)
    assert r.memory["optimizer"] == pytest.approx(12 * psi, rel=1e-12)
    # full recompute: 2*s*b*h per layer, 6 layers x min(m, p) = 16 micro-batches in flight,
    # plus one layer's working set without recomputation (Table 2, TP row) during backward.
    stored = 6 * 16 * 2 * 2048 * hv
    working = 2048 * hv * (10 + 24 / 8 + 5 * 96 * 2048 / (hv * 8))
    assert r.memory["activations"] == pytest.approx(stored + working, rel=1e-12)


def _single_gpu_reference(inp: dict) -> float:
    """Independent plain-Python single-GPU step time (no TP/PP/DP, unfused attention, no
    recompute, no dropout): the same roofline per operator written out by hand."""
    P = inp["peak_flops_16"] * inp["matmul_ceiling"] * inp["eff_gemm"]  # at the measured ceiling
    bw = inp["hbm_bw"] * inp["eff_hbm"]
    bb, ss, hh, aa, ff, VV = (inp[k] for k in ("micro_batch", "seq_len", "hidden", "n_heads",
                                              "ffn_hidden", "vocab"))
    n = bb * ss
    d = hh / aa

    def gemm(m, nn, k, batch=1, weight=True, size=1.0):
        fl = 2 * m * nn * k * batch
        by = 2 * (m * k * batch + (k * nn if weight else k * nn * batch) + m * nn * batch)
        return max(fl / (P * size), by / bw)

    # the layer's four dense GEMMs run at eff_gemm * n/(n + gemm_m_half) (GEMM size)
    z = n / (n + inp["gemm_m_half"])
    fwd = (gemm(n, 3 * hh, hh, size=z) + gemm(n, hh, hh, size=z) + gemm(n, ff, hh, size=z)
           + gemm(n, hh, ff, size=z)
           + gemm(ss, ss, d, bb * aa, False) + gemm(ss, d, ss, bb * aa, False)
           + bb * aa * ss**2 * 4 / bw          # softmax read+write
           + n * ff * 2 * 2 / bw               # GeLU
           + 2 * n * hh * 4 / bw               # two norms
           + 2 * n * hh * 6 / bw)              # two residual adds
    fwd += inp["t_layer_overhead"]
    bwd = 2 * fwd
    head_f = gemm(n, VV, hh) + 6 * n * VV * 4 / bw + 4 * n * hh / bw
    head_b = 2 * gemm(n, VV, hh) + 4 * n * hh / bw
    m = inp["global_batch"] / inp["micro_batch"]
    params = inp["n_layers"] * (12 * hh**2 + 13 * hh) + VV * hh + inp["max_seq_len"] * hh + 2 * hh
    opt = params * 28 / bw
    return m * (inp["n_layers"] * (fwd + bwd) + head_f + head_b) + opt + inp["t_step_overhead"]


def test_single_gpu_reduces_to_hand_written_model():
    model = get_model("gpt-1.7b").replace(dropout=False)
    cfg = TrainingConfig(num_gpus=1, micro_batch=2, global_batch=8, flash_attention=False,
                         seq_len=1024)
    r = predict_training(model, "a100-sxm4-80gb", cfg)
    for k in ("tp_comm", "pp_p2p", "pp_bubble", "dp_comm", "recompute"):
        assert r.breakdown[k] == 0.0, k
    assert r.step_time == pytest.approx(_single_gpu_reference(r.inputs), rel=1e-9)


_SPACE = st.fixed_dictionaries({
    "tp": st.sampled_from([1, 2, 4, 8]), "pp": st.sampled_from([1, 2, 4]),
    "dp": st.sampled_from([1, 2, 8, 64]), "mb": st.sampled_from([1, 2, 4]),
    "m": st.sampled_from([1, 4, 16]), "recompute": st.sampled_from(["none", "selective", "full"]),
    "zero": st.sampled_from([0, 1]), "sp": st.booleans(), "flash": st.booleans(),
    "model": st.sampled_from(["gpt-7.5b", "llama-2-13b", "llama-3-8b", "mpt-1b",
                              "mixtral-8x7b", "qwen3-30b-a3b", "deepseek-v3"]),
    "hw": st.sampled_from(["a100-sxm4-80gb", "h100-sxm5-80gb", "b200"]),
    "cp": st.sampled_from([1, 2, 4]), "ep": st.sampled_from([1, 2, 8]),
    "ep_overlap": st.booleans(), "dp_replicate": st.sampled_from([1, 2]),
    "tp_overlap": st.booleans(),
})


def _inputs(c):
    """A valid configuration from a draw: the rules' conditions on the new dimensions are met
    by construction (ep only for MoE and dividing tp*cp*dp and the experts, SP for MoE with
    TP, FlashAttention with CP, HSDP replicas dividing dp*cp, TP overlap only with SP)."""
    experts = get_model(c["model"]).experts
    ep = c["ep"] if experts and experts % c["ep"] == 0 and (
        c["tp"] * c["cp"] * c["dp"]) % c["ep"] == 0 else 1
    cfg = TrainingConfig(tp=c["tp"], pp=c["pp"], dp=c["dp"], micro_batch=c["mb"],
                         global_batch=c["mb"] * c["dp"] * c["m"], recompute=c["recompute"],
                         zero=c["zero"], sp=c["sp"] or (experts > 0 and c["tp"] > 1),
                         flash_attention=c["flash"] or c["cp"] > 1, seq_len=2048,
                         cp=c["cp"], ep=ep, ep_overlap=c["ep_overlap"],
                         tp_overlap=c["tp_overlap"] and (c["sp"] or c["tp"] == 1
                                                         or (experts > 0 and c["tp"] > 1)),
                         dp_replicate=c["dp_replicate"] if (c["dp"] * c["cp"]) % 2 == 0 else 1)
    return training_inputs(c["model"], c["hw"], cfg)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SPACE, st.sampled_from(["peak_flops_16", "hbm_bw", "intra_bw", "inter_bw", "eff_gemm",
                                "eff_hbm", "eff_inter", "eff_attn"]),
       st.floats(1.01, 4.0))
def test_step_time_never_rises_when_a_rate_rises(c, name, factor):
    inp = _inputs(c)
    faster = dict(inp)
    faster[name] = inp[name] * factor
    if name.startswith("eff_"):
        faster[name] = min(1.0, faster[name])
    out = evaluate_training({k: np.array([inp[k], faster[k]]) for k in inp}, "float64")
    assert out["step_time"][1] <= out["step_time"][0] * (1 + 1e-12)


def test_faster_gemms_do_not_expose_more_data_parallel_traffic():
    """The case hypothesis found (GPT 7.5B, A100, tp 2 with TP overlap, cp 2, dp 8, one
    micro-batch, ZeRO-1): 3x the 16-bit peak made the step 0.08% slower, because faster GEMMs
    hid less TP traffic while the data-parallel sync, overlapped with compute only, was
    exposed by exactly the compute saved. The overlap window now includes the exposed TP
    time: the step stays at the data-parallel bound."""
    c = {"tp": 2, "pp": 1, "dp": 8, "mb": 1, "m": 1, "recompute": "none", "zero": 1,
         "sp": True, "flash": False, "model": "gpt-7.5b", "hw": "a100-sxm4-80gb", "cp": 2,
         "ep": 1, "ep_overlap": False, "dp_replicate": 1, "tp_overlap": True}
    inp = _inputs(c)
    faster = {**inp, "peak_flops_16": 3 * inp["peak_flops_16"]}
    out = evaluate_training({k: np.array([inp[k], faster[k]]) for k in inp}, "float64")
    assert out["time_tp_comm"][1] > out["time_tp_comm"][0]  # more TP traffic exposed
    assert out["step_time"][1] <= out["step_time"][0] * (1 + 1e-12)


# 25 examples: each evaluates five outputs in SymPy; the regression snapshot replays 1,000
# stored configurations through the compiled model as well
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_SPACE)
def test_compiled_equals_sympy_random_configs(c):
    inp = _inputs(c)
    got = evaluate_training(inp, "float64")
    names = ("step_time", "mfu", "mem_total", "mem_activations", "time_dp_comm")
    ref = training_model("float64").evaluate_sympy({S.lookup(k): v for k, v in inp.items()},
                                                   names)
    for k in names:
        assert math.isclose(float(got[k]), ref[k], rel_tol=1e-10, abs_tol=1e-300), k
    got32 = evaluate_training(inp, "float32")
    assert math.isclose(float(got32["step_time"]), ref["step_time"], rel_tol=1e-4)


def test_fp8_casts_weights_once_per_step():
    """Weight casts do not grow with the micro-batch count; activation casts do."""
    def fwd(m):
        r = predict_training("gpt-7.5b", "h100-sxm5-80gb", num_gpus=8, tp=8, dtype="fp8",
                             global_batch=m)
        return r.breakdown["forward"], r.inputs

    (f1, inp), (f4, _) = fwd(1), fwd(4)
    m1 = T.fp8_weight_cast_bytes_layer().xreplace({S.lookup(k): v for k, v in inp.items()})
    per_step = 36 * float(m1) / (inp["hbm_bw"] * inp["eff_hbm"])
    # forward(m) = m * per-micro-batch forward + once-per-step weight cast
    assert f4 - per_step == pytest.approx(4 * (f1 - per_step), rel=1e-12)
    assert per_step > 0


def test_more_tp_lowers_memory_and_interleaving_shrinks_bubble():
    base = dict(num_gpus=512, micro_batch=1, global_batch=512, recompute="selective", sp=True)
    r1 = predict_training("llama-2-70b", "h100-sxm5-80gb", tp=4, pp=8, **base)
    r2 = predict_training("llama-2-70b", "h100-sxm5-80gb", tp=8, pp=8, **base)
    assert r2.memory["total"] < r1.memory["total"]
    r3 = predict_training("llama-2-70b", "h100-sxm5-80gb", tp=8, pp=8, vpp=5, **base)
    assert r3.breakdown["pp_bubble"] == pytest.approx(r2.breakdown["pp_bubble"] / 5, rel=0.05)
    # 1F1B blocks on its sends; the interleaved schedule hides them behind its chunks
    assert r2.breakdown["pp_p2p"] > 0 and r3.breakdown["pp_p2p"] == 0


def test_zero_stages_shrink_memory_in_order():
    mems = [predict_training("llama-3-8b", "h100-sxm5-80gb", num_gpus=64, zero=z,
                             global_batch=64).memory for z in range(4)]
    assert mems[0]["optimizer"] > mems[1]["optimizer"] == pytest.approx(mems[0]["optimizer"] / 64)
    assert mems[1]["gradients"] > mems[2]["gradients"]
    assert mems[2]["weights"] > mems[3]["weights"]


@pytest.mark.parametrize("fields, match", [
    (dict(tp=7, num_gpus=7), "tp: 7 does not divide the number of attention heads"),
    (dict(num_gpus=1000, tp=8, pp=16), "num_gpus: 1000 is not divisible by tp\\*cp\\*pp"),
    (dict(tp=8, pp=16, dp=8, num_gpus=512), "num_gpus: tp\\*cp\\*pp\\*dp"),
    (dict(num_gpus=64, tp=8, global_batch=12), "global_batch: 12 is not divisible"),
    (dict(tp=-2), "tp: must be a positive integer"),
    (dict(micro_batch=0), "micro_batch: must be a positive integer"),
    (dict(pp=200), "pp: 200 exceeds the number of layers"),
    (dict(recompute="some"), "recompute: must be one of none, selective, full"),
    (dict(zero=5), "zero: must be one of 0, 1, 2, 3"),
    (dict(zero=3, pp=2, num_gpus=2, global_batch=8), "zero: ZeRO-3 .* pipeline"),
    (dict(pp=2, num_gpus=2), "global_batch: must be given when pp > 1"),
    (dict(seq_len=1e30), r"seq_len: must be a positive integer \(at most 16777216\)"),
    (dict(dtype="fp8"), "dtype: a100-sxm4-80gb has no fp8"),
    (dict(vpp=2), "vpp: the interleaved schedule \\(vpp > 1\\) needs pp > 1"),
    (dict(seq_len=4096), "seq_len: 4096 exceeds the model's learned positions"),
    (dict(sp=3), "sp: must be on/off"),
    (dict(flash_attention="maybe"), "flash_attention: must be on/off"),
    (dict(dp_overlap=7), "dp_overlap: must be on/off"),
])
def test_bad_config_errors_name_field_and_rule(fields, match):
    with pytest.raises(ConfigError, match=match):
        predict_training(**GPT3, **fields)


def test_tp_must_divide_ffn_and_kv_heads_rule():
    llama = get_model("llama-2-70b")
    with pytest.raises(ConfigError, match="tp: 8 and kv_heads \\(12\\) must divide one another"):
        predict_training(llama.replace(hidden=6144, heads=48, kv_heads=12), "h100-sxm5-80gb",
                         tp=8, num_gpus=8)
    with pytest.raises(ConfigError, match="does not divide ffn_hidden"):
        predict_training(llama.replace(ffn_hidden=28674), "h100-sxm5-80gb", tp=4, num_gpus=4)


def test_evaluate_training_does_not_recompile_for_a_new_length():
    """New array lengths reuse the bucketed compiled chunk (one evaluator): the jit cache of
    the chunk function holds one entry after three different lengths."""
    from symcost import evaluate as EV
    from symcost.api import training_inputs, training_model

    inp = training_inputs("gpt-1.7b", "a100-sxm4-40gb", TrainingConfig(tp=2, num_gpus=8))
    cm = training_model("float32")
    values = []
    for n in (3, 17, 1000):
        batch = {k: np.full(n, v) for k, v in inp.items()}
        values.append(evaluate_training(batch, "float32")["step_time"])
    key = (cm.key, cm.dtype, cm.outputs, cm.input_names, ())
    assert EV._MODEL_FUNCTIONS[key]._cache_size() == 1
    assert values[0][0] == values[1][0] == values[2][-1]
