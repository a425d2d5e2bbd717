"""Memory-size units: the one place that says how a byte count is shown to people.

HBM capacities are marketed in binary units: an "80GB" A100 or H100 has 80 GiB
(80 x 2**30 bytes; :mod:`hwspecs.loader` reads ``hbm_capacity_gb`` that way), so every
memory size symcost displays is in GiB, printed with the ``GiB`` unit. A figure printed by
:func:`format_bytes` can be pasted back into a hardware YAML's ``hbm_capacity_gb``.
"""

from __future__ import annotations

import math

#: bytes per GiB (binary gigabyte, 2**30 bytes): the unit of ``hbm_capacity_gb`` and of every
#: memory size symcost displays.
GIB = 2**30


def format_bytes(n: float, digits: int = 2, *, sign: bool = False) -> str:
    """A byte count as GiB text, e.g. ``format_bytes(80 * 2**30) == "80.00 GiB"``.

    Args:
        n: size in bytes (may be negative, e.g. a memory shortfall).
        digits: decimals shown.
        sign: always show the sign (``"+1.50 GiB"``), for differences.

    Returns:
        ``f"{n / GIB:.{digits}f} GiB"``; ``"nan GiB"`` / ``"inf GiB"`` for non-finite input.
    """
    v = float(n) / GIB
    if not math.isfinite(v):
        return f"{v} GiB"
    return f"{v:{'+' if sign else ''}.{int(digits)}f} GiB"


__all__ = ["GIB", "format_bytes"]
