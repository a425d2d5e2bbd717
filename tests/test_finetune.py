"""LoRA/QLoRA, offload and host-link topology (symcost.finetune), module breakdown, and the
ZHANG23 memory/OOM rows: hand-computed values and published measurements."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sympy as sp

from symcost import finetune as ft
from symcost import get_model
from symcost import symbols as S
from symcost import training as T
from symcost.api import predict_training, training_inputs
from symcost.breakdown import evaluate_terms, inference_modules, training_module_terms
from symcost.config import ConfigError, InferenceConfig, TrainingConfig
from symcost.fields import TRAINING_FIELDS, coerce

# Llama-2-7B: per layer 4*4096^2 attention + 3*4096*11008 MLP linear weights
LIN_LAYER = 4 * 4096**2 + 3 * 4096 * 11008  # 202,375,168
OTHER = 2 * 32000 * 4096 + 2 * 4096 * 32 + 4096  # embedding + LM head, norms
SHARED = Path(__file__).resolve().parents[2] / "shared" / "validation" / \
    "published_measurements.csv"


def _eval(expr: sp.Expr, values: dict[str, float]) -> float:
    subs = {S.REGISTRY[k].symbol: v for k, v in values.items() if k in S.REGISTRY}
    return float(sp.sympify(expr).xreplace(subs).evalf())


def test_nf4_double_quantization_bytes() -> None:
    # Dettmers et al. 2023, Sec. 3: 4 + 8/64 + 32/(64*256) = 4.127 bits per parameter
    assert float(S.BYTES_NF4) * 8 == pytest.approx(4.127, abs=5e-4)


def test_lora_trainable_parameters_match_peft_counts() -> None:
    # PEFT on Llama-2-7B, r=8 on q and v: 4,194,304 trainable parameters; r=16 doubles it
    cfg = TrainingConfig(finetune="lora", lora_rank=16, lora_targets="v, q")
    v = training_inputs("llama-2-7b", "a100-sxm4-80gb", cfg)
    assert _eval(ft.trainable_params(sp.Integer(0), S.n_layers), v) == 2 * 4_194_304
    full = TrainingConfig()
    vf = training_inputs("llama-2-7b", "a100-sxm4-80gb", full)
    assert _eval(ft.trainable_params(sp.Integer(123), S.n_layers), vf) == 123


def test_fused_lora_targets_read_their_input_once() -> None:
    """Megatron's fused adapters by hand, Llama-3-8B (h 4096, 32 heads of 128, 8 KV heads, f
    14336), r = 32, TP 2: ``qkv`` is one adapter h -> (32+16)*128/2 = 3072 outputs per rank:
    r*(4096 + 3072) = 229,376 weights per layer and rank; separate q,k,v adapters have
    r*(3*4096 + 2048 + 2*512) = 491,520. ``fc1`` is h -> 2*14336/2: r*(4096 + 14336)."""
    def per_layer(targets: str) -> float:
        cfg = TrainingConfig(tp=2, finetune="lora", lora_rank=32, lora_targets=targets)
        v = training_inputs("llama3-8b", "h100-sxm5-80gb", cfg)
        return _eval(ft.trainable_params(sp.Integer(0), sp.Integer(1)), v)

    assert per_layer("qkv") == 32 * (4096 + 3072)
    assert per_layer("q,k,v") == 32 * (3 * 4096 + 2048 + 2 * 512)
    assert per_layer("fc1") == 32 * (4096 + 14336)
    assert per_layer("qkv,o,fc1,down") == per_layer("qkv") + per_layer("o") \
        + per_layer("fc1") + per_layer("down")
    # the fused adapter's forward reads the layer input once: less time than three adapters
    m = get_model("llama2-7b")
    kw = dict(num_gpus=8, global_batch=32, seq_len=4096, finetune="lora", lora_rank=32)
    assert predict_training(m, "h100-sxm5-80gb", lora_targets="qkv", **kw).step_time < \
        predict_training(m, "h100-sxm5-80gb", lora_targets="q,k,v", **kw).step_time


@pytest.mark.parametrize("targets", ["q,qkv", "k,v,qkv,o", "up,fc1", "gate,fc1"])
def test_fused_lora_target_excludes_its_parts(targets: str) -> None:
    m = get_model("llama2-7b")
    with pytest.raises(ConfigError, match=r"^lora_targets: (qkv|fc1) \(one adapter on the "
                                          r"fused projection"):
        predict_training(m, "h100-sxm5-80gb", num_gpus=8, global_batch=8, finetune="lora",
                         lora_targets=targets)


def test_qlora_weight_memory_by_hand() -> None:
    r = predict_training("llama-2-7b", "rtx-4090", TrainingConfig(finetune="qlora",
                                                                  lora_rank=16))
    adapters = 32 * 16 * (5 * 4096 + 4096 + 11008 + 4096 + 2 * 1024 * 4 + 4096
                          + 2 * 11008 + 4096)
    want = 32 * LIN_LAYER * float(S.BYTES_NF4) + 2 * OTHER + 2 * adapters
    assert r.memory["weights"] == pytest.approx(want, rel=1e-9)
    assert r.memory["gradients"] == pytest.approx(2 * adapters, rel=1e-9)
    assert r.memory["optimizer"] == pytest.approx(12 * adapters, rel=1e-9)


def test_offload_moves_optimizer_and_parameters_to_host() -> None:
    base = dict(num_gpus=8, micro_batch=1, seq_len=350)
    z2 = predict_training("llama-2-7b", "a800-sxm4-80gb", TrainingConfig(zero=2, **base))
    z2o = predict_training("llama-2-7b", "a800-sxm4-80gb",
                           TrainingConfig(zero=2, offload="optimizer", **base))
    assert z2o.memory["optimizer"] == 0 and z2o.memory["gradients"] == 0
    assert z2o.memory["weights"] == z2.memory["weights"]
    z3o = predict_training("llama-2-7b", "a800-sxm4-80gb",
                           TrainingConfig(zero=3, offload="optimizer+params", **base))
    # only the two-layer ZeRO-3 gather buffer stays: 2 layers x 2 bytes x layer parameters
    assert z3o.memory["weights"] == pytest.approx(2 * 2 * (LIN_LAYER + 2 * 4096))
    # CPU Adam over the 1/8 partition at the node rate, shared by 8 ranks: > GPU Adam time
    assert z2o.breakdown["optimizer"] > 10 * z2.breakdown["optimizer"]


def test_offload_and_bridge_rules() -> None:
    with pytest.raises(ConfigError, match=r"^offload: .*zero 3"):
        predict_training("llama-2-7b", "a800-sxm4-80gb",
                         TrainingConfig(num_gpus=8, zero=2, offload="optimizer+params"))
    with pytest.raises(ConfigError, match=r"^offload: "):
        predict_training("llama-2-7b", "a800-sxm4-80gb",
                         TrainingConfig(num_gpus=8, offload="optimizer"))
    with pytest.raises(ConfigError, match=r"^intra_node_link: rtx-4090 has no NVLink"):
        predict_training("llama-2-7b", "rtx-4090",
                         TrainingConfig(num_gpus=8, intra_node_link="nvlink-bridge"))
    with pytest.raises(ConfigError, match=r"^lora_targets: must be a comma-separated"):
        coerce(TRAINING_FIELDS["lora_targets"], "q,x")
    assert coerce(TRAINING_FIELDS["lora_targets"], " V,q ") == "q,v"


@pytest.mark.parametrize("hw,link,want", [
    # no peer-to-peer: host link shared by the 8 GPUs, halved for the staging copy
    ("rtx-4090", "pcie", lambda e: e * 32e9 / 16),
    # bridges: pairs reduce over the bridge, the 4 leaders run the staged ring: 7/6 gain
    ("rtx-3090", "nvlink-bridge", lambda e: e * 32e9 / 16 * 7 / 6),
    ("rtx-6000-ada", "pcie", lambda e: 32e9),  # peer-to-peer over PCIe: the link rate
    ("a800-sxm4-80gb", "nvlink", lambda e: 200e9),
    ("a800-sxm4-80gb", "default", lambda e: 200e9),
])
def test_intra_bandwidth_by_topology(hw, link, want) -> None:
    v = training_inputs("llama-2-7b", hw, TrainingConfig(intra_node_link=link))
    assert _eval(ft.intra_bandwidth(), v) == pytest.approx(want(v["eff_host"]))


def test_dequant_time_is_bytes_plus_a_fixed_cost_per_quantized_module() -> None:
    # Llama-2-7B QLoRA on one A800: 202,375,168 NF4 weights per layer read (4.127 bits) and
    # written in 16 bits at eff_hbm * 2.039 TB/s, plus 7 calls (q, k, v, o, gate, up, down)
    cfg = TrainingConfig(finetune="qlora", lora_rank=64)
    v = {**training_inputs("llama-2-7b", "a800-sxm4-80gb", cfg), "t_dequant_call": 2e-4,
         "eff_hbm": 0.8}
    want = LIN_LAYER * (4.127 / 8 + 2) / (0.8 * v["hbm_bw"]) + 7 * 2e-4
    assert _eval(ft.dequant_time_layer(), v) == pytest.approx(want, rel=1e-4)
    # LoRA (16-bit base) pays nothing; a two-matrix MLP has 6 quantized modules
    lora = {**training_inputs("llama-2-7b", "a800-sxm4-80gb",
                              TrainingConfig(finetune="lora", lora_rank=64)),
            "t_dequant_call": 2e-4}
    assert _eval(ft.dequant_time_layer(), lora) == 0.0
    plain = {**v, "gated_mlp": 0.0, "hbm_bw": 1e30}
    assert _eval(ft.dequant_time_layer(), plain) == pytest.approx(6 * 2e-4, rel=1e-9)


def test_frozen_base_skips_weight_gradients() -> None:
    # rank 1 on one projection: the adapter is negligible, so the backward saves one forward
    # GEMM time per linear layer (the weight gradient) and the head's weight gradient
    cfg = dict(seq_len=2048, micro_batch=4)
    full = predict_training("llama-2-7b", "a100-sxm4-80gb", TrainingConfig(**cfg))
    lora = predict_training("llama-2-7b", "a100-sxm4-80gb",
                            TrainingConfig(finetune="lora", lora_rank=1, lora_targets="q",
                                           **cfg))
    v = training_inputs("llama-2-7b", "a100-sxm4-80gb", TrainingConfig(**cfg))
    from symcost.training import layer_forward_compute
    fwd = layer_forward_compute()
    lin = sum(_eval(fwd[k].time, v) for k in ("qkv_proj", "out_proj", "mlp_up", "mlp_down"))
    saved = full.breakdown["backward"] - lora.breakdown["backward"]
    assert saved == pytest.approx(32 * lin, rel=0.05)


def test_module_breakdown_sums_to_step_time() -> None:
    for cfg in (TrainingConfig(flash_attention=False, recompute="full", seq_len=350),
                TrainingConfig(finetune="qlora", lora_rank=64, seq_len=1024)):
        v = training_inputs("llama-2-7b", "rtx-4090", cfg)
        out = evaluate_terms(training_module_terms(), v)
        step = predict_training("llama-2-7b", "rtx-4090", cfg).step_time
        rope = out["forward"]["rope"] + out["backward"]["rope"]
        total = sum(sum(m.values()) for m in out.values())
        assert total - rope == pytest.approx(step, rel=1e-9)
        assert all(x >= 0 for m in out.values() for x in m.values())


@pytest.mark.parametrize("model, seq", [("llama-3.1-70b", 32768), ("gpt-oss-20b", 8192)])
def test_module_breakdown_attention_is_the_training_models(model: str, seq: int) -> None:
    """The attention modules take the training model's attention core: with context
    parallelism each GPU computes 1/c of it (same micro-batches, twice the GPUs: exactly half
    the QK^T and attention.V time), and sliding-window layers (gpt-oss) only their band. Before,
    the modules priced full-sequence attention on every GPU and ``other`` went negative (e.g.
    -72.7 s of an 11.4 s step for Llama-3.1-405B at 131,072 tokens with CP 16)."""
    out = {}
    for cp in (1, 2):
        cfg = TrainingConfig(num_gpus=8 * cp, tp=8, cp=cp, seq_len=seq, micro_batch=1,
                             global_batch=4, sp=True)
        out[cp] = evaluate_terms(training_module_terms(),
                                 training_inputs(model, "h100-sxm5-80gb", cfg))
        step = predict_training(model, "h100-sxm5-80gb", cfg).step_time
        rope = out[cp]["forward"]["rope"] + out[cp]["backward"]["rope"]
        assert sum(sum(m.values()) for m in out[cp].values()) - rope == pytest.approx(
            step, rel=1e-9)
        assert all(x >= 0 for m in out[cp].values() for x in m.values())
    for phase in ("forward", "backward"):
        for part in ("qk_t", "attn_v"):
            assert out[2][phase][part] == pytest.approx(out[1][phase][part] / 2, rel=1e-9)
        assert out[1][phase]["qk_t"] > 0
        # the ring's per-step merges (the online softmax across ring steps) are softmax's
        assert out[1][phase]["softmax"] == 0
        assert out[2][phase]["softmax"] > 0


def test_serving_breakdown_prefill_attention_skips_the_window() -> None:
    """gpt-oss-20b alternates sliding-window (W = 128) and full layers: its prefill attention
    modules are the full-attention ones times the average context factor, by hand
    ``1 - (1 - (2W - W(W-1)/s)/s)/2`` = 0.503899 at s = 32,768 (the serving model's
    :func:`symcost.inference.attention_prefill`; before, the modules priced every layer as
    full attention)."""
    cfg = InferenceConfig(batch=2, input_len=32768, output_len=2)
    swa = get_model("gpt-oss-20b")
    full = dataclasses.replace(swa, sliding_window=0)
    a = inference_modules(swa, "h100-sxm5-80gb", cfg)["prefill"]
    b = inference_modules(full, "h100-sxm5-80gb", cfg)["prefill"]
    w, s = 128, 32768
    factor = 1 - (1 - (2 * w - w * (w - 1) / s) / s) / 2
    assert factor == pytest.approx(0.503899, abs=1e-6)
    for part in ("qk_t", "attn_v"):
        assert a[part] == pytest.approx(factor * b[part], rel=1e-9)


def test_rope_is_reported_only_for_rotary_models() -> None:
    """RoPE is the rotation of Q and K: a rotary model (Llama-2) reports its hand-computed
    memory-bound time, GPT (learned positions) and Nemotron-H (no position encoding) none, in
    training and in serving (the step time excludes RoPE either way: see the test above)."""
    cfg = TrainingConfig(seq_len=2048, micro_batch=1, global_batch=1)
    llama = evaluate_terms(training_module_terms(),
                           training_inputs("llama-2-7b", "a100-sxm4-80gb", cfg))
    v = training_inputs("llama-2-7b", "a100-sxm4-80gb", cfg)
    # 32 layers x 2048 tokens x (32 + 32 heads) x 128 x 2 bytes, read and written
    nbytes = 32 * 2048 * 64 * 128 * 2 * 2
    assert llama["forward"]["rope"] == pytest.approx(
        nbytes / (v["hbm_bw"] * v["eff_hbm"]), rel=1e-9)
    assert llama["backward"]["rope"] == pytest.approx(2 * llama["forward"]["rope"], rel=1e-9)
    for model in ("gpt-1.7b", "nemotron-h-8b"):
        out = evaluate_terms(training_module_terms(),
                             training_inputs(model, "h100-sxm5-80gb", cfg))
        assert out["forward"]["rope"] == 0 and out["backward"]["rope"] == 0, model
    serve = InferenceConfig(batch=4, input_len=512, output_len=16)
    assert inference_modules("llama-2-7b", "h100-sxm5-80gb", serve)["prefill"]["rope"] > 0
    gpt = inference_modules("gpt-1.7b", "h100-sxm5-80gb", serve)
    assert gpt["prefill"]["rope"] == 0 and gpt["decode"]["rope"] == 0


def test_module_breakdown_of_a_moe_model_puts_the_experts_in_mlp() -> None:
    """Mixtral on 64 H100 (tp 2, ep 8): the modules still sum to the step time, and the
    forward ``mlp`` module is every micro-batch's router, routed-expert and shared-expert
    GEMMs and activations over the stage's layers (no dense MLP in a Mixtral layer)."""
    cfg = TrainingConfig(num_gpus=64, tp=2, sp=True, ep=8, global_batch=256, dtype="fp8",
                         zero=1, recompute="selective")
    v = training_inputs("mixtral-8x7b", "h100-sxm5-80gb", cfg)
    out = evaluate_terms(training_module_terms(), v)
    step = predict_training("mixtral-8x7b", "h100-sxm5-80gb", cfg).step_time
    rope = out["forward"]["rope"] + out["backward"]["rope"]
    assert sum(sum(m.values()) for m in out.values()) - rope == pytest.approx(step, rel=1e-9)
    assert all(x >= 0 for m in out.values() for x in m.values())
    fwd = T.layer_forward_compute()
    moe = sum(_eval(fwd[k].time, v) for k in ("router", "expert_up", "expert_down",
                                                "expert_activation", "shared_experts"))
    per_step = _eval(T.micro_batches() * T.layers_per_stage(), v)
    assert out["forward"]["mlp"] == pytest.approx(per_step * moe, rel=1e-9)
    assert out["backward"]["mlp"] == pytest.approx(2 * per_step * moe, rel=1e-9)


@pytest.mark.skipif(not SHARED.exists(), reason="shared measurements not present")
def test_zhang23_out_of_memory_rows_agree() -> None:
    # ZHANG23 Table III: "-" (OOM) vs a printed peak memory; target >= 90 % agreement
    from symcost.validate import fit_agreement, load_measurements, predict_other_rows
    from symcost.validate import prepare_other_rows

    df = load_measurements(SHARED)
    df = df[df["case_id"].str.startswith("ZHANG23-III")]
    rows, skipped = prepare_other_rows(df)
    assert not skipped
    out = predict_other_rows([r for r in rows if r.metric in ("oom", "peak_memory_gib")])
    agree = fit_agreement(out)
    assert agree is not None and agree["agreement_pct"] >= 90.0
    assert agree["oom_predicted_pct"] == 100.0


def test_serving_framework_overhead_adds_per_step() -> None:
    # t_sched_<framework> is added to every forward step: TPOT grows by exactly that time
    import dataclasses

    from symcost.config import InferenceConfig
    from symcost.infer_api import predict_inference
    from symcost.params import load_params

    p = load_params()
    gens = {g: {**v, "t_sched_vllm": 2e-3, "t_sched_trtllm": 5e-4}
            for g, v in p.generations.items()}
    p = dataclasses.replace(p, generations=gens)
    req = dict(batch=8, input_len=512, output_len=128, dtype="int4")
    base = predict_inference("llama-2-7b", "rtx-4090", InferenceConfig(**req), params=p)
    for fw, extra in (("vllm", 2e-3), ("trtllm", 5e-4), ("tgi", 0.0)):
        r = predict_inference("llama-2-7b", "rtx-4090", InferenceConfig(framework=fw, **req),
                              params=p)
        assert r.values["tpot"] - base.values["tpot"] == pytest.approx(extra, abs=1e-12)


def test_offload_copies_hide_under_compute_only_with_overlap() -> None:
    # 7B ZeRO-2 offload on 8 A800: copies 2 x 2 B x psi/8 over the host link; with dp_overlap
    # only the part longer than the step's forward + backward stays exposed
    base = dict(num_gpus=8, zero=2, offload="optimizer", seq_len=350)
    off = predict_training("llama-2-7b", "a800-sxm4-80gb",
                           TrainingConfig(dp_overlap=False, **base))
    on = predict_training("llama-2-7b", "a800-sxm4-80gb", TrainingConfig(**base))
    v = training_inputs("llama-2-7b", "a800-sxm4-80gb", TrainingConfig(**base))
    copies = 2 * 2 * 6_738_415_616 / 8 / (v["eff_host"] * v["host_bw"])
    compute = on.breakdown["forward"] + on.breakdown["backward"]
    saved = off.breakdown["optimizer"] - on.breakdown["optimizer"]
    assert saved == pytest.approx(min(copies, compute), rel=1e-6)
