"""Memory-bound elementwise operators: norms, activations, residual add and dropout.

Each moves every element through HBM and does negligible math, so time is bytes over achieved
HBM bandwidth. Element counts are per GPU; activations are 16-bit (``BYTES_ACT``).
"""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from .cost import Cost, time_memory_bound

#: bytes per element of a dropout mask (stored as uint8 by Megatron / PyTorch).
BYTES_MASK = sp.Integer(1)


def _memory_op(elements: sp.Expr, reads: int, writes: int, extra_bytes: sp.Expr = 0,
               flops_per_elem: int = 0) -> Cost:
    nbytes = elements * (reads + writes) * S.BYTES_ACT + extra_bytes
    return Cost(elements * flops_per_elem, nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def norm(elements: sp.Expr) -> Cost:
    """LayerNorm/RMSNorm forward over ``elements`` values: read x, write y (weights negligible).

    Returns:
        :class:`Cost` (FLOP ~ 5 per element, bytes, s).
    """
    return _memory_op(elements, 1, 1, flops_per_elem=5)


def activation(ffn_elements: sp.Expr, gated: sp.Expr, clamp: sp.Expr = sp.Integer(0)) -> Cost:
    """GeLU (``gated=0``: read f, write f) or SwiGLU (``gated=1``: read 2f, write f), with
    ``clamp`` its inputs clamped first by separate kernels: one clamp per half (read f, write
    f each) and the concatenation of the two halves (read 2f, write 2f), 8f more.

    Args:
        ffn_elements: elements of one MLP intermediate tensor (tokens x f / t).
        gated: 0 or 1 (symbol ``gated_mlp``).
        clamp: 0 or 1 (symbol ``act_clamp``; counted for a gated MLP only).

    Returns:
        :class:`Cost`; bytes = ``(2 + gated + 8*gated*clamp) * ffn_elements * BYTES_ACT``
        (the backward, :func:`backward`, twice that).

    References:
        Shazeer 2020, "GLU variants improve Transformer" (SwiGLU); Megatron-Core
        ``megatron/core/fusions/fused_bias_geglu.py``, ``weighted_bias_quick_geglu_impl``:
        with ``clamp_value`` set (gpt-oss, ``activation_func_clamp_value = 7``) the two
        ``clamp`` calls and the ``torch.cat`` run before the fused autograd function.
    """
    nbytes = ffn_elements * (2 + gated + 8 * gated * clamp) * S.BYTES_ACT
    return Cost(ffn_elements * 8, nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def residual_dropout(elements: sp.Expr, dropout: sp.Expr) -> Cost:
    """Fused bias + dropout + residual add: read x and residual, write y, and a uint8 mask if
    ``dropout`` is 1 (Megatron ``bias_dropout_add``)."""
    return _memory_op(elements, 2, 1, extra_bytes=dropout * elements * BYTES_MASK,
                      flops_per_elem=2)


def backward(cost: Cost) -> Cost:
    """Backward of a memory-bound op: about twice the traffic of the forward (reads the saved
    input and the output gradient, writes the input gradient and parameter-gradient partials)."""
    return cost.scale(2)


# [moe] token permutation of mixture-of-experts layers (issue 11)
#: bytes per routing probability (Megatron-Core keeps router probabilities in fp32).
BYTES_PROB = sp.Integer(4)


def token_permutation(tokens: sp.Expr, top_k: sp.Expr, width: sp.Expr) -> Cost:
    """Forward token permutation and unpermutation of one MoE layer: the permute gathers each
    of ``tokens`` vectors of ``width`` elements into ``top_k`` copies sorted by expert (read
    ``tokens*width``, write ``tokens*top_k*width``); the unpermute weights the ``top_k`` expert
    outputs by their fp32 routing probabilities and scatter-adds them back (read
    ``tokens*top_k*width`` and ``tokens*top_k`` probabilities, write ``tokens*width``).
    Memory-bound at achieved HBM bandwidth (one fused kernel each, ``--moe-permute-fusion``).

    Args:
        tokens: token vectors the GPU dispatches (its tokens outside the TP region).
        top_k: experts per token.
        width: elements per token vector (the hidden size ``h``).

    Returns:
        :class:`Cost`: FLOP ``tokens*top_k*width`` (the probability weighting), bytes
        ``BYTES_ACT*2*tokens*width*(1 + top_k) + BYTES_PROB*tokens*top_k``, time s.

    References:
        NVIDIA Megatron-Core MoE documentation (``megatron/core/transformer/moe/README.md``:
        token (un)permutation fusion, probabilities applied at unpermutation); Gale et al.
        2023, "MegaBlocks" (MLSys), Sec. 5 (permutation as gather/scatter around grouped GEMMs).
    """
    nbytes = (S.BYTES_ACT * 2 * tokens * width * (1 + top_k)
              + BYTES_PROB * tokens * top_k)
    return Cost(tokens * top_k * width, nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def chunk_sort(rows: sp.Expr, width: sp.Expr) -> Cost:
    """Regrouping of the token rows an expert-parallel all-to-all delivered, from source-rank
    order to local-expert order (and back before the combine's all-to-all): read and write each
    of ``rows`` vectors of ``width`` elements once. Megatron-Core's ``alltoall`` token
    dispatcher runs it whenever a GPU holds more than one expert (``sort_chunks_by_idxs``
    after the dispatch and before the combine, forward and backward); the ``flex`` dispatcher
    (DeepEP, HybridEP) permutes once on the receiving side instead.

    Returns:
        :class:`Cost`: no FLOP, bytes ``2*BYTES_ACT*rows*width``, memory-bound time s.

    References:
        NVIDIA Megatron-Core ``megatron/core/transformer/moe/token_dispatcher.py``
        (``MoEAlltoAllTokenDispatcher``: ``sort_chunks_by_idxs`` with
        ``num_local_experts > 1``), ``moe_utils.sort_chunks_by_idxs``.
    """
    return _memory_op(rows * width, 1, 1)


def token_permutation_backward(tokens: sp.Expr, top_k: sp.Expr, width: sp.Expr) -> Cost:
    """Backward of :func:`token_permutation`: the unpermute's backward reads the output
    gradient (``tokens*width``) and the saved expert outputs (``tokens*top_k*width``, for the
    probability gradients) and writes ``top_k`` gradient copies; the permute's backward reads
    those copies and writes their sum per token. Bytes ``BYTES_ACT*tokens*width*(2 + 3*top_k)
    + BYTES_PROB*tokens*top_k`` (about 1.5 times the forward for ``top_k = 8``).

    References:
        As :func:`token_permutation` (the backward of a gather is a scatter-add of the same
        size; the probability gradient is a row-wise dot product with the saved outputs).
    """
    nbytes = (S.BYTES_ACT * tokens * width * (2 + 3 * top_k)
              + BYTES_PROB * tokens * top_k)
    return Cost(2 * tokens * top_k * width, nbytes,
                time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def router_scores(tokens: sp.Expr, experts: sp.Expr) -> Cost:
    """Router score function and top-k of one MoE layer forward (after the router GEMM):
    read the fp32 logits, write the probabilities, read them for the top-k selection and the
    auxiliary load-balancing loss (three passes over ``tokens*experts`` fp32 values;
    ``--moe-router-fusion`` fuses them into one kernel that still streams the scores).

    Returns:
        :class:`Cost`: FLOP ``5*tokens*experts`` (exp, sum, divide, compare), bytes
        ``3*BYTES_PROB*tokens*experts``, time s.

    References:
        Fedus et al. 2022, "Switch Transformers" (JMLR), Sec. 2.1-2.2 (softmax router, top-k,
        auxiliary loss); Megatron-Core MoE documentation (router fusion).
    """
    nbytes = 3 * BYTES_PROB * tokens * experts
    return Cost(5 * tokens * experts, nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))
