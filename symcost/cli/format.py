"""Number and list formatting shared by the command-line modules (``symcost/cli/*.py``).

Memory sizes are shown in GiB (2**30 bytes), the unit HBM capacities are marketed and read in
(see :mod:`hwspecs.units`); times adapt their unit to the magnitude. Imports nothing heavy.
"""

from __future__ import annotations

from hwspecs.units import GIB, format_bytes

#: re-exported: every memory size a command prints goes through :func:`format_bytes`.
__all__ = ["GIB", "case_examples", "format_bytes", "fmt_time"]


def fmt_time(s: float) -> str:
    """A duration in seconds: ``"1.234 s"`` from 1 s, ``"12.345 ms"`` from 1 ms, else
    ``"123.4 us"``."""
    if s >= 1:
        return f"{s:.3f} s"
    if s >= 1e-3:
        return f"{s * 1e3:.3f} ms"
    return f"{s * 1e6:.1f} us"


def case_examples(ids: list[str], n: int = 3) -> str:
    """The first ``n`` of ``ids`` joined with commas, and how many more (``"A, B, C and 5
    more"``)."""
    more = f" and {len(ids) - n} more" if len(ids) > n else ""
    return ", ".join(ids[:n]) + more
