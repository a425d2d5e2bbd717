"""Inference of a dense decoder-only transformer as SymPy expressions: prefill (time to first
token), decode (time per output token), KV cache and memory, quantization, and steady-state
throughput under continuous (in-flight) batching.

Everything is built once with every quantity a free symbol (:mod:`symcost.symbols`, section
"inference" for the symbols only this model uses) and lowered once by
:func:`symcost.lower.lower`; the operators are those of the training model
(:mod:`symcost.ops`: roofline GEMM, FlashAttention, memory-bound elementwise ops, ring
collectives), so there is one GEMM and one collective model.

Execution model (per model replica of ``t*p`` GPUs; ``dp`` replicas serve independently)
-----------------------------------------------------------------------------------------
* **Layout.** Megatron tensor parallelism: attention heads and MLP columns split over ``t``
  ranks, two all-reduces of the ``tokens x h`` 16-bit activations per layer (Shoeybi et al.
  2019, Sec. 3). KV heads are split when ``k % t == 0`` and replicated when ``t % k == 0``
  (each rank holds ``max(k, t)/t`` KV heads; Megatron-LM, vLLM and TensorRT-LLM do the same);
  other combinations are rejected before lowering. Pipeline parallelism: ``ceil(L/p)`` layers
  per stage; the critical stage also carries the embedding and the LM head. MoE layers split
  every routed expert over the TP group (``ep = 1``), over ``t/ep`` GPUs of one of ``ep``
  expert groups inside it (``ep`` dividing ``t``), or keep whole experts on the TP groups of
  ``ep/t`` replicas that serve each other's tokens through an all-to-all (``ep`` a multiple
  of ``t``): :func:`expert_tp`, :func:`ep_replicas`, :func:`ep_comm`.
* **Prefill (TTFT).** ``batch`` prompts of ``input_len`` tokens, processed in
  ``n_c = ceil(batch*input_len / max_num_tokens)`` chunks of equal size (TensorRT-LLM / vLLM
  chunked context). Each chunk runs every GEMM with ``batch*input_len/n_c`` rows (so weights
  are read once per chunk), ``1/n_c`` of the batch's causal attention, and the LM head for
  ``batch/n_c`` rows (only the last position's logits are needed). With ``p`` stages the
  chunks are pipelined: ``TTFT = (n_c + p - 1) * t_stage + n_c * t_infer_step``.
* **Decode (TPOT).** One token for each of ``batch`` sequences per step, reading all weights
  and the KV cache. With ``p`` stages the batch is split into ``p`` micro-batches in flight
  (TensorRT-LLM/vLLM pipeline schedulers), so a sequence advances once every ``p`` stage
  times: ``TPOT = p * t_stage(batch/p) + t_infer_step``. The context grows from
  ``input_len + 1`` to ``input_len + output_len - 1`` over the ``output_len - 1`` decode
  steps; every decode cost is linear in the context, so the average step equals the step at
  the mean context ``c = input_len + output_len/2`` (exact for the linear terms; where an
  operator's roofline ``max`` switches regime within the context range, the step at the mean
  context is a lower bound on the mean step, by Jensen's inequality for the convex ``max``).
* **Request latency (static batch).** ``e2e = TTFT + (output_len - 1) * TPOT``; static
  throughput ``dp * batch * output_len / e2e``.
* **Serving under continuous batching at saturation** (Yu et al. 2022, Orca, OSDI'22,
  iteration-level scheduling; TensorRT-LLM in-flight batching). ``B`` sequences are in flight
  at every iteration; each iteration produces one token for each of them. In steady state
  ``B/output_len`` requests finish and as many start per iteration, so every iteration runs
  one fused forward pass over ``B*(output_len - 1)/output_len`` decode rows at the mean
  context plus ``B*input_len/output_len`` prefill rows (prefill and decode share the weights
  read and the GPU), attention for both, and the LM head for ``B`` rows::

      t_iter = p * t_stage(mixed rows of B/p sequences) + t_infer_step
      throughput = dp * B / t_iter        (generated tokens/s, all replicas)

  ``B = min(batch, serve_max_batch, p * max_num_tokens * output_len / (output_len - 1 +
  input_len))``: the requested cap, the KV-cache capacity, and the token budget of one
  iteration. The KV capacity counts ``input_len + output_len`` tokens per request when the
  runtime reserves them up front (``kv_on_demand = 0``, TensorRT-LLM ``GUARANTEED_NO_EVICT``)
  and the steady-state mean ``input_len + output_len/2`` when blocks are allocated on demand
  (``kv_on_demand = 1``, TensorRT-LLM ``MAX_UTILIZATION``, vLLM paged attention; Kwon et al.
  2023, SOSP). Assumptions: uniform requests (or the mean of a mix), no preemption, saturated
  queue (no idle time), and the averaged iteration stands for the mix of prefill-heavy and
  decode-only iterations (exact for the linear terms).
  Under this model the inter-token latency is ``t_iter`` and a request's first token arrives
  after on average half an iteration of waiting plus one iteration (``1.5 * t_iter``,
  queueing delay not modelled).
* **Memory per GPU.** Weights (linear weights of the layers at ``w_bytes``, embedding, LM head
  and norms at 16 bits: quantizers such as NVIDIA ModelOpt keep the LM head unquantized),
  an activation workspace sized for ``max_num_tokens`` tokens of one layer, and per sequence
  the KV cache of ``input_len + output_len`` tokens plus one fp32 logits row. The KV cache
  gets ``kv_mem_frac`` of what is left of ``hbm_cap - mem_reserved``; the largest batch is
  ``floor(kv_budget / per-sequence bytes)``.
* **Efficiencies.** The operators' ``eff_hbm`` and ``eff_attn`` are replaced by
  ``eff_hbm_infer`` and ``eff_attn_infer`` (:data:`INFERENCE_EFFICIENCIES`): serving kernels
  (weight-streaming GEMVs, paged KV reads, fused prefill attention) are not the training
  kernels those constants were calibrated on. Weight GEMMs hide only ``gemm_overlap`` of the
  shorter of their compute and HBM times under the longer (near the ridge point a kernel is
  slower than the roofline ``max``). ``eff_gemm``, ``eff_intra`` and ``eff_inter`` are
  shared with training; ``t_infer_step`` is a fixed time per forward step.
* **Quantization.** ``w_bytes``, ``act_bytes``, ``kv_bytes`` are the storage widths;
  GEMMs run at the dense peak of the activation (compute) dtype (the ``fp8`` flag selects
  ``peak_flops_8``, which the API binds to the fp8 or int8 peak), and weight-only
  quantization (``w_dequant = 1``) runs at ``eff_dequant`` of the GEMM rate. Attention runs
  at the 16-bit peak; the residual stream, norms and TP all-reduces stay 16-bit.

All times are in s, memory in bytes, FLOPs in FLOP, throughputs in tokens/s.
"""

from __future__ import annotations

import functools

import sympy as sp

from . import symbols as S
from .functions import CeilDiv, flag, replace_symbols, smax, smin
from .ops import attention as att
from .ops import collectives as coll
from .ops import elementwise as ew
from .ops import embedding as emb
from .ops.cost import Cost, select, sum_time, time_memory_bound, time_roofline, total
from .ops.gemm import gemm
from .training import (IS_MLA, IS_PP, attention_context_factor, attention_head_dim,
                       attention_linear_params, expert_width, experts_safe, gemm_peak,
                       head_dim, kv_context, kv_heads_local, layers_per_stage,
                       moe_layer_fraction, params_expert, params_moe_latent,
                       params_shared_expert, qkv_projection)

#: condition: FlashAttention (prefill) / flash-decoding (decode) kernels are used.
IS_FLASH = S.flash_attn > sp.Rational(1, 2)
#: a request's first token arrives after this many iterations under continuous batching
#: (half an iteration waiting for the next iteration boundary, one iteration of prefill).
TTFT_ITERATIONS = sp.Rational(3, 2)

#: The operators read ``eff_hbm`` and ``eff_attn`` (calibrated on training kernels); the
#: serving runtime's kernels (weight-streaming GEMVs, paged KV reads, fused prefill attention)
#: are a different kernel family, so the inference expressions use their own constants.
INFERENCE_EFFICIENCIES = {S.eff_hbm: S.eff_hbm_infer, S.eff_attn: S.eff_attn_infer}

#: names of the per-stage time terms, in order (see :func:`stage_costs`).
STAGE_TERMS = ("gemm", "attention", "memory_ops", "tp_comm", "ep_comm", "lm_head", "pp_p2p")
#: memory terms per GPU; they sum to ``mem_total``.
MEMORY = ("mem_weights", "mem_activations", "mem_kv_cache", "mem_logits")


# ----------------------------------------------------------------------------- shapes
def heads_local() -> sp.Expr:
    """Query heads per TP rank ``a/t``."""
    return S.n_heads / S.tp


def gemm_efficiency() -> sp.Expr:
    """Achieved fraction of the GEMM peak: ``eff_gemm``, times ``eff_dequant`` when weights are
    dequantized in the GEMM (weight-only quantization, e.g. AWQ/GPTQ int4 kernels)."""
    return S.eff_gemm * (1 - S.w_dequant * (1 - S.eff_dequant))


def attention_weights_local() -> sp.Expr:
    """Attention weight elements of one layer on one TP rank: ``h*d*(a/t + 2*k_l) + (a/t)*d*h``
    (QKV and output projection; ``k_l = max(k, t)/t`` KV heads per rank), or for multi-head
    latent attention the query path (``h*r_q`` replicated and ``r_q*(a/t)*(d+d_r)``, or
    ``h*(a/t)*(d+d_r)`` at full rank), the replicated KV down-projection ``h*(r+d_r)``, the KV
    up-projection ``r*(a/t)*2d`` (used absorbed into the query and output in decode, with the
    same weights and FLOP) and the output projection (DeepSeek-V2, arXiv:2405.04434,
    Sec. 2.1.2; vLLM's MLA layer keeps the down-projections replicated)."""
    h = S.hidden
    d, dr, r, rq = head_dim(), S.rope_head_dim, S.kv_lora_rank, S.q_lora_rank
    a_l, k_l = heads_local(), kv_heads_local()
    query = sp.Piecewise((h * a_l * (d + dr), rq < sp.Rational(1, 2)),
                         (h * rq + rq * a_l * (d + dr), True))
    mla = query + h * (r + dr) + r * a_l * 2 * d + a_l * d * h
    return IS_MLA * mla + (1 - IS_MLA) * (h * d * (a_l + 2 * k_l) + a_l * d * h)


def kv_elements_per_token_layer() -> sp.Expr:
    """KV-cache elements one token adds to one layer on one GPU: ``2*k_l*d`` (K and V of the
    local KV heads), or with MLA the compressed latent and the shared RoPE key ``r + d_r``,
    held whole on every TP rank (DeepSeek-V2, Sec. 2.1.2, Table 1: ``(d_c + d_h^R) * l``
    elements per token; vLLM's MLA backend does not split it)."""
    return IS_MLA * (S.kv_lora_rank + S.rope_head_dim) + (1 - IS_MLA) * 2 * kv_heads_local() * \
        head_dim()


def expert_tp() -> sp.Expr:
    """Tensor-parallel split of each routed expert in serving: ``max(t/ep, 1)`` (``ep = 1``:
    every expert over the TP group, vLLM and TensorRT-LLM tensor-parallel MoE; ``ep``
    dividing ``t``: TensorRT-LLM ``moe_tp_size = t/ep``; ``ep >= t``: whole experts)."""
    return smax(S.tp / S.ep, 1)


def ep_replicas() -> sp.Expr:
    """Replicas whose tokens one expert-parallel group serves: ``max(ep/t, 1)`` (wide EP with
    attention data parallelism, vLLM ``--enable-expert-parallel``, SGLang; 1 when the
    experts stay inside the TP group)."""
    return smax(S.ep / S.tp, 1)


def linear_weights_layer() -> sp.Expr:
    """Linear-weight elements of the average layer held by one GPU:
    :func:`attention_weights_local` (biases neglected), plus ``(2+g)*h*f/t`` for a dense MLP or, for the MoE
    fraction of the layers (:func:`symcost.training.moe_layer_fraction`), the ``E`` routed
    experts over ``max(t, ep)`` GPUs (``E/ep`` experts each split ``max(t/ep, 1)`` ways,
    :func:`expert_tp`: ``E*(2+g)*h*f_e/max(t, ep)``), the ``n_s`` shared experts split by TP
    (``n_s*(2+g)*h*f_e/t``), the replicated router ``h*E`` and a LatentMoE layer's
    projections ``2*h*l/t`` (the routed experts then ``l``-wide, :func:`expert_width`)."""
    h, f, g, t = S.hidden, S.ffn_hidden, S.gated_mlp, S.tp
    fm = moe_layer_fraction()
    moe = (S.n_experts * params_expert() / smax(t, S.ep)
           + (S.shared_experts * params_shared_expert() + params_moe_latent()) / t
           + h * S.n_experts)
    return attention_weights_local() + (1 - fm) * (2 + g) * h * f / t + fm * moe


def active_experts(rows: sp.Expr) -> sp.Expr:
    """Expected distinct routed experts ``rows`` tokens activate in one MoE layer:
    ``E * (1 - (1 - k/E)^rows)`` (uniform, independent top-``k`` routing): every activated
    expert's weights are read once per step, so a decode batch of a few tokens reads few
    experts and a large one reads them all."""
    e = experts_safe()
    return e * (1 - (1 - S.top_k / e) ** rows)


def kv_bytes_per_token() -> sp.Expr:
    """KV-cache bytes one token occupies on one GPU at full attention:
    ``ceil(L/p) * kv_elements_per_token_layer * kv_bytes`` (Pope et al. 2022, "Efficiently
    Scaling Transformer Inference", Sec. 2.2). Llama-2-70B in bf16, ``t = p = 1``:
    ``2*80*8*128*2 = 327,680``; DeepSeek-V3 (MLA, ``r + d_r = 576``): ``61*576*2 = 70,272``
    at any TP. Sliding-window layers hold at most the window: :func:`kv_bytes_per_sequence`."""
    return layers_per_stage() * kv_elements_per_token_layer() * S.kv_bytes


def kv_bytes_per_sequence(context: sp.Expr) -> sp.Expr:
    """KV-cache bytes of one sequence of ``context`` tokens on one GPU:
    :func:`kv_bytes_per_token` times the tokens the average layer keeps
    (:func:`symcost.training.kv_context`: ``min(context, W)`` on sliding-window layers)."""
    return kv_bytes_per_token() * kv_context(context)


def weight_bytes() -> sp.Expr:
    """Weight bytes per GPU on the largest pipeline stage: ``ceil(L/p)`` layers of linear
    weights at ``w_bytes`` and norms at 16 bits, the vocabulary-parallel embedding (``V*h/t``)
    and, with ``p = 1``, the untied LM head, 16-bit; learned positions and the final norm."""
    h, V, t = S.hidden, S.vocab, S.tp
    Ls = layers_per_stage()
    embed = V * h / t * (1 + (1 - S.tied_embed) * (1 - IS_PP))
    other = 2 * Ls * h + S.learned_pos * S.max_seq_len * h + h
    return S.w_bytes * Ls * linear_weights_layer() + S.BYTES_PARAM * (embed + other)


def activation_workspace_bytes() -> sp.Expr:
    """Transient activation buffers of one layer for ``max_num_tokens`` tokens (reused across
    layers): layer input and residual (``2h``), Q/K/V, attention output, MLP intermediate
    (``(2+g)*f/t``), 16-bit."""
    h, f, g, t = S.hidden, S.ffn_hidden, S.gated_mlp, S.tp
    d, a_l, k_l = head_dim(), heads_local(), kv_heads_local()
    fm = moe_layer_fraction()
    mlp = ((1 - fm) * (2 + g) * f / t
           + fm * (S.top_k + S.shared_experts) * (2 + g) * S.moe_ffn_hidden / t)
    per_token = 2 * h + (2 * a_l + 2 * k_l) * d + mlp
    return S.max_num_tokens * per_token * S.BYTES_ACT


def logits_bytes_per_sequence() -> sp.Expr:
    """One fp32 logits row per in-flight sequence, vocabulary-parallel: ``4*V/t`` bytes."""
    return S.BYTES_LOGIT * S.vocab / S.tp


# ----------------------------------------------------------------------------- operators
def layer_gemms(rows: sp.Expr) -> dict[str, Cost]:
    """The four weight GEMMs of one layer for ``rows`` token rows on one GPU.

    Weights are read at ``w_bytes`` per element, activations at ``act_bytes``; the GEMM runs
    at the compute dtype's peak (:func:`symcost.training.gemm_peak`) and
    :func:`gemm_efficiency`, and hides ``gemm_overlap`` of the shorter of its compute and HBM
    times under the longer (:func:`symcost.ops.cost.time_roofline`): near the ridge point a
    kernel is slower than the roofline's ``max``. With ``rows`` of 1-64 these are GEMVs
    (memory-bound).

    With multi-head latent attention ``qkv_proj`` is the query path, the KV down-projection
    and the KV up-projection (:func:`attention_weights_local`).

    MoE layers (a fraction :func:`symcost.training.moe_layer_fraction`) run, instead of the
    MLP, the router, the shared experts and grouped GEMMs over the GPU's share ``1/ep`` of the
    :func:`active_experts` routed experts, each ``f_e/max(t/ep, 1)`` wide
    (:func:`expert_tp`) and reading its weights once for its ``R*k/active`` tokens, where
    ``R = rows * max(ep/t, 1)`` are the tokens of the replicas one expert-parallel group
    serves (:func:`ep_replicas`): wide EP reads each expert once for more tokens. The busiest
    expert-parallel rank, whose time counts, runs ``moe_imbalance`` times the mean tokens
    (1: balanced). With ``ep = 1`` every GPU runs every active expert ``f_e/t`` wide.

    Returns:
        ``{"qkv_proj", "out_proj", "mlp_up", "mlp_down", "router", "experts",
        "shared_experts"}`` -> :class:`Cost` (FLOP, bytes, s).
    """
    h, f, g, t = S.hidden, S.ffn_hidden, S.gated_mlp, S.tp
    d, a_l = head_dim(), heads_local()
    kw = {"elem_bytes": S.act_bytes, "b_bytes": S.w_bytes, "eff": gemm_efficiency(),
          "overlap": S.gemm_overlap}
    peak = gemm_peak()
    fm = moe_layer_fraction()
    fe, sh = S.moe_ffn_hidden / expert_tp(), S.shared_experts * S.moe_ffn_hidden / t
    group_rows = rows * ep_replicas()
    active = active_experts(group_rows)
    per = group_rows * S.top_k / smax(active, 1) * S.moe_imbalance
    local = active / S.ep
    grouped = {**kw, "weight": False}
    return {
        "qkv_proj": qkv_projection(rows, peak, **kw),
        "out_proj": gemm(rows, h, a_l * d, peak, **kw),
        "mlp_up": gemm(rows, (1 + g) * f / t, h, peak, **kw).scale(1 - fm),
        "mlp_down": gemm(rows, h, f / t, peak, **kw).scale(1 - fm),
        "router": gemm(rows, S.n_experts, h, peak, **kw).scale(fm),
        "experts": (gemm(per, (1 + g) * fe, expert_width(), peak, local, **grouped)
                    + gemm(per, expert_width(), fe, peak, local, **grouped)
                    # LatentMoE: the h -> l and l -> h projections (zero without a latent)
                    + (gemm(rows, S.moe_latent_size / t, h, peak, **kw)
                       + gemm(rows, h, S.moe_latent_size / t, peak, **kw)).scale(
                           smin(S.moe_latent_size, 1))).scale(fm),
        "shared_experts": (gemm(rows, (1 + g) * sh, h, peak, **kw)
                           + gemm(rows, h, sh, peak, **kw)).scale(fm),
    }


def layer_memory_ops(rows: sp.Expr) -> dict[str, Cost]:
    """Memory-bound operators of one layer for ``rows`` tokens: two norms, two residual adds
    (no dropout at inference), the MLP activation, and the write of the new tokens' K and V
    into the cache (``rows * kv_elements_per_token_layer * kv_bytes``)."""
    h, f, g, t = S.hidden, S.ffn_hidden, S.gated_mlp, S.tp
    kv_write = rows * kv_elements_per_token_layer() * S.kv_bytes
    return {
        "norms": ew.norm(rows * h).scale(2),
        "residual": ew.residual_dropout(rows * h, sp.Integer(0)).scale(2),
        "activation": ew.activation(rows * f / t, g).scale(1 - moe_layer_fraction())
        + ew.activation(rows * (S.top_k * S.moe_imbalance + S.shared_experts)
                        * S.moe_ffn_hidden / t, g).scale(moe_layer_fraction()),
        "kv_write": Cost(sp.Integer(0), kv_write,
                         time_memory_bound(kv_write, S.hbm_bw, S.eff_hbm)),
    }


def attention_prefill(seqs: sp.Expr, length: sp.Expr) -> Cost:
    """Causal self-attention of ``seqs`` prompts of ``length`` tokens (no earlier context) on
    one GPU: FlashAttention when ``flash_attn`` is 1 (sliding-window layers compute only the
    band, :func:`symcost.training.attention_context_factor`), else the unfused kernel with the
    ``s x s`` scores in HBM (:mod:`symcost.ops.attention`), at the 16-bit peak; the
    FlashAttention kernel runs its softmax between its matmuls on GPUs without asynchronous
    warpgroup MMA (``async_mma`` 0, :func:`symcost.ops.attention.flash_work`). Multi-head
    latent attention prefills in the up-projected form (vLLM, FlashMLA: absorption pays off
    only in decode)."""
    a_l = heads_local()
    # MLA prefill runs up-projected (non-absorbed) attention: per-head keys of width d + d_r,
    # values of width d (attention_head_dim averages the two), one K/V head per query head
    d = attention_head_dim()
    k_l = IS_MLA * a_l + (1 - IS_MLA) * kv_heads_local()
    # serving kernels overlap the softmax with the matmuls where the GPU has asynchronous
    # warpgroup MMA (FlashAttention-3, TensorRT-LLM's Hopper kernels), not before (FA2-style)
    flash = att.attention_flash(seqs, length, a_l, k_l, d, S.peak_flops_16,
                                1 - S.async_mma).scale(
        attention_context_factor(length))  # sliding-window layers: banded blocks only
    unfused = att.attention_unfused(seqs, length, a_l, k_l, d, S.peak_flops_16, sp.Integer(0))
    return select(IS_FLASH, flash, unfused)


def attention_decode(seqs: sp.Expr, context: sp.Expr,
                     window_context: sp.Expr | None = None) -> Cost:
    """Attention of one new token of each of ``seqs`` sequences over ``context`` cached tokens.

    FLOP ``4 * seqs * context * (a/t) * d`` (QK^T and AV). Flash-decoding (``flash_attn`` 1;
    Dao, Haziza, Massa and Sizov 2023, "Flash-Decoding for long-context inference", PyTorch
    blog) splits the context across thread blocks and reads each KV head once per sequence:
    ``seqs * context * 2 * k_l * d * kv_bytes`` plus Q and O. The unfused path (``flash_attn``
    0; e.g. Hugging Face ``repeat_kv``) expands K/V to every query head, so it reads
    ``a/t`` heads' worth of cache, and writes and reads the 16-bit scores and probabilities.

    Sliding-window layers attend to ``min(context, W)`` tokens, or to ``window_context``
    when given (:func:`symcost.training.kv_context`; the decode mean is
    :func:`mean_decode_window_context`). Multi-head latent attention decodes absorbed
    (DeepSeek-V2, arXiv:2405.04434, App. C; FlashMLA): ``2*seqs*context*(a/t)*(2r + d_r)``
    FLOP over the latent cache, read once: ``seqs*context*(r + d_r)*kv_bytes``.

    Returns:
        :class:`Cost`; time is the roofline at the 16-bit peak with ``eff_attn`` and
        ``eff_hbm``.
    """
    d, a_l, k_l = head_dim(), heads_local(), kv_heads_local()
    ctx = kv_context(context, window_context)  # windowed layers attend to the window only
    f = 4 * seqs * ctx * a_l * d
    q_o = 2 * seqs * a_l * d * S.BYTES_ACT
    flash_bytes = seqs * ctx * 2 * k_l * d * S.kv_bytes + q_o
    scores = seqs * a_l * ctx
    unfused_bytes = seqs * ctx * 2 * a_l * d * S.kv_bytes + q_o + 4 * scores * S.BYTES_ACT
    flash = Cost(f, flash_bytes, time_roofline(f, flash_bytes, S.peak_flops_16, S.eff_attn,
                                               S.hbm_bw, S.eff_hbm))
    unfused = Cost(f + 5 * scores, unfused_bytes,
                   time_roofline(f, unfused_bytes, S.peak_flops_16, S.eff_attn, S.hbm_bw,
                                 S.eff_hbm))
    # MLA, absorbed (FlashMLA): every head scores the cached latent and RoPE key (r + d_r)
    # and sums the latents (r); the latent cache is read once for all local heads
    r, dr = S.kv_lora_rank, S.rope_head_dim
    f_mla = 2 * seqs * ctx * a_l * (2 * r + dr)
    mla_bytes = seqs * ctx * (r + dr) * S.kv_bytes + seqs * a_l * (2 * r + dr) * S.BYTES_ACT
    mla = Cost(f_mla, mla_bytes, time_roofline(f_mla, mla_bytes, S.peak_flops_16, S.eff_attn,
                                               S.hbm_bw, S.eff_hbm))
    return select(S.kv_lora_rank > sp.Rational(1, 2), mla, select(IS_FLASH, flash, unfused))


def tp_comm(rows: sp.Expr) -> Cost:
    """Two ring all-reduces of the ``rows x h`` 16-bit activations over the TP group per layer
    (:func:`symcost.ops.collectives.all_reduce`; zero for ``t = 1``)."""
    return coll.all_reduce(rows * S.hidden * S.BYTES_ACT, S.tp).scale(2)


def ep_comm(rows: sp.Expr) -> Cost:
    """All-to-all dispatch and combine of one MoE layer under wide expert parallelism
    (``ep > t``): each GPU sends its ``rows/t`` tokens' ``k`` routed copies (``h``, or the
    LatentMoE width ``l``, 16-bit activations each; ``moe_imbalance`` times as many arrive at
    the busiest rank) over the ``ep`` ranks and receives the results back
    (:func:`symcost.ops.collectives.all_to_all`, twice); zero when the experts stay inside the
    TP group (``ep <= t``: the tokens are already on every rank of the group and the TP
    all-reduce combines, TensorRT-LLM). Weighted by the MoE fraction of the layers. The
    attention's TP all-reduce (:func:`tp_comm`) is kept as it is.

    References:
        Rajbhandari et al. 2022, "DeepSpeed-MoE", Sec. 5.2 (expert-parallel all-to-all);
        DeepSeek-V3 technical report (arXiv:2412.19437), Sec. 3.4 (dispatch/combine in
        serving).
    """
    wide = flag(S.ep - S.tp > sp.Rational(1, 2))
    a2a = coll.all_to_all(rows / S.tp * S.top_k * S.moe_imbalance * expert_width()
                          * S.BYTES_ACT, S.ep)
    return a2a.scale(2 * wide * moe_layer_fraction())


def lm_head(rows: sp.Expr, logits_rows: sp.Expr) -> dict[str, Cost]:
    """Embedding gather for ``rows`` tokens, final norm, the vocabulary-parallel LM head GEMM
    (16-bit weights) and the fp32 logits write/read for sampling for ``logits_rows`` rows, and
    the TP all-gather of the logits."""
    h, V, t = S.hidden, S.vocab, S.tp
    logit_bytes = 2 * logits_rows * V / t * S.BYTES_LOGIT
    return {
        "embedding": emb.embedding_lookup(rows, h),
        "final_norm": ew.norm(logits_rows * h),
        "lm_head": emb.lm_head(logits_rows, h, V / t, S.peak_flops_16),
        "sampling": Cost(logits_rows * V / t * 5, logit_bytes,
                         time_memory_bound(logit_bytes, S.hbm_bw, S.eff_hbm)),
        "logits_gather": coll.all_gather(logits_rows * V * S.BYTES_ACT, t),
    }


def pp_p2p(rows: sp.Expr) -> Cost:
    """Send of the ``rows x h`` boundary activations to the next pipeline stage (zero for
    ``p = 1``); intra-node when the replica fits in one node."""
    c = coll.p2p(rows * S.hidden * S.BYTES_ACT, S.tp * S.pp <= S.gpus_per_node)
    return c.scale(IS_PP)


def stage_costs(rows: sp.Expr, dec_seqs: sp.Expr, context: sp.Expr, pre_seqs: sp.Expr,
                pre_len: sp.Expr, logits_rows: sp.Expr,
                pre_attention_scale: sp.Expr = sp.Integer(1),
                window_context: sp.Expr | None = None) -> dict[str, Cost]:
    """One forward step of the critical pipeline stage (``ceil(L/p)`` layers plus the LM head).

    Args:
        rows: token rows every weight GEMM processes (decode tokens + prefill tokens).
        dec_seqs: sequences decoding one token at ``context`` cached tokens.
        context: cached tokens each decoding sequence attends to.
        pre_seqs: prompts being prefilled, of ``pre_len`` tokens each (causal).
        pre_len: prompt length.
        logits_rows: rows that need logits (one per sequence producing a token).
        pre_attention_scale: fraction of the prompts' attention done in this step (chunking).
        window_context: tokens a decoding sequence's sliding-window layers attend to (default
            ``min(context, W)``; :func:`attention_decode`).

    Returns:
        :data:`STAGE_TERMS` -> :class:`Cost` (FLOP, bytes and s of the whole stage).
    """
    Ls = layers_per_stage()
    attn = (attention_decode(dec_seqs, context, window_context)
            + attention_prefill(pre_seqs, pre_len).scale(pre_attention_scale))
    return {
        "gemm": total(layer_gemms(rows).values()).scale(Ls),
        "attention": attn.scale(Ls),
        "memory_ops": total(layer_memory_ops(rows).values()).scale(Ls),
        "tp_comm": tp_comm(rows).scale(Ls),
        "ep_comm": ep_comm(rows).scale(Ls),
        "lm_head": total(lm_head(rows, logits_rows).values()),
        "pp_p2p": pp_p2p(rows),
    }


def mean_decode_context() -> sp.Expr:
    """Mean context of the ``output_len - 1`` decode steps: ``input_len + output_len/2``
    (step ``j`` attends to ``input_len + j`` tokens, ``j = 1 .. output_len - 1``)."""
    return S.input_len + S.output_len / 2


def mean_decode_window_context() -> sp.Expr:
    """Mean tokens a sliding-window layer (window ``W``) attends to over the decode steps: the
    mean of ``min(c, W)`` for a context ``c`` running uniformly from ``a = input_len`` to
    ``b = input_len + output_len`` (the continuous form of :func:`mean_decode_context`).
    With ``u = min(max(W, a), b)``: ``((u^2 - a^2)/2 + W*(b - u)) / (b - a)``; ``W`` when
    the window is filled before decoding starts (``W <= a``), the plain mean when it never
    fills (``W >= b``). Taking ``min(mean context, W)`` instead overestimates whenever the
    window fills during decoding (Mistral-7B, ``W = 4096``, 2,048 -> 4,096 tokens: 4,096
    against the exact 3,584).

    Returns:
        Tokens (a SymPy expression; finite without a window, where it is unused).
    """
    a = S.input_len
    b = S.input_len + smax(S.output_len, 1)
    w = smax(S.sliding_window, 1)
    u = smin(smax(w, a), b)
    return ((u**2 - a**2) / 2 + w * (b - u)) / (b - a)


# ----------------------------------------------------------------------------- the model
@functools.lru_cache(maxsize=1)
def inference_expressions() -> dict[str, sp.Expr]:
    """All inference outputs as SymPy expressions over :mod:`symcost.symbols`.

    Returns:
        Mapping name -> expression:

        * latency, s: ``ttft`` (prefill of ``batch`` prompts), ``tpot`` (one decode step of
          ``batch`` sequences at the mean context), ``e2e_latency`` (static batch),
          ``prefill_<term>`` and ``decode_<term>`` for each of :data:`STAGE_TERMS` (per
          stage, one chunk / one step), ``prefill_chunks``;
        * throughput, tokens/s over all ``dp`` replicas: ``throughput_static``,
          ``throughput`` (continuous batching, see module docstring), ``serve_batch``
          (sequences in flight), ``serve_iteration`` (s), ``serve_ttft`` (s) and
          ``serve_<term>`` for each of :data:`STAGE_TERMS` (one iteration of one stage);
        * decode roofline summary per stage and step, s: ``decode_gemm_time_compute`` and
          ``decode_gemm_time_memory`` (the linear layers' compute and HBM times);
        * work: ``prefill_flops`` (FLOP for the whole batch's prompts, one replica),
          ``decode_flops_per_step`` and ``decode_bytes_per_step`` (one GPU, one step);
        * memory per GPU, bytes: :data:`MEMORY`, ``mem_total``, ``mem_usable``,
          ``mem_kv_budget``, ``mem_headroom`` (``batch`` fits iff >= 0),
          ``kv_bytes_per_token``, ``kv_bytes_per_sequence``, ``max_batch`` (largest static
          batch that fits: every sequence at ``input_len + output_len`` tokens; < 1 means
          nothing fits), ``serve_max_batch`` (sequences in flight under continuous batching,
          see ``kv_on_demand``); ``num_gpus``.
    """
    B, s_in, s_out, p = S.batch, S.input_len, S.output_len, S.pp
    out: dict[str, sp.Expr] = {}

    # --- memory
    kv_tok = kv_bytes_per_token()
    kv_seq = kv_bytes_per_sequence(s_in + s_out)
    per_seq = kv_seq + logits_bytes_per_sequence()
    weights = weight_bytes()
    workspace = activation_workspace_bytes()
    usable = S.hbm_cap - S.mem_reserved
    budget = S.kv_mem_frac * (usable - weights - workspace)
    max_batch = sp.floor(budget / per_seq)
    # continuous batching: a request holds input_len + j tokens at progress j; with on-demand
    # allocation the in-flight requests hold input_len + output_len/2 on average
    serve_seq = (kv_bytes_per_sequence(s_in + s_out * (1 - S.kv_on_demand / 2))
                 + logits_bytes_per_sequence())
    serve_max_batch = sp.floor(budget / serve_seq)
    out["mem_weights"] = weights
    out["mem_activations"] = workspace
    out["mem_kv_cache"] = B * kv_seq
    out["mem_logits"] = B * logits_bytes_per_sequence()
    out["mem_total"] = sp.Add(*(out[k] for k in MEMORY))
    out["mem_usable"] = usable
    out["mem_kv_budget"] = budget
    out["mem_headroom"] = budget - B * per_seq
    out["kv_bytes_per_token"] = kv_tok
    out["kv_bytes_per_sequence"] = kv_seq
    out["max_batch"] = max_batch
    out["serve_max_batch"] = serve_max_batch

    # --- prefill: batch prompts in n_c equal chunks, pipelined over p stages
    tokens = B * s_in
    n_c = CeilDiv(tokens, S.max_num_tokens)
    pre = stage_costs(tokens / n_c, sp.Integer(0), sp.Integer(0), B, s_in, B / n_c,
                      pre_attention_scale=1 / n_c)
    t_pre = sum_time(pre)
    out["ttft"] = (n_c + p - 1) * t_pre + n_c * S.t_infer_step
    out["prefill_chunks"] = n_c
    for k, c in pre.items():
        out[f"prefill_{k}"] = c.time

    # --- decode: batch/p sequences per micro-batch at the mean context
    ctx, ctx_w = mean_decode_context(), mean_decode_window_context()
    b = B / p
    dec = stage_costs(b, b, ctx, sp.Integer(0), sp.Integer(0), b, window_context=ctx_w)
    out["tpot"] = p * sum_time(dec) + S.t_infer_step
    for k, c in dec.items():
        out[f"decode_{k}"] = c.time
    gemms = layer_gemms(b).values()
    eff_c = gemm_peak() * gemm_efficiency()
    out["decode_gemm_time_compute"] = layers_per_stage() * sp.Add(*(g.flops for g in gemms)) / eff_c
    out["decode_gemm_time_memory"] = (layers_per_stage() * sp.Add(*(g.bytes for g in gemms))
                                      / (S.hbm_bw * S.eff_hbm))
    comm = ("tp_comm", "ep_comm", "pp_p2p")
    out["decode_flops_per_step"] = sp.Add(*(c.flops for k, c in dec.items() if k not in comm))
    out["decode_bytes_per_step"] = sp.Add(*(c.bytes for k, c in dec.items() if k not in comm))
    out["e2e_latency"] = out["ttft"] + (s_out - 1) * out["tpot"]
    out["throughput_static"] = S.dp * B * s_out / out["e2e_latency"]

    # --- model FLOPs of the prefill (one replica): 2 per weight per token, the causal
    # attention in the full-matrix convention (4*b*s^2*a*d per layer), the LM head per prompt
    h, a, f, g = S.hidden, S.n_heads, S.ffn_hidden, S.gated_mlp
    fm = moe_layer_fraction()
    layer_w = (attention_linear_params() + (1 - fm) * (2 + g) * h * f
               + fm * (S.top_k * params_expert() + S.shared_experts * params_shared_expert()
                       + h * S.n_experts + params_moe_latent()))
    out["prefill_flops"] = (2 * tokens * S.n_layers * layer_w
                            + S.n_layers * att.flops_attention(B, s_in, a, attention_head_dim())
                            * attention_context_factor(s_in)
                            + 2 * B * h * S.vocab)

    # --- continuous batching at saturation
    token_cap = p * S.max_num_tokens * s_out / (s_out - 1 + s_in)
    B_eff = smax(smin(B, serve_max_batch, token_cap), sp.Integer(0))
    b = B_eff / p
    mix = stage_costs(b * (s_out - 1 + s_in) / s_out, b * (s_out - 1) / s_out, ctx,
                      b / s_out, s_in, b, window_context=ctx_w)
    t_iter = p * sum_time(mix) + S.t_infer_step
    for k, c in mix.items():
        out[f"serve_{k}"] = c.time
    out["serve_batch"] = B_eff
    out["serve_iteration"] = t_iter
    out["serve_ttft"] = TTFT_ITERATIONS * t_iter
    out["throughput"] = S.dp * B_eff / t_iter
    out["num_gpus"] = S.tp * S.pp * S.dp
    memo: dict[sp.Basic, sp.Expr] = {}
    # issue 13: the serving framework's own per-step time adds to t_infer_step
    subs = {**INFERENCE_EFFICIENCIES, S.t_infer_step: S.t_infer_step + framework_step_overhead()}
    return {k: replace_symbols(sp.sympify(v), subs, memo)
            for k, v in out.items()}


def framework_step_overhead() -> sp.Expr:
    """Time (s) the chosen serving framework adds to every forward step: its scheduler, block
    tables, sampling and Python overheads, one calibratable constant per framework
    (``t_sched_vllm``, ``t_sched_lightllm``, ``t_sched_tgi``, ``t_sched_trtllm``; 0 for
    ``generic``). Zhang et al. 2023 (arXiv:2311.03687v2, Sec. V) attribute the throughput
    differences of these frameworks at equal kernels to such per-iteration costs."""
    fw = S.framework
    half = sp.Rational(1, 2)
    return (flag((fw > half) & (fw < 3 * half)) * S.t_sched_vllm
            + flag((fw > 3 * half) & (fw < 5 * half)) * S.t_sched_lightllm
            + flag((fw > 5 * half) & (fw < 7 * half)) * S.t_sched_tgi
            + flag(fw > 7 * half) * S.t_sched_trtllm)


#: breakdown names of the prefill, decode and continuous-batching stage times.
PREFILL_BREAKDOWN = tuple(f"prefill_{k}" for k in STAGE_TERMS)
DECODE_BREAKDOWN = tuple(f"decode_{k}" for k in STAGE_TERMS)
SERVE_BREAKDOWN = tuple(f"serve_{k}" for k in STAGE_TERMS)
