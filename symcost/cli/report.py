"""Validation report: Markdown with a predicted-versus-measured scatter plot.

:func:`write_report` writes ``DIR/report.md`` and ``DIR/scatter.png``: the parameters used
(with their provenance), MAPE by source and metric, interval coverage, the worst rows with
their step-time breakdown (so a reader sees where the model is wrong and why), optional
leave-one-source-out results, what was assumed for cells the rows left blank, and every row
that was not predicted with its reason.

The plot uses matplotlib's object API with the Agg canvas (no pyplot, no global backend
change).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd

from ..training import BREAKDOWN
from .format import case_examples

# matplotlib is imported inside the functions only to keep it out of ``symcost --help``.

__all__ = ["scatter_plot", "write_report", "markdown_table"]

#: marker per metric in the scatter plot (others: ``o``).
_MARKERS = {"MFU": "o", "tokens_per_s_per_gpu": "s", "achieved_tflops_per_gpu": "^",
            "pct_of_peak": "v", "aggregate_pflops": "D", "iteration_time_s": "*",
            "train_step_time_s": "*", "HFU": "P", "model_tflops_per_gpu": "X",
            "tokens_per_s": "h", "samples_per_s": "p"}


def markdown_table(df: pd.DataFrame, floatfmt: str = ".4g") -> str:
    """A GitHub-flavoured Markdown table of ``df`` (floats formatted with ``floatfmt``)."""
    def cell(v):
        if isinstance(v, (float, np.floating)):
            return "" if not np.isfinite(v) else format(float(v), floatfmt)
        return str(v).replace("|", "\\|")

    head = "| " + " | ".join(str(c) for c in df.columns) + " |"
    sep = "| " + " | ".join("---" for _ in df.columns) + " |"
    body = ["| " + " | ".join(cell(v) for v in row) + " |"
            for row in df.itertuples(index=False)]
    return "\n".join([head, sep, *body])


def scatter_plot(rows: pd.DataFrame, path: str | os.PathLike, title: str = "") -> None:
    """Log-log scatter of predicted against measured values, one colour per source and one
    marker per metric, with the ``y = x`` line and a +-10% band.

    Args:
        rows: per-row predictions (``source``, ``metric``, ``measured``, ``predicted``).
        path: PNG file to write.
        title: figure title.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.5, 6.5), dpi=120)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    pred = pd.to_numeric(rows["predicted"], errors="coerce")
    ok = rows[np.isfinite(pred) & (pred > 0)]
    cmap = matplotlib.colormaps["tab10"]
    colors = {src: cmap(i % 10) for i, src in enumerate(sorted(ok["source"].unique()))}
    for (src, met), g in ok.groupby(["source", "metric"], sort=True):
        ax.scatter(g["measured"], g["predicted"], s=18, alpha=0.75, color=colors[src],
                   marker=_MARKERS.get(met, "o"), label=f"{src}: {met} ({len(g)})",
                   edgecolors="none")
    if len(ok):
        lo = float(min(ok["measured"].min(), ok["predicted"].min())) / 1.5
        hi = float(max(ok["measured"].max(), ok["predicted"].max())) * 1.5
        xs = np.geomspace(lo, hi, 50)
        ax.plot(xs, xs, color="black", lw=1, label="predicted = measured")
        ax.fill_between(xs, xs / 1.1, xs * 1.1, color="grey", alpha=0.2, label="+-10%")
        ax.set_xlim(lo, hi)
        ax.set_ylim(lo, hi)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.legend(fontsize=7, loc="upper left")
    else:
        ax.text(0.5, 0.5, "no predicted rows", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("measured (metric's unit)")
    ax.set_ylabel("predicted (same unit)")
    ax.set_title(title or "symcost: predicted vs measured")
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)


def _breakdown_table(worst: pd.DataFrame) -> pd.DataFrame:
    cols = {"case_id": worst["case_id"], "metric": worst["metric"],
            "measured": worst["measured"], "predicted": worst["predicted"],
            "error %": worst["error_pct"], "step s": worst["step_time"]}
    for k in BREAKDOWN:
        if k in worst:
            cols[k.removeprefix("time_") + " %"] = 100.0 * worst[k] / worst["step_time"]
    return pd.DataFrame(cols)


def write_report(report, directory: str | os.PathLike, cv: pd.DataFrame | None = None,
                 worst: int = 15) -> Path:
    """Write a Markdown validation report and its scatter plot.

    Args:
        report: :class:`symcost.validate.ValidationReport`.
        directory: output directory (created if needed).
        cv: optional cross-validation rows (:func:`symcost.calibrate.cross_validate`).
        worst: how many of the largest errors to show with their step-time breakdown.

    Returns:
        Path of ``report.md``.
    """
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    rows, summary = report.rows, report.summary
    scatter_plot(rows, out / "scatter.png", f"symcost validate: {Path(report.path).name}")
    prov = dict(report.params.provenance)
    lines = [f"# symcost validation report: `{report.path}`", ""]
    lines += ["## Parameters", "",
              f"- data: {prov.get('data', '?')}", f"- date: {prov.get('date', '?')}",
              f"- command: `{prov.get('command', '?')}`"]
    if prov.get("in_sample_mape_pct"):
        lines.append(f"- in-sample MAPE of that calibration: {prov['in_sample_mape_pct']}")
    lines += ["", "## Summary", "",
              f"- rows predicted: {summary['n_predicted']}, not predicted: "
              f"{summary['n_skipped']}"]
    if summary.get("mape_pct") is not None:
        lines.append(f"- MAPE over predicted train rows: {summary['mape_pct']:.2f}% "
                     f"(max |error| {summary['max_abs_error_pct']:.1f}%)")
    if summary.get("inference_mape_pct") is not None:
        lines.append(f"- MAPE over predicted serve/prefill rows (inference model): "
                     f"{summary['inference_mape_pct']:.2f}%")
    if summary.get("coverage"):
        c = summary["coverage"]
        lines.append(f"- measurements inside the prediction interval: "
                     f"{100 * c['fraction_inside']:.1f}% of {c['n']} rows (in-sample when the "
                     "parameters were calibrated on this file)")
    lines += ["", "![predicted vs measured](scatter.png)", "", "## Error by source", ""]
    if summary["by_source"]:
        lines.append(markdown_table(pd.DataFrame(summary["by_source"])))
    lines += ["", "## Error by source and metric", ""]
    if summary["by_source_metric"]:
        lines.append(markdown_table(pd.DataFrame(summary["by_source_metric"])))
    if len(rows):
        train = rows[rows["workload"] == "train"] if "workload" in rows else rows
        w = train.reindex(train["error_pct"].abs().sort_values(ascending=False).index)
        w = w.head(worst)
        lines += ["", f"## The {len(w)} largest errors of train rows, with the predicted "
                  "step-time breakdown",
                  "", "Breakdown columns are percentages of the predicted step time "
                  "(they sum to 100).", "", markdown_table(_breakdown_table(w), ".3g")]
    if cv is not None and len(cv):
        lines += ["", "## Leave-one-source-out", "",
                  "Each source predicted by parameters fitted on the other sources "
                  "(`transferred`: the generation had no data in the fold and took a "
                  "related generation's fitted values).", ""]
        recs = []
        for (src, tr), g in cv.groupby(["source", "transferred"], sort=True):
            inside = (g["measured"] >= g["pred_lo"]) & (g["measured"] <= g["pred_hi"])
            recs.append({"source": src, "transferred from": tr or "-", "n": len(g),
                         "MAPE %": float(g["error_pct"].abs().mean()),
                         "mean error %": float(g["error_pct"].mean()),
                         "interval coverage": float(inside.mean())})
        lines.append(markdown_table(pd.DataFrame(recs)))
    a = report.assumptions()
    lines += ["", "## Assumed", "",
              "Configuration cells the rows left blank, and stated layouts `validate` "
              "corrected, with the value used and why (per row: `symcost validate --json`, "
              "`assumed`).", ""]
    if len(a):
        lines.append(markdown_table(pd.DataFrame({
            "field": a["field"], "value used (why)": a["value"], "rows": a["n_rows"],
            "case_id": a["case_ids"].map(case_examples)})))
    else:
        lines.append("Nothing: every row stated every field.")
    lines += ["", "## Rows not predicted", ""]
    if report.skipped:
        sk = pd.DataFrame([{"reason": s.reason, "case_id": s.case_id} for s in report.skipped])
        grouped = sk.groupby("reason", sort=True)["case_id"].agg(list)
        for reason, ids in grouped.items():
            lines.append(f"- **{reason}** ({len(ids)}): {', '.join(ids)}")
    else:
        lines.append("None.")
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
