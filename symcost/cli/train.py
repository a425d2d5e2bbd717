"""``symcost train``: predict one training step from the command line.

Example::

    symcost train --model gpt3-175b --hardware a100-sxm4-80gb --num-gpus 1024 \\
        --tp 8 --pp 16 --micro-batch 1 --global-batch 1536 --recompute full

prints a table (step time, tokens/s, MFU/HFU, memory per GPU, step-time breakdown);
``--json`` prints exactly one JSON object, :meth:`symcost.api.TrainingResult.to_dict`.
``symcost train --list-models`` / ``--list-hardware`` print the known ids, one per line.
A configuration that does not fit in memory is still reported (``"fits": false``, and one
``warning: memory: ...`` line on stderr, :func:`symcost.cli.common.memory_warning`); the exit
code is 0. Invalid input exits with code 2 and one ``error:`` line (see
:mod:`symcost.cli.main`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from hwspecs import list_hardware

from ..config import HOST_MEMORY_UNSTATED, TrainingConfig
from ..models import list_models
from .common import (Hardware, Model, ParamsFile, check_output_path, console, emit_json,
                     load_inputs,
                     memory_warning, training_options)
from .format import fmt_time, format_bytes

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

#: what each step-time term is (see :func:`symcost.training.training_expressions`).
BREAKDOWN_HELP = {
    "forward": "forward compute (layers, embedding, LM head, loss)",
    "backward": "backward compute",
    "recompute": "activation recomputation (extra forward)",
    "tp_comm": "tensor-parallel collectives",
    "cp_comm": "context-parallel key/value exchange (exposed part)",
    "ep_comm": "expert-parallel all-to-all",
    "pp_p2p": "pipeline send/receive",
    "pp_bubble": "pipeline fill and drain (bubble)",
    "dp_comm": "data-parallel gradient sync (exposed part)",
    "optimizer": "optimizer step",
    "overhead": "fixed per-step overhead",
}


def _list_models(value: bool) -> None:
    if value:
        typer.echo("\n".join(list_models()))
        raise typer.Exit()


def _list_hardware(value: bool) -> None:
    if value:
        typer.echo("\n".join(list_hardware()))
        raise typer.Exit()


def summary_tables(result) -> list:
    """Rich renderables describing ``result`` (a :class:`~symcost.api.TrainingResult`):
    performance, memory per GPU, and the step-time breakdown with each term's share."""
    from rich.table import Table

    from ..training import MEMORY

    v, cfg = result.values, result.config
    modules = f" ({cfg.recompute_modules})" if cfg.recompute == "selective" else ""
    title = (f"{result.model.name} on {cfg.num_gpus} x {result.hardware.name}: "
             f"tp={cfg.tp} cp={cfg.cp} pp={cfg.pp} dp={cfg.dp} ep={cfg.ep} vpp={cfg.vpp} "
             f"sp={'on' if cfg.sp else 'off'}, "
             f"micro-batch {cfg.micro_batch}, global batch {cfg.global_batch}, seq {cfg.seq_len}, "
             f"recompute {cfg.recompute}{modules}, ZeRO-{cfg.zero}, {cfg.dtype}")

    perf = Table(title=title, title_justify="left", show_header=True)
    perf.add_column("metric")
    perf.add_column("value", justify="right")
    perf.add_column("note")
    perf.add_row("step time", fmt_time(v["step_time"]), "per optimizer step")
    perf.add_row("tokens/s", f"{v['tokens_per_s']:,.0f}", "whole cluster")
    perf.add_row("tokens/s per GPU", f"{v['tokens_per_s'] / v['num_gpus']:,.1f}", "")
    perf.add_row("MFU", f"{100 * v['mfu']:.1f} %",
                 "model FLOPs / peak; excludes recomputation")
    perf.add_row("HFU", f"{100 * v['hfu']:.1f} %",
                 "hardware FLOPs / peak; includes recomputation (Korthikanti et al. 2022, Sec. 6)")
    perf.add_row("parameters", f"{v['params_total'] / 1e9:,.2f} B", "")

    mem = Table(title="Memory per GPU", title_justify="left")
    mem.add_column("part")
    mem.add_column("size", justify="right")
    mem.add_column("share", justify="right")
    total = v["mem_total"]
    for part in MEMORY:
        b = v[part]
        mem.add_row(part.removeprefix("mem_"), format_bytes(b),
                    f"{100 * b / total:.1f} %" if total else "-")
    mem.add_row("total", format_bytes(total), "", style="bold")
    mem.add_row("usable HBM", format_bytes(v["mem_usable"]), "")
    if v["mem_host"] > 0:   # [offload] what ZeRO-Offload / activation offloading put on the host
        cap = result.inputs["host_mem_cap"]
        mem.add_row("host memory (offloaded)", format_bytes(v["mem_host"]),
                    f"of {format_bytes(cap)}" if cap < HOST_MEMORY_UNSTATED else "unchecked")
    headroom = v["mem_headroom"]
    mem.add_row("fits", f"yes, headroom {format_bytes(headroom)}" if result.fits
                else f"NO, short by {format_bytes(-headroom)}", "",
                style=None if result.fits else "bold red")

    brk = Table(title="Step-time breakdown", title_justify="left")
    brk.add_column("term")
    brk.add_column("time", justify="right")
    brk.add_column("share", justify="right")
    brk.add_column("what")
    step = v["step_time"]
    for name, t in result.breakdown.items():
        brk.add_row(name, fmt_time(t), f"{100 * t / step:.1f} %" if step else "-",
                    BREAKDOWN_HELP.get(name, ""))
    brk.add_row("step time", fmt_time(step), "100.0 %", "", style="bold")
    return [perf, mem, brk]


@training_options
def train(
    model: Model, hardware: Hardware,
    *, config: TrainingConfig,
    params: ParamsFile = None,
    precision: Annotated[Literal["float64", "float32"], typer.Option(
        help="Evaluation precision.")] = "float64",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object instead of tables.")] = False,
    interval: Annotated[bool | None, typer.Option(
        "--interval/--no-interval", show_default=False,
        help="Add 90% prediction intervals from the calibration (*_interval keys; on by "
             "default with --json).")] = None,
    list_models: Annotated[bool, typer.Option(
        "--list-models", callback=_list_models, is_eager=True, expose_value=False,
        help="List the model preset ids and exit.")] = False,
    list_hardware: Annotated[bool, typer.Option(
        "--list-hardware", callback=_list_hardware, is_eager=True, expose_value=False,
        help="List the hardware ids and exit.")] = False,
    breakdown: Annotated[Literal["modules"] | None, typer.Option(
        help="Also break the step down by decoder module (RMSNorm, QKV projection, RoPE, "
             "QK^T, softmax, attention-V, output projection, MLP) and phase (forward, "
             "backward, optimizer); JSON key module_breakdown_s.")] = None,
    plot: Annotated[Path | None, typer.Option(
        show_default=False, dir_okay=False,
        help="With --breakdown modules: write a stacked bar chart PNG.")] = None,
) -> None:
    """Predict one training step: time, throughput, MFU/HFU, memory and breakdown."""
    from ..api import predict_training

    check_output_path(plot, "--plot", (".png",))
    m, hw, p = load_inputs(model, hardware, params)
    cfg = config
    result = predict_training(m, hw, cfg, params=p, precision=precision)
    want = as_json if interval is None else interval
    intervals = prediction_intervals(m, hw, cfg, p) if want else {}
    modules = module_breakdown(m, hw, cfg, p, plot) if breakdown else None
    if as_json:
        extra = {"module_breakdown_s": modules} if modules is not None else {}
        emit_json({**result.to_dict(), **intervals, **extra})
    else:
        con = console()
        for table in summary_tables(result):
            con.print(table)
        for name, (lo, hi) in intervals.items():
            con.print(f"90% interval {name.removesuffix('_interval')}: [{lo:.4g}, {hi:.4g}]",
                      markup=False)
        if modules is not None:
            con.print(module_table(modules, "Module breakdown (s per step)"))
            if plot is not None:
                con.print(f"module breakdown chart written to {plot}", markup=False)
    memory_warning(result.values["mem_total"], result.values["mem_usable"],
                   result.values["mem_host"], result.inputs["host_mem_cap"])


def module_breakdown(m, hw, cfg: TrainingConfig, p, plot: Path | None
                     ) -> dict[str, dict[str, float]]:
    """:func:`symcost.breakdown.training_modules`, and its chart when ``plot`` is given."""
    from ..breakdown import training_modules
    from .plots import module_breakdown_chart

    data = training_modules(m, hw, cfg, p)
    if plot is not None:
        module_breakdown_chart(data, plot, f"{m.name} on {hw.name}: training step by module")
    return data


def module_table(data: dict[str, dict[str, float]], title: str):
    """A rich table: modules as rows, phases as columns (times), with totals."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    table.add_column("module")
    phases = list(data)
    for ph in phases:
        table.add_column(ph, justify="right")
    table.add_column("total", justify="right")
    modules = list(next(iter(data.values())))
    for mod in modules:
        vals = [data[ph].get(mod, 0.0) for ph in phases]
        table.add_row(mod, *(fmt_time(v) for v in vals), fmt_time(sum(vals)))
    totals = [sum(data[ph].values()) for ph in phases]
    table.add_row("total", *(fmt_time(v) for v in totals), fmt_time(sum(totals)),
                  style="bold")
    return table


def prediction_intervals(model, hw, cfg: TrainingConfig, params) -> dict[str, list[float]]:
    """90% prediction intervals ``{"step_time_s_interval": [lo, hi], "tokens_per_s_interval":
    ..., "mfu_interval": ...}`` from the calibration's parameter covariance and residual error
    (:func:`symcost.uncertainty.predict_interval`); empty when the parameters carry no
    uncertainty for this GPU generation."""
    from ..uncertainty import CalibrationError, predict_interval

    try:
        iv = predict_interval(model, hw, cfg, params=params, level=0.9)
    except CalibrationError:
        return {}
    return {f"{k}_interval": [iv[k]["lo"], iv[k]["hi"]]
            for k in ("step_time_s", "tokens_per_s", "mfu")}


def register(app: typer.Typer) -> None:
    """Add the ``train`` command to ``app``."""
    app.command("train")(train)
