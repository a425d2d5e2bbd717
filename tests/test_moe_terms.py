"""MoE layer cost terms (issue 11): token permutation, router scores, grouped-GEMM efficiency
by tokens per expert, the fixed time per MoE layer and the fp8 casts of routed tokens.

Every expected value is computed by hand in the test (arithmetic shown) for a tiny MoE
configuration: 16 tokens, hidden 8, 4 experts, top-2, expert FFN 4, SwiGLU.
"""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import predict_training
from symcost.fields import ConfigError
from symcost import symbols as S
from symcost import training as T
from symcost.ops import elementwise as ew
from symcost.params import FALLBACK, params_from_dict

#: tiny MoE: 4 layers (1 leading dense), every other symbol set to a round number
TINY = {
    "tp": 1, "cp": 1, "ep": 2, "pp": 1, "sp_on": 0, "micro_batch": 1, "seq_len": 16,
    "hidden": 8, "n_heads": 2, "n_kv_heads": 2, "head_dim_given": 0, "ffn_hidden": 32,
    "gated_mlp": 1, "n_experts": 4, "top_k": 2, "shared_experts": 0, "moe_ffn_hidden": 4,
    "moe_latent_size": 0,
    "n_layers": 4, "dense_layers": 1, "moe_layer_step": 1, "kv_lora_rank": 0,
    "q_lora_rank": 0, "rope_head_dim": 0, "fp8": 0, "fp4": 0,
    "peak_flops_16": 1e12, "peak_flops_8": 2e12, "peak_flops_4": 4e12, "matmul_ceiling": 1,
    "hbm_bw": 1e12, "eff_hbm": 0.5, "eff_gemm": 0.5, "moe_m_half": 16,
    "moe_flop_half": 0, "t_moe_layer": 1e-3, "moe_imbalance": 1, "moe_capacity_factor": 0,
    "etp": 1, "cuda_graph": 0, "ep_dedup": 0,
    # a transformer, not a hybrid Mamba-Transformer (block counts and Mamba-2 sizes unused)
    "hybrid": 0, "attn_layers": 0, "mamba_layers": 0, "mlp_layers": 0, "mamba_heads": 0,
    "mamba_head_dim": 0, "mamba_state": 0, "mamba_groups": 0, "eff_ssm": 1, "eff_attn": 0.5,
}


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(sp.sympify(expr).xreplace({S.lookup(k): v for k, v in values.items()}))


def test_token_permutation_bytes_by_hand():
    """4 tokens, top-2, width 8: permute reads 4*8 and writes 4*2*8 bf16 values, unpermute
    reads 4*2*8 values and 4*2 fp32 probabilities and writes 4*8 values:
    2*(32 + 64 + 64 + 32) + 4*8 = 384 + 32 = 416 bytes; at 1e12 B/s * 0.5: 8.32e-10 s."""
    c = ew.token_permutation(sp.Integer(4), sp.Integer(2), sp.Integer(8))
    assert _bind(c.bytes, {}) == 416
    assert _bind(c.time, {"hbm_bw": 1e12, "eff_hbm": 0.5}) == pytest.approx(416 / 5e11)
    # backward: read dy (4*8), saved outputs (64), write 2 copies (64), read them (64), write
    # the sum (32): 2*4*8*(2 + 3*2) = 512 bytes, plus the 32 bytes of probabilities
    b = ew.token_permutation_backward(sp.Integer(4), sp.Integer(2), sp.Integer(8))
    assert _bind(b.bytes, {}) == 544


def test_router_scores_bytes_by_hand():
    """16 tokens x 4 experts fp32 scores, three passes: 3 * 4 * 16 * 4 = 768 bytes."""
    c = ew.router_scores(sp.Integer(16), sp.Integer(4))
    assert _bind(c.bytes, {}) == 768


def test_grouped_gemm_efficiency_halves_at_m_half():
    """eff_gemm * M/(M + M_half) (W_half = 0): 0.5 * 16/(16 + 16) = 0.25; 0.5 * 48/64 = 0.375;
    M_half = 0 gives eff_gemm (a large expert GEMM runs as fast as a dense one); an M below 1
    (dense model, top_k = 0) is held at 1: 0.5 * 1/17."""
    f = T.grouped_gemm_efficiency
    n, k = sp.Integer(8), sp.Integer(4)
    assert _bind(f(sp.Integer(16), n, k), TINY) == pytest.approx(0.25)
    assert _bind(f(sp.Integer(48), n, k), TINY) == pytest.approx(0.375)
    assert _bind(f(sp.Integer(48), n, k), {**TINY, "moe_m_half": 0}) == pytest.approx(0.5)
    assert _bind(f(sp.Integer(0), n, k), TINY) == pytest.approx(0.5 / 17)


def test_grouped_gemm_efficiency_halves_at_flop_half():
    """The work factor W/(W + W_half), W = 2*M*N*K: M = 16 tokens, N = 8, K = 4 -> W = 1024
    FLOP; at W_half = 1024 (and M_half = 0) 0.5 * 1/2 = 0.25; at W_half = 3072, 0.5 * 1/4;
    both factors together (M_half 16): 0.5 * 16/32 * 1024/(1024 + 1024) = 0.125. The same
    work split differently (M = 32, N = 4) gets the same factor: only the work counts."""
    f = T.grouped_gemm_efficiency
    m, n, k = sp.Integer(16), sp.Integer(8), sp.Integer(4)
    no_m = {**TINY, "moe_m_half": 0}
    assert _bind(f(m, n, k), {**no_m, "moe_flop_half": 1024}) == pytest.approx(0.25)
    assert _bind(f(m, n, k), {**no_m, "moe_flop_half": 3072}) == pytest.approx(0.125)
    assert _bind(f(m, n, k), {**TINY, "moe_flop_half": 1024}) == pytest.approx(0.125)
    assert _bind(f(sp.Integer(32), sp.Integer(4), k), {**no_m, "moe_flop_half": 1024}) == \
        pytest.approx(0.25)


def test_layer_terms_of_a_tiny_moe_by_hand():
    """MoE fraction (4 - 1)/(1*4) = 0.75; n = 16 tokens; 16*2 = 32 routed tokens over
    E/e = 2 local experts: 16 per expert, efficiency 0.5*16/32 = 0.25.

    * expert_up: 2 experts x 2*16*(2*4)*8 = 4096 FLOP at 1e12*0.25 -> 1.6384e-8 s (compute
      bound: bytes 2*(16*8 + 8*8 + 16*8)*2 = 1280 at 5e11 B/s = 2.56e-9 s), x 0.75 = 1.2288e-8.
    * moe_permute: 2*2*16*8*(1 + 2) + 4*16*2 = 1536 + 128 = 1664 bytes, plus the ``alltoall``
      dispatcher's two chunk sorts of the 32 received rows (2 local experts): 2 x 2*2*32*8 =
      2048 bytes, 3712 at 5e11 -> 7.424e-9 s, x 0.75; backward 2*16*8*(2 + 6) + 128 = 2176
      bytes and the same 2048 of sorts -> 4224 / 5e11 * 0.75. With ``ep_dedup`` (the flex
      dispatcher) the sorts go.
    * moe_overhead: 1e-3 s x 0.75 = 7.5e-4 s forward, twice that backward.
    """
    fwd = T.layer_forward_compute()
    bwd = T.layer_backward_compute()
    assert _bind(fwd["expert_up"].flops, TINY) == pytest.approx(4096 * 0.75)
    assert _bind(fwd["expert_up"].time, TINY) == pytest.approx(4096 / 0.25e12 * 0.75)
    assert _bind(fwd["moe_permute"].bytes, TINY) == pytest.approx(3712 * 0.75)
    assert _bind(fwd["moe_permute"].time, TINY) == pytest.approx(3712 / 5e11 * 0.75)
    assert _bind(bwd["moe_permute"].time, TINY) == pytest.approx(4224 / 5e11 * 0.75)
    flex = {**TINY, "ep_dedup": 1}
    assert _bind(fwd["moe_permute"].bytes, flex) == pytest.approx(1664 * 0.75)
    assert _bind(bwd["moe_permute"].time, flex) == pytest.approx(2176 / 5e11 * 0.75)
    assert _bind(fwd["moe_overhead"].time, TINY) == pytest.approx(7.5e-4)
    assert _bind(bwd["moe_overhead"].time, TINY) == pytest.approx(1.5e-3)


def test_imbalance_and_capacity_by_hand():
    """The busiest expert-parallel rank at load factor 1.5 (dropless): 16*2*1.5 = 48 routed
    tokens, 24 per local expert, efficiency 0.5*24/(24 + 16) = 0.3; expert_up 2 x 2*24*(2*4)*8
    = 6144 FLOP at 1e12*0.3, x 0.75. A capacity factor of 1.25 caps the load at 1.25: 40
    tokens, 20 per expert, efficiency 0.5*20/36; the all-to-all moves the same factor more.
    Token permutation on the sending side is unchanged; the receiving side's chunk sorts move
    the busiest rank's 48 rows: 1664 + 2 x 2*2*48*8 = 4736 bytes."""
    fwd = T.layer_forward_compute()
    hot = {**TINY, "moe_imbalance": 1.5}
    assert _bind(T.moe_load_factor(), hot) == 1.5
    assert _bind(fwd["expert_up"].flops, hot) == pytest.approx(6144 * 0.75)
    assert _bind(fwd["expert_up"].time, hot) == pytest.approx(6144 / 0.3e12 * 0.75)
    assert _bind(fwd["moe_permute"].bytes, hot) == pytest.approx(4736 * 0.75)
    capped = {**hot, "moe_capacity_factor": 1.25}
    assert _bind(T.moe_load_factor(), capped) == 1.25
    assert _bind(fwd["expert_up"].flops, capped) == pytest.approx(2 * 2 * 20 * 8 * 8 * 0.75)
    assert _bind(fwd["expert_up"].time, capped) == pytest.approx(
        5120 / (1e12 * 0.5 * 20 / 36) * 0.75)
    # a capacity above the imbalance drops nothing; below 1 it drops even balanced tokens
    assert _bind(T.moe_load_factor(), {**hot, "moe_capacity_factor": 2.0}) == 1.5
    assert _bind(T.moe_load_factor(), {**TINY, "moe_capacity_factor": 0.5}) == 0.5
    a2a = T.ep_comm_layer_forward().bytes
    assert _bind(a2a, hot) == pytest.approx(1.5 * _bind(a2a, TINY))


@settings(max_examples=12, deadline=None)
@given(a=st.floats(1.0, 4.0), b=st.floats(1.0, 4.0), cap=st.sampled_from([0.0, 1.25, 2.0]))
def test_step_time_grows_with_imbalance_up_to_the_capacity(a, b, cap):
    """Mixtral 8x7B on 64 H100 (tp 2, ep 8; bound min(8, 8/2) = 4): the step time never falls
    as the busiest rank's load rises, and with a capacity it stops rising at the capacity."""
    lo, hi = sorted((a, b))

    def step(x: float) -> float:
        return predict_training("mixtral-8x7b", "h100-sxm5-80gb", num_gpus=64, tp=2, sp=True,
                                ep=8, global_batch=256, moe_imbalance=x,
                                moe_capacity_factor=cap).step_time

    assert step(lo) <= step(hi) * (1 + 1e-12)
    if cap > 0 and lo >= cap:
        assert step(lo) == pytest.approx(step(hi), rel=1e-12)


def test_expert_tensor_parallelism_by_hand():
    """etp = 2: the GPU's grouped GEMMs take the tokens of both ETP ranks (16*2*2 = 64, 32 per
    local expert, efficiency 0.5*32/48 = 1/3) at half the expert width (f_e/2 = 2): expert_up
    2 x 2*32*(2*2)*8 = 4096 FLOP, as with etp = 1, at 1e12/3. Communication bytes per GPU:
    the all-to-all sends (2-1)/2 of 16*2*8*2 = 512 bytes twice (512); the all-gather and the
    reduce-scatter of the 1024 gathered bytes over 2 ranks send 512 each; x 0.75 MoE layers:
    1152 bytes against 384 without expert TP."""
    fwd = T.layer_forward_compute()
    etp2 = {**TINY, "etp": 2}
    assert _bind(fwd["expert_up"].flops, etp2) == pytest.approx(4096 * 0.75)
    assert _bind(fwd["expert_up"].time, etp2) == pytest.approx(4096 / (1e12 / 3) * 0.75)
    comm = T.ep_comm_layer_forward().bytes
    assert _bind(comm, TINY) == pytest.approx(384)
    assert _bind(comm, etp2) == pytest.approx(1152)


def test_expert_tp_splits_the_expert_weights():
    """Mixtral 8x7B, 64 GPUs, tp 2, ep 8: expert TP 2 halves the routed experts' weights per
    GPU (8/8 experts x 3*4096*14336 parameters x 32 layers x 2 bytes = 11.25 GiB, then
    5.625 GiB) and leaves the replicated part (attention, router, embeddings) alone."""
    def weights(etp: int) -> float:
        return predict_training("mixtral-8x7b", "h100-sxm5-80gb", num_gpus=64, tp=2, sp=True,
                                ep=8, etp=etp, global_batch=256).memory["weights"]

    expert = 32 * 3 * 4096 * 14336 * 2
    assert weights(1) - weights(2) == pytest.approx(expert / 2)
    assert weights(2) - weights(4) == pytest.approx(expert / 4)


@pytest.mark.parametrize("fields, message", [
    ({"num_gpus": 16, "ep": 8, "etp": 4}, r"^etp: ep\*etp = 32 does not divide tp\*cp\*dp = 16"),
    ({"num_gpus": 48, "ep": 8, "etp": 3}, r"^etp: 3 does not divide moe_ffn_hidden \(14336\)"),
    ({"num_gpus": 64, "ep": 8, "moe_imbalance": 4.5}, r"^moe_imbalance: 4.5 exceeds min"),
    ({"num_gpus": 64, "ep": 8, "moe_capacity_factor": -1}, r"^moe_capacity_factor: must be"),
])
def test_moe_field_rules_name_the_field(fields, message):
    with pytest.raises(ConfigError, match=message):
        predict_training("mixtral-8x7b", "h100-sxm5-80gb", tp=2, sp=True, global_batch=768,
                         **fields)
    with pytest.raises(ConfigError, match=r"^etp: 2 > 1 needs a mixture-of-experts model"):
        predict_training("llama-2-7b", "h100-sxm5-80gb", num_gpus=8, etp=2)


def test_dense_model_has_no_moe_terms():
    """n_experts = 0 (dense): every MoE term is zero and stays finite."""
    dense = {**TINY, "n_experts": 0, "top_k": 0, "dense_layers": 0}
    fwd = T.layer_forward_compute()
    for name in ("router", "expert_up", "expert_down", "moe_permute", "moe_overhead"):
        assert _bind(fwd[name].time, dense) == 0.0


def test_fp8_casts_count_routed_expert_inputs():
    """fp8 on, tp = 1: per token the casts read 2 and write 1 byte of the QKV input (h = 8),
    the output-projection input (a*d = 8) and the MLP inputs: dense layers h + f = 8 + 32,
    MoE layers k*(h + f_e) = 2*(8 + 4) = 24 (no shared expert). Average layer (MoE fraction
    0.75): 16 + 0.25*40 + 0.75*24 = 44 elements per token; 16 tokens * 44 * 3 = 2112 bytes."""
    c = T.fp8_cast_layer()
    assert _bind(c.bytes, {**TINY, "fp8": 1}) == pytest.approx(2112)
    # a shared expert adds its input h = 8 and its down-projection input f_e = 4 per token
    assert _bind(c.bytes, {**TINY, "fp8": 1, "shared_experts": 1}) == pytest.approx(
        2112 + 16 * 0.75 * 12 * 3)


def test_parameter_file_without_moe_terms_loads_with_zero(old_generation_values):
    """A parameter file from before moe_m_half and t_moe_layer existed loads with both 0
    (the model before these terms: no size penalty, no fixed MoE time)."""
    assert FALLBACK["moe_m_half"] == 0.0 and FALLBACK["t_moe_layer"] == 0.0
    vals = old_generation_values
    p = params_from_dict({"generations": {"hopper": vals}})
    g = p.generations["hopper"]
    assert g["moe_m_half"] == 0.0 and g["t_moe_layer"] == 0.0


def test_no_shared_expert_costs_nothing():
    """shared_experts = 0: the shared-expert entry is exactly 0 (before, its two width-0
    GEMMs still read their 16 x 8 input: 2 * 16 * 8 * 2 bytes); with one shared expert of
    width 4 its up-projection is 2 * 16 * (2*4) * 8 = 2048 FLOP, down 2 * 16 * 8 * 4 = 1024,
    its activation 8 FLOP per element * 16 * 4 = 512, times the MoE fraction 0.75: 2688."""
    fwd = T.layer_forward_compute()
    assert _bind(fwd["shared_experts"].bytes, TINY) == 0.0
    assert _bind(fwd["shared_experts"].flops, {**TINY, "shared_experts": 1}) == pytest.approx(
        (2048 + 1024 + 512) * 0.75)
