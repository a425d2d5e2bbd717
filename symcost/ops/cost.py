"""The :class:`Cost` triple every operator returns, and the roofline that turns work into time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import NamedTuple

import sympy as sp

from .. import symbols as S
from ..functions import smax, smin


class Cost(NamedTuple):
    """Work and time of one operator (or a sum of operators), as SymPy expressions.

    Attributes:
        flops: floating-point operations, FLOP.
        bytes: bytes moved to or from HBM (for collectives: bytes sent per GPU), bytes.
        time: wall time, s.
    """

    flops: sp.Expr
    bytes: sp.Expr
    time: sp.Expr

    def __add__(self, other: "Cost") -> "Cost":  # type: ignore[override]
        return Cost(self.flops + other.flops, self.bytes + other.bytes, self.time + other.time)

    def scale(self, factor: sp.Expr) -> "Cost":
        """This cost repeated ``factor`` times (all three fields multiplied)."""
        return Cost(self.flops * factor, self.bytes * factor, self.time * factor)


ZERO = Cost(sp.Integer(0), sp.Integer(0), sp.Integer(0))


def total(costs: Iterable[Cost]) -> Cost:
    """Sum of an iterable of :class:`Cost`."""
    out = ZERO
    for c in costs:
        out = out + c
    return out


def select(cond: sp.Basic, a: Cost, b: Cost) -> Cost:
    """``a`` where ``cond`` holds, else ``b``: each field a two-branch ``Piecewise``.

    Args:
        cond: a SymPy relational over mode symbols (e.g. ``flash_attn > 1/2``).
        a, b: the costs of the two branches.
    """
    return Cost(*(sp.Piecewise((x, cond), (y, True)) for x, y in zip(a, b)))


def sum_time(costs: Mapping[str, Cost]) -> sp.Expr:
    """Total time (s) of named costs: the sum of their ``time`` fields."""
    return sp.Add(*(c.time for c in costs.values()))


def time_roofline(flops: sp.Expr, nbytes: sp.Expr, peak: sp.Expr, eff_compute: sp.Expr,
                  bw: sp.Expr, eff_bw: sp.Expr, *, overlap: sp.Expr | None = None) -> sp.Expr:
    """Roofline time: the slower of compute at achieved peak and memory traffic at achieved bandwidth.

    The compute side runs at ``peak * matmul_ceiling * eff_compute``: ``matmul_ceiling`` is the
    fraction of its peaks the GPU sustains at best (its measured maximum achievable matmul rate
    over the bf16 peak, :attr:`hwspecs.HardwareSpec.matmul_ceiling`: the clock it holds under a
    saturating load), ``eff_compute`` the calibrated fraction of that ceiling a kernel family
    reaches. A low-precision GEMM's ``peak`` carries its dtype's own ceiling relative to this
    one (:func:`symcost.training.gemm_peak`: ``matmul_ceiling_fp8 / matmul_ceiling`` for fp8).
    The ceiling applies to every unit clocked with the tensor cores (the exponentials and FP32
    work of :func:`symcost.ops.attention.flash_work` are counted in peak-equivalent FLOP).

    Args:
        flops: work, FLOP.
        nbytes: HBM traffic, bytes.
        peak: peak FLOP/s.
        eff_compute: achieved fraction of ``peak * matmul_ceiling``.
        bw: memory bandwidth, bytes/s.
        eff_bw: achieved fraction of ``bw``.
        overlap: fraction of the shorter of the two times hidden under the longer; None (the
            default) is perfect overlap, ``Max(tc, tm)``; otherwise
            ``Max(tc, tm) + (1 - overlap) * Min(tc, tm)`` (0: the two run serially).

    Returns:
        Time in s: ``Max(flops/(peak*matmul_ceiling*eff_compute), nbytes/(bw*eff_bw))`` (see
        ``overlap``).

    References:
        Williams, Waterman and Patterson, "Roofline: an insightful visual performance model
        for multicore architectures", CACM 52(4), 2009; S. Bekman, "Machine Learning
        Engineering", "Maximum Achievable FLOPS" (the measured ceiling as the reference for
        achieved efficiency; github.com/stas00/ml-engineering, compute/accelerator).
    """
    tc, tm = flops / (peak * S.matmul_ceiling * eff_compute), nbytes / (bw * eff_bw)
    if overlap is None:
        return smax(tc, tm)
    return smax(tc, tm) + (1 - overlap) * smin(tc, tm)


def time_memory_bound(nbytes: sp.Expr, bw: sp.Expr, eff_bw: sp.Expr) -> sp.Expr:
    """Time of a memory-bound (elementwise) kernel: ``nbytes / (bw * eff_bw)`` in s."""
    return nbytes / (bw * eff_bw)
