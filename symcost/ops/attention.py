"""Attention core (scores, softmax, weighted sum of values): unfused and FlashAttention.

Shapes per GPU under tensor parallelism ``t``: ``b`` sequences of ``s`` tokens, ``a/t`` query
heads and ``k/t`` key/value heads of dimension ``d`` (heads are split across TP ranks; when
``k < t`` KV heads are replicated, which the callers express by passing ``max(k, t)``).

FLOP convention (Korthikanti et al. 2022, arXiv:2205.05198, Sec. 6; Narayanan et al. 2021,
eq. in Sec. 5.1): the full ``s x s`` score matrix is counted, ``4*b*s^2*a*d`` FLOP forward,
twice that backward, also for causal masking. Time is what kernels take: FlashAttention skips
fully masked tiles, so it executes :func:`causal_fraction` of that work (half, plus the
diagonal tiles); its backward executes 2.5x the forward math (it recomputes the scores; Dao
2023, FlashAttention-2, Sec. 3).
"""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from ..functions import flag, smax, smin
from .cost import Cost, time_memory_bound, time_roofline
from .elementwise import BYTES_MASK
from .gemm import gemm

#: fraction of the ``s x s`` blocks a causal FlashAttention kernel computes, in the limit of
#: long sequences (:func:`causal_fraction` adds the diagonal tiles).
CAUSAL_FRACTION = sp.Rational(1, 2)
#: query/key tile of the FlashAttention kernels (tokens): 128 x 128 blocks for head dims up to
#: 128 (Dao 2023, FlashAttention-2, Sec. 3.3 and its released kernels; Shah et al. 2024,
#: FlashAttention-3, Sec. 4: 128 x 128 (fp16, d = 128) on H100).
FLASH_TILE = 128


def causal_fraction(s: sp.Expr) -> sp.Expr:
    """Fraction of the ``s x s`` score matrix a causal FlashAttention kernel executes: with
    ``n = s/T`` tiles per side it computes the ``n(n+1)/2`` tiles on or below the diagonal,
    the diagonal ones whole (masked inside): ``1/2 + T/(2s)``, at most 1 (``T`` =
    :data:`FLASH_TILE`). 0.53 at 2,048 tokens, 0.68 at 350 (Dao 2023, FlashAttention-2,
    Sec. 3.1.1: blocks above the diagonal are skipped, the diagonal ones masked).

    Returns:
        The executed fraction (1), a SymPy expression in ``s`` (tokens).
    """
    return smin(1, CAUSAL_FRACTION + sp.Rational(FLASH_TILE, 2) / s)


#: FlashAttention backward math relative to its forward (5 matmuls vs 2).
FLASH_BWD_RATIO = sp.Rational(5, 2)
#: non-matmul FLOP per score element of a FlashAttention forward besides its exponential,
#: done on the CUDA cores in FP32: the ``1/sqrt(d)`` scale, the running row maximum, the
#: subtraction of it and the running row sum (Dao 2023, FlashAttention-2, Algorithm 1, lines
#: 8-10; Sec. 3.1, "non-matmul FLOPs").
FLASH_NONMATMUL_FWD = sp.Integer(4)
#: the same for its backward: the scale and the subtraction of the log-sum-exp for the
#: recomputed ``P = exp(S - L)``, ``dP - D`` and the product with ``P`` for ``dS`` (Dao 2023,
#: FlashAttention-2, Algorithm 2, lines 11-14).
FLASH_NONMATMUL_BWD = sp.Integer(4)


def flops_attention(b: sp.Expr, s: sp.Expr, heads: sp.Expr, d: sp.Expr) -> sp.Expr:
    """Forward FLOPs of QK^T and AV: ``4*b*s^2*heads*d`` FLOP (heads on this GPU)."""
    return 4 * b * s**2 * heads * d


def exponentials_attention(b: sp.Expr, s: sp.Expr, heads: sp.Expr) -> sp.Expr:
    """Exponentials of the softmax over the full score matrix: ``b*s^2*heads``, one per score
    element (heads on this GPU); a FlashAttention forward takes them once and its backward
    once more, recomputing ``P = exp(S - LSE)`` (Dao 2023, FlashAttention-2, Algorithms 1
    and 2). The per-row rescaling exponentials of the online softmax, one per row and key
    tile (``1/FLASH_TILE`` of these), are not counted."""
    return b * s**2 * heads


def exp_equivalent_flops(n_exp: sp.Expr, peak: sp.Expr) -> sp.Expr:
    """``n_exp`` exponentials as the tensor-core FLOP that take as long at ``peak``.

    A FlashAttention kernel's matmuls and softmax run on different units (tensor cores and the
    special function units' ``MUFU.EX2``) and overlap across warps or warpgroups, so the
    kernel takes the longer of the two: its compute time is ``max(matmul FLOP, this) /
    (peak * eff_attn)``. Matmuls do ``4*d`` FLOP (forward; ``10*d`` backward) per exponential,
    and ``peak/peak_exp`` is 128 on A100, 256 on H100 and Blackwell Ultra, 512 on B200: on
    B200 a head dimension of 64 makes the forward bound by its exponentials, at 128 the two
    are equal. A bound, not a kernel model: a kernel that computes part of its exponentials
    on the FMA units instead (a polynomial ``exp2``, as FlashAttention-4 does on Blackwell)
    can beat it, which the calibrated ``eff_attn`` of that generation absorbs.

    Args:
        n_exp: exponentials (count); peak: tensor-core peak, FLOP/s.

    Returns:
        ``n_exp * peak / peak_exp``, FLOP (``peak_exp``: exponentials/s).

    References:
        Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), Sec. 3.2 (H100: 989 TFLOPS of
        matmul, 3.9 T special-function operations per second; softmax overlapped with the
        GEMMs of another warpgroup); NVIDIA Technical Blog, "Making Softmax More Efficient
        with NVIDIA Blackwell Ultra" (2026: twice Blackwell's ``MUFU.EX2`` rate).
    """
    return n_exp * peak / S.peak_exp


def fp32_equivalent_flops(n_flop: sp.Expr, peak: sp.Expr) -> sp.Expr:
    """``n_flop`` non-matmul FP32 FLOP on the CUDA cores as the tensor-core FLOP that take as
    long at ``peak``: ``n_flop * peak / peak_flops_fp32``. FlashAttention-2 cut these because
    each costs 16 matmul FLOP on A100 (312 vs 19.5 TFLOP/s); a hardware file without an FP32
    peak binds it to the 16-bit peak, where they are negligible.

    Args:
        n_flop: FP32 FLOP (count); peak: tensor-core peak, FLOP/s.

    Returns:
        FLOP.

    References:
        Dao 2023, FlashAttention-2 (arXiv:2307.08691), Sec. 3.1 ("Reducing non-matmul
        FLOPs").
    """
    return n_flop * peak / S.peak_flops_fp32


def flash_work(matmul: sp.Expr, n_elem: sp.Expr, nonmatmul: sp.Expr, peak: sp.Expr,
               serial: sp.Expr) -> sp.Expr:
    """Tensor-core-equivalent work of a FlashAttention pass over ``n_elem`` score elements:
    its ``matmul`` FLOP, one exponential per element on the special function units
    (:func:`exp_equivalent_flops`) and ``nonmatmul`` FP32 FLOP per element on the CUDA cores
    (:func:`fp32_equivalent_flops`). Kernels that overlap the softmax of one
    warpgroup with the matmuls of another (FlashAttention-3, cuDNN; ``serial = 0``) take the
    longest of the three; FlashAttention-2, whose warps each run a tile's matmul, softmax and
    next matmul in sequence (``serial = 1``), takes their sum.

    Args:
        matmul: matmul FLOP executed; n_elem: score elements (count); nonmatmul: FP32 FLOP
            per element; peak: tensor-core peak, FLOP/s; serial: 0 or 1.

    Returns:
        FLOP at ``peak`` (divide by ``peak * eff_attn`` for time).

    References:
        Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), Sec. 3.1-3.2 (warp
        specialization, pingpong scheduling and intra-warpgroup overlap of softmax and GEMMs,
        which FlashAttention-2 does not have); Dao 2023, FlashAttention-2, Sec. 3.1.
    """
    e = exp_equivalent_flops(n_elem, peak)
    v = fp32_equivalent_flops(n_elem * nonmatmul, peak)
    return (1 - serial) * smax(matmul, e, v) + serial * (matmul + e + v)


def gqa_expand(b: sp.Expr, s: sp.Expr, heads: sp.Expr, kv_heads: sp.Expr,
               d: sp.Expr) -> Cost:
    """Copy that repeats each key/value head for its query-head group before unfused attention.

    Grouped-query attention shares one K/V head among ``heads/kv_heads`` query heads. Unfused
    kernels are batched GEMMs over query heads, so implementations materialise K and V for
    every query head first (Megatron-LM ``DotProductAttention``: ``key.repeat_interleave(
    np // ng, dim=2)``, the same for ``value``; Hugging Face ``repeat_kv``): read ``kv_heads``
    heads of K and V, write ``heads`` heads of each. Zero when ``kv_heads >= heads`` (multi-head
    attention: nothing to repeat).

    Args:
        b: sequences; s: tokens per sequence; heads, kv_heads: query and key/value heads on
            this GPU; d: head dimension.

    Returns:
        :class:`Cost`: no FLOP, ``BYTES_ACT * b*s*d * 2*(kv_heads + heads)`` bytes when
        ``kv_heads < heads``, memory-bound time at ``eff_hbm``.
    """
    nbytes = flag(kv_heads < heads) * S.BYTES_ACT * b * s * d * 2 * (kv_heads + heads)
    return Cost(sp.Integer(0), nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def attention_unfused(b: sp.Expr, s: sp.Expr, heads: sp.Expr, kv_heads: sp.Expr, d: sp.Expr,
                      peak: sp.Expr, dropout: sp.Expr) -> Cost:
    """Unfused (Megatron "core attention") forward: QK^T GEMM, fused scale-mask-softmax,
    optional dropout on the probabilities, and the AV GEMM; the ``s x s`` scores go through HBM.

    With grouped-query attention (``kv_heads < heads``) K and V are first repeated to every
    query head (:func:`gqa_expand`), so the two GEMMs read ``heads`` heads of K and V.

    Args:
        b: sequences; s: tokens per sequence; heads: query heads on this GPU;
        kv_heads: key/value heads on this GPU; d: head dimension; peak: FLOP/s of the dtype;
        dropout: 0/1, attention-probability dropout present.

    Returns:
        :class:`Cost` (FLOP, bytes, s).

    References:
        Korthikanti et al. 2022, Sec. 4.1 (the ``5*a*s^2*b`` activation terms are these tensors).
    """
    expand = gqa_expand(b, s, heads, kv_heads, d)
    scores = gemm(s, s, d, peak, batch=b * heads, weight=False)
    probs_elems = b * heads * s**2
    softmax_bytes = probs_elems * 2 * S.BYTES_ACT
    drop_bytes = dropout * probs_elems * (2 * S.BYTES_ACT + BYTES_MASK)
    sm = Cost(probs_elems * 5, softmax_bytes + drop_bytes,
              time_memory_bound(softmax_bytes + drop_bytes, S.hbm_bw, S.eff_hbm))
    av = gemm(s, d, s, peak, batch=b * heads, weight=False)
    return expand + scores + sm + av


def attention_unfused_backward(fwd: Cost) -> Cost:
    """Backward of the unfused core attention: two GEMMs per forward GEMM and the softmax
    gradient; about twice the forward in FLOP, bytes and time."""
    return fwd.scale(2)


def _flash_bytes(b: sp.Expr, s: sp.Expr, heads: sp.Expr, kv_heads: sp.Expr,
                 d: sp.Expr) -> sp.Expr:
    # read Q, K, V and write O once; no s x s tensor in HBM (Dao et al. 2022, Theorem 2).
    return S.BYTES_ACT * b * s * d * (2 * heads + 2 * kv_heads)


def attention_flash(b: sp.Expr, s: sp.Expr, heads: sp.Expr, kv_heads: sp.Expr, d: sp.Expr,
                    peak: sp.Expr, serial: sp.Expr = sp.Integer(0),
                    matmul_speedup: sp.Expr = sp.Integer(1)) -> Cost:
    """FlashAttention forward: tiled, fused, causal-block skipping, no ``s x s`` HBM traffic.

    Args:
        b, s, heads, kv_heads, d: sequences, tokens, query and key/value heads on this GPU,
            head dimension; peak: tensor-core peak, FLOP/s; serial: 1 for a kernel that runs
            softmax and matmuls in sequence (FlashAttention-2), 0 for one that overlaps them
            (:func:`flash_work`); matmul_speedup: the matmuls' tensor-core rate over ``peak``
            (2 for FP8 attention against a 16-bit ``peak``: Transformer Engine
            ``fp8_dot_product_attention``; the exponentials and FP32 work keep theirs).

    Returns:
        :class:`Cost`; FLOP counted in the full-matrix convention, time from the executed
        fraction (:func:`causal_fraction`) of the matmuls and of the softmax's exponentials
        and FP32 FLOP (:data:`FLASH_NONMATMUL_FWD`), combined by :func:`flash_work`,
        at ``eff_attn`` of peak, or the Q/K/V/O traffic, whichever is slower.

    References:
        Dao et al. 2022, "FlashAttention" (arXiv:2205.14135); Dao 2023, "FlashAttention-2"
        (arXiv:2307.08691); Shah et al. 2024, "FlashAttention-3" (arXiv:2407.08608).
    """
    f = flops_attention(b, s, heads, d)
    nbytes = _flash_bytes(b, s, heads, kv_heads, d)
    work = flash_work(f / matmul_speedup, exponentials_attention(b, s, heads),
                      FLASH_NONMATMUL_FWD, peak, serial)
    t = time_roofline(work * causal_fraction(s), nbytes, peak, S.eff_attn, S.hbm_bw, S.eff_hbm)
    return Cost(f, nbytes, t)


def attention_flash_backward(b: sp.Expr, s: sp.Expr, heads: sp.Expr, kv_heads: sp.Expr,
                             d: sp.Expr, peak: sp.Expr, serial: sp.Expr = sp.Integer(0),
                             matmul_speedup: sp.Expr = sp.Integer(1)) -> Cost:
    """FlashAttention backward: ``2x`` forward FLOP by convention; executes
    ``FLASH_BWD_RATIO`` x the forward math (its matmuls ``matmul_speedup`` times faster than
    ``peak``, as in :func:`attention_flash`), recomputes the softmax's exponentials and does
    :data:`FLASH_NONMATMUL_BWD` FP32 FLOP per element, combined by
    :func:`flash_work` (``serial`` as in :func:`attention_flash`), and reads/writes Q, K, V,
    O, dO, dQ, dK, dV."""
    f = 2 * flops_attention(b, s, heads, d)
    nbytes = 2 * _flash_bytes(b, s, heads, kv_heads, d)
    work = flash_work(FLASH_BWD_RATIO * flops_attention(b, s, heads, d) / matmul_speedup,
                      exponentials_attention(b, s, heads), FLASH_NONMATMUL_BWD, peak, serial)
    t = time_roofline(work * causal_fraction(s), nbytes, peak, S.eff_attn, S.hbm_bw,
                      S.eff_hbm)
    return Cost(f, nbytes, t)
