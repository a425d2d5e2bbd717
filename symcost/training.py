"""Training step of a decoder-only transformer (dense or mixture-of-experts, MHA/GQA or MLA)
under TP/SP/CP/PP/DP/EP/ZeRO/HSDP, as SymPy expressions.

Everything is built once with every quantity a free symbol (:mod:`symcost.symbols`); a
prediction, a sweep and a gradient are then the same lowered function on different arrays.

Execution model (per optimizer step, the critical pipeline stage):

* Each GPU holds ``ceil(L/p)`` layers (the largest stage) plus the embedding and the LM head
  with the loss (exact for ``p = 1``; for ``p > 1`` the first and last stage hold them).
* Per micro-batch a stage runs forward, backward, recomputation, Megatron TP all-reduces
  (or SP all-gather/reduce-scatter, equal volume in the ring model), pipeline p2p of the
  boundary activations (scatter/gather optimisation: ``1/t`` of them), and with ZeRO-3 the
  exposed part of the parameter all-gathers and gradient reduce-scatter.
* Context parallelism divides every per-token cost and activation by ``c`` and adds the
  exposed part of its exchange (the ring of K/V blocks, a K/V all-gather or a head
  all-to-all, ``cp_comm_type``); MoE layers (a fraction of the layers) run
  the router, shared experts and grouped GEMMs over the ``E/e`` local experts with
  all-to-all dispatch and combine (see :func:`layer_forward_compute`,
  :func:`cp_comm_layer_forward`, :func:`ep_comm_layer_forward`).
* ``m = B/(d*b)`` micro-batches per step; 1F1B/interleaved bubble ``(p-1)/v`` micro-batch
  times (Narayanan et al. 2021, Sec. 2.2, bubble fraction ``(p-1)/(v*m)``).
* ZeRO 0-2 synchronise gradients once per step (all-reduce, or reduce-scatter plus the
  parameter all-gather of the distributed optimizer), overlapped with the last micro-batch's
  backward (and the next forward) when ``dp_overlap`` is 1; ZeRO-3 (FSDP) gathers parameters
  in every micro-batch's forward and backward and reduce-scatters gradients. Reduce-scatters
  and all-gathers run one per layer (FSDP units, distributed-optimizer buckets), each paying
  its ring latency; the ZeRO-0 gradient all-reduce is one bucketed collective.
* Activation offloading (``activation_offload_layers``, ``pp = 1``): the offloaded layers'
  activations leave HBM, and their host-link copies add only what the layers' compute does
  not hide (:func:`activation_offload_exposed`).
* Adam step memory-bound on the locally held optimizer shard; a fixed per-step overhead.

MFU counts model FLOPs without recomputation; HFU adds the recomputed forward work
(Korthikanti et al. 2022, arXiv:2205.05198, Sec. 6; Chowdhery et al. 2022, PaLM, App. B).
Both use the dense peak of the compute dtype.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import sympy as sp

from . import finetune as ft
from . import symbols as S
from .functions import CeilDiv, flag, replace_symbols, smax, smin
from .ops import attention as att
from .ops import collectives as coll
from .ops import elementwise as ew
from .ops import embedding as emb
from .ops import ssm
from .ops.cost import Cost, select, sum_time, time_memory_bound
from .ops.gemm import gemm, size_efficiency
from .ops.optimizer import adam_step

# ----------------------------------------------------------------------------- mode flags
IS_SELECTIVE = flag((S.recompute > sp.Rational(1, 2)) & (S.recompute < sp.Rational(3, 2)))
IS_FULL = flag(S.recompute > sp.Rational(3, 2))
#: [recompute] the share of the layers full recomputation recomputes: 1 with
#: ``recompute_layers`` 0 (every layer), else ``min(recompute_layers, L/(p*v))/(L/(p*v))``, the
#: first ``recompute_layers`` of each pipeline chunk (Megatron-Core ``--recompute-method
#: block --recompute-num-layers``; the other layers keep their activations); 0 unless
#: ``recompute = full``. The time and FLOP terms of recomputation scale with it.
ALL_LAYERS = flag(S.recompute_layers < sp.Rational(1, 2))
FULL_SHARE = IS_FULL * (ALL_LAYERS + (1 - ALL_LAYERS)
                        * smin(S.recompute_layers * S.pp * S.vpp / S.n_layers, 1))
IS_NONE = flag(S.recompute < sp.Rational(1, 2))
#: [recompute] 1 when selective recomputation recomputes the attention core (the
#: ``recompute_modules`` default, Korthikanti et al. 2022 Sec. 5)
RC_CORE_ATTN = IS_SELECTIVE * S.rc_core_attn
IS_ZERO3 = flag(S.zero_stage > sp.Rational(5, 2))
IS_PP = flag(S.pp > sp.Rational(3, 2))
IS_INTERLEAVED = flag(S.vpp > sp.Rational(3, 2))
IS_MOE = flag(S.n_experts > sp.Rational(1, 2))
IS_MLA = flag(S.kv_lora_rank > sp.Rational(1, 2))
IS_CP = flag(S.cp > sp.Rational(3, 2))
#: the context-parallel exchange (``cp_comm_type``): ring, K/V all-gather, Ulysses all-to-all
CP_P2P = flag(S.cp_comm_type < sp.Rational(1, 2))
CP_ALLGATHER = flag((S.cp_comm_type > sp.Rational(1, 2)) & (S.cp_comm_type < sp.Rational(3, 2)))
CP_A2A = flag(S.cp_comm_type > sp.Rational(3, 2))
#: 1 for a hybrid Mamba-Transformer: each layer is one block of its pattern.
IS_HYBRID = flag(S.hybrid > sp.Rational(1, 2))


# ----------------------------------------------------------------------------- shapes
def head_dim() -> sp.Expr:
    """Head dimension ``d`` (elements): the model's ``head_dim`` where it sets one, else
    ``h/a``."""
    return sp.Piecewise((S.hidden / S.n_heads, S.head_dim_given < sp.Rational(1, 2)),
                        (S.head_dim_given, True))


def qk_head_dim() -> sp.Expr:
    """Query/key width per head: ``d``, plus the decoupled RoPE part ``d_r`` with MLA
    (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1.3)."""
    return head_dim() + IS_MLA * S.rope_head_dim


def attention_head_dim() -> sp.Expr:
    """Head width that gives the attention core's FLOPs with :mod:`symcost.ops.attention`
    (``QK^T`` over ``d + d_r``, ``PV`` over ``d``): ``d + d_r/2``."""
    return head_dim() + IS_MLA * S.rope_head_dim / 2


def moe_layer_fraction() -> sp.Expr:
    """Fraction of the layers that are MoE layers: ``(L - L_dense) / (step * L)`` (0 for a
    dense model). Per-stage costs use the average layer; MoE layers spread over the
    pipeline stages as in Megatron-Core (the leading dense layers sit on the first stage,
    which the average slightly understates). [hybrid] For a hybrid pattern, its ``E`` blocks
    over all blocks: ``(L - L_attn - L_mamba - L_mlp)/L``."""
    blocks = (S.n_layers - S.attn_layers - S.mamba_layers - S.mlp_layers) / S.n_layers
    dense = (S.n_layers - S.dense_layers) / (S.moe_layer_step * S.n_layers)
    return IS_MOE * (IS_HYBRID * blocks + (1 - IS_HYBRID) * dense)


# [hybrid] layer fractions: a transformer layer holds an attention block and an MLP (dense or
# MoE); a hybrid Mamba-Transformer layer is one block of its pattern (Megatron-Core
# HybridModel: each block has its own pre-norm and residual), so the average layer is the
# pattern's mix of attention, Mamba-2, dense-MLP and MoE blocks.
def attention_layer_fraction() -> sp.Expr:
    """Attention blocks per layer: 1 for a transformer, ``L_attn/L`` for a hybrid."""
    return IS_HYBRID * S.attn_layers / S.n_layers + (1 - IS_HYBRID)


def mamba_layer_fraction() -> sp.Expr:
    """Mamba-2 blocks per layer: ``L_mamba/L`` (0 for a transformer)."""
    return IS_HYBRID * S.mamba_layers / S.n_layers


def ffn_layer_fraction() -> sp.Expr:
    """MLP blocks (dense or MoE) per layer: 1 for a transformer, ``(L - L_attn -
    L_mamba)/L`` for a hybrid."""
    return (IS_HYBRID * (S.n_layers - S.attn_layers - S.mamba_layers) / S.n_layers
            + (1 - IS_HYBRID))


def mlp_layer_fraction() -> sp.Expr:
    """Dense-MLP blocks per layer: :func:`ffn_layer_fraction` less the MoE ones."""
    return ffn_layer_fraction() - moe_layer_fraction()


def blocks_per_layer() -> sp.Expr:
    """Pre-norms, residual adds and tensor-parallel collective pairs per layer: 2 for a
    transformer layer (attention and MLP), 1 for a hybrid block."""
    return 2 - IS_HYBRID


def swa_layer_fraction() -> sp.Expr:
    """Fraction of the layers with sliding-window attention: ``(L - floor(L/n))/L`` with
    ``n = full_attention_step`` (every n-th layer full), 1 when ``n = 0``, 0 without a window
    (Megatron-Core ``window_attn_skip_freq``; gpt-oss alternates, n = 2)."""
    step = S.full_attention_step
    full = sp.Piecewise((sp.floor(S.n_layers / smax(step, 1)), step > sp.Rational(1, 2)),
                        (0, True))
    return flag(S.sliding_window > sp.Rational(1, 2)) * (S.n_layers - full) / S.n_layers


def attention_length() -> sp.Expr:
    """Tokens one FlashAttention call attends over: ``min(doc_len, seq_len)`` for packed
    sequences (``doc_len > 0``: each document attends only to itself, the varlen/THD kernels
    skip the blocks between documents), else ``seq_len``.

    Packing documents of lengths ``l`` into sequences of ``s`` tokens leaves ``s/E[l]`` causal
    blocks of ``l^2/2`` scores per sequence, the work of ``s/L`` sequences of
    ``L = E[l^2]/E[l]`` tokens (``doc_len``). Krell et al. 2021, "Efficient Sequence Packing
    without Cross-contamination", arXiv:2107.02027, Sec. 3 (block-diagonal attention mask);
    Dao 2023, FlashAttention-2 (``flash_attn_varlen_func``, ``cu_seqlens``); Megatron-Core
    ``PackedSeqParams`` (THD format).

    Returns:
        Tokens (SymPy expression in ``doc_len`` and ``seq_len``).
    """
    # max(doc_len, 1): the branch a vectorized Piecewise also evaluates at doc_len = 0 stays
    # finite, so no 0 * inf reaches a gradient
    return sp.Piecewise((smin(smax(S.doc_len, 1), S.seq_len), S.doc_len > sp.Rational(1, 2)),
                        (S.seq_len, True))


def attention_context_factor(length: sp.Expr | None = None) -> sp.Expr:
    """Attention-core work of the average layer relative to full causal attention, for
    sequences of ``length`` tokens (default the training ``seq_len``).

    A windowed layer's token attends to ``min(W, position)`` tokens: on average
    ``W - W(W-1)/(2s)`` for ``W < s`` against ``(s+1)/2 ~ s/2`` with full causal attention
    (the exact count Megatron-Bridge's ``flop_utils`` uses), so its score work is
    ``min(1, (2W - W(W-1)/s)/s)`` of a causal layer's; FlashAttention skips the blocks
    outside the band. Returns ``1 - f_swa * (1 - that)`` (1 without a window).

    References:
        Beltagy et al. 2020, Longformer (arXiv:2004.05150), Sec. 3.1 (sliding window,
        O(s*W)); Jiang et al. 2023, Mistral 7B (arXiv:2310.06825), Sec. 2; NVIDIA-NeMo/
        Megatron-Bridge ``src/megatron/bridge/training/utils/flop_utils.py`` (average causal
        sliding-window context).
    """
    s = S.seq_len if length is None else length
    w = smin(S.sliding_window, s)  # a window as long as the sequence is full attention
    banded = smin(1, (2 * w - w * (w - 1) / s) / s)
    return 1 - swa_layer_fraction() * (1 - banded)


def flash_serial() -> sp.Expr:
    """1 when the FlashAttention kernels run each tile's softmax between its matmuls, 0 when
    they overlap it with another warpgroup's matmuls (:func:`symcost.ops.attention.
    flash_work`): serial for the flash-attn 2 library (``attention_backend = fa2``) and, on GPUs
    without asynchronous warpgroup matrix multiplies (``async_mma`` 0: Ampere, Ada, CDNA3), for
    the native kernels too, which are FlashAttention-2 kernels there:
    ``1 - (1 - attention_backend) * async_mma``."""
    return 1 - (1 - S.attention_backend) * S.async_mma


def flash_kernel(c: Cost) -> Cost:
    """A FlashAttention cost with the kernel library's speed: unchanged for the native kernels
    (``attention_backend = native``); for the flash-attn 2 library (``fa2``), which on Hopper
    uses neither the warpgroup MMA nor the TMA of the FlashAttention-3 / cuDNN kernels, the
    compute efficiency ``eff_attn`` becomes ``eff_attn * fa2_ratio`` (a memory-bound kernel is
    unaffected). Shah et al. 2024, "FlashAttention-3", arXiv:2407.08608, Sec. 1: FA2 reaches
    35% of H100 peak, FA3 75%. The callers also pass :func:`flash_serial` as the kernels'
    ``serial`` argument: FlashAttention-2's warps run the softmax between the matmuls, so its
    exponentials and FP32 FLOP add to the matmul time (:func:`symcost.ops.attention.
    flash_work`) on every GPU, Ampere included, where ``fa2_ratio`` is 1."""
    rate = 1 - S.attention_backend + S.attention_backend * S.fa2_ratio
    return Cost(c.flops, c.bytes, c.time.xreplace({S.eff_attn: S.eff_attn * rate}))


def attention_matmul_speedup() -> sp.Expr:
    """Tensor-core rate of the FlashAttention matmuls over the 16-bit peak: ``peak_flops_8 /
    peak_flops_16`` with ``fp8_attention`` (Transformer Engine ``fp8_dot_product_attention``:
    cuDNN's FP8 fused attention quantizes Q, K, V and the probabilities to FP8 for both
    matmuls, forward and backward), 1 without. The softmax's exponentials and FP32 work do not
    speed up (:func:`symcost.ops.attention.flash_work`), so the kernel gains less than the
    peak ratio wherever they bind (head dimension 64, Blackwell's exponential rate).

    References:
        NVIDIA Transformer Engine, ``DelayedScaling.fp8_dpa`` / ``fp8_dot_product_attention``;
        Shah et al. 2024, "FlashAttention-3" (arXiv:2407.08608), Sec. 3.3 (FP8 attention).
    """
    return 1 + S.fp8_attention * (S.peak_flops_8 / S.peak_flops_16 - 1)


def kv_context(context: sp.Expr, window_context: sp.Expr | None = None) -> sp.Expr:
    """Cached tokens the average layer holds and attends to at ``context`` tokens: ``context``
    on full-attention layers, ``min(context, W)`` on sliding-window layers (vLLM and
    TensorRT-LLM keep only the window's KV blocks): ``(1 - f) * context + f * min(context, W)``
    with ``f`` = :func:`swa_layer_fraction`.

    Args:
        context: tokens in the cache (a full-attention layer attends to all of them).
        window_context: tokens a sliding-window layer attends to, when not ``min(context, W)``
            (e.g. a mean over decode steps, :func:`symcost.inference.mean_decode_window_context`).
    """
    f = swa_layer_fraction()
    if window_context is None:
        window_context = smin(context, smax(S.sliding_window, 1))
    return (1 - f) * context + f * window_context


def experts_safe() -> sp.Expr:
    """``max(E, 1)``: the expert count as a divisor that stays finite for dense models (whose
    MoE terms are multiplied by 0)."""
    return smax(S.n_experts, 1)


def experts_local() -> sp.Expr:
    """Routed experts held per GPU: ``E/e`` (expert parallelism; Lepikhin et al. 2021,
    GShard, Sec. 3.2)."""
    return experts_safe() / S.ep


def moe_chunk_sort() -> Cost:
    """[moe] The ``alltoall`` dispatcher's two regroupings, per MoE layer pass, of the token
    vectors (:func:`expert_width` wide) a GPU receives: the busiest rank's ``n*k/t`` routed rows
    (:func:`moe_load_factor`), gathered over its ``etp`` expert tensor-parallel ranks, after the
    dispatch and again before the combine (:func:`symcost.ops.elementwise.chunk_sort`), when it
    holds more than one expert and the dispatch is not node-deduplicated (``ep_dedup``: the
    ``flex`` dispatcher permutes once instead); zero otherwise. The same in the backward (the
    gradients' rows)."""
    sorting = flag(experts_local() > sp.Rational(3, 2)) * (1 - S.ep_dedup)
    return ew.chunk_sort(routed_rows(), expert_width()).scale(2 * sorting)


def routed_rows() -> sp.Expr:
    """[moe] Token rows one GPU's experts process per micro-batch and MoE layer: the busiest
    expert-parallel rank's ``n*k/t`` routed copies (:func:`moe_load_factor`; ``n/t`` tokens per
    TP rank with SP, top-``k``), gathered over the ``etp`` expert tensor-parallel ranks, which
    each hold ``f_e/etp`` of every expert. Count of rows (dimensionless)."""
    return tokens_micro() * S.top_k / S.tp * moe_load_factor() * S.etp


def moe_load_factor() -> sp.Expr:
    """[moe] Routed-token load of the busiest expert-parallel rank over the balanced load
    ``n*k/ep``: ``moe_imbalance`` without a capacity (dropless), else
    ``min(moe_imbalance, moe_capacity_factor)``: each expert keeps at most the capacity's
    tokens and drops the rest (Lepikhin et al. 2021, GShard, Sec. 2.2, expert capacity;
    Fedus et al. 2022, Switch Transformer, Sec. 2.2, capacity factor). The busiest rank sets
    the step time: its grouped GEMMs, expert activations and the all-to-all it receives
    (Megatron-Core MoE documentation, "load balancing"; 1 with the balanced or force-balanced
    routing of benchmarks). Dimensionless.
    """
    dropless = S.moe_capacity_factor < sp.Rational(1, 10**6)
    return sp.Piecewise((S.moe_imbalance, dropless),
                        (smin(S.moe_imbalance, S.moe_capacity_factor), True))


def kv_heads_local() -> sp.Expr:
    """KV heads per TP rank: ``max(k, t)/t`` (KV heads are replicated when ``k < t``, as
    Megatron-LM and vLLM do; validation requires ``k % t == 0`` or ``t % k == 0``)."""
    return smax(S.n_kv_heads, S.tp) / S.tp


def tokens_micro() -> sp.Expr:
    """Tokens of one micro-batch on one GPU: ``b*s/c`` (context parallelism splits every
    sequence into ``c`` chunks; Liu et al. 2023, Ring Attention, arXiv:2310.01889)."""
    return S.micro_batch * S.seq_len / S.cp


def tokens_sp() -> sp.Expr:
    """Tokens of one micro-batch held per TP rank outside the TP regions: ``b*s/t`` with SP."""
    return tokens_micro() * (1 - S.sp_on + S.sp_on / S.tp)


def lm_head_compute() -> Cost:
    """Logits GEMM of one micro-batch on one GPU (``tokens_micro x h`` by ``h x V/t``), at the
    16-bit peak whatever the linear layers' dtype: Megatron-Core's output layer is a
    ``tensor_parallel.ColumnParallelLinear``, not a Transformer Engine module, so
    ``fp8_autocast`` does not reach it (NVIDIA Megatron-LM ``megatron/core/models/gpt/
    gpt_model.py``, ``self.output_layer``).

    Returns:
        :class:`~symcost.ops.cost.Cost` (FLOP, bytes, seconds) of the forward GEMM; the
        backward is twice it (input and weight gradients).

    References:
        Narayanan et al. 2021, Sec. 5.1: the ``6*B*s*h*V`` term of the step FLOPs.
    """
    return emb.lm_head(tokens_micro(), S.hidden, S.vocab / S.tp, S.peak_flops_16)


def gemm_peak() -> sp.Expr:
    """Rate FLOP/s the linear layers' GEMMs are timed at, before the bf16 matmul ceiling and
    the efficiency that :func:`~symcost.ops.cost.time_roofline` divides by: the dense peak of the
    GEMM dtype (:func:`spec_peak`: fp4 when ``fp4`` is 1 (NVFP4), fp8 when ``fp8`` is 1 (fp8 and
    MXFP8), else 16-bit), times the dtype's own ceiling over the bf16 one where it differs.
    Attention and the LM head stay 16-bit (Transformer Engine runs only the linear layers in
    fp8/fp4; NVIDIA, "Pretraining LLMs with NVFP4", arXiv:2509.25149, Sec. 4).

    * fp8 and MXFP8 GEMMs run at ``matmul_ceiling_fp8 / matmul_ceiling`` of the fp8 peak, so
      at ``matmul_ceiling_fp8 * eff`` of it: the GPU's measured maximum achievable fp8 matmul
      rate (:attr:`hwspecs.HardwareSpec.matmul_ceiling_fp8`; the bf16 fraction where not
      measured, a ratio of 1). At twice the bf16 rate a saturating fp8 matmul holds a lower
      clock: S. Bekman's MAMF table (ml-engineering ``compute/accelerator/README.md``, FP8
      ``float8_e4m3fn`` next to BF16) gives an H100 SXM 70.9% of its fp8 peak against 80.3% of
      its bf16 peak (ratio 0.883), an H200 73.4% (0.915), a B200 76.3% against 77.6% (0.983), a
      B300 74.5% against 78.6% (0.948), a GB200 72.3% against 72.9% (0.992).
    * NVFP4 runs at ``eff_fp4`` of the fp4 peak (calibrated; 1/2 on a GPU whose fp4 peak is
      twice its fp8 peak makes NVFP4 exactly as fast as fp8 at a ratio of 1): its recipe adds
      work the fp8 one does not, random Hadamard transforms on the weight-gradient inputs,
      16-element block scales in both layouts and stochastic rounding of the gradients (same
      paper, Sec. 4), which the casts of :func:`fp8_cast_layer` do not count.

    History of the fp8 rate. A calibrated ``eff_fp8`` in place of the ceiling ratio was tried on
    2026-11-27 (Hopper took 0.88, the Blackwell generations their bound 1; in-sample step-time
    MAPE 7.84% -> 7.74%, leave-one-source-out 20.82% -> 22.96%) and again on 2026-12-07 (Hopper
    0.871, matching the measured 0.883; in-sample 7.69% -> 7.59%, leave-one-source-out 15.89%
    -> 17.62%, serving 7.69% -> 9.29%), and not kept: a fitted constant per generation for what
    the hardware tables measure. Until 2026-12-07 fp8 GEMMs ran at the bf16 fraction of the fp8
    peak. With the measured ceilings, recalibrated: in-sample 7.69% -> 7.61% (Hopper 7.10% ->
    6.70%, NEMO2407 5.99% -> 2.90%, MBRIDGE2511 8.19% -> 7.01%, MLM24 4.24% -> 3.91%), the
    intervals' coverage 88.0% -> 88.4%, leave-one-source-out 15.89% -> 18.03% (NEMO2407 7.90% ->
    3.91%, MBRIDGE2511 8.37% -> 7.20%, MLM24 4.59% -> 4.05%, MPT on Hopper 5.61% -> 6.10%; MBRIDGE's
    Blackwell and Blackwell Ultra folds, which copy Hopper's constants, 24.0% -> 29.9% and 17.3%
    -> 21.7%). The Hopper fp8 rows no longer hold Hopper's ``eff_attn`` and ``eff_hbm`` down
    (0.63 -> 0.72 and 0.46 -> 0.56, near Blackwell's own 0.74 and 0.60), so they no longer offset,
    in those folds, the ``eff_gemm`` Blackwell does not reach (Hopper's 0.77 against Blackwell's
    own 0.65). Serving keeps the bf16 fraction
    (:func:`symcost.config.inference_hardware_bindings`).

    Returns:
        Expression in FLOP/s.
    """
    fp8_ratio = S.matmul_ceiling_fp8 / S.matmul_ceiling
    return spec_peak() * sp.Piecewise((S.eff_fp4, S.fp4 > sp.Rational(1, 2)),
                                      (fp8_ratio, S.fp8 > sp.Rational(1, 2)), (1, True))


def spec_peak() -> sp.Expr:
    """Dense datasheet peak FLOP/s of the linear layers' GEMM dtype: fp4 when ``fp4`` is 1,
    fp8 when ``fp8`` is 1, else 16-bit; the denominator of MFU and HFU ("the dense peak of the
    compute dtype"). :func:`gemm_peak` is the rate the GEMMs are timed at, NVFP4's scaled by
    the calibrated ``eff_fp4``, which a utilisation must not divide by."""
    return sp.Piecewise((S.peak_flops_4, S.fp4 > sp.Rational(1, 2)),
                        (S.peak_flops_8, S.fp8 > sp.Rational(1, 2)), (S.peak_flops_16, True))


def micro_batches() -> sp.Expr:
    """Micro-batches per step per pipeline: ``m = B/(d*b)`` (the ``c`` GPUs of a context-
    parallel group share each sequence)."""
    return S.global_batch / (S.dp * S.micro_batch)


def layers_per_stage() -> sp.Expr:
    """Layers on the largest pipeline stage: ``ceil(L/p)`` (uneven splits put the extra layers
    on the first stages)."""
    return CeilDiv(S.n_layers, S.pp)


def last_stage_layers() -> sp.Expr:
    """Layers on the last pipeline stage, the one that also runs the output head and the loss:
    ``ceil((L + 2)/p) - 1`` for ``p > 1`` (``L`` without a pipeline).

    When ``L`` is a multiple of ``p`` this is ``L/p``, every stage's share (Megatron-Core's
    even split). When it is not, Megatron-Core splits ``L + 2`` units, the embedding and the
    loss counting as one layer each (``account_for_embedding_in_pipeline_split``,
    ``account_for_loss_in_pipeline_split``: Megatron-Bridge's Llama-3.1-405B recipe, 126
    layers on 8 or 16 stages; the same convention as :data:`symcost.rules.VPP_LAYERS`), so
    the last stage holds one layer fewer than the others.

    References:
        Megatron-Core ``TransformerConfig`` (``account_for_loss_in_pipeline_split``) and
        ``get_transformer_layer_offset``; Megatron-Bridge ``recipes/llama/h100/llama3.py``.
    """
    return CeilDiv(S.n_layers + 2, S.pp) - 1 - (1 - IS_PP)


def bottleneck_stage(t_layer: sp.Expr, t_head: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    """Layers and output heads (0 or 1) of the slowest pipeline stage, which sets the pace of
    every micro-batch: a stage of :func:`layers_per_stage` layers, or the last stage with
    :func:`last_stage_layers` layers and the output head, whichever takes longer.

    Args:
        t_layer: time of one layer for one micro-batch (forward, backward and recomputation), s.
        t_head: time of the output head and loss for one micro-batch (forward and backward), s.

    Returns:
        ``(layers, heads)``: with ``L`` a multiple of ``p`` always ``(L/p, 1)``; otherwise
        ``(ceil(L/p), 0)`` when the head takes less than the layer the last stage gives up.
    """
    full, last = layers_per_stage(), last_stage_layers()
    # 1 when the last stage is slower (Heaviside, 0 at a tie): a Piecewise whose condition
    # holds Piecewise terms would be expanded by SymPy (piecewise_fold) at great cost
    last_slower = sp.Heaviside(t_head - (full - last) * t_layer, 0)
    return full - (full - last) * last_slower, last_slower


def host_overhead(t: sp.Expr) -> sp.Expr:
    """A fixed host-side time ``t`` (s) as the GPU sees it: ``t`` when kernels are launched one
    by one, 0 when the iteration replays as CUDA graphs (``cuda_graph``: the launches and host
    synchronisations were captured once; the kernels' GPU time stays in their operators).
    Applies to ``t_layer_overhead`` and ``t_moe_layer``.

    Args:
        t: a fixed time per layer pass (s), e.g. ``S.t_layer_overhead``.

    Returns:
        ``t * (1 - cuda_graph)`` (s).

    References:
        NVIDIA CUDA Programming Guide, "CUDA Graphs" (launch of a whole graph replaces the
        per-kernel CPU launch cost); Megatron-Core MoE documentation, "CPU overhead" and
        ``--cuda-graph-impl full_iteration`` (dropless MoE padded to a fixed capacity, no host
        synchronisation on the per-expert token counts).
    """
    return t * (1 - S.cuda_graph)


def layer_pass_times() -> tuple[sp.Expr, sp.Expr, sp.Expr]:
    """Compute time of one layer for one micro-batch on one GPU: forward, backward and
    recomputation (s), each the sum of :func:`layer_forward_compute` /
    :func:`layer_backward_compute` / :func:`layer_recompute` ([fp8] blended over the 16-bit
    ``bf16_layers``) plus the fixed per-layer overhead ``t_layer_overhead`` per pass (none
    under ``cuda_graph``, :func:`host_overhead`), and
    [finetune] the adapters' GEMMs and QLoRA's dequantization, less the weight-gradient GEMMs
    a frozen base skips (:mod:`symcost.finetune`)."""
    n, peak, ovh = tokens_micro(), gemm_peak(), host_overhead(S.t_layer_overhead)
    fwd = bf16_layer_blend(sum_time(layer_forward_compute())) + ovh
    bwd = bf16_layer_blend(sum_time(layer_backward_compute())) + 2 * ovh
    rec = bf16_layer_blend(layer_recompute().time) + FULL_SHARE * ovh
    ft_fwd = ft.adapter_compute_layer(n, peak).time + ft.dequant_time_layer()
    return (fwd + ft_fwd,
            bwd + 2 * ft.adapter_compute_layer(n, peak).time + ft.dequant_time_layer()
            - ft.frozen_wgrad_time(layer_forward_compute()),
            rec + FULL_SHARE * ft_fwd)


def head_pass_times() -> tuple[sp.Expr, sp.Expr]:
    """Forward and backward time of the output head for one micro-batch (s): the logits GEMM
    (:func:`lm_head_compute`), the cross-entropy over the ``V/t`` local vocabulary and the
    embedding lookup; the backward runs the logits GEMM twice (once with a frozen base,
    [finetune]) and the embedding's gradient."""
    n = tokens_micro()
    fwd = (lm_head_compute().time + emb.cross_entropy(n, S.vocab / S.tp).time
           + emb.embedding_lookup(n, S.hidden).time)
    bwd = ((2 - ft.IS_ADAPTER) * lm_head_compute().time
           + emb.embedding_lookup(n, S.hidden).time)
    return fwd, bwd


def critical_stage() -> tuple[sp.Expr, sp.Expr]:
    """``(layers, heads)`` of the stage that sets the pipeline's pace in
    :func:`training_expressions`: :func:`bottleneck_stage` of the layer's
    :func:`layer_pass_times` and the head's :func:`head_pass_times`. The step-time breakdowns
    (:mod:`symcost.bottleneck`, :mod:`symcost.breakdown`) scale their per-layer terms by it."""
    f, b, r = layer_pass_times()
    hf, hb = head_pass_times()
    return bottleneck_stage(f + b + r, hf + hb)


# ----------------------------------------------------------------------------- parameters
def params_attention() -> sp.Expr:
    """Parameters of one layer's attention block and its two norms (unsharded).

    MHA/GQA: ``h*d*(a+2k) + a*d*h`` plus biases ``(a+2k)*d + h``. MLA (DeepSeek-V2,
    arXiv:2405.04434, eqs. 9-14): query ``h*r_q + r_q*a*(d+d_r)`` (or ``h*a*(d+d_r)`` without
    a query latent), KV down-projection ``h*(r+d_r)``, KV up-projection ``r*a*2d``, latent
    norms ``r_q + r``, output ``a*d*h``. Norms: ``2*h*(1+norm_bias)``.
    """
    h, a, k, bias = S.hidden, S.n_heads, S.n_kv_heads, S.has_bias
    d, dr, r, rq = head_dim(), S.rope_head_dim, S.kv_lora_rank, S.q_lora_rank
    gqa = h * d * (a + 2 * k) + a * d * h + bias * ((a + 2 * k) * d + h)
    query = sp.Piecewise((h * a * (d + dr), rq < sp.Rational(1, 2)),
                         (h * rq + rq * a * (d + dr) + rq, True))
    mla = query + h * (r + dr) + r + r * a * 2 * d + a * d * h
    return IS_MLA * mla + (1 - IS_MLA) * gqa + 2 * h * (1 + S.norm_bias)


def attention_linear_params() -> sp.Expr:
    """Weights of one layer's attention GEMMs (no biases or norms), the model-FLOP count's
    ``2*tokens*params`` term: ``h*d*(a+2k) + a*d*h`` (MHA/GQA) or MLA's projections."""
    h, a, k = S.hidden, S.n_heads, S.n_kv_heads
    d, dr, r, rq = head_dim(), S.rope_head_dim, S.kv_lora_rank, S.q_lora_rank
    query_in = sp.Piecewise((h * a * (d + dr), rq < sp.Rational(1, 2)), (h * rq, True))
    mla = query_in + h * (r + dr) + mla_up_params() + a * d * h
    return IS_MLA * mla + (1 - IS_MLA) * (h * d * (a + 2 * k) + a * d * h)


def mla_up_params() -> sp.Expr:
    """[MLA] Weights of one layer's MLA up-projections: ``r_q*a*(d+d_r)`` (with a query latent,
    ``r_q > 0``) plus ``r*a*2d`` (keys and values from the KV latent); 0 without MLA
    (DeepSeek-V2, arXiv:2405.04434, eqs. 9-14)."""
    a, d, dr, r, rq = S.n_heads, head_dim(), S.rope_head_dim, S.kv_lora_rank, S.q_lora_rank
    query = sp.Piecewise((0, rq < sp.Rational(1, 2)), (rq * a * (d + dr), True))
    return IS_MLA * (query + r * a * 2 * d)


def params_mlp() -> sp.Expr:
    """Parameters of one dense MLP: ``(2+g)*h*f`` plus biases ``(1+g)*f + h``."""
    h, f, g = S.hidden, S.ffn_hidden, S.gated_mlp
    return (2 + g) * h * f + S.has_bias * ((1 + g) * f + h)


def expert_width() -> sp.Expr:
    """[moe] Width of the routed experts' inputs and outputs: the LatentMoE width ``l``
    (``moe_latent_size``, Nemotron 3 Super) or, without one, the hidden size ``h``."""
    return sp.Piecewise((S.hidden, S.moe_latent_size < sp.Rational(1, 2)),
                        (S.moe_latent_size, True))


def params_expert() -> sp.Expr:
    """Parameters of one routed expert: ``(2+g)*w*f_e`` with ``w`` :func:`expert_width`
    (no biases)."""
    return (2 + S.gated_mlp) * expert_width() * S.moe_ffn_hidden


def params_shared_expert() -> sp.Expr:
    """Parameters of one shared expert: ``(2+g)*h*f_e`` (``h``-wide with or without a
    latent; no biases)."""
    return (2 + S.gated_mlp) * S.hidden * S.moe_ffn_hidden


def params_moe_latent() -> sp.Expr:
    """[moe] Weights of one MoE layer's LatentMoE projections ``h -> l`` and ``l -> h``:
    ``2*h*l`` (0 without a latent; Megatron-Bridge ``theoretical_memory_utils.py``
    ``latent_projection_parameters_per_layer`` @067f987)."""
    return 2 * S.hidden * S.moe_latent_size


def params_moe_dense_part() -> sp.Expr:
    """Parameters of one MoE layer's MLP that every expert-parallel rank holds: the router
    ``h*E``, the shared experts ``n_s*(2+g)*h*f_e`` and the latent projections ``2*h*l``."""
    return (S.hidden * S.n_experts + S.shared_experts * params_shared_expert()
            + params_moe_latent())


def params_mamba() -> sp.Expr:
    """[hybrid] Parameters of one Mamba-2 mixer (unsharded, no pre-norm): input projection
    ``h*(2HP + 2GN + H)``, convolution weights and biases ``(HP + 2GN)*(w + 1)``, ``dt`` bias,
    ``A`` and ``D`` (``3H``), gated norm ``HP``, output projection ``HP*h`` (as
    :meth:`symcost.models.ModelSpec.mamba_params`)."""
    H, P, G, N = S.mamba_heads, S.mamba_head_dim, S.mamba_groups, S.mamba_state
    xbc = H * P + 2 * G * N
    return (S.hidden * ssm.in_proj_width(H, P, G, N) + xbc * (ssm.CONV_WIDTH + 1) + 3 * H
            + H * P + H * P * S.hidden)


def _params_layer_blocks(ffn_part: sp.Expr) -> sp.Expr:
    """Attention (with its norms), the FFN side ``ffn_part`` and the Mamba-2 mixers of the
    average layer; a hybrid block has one norm, a transformer layer two
    (:func:`params_attention` counts two)."""
    norm = S.hidden * (1 + S.norm_bias)
    fa = attention_layer_fraction()
    return (fa * params_attention() + (blocks_per_layer() - 2 * fa) * norm + ffn_part
            + mamba_layer_fraction() * params_mamba())


def params_layer() -> sp.Expr:
    """Parameters of the average transformer layer (unsharded): attention, and the dense MLP
    or (a fraction :func:`moe_layer_fraction` of the layers) the router, shared and ``E``
    routed experts; [hybrid] the pattern's mix of blocks.

    For GPT (``k=a``, ``f=4h``, biases) this is ``12h^2 + 13h`` (Narayanan et al. 2021,
    Sec. 5.1).
    """
    fm = moe_layer_fraction()
    moe = params_moe_dense_part() + S.n_experts * params_expert()
    return _params_layer_blocks(mlp_layer_fraction() * params_mlp() + fm * moe)


def params_layer_replicated() -> sp.Expr:
    """Parameters of the average layer outside the routed experts (replicated across the
    expert-parallel group; sharded by data parallelism over ``d*c`` ranks)."""
    fm = moe_layer_fraction()
    return _params_layer_blocks(mlp_layer_fraction() * params_mlp()
                                + fm * params_moe_dense_part())


def params_layer_experts() -> sp.Expr:
    """Routed-expert parameters of the average layer (sharded over ``e*etp`` expert-parallel
    and expert tensor-parallel ranks; their data-parallel group is ``t*c*d/(e*etp)``)."""
    return moe_layer_fraction() * S.n_experts * params_expert()


def param_tensors_layer() -> sp.Expr:
    """Parameter tensors of the average layer, the unit DeepSpeed ZeRO-3 of 2021 gathered one
    at a time (``zero3_per_tensor``): the fused QKV and output projections and the ``2+g``
    MLP matrices, each with a bias when ``has_bias``; two norm weights (and biases with
    ``norm_bias``); in MoE layers the router and the ``2+g`` matrices of every routed and
    shared expert instead of the MLP's (and a LatentMoE layer's two projections). For GPT
    (biases, LayerNorm) this is 12.

    References:
        DeepSpeed v0.3.13 ``deepspeed/runtime/zero/partition_parameters.py``
        (``_all_gather``: one ``_allgather_param`` per parameter, each after
        ``torch.cuda.synchronize()``).
    """
    g = S.gated_mlp
    fm = moe_layer_fraction()
    dense = (2 + mlp_layer_fraction() * (2 + g)) * (1 + S.has_bias) + 2 * (1 + S.norm_bias)
    return dense + fm * (1 + (S.n_experts + S.shared_experts) * (2 + g)
                         + 2 * smin(S.moe_latent_size, 1))


def params_total() -> sp.Expr:
    """All parameters: layers, embedding (and an untied LM head), learned positions, final norm."""
    h, V = S.hidden, S.vocab
    return (S.n_layers * params_layer() + V * h * (2 - S.tied_embed)
            + S.learned_pos * S.max_seq_len * h + h * (1 + S.norm_bias))


def params_stage() -> sp.Expr:
    """Parameters of the first (largest) pipeline stage: ``ceil(L/p)`` layers, the embedding and
    positions; with ``p = 1`` also the untied LM head and final norm."""
    h, V = S.hidden, S.vocab
    last = V * h * (1 - S.tied_embed) + h * (1 + S.norm_bias)
    return (layers_per_stage() * params_layer() + V * h + S.learned_pos * S.max_seq_len * h
            + (1 - IS_PP) * last)


def params_gpu() -> sp.Expr:
    """Parameters per GPU before ZeRO sharding: ``params_stage / t`` with the routed experts
    split over ``e`` more ranks (:func:`params_gpu_replicated` + :func:`params_gpu_experts`)."""
    return params_gpu_replicated() + params_gpu_experts()


def expert_shards() -> sp.Expr:
    """[moe] Ranks one copy of the routed experts is split over: ``e*etp`` (``e`` expert-
    parallel ranks of ``E/e`` experts each, every expert's FFN split over ``etp`` expert
    tensor-parallel ranks), folded over the ``t*c*d`` ranks of attention's TP, CP and DP
    groups, expert TP innermost (Megatron-Core MoE parallel folding, Liu et al. 2025,
    arXiv:2504.14960, Sec. 3; ``expert_tensor_parallel_size``)."""
    return S.ep * S.etp


def params_gpu_experts() -> sp.Expr:
    """Routed-expert parameters per GPU: ``ceil(L/p) * params_layer_experts / (e*etp)``
    (:func:`expert_shards`)."""
    return layers_per_stage() * params_layer_experts() / expert_shards()


def params_gpu_replicated() -> sp.Expr:
    """Parameters per GPU outside the routed experts: ``(params_stage - experts) / t``."""
    return (params_stage() - layers_per_stage() * params_layer_experts()) / S.tp


# ----------------------------------------------------------------------------- layer costs
def cp_ring_merge_bytes() -> tuple[sp.Expr, sp.Expr]:
    """[cp] HBM traffic (bytes, forward and backward, one layer and micro-batch on one GPU)
    that ring attention's ``c`` per-step kernels cost beyond one kernel over the whole local
    sequence; zero without context parallelism or with another ``cp_comm_type``.

    Each of the ``c - 1`` later ring steps runs its own FlashAttention kernel on the
    local queries and the received key/value chunk. Forward, the step re-reads ``Q`` and
    writes a partial output that is merged into the accumulated one by its log-sum-exp
    (read the partial, read and write the accumulator): ``Q + 4*O`` 16-bit elements per
    step. Backward, the step kernel re-reads ``Q``, ``O`` and ``dO`` and writes partial
    ``dQ`` and ``dK, dV`` that are added to their accumulators (written, read, accumulator
    read and written): ``Q + 2*O + 4*dQ + 4*dKV``. With causal load balancing half the later
    steps of a rank cover half its queries or half the received keys, so a step averages
    ``3/4`` of a full one: with the local query elements ``q = n*a_t*d_qk``, output
    elements ``o = n*a_t*d`` (``q = o`` but for MLA) and ``kv = n*k_t*(d_qk + d)``,

        forward  = (c-1) * 3/4 * 2 bytes * (q + 4*o)
        backward = (c-1) * 3/4 * 2 bytes * (5*q + 2*o + 4*kv)

    Memory-bound at ``eff_hbm`` (PyTorch-fused elementwise kernels). The all-gather and
    all-to-all variants run one kernel per local chunk over whole keys: no merge.

    References:
        NVIDIA Transformer Engine ``context_parallel.py`` (``AttnFuncWithCPAndKVP2P``:
        ``out_per_step``, ``flash_attn_fwd_out_correction``, ``dq.add_(dq_)`` and the
        ``dkv`` correction per step); Liu et al. 2023, Ring Attention (arXiv:2310.01889),
        Sec. 3 (blockwise softmax merging).
    """
    n, a_t = tokens_micro(), S.n_heads / S.tp
    q = n * a_t * qk_head_dim()
    o = n * a_t * head_dim()
    kv = n * kv_heads_local() * (qk_head_dim() + head_dim())
    steps = IS_CP * CP_P2P * (S.cp - 1) * sp.Rational(3, 4)
    return (steps * S.BYTES_ACT * (q + 4 * o),
            steps * S.BYTES_ACT * (5 * q + 2 * o + 4 * kv))


def cp_ring_merge(backward: bool = False) -> Cost:
    """[cp] The ring steps' extra traffic (:func:`cp_ring_merge_bytes`) as a memory-bound
    cost of the FlashAttention kernel (no FLOP counted)."""
    nbytes = cp_ring_merge_bytes()[1 if backward else 0]
    return Cost(sp.Integer(0), nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def attention_core_forward() -> Cost:
    """Attention core (scores, softmax, ``PV``) of one layer and micro-batch on one GPU.

    FlashAttention or the unfused kernels (:mod:`symcost.ops.attention`) over the local heads;
    with context parallelism each GPU computes ``1/c`` of the causal score matrix (load-balanced
    chunks: Megatron-Core/Transformer Engine split each sequence into ``2c`` chunks and give GPU
    ``i`` chunks ``i`` and ``2c-1-i``), so the whole-sequence cost is divided by ``c``; ring
    attention adds its per-step merges (:func:`cp_ring_merge`).
    """
    t, b, s = S.tp, S.micro_batch, S.seq_len
    d, kv, n = attention_head_dim(), kv_heads_local(), attention_length()
    # packed documents: b*s/n sequences of n tokens; sliding-window layers: FlashAttention
    # skips the blocks outside the band
    flash = flash_kernel(att.attention_flash(b * s / n, n, S.n_heads / t, kv, d, S.peak_flops_16,
                                             flash_serial(), attention_matmul_speedup())
                         .scale(attention_context_factor(n)))
    unfused = att.attention_unfused(b, s, S.n_heads / t, kv, d, S.peak_flops_16, S.has_dropout)
    return select(S.flash_attn > sp.Rational(1, 2), flash.scale(1 / S.cp) + cp_ring_merge(),
                  unfused.scale(1 / S.cp))


def qkv_projection(n: sp.Expr, peak: sp.Expr, **gemm_kw: Any) -> Cost:
    """Query, key and value projections of ``n`` tokens on one GPU.

    MHA/GQA: one GEMM to ``(a+2k)*d/t`` outputs. MLA (DeepSeek-V2, eqs. 9-14): the query
    down-projection ``h -> r_q`` and the joint KV down-projection ``h -> r + d_r`` (replicated
    across TP, as in Megatron-Core's MLA), then the up-projections ``r_q -> a*(d+d_r)/t`` and
    ``r -> a*2d/t`` (in absorbed MLA decoding the same weights and FLOP act on the query and
    output instead). ``gemm_kw`` goes to every :func:`~symcost.ops.gemm.gemm` (the inference
    model's storage widths, efficiency and overlap).
    """
    t, h = S.tp, S.hidden
    d, dq = head_dim(), qk_head_dim()
    heads = S.n_heads / t
    gqa = gemm(n, (heads + 2 * kv_heads_local()) * d, h, peak, **gemm_kw)
    q_full = gemm(n, heads * dq, h, peak, **gemm_kw)
    q_down = gemm(n, S.q_lora_rank, h, peak, **gemm_kw)
    query = select(S.q_lora_rank > sp.Rational(1, 2), q_down, q_full)
    kv_down = gemm(n, S.kv_lora_rank + S.rope_head_dim, h, peak, **gemm_kw)
    return select(S.kv_lora_rank > sp.Rational(1, 2),
                  query + kv_down + mla_up_projection(n, peak, **gemm_kw), gqa)


def mla_up_projection(n: sp.Expr, peak: sp.Expr, **gemm_kw: Any) -> Cost:
    """[MLA] The up-projections of ``n`` tokens on one GPU: ``r_q -> a*(d+d_r)/t`` (with a
    query latent) and ``r -> a*2d/t``; what Megatron-Core's ``mla_up_proj`` selective
    recomputation recomputes (with RoPE, whose elementwise cost is not modelled). Meaningful
    for MLA models only (:func:`qkv_projection` selects it); ``gemm_kw`` as there.

    References:
        DeepSeek-V2 (arXiv:2405.04434), eqs. 9-14; Megatron-Core ``TransformerConfig.
        recompute_modules`` ("mla_up_proj").
    """
    d, dq = head_dim(), qk_head_dim()
    heads = S.n_heads / S.tp
    zero = Cost(sp.Integer(0), sp.Integer(0), sp.Integer(0))
    q_up = select(S.q_lora_rank > sp.Rational(1, 2),
                  gemm(n, heads * dq, S.q_lora_rank, peak, **gemm_kw), zero)
    return q_up + gemm(n, heads * 2 * d, S.kv_lora_rank, peak, **gemm_kw)


def layer_forward_compute() -> dict[str, Cost]:
    """Forward compute of the average layer for one micro-batch on one GPU, by operator.

    Dense MLP terms are weighted by the dense fraction of the layers, MoE terms (router,
    routed experts as grouped GEMMs over the ``E/e`` local experts, shared experts) by
    :func:`moe_layer_fraction`. With balanced routing each GPU receives the ``n*k/t`` routed
    tokens it dispatches (``n/t`` tokens per TP rank with SP, top-``k``), ``n*k*e/(t*E)`` per
    local expert, and runs whole experts (expert TP = 1, see :func:`params_gpu_experts`).
    [moe] The grouped GEMMs run at :func:`grouped_gemm_efficiency` of that per-expert size;
    the router adds its score function and top-k (:func:`~symcost.ops.elementwise.router_scores`);
    ``moe_permute`` is the token permutation and probability-weighted unpermutation around the
    dispatch (:func:`~symcost.ops.elementwise.token_permutation`), and ``moe_overhead`` the
    calibrated fixed time ``t_moe_layer`` of a MoE layer pass (its many small kernels and the
    dispatcher's host synchronisation on the per-expert token counts; Megatron-Core MoE
    documentation, "CPU overhead"), not paid when the iteration replays as CUDA graphs
    (``cuda_graph``, :func:`host_overhead`).

    Returns:
        Mapping operator name -> :class:`Cost` (FLOP, bytes, s).

    References:
        Shoeybi et al. 2019 (TP GEMM shapes); Fedus et al. 2022, Switch Transformer, Sec. 2
        (router, top-k); Gale et al. 2023, MegaBlocks (grouped expert GEMMs).
    """
    t, h, f, g = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp
    d = head_dim()
    n = tokens_micro()
    heads = S.n_heads / t
    peak = gemm_peak()
    fm = moe_layer_fraction()
    fe, k = S.moe_ffn_hidden, S.top_k
    routed = routed_rows()
    per_expert = routed / experts_local()
    fe_local = fe / S.etp
    shared = S.shared_experts * fe / t
    w = expert_width()  # [moe] h, or the LatentMoE width
    # [moe] grouped-GEMM efficiency falls with the size of each expert's GEMM
    eff_up = grouped_gemm_efficiency(per_expert, (1 + g) * fe_local, w)
    eff_down = grouped_gemm_efficiency(per_expert, w, fe_local)
    eff = dense_gemm_efficiency()
    fa, fd = attention_layer_fraction(), mlp_layer_fraction()
    return {
        "qkv_proj": qkv_projection(n, peak, eff=eff).scale(fa),
        "attention": attention_core_forward().scale(fa),
        "out_proj": gemm(n, h, heads * d, peak, eff=eff).scale(fa),
        "mlp_up": gemm(n, (1 + g) * f / t, h, peak, eff=eff).scale(fd),
        "mlp_down": gemm(n, h, f / t, peak, eff=eff).scale(fd),
        "activation": ew.activation(n * f / t, g, S.act_clamp).scale(fd),
        # [moe] router GEMM (16-bit, replicated over TP), score function and top-k
        "router": (gemm(n, S.n_experts, h, S.peak_flops_16)
                   + ew.router_scores(n, S.n_experts)).scale(fm),
        "expert_up": gemm(per_expert, (1 + g) * fe_local, w, peak, experts_local(),
                          weight=False, eff=eff_up).scale(fm),
        "expert_down": gemm(per_expert, w, fe_local, peak, experts_local(), weight=False,
                            eff=eff_down).scale(fm),
        # [moe] LatentMoE: the h -> l projection before the dispatch and l -> h after the
        # combine, on the rank's n/t tokens (zero without a latent)
        "moe_latent_proj": (gemm(n / t, S.moe_latent_size, h, peak, eff=eff)
                            + gemm(n / t, h, S.moe_latent_size, peak, eff=eff)).scale(
                                fm * smin(S.moe_latent_size, 1)),
        # [moe] token permutation around the dispatch, fixed time per MoE layer
        "moe_permute": (ew.token_permutation(n / t, k, w) + moe_chunk_sort()).scale(fm),
        "moe_overhead": Cost(sp.Integer(0), sp.Integer(0),
                             host_overhead(S.t_moe_layer)).scale(fm),
        "expert_activation": ew.activation(routed * fe_local, g, S.act_clamp).scale(fm),
        # [moe] zero without shared experts (a GEMM of width 0 would still read its input)
        "shared_experts": (gemm(n, (1 + g) * shared, h, peak, eff=eff)
                           + gemm(n, h, shared, peak, eff=eff)
                           + ew.activation(n * shared, g, S.act_clamp)).scale(
                               fm * smin(S.shared_experts, 1)),
        "norms": ew.norm(tokens_sp() * h).scale(blocks_per_layer()),
        "residual_dropout": ew.residual_dropout(tokens_sp() * h,
                                                S.has_dropout).scale(blocks_per_layer()),
        "fp8_cast": fp8_cast_layer(),
        **{k: c.scale(mamba_layer_fraction()) for k, c in mamba_forward(n, peak, eff).items()},
    }


def mamba_forward(n: sp.Expr, peak: sp.Expr, eff: sp.Expr) -> dict[str, Cost]:
    """[hybrid] Forward of one Mamba-2 mixer for ``n`` tokens on one GPU (``H/t`` heads and
    ``G/t`` groups per tensor-parallel rank, Megatron-Core ``MambaMixer``): the input
    projection (column-parallel GEMM), the depthwise causal convolution with SiLU over
    ``x, B, C``, the SSD scan (:func:`symcost.ops.ssm.ssd_scan`), the norm gated by ``z`` and
    the output projection (row-parallel GEMM). GEMMs at ``eff`` (the dense GEMMs' size
    efficiency) in the GEMM dtype's ``peak``; the scan at the 16-bit peak.

    Returns:
        Mapping ``mamba_in_proj``, ``mamba_conv``, ``mamba_scan``, ``mamba_norm``,
        ``mamba_out_proj`` -> :class:`Cost`.

    References:
        Dao and Gu 2024 (arXiv:2405.21060), Sec. 6-7.
    """
    t, h = S.tp, S.hidden
    H, P, G, N = S.mamba_heads / t, S.mamba_head_dim, S.mamba_groups / t, S.mamba_state
    return {
        "mamba_in_proj": gemm(n, ssm.in_proj_width(H, P, G, N), h, peak, eff=eff),
        "mamba_conv": ssm.causal_conv1d(n, H * P + 2 * G * N),
        "mamba_scan": ssm.ssd_scan(n, H, P, G, N, S.peak_flops_16),
        "mamba_norm": ssm.gated_norm(n, H * P),
        "mamba_out_proj": gemm(n, h, H * P, peak, eff=eff),
    }


def dense_gemm_efficiency() -> sp.Expr:
    """Achieved fraction of peak of a layer's dense GEMMs (QKV, output projection, MLP, shared
    experts), whose ``M`` is the micro-batch's ``b*s/c`` tokens (:func:`tokens_micro`; SP
    gathers the sequence before each GEMM): :func:`~symcost.ops.gemm.size_efficiency` of
    ``eff_gemm`` with the half-efficiency size ``gemm_m_half`` (issue 11, item 5: GEMM
    efficiency by size; a parameter-file value, 128 tokens in the shipped file and not in
    :data:`symcost.calibrate.DEFAULT_FIT`). Short sequences at micro-batch 1 (e.g. 350 tokens) run their
    GEMMs in one partly idle wave; long micro-batches reach ``eff_gemm``."""
    return size_efficiency(S.eff_gemm, tokens_micro(), S.gemm_m_half)


def grouped_gemm_efficiency(per_expert: sp.Expr, n: sp.Expr, k: sp.Expr) -> sp.Expr:
    """[moe] Achieved fraction of peak of a grouped expert GEMM of ``M = per_expert`` tokens per
    local expert, ``N`` outputs and ``K`` inputs per expert: ``eff_gemm * M/(M + M_half) *
    W/(W + W_half)`` with ``W = 2*M*N*K`` the FLOP of one expert's GEMM (``M_half =
    moe_m_half`` tokens, ``W_half = moe_flop_half`` FLOP; either 0 disables its factor; ``M``
    and ``W`` at least 1 so a dense model, whose MoE terms are multiplied by 0, stays finite).
    A large expert GEMM runs as fast as a dense one: the same kernels (cuBLAS / CUTLASS
    grouped GEMM) on the same tensor cores.

    Until 2026-11-26 the plateau was a separate calibrated ``eff_moe``. Fitted on
    Megatron-Bridge's fine-grained MoE runs only (Qwen3, DeepSeek-V3, gpt-oss), it fell to 0.31
    on Blackwell against ``eff_gemm`` 0.57, and coarse experts inherited it: Mixtral-8x7B on
    B200 and GB200 (NVIDIA NeMo 25.02/25.04 performance tables, not in the shared data) was
    18-26% too slow; at ``eff_gemm`` it is 3-4% too slow. In-sample step-time MAPE rose 8.8%
    -> 9.1% (Megatron-Bridge's MoE rows), leave-one-source-out stayed 20.2-20.3%, and 31
    NeMo 24.09-25.07 runs outside the shared data went 8.6% -> 7.1%.

    Each expert's GEMM is tiled into ``ceil(M/tile) * ceil(N/tile)`` output tiles run in waves
    over the SMs; the last row of tiles and the last wave of every expert are partly empty and
    the kernel's prologue/epilogue is paid per expert, so the useful fraction of the work rises
    with the expert's size and saturates (the hyperbolic form is the simplest such curve with
    one constant: the half-efficiency size). The shipped calibration fits the work ``W``
    (``moe_flop_half``) and keeps ``moe_m_half`` at 0: on the Megatron-Bridge MoE runs a
    half-point in ``W`` fits better than one in ``M``, ``M*N``, ``M*K`` or a fixed time per
    expert GEMM (in-sample step-time MAPE 10.3% against 10.9%, 10.8%, 10.6% and 10.5%): small
    experts (Qwen3-30B-A3B's 768-wide FFN at hidden 2048) lose more than large ones with few
    tokens each (DeepSeek-V3's 256 experts at hidden 7168).

    Tried on 2026-11-27 and not kept: a depth factor ``K/(K + K_half)`` on top (each output tile's
    pipeline prologue and epilogue amortized over a short reduction). Fitted, it took ``K_half``
    1,730 on Blackwell, 1,830 on Blackwell Ultra and none on Hopper, and in-sample step-time MAPE
    went 7.83% -> 7.61% (leave-one-source-out 20.82% -> 18.63%), but the gain was gpt-oss-120b's
    alone (its Blackwell runs 28% -> 16% off, 2,880-deep GEMMs): DeepSeek-V3 (5.0% -> 6.4%),
    Kimi-K2, Qwen3-30B-A3B (9.2% -> 11.5%) and Qwen3-235B-A22B (13.2% -> 15.4%) on Blackwell got
    worse, and so did coarse experts outside the shared data (NeMo 25.02/25.04/25.07 tables:
    Mixtral-8x7B on 64 B200 and 64 GB200 -14% -> -20% and -16% -> -24%, Llama-4 Scout on 64 GB200
    -9% -> -10%): the factor stood for something gpt-oss-specific, not for ``K``. Its
    leave-one-source-out gain is the Blackwell folds', whose constants, copied from Hopper, predict
    the MoE runs too fast, so any extra time helps there. Also tried as forms of the size factor
    (in-sample): ``K`` alone in place of ``W`` 7.94%, ``M`` and ``K`` 7.67%, ``N*K`` 8.41%,
    ``min(N, K)`` 8.05%, ``M`` added to ``W`` 7.80%.

    References:
        Gale et al. 2023, "MegaBlocks: Efficient Sparse Training with Mixture-of-Experts"
        (MLSys), Sec. 3 and 5.1 (padding and small per-expert batches in grouped/batched
        GEMMs); NVIDIA CUTLASS documentation, "Efficient GEMM in CUDA" (threadblock tiles,
        wave quantization).
    """
    by_tokens = size_efficiency(S.eff_gemm, smax(per_expert, 1), S.moe_m_half)
    return size_efficiency(by_tokens, smax(2 * per_expert * n * k, 1), S.moe_flop_half)


def fp8_cast_layer() -> Cost:
    """FP8 quantisation traffic of one layer's activations per micro-batch (zero unless ``fp8``).

    Transformer Engine casts each of the four linear layers' 16-bit input activations to fp8
    before the GEMM (read 2 bytes, write 1 byte per element, amax fused); the backward casts
    the output gradients the same way (counted by :func:`layer_backward_compute` as twice the
    forward). Weights are cast once per step, see :func:`fp8_weight_cast_bytes_layer`.
    Memory-bound at achieved HBM bandwidth. [moe] In MoE layers the MLP inputs are the
    ``n*k/t`` routed tokens entering each grouped expert GEMM (``h``, then ``f_e`` wide) and
    the shared experts' inputs (Megatron-Core MoE documentation: GroupedGEMM with FP8/MXFP8;
    Transformer Engine ``GroupedLinear`` quantizes each expert's input).

    References:
        Micikevicius et al. 2022, "FP8 formats for deep learning" (arXiv:2209.05433), Sec. 4
        (per-tensor scaling and casts); NVIDIA Transformer Engine documentation, "Using FP8
        with Transformer Engine" (delayed scaling, cast kernels).
    """
    t, h, f = S.tp, S.hidden, S.ffn_hidden
    n = tokens_micro()
    # [moe] MoE layers cast the routed tokens into each expert GEMM (k copies of h, then fe)
    # and the shared experts' inputs, instead of the dense MLP's two inputs
    fm, k, fe = moe_layer_fraction(), S.top_k, S.moe_ffn_hidden
    # [moe] LatentMoE: the routed copies are l wide, and the two projections cast h and l
    latent = smin(S.moe_latent_size, 1) * (h + S.moe_latent_size) / t
    mlp = (mlp_layer_fraction() * (h + f / t)
           + fm * (k * moe_load_factor() / t * (S.etp * expert_width() + fe)
                   + smin(S.shared_experts, 1) * h + S.shared_experts * fe / t + latent))
    # [hybrid] a Mamba-2 block casts its two projections' inputs (h, then HP/t)
    mamba = mamba_layer_fraction() * (h + S.mamba_heads * S.mamba_head_dim / t)
    activations = n * (attention_layer_fraction() * (h + S.n_heads / t * head_dim()) + mlp
                       + mamba)
    nbytes = (S.fp8 + S.fp4) * 3 * activations
    return Cost(sp.Integer(0), nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def fp8_weight_cast_bytes_layer() -> sp.Expr:
    """Bytes one layer moves per optimizer step to cast its linear weights to fp8 (read 16-bit,
    write fp8 and its transpose for the backward): Transformer Engine casts weights at the first
    micro-batch of a step and reuses them (``is_first_microbatch``), also in recomputation."""
    t, h, f, g = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp
    d = head_dim()
    heads, kv = S.n_heads / t, kv_heads_local()
    attention = (IS_MLA * attention_linear_params() / t
                 + (1 - IS_MLA) * (h * (heads + 2 * kv) * d + heads * d * h))
    fm = moe_layer_fraction()
    experts = ((S.shared_experts * params_shared_expert() + params_moe_latent()) / t
               + experts_local() / S.etp * params_expert())
    H, P, G, N = S.mamba_heads, S.mamba_head_dim, S.mamba_groups, S.mamba_state
    mamba = (ssm.in_proj_width(H, P, G, N) + H * P) * h / t
    weights = (attention_layer_fraction() * attention + mlp_layer_fraction() * (2 + g) * h * f
               / t + fm * experts + mamba_layer_fraction() * mamba)
    return (S.fp8 + S.fp4) * 4 * weights


def fp8_weight_cast_time() -> sp.Expr:
    """[fp8] Time per optimizer step (s) of the stage's weight casts
    (:func:`fp8_weight_cast_bytes_layer` over the ``ceil(L/p)`` layers, [fp8] blended over
    the 16-bit ``bf16_layers``), memory-bound at ``eff_hbm``; in ``time_forward``."""
    return time_memory_bound(layers_per_stage() * bf16_layer_blend(fp8_weight_cast_bytes_layer()),
                             S.hbm_bw, S.eff_hbm)


def layer_backward_compute() -> dict[str, Cost]:
    """Backward compute of one layer for one micro-batch: GEMMs and memory-bound ops twice the
    forward (input and weight gradients), attention per its kernel."""
    fwd = layer_forward_compute()
    t = S.tp
    n = attention_length()
    flash_b = flash_kernel(att.attention_flash_backward(
        S.micro_batch * S.seq_len / n, n, S.n_heads / t, kv_heads_local(), attention_head_dim(),
        S.peak_flops_16, flash_serial(), attention_matmul_speedup()
    ).scale(attention_context_factor(n)))
    out = {k: v.scale(2) for k, v in fwd.items() if k != "attention"}
    # [moe] the permutation's backward is a scatter-add of the same size plus the probability
    # gradients (ops.elementwise.token_permutation_backward), not twice the forward
    out["moe_permute"] = (ew.token_permutation_backward(tokens_micro() / t, S.top_k,
                                                        expert_width())
                          + moe_chunk_sort()).scale(moe_layer_fraction())
    out["attention"] = select(S.flash_attn > sp.Rational(1, 2),
                              (flash_b.scale(1 / S.cp) + cp_ring_merge(backward=True)
                               ).scale(attention_layer_fraction()),
                              att.attention_unfused_backward(unfused_attention_forward()))
    # [hybrid] the SSD scan's backward kernels (ops.ssm.ssd_scan_backward)
    out["mamba_scan"] = ssm.ssd_scan_backward(
        tokens_micro(), S.mamba_heads / t, S.mamba_head_dim, S.mamba_groups / t,
        S.mamba_state, S.peak_flops_16).scale(mamba_layer_fraction())
    return out


def unfused_attention_forward() -> Cost:
    """Forward cost of the unfused attention core of one layer and micro-batch (scores,
    softmax, dropout, AV), from which its backward is derived."""
    return att.attention_unfused(S.micro_batch, S.seq_len, S.n_heads / S.tp, kv_heads_local(),
                                 attention_head_dim(), S.peak_flops_16, S.has_dropout
                                 ).scale(attention_layer_fraction() / S.cp)


def selective_recompute_by_op() -> dict[str, Cost]:
    """[recompute] What selective recomputation recomputes in one layer's backward, by
    operator of :func:`layer_forward_compute` (zero unless ``recompute = selective``), per
    module of ``recompute_modules`` (Megatron-Core ``TransformerConfig.recompute_modules``):

    * ``core_attn`` (Korthikanti et al. 2022, Sec. 5): the attention core's forward (scores,
      softmax, dropout, AV). With FlashAttention too: Megatron-Core checkpoints the core
      attention whatever its kernel (``Attention._checkpointed_attention_forward``, taken
      whenever ``checkpoint_core_attention`` and training), so the fused forward runs again
      to save only its log-sum-exp (Megatron-LM before Megatron-Core skipped the checkpoint
      with flash attention);
    * ``layernorm``: the two pre-norms;
    * ``mla_up_proj``: the MLA up-projections (:func:`mla_up_projection`);
    * ``moe_act``: the routed experts' activation function;
    * ``mlp``: the dense MLP (both GEMMs and the activation);
    * ``shared_experts``: the shared experts.

    Returns:
        Mapping operator name -> :class:`Cost` (FLOP, bytes, s) for one micro-batch.
    """
    fwd = layer_forward_compute()
    up = mla_up_projection(tokens_micro(), gemm_peak(), eff=dense_gemm_efficiency())
    by_module = {
        "attention": attention_core_forward().scale(attention_layer_fraction()
                                                     * S.rc_core_attn),
        "norms": fwd["norms"].scale(S.rc_layernorm),
        "qkv_proj": up.scale(IS_MLA * attention_layer_fraction() * S.rc_mla_up_proj),
        "expert_activation": fwd["expert_activation"].scale(S.rc_moe_act),
        "mlp_up": fwd["mlp_up"].scale(S.rc_mlp),
        "mlp_down": fwd["mlp_down"].scale(S.rc_mlp),
        "activation": fwd["activation"].scale(S.rc_mlp),
        "shared_experts": fwd["shared_experts"].scale(S.rc_shared_experts),
    }
    return {op: c.scale(IS_SELECTIVE) for op, c in by_module.items()}


def layer_recompute() -> Cost:
    """Recomputed forward work of one layer in the backward pass.

    Full: the whole layer forward, times :data:`FULL_SHARE` (the share of the layers
    ``recompute_layers`` recomputes; 1 for every layer). Selective: the modules of
    ``recompute_modules`` (:func:`selective_recompute_by_op`; by default the core attention,
    Korthikanti et al. 2022, Sec. 5). None: nothing.
    """
    fwd = sum(layer_forward_compute().values(), start=Cost(0, 0, 0))
    selective = sum(selective_recompute_by_op().values(), start=Cost(0, 0, 0))
    return Cost(*(FULL_SHARE * x + y for x, y in zip(fwd, selective)))


def tp_comm_layer_forward() -> Cost:
    """Megatron TP communication of one layer's forward: two all-reduces of ``b*s*h`` 16-bit
    activations (with SP: two all-gathers and two reduce-scatters, the same ring volume);
    [hybrid] one per block of a hybrid (:func:`blocks_per_layer`).

    References:
        Shoeybi et al. 2019, Sec. 3 (f/g operators); Korthikanti et al. 2022, Sec. 4.2.2.
    """
    return coll.all_reduce(tokens_micro() * S.hidden * S.BYTES_ACT, S.tp).scale(
        blocks_per_layer())


def _tp_exposure() -> tuple[sp.Expr, sp.Expr, sp.Expr, sp.Expr]:
    """``(whole, exposed_f, exposed_b, exposed_b_async)`` of :func:`tp_comm_layer_exposed`: one
    forward pass's collectives, with overlap their exposed parts in a forward and in a backward
    pass, and without it a backward pass's exposed part under sequence parallelism."""
    t = S.tp
    whole = tp_comm_layer_forward().time
    # one all-gather or reduce-scatter: half an all-reduce
    one = coll.all_reduce(tokens_micro() * S.hidden * S.BYTES_ACT, t).time / 2
    fwd = layer_forward_compute()
    chunks = (t - 1) / t
    # [hybrid] each block kind's GEMM pair against its own collectives, weighted by its
    # share of the layers (the layer dict's times are already weighted: divided back; a
    # kind absent from the model has weight and time 0)
    fa, ff, fmb = attention_layer_fraction(), ffn_layer_fraction(), mamba_layer_fraction()
    tiny = sp.Float(1e-30)
    pairs = ((fa, (fwd["qkv_proj"].time / smax(fa, tiny), fwd["out_proj"].time / smax(fa, tiny))),
             (ff, ((fwd["mlp_up"].time + fwd["shared_experts"].time / 2) / smax(ff, tiny),
                   (fwd["mlp_down"].time + fwd["shared_experts"].time / 2) / smax(ff, tiny))),
             (fmb, (fwd["mamba_in_proj"].time / smax(fmb, tiny),
                    fwd["mamba_out_proj"].time / smax(fmb, tiny))))
    exposed_f = sp.Add(*(w * smax(one - g * chunks, 0) for w, gs in pairs for g in gs))
    exposed_b = sp.Add(*(w * smax(one - 2 * g * chunks, 0) for w, gs in pairs for g in gs))
    # without userbuffers, backward with SP: the row-parallel GEMM's output-gradient all-gather
    # precedes its GEMMs (exposed); the column-parallel GEMM's input-gradient reduce-scatter is
    # asynchronous behind its weight-gradient GEMM (about its forward time)
    exposed_b_async = sp.Add(*(w * (one + smax(one - gs[0], 0)) for w, gs in pairs))
    return whole, exposed_f, exposed_b, exposed_b_async


def tp_comm_forward_exposed() -> sp.Expr:
    """Exposed tensor-parallel communication of one layer's forward pass, s: the forward share
    of :func:`tp_comm_layer_exposed` (all four collectives without overlap, their exposed
    parts with it)."""
    whole, exposed_f, _, _ = _tp_exposure()
    return (1 - S.tp_overlap) * whole + S.tp_overlap * exposed_f


def tp_comm_layer_exposed(passes: sp.Expr) -> sp.Expr:
    """Exposed tensor-parallel communication of one layer's forward and backward, s.

    Without overlap (``tp_overlap = 0``) the four collectives of each pass (all-gather before
    the QKV and MLP-up GEMMs, reduce-scatter after the output and MLP-down GEMMs, each half an
    all-reduce of :func:`tp_comm_layer_forward`) are exposed in the forward and ``passes - 2``
    recomputed forwards. In the backward with sequence parallelism (Transformer Engine's
    ``Linear`` without userbuffers) the output-gradient all-gather of each row-parallel GEMM
    (output projection, MLP down) precedes its GEMMs and is exposed, while each column-parallel
    GEMM (QKV, MLP up) reduce-scatters its input gradient asynchronously behind its
    weight-gradient GEMM, about its forward time ``G``: exposed ``C + max(C - G, 0)`` per GEMM
    pair (the input all-gather its weight gradient needs again runs behind the
    data-gradient GEMM and is not counted, as with overlap). Without sequence parallelism all
    four stay exposed in the backward too (Megatron-LM as Narayanan et al. 2021 measured it;
    Transformer Engine's asynchronous all-reduce behind the weight gradient is not modelled
    there). With overlap (Megatron-Core/Transformer Engine
    ``tp_comm_overlap``: userbuffers split each GEMM into ``t`` chunks pipelined with the ring
    exchange of the next chunk) a collective is hidden behind the GEMM it feeds or drains
    except for the chunk that cannot overlap: exposed ``max(C - G*(t-1)/t, 0)`` per pair, with
    ``G`` the GEMM's forward time and twice that (data- and weight-gradient GEMMs) in the
    backward. The routed experts' GEMMs are not Transformer Engine userbuffer layers: a MoE
    layer's MLP-side collectives overlap only its dense/shared part (weighted GEMM times).

    Args:
        passes: forward-type passes per micro-batch (2 + 1 with full recomputation).

    References:
        Wang et al. 2022, "Overlap communication with dependent computation via decomposition
        in large deep learning models" (ASPLOS'23), Sec. 3; NVIDIA Transformer Engine
        userbuffers / Megatron-Core ``--tp-comm-overlap`` (requires sequence parallelism);
        Transformer Engine ``transformer_engine/pytorch/module/linear.py``, ``_Linear.backward``
        (the column-parallel ``reduce_scatter_along_first_dim(dgrad, ..., async_op=True)``
        before the weight-gradient GEMM).
    """
    whole, exposed_f, exposed_b, exposed_b_async = _tp_exposure()
    overlapped = exposed_f * (passes - 1) + exposed_b
    backward = S.sp_on * exposed_b_async + (1 - S.sp_on) * whole
    return (1 - S.tp_overlap) * (whole * (passes - 1) + backward) + S.tp_overlap * overlapped


def cp_kv_bytes() -> sp.Expr:
    """Bytes of one micro-batch's local keys and values on one GPU, 16-bit:
    ``n*k_t*(d_qk + d)*2`` (``n = b*s/c`` tokens, ``k_t`` KV heads per TP rank), the block a
    context-parallel rank exchanges per peer."""
    return tokens_micro() * kv_heads_local() * (qk_head_dim() + head_dim()) * S.BYTES_ACT


def cp_a2a_bytes() -> tuple[sp.Expr, sp.Expr]:
    """Bytes per GPU of the two DeepSpeed-Ulysses all-to-alls of one micro-batch's attention:
    ``(Q, K and V: n*(a_t*d_qk + k_t*(d_qk + d))*2, output: n*a_t*d*2)``, 16-bit, ``a_t``
    query heads per TP rank (Jacobs et al. 2023, DeepSpeed-Ulysses, arXiv:2309.14509, Sec.
    3.1: each rank sends ``(c-1)/c`` of them)."""
    n, a_t = tokens_micro(), S.n_heads / S.tp
    qkv = n * (a_t * qk_head_dim() + kv_heads_local() * (qk_head_dim() + head_dim()))
    return qkv * S.BYTES_ACT, n * a_t * head_dim() * S.BYTES_ACT


def cp_a2a_time() -> sp.Expr:
    """Time of one pass's two DeepSpeed-Ulysses all-to-alls (Q/K/V and output,
    :func:`cp_a2a_bytes`) over the ``c`` context-parallel ranks, ``t`` apart (s); the forward
    and the backward (their gradients) move the same volume."""
    qkv, out = cp_a2a_bytes()
    return coll.all_to_all(qkv, S.cp, S.tp).time + coll.all_to_all(out, S.cp, S.tp).time


def cp_ring_step(nbytes: sp.Expr) -> sp.Expr:
    """One ring-attention P2P step of ``nbytes`` between context-parallel neighbours (``t``
    apart): over NVLink when the ``t*c`` ranks fit in one node, else on the network (s)."""
    return coll.p2p(nbytes, S.tp * S.cp <= S.gpus_per_node).time


def cp_comm_layer_forward() -> Cost:
    """Context-parallel exchange of one layer's forward (exposed part), by ``cp_comm_type``.

    * ``p2p`` (ring attention): each GPU's key/value block (:func:`cp_kv_bytes`) passes
      around the ``c`` ranks in ``c-1`` P2P steps, overlapped with the attention of the block
      already received; the part longer than the attention is exposed.
    * ``allgather``: the keys and values of the whole sequence are all-gathered before the
      attention (a ring all-gather of ``c`` blocks), exposed.
    * ``a2a``: Q, K and V go from the sequence split to a head split by one all-to-all over
      the ``c`` ranks and the output comes back by another (:func:`cp_a2a_bytes`), exposed.

    Ranks of a CP group are ``t`` apart. Weighted by the attention blocks per layer.

    References:
        Liu, Zaharia and Abbeel 2023, "Ring Attention with Blockwise Transformers"
        (arXiv:2310.01889), Sec. 3; NVIDIA Megatron-Core context parallelism documentation
        (load-balanced causal chunks, P2P ring over NVLink/IB); Llama 3 (arXiv:2407.21783),
        Sec. 3.3.2 and Transformer Engine ``AttnFuncWithCPAndKVAllGather`` (all-gather,
        exposed); Jacobs et al. 2023, DeepSpeed-Ulysses (arXiv:2309.14509), Sec. 3.1.
    """
    c, kv = S.cp, cp_kv_bytes()
    ring = IS_CP * (c - 1) * cp_ring_step(kv)
    gather = coll.all_gather(c * kv, c, S.tp)
    qkv, out = cp_a2a_bytes()
    a2a = cp_a2a_time()
    sent = (CP_P2P + CP_ALLGATHER) * (c - 1) * kv + CP_A2A * (c - 1) / c * (qkv + out)
    exposed = (CP_P2P * smax(ring - attention_core_forward().time, 0)
               + CP_ALLGATHER * gather.time + CP_A2A * a2a)
    fa = attention_layer_fraction()  # [hybrid] attention blocks only
    return Cost(sp.Integer(0), fa * IS_CP * sent, fa * IS_CP * exposed)


def cp_comm_layer_backward() -> sp.Expr:
    """Exposed context-parallel exchange of one layer's backward, s (see
    :func:`cp_comm_layer_forward`): the ring sends keys/values and their gradients, twice the
    forward volume, against the backward attention; ``allgather`` all-gathers the keys and
    values again and reduce-scatters their gradients (Transformer Engine
    ``AttnFuncWithCPAndKVAllGather.backward``); ``a2a`` sends the output gradient and the
    Q/K/V gradients back, the forward volume; both exposed."""
    c, kv = S.cp, cp_kv_bytes()
    ring = (c - 1) * cp_ring_step(2 * kv)
    # [hybrid] per attention block (the layer's backward attention is weighted by fa)
    fa = attention_layer_fraction()
    per_block = layer_backward_compute()["attention"].time / smax(fa, sp.Float(1e-30))
    gather = coll.all_gather(c * kv, c, S.tp).time + coll.reduce_scatter(c * kv, c, S.tp).time
    exposed = (CP_P2P * smax(ring - per_block, 0) + CP_ALLGATHER * gather
               + CP_A2A * cp_a2a_time())
    return fa * IS_CP * exposed


def ep_comm_layer_forward() -> Cost:
    """Expert-parallel all-to-all of the average layer's forward: dispatch and combine of the
    ``n_sp*k`` routed 16-bit token vectors (``n_sp`` tokens per GPU outside the TP region;
    each :func:`expert_width` wide, the LatentMoE width when the model has one) over the
    ``e`` ranks of the expert group, ``etp`` apart (folded over TP, CP and DP,
    expert TP innermost), weighted by :func:`moe_layer_fraction`; not overlapped with
    compute. The busiest rank receives :func:`moe_load_factor` times the balanced volume and
    the all-to-all ends when it has; with ``ep_dedup`` a token crosses the network once per
    destination node (:func:`~symcost.ops.collectives.all_to_all_node_dedup`). With expert
    tensor parallelism (``etp > 1``) the received tokens are all-gathered over the ``etp``
    adjacent ranks before the experts and the expert outputs reduce-scattered after them.

    References:
        Lepikhin et al. 2021, GShard, Sec. 3.2; Rajbhandari et al. 2022, DeepSpeed-MoE,
        Sec. 5.2 (two all-to-alls per MoE layer forward, two backward); Megatron-Core MoE
        documentation (alltoall token dispatcher with expert tensor parallelism: gather over
        the expert TP group after the all-to-all).
    """
    nbytes = tokens_sp() * S.top_k * expert_width() * S.BYTES_ACT * moe_load_factor()
    # [moe] ep_dedup: one network copy per token and destination node (DeepEP, HybridEP)
    a2a = select(S.ep_dedup > sp.Rational(1, 2),
                 coll.all_to_all_node_dedup(nbytes, S.ep, S.etp, S.top_k),
                 coll.all_to_all(nbytes, S.ep, S.etp))
    # [moe] expert TP: the received tokens are all-gathered over the etp ranks before the
    # experts and the outputs reduce-scattered after them (adjacent ranks)
    gathered = nbytes * S.etp
    etp_comm = coll.all_gather(gathered, S.etp) + coll.reduce_scatter(gathered, S.etp)
    return (a2a.scale(2) + etp_comm).scale(moe_layer_fraction())


# ----------------------------------------------------------------------------- activations
def activation_bytes_layer() -> sp.Expr:
    """Activation memory one layer keeps for one micro-batch (bytes), by recompute mode.

    Generalises Korthikanti et al. 2022, Table 2, to GQA (``k`` KV heads), any FFN size ``f``,
    SwiGLU (``g``), dropout on/off and FlashAttention; with MHA, ``f = 4h``, GeLU and dropout it
    reduces to Table 2 exactly:

    * none: ``s*b*h*(10 + 24/t + 5*a*s/(h*t))``; with SP ``s*b*h/t*(34 + 5*a*s/h)``
    * selective: ``s*b*h*(10 + 24/t)``; with SP ``34*s*b*h/t``
    * full: ``2*s*b*h`` (layer input only; ``/t`` with SP).

    [hybrid] A hybrid's average layer mixes its blocks: attention terms weighted by
    :func:`attention_layer_fraction`, the MLP ones by the dense and MoE fractions, one norm
    input, GEMM input and dropout mask per block, and a Mamba-2 block's projection, convolution,
    scan and gated-norm outputs (:func:`mamba_layer_fraction`).

    Terms (16-bit unless noted): replicated across TP (split by SP): QKV input 2, LN inputs 4,
    MLP input 2, dropout masks 1+1 (uint8); split by TP: Q ``2*s*b*a*d``, K and V
    ``4*s*b*k*d``, output-projection input ``2*s*b*a*d`` (``a*d = h`` unless the model sets a
    head width), activation input ``2*s*b*f*(1+g)``, down-projection input ``2*s*b*f``;
    score tensors ``a*s^2*b*(2 + 3*dropout)`` (softmax output, mask, dropout output);
    FlashAttention keeps only the fp32 log-sum-exp ``4*a*s*b``. [MLA] Q and K are
    ``a*(d+d_r)`` wide, V ``a*d``, and the latents add (replicated across TP) the input and
    output of the query and KV latent norms and the RoPE key, ``2*s*b*(2*r_q + 2*r + d_r)``
    (Megatron-Core ``MLASelfAttention``). [moe] Routed copies keep the expert GEMM's input
    and the expert output :func:`expert_width` wide (``h``, or the LatentMoE width ``l``);
    a LatentMoE layer also keeps its two projections' inputs, ``s*b*(h + l)/t`` elements.

    [fp8] With ``fp8``/``mxfp8``/``nvfp4`` the inputs linear layers keep for their weight
    gradients (the GEMM inputs above: QKV, output projection, both MLP GEMMs, the expert GEMMs)
    are the quantized copies, :func:`gemm_input_bytes` per element; the output projection's
    input is kept twice with FlashAttention (16-bit for the attention's backward, the copy for
    the projection's); Mamba-2 blocks stay 16-bit.

    [recompute] With ``recompute = selective`` each module of ``recompute_modules`` drops
    what only its recomputation needs (Megatron-Core ``recompute_modules``; ``core_attn``
    and ``mlp``/``shared_experts`` keep their inputs as checkpoint inputs, the others are
    output-discarding): ``core_attn`` the score tensors (with FlashAttention its
    log-sum-exp), ``layernorm`` the norm outputs (``2*s*b*h`` per block, split by SP),
    ``mla_up_proj`` Q, K and V (the latents stay), ``moe_act`` the routed experts' activation
    outputs ``2*s*b*k*f_e``, ``mlp`` the dense MLP's inner activations ``2*s*b*f*(2+g)``,
    ``shared_experts`` theirs (the byte counts in 16-bit training).
    """
    t, h, f, g, drop = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp, S.has_dropout
    s, a = S.seq_len, S.n_heads
    d = head_dim()
    n = tokens_micro()
    fm, k, fe = moe_layer_fraction(), S.top_k, S.moe_ffn_hidden
    kl = k * moe_load_factor()  # [moe] routed copies on the busiest expert-parallel rank
    # [recompute] selective recomputation's modules (zero unless recompute = selective)
    rc = {m: IS_SELECTIVE * getattr(S, "rc_" + m) for m in (
        "layernorm", "mla_up_proj", "moe_act", "mlp", "shared_experts")}
    # [fp8] bytes per element of the input a linear layer keeps for its weight gradient
    q = gemm_input_bytes()
    # dense MLP: the activation's input (2 bytes, 1+g wide) and the down-projection's input
    dense_mlp = mlp_layer_fraction() * n * f * (2 * (1 + g) + q) * (1 - rc["mlp"])
    shared = n * S.shared_experts * fe * (2 * (1 + g) + q) * (1 - rc["shared_experts"])
    # routed copies: as the dense MLP (moe_act drops the down-projection's input), plus the
    # expert GEMM's input (q) and the expert output the weighted combine needs (2), each
    # expert_width wide; [moe] LatentMoE: the two projections' inputs (h, then l; q each)
    routed = (n * kl * fe * (2 * (1 + g) + q * (1 - rc["moe_act"]))
              + n * kl * expert_width() * S.etp * (2 + q))
    latent = n * q * smin(S.moe_latent_size, 1) * (h + S.moe_latent_size)
    mlp = dense_mlp + fm * (routed + shared + latent)
    # per block: its norm's input (2 bytes per element), the first GEMM's input (q; recomputed
    # with layernorm) and a dropout mask; a transformer layer has two blocks (attention, MLP)
    replicated = tokens_sp() * h * (2 + q * (1 - rc["layernorm"]) + drop) * blocks_per_layer()
    fa = attention_layer_fraction()
    # the output projection's input: FlashAttention's backward keeps the 16-bit attention
    # output, which in 16-bit training is the projection's input too; with fp8 / NVFP4 the
    # projection keeps its quantized copy besides (without FlashAttention only the copy)
    low = S.fp8 + S.fp4
    out_in = n * a * d / t * sp.Piecewise((2 + low * q, S.flash_attn > sp.Rational(1, 2)),
                                          (q, True))
    # Q, K and V; [MLA] Q and K a*(d+d_r) wide, V a*d, and the latents (norm input and output
    # of each, the RoPE key; replicated)
    gqa = out_in + 2 * n * a * d / t + 4 * n * d * kv_heads_local()
    mla_qkv = 2 * n * a * (2 * qk_head_dim() + d) / t
    latents = 2 * n * (2 * S.q_lora_rank + 2 * S.kv_lora_rank + S.rope_head_dim)
    mla = out_in + latents + mla_qkv * (1 - rc["mla_up_proj"])
    split = fa * (IS_MLA * mla + (1 - IS_MLA) * gqa) + mlp / t
    scores = a * s * n * (2 + 3 * drop) / t
    lse = 4 * a * n / t
    score_mem = fa * (1 - RC_CORE_ATTN) * sp.Piecewise((lse, S.flash_attn > sp.Rational(1, 2)),
                                                       (scores, True))
    # [hybrid] a Mamba-2 block keeps (16-bit, per token) the input projection's output
    # (z, x, B, C, dt), the convolution's output (x, B, C), the scan output and the gated
    # norm's output (the output projection's input); the scan keeps no states (its backward
    # recomputes them)
    H, P, G, N = S.mamba_heads, S.mamba_head_dim, S.mamba_groups, S.mamba_state
    mamba = mamba_layer_fraction() * 2 * n * (ssm.in_proj_width(H, P, G, N)
                                              + H * P + 2 * G * N + 2 * H * P) / t
    split = split + mamba
    full = 2 * tokens_sp() * h
    # [memory] the Hugging Face modeling code keeps more (hf_activation_bytes_layer)
    kept = (1 - IS_HF) * (replicated + split + score_mem) + IS_HF * hf_activation_bytes_layer()
    # [recompute] block recomputation: the recomputed share keeps only its input
    return sp.Piecewise((FULL_SHARE * full + (1 - FULL_SHARE) * kept,
                         S.recompute > sp.Rational(3, 2)), (kept, True))


def gemm_input_bytes() -> sp.Expr:
    """[fp8] Bytes per element of the input a linear layer keeps for its weight-gradient GEMM:
    2 (16-bit) in bf16/fp16 training; with ``fp8``/``mxfp8`` 1 and with ``nvfp4`` 1/2, the
    quantized copy Transformer Engine saves instead of the 16-bit input (``Linear``,
    ``LayerNormLinear`` and ``GroupedLinear`` save ``inputmat`` / its transpose in the GEMM's
    format when fp8 runs the weight gradient; block scales, 1/32 and 1/16 of a byte per
    element for MXFP8 and NVFP4, not counted).

    References:
        NVIDIA Transformer Engine, ``transformer_engine/pytorch/module/linear.py``,
        ``_Linear.forward`` (``saved_inputmat``/``saved_inputmat_t``, v1.x; quantized
        tensors through ``prepare_for_saving`` from v2.0).
    """
    return 2 - S.fp8 - sp.Rational(3, 2) * S.fp4


def bf16_layer_fraction() -> sp.Expr:
    """[fp8] Fraction of the layers whose linear layers run in BF16 under fp8, MXFP8 or NVFP4:
    ``min(bf16_layers, L)/L`` when the GEMM dtype is low-precision, else 0."""
    low = flag(S.fp8 + S.fp4 > sp.Rational(1, 2))
    return low * smin(S.bf16_layers, S.n_layers) / S.n_layers


def bf16_layer_blend(per_layer: sp.Expr) -> sp.Expr:
    """[fp8] The average layer's ``per_layer`` quantity (time or bytes) with
    :func:`bf16_layer_fraction` of the layers in BF16: ``(1 - phi) * x + phi * x|fp8=fp4=0``
    (Megatron-Core ``--first-last-layers-bf16``: those layers' Transformer Engine modules run
    outside the fp8/fp4 autocast, so their GEMMs, casts and saved inputs are 16-bit)."""
    phi = bf16_layer_fraction()
    return (1 - phi) * per_layer + phi * per_layer.subs({S.fp8: 0, S.fp4: 0})


def activation_bytes_layer_no_recompute() -> sp.Expr:
    """Activation bytes of one layer without recomputation (the transient working set a fully
    recomputed layer rebuilds during its backward)."""
    return activation_bytes_layer().subs(S.recompute, 0)


def pp_p2p_exposed(t_fwd: sp.Expr, t_bwd: sp.Expr) -> sp.Expr:
    """Exposed pipeline-parallel point-to-point time of one micro-batch on one stage (s).

    Each of the ``v`` model chunks of a stage receives its input activations and sends its
    output (``b*s/c x h`` at 16 bits, scattered over the ``t`` tensor-parallel ranks) in the
    forward, and the gradients the other way in the backward: ``2*v`` sends of
    ``n*h*BYTES_ACT/t`` bytes, over NVLink when the whole job fits in one NVLink domain, else
    on the rank's network share (a pipeline waits for its slowest boundary).

    The 1F1B schedule (``v = 1``) blocks on them (Megatron-Core
    ``forward_backward_pipelining_without_interleaving``: batched send/receive between the
    passes). The interleaved schedule (``v > 1``) overlaps each chunk's sends and receives with
    the compute of the next chunk (Megatron-Core ``overlap_p2p_comm``, on by default in
    Megatron-LM's arguments and set by Megatron-Bridge's ``CommOverlapConfig`` whenever the
    virtual pipeline size exceeds 1), so only a send longer than a chunk's forward
    (``t_fwd/v``) or backward (``t_bwd/v``) is exposed, by the difference. With ``pp_overlap``
    off (``--no-overlap-p2p-communication``) the interleaved schedule blocks on them too.

    Args:
        t_fwd, t_bwd: forward and backward compute of the micro-batch on the stage (s).

    Returns:
        Seconds per micro-batch (to be multiplied by the ``IS_PP`` flag).

    References:
        Narayanan et al. 2021 (SC'21), Sec. 2.2.2 (interleaved schedule) and Sec. 4.1
        (scatter/gather of the boundary tensors over the TP ranks).
    """
    t, c, d, p, v = S.tp, S.cp, S.dp, S.pp, S.vpp
    intra_pp = t * c * d * p <= S.gpus_per_node
    send = coll.p2p(tokens_micro() * S.hidden * S.BYTES_ACT / t, intra_pp).time
    hidden = v * (smax(send - t_fwd / v, 0) + smax(send - t_bwd / v, 0))
    overlapped = IS_INTERLEAVED * S.pp_overlap
    return overlapped * hidden + (1 - overlapped) * 2 * v * send


def microbatches_in_flight() -> sp.Expr:
    """Micro-batches whose activations the first pipeline stage holds at peak: ``min(m, p)``
    for 1F1B, times ``1 + (p-1)/(p*v)`` for the interleaved schedule (Korthikanti et al. 2022,
    Sec. 4.2.3)."""
    p, v = S.pp, S.vpp
    interleave = 1 + IS_INTERLEAVED * (p - 1) / (p * v)
    return smin(micro_batches(), p) * interleave


def activation_offload_resident_layers() -> sp.Expr:
    """[offload] Layers of the stage whose activations are in HBM at the peak (the end of the
    forward), with ``k = activation_offload_layers`` offloaded: ``L_s - k + 1`` when ``k >= 1``
    (the last offloaded layer's copy to host memory, or the first reload, still holds one
    layer's activations), ``L_s`` without offloading.

    Megatron-Core offloads the first ``k`` layers (Transformer Engine
    ``AsyncDoubleBufferGroupOffloadHandler``: groups below ``num_offload_group`` are copied
    out on a device-to-host stream, one group reloaded ahead of its backward,
    ``num_prefetch_group = 1``), so the backward frees the resident layers before it reloads
    any. Units: layers (a count); ``microbatches_in_flight`` is 1 at ``pp = 1``, the only
    pipeline depth that allows offloading (:data:`symcost.rules.ACT_OFFLOAD_PP`).
    """
    k = S.activation_offload_layers
    return layers_per_stage() - k + flag(k > sp.Rational(1, 2))


def activation_offload_exposed(t_fwd_layer: sp.Expr, t_bwd_layer: sp.Expr
                               ) -> tuple[sp.Expr, sp.Expr]:
    """[offload] Forward and backward time (s per micro-batch) that copying the activations of
    ``k = activation_offload_layers`` layers to host memory and back adds to a stage.

    Each offloaded layer's saved activations (:func:`activation_bytes_layer`, ``A`` bytes)
    cross the host link once each way, ``t_c = A / (eff_host * host_bw)`` per layer and
    direction. Forward: the copies run on their own stream while the stage's ``L_s`` layers
    compute (Transformer Engine spreads the offload windows evenly over the layers), so
    ``max(k * t_c - L_s * t_fwd, 0)`` shows. Backward: each reload is prefetched one layer
    ahead, behind one layer's backward, ``k * max(t_c - t_bwd, 0)``. Zero without offloading.
    The copies' HBM traffic is not charged to the kernels they overlap.

    Args:
        t_fwd_layer, t_bwd_layer: one layer's forward and backward compute for one
            micro-batch (s).

    Returns:
        ``(forward, backward)`` exposed copy time, s.

    References:
        Transformer Engine ``cpu_offload.py`` (``AsyncDoubleBufferGroupOffloadHandler``: "D2h
        and h2d copying are completely hidden behind computation if computation time of a
        layer is longer than host-device communication time"); Megatron-Core
        ``TransformerConfig.cpu_offloading_num_layers``; Megatron-Bridge
        ``docs/training/cpu-offloading.md``.
    """
    k = S.activation_offload_layers
    t_c = bf16_layer_blend(activation_bytes_layer()) / (S.eff_host * S.host_bw)
    return (smax(k * t_c - layers_per_stage() * t_fwd_layer, 0),
            k * smax(t_c - t_bwd_layer, 0))


# ----------------------------------------------------------------------------- [memory]
#: [memory] 1 with the Hugging Face Trainer's memory layout (``train_framework = hf``).
IS_HF = flag(S.train_framework > sp.Rational(1, 2))
#: [memory] 1 at ZeRO stage 0 (no optimizer sharding).
IS_ZERO0 = flag(S.zero_stage < sp.Rational(1, 2))


def optimizer_bytes(opt_params: sp.Expr) -> sp.Expr:
    """Optimizer-state bytes on one GPU for ``opt_params`` parameters (the local Adam
    partition: all trained parameters at ZeRO-0, ``1/d`` of them at ZeRO >= 1).

    * ``train_framework = megatron``: fp32 master copy, momentum and variance,
      ``BYTES_OPTIMIZER = 12`` per parameter (Rajbhandari et al. 2020, ZeRO, Sec. 3.1).
    * ``train_framework = hf`` at ZeRO-0 (the Hugging Face Trainer without a DeepSpeed
      config runs PyTorch DDP): ``torch.optim.AdamW`` keeps ``exp_avg`` and ``exp_avg_sq``
      as ``zeros_like(param)``, in the 16-bit dtype the model was loaded in, and no master
      copy: ``2 * BYTES_PARAM = 4`` bytes (torch/optim/adamw.py ``_init_group``, PyTorch
      2.0-2.5). At ZeRO >= 1 DeepSpeed keeps the fp32 master partition and runs the
      optimizer on it (fp32 moments): 12 bytes per local parameter (deepspeed/runtime/zero/
      stage_1_and_2.py ``single_partition_of_fp32_groups``; stage3.py
      ``fp32_partitioned_groups_flat``; DeepSpeed v0.10-v0.16).

    Units: bytes. ``opt_params`` in parameters.
    """
    per = S.BYTES_OPTIMIZER - IS_HF * IS_ZERO0 * (S.BYTES_OPTIMIZER - 2 * S.BYTES_PARAM)
    return per * opt_params


def gradient_bytes(grad_params: sp.Expr, opt_params: sp.Expr) -> sp.Expr:
    """Gradient bytes on one GPU: 16-bit gradients of the ``grad_params`` parameters whose
    gradients this GPU keeps (all trained parameters at ZeRO 0-1, ``1/d`` at ZeRO >= 2), plus
    with the Hugging Face Trainer layout (``train_framework = hf``)

    * ZeRO-0 (PyTorch DDP): the gradient buckets, a second 16-bit copy of every gradient
      (``DistributedDataParallel(gradient_as_bucket_view=False)``, the default: "gradients
      are copied into buckets"; torch.nn.parallel.DistributedDataParallel docs, PyTorch
      1.7-2.5);
    * ZeRO >= 1: the fp32 gradient of the local optimizer partition the step converts to
      (``single_grad_partition``, 4 bytes per parameter of ``opt_params``; deepspeed/runtime/
      zero/stage_1_and_2.py ``step``; stage3.py ``fp32_partitioned_groups_flat[i].grad``).

    Units: bytes. ``grad_params``, ``opt_params`` in parameters.
    """
    ddp_bucket = IS_ZERO0 * S.BYTES_PARAM * grad_params
    fp32_partition = (1 - IS_ZERO0) * 4 * opt_params
    return S.BYTES_PARAM * grad_params + IS_HF * (ddp_bucket + fp32_partition)


def deepspeed_live_param_bytes(params_gpu: sp.Expr) -> sp.Expr:
    """DeepSpeed ZeRO-3 gathered 16-bit parameters resident on one GPU at peak: up to
    ``stage3_max_live_parameters`` (default 1e9, :data:`symcost.symbols.DS_MAX_LIVE_PARAMETERS`)
    of the model's ``params_gpu`` parameters; with ``stage3_max_reuse_distance`` at its
    default (1e9) DeepSpeed keeps gathered parameters that are reused within that distance
    (the last layers of the forward, reused first by the backward) instead of releasing them
    (DeepSpeed configuration JSON docs, ZeRO optimizations; deepspeed/runtime/zero/
    partitioned_param_coordinator.py, v0.10-v0.16).

    Units: bytes. ``params_gpu`` in parameters.
    """
    return S.BYTES_PARAM * smin(params_gpu, S.DS_MAX_LIVE_PARAMETERS)


def deepspeed_reduce_buffer_bytes(largest_param: sp.Expr) -> sp.Expr:
    """[memory] DeepSpeed's gradient-reduction buffers on one GPU in the Hugging Face Trainer
    layout (``train_framework = hf``) at ZeRO >= 1; they stay on the GPU with offload:

    * ZeRO 1-2 (``contiguous_gradients`` and ``overlap_comm`` on, as in the Trainer's example
      configuration): two 16-bit ``ipg_buffer`` of ``reduce_bucket_size`` elements
      (:data:`symcost.symbols.DS_REDUCE_BUCKET_ZERO2`; "double buffers to avoid data access
      conflict when overlap_comm is enabled"), and with optimizer offload the 16-bit
      ``temp_grad_buffer_for_gpu_offload`` of the largest parameter's size
      (deepspeed/runtime/zero/stage_1_and_2.py, ``backward`` and ``__init__``, v0.10-v0.16);
    * ZeRO-3: one 16-bit ``__ipg_bucket_flat_buffer`` of ``reduce_bucket_size = h**2``
      elements (the Trainer's ``"auto"``; deepspeed/runtime/zero/stage3.py ``__init__``).

    Zero at ZeRO-0 and for ``train_framework = megatron``.

    Args:
        largest_param: elements of the largest parameter tensor on the GPU (the embedding or
            LM head, ``vocab*h/t``).

    Units: bytes.
    """
    zero12 = (2 * S.DS_REDUCE_BUCKET_ZERO2 + ft.IS_OFFLOAD * largest_param) * (1 - IS_ZERO3)
    zero3 = IS_ZERO3 * S.hidden**2
    return IS_HF * (1 - IS_ZERO0) * S.BYTES_PARAM * (zero12 + zero3)


def cached_gradient_bytes(trained_params: sp.Expr) -> sp.Expr:
    """[memory] Bytes the PyTorch caching allocator holds in freed blocks at the peak of a
    Hugging Face Trainer + DeepSpeed ZeRO 1-3 run without parameter offload:
    ``mem_cache_frac`` (calibrated, :func:`symcost.calibrate.fit_memory`) times one 16-bit
    copy of the ``trained_params`` (the model's trained parameters, not sharded).

    Why a copy of the gradients: DeepSpeed copies each 16-bit gradient into its reduction
    bucket and frees it; with ``overlap_comm`` the reduction runs on a side stream, and blocks
    used by another stream are not reused until that stream's work completes
    (``record_stream``), so the allocator grows instead of reusing them (PyTorch CUDA
    semantics docs, "Memory management"; DeepSpeed ``stage_1_and_2.py``
    ``reduce_independent_p_g_buckets_and_remove_grads``). These blocks are not needed: on a
    full GPU the allocator frees its cache and retries before it raises out-of-memory, so
    they count in a device-level reading (``torch.cuda.mem_get_info``) only when they fit
    (else the regrown part, :func:`symcost.validate.device_reading`), and never in
    ``mem_total`` (the fit test). Zero at ZeRO-0, with parameter offload and for
    ``train_framework = megatron``.

    Units: bytes. ``trained_params`` in parameters.
    """
    return (IS_HF * (1 - IS_ZERO0) * (1 - ft.IS_OFFLOAD_PARAMS) * S.mem_cache_frac
            * S.BYTES_PARAM * trained_params)


def offload_cached_param_bytes(params_gpu: sp.Expr) -> sp.Expr:
    """[memory] What a device-level reading of a Hugging Face Trainer + DeepSpeed ZeRO-3 run
    with parameter offload shows beyond its tensors: ``mem_offload_layers`` (calibrated,
    :func:`symcost.calibrate.fit_memory`, one value for every GPU) decoder layers' worth of
    16-bit weights, ``2 * params_gpu / L``.

    Empirical, not derived: the ZHANG23 ZeRO-3 + offload runs print the same peak on A800,
    RTX 4090 and RTX 3090, about 6-7 layers of 16-bit weights (2.3-2.9 GiB for Llama-2-7B,
    3.6-4.4 GiB for 13B, with recomputation and/or FlashAttention) above the gathered
    parameters DeepSpeed's ``stage3_max_live_parameters`` allows, the reduction bucket, the
    activations and the CUDA context. Parameter fetches from host memory go through GPU
    copies of each partition and of the gathered layer (deepspeed/runtime/zero/
    partition_parameters.py, ``_allgather_params_coalesced``), released into the caching
    allocator; the count of layers is what the rows identify. Not in ``mem_total``; zero
    without parameter offload, at ZeRO 0-2 and for ``train_framework = megatron``.

    Units: bytes. ``params_gpu`` in parameters (the whole model's, unsharded).
    """
    return (IS_HF * IS_ZERO3 * ft.IS_OFFLOAD_PARAMS * S.mem_offload_layers * S.BYTES_PARAM
            * params_gpu / S.n_layers)


def hf_activation_bytes_layer() -> sp.Expr:
    """[memory] Activation bytes one decoder layer of the Hugging Face Llama modeling code
    (transformers v4.31-v4.36 ``modeling_llama.py``, 16-bit weights, no recomputation) keeps
    for one micro-batch of ``n = b*s`` tokens, counted from the tensors autograd saves:

    * two ``LlamaRMSNorm``: the fp32 upcast of the input (saved by ``pow`` and the
      normalising ``mul``, 4 bytes) and the 16-bit normalised tensor (saved by the weight
      ``mul``, 2 bytes): ``2 * 6 * n*h``;
    * attention projections: the shared 16-bit input of q/k/v (``2*n*h``), the rotated query
      and key and the value (``2*n*a*d/t + 2 * 2*n*k*d/t``; the rotary ``mul`` by cos/sin
      saves only the buffers), the output projection's input (``2*n*h/t``);
    * eager attention: the fp32 softmax output (``softmax(..., dtype=float32)`` saves its
      output, 4 bytes) and its 16-bit copy multiplied by V (2 bytes): ``6*a*s*n/t``;
      FlashAttention-2 instead its output (``2*n*h/t``) and fp32 log-sum-exp (``4*a*n/t``);
    * SwiGLU MLP (``g = 1``): the 16-bit input (``2*n*h``), the gate and up outputs, the
      SiLU output and their product (``4 * 2*n*f/t``); a plain MLP (``g = 0``) the up and
      activation outputs (``2 * 2*n*f/t``).

    Units: bytes. References: Korthikanti et al. 2022, Sec. 4 (the counting method);
    transformers ``LlamaRMSNorm.forward``, ``LlamaAttention.forward``, ``LlamaMLP.forward``.
    """
    t, h, f, g = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp
    a, s, d = S.n_heads, S.seq_len, head_dim()
    n = tokens_micro()
    norms = 2 * 6 * n * h
    proj = 2 * n * h + (2 * n * a * d + 2 * n * h) / t + 4 * n * kv_heads_local() * d
    eager = 6 * a * s * n / t
    flash = (2 * n * h + 4 * a * n) / t
    core = sp.Piecewise((flash, S.flash_attn > sp.Rational(1, 2)), (eager, True))
    mlp = 2 * n * h + 2 * n * f * (2 + 2 * g) / t
    return norms + proj + core + mlp


#: [memory] bytes per logit element the Hugging Face causal-LM loss keeps: the 16-bit
#: ``lm_head`` output, its fp32 upcast (``logits.float()``), the shifted contiguous fp32 copy
#: and the fp32 ``log_softmax`` output of the cross-entropy (transformers v4.31-v4.36
#: ``LlamaForCausalLM.forward``): 2 + 3*4.
HF_BYTES_LOGIT = S.BYTES_ACT + 3 * S.BYTES_LOGIT


# ----------------------------------------------------------------------------- the model
@functools.lru_cache(maxsize=1)
def training_expressions() -> dict[str, sp.Expr]:
    """All training outputs as SymPy expressions over the symbols of :mod:`symcost.symbols`.

    Returns:
        Mapping name -> expression. Times in s (``step_time`` and its breakdown
        ``time_forward``, ``time_backward``, ``time_recompute``, ``time_tp_comm``,
        ``time_cp_comm``, ``time_ep_comm``, ``time_pp_p2p``, ``time_pp_bubble``, ``time_dp_comm``, ``time_optimizer``,
        ``time_overhead``), ``tokens_per_s`` (tokens/s, whole cluster), ``mfu`` and ``hfu``
        (fractions), ``flops_model`` and ``flops_hardware`` (FLOP per step, whole cluster),
        memory per GPU in bytes (``mem_weights``, ``mem_gradients``, ``mem_optimizer``,
        ``mem_activations``, ``mem_total``, ``mem_usable``; ``mem_host``, the host memory
        offloading uses; ``mem_headroom``, the smaller of ``mem_usable - mem_total`` and
        ``host_mem_cap - mem_host``: it fits when headroom >= 0), per layer and micro-batch
        on one GPU ``time_layer_forward``, ``time_layer_backward``, ``time_layer_recompute``
        (s; compute, with the fixed per-layer overhead, without communication) and
        ``mem_activations_layer`` (bytes),
        ``params_total`` and ``num_gpus``.
    """
    t, p, d, v = S.tp, S.pp, S.dp, S.vpp
    z = S.zero_stage
    m = micro_batches()
    Ls = layers_per_stage()
    n = tokens_micro()
    vocab_local = S.vocab / t

    # --- per micro-batch, per stage; [fp8] bf16_layers of the layers at 16-bit GEMMs
    fwd_layer, bwd_layer, rec_layer = layer_pass_times()
    tp_layer = tp_comm_layer_exposed(2 + FULL_SHARE)
    cp_layer = cp_comm_layer_forward().time * (1 + FULL_SHARE) + cp_comm_layer_backward()
    # all-to-all exposed, or (ep_overlap) hidden behind the other micro-batch's layer compute
    a2a = ep_comm_layer_forward().time * (2 + FULL_SHARE)
    ep_layer = ((1 - S.ep_overlap) * a2a
                + S.ep_overlap * smax(a2a - (fwd_layer + bwd_layer + rec_layer), 0))

    head_fwd, head_bwd = head_pass_times()

    # multi-token prediction (DeepSeek-V3 Sec. 2.2): each MTP module is one more layer (a
    # hybrid's: its mtp_blocks average blocks) and one more pass through the output head;
    # pipeline layouts balance it as a layer (Megatron-Core
    # ``pipeline_model_parallel_layout``), 1/p of it per stage
    # the slowest stage: ceil(L/p) layers, or the last stage's layers and the output head
    Lb, heads = critical_stage()
    Lc = Lb + S.mtp_layers * S.mtp_blocks / p
    mtp_head = heads + S.mtp_layers / p
    # [offload] activation copies to host memory that outlast the compute they hide behind
    off_f, off_b = activation_offload_exposed(fwd_layer, bwd_layer)
    t_f = Lc * fwd_layer + mtp_head * head_fwd + off_f
    t_b = Lc * bwd_layer + mtp_head * head_bwd + off_b
    t_r = Lc * rec_layer
    t_tp = Lc * tp_layer
    t_cp = Lc * cp_layer
    t_ep = Lc * ep_layer
    # wall time of a micro-batch's forward and backward passes in which data-parallel
    # communication can overlap: compute plus the exposed context- and expert-parallel
    # communication of that pass (the all-to-all split by its passes: 1 forward, 1 + full
    # recomputation backward), so faster kernels never expose more of it than they save
    ep_f = t_ep / (2 + FULL_SHARE)
    # ... and the exposed tensor-parallel collectives (on NVLink, while the data-parallel ones
    # use the network: a faster GEMM that exposes more of them must not also expose more of
    # the data-parallel traffic, which would make the step slower)
    tp_f = Lc * tp_comm_forward_exposed()
    win_f = t_f + Lc * cp_comm_layer_forward().time + ep_f + tp_f
    win_b = (t_b + t_r + (t_cp - Lc * cp_comm_layer_forward().time) + (t_ep - ep_f)
             + (t_tp - tp_f))
    c = S.cp
    t_p2p = IS_PP * pp_p2p_exposed(t_f, t_b)

    # --- data parallel: ZeRO-3 per micro-batch, ZeRO 0-2 per step. Gradients of the
    # replicated parameters are reduced over the d*c ranks holding them (Megatron-Core's
    # data-parallel group includes context parallelism), those of the routed experts over
    # the t*c*d/(e*etp) ranks holding the same expert shards (expert data parallelism),
    # ranks e*etp apart.
    # HSDP (dp_replicate = r > 1): ZeRO shards the replicated parameters over the d*c/r
    # ranks of a shard group only, and the sharded gradients are all-reduced across the r
    # replicas once per step (PyTorch FSDP HYBRID_SHARD; Zhao et al. 2023, "PyTorch FSDP",
    # arXiv:2304.11277, Sec. 3.2.2; r = 1 is FSDP FULL_SHARD / plain ZeRO).
    # [finetune] gradients and their sync cover the trained parameters only (LoRA adapters;
    # routed experts are trained only by full training)
    psi_rep, psi_exp = params_gpu_replicated(), params_gpu_experts()
    train_rep = ft.trainable_params(psi_rep, Ls)
    train_exp = (1 - ft.IS_ADAPTER) * psi_exp
    rep_bytes, exp_bytes = S.BYTES_PARAM * train_rep, S.BYTES_PARAM * train_exp
    weight_rep, weight_exp = ft.base_weight_bytes(psi_rep, Ls), S.BYTES_PARAM * psi_exp
    ex = expert_shards()
    dd, de = d * c, t * c * d / ex
    ds, r = dd / S.dp_replicate, S.dp_replicate

    def both(op: Callable[[sp.Expr, sp.Expr, sp.Expr], Cost], rep: sp.Expr, exp: sp.Expr,
             per: sp.Expr, group: sp.Expr = ds) -> sp.Expr:
        return op(rep / per, group, t).time + IS_MOE * op(exp / per, de, ex).time

    ar = both(coll.all_reduce, rep_bytes, exp_bytes, sp.Integer(1), dd)
    replica_ar = coll.all_reduce(rep_bytes / ds, r, t * ds).time
    # ZeRO-3/FSDP gathers and reduce-scatters one layer at a time (one FSDP unit per layer):
    # the stage's bytes split over its layers, each collective paying its own ring latency
    ag = Ls * both(coll.all_gather, weight_rep, weight_exp, Ls)
    rs = Ls * both(coll.reduce_scatter, rep_bytes, exp_bytes, Ls)
    ag_train = Ls * both(coll.all_gather, rep_bytes, exp_bytes, Ls)
    ov = S.dp_overlap
    z3_exposed = (ov * (smax(ag - win_f, 0) + ag / Ls + smax(ag + rs - win_b, 0))
                  + (1 - ov) * (2 * ag + rs))
    # ZeRO-3 as DeepSpeed v0.3-v0.4 ran it (zero3_per_tensor): each parameter tensor its own
    # all-gather after torch.cuda.synchronize() (nothing overlaps), in the forward, the
    # backward and the recomputed forward (which re-gathers a layer of at least
    # stage3_max_reuse_distance = 1e9 elements, the backward reusing a smaller one's), and
    # the gradients all-reduced in buckets (contiguous_gradients off by default until v0.4.3)
    # over the d*c ranks. DeepSpeed v0.3.13 partition_parameters.py _allgather_param, stage3.py
    # _keep_for_later and buffered_reduce_fallback; constants.py defaults.
    # torch.distributed.all_gather with a list of ds outputs (one view per rank) copies each
    # partition out of NCCL's flat buffer with its own copy_ (PyTorch ProcessGroupNCCL::
    # allgather), a host cost t_gather_copy per rank and tensor that grows with the group
    n_tensors = Ls * param_tensors_layer()
    gathers = 2 + FULL_SHARE * flag(params_layer() >= 10**9)
    ag_tensor = (n_tensors * both(coll.all_gather, weight_rep, weight_exp, n_tensors)
                 + n_tensors * ds * S.t_gather_copy)
    ar_layer = Ls * both(coll.all_reduce, rep_bytes, exp_bytes, Ls, dd)
    pt = S.zero3_per_tensor
    z3_time = (1 - pt) * z3_exposed + pt * (gathers * ag_tensor + ar_layer)
    # [finetune] parameter offload: the partition comes over the host link in every pass
    t_z3 = IS_ZERO3 * z3_time + ft.offload_param_fetch_time(
        weight_rep / ds + weight_exp / de, 2 + FULL_SHARE)
    is_z12 = flag((z > sp.Rational(1, 2)) & (z < sp.Rational(5, 2)))
    is_z0 = flag(z < sp.Rational(1, 2))
    grad_sync = is_z0 * ar + is_z12 * rs + (1 - is_z0) * replica_ar
    param_gather = is_z12 * ag_train
    # overlapped: behind one micro-batch's backward (gradients) and forward (parameters).
    # Tried on 2026-11-27 and not kept: (a) with the interleaved schedule each model chunk's
    # collective overlapping the other chunks' cool-down/warm-up passes (Megatron-Core
    # grad_sync_func/param_sync_func per chunk), exposed max(T - ((v-1)*min(m,p)+1)*t/v,
    # T/v - t/v, 0): after the refit in-sample 7.83% -> 7.87%, leave-one-source-out 20.82% ->
    # 20.96% (Llama-3.1-405B on 1,024 H100 and NeMo 24.07's H100 runs, already too fast, got
    # faster); on NeMo 25.02 B200 runs outside the shared data Nemotron-4-340B went -26% -> -8%
    # and GPT-3 175B -9% -> -3%, Llama-3.1-405B +3% -> +9%. (b) On top, a calibrated share of
    # the hidden time still paid (SM and HBM contention; Hopper took 0.31, Blackwell 0.50):
    # in-sample 7.70% but leave-one-source-out 21.07% (NEMO2407 and MBRIDGE2511 above 10%),
    # and the NeMo runs 9.6% -> 10.7% mean error (Mixtral-8x7B on B200 -14% -> -27%).
    # (c) Tried on 2026-12-07 and not kept: the HBM traffic of the hidden share of these
    # collectives and of ZeRO-3's per-micro-batch gathers and reduce-scatter (a ring reads each
    # byte it sends and writes each it receives, 2 bytes per byte sent, 3 for a reduction), at
    # eff_hbm. It was suggested by llm-foundry's FSDP runs, whose error grows with the parameter
    # bytes per micro-batch over HBM bandwidth (least squares: about 28 bytes per parameter at
    # peak bandwidth; llm-foundry 13B on 8 H100 at micro-batch 2 is 8-11% too fast, at 16 with
    # full recomputation 5-8% too slow). After the refit, in-sample 7.69% -> 7.58% (MPT 5.31% ->
    # 4.72%, NAR21 4.49% -> 3.76%), but NEMO2407 5.99% -> 7.38% and MBRIDGE2511 8.19% -> 11.15%:
    # Hopper's eff_gemm rose 0.775 -> 0.812 to keep MPT's large micro-batches. Leave-one-source-out
    # 15.89% -> 15.92%, MBRIDGE2511 8.37% -> 11.45%. With the per-step collectives left out,
    # the result was the same (7.57%, NEMO2407 7.93%).
    dp_step = (ov * (smax(grad_sync - win_b, 0) + smax(param_gather - win_f, 0))
               + (1 - ov) * (grad_sync + param_gather))

    t_mb = t_f + t_b + t_r + t_tp + t_cp + t_ep + t_p2p + t_z3
    bubble = (p - 1) / v * t_mb

    def sharded(stage: float, rep: sp.Expr, exp: sp.Expr) -> sp.Expr:
        """Per-GPU amount of ``rep`` + ``exp`` with ZeRO stage > ``stage`` sharding each over
        its data-parallel group (the HSDP shard group for the replicated parameters)."""
        return sp.Piecewise((rep / ds + exp / de, z > stage), (rep + exp, True))

    # [finetune] Adam over the trained partition, on the GPU or (offload) on the host CPUs
    opt_local = sharded(0.5, train_rep, train_exp)
    t_opt = ((1 - ft.IS_OFFLOAD) * adam_step(opt_local).time
             + ft.offload_optimizer_time(opt_local, t * c * p * d, m * (t_f + t_b)))

    out: dict[str, sp.Expr] = {
        "time_forward": m * t_f + fp8_weight_cast_time(),
        "time_backward": m * t_b,
        "time_recompute": m * t_r,
        "time_tp_comm": m * t_tp,
        "time_cp_comm": m * t_cp,
        "time_ep_comm": m * t_ep,
        "time_pp_p2p": m * t_p2p,
        "time_pp_bubble": bubble,
        "time_dp_comm": m * t_z3 + dp_step,
        "time_optimizer": t_opt,
        "time_overhead": S.t_step_overhead,
    }
    step = sp.Add(*out.values())
    out["step_time"] = step

    # --- FLOPs, throughput, utilisation
    s, h, a, f, g = S.seq_len, S.hidden, S.n_heads, S.ffn_hidden, S.gated_mlp
    fm, fa, fmb = moe_layer_fraction(), attention_layer_fraction(), mamba_layer_fraction()
    mlp_active = (mlp_layer_fraction() * (2 + g) * h * f
                  + fm * (S.top_k * params_expert() + S.shared_experts * params_shared_expert()
                          + h * S.n_experts + params_moe_latent()))
    # [hybrid] Mamba-2 blocks: their two projections and the SSD scan's FLOPs
    H, P, G, N = S.mamba_heads, S.mamba_head_dim, S.mamba_groups, S.mamba_state
    mamba_linear = fmb * (ssm.in_proj_width(H, P, G, N) + H * P) * h
    layer_matmul = 2 * s * (fa * attention_linear_params() + mlp_active + mamba_linear)
    # packed documents (doc_len): only the attention within each document is the model's
    # work, as only the window's is for sliding-window layers
    n_attn = attention_length()
    layer_attn = fa * 4 * s * n_attn * a * attention_head_dim() * attention_context_factor(n_attn)
    layer_ssd = fmb * ssm.ssd_scan(s, H, P, G, N, S.peak_flops_16).flops
    head_flops = 2 * s * h * S.vocab
    B = S.global_batch
    # MTP module: a layer (a hybrid's mtp_blocks average blocks), the 2h -> h projection and
    # the output head (DeepSeek-V3 Sec. 2.2)
    mtp_flops = S.mtp_layers * (S.mtp_blocks * (layer_matmul + layer_attn)
                                + 2 * s * 2 * h**2 + head_flops)
    flops_model = 3 * B * (S.n_layers * (layer_matmul + layer_attn + layer_ssd) + head_flops
                           + mtp_flops)
    # [recompute] selective: the recomputed modules' matrix FLOPs (selective_recompute_by_op)
    selective = (S.rc_core_attn * layer_attn
                 + 2 * s * (S.rc_mla_up_proj * fa * mla_up_params()
                            + S.rc_mlp * mlp_layer_fraction() * (2 + g) * h * f
                            + S.rc_shared_experts * fm * S.shared_experts
                            * params_shared_expert()))
    flops_recompute = B * (S.n_layers + S.mtp_layers * S.mtp_blocks) * (
        FULL_SHARE * (layer_matmul + layer_attn + layer_ssd) + IS_SELECTIVE * selective)
    n_gpus = t * c * p * d
    out["flops_model"] = flops_model
    out["flops_hardware"] = flops_model + flops_recompute
    out["tokens_per_s"] = B * s / step
    out["mfu"] = flops_model / (step * n_gpus * spec_peak())
    out["hfu"] = (flops_model + flops_recompute) / (step * n_gpus * spec_peak())

    # --- memory per GPU (first pipeline stage)
    # [memory] ZeRO-3 gathered parameters: two layers (Megatron/FSDP: the one computing and
    # the one prefetched) or, with DeepSpeed, up to ``stage3_max_live_parameters``
    # (:func:`deepspeed_live_param_bytes`)
    zero3_buffer = IS_ZERO3 * (
        (1 - IS_HF) * 2 * S.BYTES_PARAM * (params_layer_replicated() / t
                                           + params_layer_experts() / expert_shards())
        + IS_HF * deepspeed_live_param_bytes(psi_rep + psi_exp))
    # [finetune] frozen/NF4 base weights; gradients and optimizer of the trained parameters;
    # offload moves the optimizer (and gradient) partition, and the parameter partition, to
    # host memory (mem_host); [memory] layout-specific gradient and optimizer bytes
    # (:func:`gradient_bytes`, :func:`optimizer_bytes`)
    params_16 = sharded(2.5, weight_rep, weight_exp)
    grads = gradient_bytes(sharded(1.5, train_rep, train_exp),
                           sharded(0.5, train_rep, train_exp))
    optim = optimizer_bytes(sharded(0.5, train_rep, train_exp))
    act_layer = bf16_layer_blend(activation_bytes_layer()) * microbatches_in_flight()
    out["mem_weights"] = (1 - ft.IS_OFFLOAD_PARAMS) * params_16 + zero3_buffer
    out["mem_gradients"] = ((1 - ft.IS_OFFLOAD) * grads
                            + deepspeed_reduce_buffer_bytes(vocab_local * S.hidden))
    out["mem_optimizer"] = (1 - ft.IS_OFFLOAD) * optim
    logit_bytes = S.BYTES_LOGIT + IS_HF * (HF_BYTES_LOGIT - S.BYTES_LOGIT)  # [memory]
    logits = (1 - IS_PP) * logit_bytes * n * vocab_local
    out["mem_activations"] = (activation_offload_resident_layers() * act_layer
                              + IS_FULL * activation_bytes_layer_no_recompute() + logits)
    out["mem_total"] = (out["mem_weights"] + out["mem_gradients"] + out["mem_optimizer"]
                        + out["mem_activations"])
    # [offload] host memory per GPU: what ZeRO-Offload and activation offloading moved out of
    # HBM (ZeRO-Offload: the fp32 master, Adam moments and gradients of the partition,
    # Ren et al. 2021, "ZeRO-Offload", USENIX ATC; the offloaded layers' saved activations)
    out["mem_host"] = (ft.IS_OFFLOAD * (grads + optim) + ft.IS_OFFLOAD_PARAMS * params_16
                       + S.activation_offload_layers * act_layer)
    out["mem_usable"] = S.hbm_cap - S.mem_reserved
    # [memory] freed-but-cached blocks a device-level reading also shows (not in mem_total:
    # the allocator releases them and retries before failing an allocation)
    out["mem_cached"] = (cached_gradient_bytes(train_rep + train_exp)
                         + offload_cached_param_bytes(psi_rep + psi_exp))
    # headroom, not a Piecewise flag: a relational over Piecewise terms makes SymPy fold every
    # branch combination into the condition (exponential blow-up); ``fits`` is headroom >= 0.
    # It is the tighter of HBM and host memory: offloading moves bytes from one to the other.
    out["mem_headroom"] = smin(out["mem_usable"] - out["mem_total"],
                               S.host_mem_cap - out["mem_host"])
    out["params_total"] = params_total()
    out["num_gpus"] = n_gpus
    # per layer (the average layer, one micro-batch, one GPU): compute of the forward,
    # backward and recomputation passes (Korthikanti et al. 2022, Table 4 reports these),
    # and the activations it keeps for the backward (Table 2)
    out["time_layer_forward"] = fwd_layer
    out["time_layer_backward"] = bwd_layer
    out["time_layer_recompute"] = rec_layer
    out["mem_activations_layer"] = bf16_layer_blend(activation_bytes_layer())
    # [finetune] the intra-node link of the chosen topology (NVLink, bridges, PCIe/host-staged)
    memo: dict[sp.Basic, sp.Expr] = {}
    link = {S.intra_bw: ft.intra_bandwidth()}
    return {k: replace_symbols(sp.sympify(v), link, memo) for k, v in out.items()}


#: names of the step-time breakdown terms, in order; they sum to ``step_time``.
BREAKDOWN = ("time_forward", "time_backward", "time_recompute", "time_tp_comm", "time_cp_comm",
             "time_ep_comm", "time_pp_p2p", "time_pp_bubble", "time_dp_comm", "time_optimizer",
             "time_overhead")
#: names of the memory terms; they sum to ``mem_total``.
MEMORY = ("mem_weights", "mem_gradients", "mem_optimizer", "mem_activations")
