"""``symcost sweep``, ``symcost sensitivity``, ``symcost bottleneck`` and ``symcost explain``.

All four take the base configuration with the same flags as ``symcost train`` (``--model``,
``--hardware``, ``--num-gpus``, ``--tp``, ... ``--params``). Examples::

    symcost sweep --model gpt3-175b --hardware a100-sxm4-80gb --num-gpus 1024 --tp 8 --pp 16 \\
        --global-batch 1536 --recompute full \\
        --vary tp=1,2,4,8 --vary pp=1:32 --vary hbm_bw=1e12:4e12:log --samples 1000000 \\
        --out sweep.parquet
    symcost sensitivity --model gpt3-175b --hardware a100-sxm4-80gb --num-gpus 1024 --tp 8 \\
        --pp 16 --global-batch 1536 --recompute full --plot tornado.png
    symcost bottleneck  --model llama2-70b --hardware h100-sxm5-80gb --num-gpus 64 --tp 8 \\
        --global-batch 512 --zero 3
    symcost explain step_time --keep tp,hidden --model gpt3-175b --hardware a100-sxm4-80gb \\
        --num-gpus 1024 --tp 8 --pp 16 --global-batch 1536 [--latex]
    symcost explain --list

``--vary`` grammar (see :func:`symcost.sweep.parse_vary`): ``name=v1,v2,...``,
``name=lo:hi`` (every integer for integer variables in a grid; uniform in a random sweep),
``name=lo:hi:num`` (grid points), optional ``:log``. Without ``--samples`` the sweep is the
full grid; with it, that many random rows.

Bottleneck attribution is its own command (``symcost bottleneck``) rather than a flag of
``sensitivity``: it needs no derivatives and answers without a compile.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from ..config import TrainingConfig
from ..fields import TRAINING_FIELDS, decode
from ..schema import OUTPUT_KEYS, rename_keys
from .common import (AsJson, CliInputError, Hardware, Model, ParamsFile, ProgressBar,
                     check_output_path, console, dask_client, emit_json, load_inputs,
                     memory_warning, split_list, training_fit, training_options)
from .format import fmt_time, format_bytes

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

#: outputs shown in the sweep's table of best rows (all go to --out and --json).
_MAX_TABLE_OUTPUTS = 6


def _named(column: str, value):
    """A swept enum field's code (``recompute``, ``cp_comm_type``, ...) as its name, by the
    field table; any other value unchanged."""
    f = TRAINING_FIELDS.get(column)
    return decode(f, value) if f is not None and f.kind == "enum" else value


def _base(model, hardware, params, config: TrainingConfig):
    m, hw, p = load_inputs(model, hardware, params)
    return m, hw, p, config


def _warn_fit(m, hw, cfg, p) -> bool:
    """Warn when the base configuration does not fit in memory; returns ``fits``."""
    fit = training_fit(m, hw, cfg, p)
    memory_warning(fit["needed"], fit["usable"], fit["host"], fit["host_usable"])
    return fit["fits"]


def _cell(column: str, value) -> str:
    """A sweep-table cell: enum fields by name, memory in GiB, times with their unit."""
    if column in TRAINING_FIELDS and TRAINING_FIELDS[column].kind == "enum":
        return str(_named(column, value))
    if isinstance(value, float):
        if column.startswith("mem_"):
            return format_bytes(value, 2)
        if column.startswith("time_") or column == "step_time":
            return fmt_time(value)
        if column in ("mfu", "hfu"):
            return f"{100 * value:.1f} %"
        if column == "tokens_per_s":
            return f"{value:,.0f}"
        return f"{value:.5g}"
    return str(value)


# ----------------------------------------------------------------------------- sweep
@training_options
def sweep_cmd(
    model: Model, hardware: Hardware,
    vary: Annotated[list[str], typer.Option(
        "--vary", "-V", help="name=v1,v2 | name=lo:hi[:num][:log]; repeat for more variables.",
        show_default=False)],
    samples: Annotated[int | None, typer.Option(
        help="Random rows (default: the full grid).", show_default=False)] = None,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 0,
    outputs: Annotated[str, typer.Option(
        help="Comma-separated outputs, or 'all'.")] = ",".join(
        ("step_time", "tokens_per_s", "mfu", "mem_total", "mem_headroom")),
    precision: Annotated[Literal["mixed", "float32", "float64"], typer.Option(
        help="mixed: float32 rows, float64 re-check of the top rows and the memory "
             "boundary.")] = "mixed",
    out: Annotated[Path | None, typer.Option(
        help="Write every row to .csv or .parquet.", show_default=False)] = None,
    top: Annotated[int, typer.Option(help="Best valid rows to print.")] = 10,
    sort: Annotated[str, typer.Option(help="Output that ranks rows.")] = "step_time",
    chunk_size: Annotated[int | None, typer.Option(
        help="Rows per compiled call (default: 4096 when the sweep fits, else 65536).",
        show_default=False)] = None,
    workers: Annotated[int | None, typer.Option(
        help="Evaluate on a local Dask cluster of this many worker processes.",
        show_default=False, min=1)] = None,
    scheduler: Annotated[str | None, typer.Option(
        help="Evaluate on an existing Dask cluster (e.g. tcp://host:8786).",
        show_default=False)] = None,
    *, config: TrainingConfig,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """Evaluate a grid or random sample of configurations; invalid rows are masked."""
    from ..sweep import LARGER_IS_BETTER, SweepError, parse_vary, sweep, write_table

    check_output_path(out, "--out", (".csv", ".parquet"))
    m, hw, p, cfg = _base(model, hardware, params, config)
    specs = dict(parse_vary(v) for v in vary)
    if len(specs) != len(vary):
        raise SweepError("--vary: a variable is given twice")
    outs = split_list(outputs)
    if outs != ["all"] and sort not in outs:
        raise SweepError(f"--sort: {sort!r} is not among --outputs ({', '.join(outs)})")
    if workers is not None and scheduler is not None:
        raise CliInputError("--workers: give --workers or --scheduler, not both")
    with dask_client(workers, scheduler) as client, ProgressBar("sweep", not as_json) as bar:
        df = sweep(m, hw, cfg, p, vary=specs, samples=samples, outputs=outs or ["step_time"],
                   precision=precision, rank_by=sort, seed=seed, chunk_size=chunk_size,
                   progress=bar, client=client)
    keys = rename_keys(df.columns)
    if out is not None:
        write_table(df.rename(columns=keys), out)
    best = df[df["valid"]].sort_values(sort, ascending=sort not in LARGER_IS_BETTER).head(top)
    a = df.attrs
    if as_json:
        top_rows = best.drop(columns=["reason"]).rename(columns=keys)
        for col in top_rows.columns:
            if col in TRAINING_FIELDS and TRAINING_FIELDS[col].kind == "enum":
                top_rows[col] = [_named(col, v) for v in top_rows[col]]
        emit_json({
            "rows": a["rows"], "valid_rows": a["valid_rows"],
            "invalid_counts": a["invalid_counts"], "seconds": a["seconds"],
            "configs_per_s": a["configs_per_s"], "precision": a["precision"],
            "out": str(out) if out else None, "sort": keys.get(sort, sort),
            "top": top_rows.to_dict(orient="records"),
        })
        return
    from rich.table import Table

    con = console(200)
    con.print(f"{a['rows']:,} configurations in {a['seconds']:.2f} s "
              f"({a['configs_per_s']:,.0f} /s including any compile, {a['precision']}); "
              f"valid: {a['valid_rows']:,}" + (f"; written to {out}" if out else ""))
    if a["invalid_counts"]:
        t = Table(title="Masked rows", title_justify="left")
        t.add_column("reason")
        t.add_column("rows", justify="right")
        for r, c in sorted(a["invalid_counts"].items(), key=lambda kv: -kv[1]):
            t.add_row(r, f"{c:,}")
        con.print(t)
    if len(best):
        t = Table(title=f"Best {len(best)} valid rows by {sort}", title_justify="left",
                  caption=None if len(a["outputs"]) <= _MAX_TABLE_OUTPUTS else
                  f"(first {_MAX_TABLE_OUTPUTS} outputs and {sort}; all in --out / --json)",
                  caption_justify="left")
        shown = a["outputs"][:_MAX_TABLE_OUTPUTS]
        cols = [c for c in best.columns if c not in ("valid", "reason")
                and (c in a["varied"] or c not in a["outputs"] or c in shown or c == sort)]
        for c in cols:
            t.add_column(c, justify="right")
        for _, row in best.iterrows():
            t.add_row(*(_cell(c, row[c]) for c in cols))
        con.print(t)
    else:
        con.print("no valid configuration", style="bold red")


# ----------------------------------------------------------------------------- sensitivity
@training_options
def sensitivity_cmd(
    model: Model, hardware: Hardware,
    outputs: Annotated[str, typer.Option(help="Comma-separated outputs.")] =
        "step_time,mfu,mem_total",
    discrete: Annotated[str, typer.Option(
        help="Discrete parameters for neighbour differences (tp, pp, dp, micro_batch, vpp, "
             "global_batch, layers, heads, kv_heads).")] = "tp,pp,dp,micro_batch,vpp",
    plot: Annotated[Path | None, typer.Option(
        help="Write a tornado chart (PNG).", show_default=False)] = None,
    plot_output: Annotated[str, typer.Option(help="Output the tornado chart shows.")] =
        "step_time",
    *, config: TrainingConfig,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """Elasticities d ln y / d ln x of step time, MFU and memory at one configuration."""
    from ..sensitivity import SensitivityError, sensitivity

    from .plots import tornado_chart
    from .render import sensitivity_table

    check_output_path(plot, "--plot", (".png",))

    m, hw, p, cfg = _base(model, hardware, params, config)
    outs = split_list(outputs)
    if plot is not None and plot_output not in outs:
        raise SensitivityError(f"--plot-output: {plot_output!r} is not among --outputs "
                               f"({', '.join(outs)})")
    res = sensitivity(m, hw, cfg, p, outputs=outs, discrete=split_list(discrete))
    if plot is not None:
        tornado_chart(res, plot, plot_output)
    fits = _warn_fit(m, hw, res.config, p)
    if as_json:
        emit_json({**res.to_dict(), "fits": fits})
        return
    con = console(200)
    con.print(sensitivity_table(res))
    con.print("autodiff rows: elasticity, checked against central finite differences "
              "(float64); '0 (not limiting)': the symbol's branch is inactive; '-': not in the "
              "formula; neighbour rows: arc elasticity to the next valid value below (v) and "
              "above (^).")
    if plot is not None:
        con.print(f"tornado chart written to {plot}")


# ----------------------------------------------------------------------------- bottleneck
@training_options
def bottleneck_cmd(
    model: Model, hardware: Hardware,
    *, config: TrainingConfig,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """What limits a step: each operator compute-, memory- or communication-bound, with its
    share of the step time."""
    from ..bottleneck import bottleneck

    from .render import bottleneck_table

    m, hw, p, cfg = _base(model, hardware, params, config)
    res = bottleneck(m, hw, cfg, p)
    fits = _warn_fit(m, hw, res.config, p)
    if as_json:
        emit_json({**res.to_dict(), "fits": fits})
        return
    console(200).print(bottleneck_table(res))


# ----------------------------------------------------------------------------- explain
def _list_formulas(value: bool) -> None:
    if value:
        from ..bottleneck import DESCRIPTIONS
        from ..explain import formula_names

        names = formula_names()
        typer.echo("outputs:")
        for n in names["outputs"]:
            typer.echo(f"  {n}")
        typer.echo("operators:")
        for n in names["operators"]:
            typer.echo(f"  {n:18s} {DESCRIPTIONS.get(n, '')}")
        raise typer.Exit()


@training_options
def explain_cmd(
    name: Annotated[str, typer.Argument(
        help="Output (step_time, mfu, mem_total, ...) or operator (qkv_proj, tp_comm, ...); "
             "see --list.", show_default=False)],
    model: Model, hardware: Hardware,
    keep: Annotated[str, typer.Option(
        help="Comma-separated fields or symbols left free (e.g. tp,layers,zero or n_layers);"
             " the rest are substituted.")
    ] = "",
    latex: Annotated[bool, typer.Option("--latex", help="Print LaTeX.")] = False,
    list_: Annotated[bool, typer.Option(
        "--list", callback=_list_formulas, is_eager=True, expose_value=False,
        help="List outputs and operators and exit.")] = False,
    *, config: TrainingConfig,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """Print the formula of an output or operator with only --keep symbols left free."""
    from ..explain import explain

    m, hw, p, cfg = _base(model, hardware, params, config)
    f = explain(name, m, hw, cfg, p, keep=split_list(keep))
    fits = _warn_fit(m, hw, cfg, p)
    if as_json:
        d = f.to_dict()
        if name in OUTPUT_KEYS and f.value is not None:
            d[OUTPUT_KEYS[name]] = f.value
        emit_json({**d, "fits": fits})
    elif latex:
        typer.echo(f.latex())
    else:
        typer.echo(f.text())
        if f.value is not None and f.keep:
            typer.echo(f"(= {f.value:.6g} {f.unit} at this configuration)")


def register(app: typer.Typer) -> None:
    """Add ``sweep``, ``sensitivity``, ``bottleneck`` and ``explain`` to ``app``."""
    app.command("sweep")(sweep_cmd)
    app.command("sensitivity")(sensitivity_cmd)
    app.command("bottleneck")(bottleneck_cmd)
    app.command("explain")(explain_cmd)
