"""Hybrid Mamba-Transformer models (Nemotron-H, Nemotron-3): the block pattern, Mamba-2
parameters and costs, the Megatron-Bridge FLOP count, the rules, and a second implementation:
a hybrid pattern of attention and MLP blocks is the transformer it spells out."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import get_model, load_params, predict_inference, predict_training
from symcost import symbols as S
from symcost import training as T
from symcost.config import model_bindings
from symcost.fields import ConfigError
from symcost.models import ModelSpec, ModelSpecError
from symcost.ops import ssm
from symcost.params import Params
from symcost.validate import megatron_flops_per_token, prepare_rows, unmodelled_reason

SHARED = Path(__file__).resolve().parents[2] / "shared" / "validation" / \
    "published_measurements.csv"


# ------------------------------------------------------------------------ presets, params
def test_nano_mamba_mixer_parameters_by_hand():
    """Nemotron-3 Nano's Mamba-2 mixer (h 2688, 64 heads of 64, state 128, 8 groups):
    in_proj 2688*(2*4096 + 2*8*128 + 64) = 27,697,152; conv (4096 + 2048)*(4 + 1) = 30,720;
    dt bias, A, D 3*64 = 192; gated norm 4096; out_proj 4096*2688 = 11,010,048."""
    nano = get_model("nemotron-3-nano")
    assert nano.mamba_params() == 27_697_152 + 30_720 + 192 + 4096 + 11_010_048
    sym = T.params_mamba().subs({getattr(S, k): v for k, v in (
        ("hidden", 2688), ("mamba_heads", 64), ("mamba_head_dim", 64), ("mamba_state", 128),
        ("mamba_groups", 8))})
    assert sym == nano.mamba_params()


def test_presets_have_their_published_sizes():
    """NVIDIA: Nemotron 3 Nano 30B-A3B has 31.6B parameters, 3.6B active with embeddings;
    Nemotron-H 8B and 56B (arXiv:2504.03624). Block counts from the patterns."""
    nano = get_model("nemotron-3-nano")
    assert nano.num_params() == pytest.approx(31.6e9, rel=0.005)
    assert nano.active_params() == pytest.approx(3.6e9, rel=0.01)
    assert (nano.attention_layers, nano.mamba_layers, nano.mlp_layers, nano.moe_layers) == \
        (6, 23, 0, 23)
    h8 = get_model("nemotron-h-8b")
    assert h8.num_params() == pytest.approx(8.1e9, rel=0.01)
    assert (h8.attention_layers, h8.mamba_layers, h8.mlp_layers) == (4, 24, 24)
    h56 = get_model("nemotron-h-56b")
    assert h56.num_params() == pytest.approx(56e9, rel=0.01)
    assert (h56.attention_layers, h56.mamba_layers, h56.mlp_layers) == (10, 54, 54)


@pytest.mark.parametrize("name", ["nemotron-3-nano", "nemotron-h-8b", "nemotron-h-56b"])
def test_symbolic_parameter_count_equals_the_spec(name):
    """Second implementation: the training model's average-layer parameters times L plus
    embeddings (``params_total``) equal ModelSpec.num_params, block by block."""
    spec = get_model(name)
    vals = {S.REGISTRY[k].symbol: v for k, v in model_bindings(spec).items()}
    assert float(T.params_total().subs(vals)) == pytest.approx(spec.num_params(), rel=1e-12)


def test_pattern_rules_name_the_field():
    base = dataclasses.asdict(get_model("nemotron-h-8b"))
    with pytest.raises(ModelSpecError, match="hybrid_pattern has 51 blocks but layers is 52"):
        ModelSpec(**{**base, "hybrid_pattern": base["hybrid_pattern"][:-1]})
    with pytest.raises(ModelSpecError, match="may only hold"):
        ModelSpec(**{**base, "hybrid_pattern": "X" * 52})
    with pytest.raises(ModelSpecError, match="E \\(MoE\\) blocks exactly when experts"):
        ModelSpec(**{**base, "hybrid_pattern": "E" * 52})
    with pytest.raises(ModelSpecError, match="mamba_groups"):
        ModelSpec(**{**base, "mamba_groups": 3})
    with pytest.raises(ModelSpecError, match="need a hybrid_pattern"):
        get_model("llama-2-7b").replace(mamba_heads=8)


# ------------------------------------------------------------------------ SSD operator
def test_ssd_scan_work_by_hand():
    """One token, 2 heads of 4, 1 group, state 8, chunk 128: FLOP 2*128*8 + 2*(2*128*4 +
    4*8*4) = 4352; bytes (x, B, C twice, y: 3*8 + 4*8 = 56 16-bit) 112 + dt 2*(2 + 12) = 28
    + C B^T 8*128 = 1024 + states 16*2*4*8/128 = 8 -> 1172."""
    c = ssm.ssd_scan(sp.Integer(1), 2, 4, 1, 8, S.peak_flops_16)
    assert c.flops == 4352
    assert c.bytes == 1172
    b = ssm.ssd_scan_backward(sp.Integer(1), 2, 4, 1, 8, S.peak_flops_16)
    assert (b.flops, b.bytes) == (2 * 4352, 2 * 1172)


# ------------------------------------------------------------------------ a second implementation
def _no_layer_overhead() -> Params:
    p = load_params()
    return dataclasses.replace(p, generations={
        g: {**v, "t_layer_overhead": 0.0} for g, v in p.generations.items()})


@settings(max_examples=12, deadline=None)
@given(tp=st.sampled_from([1, 2, 4]), mb=st.sampled_from([1, 2]),
       recompute=st.sampled_from(["none", "selective"]), sp_=st.booleans(),
       dtype=st.sampled_from(["bf16", "fp8"]))
def test_attention_mlp_pattern_is_the_transformer(tp, mb, recompute, sp_, dtype):
    """A hybrid whose pattern is ``*-`` repeated L times (2L blocks) is the L-layer
    transformer: same step time (no per-layer fixed overhead: it is paid per block), FLOPs,
    weights, activations and tensor-parallel traffic."""
    base = get_model("llama-2-7b").replace(layers=8)
    hyb = base.replace(layers=16, hybrid_pattern="*-" * 8)
    params = _no_layer_overhead()
    kw = dict(num_gpus=8, tp=tp, micro_batch=mb, global_batch=64, recompute=recompute,
              sp=sp_ and tp > 1, dtype=dtype, zero=1)
    a = predict_training(base, "h100-sxm5-80gb", params=params, **kw).values
    b = predict_training(hyb, "h100-sxm5-80gb", params=params, **kw).values
    for key in ("step_time", "flops_model", "mem_weights", "mem_activations", "time_tp_comm",
                "time_dp_comm", "mem_total"):
        assert b[key] == pytest.approx(a[key], rel=1e-9), key


def test_hybrid_model_flops_by_hand():
    """Model FLOPs of Nemotron-H 8B (4 attention, 24 MLP, 24 Mamba-2 blocks; h 4096, 32
    heads of 128, 8 KV heads, f 21504, 128 Mamba heads of 64, state 128, 8 groups, V 131072)
    for 64 sequences of 8192 tokens, block by block: 3 * B * (2s * linear weights + the
    attention cores 4 s^2 a d + the SSD scans + the logits 2 s h V)."""
    s, B, h = 8192, 64, 4096
    attn_w = h * 128 * (32 + 2 * 8) + 32 * 128 * h
    mlp_w = 2 * h * 21504
    mamba_w = ((2 * 128 * 64 + 2 * 8 * 128 + 128) + 128 * 64) * h
    ssd_tok = 8 * 2 * 128 * 128 + 128 * (2 * 128 * 64 + 4 * 128 * 64)
    per_seq = (4 * (2 * s * attn_w + 4 * s * s * 32 * 128) + 24 * 2 * s * mlp_w
               + 24 * (2 * s * mamba_w + s * ssd_tok) + 2 * s * h * 131072)
    r = predict_training("nemotron-h-8b", "h100-sxm5-80gb", num_gpus=8, tp=2, micro_batch=1,
                         global_batch=B, dtype="fp8")
    assert r.values["flops_model"] == pytest.approx(3 * B * per_seq, rel=1e-12)


def test_slower_mamba_kernels_lengthen_only_the_mixer_terms():
    """Halving ``eff_ssm`` doubles the time of the convolution, scan and gated norm and
    moves nothing else: the step grows by exactly their time at the shipped value."""
    p = load_params()
    half = dataclasses.replace(p, generations={
        g: {**v, "eff_ssm": v["eff_ssm"] / 2} for g, v in p.generations.items()})
    kw = dict(num_gpus=8, tp=2, micro_batch=1, global_batch=64, dtype="fp8")
    a = predict_training("nemotron-h-8b", "h100-sxm5-80gb", params=p, **kw)
    b = predict_training("nemotron-h-8b", "h100-sxm5-80gb", params=half, **kw)
    subs = {S.REGISTRY[k].symbol: v for k, v in a.inputs.items() if k in S.REGISTRY}
    fwd, bwd = T.layer_forward_compute(), T.layer_backward_compute()
    mixer = sum(float((c[k].time).subs(subs)) for c in (fwd, bwd)
                for k in ("mamba_conv", "mamba_scan", "mamba_norm"))
    steps = 64 / 4 * 52  # micro-batches (dp 4) x layers
    assert b.values["time_forward"] + b.values["time_backward"] - (
        a.values["time_forward"] + a.values["time_backward"]) == pytest.approx(
        steps * mixer, rel=1e-9)
    assert b.values["flops_model"] == a.values["flops_model"]


# ------------------------------------------------------------------------ rules
def test_rules_for_hybrids():
    odd = get_model("nemotron-h-8b").replace(mamba_heads=120)  # 8 groups of 15 heads
    with pytest.raises(ConfigError, match="^tp: 16 does not divide the Mamba-2 heads "
                                          "\\(120\\) and groups \\(8\\)"):
        predict_training(odd, "h100-sxm5-80gb", num_gpus=16, tp=16, micro_batch=1,
                         global_batch=1)
    with pytest.raises(ConfigError, match="^cp: 2 > 1 with a hybrid"):
        predict_training("nemotron-h-8b", "h100-sxm5-80gb", num_gpus=2, cp=2, micro_batch=1,
                         global_batch=1)
    with pytest.raises(ConfigError, match="^finetune: hybrid Mamba-Transformer models"):
        predict_training("nemotron-h-8b", "h100-sxm5-80gb", num_gpus=1, micro_batch=1,
                         global_batch=1, finetune="lora")
    with pytest.raises(ConfigError, match="^model: serving hybrid Mamba-Transformer"):
        predict_inference("nemotron-h-8b", "h100-sxm5-80gb", batch=1, input_len=128,
                          output_len=16)


# ------------------------------------------------------------------------ validation
@pytest.fixture(scope="module")
def shared() -> pd.DataFrame:
    if not SHARED.exists():
        pytest.skip("shared/validation/published_measurements.csv not present")
    return pd.read_csv(SHARED)


def test_bridge_hybrid_count_reproduces_published_flop_rates(shared):
    """Megatron-Bridge's hybrid count (flop_utils.hybrid_flops @067f987) gives every
    Nemotron-3 Nano run's published model TFLOP/s over its tokens/s to 1.5% (the published
    figures are rounded)."""
    nano = get_model("nemotron-3-nano")
    rows = shared[shared.model == "Nemotron-3-Nano"]
    run = rows.case_id.str.replace(r"-(tflops|tpsg)$", "", regex=True)
    n = 0
    for _, g in rows.groupby(run):
        d = dict(zip(g.metric, g.value))
        if {"model_tflops_per_gpu", "tokens_per_s_per_gpu"} <= set(d):
            f, _ = megatron_flops_per_token(nano, float(g.seq_len.iloc[0]),
                                            counter="megatron_bridge", tp=int(g.tp.iloc[0]))
            ratio = d["model_tflops_per_gpu"] * 1e12 / d["tokens_per_s_per_gpu"] / f
            assert ratio == pytest.approx(1.0, abs=0.015)
            n += 1
    assert n >= 15


def test_hybrid_rows_are_predicted_with_their_preset_and_others_skipped(shared):
    prepared, skipped = prepare_rows(shared)
    nano = [r for r in prepared if r.model.name == "Nemotron-3-Nano"]
    assert len(nano) == 40 and all(r.model.is_hybrid and r.model.mamba_layers == 23
                                   for r in nano)
    # Nemotron 3 Ultra and 3.5 Lightning have presets (tests/test_latent_moe.py); a hybrid
    # without one is refused, naming the model
    assert not [s for s in skipped if "Ultra" in s.case_id or "Lightning" in s.case_id]
    assert unmodelled_reason({"model": "Nemotron-9-Giga", "notes": "hybrid Mamba-MoE"}) == (
        "model: hybrid Mamba-Transformer 'Nemotron-9-Giga' has no preset with its block "
        "pattern and Mamba-2 sizes (no column gives them)")
    # Nemotron 3 Super has a preset (tests/test_latent_moe.py): all its runs are predicted
    assert not [s for s in skipped if "Super" in s.case_id]
    assert unmodelled_reason({"model": "Nemotron-3-Nano", "notes": "hybrid Mamba"}) is None
    # a row stating another layer count cannot take the preset's pattern: refused, not
    # predicted as a transformer
    row = shared[shared.model == "Nemotron-3-Nano"].iloc[:1].copy()
    row["layers"] = 48
    none, (skip,) = prepare_rows(row)
    assert none == [] and skip.reason == ("layers: 48 does not match the block pattern of the "
                                          "hybrid preset 'nemotron-3-nano' (52 blocks)")


# ------------------------------------------------------------------------ Hugging Face configs
#: Nemotron-3 Nano's config.json as published (the fields symcost reads; HF
#: nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16, as copied by fine-tunes such as
#: OpenResearcher/OpenResearcher-30B-A3B): one shared expert of width 3712.
NANO_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hybrid_override_pattern": "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME",
    "hidden_size": 2688, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
    "intermediate_size": 1856, "mamba_num_heads": 64, "mamba_head_dim": 64,
    "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "chunk_size": 128,
    "n_routed_experts": 128, "num_experts_per_tok": 6, "moe_intermediate_size": 1856,
    "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 3712,
    "mlp_hidden_act": "relu2", "attention_bias": False, "mlp_bias": False,
    "max_position_embeddings": 262144, "vocab_size": 131072, "tie_word_embeddings": False,
    "layer_norm_epsilon": 1e-5,
}


def test_nemotron_h_config_json_is_the_preset(tmp_path):
    """The published config.json gives the preset's architecture: same blocks, Mamba-2 sizes
    and parameter count (the 3712-wide shared expert counted as two of 1856)."""
    import json
    from symcost.models import from_hf_config
    path = tmp_path / "config.json"
    path.write_text(json.dumps(NANO_HF))
    spec = from_hf_config(path)
    nano = get_model("nemotron-3-nano")
    assert spec.hybrid_pattern == nano.hybrid_pattern
    assert (spec.mamba_heads, spec.mamba_head_dim, spec.mamba_state, spec.mamba_groups) == \
        (64, 64, 128, 8)
    assert spec.num_params() == nano.num_params()
    # the list form of the pattern (newer configs) and the refusals
    listed = {k: v for k, v in NANO_HF.items() if k != "hybrid_override_pattern"}
    kinds = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
    listed["layers_block_type"] = [kinds[c] for c in NANO_HF["hybrid_override_pattern"]]
    path.write_text(json.dumps(listed))
    assert from_hf_config(path).hybrid_pattern == nano.hybrid_pattern
    # LatentMoE (Nemotron 3 Super) is read: tests/test_latent_moe.py
    path.write_text(json.dumps({**NANO_HF, "moe_latent_size": 1024}))
    assert from_hf_config(path).moe_latent_size == 1024
