"""Charts written by the command line (PNG, matplotlib's object API on the Agg canvas).

The core returns data (DataFrames, result objects); this module draws them. No pyplot and no
global backend change, so a notebook that imports these functions keeps its backend.
matplotlib itself is imported inside each function: ``symcost --help`` never pays for it.
"""

from __future__ import annotations

import os

import numpy as np

from ..roofline import OPERATORS
from ..sensitivity import TORNADO_STEP, SensitivityError, SensitivityResult

# matplotlib is imported inside the functions only to keep it out of ``symcost --help``.

__all__ = ["module_breakdown_chart", "dse_heatmaps", "plot_pareto", "plot_roofline", "tornado_chart", "waterfall_chart"]


def _figure(width: float, height: float, dpi: int = 120):
    """A matplotlib Figure attached to an Agg canvas, and its single axes."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=dpi)
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def plot_roofline(table, path: str | os.PathLike, title: str | None = None) -> None:
    """Write a log-log roofline PNG: one roofline (``min(peak, I*bw)``) per GPU and compute
    dtype, every operator of ``table`` placed at (intensity, attainable FLOP/s); filled
    markers for prefill, open markers for decode.

    Args:
        table: a :func:`symcost.roofline.roofline_table` frame.
        path: output PNG path (its directory must exist).
        title: figure title.
    """
    import matplotlib

    fig, ax = _figure(10, 6.5)
    hws = list(dict.fromkeys(table["hardware"]))
    colors = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
    markers = dict(zip(OPERATORS, "osD^vP"))
    i_min = max(float(table["intensity"].min()) / 3, 0.1)
    i_max = float(table["intensity"].max()) * 3
    xs = np.geomspace(i_min, i_max, 400)
    for k, hw in enumerate(hws):
        sub = table[table["hardware"] == hw]
        color = colors[k % len(colors)]
        bw = float(sub["bandwidth"].iloc[0])
        for j, (dtype, peak) in enumerate(sorted(set(zip(sub["dtype"], sub["peak_flops"])),
                                                  key=lambda t: t[1])):
            ax.plot(xs, np.minimum(peak, xs * bw), color=color, lw=1.6,
                    ls="-" if j == len(set(sub["peak_flops"])) - 1 else "--",
                    label=f"{hw} ({dtype} peak {peak / 1e12:,.0f} TFLOP/s, "
                          f"{bw / 1e12:.2f} TB/s)")
        for _, r in sub.iterrows():
            filled = r["phase"] == "prefill"
            ax.scatter(r["intensity"], r["attainable_flops"], marker=markers[r["op"]], s=46,
                       facecolors=color if filled else "none", edgecolors=color, zorder=3)
    for op, mk in markers.items():
        ax.scatter([], [], marker=mk, facecolors="gray", edgecolors="gray", label=op)
    ax.scatter([], [], marker="o", facecolors="none", edgecolors="gray",
               label="open marker: decode; filled: prefill")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.grid(True, which="both", alpha=0.3)
    ax.set_title(title or "Roofline: one layer, prefill and decode")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path)


def tornado_chart(result: SensitivityResult, path: str | os.PathLike,
                  output: str = "step_time", top: int = 15) -> None:
    """Write the tornado chart (PNG) of ``output``: per parameter, the relative change of
    ``output`` at the low and high side (continuous: ``x*(1 -/+ 10%)``; discrete: the next
    valid values), largest first.

    Args:
        result: a :func:`symcost.sensitivity.sensitivity` result.
        path: PNG path (its directory must exist).
        output: the output charted; must be among ``result.outputs``.
        top: bars shown.

    Raises:
        SensitivityError: ``output`` was not analysed.
    """
    if output not in result.outputs:
        raise SensitivityError(f"--plot-output: {output!r} was not analysed "
                               f"(outputs: {', '.join(result.outputs)})")
    rows = []
    for p in result.parameters:
        lo, hi = p.tornado.get(output, (0.0, 0.0))
        if p.method == "autodiff":
            if p.status.get(output) == "not in formula":
                continue
            label = f"{p.name} (-/+{TORNADO_STEP:.0%})"
        else:
            d = f"{p.down['value']:g}" if p.down else "-"
            u = f"{p.up['value']:g}" if p.up else "-"
            label = f"{p.name} ({d} / {u}; now {p.value:g})"
        rows.append((max(abs(lo), abs(hi)), label, lo, hi))
    rows.sort(key=lambda r: r[0], reverse=True)
    rows = rows[:top][::-1]
    fig, ax = _figure(8, 0.4 * len(rows) + 1.5, dpi=100)
    ys = np.arange(len(rows))
    ax.barh(ys, [100 * r[2] for r in rows], color="tab:blue", label="low side")
    ax.barh(ys, [100 * r[3] for r in rows], color="tab:orange", label="high side")
    ax.set_yticks(ys, [r[1] for r in rows], fontsize=8)
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set_xlabel(f"change of {output} (%)")
    ax.set_title(f"{output} = {result.outputs[output]:.4g}: {result.model.name} on "
                 f"{result.config.num_gpus} x {result.hardware.name}", fontsize=9)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def plot_pareto(df, path: str | os.PathLike) -> None:
    """Write a PNG of step time against cost per GPU of a
    :func:`optimizers.codesign.codesign` frame, the Pareto front joined.

    Args:
        df: the co-design frame (``status``, ``pareto``, ``design``, ``cost_usd_per_gpu``,
            ``step_time``).
        path: PNG path (its directory must exist).
    """
    ok = df[df["status"] == "ok"]
    fig, ax = _figure(6.4, 4.2)
    front = ok[ok["pareto"]].sort_values("cost_usd_per_gpu")
    ax.plot(front["cost_usd_per_gpu"], front["step_time"], "-o", label="Pareto front")
    other = ok[~ok["pareto"]]
    ax.plot(other["cost_usd_per_gpu"], other["step_time"], "x", color="gray",
            label="dominated")
    ref = ok[ok["design"] == "reference"]
    ax.plot(ref["cost_usd_per_gpu"], ref["step_time"], "*", ms=14, color="C3",
            label=f"reference ({df.attrs.get('reference', '')})")
    ax.set_xlabel("cost per GPU (USD, illustrative build cost)")
    ax.set_ylabel("step time (s)")
    ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def waterfall_chart(result, path: str | os.PathLike, title: str = "") -> None:
    """Write a waterfall PNG of a :class:`optimizers.dissect.DissectResult`: from 1x, each
    factor's Shapley speed-up multiplies the running total (log scale), ending at the
    system speed-up; the integrated-gradient factors are drawn beside as markers."""
    fig, ax = _figure(9, 5)
    names = list(result.factors)
    shap = result.factor_speedups("shapley")
    ig = result.factor_speedups("integrated_gradients")
    level = 1.0
    for i, f in enumerate(names):
        new = level * shap[f]
        ax.bar(i, new - level, bottom=level, color="tab:green" if new >= level else "tab:red",
               width=0.6)
        ax.plot([i], [level * ig[f]], marker="D", color="black", ms=5,
                label="integrated gradients" if i == 0 else None)
        level = new
    ax.bar(len(names), result.speedup - 1.0, bottom=1.0, color="tab:blue", width=0.6)
    ax.set_xticks(range(len(names) + 1), names + ["total"], rotation=20, fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("speed-up (x, cumulative)")
    ax.set_title(title or f"speed-up {result.speedup:.2f}x", fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(os.fspath(path))


def dse_heatmaps(df, path: str | os.PathLike, title: str = "") -> None:
    """Write heat maps of an :mod:`optimizers.dse` table (PNG): for each network, speed-up
    (colour, log scale, value written in the cell) over process node x memory generation,
    with the dominant bound's initial (C compute, M memory, N communication) in the cell."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.colors import LogNorm
    from matplotlib.figure import Figure

    nets = list(dict.fromkeys(df["network"]))
    nodes = list(dict.fromkeys(df["node"]))
    mems = list(dict.fromkeys(df["memory"]))
    fig = Figure(figsize=(4.2 * len(nets) + 1, 0.45 * len(nodes) + 2.2), dpi=110)
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(nets), squeeze=False)[0]
    lo, hi = float(df["speedup"].min()), float(df["speedup"].max())
    letter = {"compute": "C", "memory": "M", "communication": "N"}
    im = None
    for ax, net in zip(axes, nets):
        sub = df[df["network"] == net].set_index(["node", "memory"])
        grid = np.array([[float(sub.loc[(n, m), "speedup"]) for m in mems] for n in nodes])
        im = ax.imshow(grid, cmap="viridis", norm=LogNorm(vmin=lo, vmax=max(hi, lo * 1.01)),
                       aspect="auto")
        for i, n in enumerate(nodes):
            for j, m in enumerate(mems):
                ax.text(j, i, f"{grid[i, j]:.2g}x {letter[sub.loc[(n, m), 'bound']]}",
                        ha="center", va="center", fontsize=7, color="white")
        ax.set_xticks(range(len(mems)), mems, fontsize=8)
        ax.set_yticks(range(len(nodes)), [f"{n} nm" for n in nodes], fontsize=8)
        ax.set_title(net, fontsize=9)
    if im is not None:
        fig.colorbar(im, ax=list(axes), label="speed-up (C/M/N: dominant bound)")
    fig.suptitle(title, fontsize=9)
    fig.savefig(os.fspath(path))


def module_breakdown_chart(data, path: str | os.PathLike, title: str = "") -> None:
    """Write a stacked bar PNG of a module breakdown (:mod:`symcost.breakdown`): one bar per
    phase (forward/backward/optimizer or prefill/decode), stacked by module, in seconds."""
    fig, ax = _figure(8, 5)
    phases = list(data)
    modules: list[str] = []
    for ph in phases:
        modules += [m for m in data[ph] if m not in modules]
    bottom = np.zeros(len(phases))
    cmap = [f"C{i}" for i in range(10)]
    for i, mod in enumerate(modules):
        vals = np.array([data[ph].get(mod, 0.0) for ph in phases])
        ax.bar(phases, vals, bottom=bottom, label=mod, color=cmap[i % len(cmap)], width=0.6)
        bottom += vals
    ax.set_ylabel("time (s)")
    ax.set_title(title or "module breakdown", fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    fig.savefig(os.fspath(path))
