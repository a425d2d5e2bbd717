"""LatentMoE (``moe_latent_size``) and the MTP blocks of a hybrid model (``mtp_pattern``):
Nemotron 3 Super's parameter count against its checkpoint, hand counts of the latent
projections, the latent-wide expert GEMMs and all-to-all, the model FLOPs, Megatron-Bridge's
FLOP count against the published TFLOP/s of every Nemotron 3 Super run, the config.json
import and the rules.

Hand values use the tiny MoE of ``tests/test_moe_terms.py`` (16 tokens, hidden 8, 4 experts,
top-2, expert FFN 4, SwiGLU, one leading dense layer of 4) with a latent width of 4.
"""

from __future__ import annotations

import dataclasses
import json
import pytest
import sympy as sp

from symcost import get_model, predict_training
from symcost import symbols as S
from symcost import training as T
from symcost.config import model_bindings
from symcost.models import ModelSpec, ModelSpecError, from_hf_config
from symcost.validate import megatron_flops_per_token, prepare_rows

from test_moe_terms import TINY

LATENT = {**TINY, "moe_latent_size": 4}


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(sp.sympify(expr).xreplace({S.lookup(k): v for k, v in values.items()}))


# ------------------------------------------------------------------------ Nemotron 3 Super
def test_super_parameter_count_is_the_checkpoints():
    """Megatron-Bridge's verification card of Nemotron 3 Super (examples/
    model_verification_cards/nemotron-3-super-120b-a12b/card.yaml @067f987) exports
    123,611,033,088 elements, 41 of its tensors the fp32 router correction biases of 512
    experts (40 MoE blocks and the MTP block's): 123,611,012,096 weights. The MTP block
    ('*E') holds, by hand: attention 4096*128*(32 + 2*2) + 32*128*4096 = 35,651,584; MoE
    router 4096*512 = 2,097,152, 512 latent experts 512*2*1024*2688 = 2,818,572,288, two
    shared experts of 2688 2*2*4096*2688 = 44,040,192, latent projections 2*4096*1024 =
    8,388,608; the 2h -> h projection 2*4096*4096 = 33,554,432; five norms 5*4096 = 20,480:
    2,942,324,736. The preset counts the rest exactly (120.67B; NVIDIA: 120B total, 12B
    active)."""
    sup = get_model("nemotron-3-super")
    mtp = (35_651_584 + 2_097_152 + 2_818_572_288 + 44_040_192 + 8_388_608 + 33_554_432
           + 20_480)
    assert mtp == 2_942_324_736
    assert sup.num_params() + mtp == 123_611_033_088 - 41 * 512
    assert sup.active_params() == pytest.approx(12.8e9, rel=0.01)
    assert (sup.attention_layers, sup.mamba_layers, sup.moe_layers) == (8, 40, 40)


def test_symbolic_parameter_count_equals_the_spec():
    """Second implementation: the training model's average-layer parameters (routed experts
    ``l``-wide, shared experts and the router ``h``-wide, the ``2*h*l`` projections) times L
    plus embeddings equal ModelSpec.num_params."""
    spec = get_model("nemotron-3-super")
    vals = {S.REGISTRY[k].symbol: v for k, v in model_bindings(spec).items()}
    assert float(T.params_total().subs(vals)) == pytest.approx(spec.num_params(), rel=1e-12)


def test_bridge_count_reproduces_every_super_flop_rate(shared_measurements):
    """Megatron-Bridge's hybrid count with the LatentMoE blocks (``moe_layer_flops``: routed
    ``4*l*f_e*k`` plus ``4*h*l``) and the two MTP passes' '*E' blocks is 84.73 GFLOP per
    token; every Nemotron 3 Super run's published model TFLOP/s over its tokens/s (30 runs,
    B200/B300/GB200/GB300, MXFP8/NVFP4) is that to 1% (the published figures are rounded).
    Without the latent (experts h-wide) the count would be 2x; without the MTP blocks 3.4%
    low."""
    sup = get_model("nemotron-3-super")
    shared = shared_measurements
    rows = shared[shared.model == "Nemotron-3-Super-120B-A12B"]
    run = rows.case_id.str.replace(r"-(tflops|tpsg)$", "", regex=True)
    n = 0
    for _, g in rows.groupby(run):
        d = {m: float(v) for m, v in zip(g.metric, g.value)}
        f, _ = megatron_flops_per_token(sup, float(g.seq_len.iloc[0]),
                                        counter="megatron_bridge", tp=int(g.tp.iloc[0]))
        ratio = d["model_tflops_per_gpu"] * 1e12 / d["tokens_per_s_per_gpu"] / f
        assert ratio == pytest.approx(1.0, abs=0.01)
        n += 1
    assert n == 30
    flat = dataclasses.replace(sup, mtp_pattern="")
    assert megatron_flops_per_token(flat, 8192.0, counter="megatron_bridge", tp=1)[0] == \
        pytest.approx(f / 1.034, rel=0.005)


def test_super_rows_are_predicted_with_the_latent(shared_measurements):
    """The rows give no architecture columns: the preset's latent width, MTP blocks, pattern
    and Mamba-2 sizes are taken over (a row's model with h-wide experts would be another
    model). All 60 are predicted, the six on B300 in NVFP4 at b300.yaml's 13.5 PFLOPS."""
    shared = shared_measurements
    prepared, skipped = prepare_rows(shared[shared.model == "Nemotron-3-Super-120B-A12B"])
    assert len(prepared) == 60 and not skipped
    assert sum(r.hardware.name == "b300" and r.config.dtype == "nvfp4" for r in prepared) == 6
    assert {(r.model.moe_latent_size, r.model.mtp_pattern, r.model.mtp_layers)
            for r in prepared} == {(1024, "*E", 2)}
    # its recipes' HybridEP dispatcher (validate.BRIDGE_EP_DEDUP) and, in NVFP4, the last 14
    # blocks in BF16 (validate.BRIDGE_BF16_LAYERS)
    assert all(r.config.ep_dedup for r in prepared)
    assert {(r.config.dtype, r.config.bf16_layers) for r in prepared} == {
        ("mxfp8", 0), ("nvfp4", 14)}


# ------------------------------------------------------------------ Nemotron 3 Ultra, 3.5 Lightning
def test_ultra_preset_is_the_published_model():
    """Nemotron 3 Ultra (``nemotron-3-ultra``): 108 blocks, attention at 7, 14, 23, 32, 39,
    48, 57, 64, 73, 82, 89 and 98 and the rest alternating Mamba-2 and LatentMoE: 12 / 48 /
    48 blocks (the config's ``layers_block_type``). 549.3B parameters without the MTP block
    (NVIDIA: 550B total, 55B active). Its MTP block ('*E') holds, by hand: attention
    8192*128*(64 + 2*2) + 64*128*8192 = 138,412,032; router 8192*512 = 4,194,304; 512 latent
    experts 512*2*2048*5120 = 10,737,418,240; two shared experts of 5120 2*2*8192*5120 =
    167,772,160; latent projections 2*8192*2048 = 33,554,432; the 2h -> h projection
    2*8192*8192 = 134,217,728; five norms 5*8192 = 40,960: 11,215,609,856. With it the
    BF16 checkpoint is 1,121 GB, the size listed for nvidia/NVIDIA-Nemotron-3-Ultra-550B-
    A55B-BF16 (two bytes per weight; the 49 fp32 router biases are 0.1 MB)."""
    ultra = get_model("nemotron-3-ultra")
    assert (ultra.attention_layers, ultra.mamba_layers, ultra.moe_layers) == (12, 48, 48)
    assert [i for i, b in enumerate(ultra.hybrid_pattern) if b == "*"] == [
        7, 14, 23, 32, 39, 48, 57, 64, 73, 82, 89, 98]
    mtp = (138_412_032 + 4_194_304 + 10_737_418_240 + 167_772_160 + 33_554_432
           + 134_217_728 + 40_960)
    assert mtp == 11_215_609_856
    assert ultra.num_params() == pytest.approx(550e9, rel=0.002)
    assert round(2 * (ultra.num_params() + mtp) / 1e9) == 1121
    assert ultra.active_params() == pytest.approx(55e9, rel=0.02)
    assert get_model("NVIDIA/NVIDIA-Nemotron-3-Ultra-550B-A55B-BF16") == ultra


def test_lightning_is_nano_with_mtp_and_the_checkpoints_count():
    """Nemotron 3.5 Lightning has Nemotron 3 Nano's architecture, trained with MTP
    (Megatron-Bridge examples/models/nemotron/nemotron_3/lightning/README.md @067f987).
    Its verification card (examples/model_verification_cards/nemotron-3.5-lightning/
    card.yaml) exports 32,913,266,240 parameters: the Nano blocks, 24 fp32 router biases of
    128 experts (23 MoE blocks and the MTP block's) and the MTP block ('*E'), by hand:
    attention 2688*128*(32 + 2*2) + 32*128*2688 = 23,396,352; router 2688*128 = 344,064;
    128 squared-ReLU experts 128*2*2688*1856 = 1,277,165,568; two shared experts of 1856
    2*2*2688*1856 = 19,955,712; the 2h -> h projection 2*2688*2688 = 14,450,688; five norms
    5*2688 = 13,440: 1,335,325,824."""
    nano, light = get_model("nemotron-3-nano"), get_model("nemotron-3.5-lightning")
    same = {k: v for k, v in dataclasses.asdict(light).items()
            if k not in ("name", "source", "mtp_layers", "mtp_pattern")}
    assert same == {k: v for k, v in dataclasses.asdict(nano).items() if k in same}
    assert (light.mtp_layers, light.mtp_pattern) == (2, "*E")
    mtp = 23_396_352 + 344_064 + 1_277_165_568 + 19_955_712 + 14_450_688 + 13_440
    assert mtp == 1_335_325_824
    assert light.num_params() + mtp + 24 * 128 == 32_913_266_240


def test_bridge_count_reproduces_the_ultra_and_lightning_flop_rates(shared_measurements):
    """Megatron-Bridge's hybrid count with the presets' blocks (LatentMoE for Ultra, the two
    MTP passes for both) against each published model TFLOP/s over tokens/s: Lightning on 8
    GB200 to 0.1% (28.15 GFLOP per token against Nano's 22.28: the MTP passes), Ultra on 256
    GB300 to 0.5% and on 256 GB200 (TP2) to 1.7% (358.9 GFLOP per token)."""
    shared = shared_measurements
    seen = {}
    for model, preset, tol in (("Nemotron-3.5-Lightning", "nemotron-3.5-lightning", 0.001),
                               ("Nemotron-3-Ultra", "nemotron-3-ultra", 0.02)):
        spec = get_model(preset)
        rows = shared[shared.model == model]
        run = rows.case_id.str.replace(r"-(tflops|tpsg)$", "", regex=True)
        for _, g in rows.groupby(run):
            d = {m: float(v) for m, v in zip(g.metric, g.value)}
            f, _ = megatron_flops_per_token(spec, float(g.seq_len.iloc[0]),
                                            counter="megatron_bridge", tp=int(g.tp.iloc[0]))
            ratio = d["model_tflops_per_gpu"] * 1e12 / d["tokens_per_s_per_gpu"] / f
            assert ratio == pytest.approx(1.0, abs=tol)
            seen[model] = seen.get(model, 0) + 1
    assert seen == {"Nemotron-3.5-Lightning": 1, "Nemotron-3-Ultra": 2}
    nano = megatron_flops_per_token(get_model("nemotron-3-nano"), 8192.0,
                                    counter="megatron_bridge", tp=1)[0]
    light = megatron_flops_per_token(get_model("nemotron-3.5-lightning"), 8192.0,
                                     counter="megatron_bridge", tp=1)[0]
    assert (nano / 1e9, light / 1e9) == (pytest.approx(22.28, abs=0.01),
                                         pytest.approx(28.15, abs=0.01))


def test_ultra_and_lightning_rows_are_predicted_with_their_presets(shared_measurements):
    """Their rows give no architecture columns; the presets' patterns, MTP blocks and
    latent width are taken over, and all six rows (tokens/s and TFLOP/s) are predicted."""
    shared = shared_measurements
    rows = shared[shared.model.isin(["Nemotron-3-Ultra", "Nemotron-3.5-Lightning"])]
    prepared, skipped = prepare_rows(rows)
    assert len(prepared) == 6 and not skipped
    assert {(r.model.mamba_layers, r.model.moe_latent_size, r.model.mtp_layers)
            for r in prepared} == {(48, 2048, 2), (23, 0, 2)}


# ------------------------------------------------------------------------ hand counts
def test_latent_expert_gemms_projections_and_all_to_all_by_hand():
    """Tiny MoE with l = 4 (h = 8): MoE fraction 0.75, 32 routed copies over 2 local
    experts (16 each).

    * expert_up: 2 experts x 2*16*(2*4)*4 = 2048 FLOP (half the h-wide 4096), x 0.75;
    * moe_latent_proj: h -> l and l -> h on the 16 tokens: 2 * 2*16*4*8 = 2048 FLOP, x 0.75;
    * the all-to-all carries l-wide copies: half the bytes of the h-wide model;
    * token permutation: 2*2*16*4*(1 + 2) + 4*16*2 = 768 + 128 = 896 bytes, and the
      ``alltoall`` dispatcher's two chunk sorts of the 32 l-wide rows, 2 x 2*2*32*4 = 1024:
      1920 bytes, x 0.75;
    * without a latent the projections cost nothing.
    """
    fwd = T.layer_forward_compute()
    assert _bind(fwd["expert_up"].flops, LATENT) == pytest.approx(2048 * 0.75)
    assert _bind(fwd["expert_down"].flops, LATENT) == pytest.approx(2 * 2 * 16 * 4 * 4 * 0.75)
    assert _bind(fwd["moe_latent_proj"].flops, LATENT) == pytest.approx(2048 * 0.75)
    assert _bind(fwd["moe_latent_proj"].time, TINY) == 0
    assert _bind(fwd["moe_permute"].bytes, LATENT) == pytest.approx(1920 * 0.75)
    a2a = T.ep_comm_layer_forward().bytes
    assert _bind(a2a, LATENT) == pytest.approx(0.5 * _bind(a2a, TINY))


def test_latent_parameters_by_hand():
    """Routed expert (2+g)*l*f_e = 3*4*4 = 48 (h-wide: 96); shared expert stays 3*8*4 = 96;
    latent projections 2*8*4 = 64; the MoE layer's replicated part with 1 shared expert:
    router 8*4 + 96 + 64 = 192."""
    vals = {**LATENT, "shared_experts": 1}
    assert _bind(T.params_expert(), vals) == 48
    assert _bind(T.params_expert(), {**vals, "moe_latent_size": 0}) == 96
    assert _bind(T.params_shared_expert(), vals) == 96
    assert _bind(T.params_moe_latent(), vals) == 64
    assert _bind(T.params_moe_dense_part(), vals) == 192


#: a small latent-MoE transformer for the model-FLOP count
SMALL = ModelSpec(name="latent-small", layers=2, hidden=256, heads=4, kv_heads=4,
                  ffn_hidden=1024, vocab=1000, seq_len=128, max_seq_len=128, mlp="gelu",
                  norm="rmsnorm", bias=False, tied_embeddings=False, position="rope",
                  dropout=False, source="test", experts=8, top_k=2, moe_ffn_hidden=128,
                  moe_latent_size=64)


def test_model_flops_of_the_latent_by_hand():
    """Model FLOPs count 2 per active weight per token: going from h-wide experts (l = 0)
    to l = 64 changes each MoE layer's active weights by k*2*(l - h)*f_e + 2*h*l =
    2*2*(64 - 256)*128 + 2*256*64 = -65,536, so flops_model moves by
    3 * B * L * 2s * (-65,536) for B = 8 sequences of 128 tokens, L = 2."""
    kw = dict(num_gpus=1, global_batch=8, micro_batch=1, dtype="bf16")
    lat = predict_training(SMALL, "h100-sxm5-80gb", **kw).values["flops_model"]
    full = predict_training(dataclasses.replace(SMALL, moe_latent_size=0), "h100-sxm5-80gb",
                            **kw).values["flops_model"]
    assert lat - full == pytest.approx(3 * 8 * 2 * 2 * 128 * -65_536, rel=1e-12)


def test_mtp_blocks_add_their_layers():
    """An MTP module of a hybrid costs ``len(mtp_pattern)`` average blocks: Super's two
    passes of '*E' add 2*2 blocks, so the model FLOPs grow by exactly 2 more average
    blocks' (2 * the average block's FLOPs) over the same model with one-block modules."""
    sup = get_model("nemotron-3-super")
    kw = dict(num_gpus=64, tp=2, sp=True, ep=64, global_batch=512, micro_batch=1,
              dtype="mxfp8")
    two = predict_training(sup, "gb200", **kw).values
    one = predict_training(dataclasses.replace(sup, mtp_pattern="*"), "gb200", **kw).values
    none = predict_training(dataclasses.replace(sup, mtp_layers=0, mtp_pattern=""), "gb200",
                            **kw).values
    head = 3 * 512 * 2 * (2 * 8192 * 4096 * 131072 + 2 * 8192 * 2 * 4096**2)  # heads, proj
    per_block = (one["flops_model"] - none["flops_model"] - head) / 2
    assert two["flops_model"] - one["flops_model"] == pytest.approx(2 * per_block, rel=1e-9)
    assert two["step_time"] > one["step_time"] > none["step_time"]


# ------------------------------------------------------------------------ config.json, rules
#: Nemotron 3 Super's config.json (the fields symcost reads; Hugging Face
#: nvidia/NVIDIA-Nemotron-3-Super-120B-A12B-BF16).
SUPER_HF = {
    "architectures": ["NemotronHForCausalLM"], "model_type": "nemotron_h",
    "hybrid_override_pattern": ("MEMEMEM*EMEMEMEM*EMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*EMEMEMEMEM*"
                                "EMEMEMEMEM*EMEMEMEM*EMEMEMEME"),
    "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 128,
    "intermediate_size": 2688, "mamba_num_heads": 128, "mamba_head_dim": 64,
    "ssm_state_size": 128, "n_groups": 8, "conv_kernel": 4, "n_routed_experts": 512,
    "num_experts_per_tok": 22, "moe_intermediate_size": 2688, "moe_latent_size": 1024,
    "n_shared_experts": 1, "moe_shared_expert_intermediate_size": 5376,
    "num_nextn_predict_layers": 1, "mtp_hybrid_override_pattern": "*E",
    "mlp_hidden_act": "relu2", "attention_bias": False, "max_position_embeddings": 262144,
    "vocab_size": 131072, "tie_word_embeddings": False,
}


def test_super_config_json_is_the_preset(tmp_path):
    """The published config.json gives the preset's architecture (one MTP module, as the
    config states; the preset trains it twice as Megatron-Bridge does)."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SUPER_HF))
    spec = from_hf_config(path)
    sup = get_model("nemotron-3-super")
    assert (spec.moe_latent_size, spec.mtp_layers, spec.mtp_pattern) == (1024, 1, "*E")
    assert spec.num_params() == sup.num_params()
    assert spec.hybrid_pattern == sup.hybrid_pattern


def test_latent_and_mtp_pattern_rules_name_the_field():
    sup = dataclasses.asdict(get_model("nemotron-3-super"))
    dense = dataclasses.asdict(get_model("llama3-8b"))
    with pytest.raises(ModelSpecError, match="moe_latent_size need experts > 0"):
        ModelSpec(**{**dense, "moe_latent_size": 1024})
    with pytest.raises(ModelSpecError, match="mtp_pattern .'\\*E'. needs mtp_layers > 0"):
        ModelSpec(**{**sup, "mtp_layers": 0})
    with pytest.raises(ModelSpecError, match="hybrid_pattern holding each of its block kinds"):
        ModelSpec(**{**sup, "mtp_pattern": "*-"})
    with pytest.raises(ModelSpecError, match="mtp_pattern"):
        ModelSpec(**{**dense, "mtp_layers": 1, "mtp_pattern": "*"})
