"""Expert parallelism in serving (issue 11: "MoE inference too: expert weights per GPU, decode
with EP/TP").

``ep`` dividing ``tp``: the experts are split into ``ep`` groups inside the TP group, each over
``tp/ep`` GPUs (TensorRT-LLM ``moe_ep_size``); ``ep`` a multiple of ``tp``: whole experts over
the TP groups of ``ep/tp`` replicas, which serve each other's tokens and exchange them by
all-to-all (vLLM ``--enable-expert-parallel``, SGLang wide EP). Expected values by hand.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from hwspecs import load_hardware
from optimizers.dissect import serving_value
from optimizers.dse import decode_bound
from symcost import ConfigError, get_model, predict_inference
from symcost import inference as INF
from symcost import symbols as S
from symcost.breakdown import inference_modules
from symcost.config import InferenceConfig
from symcost.infer_api import predict_inference_rows
from symcost.params import load_params
from symcost.rules import TP_MOE_FFN

H100 = "h100-sxm5-80gb"

#: a tiny MoE layer: h 8, f_e 16, SwiGLU, 8 experts, top-2, every layer MoE, bf16
TINY = {"hidden": 8, "moe_ffn_hidden": 16, "gated_mlp": 1, "n_experts": 8, "top_k": 2,
        "shared_experts": 0, "n_layers": 4, "dense_layers": 0, "moe_layer_step": 1,
        "act_bytes": 2, "w_bytes": 2, "moe_latent_size": 0,
        # a transformer, not a hybrid Mamba-Transformer (the block counts are then unused)
        "hybrid": 0, "attn_layers": 0, "mamba_layers": 0, "mlp_layers": 0}


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(expr.xreplace({S.lookup(k): v for k, v in values.items()}))


def _experts(rows: int, tp: int, ep: int) -> tuple[float, float]:
    cost = INF.layer_gemms(sp.Integer(rows))["experts"]
    vals = {**TINY, "tp": tp, "ep": ep, "moe_imbalance": 1}
    return _bind(cost.flops, vals), _bind(cost.bytes, vals)


def test_wide_ep_expert_gemms_by_hand():
    """One token per replica, tp 2, ep 4 (two replicas' tokens, R = 2): the group activates
    8*(1 - 0.75^2) = 3.5 experts, 0.875 of them on this GPU, each whole (f_e 16) for
    per = R*k/3.5 tokens, per*0.875 = R*k/ep = 1.
    Up (h -> 2 f_e): activations 2*(1*8 + 1*32) = 80 B, weights 2*8*32*0.875 = 448 B;
    down: 2*(1*16 + 1*8) = 48 B, weights 2*16*8*0.875 = 224 B; total 800 B.
    FLOPs 2*1*(8*32 + 16*8) = 768 = 2*rows*k*f_e*h*(2+g)/tp, as with ep = 1."""
    flops, nbytes = _experts(1, 2, 4)
    assert nbytes == pytest.approx(800.0, rel=1e-12)
    assert flops == pytest.approx(768.0, rel=1e-12)
    # ep = 1: both active experts (k = 2 of one token) split over tp 2 (f_e/2 = 8 wide):
    # up 2*(1*8 + 1*16)*2 + 2*8*16*2 = 608, down 2*(1*8 + 1*8)*2 + 2*8*8*2 = 320: 928 B
    flops1, nbytes1 = _experts(1, 2, 1)
    assert nbytes1 == pytest.approx(928.0, rel=1e-12)
    assert flops1 == pytest.approx(768.0, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(rows=st.integers(1, 4096), tp=st.sampled_from([1, 2, 4, 8]),
       ep=st.sampled_from([1, 2, 4, 8]), span=st.sampled_from([1, 2, 4]))
def test_expert_flops_per_gpu_do_not_depend_on_ep(rows, tp, ep, span):
    """Every layout does the same routed-expert work per GPU, 2*rows*k*(2+g)*h*f_e/tp
    (balanced routing): ep only regroups it (ep dividing tp, or ep = tp*span over replicas)."""
    ep = tp * span if span > 1 else min(ep, tp)
    flops, _ = _experts(rows, tp, ep)
    assert flops == pytest.approx(2 * rows * 2 * 3 * 8 * 16 / tp, rel=1e-9)


def test_ep_comm_is_a_dispatch_and_a_combine_over_ep():
    """Wide EP, tp 2, ep 4 (one node), 64 rows: each GPU dispatches its 32 tokens' 2 copies of
    8 16-bit activations, 1,024 B, of which 3/4 leave: 768 B each way, 1,536 B per MoE layer.
    Inside the TP group (ep <= tp) nothing moves."""
    vals = {**TINY, "gpus_per_node": 8, "moe_imbalance": 1}
    wide = INF.ep_comm(sp.Integer(64))
    assert _bind(wide.bytes, {**vals, "tp": 2, "ep": 4}) == pytest.approx(1536.0)
    for ep in (1, 2):
        assert _bind(wide.bytes, {**vals, "tp": 2, "ep": ep}) == 0.0


def test_wide_ep_weights_per_gpu_by_hand():
    """Mixtral 8x7B, TP 2, bf16, 8 GPUs. ep 1 or 2: every expert's weights over the two GPUs
    of the TP group, 8*3*h*f_e/2 per layer; ep 8 (four replicas): one whole expert per GPU,
    1*3*h*f_e. Per GPU, bytes: 2 * (32 * (attention/2 + experts + h*8 + 2h) + 2*V*h/2 + h)."""
    h, a, k, d, fe, V = 4096, 32, 8, 128, 14336, 32000
    attention = h * d * (a / 2 + 2 * k / 2) + a / 2 * d * h

    def want(experts: float) -> float:
        layer = attention + experts + h * 8
        return 2 * (32 * layer + 32 * 2 * h + 2 * V * h / 2 + h)

    kw = dict(tp=2, batch=8, num_gpus=8)
    for ep in (1, 2):
        r = predict_inference("mixtral-8x7b", H100, ep=ep, **kw)
        assert r.values["mem_weights"] == pytest.approx(want(8 * 3 * h * fe / 2), rel=1e-12)
    wide = predict_inference("mixtral-8x7b", H100, ep=8, **kw)
    assert wide.values["mem_weights"] == pytest.approx(want(3 * h * fe), rel=1e-12)
    assert wide.values["decode_ep_comm"] > 0
    assert wide.config.ep == 8


def test_wide_ep_decodes_faster_when_weight_reads_dominate():
    """DeepSeek-V3, fp8, 16 H200, 64 sequences per replica: wide EP over both replicas reads
    each active expert once for twice the tokens, so its decode GEMMs take less time than
    TP 8 with tensor-parallel experts, and its all-to-all is the price."""
    kw = dict(batch=64, dtype="fp8", num_gpus=16)
    tp = predict_inference("deepseek-v3", "h200-sxm-141gb", tp=8, **kw)
    wide = predict_inference("deepseek-v3", "h200-sxm-141gb", tp=8, ep=16, **kw)
    assert wide.values["decode_gemm"] < tp.values["decode_gemm"]
    assert tp.values["decode_ep_comm"] == 0 < wide.values["decode_ep_comm"]
    assert wide.values["mem_weights"] < 0.6 * tp.values["mem_weights"]


@pytest.mark.parametrize("kwargs, match", [
    (dict(model="llama-3-8b", tp=2, ep=2, num_gpus=2),
     "^ep: 2 > 1 needs a mixture-of-experts model"),
    (dict(model="mixtral-8x7b", tp=2, ep=3, num_gpus=6),
     "^ep: 3 neither divides tp = 2 .* nor is a multiple of tp that divides num_gpus/pp = 6"),
    (dict(model="mixtral-8x7b", tp=2, ep=8, num_gpus=4),
     "^ep: 8 neither divides tp = 2 .*num_gpus/pp = 4"),
    (dict(model="qwen3-30b-a3b", tp=4, ep=3, num_gpus=12),
     "^ep: 3 neither divides tp"),
    (dict(model="mixtral-8x7b", tp=1, ep=16, num_gpus=16),
     "^ep: 16 does not divide the number of experts \\(8\\)"),
])
def test_serving_ep_rules_name_field_and_rule(kwargs, match):
    model = kwargs.pop("model")
    with pytest.raises(ConfigError, match=match):
        predict_inference(model, H100, **kwargs)


def test_expert_tp_rule_uses_tp_over_ep():
    """moe_ffn_hidden 768 (Qwen3-30B-A3B): tp 8 splits it (96 each); the rule reads the expert
    tensor-parallel size max(tp/ep, 1)."""
    r = predict_inference("qwen3-30b-a3b", H100, tp=8, ep=8, batch=4)
    assert r.config.ep == 8
    vals = {"tp": 8.0, "ep": 2.0, "moe_ffn_hidden": 768.0}
    assert bool(TP_MOE_FFN.ok(vals, np))
    assert not bool(TP_MOE_FFN.ok({**vals, "moe_ffn_hidden": 770.0}, np))
    assert "max(tp/ep, 1) = 4 does not divide moe_ffn_hidden (770)" in TP_MOE_FFN.message(
        {**vals, "moe_ffn_hidden": 770.0})


def test_decode_bound_counts_the_all_to_all_as_communication():
    values = {"decode_gemm_time_compute": 1.0, "decode_gemm_time_memory": 2.0,
              "decode_gemm": 3.0, "decode_lm_head": 0.5, "decode_attention": 1.0,
              "decode_memory_ops": 0.25, "decode_tp_comm": 0.125, "decode_ep_comm": 0.0625,
              "decode_pp_p2p": 0.03125}
    parts = decode_bound(values)
    assert parts["communication"] == 0.125 + 0.0625 + 0.03125
    assert parts["memory"] == 3.0 + 0.5 + 1.0 + 0.25


def test_serving_search_tries_expert_parallel_layouts():
    """serving_value searches ep with tp for a MoE model (Mixtral on 8 H100 in fp8 serves
    fastest with wide EP) and keeps ep = 1 for a dense one."""
    params = load_params()
    hw = load_hardware(H100)
    _, moe, _ = serving_value(get_model("mixtral-8x7b"), hw, 8, "fp8", 1024, 256, 0.05, params)
    _, dense, _ = serving_value(get_model("llama-3-8b"), hw, 8, "fp8", 1024, 256, 0.05, params)
    assert moe.ep > 1 and moe.ep % moe.tp == 0
    assert dense.ep == 1


@pytest.mark.parametrize("model, hw, kw", [
    ("llama-2-7b", "rtx-4090", dict(batch=8, input_len=512, output_len=128)),
    ("mixtral-8x7b", H100, dict(batch=16, input_len=512, output_len=64, tp=2, ep=8,
                                num_gpus=8)),
    ("deepseek-v3", "h200-sxm-141gb", dict(batch=16, input_len=512, output_len=64, tp=8,
                                           dtype="fp8")),
])
def test_serving_module_breakdown_sums_to_the_decode_time(model, hw, kw):
    """The decode modules (minus RoPE, which the serving model does not time) sum to
    (output_len - 1) * TPOT: the MoE router, experts and all-to-all are in ``mlp`` and
    ``other``, not lost."""
    cfg = InferenceConfig(**kw)
    mods = inference_modules(model, hw, cfg)["decode"]
    want = (cfg.output_len - 1) * predict_inference(model, hw, cfg).tpot
    assert sum(mods.values()) - mods["rope"] == pytest.approx(want, rel=1e-9)


def test_a_serve_row_reads_its_ep_column():
    """A measurement row of MoE serving with ``ep`` is predicted with that expert
    parallelism (the same value as predict_inference with ep), and a row whose ep breaks a
    serving rule is skipped naming the field."""
    base = dict(workload="serve", model="Mixtral-8x7B", hardware=H100, n_gpus=8, tp=2, pp=1,
                dtype="bf16", source="test", notes="", input_len=128, output_len=128,
                case_id="MINE-ep", metric="output_throughput", value=20000.0)
    wide = predict_inference_rows(pd.DataFrame([{**base, "ep": 8}]))
    none = predict_inference_rows(pd.DataFrame([base]))
    assert len(wide) == len(none) == 1
    assert wide.iloc[0]["predicted"] != none.iloc[0]["predicted"]
    bad = predict_inference_rows(pd.DataFrame([{**base, "ep": 3}]))
    (skip,) = bad.attrs["skipped"]
    assert skip["reason"].startswith("ep: 3 neither divides tp")


def test_routing_imbalance_scales_the_busiest_ranks_tokens_by_hand():
    """moe_imbalance 1.5 with tp 2, ep 4, one token per replica: the busiest rank's grouped
    GEMMs run 1.5 x the tokens (FLOPs 768 -> 1,152; activation traffic 2*(1.5*(8+32)) +
    2*(1.5*(16+8)) = 192 B instead of 128 B, weights read unchanged: 672 B), and 1.5 x the
    routed copies arrive in its all-to-all (1,536 -> 2,304 B for 64 rows)."""
    vals = {**TINY, "tp": 2, "ep": 4, "moe_imbalance": 1.5}
    cost = INF.layer_gemms(sp.Integer(1))["experts"]
    assert _bind(cost.flops, vals) == pytest.approx(1152.0, rel=1e-12)
    assert _bind(cost.bytes, vals) == pytest.approx(192.0 + 672.0, rel=1e-12)
    a2a = INF.ep_comm(sp.Integer(64))
    assert _bind(a2a.bytes, {**vals, "gpus_per_node": 8}) == pytest.approx(2304.0)
    with pytest.raises(ConfigError, match="^moe_imbalance: 1.5 exceeds min\\(ep, experts/top_k\\)"
                                          " = 1"):
        predict_inference("mixtral-8x7b", H100, tp=2, moe_imbalance=1.5, batch=4)
    r = predict_inference("mixtral-8x7b", H100, tp=2, ep=8, num_gpus=8, moe_imbalance=2.0,
                          batch=4)
    assert r.config.moe_imbalance == 2.0
