"""Dense matrix multiplication (GEMM) cost with a roofline."""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from .cost import Cost, time_roofline


def flops_gemm(m: sp.Expr, n: sp.Expr, k: sp.Expr, batch: sp.Expr = sp.Integer(1)) -> sp.Expr:
    """FLOPs of ``batch`` products of an (m x k) by a (k x n) matrix: ``2*m*n*k*batch`` FLOP."""
    return 2 * m * n * k * batch


def bytes_gemm(m: sp.Expr, n: sp.Expr, k: sp.Expr, batch: sp.Expr = sp.Integer(1),
               elem_bytes: sp.Expr = S.BYTES_ACT, *, b_shared: bool = False,
               b_bytes: sp.Expr | None = None) -> sp.Expr:
    """Minimum HBM traffic of a GEMM: read A (m x k) and B (k x n) once, write C (m x n).

    Args:
        m, n, k: matrix dimensions (elements).
        batch: number of independent products.
        elem_bytes: bytes per element (of A and C; also of B unless ``b_bytes`` is given).
        b_shared: True when ``B`` (a weight matrix) is shared by all ``batch`` products and
            read once.
        b_bytes: bytes per element of ``B`` when it differs from ``elem_bytes`` (quantized
            weights); None: ``elem_bytes``.

    Returns:
        bytes.
    """
    b_reads = k * n if b_shared else k * n * batch
    if b_bytes is None:
        return elem_bytes * (m * k * batch + b_reads + m * n * batch)
    return elem_bytes * (m * k * batch + m * n * batch) + b_bytes * b_reads


def gemm(m: sp.Expr, n: sp.Expr, k: sp.Expr, peak: sp.Expr, batch: sp.Expr = sp.Integer(1),
         elem_bytes: sp.Expr = S.BYTES_ACT, *, weight: bool = True,
         eff: sp.Expr = S.eff_gemm, b_bytes: sp.Expr | None = None,
         overlap: sp.Expr | None = None) -> Cost:
    """Cost of a GEMM ``C[m,n] = A[m,k] @ B[k,n]`` on one GPU.

    Args:
        m, n, k: dimensions in elements (``m`` is usually tokens, ``k``/``n`` features).
        peak: dense peak FLOP/s of the dtype the GEMM runs in.
        batch: independent products (batched GEMM).
        elem_bytes: bytes per element read and written.
        weight: ``B`` is a weight matrix shared by the batch (read once).
        eff: achieved fraction of peak.
        b_bytes: bytes per element of ``B`` when it differs from ``elem_bytes`` (e.g.
            quantized weights); None keeps ``elem_bytes`` for all three matrices.
        overlap: compute/memory overlap of the kernel (see
            :func:`~symcost.ops.cost.time_roofline`); None: perfect overlap (``Max``).

    Returns:
        :class:`Cost` with FLOP, bytes and time (s, roofline of compute vs HBM).

    References:
        Narayanan et al. 2021 (arXiv:2104.04473), Sec. 5 (2mnk per GEMM); roofline as in
        Williams et al. 2009.
    """
    f = flops_gemm(m, n, k, batch)
    b = bytes_gemm(m, n, k, batch, elem_bytes, b_shared=weight, b_bytes=b_bytes)
    return Cost(f, b, time_roofline(f, b, peak, eff, S.hbm_bw, S.eff_hbm, overlap=overlap))


def size_efficiency(eff: sp.Expr, m: sp.Expr, m_half: sp.Expr) -> sp.Expr:
    """Achieved fraction of peak of GEMMs with ``m`` rows (tokens): ``eff * m/(m + m_half)``.

    A GEMM is tiled into ``ceil(m/tile) * ceil(n/tile)`` output tiles run in waves over the
    SMs; with few rows the last row of tiles is partly empty, the last wave leaves SMs idle,
    and the fixed prologue/epilogue and launch cost weigh more, so the useful fraction of the
    work rises with ``m`` and saturates at ``eff``. The hyperbolic form is the simplest such
    curve with one constant, the half-efficiency size ``m_half`` (0: no size effect).

    Args:
        eff: efficiency of large GEMMs (fraction of peak).
        m: rows of the GEMM (tokens), positive.
        m_half: rows at which half of ``eff`` is reached (calibrated).

    Returns:
        Fraction of peak (dimensionless).

    References:
        NVIDIA, "Matrix Multiplication Background User's Guide" (Deep Learning Performance
        documentation), sections "Tile Quantization" and "Wave Quantization"; Gale et al.
        2023, "MegaBlocks" (MLSys), Sec. 3 (small per-expert GEMMs).
    """
    return eff * m / (m + m_half)
