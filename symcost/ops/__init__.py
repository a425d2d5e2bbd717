"""Operator cost families; each function returns a :class:`~symcost.ops.cost.Cost` of SymPy
expressions (FLOP, bytes, seconds)."""

from . import attention, collectives, elementwise, embedding, gemm, optimizer
from .cost import Cost, total

__all__ = ["Cost", "total", "attention", "collectives", "elementwise", "embedding", "gemm",
           "optimizer"]
