"""``symcost validate`` and ``symcost calibrate``: the model against measurements.

Examples::

    symcost validate ../shared/validation/published_measurements.csv
    symcost validate measurements.csv --params params.yaml --json
    symcost validate measurements.csv --report out/
    symcost calibrate ../shared/validation/published_measurements.csv -o params.yaml
    symcost calibrate measurements.csv -o params.yaml --params start.yaml --cross-validate

``validate`` prints one line per predicted row (measured, predicted, signed error and, with a
calibrated parameter file, the prediction interval), MAPE per source and metric, what it
assumed (each blank cell's value, and each stated layout it corrected, grouped by field and
value: :meth:`symcost.validate.ValidationReport.assumptions`), and every row it did not
predict with the reason; ``--json`` prints one object
``{"rows": [...], "summary": {...}, "skipped": [...]}``, each row with ``assumed``: the
configuration fields the row did not state (or whose stated layout ``validate`` corrected)
and the value used (:meth:`symcost.validate.ValidationReport.to_dict`). ``calibrate`` fits
the efficiency parameters per GPU generation (see :mod:`symcost.calibrate`), prints each with
its standard error, and writes the parameter file only when the fit succeeded (the previous
file is left untouched otherwise).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from ..params import PARAM_NAMES
from .common import (ProgressBar, check_output_path, console, emit_json, load_params_option,
                     warn)
from .format import case_examples

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

__all__ = ["register"]


def _measurements(path: Path | None):
    """The measurement rows of ``path``, or of the measurements shipped with symcost when
    None (:func:`symcost.validate.load_measurements`; a header-only file is an error
    there)."""
    from ..validate import load_measurements

    return load_measurements(path)


def _source(path: Path | None) -> str:
    """The measurements file a command reads, for messages and provenance."""
    from ..validate import builtin_measurements

    return str(path if path is not None else builtin_measurements())


def _fmt(v: float) -> str:
    if v is None or v != v:
        return "-"
    a = abs(v)
    if a >= 1e4:
        return f"{v:,.0f}"
    if a >= 100:
        return f"{v:.1f}"
    return f"{v:.3g}" if a < 1 else f"{v:.2f}"


def validate_tables(report, show_rows: bool = True) -> list:
    """Rich renderables of a :class:`~symcost.validate.ValidationReport`: per-row table,
    MAPE per source and metric, what was assumed (:meth:`~symcost.validate.ValidationReport.
    assumptions`), rows not predicted."""
    from rich.table import Table

    out: list[Any] = []
    rows = report.rows
    has_iv = bool(len(rows)) and rows["pred_lo"].notna().any()
    if show_rows and len(rows):
        t = Table(title=f"Predicted rows ({len(rows)})", title_justify="left")
        for c in ("case_id", "metric", "measured", "predicted", "error %"):
            t.add_column(c, justify="left" if c in ("case_id", "metric") else "right")
        if has_iv:
            t.add_column("90% interval", justify="right")
        for r in rows.itertuples(index=False):
            cells = [r.case_id, r.metric, _fmt(r.measured), _fmt(r.predicted),
                     f"{r.error_pct:+.1f}"]
            if has_iv:  # NaN: no interval for this row (e.g. serve/prefill rows)
                cells.append("-" if r.pred_lo != r.pred_lo
                             else f"{_fmt(r.pred_lo)} - {_fmt(r.pred_hi)}")
            t.add_row(*cells)
        out.append(t)
    s = report.summary
    m = Table(title="MAPE by source and metric", title_justify="left")
    for c in ("source", "metric", "workload", "n", "MAPE %", "mean error %", "max |error| %"):
        m.add_column(c, justify="left" if c in ("source", "metric", "workload") else "right")
    for x in s["by_source_metric"]:
        m.add_row(x["source"], x["metric"], x["workload"], str(x["n"]), f"{x['mape_pct']:.2f}",
                  f"{x['mean_error_pct']:+.2f}", f"{x['max_abs_error_pct']:.1f}")
    for x in s["by_source"]:
        m.add_row(x["source"], "(all)", x["workload"], str(x["n"]), f"{x['mape_pct']:.2f}",
                  f"{x['mean_error_pct']:+.2f}", "", style="bold")
    if s.get("mape_pct") is not None:
        n_train = sum(x["n"] for x in s["by_source"] if x["workload"] == "train")
        m.add_row("(all)", "(all)", "train", str(n_train), f"{s['mape_pct']:.2f}", "",
                  f"{s['max_abs_error_pct']:.1f}", style="bold")
    if s.get("inference_mape_pct") is not None:
        n_inf = sum(x["n"] for x in s["by_source"] if x["workload"] != "train")
        m.add_row("(all)", "(all)", "serve/prefill", str(n_inf),
                  f"{s['inference_mape_pct']:.2f}", "", "", style="bold")
    out.append(m)
    if s.get("coverage"):
        c = s["coverage"]
        out.append(f"Prediction intervals contain {100 * c['fraction_inside']:.1f}% of "
                   f"{c['n']} measurements.")
    a = report.assumptions()
    if len(a):
        t = Table(title="Assumed (cells the rows left blank, layouts validate corrected)",
                  title_justify="left")
        for c in ("field", "value used (why)", "rows", "case_id"):
            t.add_column(c, justify="right" if c == "rows" else "left")
        for r in a.itertuples(index=False):
            t.add_row(r.field, r.value, str(r.n_rows), case_examples(r.case_ids))
        out.append(t)
    if report.skipped:
        k = Table(title=f"Rows not predicted ({len(report.skipped)})", title_justify="left")
        k.add_column("reason")
        k.add_column("n", justify="right")
        k.add_column("case_id")
        groups: dict[str, list[str]] = {}
        for sk in report.skipped:
            groups.setdefault(sk.reason, []).append(sk.case_id)
        for reason, ids in groups.items():
            k.add_row(reason, str(len(ids)), ", ".join(ids))
        out.append(k)
    return out


def calibration_tables(result) -> list:
    """Rich renderables of a :class:`~symcost.calibrate.CalibrationResult`."""
    from rich.table import Table

    out: list[Any] = []
    fit_names = list(result.params.provenance.get("fitted_parameters") or ())
    for gen, f in result.fits.items():
        t = Table(title=f"{gen}: {f.n_runs} runs ({f.n_rows} rows), residual sd of log error "
                        f"{f.sigma:.3f} (~{100 * f.sigma:.1f}%), {f.nfev} evaluations",
                  title_justify="left")
        for c in ("parameter", "start", "fitted", "std. error", "note"):
            t.add_column(c, justify="left" if c in ("parameter", "note") else "right")
        start = result.start.for_generation(gen) if result.start else {}
        for p in PARAM_NAMES:
            if p not in fit_names:
                continue
            se = f.stderr.get(p)
            note = ("on a bound" if p in f.at_bound else "not identifiable from these rows"
                    if p in f.not_identifiable else "")
            t.add_row(p, f"{start.get(p, float('nan')):.4g}", f"{f.values[p]:.4g}",
                      f"{se:.2g}" if se is not None else "-", note)
        out.append(t)
    fixed = [p for p in PARAM_NAMES if p not in fit_names]
    out.append(f"Fixed (starting values kept): {', '.join(fixed)}")
    for g, why in result.not_fitted.items():
        out.append(f"[yellow]not fitted[/yellow] {g}: {why}")
    mp = result.params.provenance.get("in_sample_mape_pct") or {}
    if mp:
        t = Table(title="In-sample MAPE %", title_justify="left")
        t.add_column("source")
        t.add_column("before", justify="right")
        t.add_column("after", justify="right")
        for k in mp.get("after", {}):
            t.add_row(k, f"{mp['before'].get(k, float('nan')):.2f}", f"{mp['after'][k]:.2f}")
        out.append(t)
    for g, note in (result.params.provenance.get("transferred") or {}).items():
        out.append(f"{g}: {note}")
    return out


def cv_table(cv):
    """Rich table of leave-one-source-out results (MAPE and interval coverage per source)."""
    from rich.table import Table

    t = Table(title="Leave-one-source-out", title_justify="left")
    for c in ("source", "generation", "transferred from", "n", "MAPE %", "mean error %",
              "90% coverage"):
        t.add_column(c, justify="left" if c in ("source", "generation", "transferred from")
                     else "right")
    for (src, gen, tr), g in cv.groupby(["source", "generation", "transferred"], sort=True):
        inside = (g["measured"] >= g["pred_lo"]) & (g["measured"] <= g["pred_hi"])
        t.add_row(src, gen, tr or "-", str(len(g)), f"{g['error_pct'].abs().mean():.2f}",
                  f"{g['error_pct'].mean():+.2f}", f"{100 * inside.mean():.0f}%")
    inside = (cv["measured"] >= cv["pred_lo"]) & (cv["measured"] <= cv["pred_hi"])
    t.add_row("(all)", "", "", str(len(cv)), f"{cv['error_pct'].abs().mean():.2f}",
              f"{cv['error_pct'].mean():+.2f}", f"{100 * inside.mean():.0f}%", style="bold")
    return t


def register(app: typer.Typer) -> None:
    """Add the ``validate`` and ``calibrate`` commands to ``app``."""

    @app.command("validate")
    def validate_cmd(
        path: Annotated[Path | None, typer.Argument(
            help="Measurements CSV (format of shared/validation/published_measurements.csv; "
                 "default: the published measurements shipped with symcost).")] = None,
        params: Annotated[Path | None, typer.Option(
            "--params", help="Efficiency-parameter YAML (default: the shipped calibration).")
        ] = None,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
        report: Annotated[Path | None, typer.Option(
            "--report", help="Write DIR/report.md and DIR/scatter.png.")] = None,
        level: Annotated[float, typer.Option(
            "--level", help="Prediction-interval probability.", min=0.01, max=0.999)] = 0.9,
        no_rows: Annotated[bool, typer.Option(
            "--summary-only", help="Omit the per-row table (table output).")] = False,
        train_only: Annotated[bool, typer.Option(
            "--train-only", help="Do not predict serve/prefill rows with the inference "
                                 "model (list them as skipped).")] = False,
    ) -> None:
        """Predict every row of a measurements file and print errors and MAPE."""
        from ..validate import validate_frame

        check_output_path(report, "--report", directory=True)
        p = load_params_option(params)
        with ProgressBar("validate", not as_json) as bar:
            rep = validate_frame(_measurements(path), p, _source(path), intervals=True,
                                 level=level, inference=not train_only, progress=bar)
        if report is not None:
            from .report import write_report

            md = write_report(rep, report)
            if not as_json:
                typer.echo(f"report written: {md}")
        if as_json:
            emit_json(rep.to_dict())
            return
        con = console(200)
        for r in validate_tables(rep, show_rows=not no_rows):
            con.print(r)

    @app.command("calibrate")
    def calibrate_cmd(
        output: Annotated[Path, typer.Option("-o", "--output",
                                             help="Parameter YAML to write.")],
        path: Annotated[Path | None, typer.Argument(
            help="Measurements CSV to fit (default: the published measurements shipped with "
                 "symcost).")] = None,
        params: Annotated[Path | None, typer.Option(
            "--params", help="Starting (and fixed) parameters (default: shipped).")] = None,
        fit: Annotated[str | None, typer.Option(
            "--fit", help="Comma-separated parameters to fit per generation (default: the "
                          "set the shipped calibration fits, symcost.calibrate.DEFAULT_FIT)."
        )] = None,
        transfer: Annotated[str, typer.Option(
            "--transfer", help="Comma-separated generations without data that take a related "
                               "generation's fitted values (e.g. blackwell,cdna3).")] = "",
        cross_validate: Annotated[bool, typer.Option(
            "--cross-validate", help="Also print leave-one-source-out MAPE and coverage.")
        ] = False,
        as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    ) -> None:
        """Fit efficiency parameters per GPU generation (least squares on log error)."""
        from ..calibrate import DEFAULT_FIT, bound_warnings, calibrate, write_params

        check_output_path(output, "-o/--output", (".yaml", ".yml"))
        _measurements(path)
        start = load_params_option(params)
        names = tuple(x.strip() for x in fit.split(",") if x.strip()) if fit else DEFAULT_FIT
        moved = tuple(x.strip() for x in transfer.split(",") if x.strip())
        cmd = " ".join(["symcost calibrate"] + ([str(path)] if path is not None else [])
                       + ["-o", str(output)]
                       + (["--params", str(params)] if params else [])
                       + (["--fit", ",".join(names)] if fit else [])
                       + (["--transfer", ",".join(moved)] if moved else []))
        with ProgressBar("calibrate", not as_json) as bar:
            result = calibrate(path, start, names, command=cmd, transfer_to=moved,
                               progress=bar)
        write_params(result.params, output)
        for line in bound_warnings(result):
            warn(line.removeprefix("warning: "))
        cv = None
        if cross_validate:
            from ..calibrate import cross_validate as run_cv, start_params
            from ..validate import prepare_rows, split_by_params

            prepared, _ = prepare_rows(_measurements(path))
            prepared, _ = split_by_params(prepared, start)
            with ProgressBar("cross-validate", not as_json) as bar:
                cv = run_cv(prepared, start_params(start), names, progress=bar)
        if as_json:
            out = {"output": str(output),
                   "generations": {g: {"values": {p: f.values[p] for p in names},
                                       "stderr": f.stderr, "at_bound": list(f.at_bound),
                                       "not_identifiable": list(f.not_identifiable),
                                       "runs": f.n_runs, "rows": f.n_rows,
                                       "residual_sd_log": f.sigma}
                                   for g, f in result.fits.items()},
                   "not_fitted": result.not_fitted,
                   "in_sample_mape_pct": result.params.provenance.get("in_sample_mape_pct")}
            if cv is not None:
                out["leave_one_source_out"] = _cv_summary(cv)
            emit_json(out)
            return
        con = console(200)
        for r in calibration_tables(result):
            con.print(r)
        if cv is not None:
            con.print(cv_table(cv))
        con.print(f"parameters written: {output}")


def _cv_summary(cv) -> dict:
    out = {}
    for src, g in cv.groupby("source", sort=True):
        inside = (g["measured"] >= g["pred_lo"]) & (g["measured"] <= g["pred_hi"])
        out[src] = {"n": int(len(g)), "mape_pct": float(g["error_pct"].abs().mean()),
                    "coverage": float(inside.mean())}
    return out
