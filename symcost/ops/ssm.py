"""Mamba-2 (state-space duality) mixer operators: the widths of its projections, the depthwise
causal convolution and the chunked SSD scan, as SymPy expressions.

A Mamba-2 mixer with ``H`` heads of width ``P`` (inner width ``d_in = H*P``), state size ``N``
and ``G`` groups (heads of a group share ``B`` and ``C``) projects the input ``h -> 2*d_in +
2*G*N + H`` (``z``, ``x``, ``B``, ``C``, ``dt``), runs a depthwise causal convolution of width
:data:`CONV_WIDTH` with SiLU over ``x, B, C``, the SSD scan, a norm gated by ``z`` and the
output projection ``d_in -> h``. Tensor parallelism splits the heads and groups (Megatron-Core
``MambaMixer``); element counts here are per GPU and activations 16-bit (``BYTES_ACT``).

References:
    Dao and Gu 2024, "Transformers are SSMs: Generalized Models and Efficient Algorithms
    Through Structured State Space Duality" (arXiv:2405.21060), Sec. 6 (the chunked SSD
    algorithm: diagonal blocks as masked matmuls, chunk states, state passing, outputs from
    states) and Sec. 7.1 (the Mamba-2 block: parallel projections, groups, gated norm);
    NVIDIA Megatron-Core ``megatron/core/ssm/mamba_mixer.py`` (``chunk_size`` 128,
    ``d_conv`` 4, heads and groups split over tensor-parallel ranks).
"""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from .cost import Cost, time_memory_bound, time_roofline

__all__ = ["CONV_WIDTH", "SSD_CHUNK", "causal_conv1d", "gated_norm", "in_proj_width",
           "ssd_scan", "ssd_scan_backward"]

#: width of the depthwise causal convolution (Mamba-2 ``d_conv``; Megatron-Core
#: ``MambaMixer(d_conv=4)``, NemotronH ``conv_kernel = 4``).
CONV_WIDTH = sp.Integer(4)
#: tokens per chunk of the SSD scan (Megatron-Core ``MambaMixer(chunk_size=128)``;
#: Megatron-Bridge ``DEFAULT_MAMBA_CHUNK_SIZE = 128``, ``models/hybrid/hybrid_provider.py``
#: @067f987).
SSD_CHUNK = sp.Integer(128)


def in_proj_width(heads: sp.Expr, head_dim: sp.Expr, groups: sp.Expr,
                  state: sp.Expr) -> sp.Expr:
    """Output width of the input projection (elements): ``z`` and ``x`` (``d_in`` each),
    ``B`` and ``C`` (``G*N`` each) and one ``dt`` per head: ``2*H*P + 2*G*N + H``
    (Dao and Gu 2024, Sec. 7.1, Figure 6: parallel projections)."""
    return 2 * heads * head_dim + 2 * groups * state + heads


def causal_conv1d(tokens: sp.Expr, channels: sp.Expr) -> Cost:
    """Depthwise causal convolution of width :data:`CONV_WIDTH` with fused SiLU over
    ``channels`` channels (``x, B, C``: ``d_in + 2*G*N``): read the input, write the output;
    ``2*CONV_WIDTH`` FLOP per element. Memory-bound, at ``eff_ssm`` of the HBM roofline.

    Returns:
        :class:`Cost` (FLOP, bytes, s). The backward is twice this
        (:func:`symcost.ops.elementwise.backward`).
    """
    elements = tokens * channels
    nbytes = 2 * elements * S.BYTES_ACT
    return Cost(2 * CONV_WIDTH * elements, nbytes,
                time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm) / S.eff_ssm)


def gated_norm(tokens: sp.Expr, inner: sp.Expr) -> Cost:
    """RMSNorm of the scan output gated by ``z`` (``y * silu(z)``, normalised): read ``y`` and
    ``z``, write one tensor of ``inner`` (``d_in``) elements per token. Memory-bound, at
    ``eff_ssm`` of the HBM roofline."""
    elements = tokens * inner
    nbytes = 3 * elements * S.BYTES_ACT
    return Cost(8 * elements, nbytes,
                time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm) / S.eff_ssm)


def _ssd_work(tokens: sp.Expr, heads: sp.Expr, head_dim: sp.Expr, groups: sp.Expr,
              state: sp.Expr) -> tuple[sp.Expr, sp.Expr]:
    q = SSD_CHUNK
    # per token: diagonal blocks C B^T (2QN per group) and their product with X (2QP per
    # head); chunk states B^T X and outputs C * state (2NP each per head)
    flops = tokens * (groups * 2 * q * state + heads * (2 * q * head_dim + 4 * state * head_dim))
    # the five forward kernels of mamba_chunk_scan_combined (chunk cumsum, chunk states, state
    # passing, C B^T, chunk scan): x, B and C read twice and y written (16-bit); dt read, its
    # fp32 cumulative sums written and read twice; the fp32 C B^T blocks (Q per token and
    # group) written and read; the fp32 chunk states (H*P*N per chunk of Q tokens) written,
    # read and rewritten by the state passing, and read by the scan
    io = 3 * heads * head_dim + 4 * groups * state
    dt = heads * (S.BYTES_ACT + 3 * 4)
    cb = 2 * 4 * groups * q
    states = 4 * 4 * heads * head_dim * state / q
    return flops, tokens * (io * S.BYTES_ACT + dt + cb + states)


def ssd_scan(tokens: sp.Expr, heads: sp.Expr, head_dim: sp.Expr, groups: sp.Expr,
             state: sp.Expr, peak: sp.Expr) -> Cost:
    """Forward SSD scan of ``tokens`` tokens over ``heads`` local heads (chunked algorithm of
    Dao and Gu 2024, Sec. 6, chunk :data:`SSD_CHUNK`).

    FLOP per token: ``2*Q*N*G`` (the diagonal blocks' ``C B^T``, shared by a group's heads)
    ``+ H*(2*Q*P + 4*N*P)`` (those blocks times ``X``; the chunk states and the outputs from
    the states); causal blocks are computed whole. Bytes: the five kernels of the reference
    implementation (``mamba_ssm`` ``mamba_chunk_scan_combined``): ``x``, ``B`` and ``C`` read
    twice and ``y`` written in 16 bits, ``dt`` and its fp32 cumulative sums, the fp32
    ``C B^T`` blocks written and read, the fp32 chunk states written, passed and read (four
    passes). Time: roofline at the attention kernels' achieved fraction of the 16-bit peak
    (``eff_attn``; the SSD kernels are tiled tensor-core matmuls with masking, like
    FlashAttention) and achieved HBM bandwidth, divided by ``eff_ssm`` (calibrated: what the
    Triton kernels reach of that roofline).

    Args:
        tokens: tokens on this GPU (micro-batch x sequence, / context-parallel size).
        heads, head_dim, groups, state: local heads ``H/t``, ``P``, local groups ``G/t``, ``N``.
        peak: 16-bit peak FLOP/s.

    Returns:
        :class:`Cost` (FLOP, bytes, s).
    """
    flops, nbytes = _ssd_work(tokens, heads, head_dim, groups, state)
    return Cost(flops, nbytes,
                time_roofline(flops, nbytes, peak, S.eff_attn, S.hbm_bw, S.eff_hbm) / S.eff_ssm)


def ssd_scan_backward(tokens: sp.Expr, heads: sp.Expr, head_dim: sp.Expr, groups: sp.Expr,
                      state: sp.Expr, peak: sp.Expr) -> Cost:
    """Backward of :func:`ssd_scan`: twice its FLOP and bytes (gradients of ``x``, ``B``,
    ``C`` and ``dt`` from the same blocks, with the chunk states recomputed), same roofline."""
    flops, nbytes = _ssd_work(tokens, heads, head_dim, groups, state)
    return Cost(2 * flops, 2 * nbytes,
                time_roofline(2 * flops, 2 * nbytes, peak, S.eff_attn, S.hbm_bw, S.eff_hbm)
                / S.eff_ssm)
