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


def activation(ffn_elements: sp.Expr, gated: sp.Expr) -> Cost:
    """GeLU (``gated=0``: read f, write f) or SwiGLU (``gated=1``: read 2f, write f).

    Args:
        ffn_elements: elements of one MLP intermediate tensor (tokens x f / t).
        gated: 0 or 1 (symbol ``gated_mlp``).

    Returns:
        :class:`Cost`; bytes = ``(2 + gated) * ffn_elements * BYTES_ACT``.

    References:
        Shazeer 2020, "GLU variants improve Transformer" (SwiGLU).
    """
    nbytes = ffn_elements * (2 + gated) * S.BYTES_ACT
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
