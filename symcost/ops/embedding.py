"""Input embedding, LM head and the cross-entropy loss."""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from .cost import Cost, time_memory_bound
from .gemm import gemm


def embedding_lookup(tokens: sp.Expr, h: sp.Expr) -> Cost:
    """Gather ``tokens`` rows of the embedding table and write them (h values each).

    Returns:
        :class:`Cost`; bytes = ``2 * tokens * h * BYTES_ACT`` (read row, write activation).
    """
    nbytes = 2 * tokens * h * S.BYTES_ACT
    return Cost(sp.Integer(0), nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def lm_head(tokens: sp.Expr, h: sp.Expr, vocab_local: sp.Expr, peak: sp.Expr) -> Cost:
    """Logits GEMM ``[tokens, h] @ [h, V/t]`` (vocabulary-parallel under TP).

    References:
        Narayanan et al. 2021, Sec. 5.1: the ``6*B*s*h*V`` term of the step FLOPs.
    """
    return gemm(tokens, vocab_local, h, peak)


def cross_entropy(tokens: sp.Expr, vocab_local: sp.Expr) -> Cost:
    """Fused vocabulary-parallel softmax cross-entropy in fp32: about three passes over the
    ``tokens x V/t`` logits (max, sum-exp, loss/gradient), each read and written.

    References:
        Shoeybi et al. 2019, Megatron-LM (arXiv:1909.08053), Sec. 3 (parallel cross-entropy).
    """
    elems = tokens * vocab_local
    nbytes = 3 * 2 * elems * S.BYTES_LOGIT
    return Cost(elems * 5, nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))
