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

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from .config import TrainingConfig

_D = TrainingConfig()

# --- the base-configuration options, shared by every command here (as in ``symcost train``)
Model = Annotated[str, typer.Option(
    help="Model preset id (see symcost train --list-models) or path to a Hugging Face "
         "config.json.", show_default=False)]
Hardware = Annotated[str, typer.Option(
    help="Hardware id (see symcost train --list-hardware) or path to a hardware YAML file.",
    show_default=False)]
NumGpus = Annotated[int | None, typer.Option(help="GPUs in the job (default tp*pp*dp).",
                                             show_default=False)]
Tp = Annotated[int, typer.Option(help="Tensor-parallel degree.")]
Pp = Annotated[int, typer.Option(help="Pipeline-parallel degree.")]
Dp = Annotated[int | None, typer.Option(help="Data-parallel degree (default num_gpus/(tp*pp)).",
                                        show_default=False)]
Sp = Annotated[bool, typer.Option("--sp/--no-sp", help="Megatron sequence parallelism.")]
Vpp = Annotated[int, typer.Option(help="Virtual pipeline stages per GPU.")]
MicroBatch = Annotated[int, typer.Option(help="Sequences per micro-batch per GPU.")]
GlobalBatch = Annotated[int | None, typer.Option(
    help="Sequences per optimizer step (default dp*micro_batch).", show_default=False)]
SeqLen = Annotated[int | None, typer.Option(help="Tokens per sequence (default: the model's).",
                                            show_default=False)]
Recompute = Annotated[Literal["none", "selective", "full"], typer.Option(
    help="Activation recomputation.")]
Zero = Annotated[int, typer.Option(min=0, max=3, help="ZeRO stage 0-3.")]
Dtype = Annotated[Literal["bf16", "fp16", "fp8"], typer.Option(help="GEMM dtype.")]
Flash = Annotated[bool, typer.Option("--flash-attention/--no-flash-attention",
                                     help="FlashAttention.")]
Overlap = Annotated[bool, typer.Option("--dp-overlap/--no-dp-overlap",
                                       help="Overlap data-parallel communication.")]
ParamsFile = Annotated[Path | None, typer.Option(
    help="Efficiency-parameter YAML (default: the shipped calibration).", show_default=False,
    dir_okay=False)]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]
#: outputs shown in the sweep's table of best rows (all go to --out and --json).
_MAX_TABLE_OUTPUTS = 6


def _base(model, hardware, params, **fields):
    from .cli_train import load_inputs

    m, hw, p = load_inputs(model, hardware, params)
    return m, hw, p, TrainingConfig(**fields)


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _console():
    """Rich console; 200 columns when the output is not a terminal (pipes, files)."""
    import sys

    from rich.console import Console

    return Console(highlight=False, width=None if sys.stdout.isatty() else 200)


# ----------------------------------------------------------------------------- sweep
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
        help="Write every row to .csv or .parquet.", show_default=False, dir_okay=False)] = None,
    top: Annotated[int, typer.Option(help="Best valid rows to print.")] = 10,
    sort: Annotated[str, typer.Option(help="Output that ranks rows.")] = "step_time",
    chunk_size: Annotated[int | None, typer.Option(
        help="Rows per compiled call (default: 4096 when the sweep fits, else 65536).",
        show_default=False)] = None,
    num_gpus: NumGpus = _D.num_gpus, tp: Tp = _D.tp, pp: Pp = _D.pp, dp: Dp = _D.dp,
    sp: Sp = _D.sp, vpp: Vpp = _D.vpp, micro_batch: MicroBatch = _D.micro_batch,
    global_batch: GlobalBatch = _D.global_batch, seq_len: SeqLen = None,
    recompute: Recompute = _D.recompute, zero: Zero = _D.zero, dtype: Dtype = _D.dtype,
    flash_attention: Flash = _D.flash_attention, dp_overlap: Overlap = _D.dp_overlap,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """Evaluate a grid or random sample of configurations; invalid rows are masked."""
    from .sweep import LARGER_IS_BETTER, SweepError, parse_vary, sweep, write_table

    m, hw, p, cfg = _base(model, hardware, params, num_gpus=num_gpus, tp=tp, pp=pp, dp=dp,
                          sp=sp, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch,
                          seq_len=seq_len, recompute=recompute, zero=zero, dtype=dtype,
                          flash_attention=flash_attention, dp_overlap=dp_overlap)
    specs = dict(parse_vary(v) for v in vary)
    if len(specs) != len(vary):
        raise SweepError("--vary: a variable is given twice")
    outs = _split(outputs)
    if outs != ["all"] and sort not in outs:
        raise SweepError(f"--sort: {sort!r} is not among --outputs ({', '.join(outs)})")
    if out is not None and not str(out).endswith((".csv", ".parquet")):
        raise SweepError(f"--out: {str(out)!r} must end in .csv or .parquet")
    df = sweep(m, hw, cfg, p, vary=specs, samples=samples, outputs=outs or ["step_time"],
               precision=precision, rank_by=sort, seed=seed, chunk_size=chunk_size,
               progress=not as_json)
    if out is not None:
        write_table(df, out)
    best = df[df["valid"]].sort_values(sort, ascending=sort not in LARGER_IS_BETTER).head(top)
    a = df.attrs
    if as_json:
        typer.echo(json.dumps({
            "rows": a["rows"], "valid_rows": a["valid_rows"],
            "invalid_counts": a["invalid_counts"], "seconds": a["seconds"],
            "configs_per_s": a["configs_per_s"], "precision": a["precision"],
            "out": str(out) if out else None,
            "top": json.loads(best.drop(columns=["reason"]).to_json(orient="records")),
        }))
        return
    from rich.table import Table

    con = _console()
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
            t.add_row(*(f"{row[c]:.5g}" if isinstance(row[c], float) else str(row[c])
                        for c in cols))
        con.print(t)
    else:
        con.print("no valid configuration", style="bold red")


# ----------------------------------------------------------------------------- sensitivity
def sensitivity_cmd(
    model: Model, hardware: Hardware,
    outputs: Annotated[str, typer.Option(help="Comma-separated outputs.")] =
        "step_time,mfu,mem_total",
    discrete: Annotated[str, typer.Option(
        help="Discrete parameters for neighbour differences (tp, pp, dp, micro_batch, vpp, "
             "global_batch, layers, heads, kv_heads).")] = "tp,pp,dp,micro_batch,vpp",
    plot: Annotated[Path | None, typer.Option(
        help="Write a tornado chart (PNG).", show_default=False, dir_okay=False)] = None,
    plot_output: Annotated[str, typer.Option(help="Output the tornado chart shows.")] =
        "step_time",
    num_gpus: NumGpus = _D.num_gpus, tp: Tp = _D.tp, pp: Pp = _D.pp, dp: Dp = _D.dp,
    sp: Sp = _D.sp, vpp: Vpp = _D.vpp, micro_batch: MicroBatch = _D.micro_batch,
    global_batch: GlobalBatch = _D.global_batch, seq_len: SeqLen = None,
    recompute: Recompute = _D.recompute, zero: Zero = _D.zero, dtype: Dtype = _D.dtype,
    flash_attention: Flash = _D.flash_attention, dp_overlap: Overlap = _D.dp_overlap,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """Elasticities d ln y / d ln x of step time, MFU and memory at one configuration."""
    from .sensitivity import SensitivityError, sensitivity

    m, hw, p, cfg = _base(model, hardware, params, num_gpus=num_gpus, tp=tp, pp=pp, dp=dp,
                          sp=sp, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch,
                          seq_len=seq_len, recompute=recompute, zero=zero, dtype=dtype,
                          flash_attention=flash_attention, dp_overlap=dp_overlap)
    outs = _split(outputs)
    if plot is not None and plot_output not in outs:
        raise SensitivityError(f"--plot-output: {plot_output!r} is not among --outputs "
                               f"({', '.join(outs)})")
    res = sensitivity(m, hw, cfg, p, outputs=outs, discrete=_split(discrete))
    if plot is not None:
        res.plot(plot, plot_output)
    if as_json:
        typer.echo(json.dumps(res.to_dict()))
        return
    con = _console()
    con.print(res.table())
    con.print("autodiff rows: elasticity, checked against central finite differences "
              "(float64); '0 (not limiting)': the symbol's branch is inactive; '-': not in the "
              "formula; neighbour rows: arc elasticity to the next valid value below (v) and "
              "above (^).")
    if plot is not None:
        con.print(f"tornado chart written to {plot}")


# ----------------------------------------------------------------------------- bottleneck
def bottleneck_cmd(
    model: Model, hardware: Hardware,
    num_gpus: NumGpus = _D.num_gpus, tp: Tp = _D.tp, pp: Pp = _D.pp, dp: Dp = _D.dp,
    sp: Sp = _D.sp, vpp: Vpp = _D.vpp, micro_batch: MicroBatch = _D.micro_batch,
    global_batch: GlobalBatch = _D.global_batch, seq_len: SeqLen = None,
    recompute: Recompute = _D.recompute, zero: Zero = _D.zero, dtype: Dtype = _D.dtype,
    flash_attention: Flash = _D.flash_attention, dp_overlap: Overlap = _D.dp_overlap,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """What limits a step: each operator compute-, memory- or communication-bound, with its
    share of the step time."""
    from .bottleneck import bottleneck

    m, hw, p, cfg = _base(model, hardware, params, num_gpus=num_gpus, tp=tp, pp=pp, dp=dp,
                          sp=sp, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch,
                          seq_len=seq_len, recompute=recompute, zero=zero, dtype=dtype,
                          flash_attention=flash_attention, dp_overlap=dp_overlap)
    res = bottleneck(m, hw, cfg, p)
    if as_json:
        typer.echo(json.dumps(res.to_dict()))
        return
    _console().print(res.table())


# ----------------------------------------------------------------------------- explain
def _list_formulas(value: bool) -> None:
    if value:
        from .bottleneck import DESCRIPTIONS
        from .explain import formula_names

        names = formula_names()
        typer.echo("outputs:")
        for n in names["outputs"]:
            typer.echo(f"  {n}")
        typer.echo("operators:")
        for n in names["operators"]:
            typer.echo(f"  {n:18s} {DESCRIPTIONS.get(n, '')}")
        raise typer.Exit()


def explain_cmd(
    name: Annotated[str, typer.Argument(
        help="Output (step_time, mfu, mem_total, ...) or operator (qkv_proj, tp_comm, ...); "
             "see --list.", show_default=False)],
    model: Model, hardware: Hardware,
    keep: Annotated[str, typer.Option(
        help="Comma-separated symbols left free (e.g. tp,hidden); the rest are substituted.")
    ] = "",
    latex: Annotated[bool, typer.Option("--latex", help="Print LaTeX.")] = False,
    list_: Annotated[bool, typer.Option(
        "--list", callback=_list_formulas, is_eager=True, expose_value=False,
        help="List outputs and operators and exit.")] = False,
    num_gpus: NumGpus = _D.num_gpus, tp: Tp = _D.tp, pp: Pp = _D.pp, dp: Dp = _D.dp,
    sp: Sp = _D.sp, vpp: Vpp = _D.vpp, micro_batch: MicroBatch = _D.micro_batch,
    global_batch: GlobalBatch = _D.global_batch, seq_len: SeqLen = None,
    recompute: Recompute = _D.recompute, zero: Zero = _D.zero, dtype: Dtype = _D.dtype,
    flash_attention: Flash = _D.flash_attention, dp_overlap: Overlap = _D.dp_overlap,
    params: ParamsFile = None, as_json: AsJson = False,
) -> None:
    """Print the formula of an output or operator with only --keep symbols left free."""
    from .explain import explain

    m, hw, p, cfg = _base(model, hardware, params, num_gpus=num_gpus, tp=tp, pp=pp, dp=dp,
                          sp=sp, vpp=vpp, micro_batch=micro_batch, global_batch=global_batch,
                          seq_len=seq_len, recompute=recompute, zero=zero, dtype=dtype,
                          flash_attention=flash_attention, dp_overlap=dp_overlap)
    f = explain(name, m, hw, cfg, p, keep=_split(keep))
    if as_json:
        typer.echo(json.dumps(f.to_dict()))
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
