"""Optimizer step (Adam), memory-bound."""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from .cost import Cost, time_memory_bound


def adam_step(params_local: sp.Expr) -> Cost:
    """One mixed-precision Adam update of ``params_local`` parameters held by this GPU.

    Returns:
        :class:`Cost`: ~10 FLOP per parameter, ``BYTES_ADAM_STEP`` bytes per parameter, time
        memory-bound at achieved HBM bandwidth (s).

    References:
        Kingma and Ba 2015 (Adam); Rajbhandari et al. 2020 (ZeRO), Sec. 3.1 (state sizes).
    """
    nbytes = params_local * S.BYTES_ADAM_STEP
    return Cost(params_local * 10, nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))
