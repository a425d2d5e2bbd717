"""Rich tables of core results that more than one caller prints (the core returns data only).

``rich`` is imported at module level: this module is imported by the command functions, never
at ``symcost --help`` time.
"""

from __future__ import annotations

import math

from rich.console import JustifyMethod
from rich.table import Table

from ..bottleneck import DESCRIPTIONS, Bottleneck
from ..sensitivity import ParameterSensitivity, SensitivityResult
from .format import fmt_time

__all__ = ["bottleneck_table", "sensitivity_table"]


def _elasticity_cell(p: ParameterSensitivity, output: str) -> str:
    """The table cell of one parameter and output: the elasticity with its status
    (autodiff), or the arc elasticities to the valid neighbours (discrete)."""
    if p.method == "autodiff":
        st = p.status.get(output, "")
        e = (p.elasticity or {}).get(output)
        if st == "not in formula":
            return "-"
        if st == "not limiting":
            return "0 (not limiting)"
        txt = f"{e:+.4f}" if e is not None else "?"
        return txt + (" (kink)" if st == "kink" else "")
    parts = []
    for side, arrow in ((p.down, "v"), (p.up, "^")):
        if side is None:
            continue
        e = side["elasticity"].get(output)
        parts.append(f"{arrow}{side['value']:g}: {e:+.3f}" if e is not None and
                     math.isfinite(e) else f"{arrow}{side['value']:g}: -")
    return ", ".join(parts) or "no valid neighbour"


def sensitivity_table(result: SensitivityResult, output: str | None = None) -> Table:
    """The elasticities of ``result`` as a rich Table: one row per parameter, one column per
    output (only ``output`` when given), statuses inline."""
    outs = [output] if output else list(result.outputs)
    t = Table(title=f"Elasticities d ln y / d ln x: {result.model.name} on "
                    f"{result.config.num_gpus} x {result.hardware.name}", title_justify="left")
    t.add_column("parameter")
    t.add_column("kind")
    t.add_column("value", justify="right")
    t.add_column("method")
    for o in outs:
        t.add_column(o, justify="right")
    for p in result.parameters:
        t.add_row(p.name, p.kind, f"{p.value:.4g}", p.method,
                  *(_elasticity_cell(p, o) for o in outs))
    return t


def bottleneck_table(result: Bottleneck) -> Table:
    """The operators of a bottleneck attribution as a rich Table (time, share, bound, the
    compute / memory / communication split), with the one-line summary as caption."""
    what = (f"{result.model.name} on {result.config.num_gpus} x {result.hardware.name}, "
            if result.model and result.config and result.hardware else "")
    t = Table(title=f"What limits it: {what}step {fmt_time(result.step_time)}",
              title_justify="left", caption=result.summary(), caption_justify="left")
    cols: tuple[tuple[str, JustifyMethod], ...] = (
        ("operator", "left"), ("time", "right"), ("share", "right"), ("bound", "left"),
        ("compute / memory / comm", "right"), ("what", "left"))
    for c, j in cols:
        t.add_column(c, justify=j)
    for r in result.operators:
        p = r.parts
        t.add_row(r.name, fmt_time(r.time), f"{100 * r.share:.1f} %", r.bound,
                  f"{p.get('compute', 0) / r.time:.0%} / {p.get('memory', 0) / r.time:.0%}"
                  f" / {p.get('communication', 0) / r.time:.0%}" if r.time else "-",
                  DESCRIPTIONS.get(r.name, ""))
    return t
