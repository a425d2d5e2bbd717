"""``symcost train``: predict one training step from the command line.

Example::

    symcost train --model gpt3-175b --hardware a100-sxm4-80gb --num-gpus 1024 \\
        --tp 8 --pp 16 --micro-batch 1 --global-batch 1536 --recompute full

prints a table (step time, tokens/s, MFU/HFU, memory per GPU, step-time breakdown);
``--json`` prints exactly one JSON object, :meth:`symcost.api.TrainingResult.to_dict`.
``symcost train --list-models`` / ``--list-hardware`` print the known ids, one per line.
A configuration that does not fit in memory is still reported (``"fits": false``, and a
warning line); the exit code is 0. Invalid input exits with code 2 and one ``error:`` line
(see :mod:`symcost.cli`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

import typer

from .cli_format import fmt_time, format_bytes
from .config import TrainingConfig

_DEFAULT = TrainingConfig()

#: what each step-time term is (see :func:`symcost.training.training_expressions`).
BREAKDOWN_HELP = {
    "forward": "forward compute (layers, embedding, LM head, loss)",
    "backward": "backward compute",
    "recompute": "activation recomputation (extra forward)",
    "tp_comm": "tensor-parallel collectives",
    "pp_p2p": "pipeline send/receive",
    "pp_bubble": "pipeline fill and drain (bubble)",
    "dp_comm": "data-parallel gradient sync (exposed part)",
    "optimizer": "optimizer step",
    "overhead": "fixed per-step overhead",
}


def _list_models(value: bool) -> None:
    if value:
        from .models import list_models

        typer.echo("\n".join(list_models()))
        raise typer.Exit()


def _list_hardware(value: bool) -> None:
    if value:
        from hwspecs import list_hardware

        typer.echo("\n".join(list_hardware()))
        raise typer.Exit()


def load_inputs(model: str, hardware: str, params: Path | None):
    """Load the model, hardware and efficiency parameters named on the command line.

    Args:
        model: preset id or alias, or a path to a Hugging Face ``config.json`` (or a
            ModelSpec YAML/JSON file).
        hardware: hardware id or a YAML path.
        params: efficiency-parameter YAML; the shipped calibration when None.

    Returns:
        ``(ModelSpec, HardwareSpec, Params)``.

    Raises:
        ModelSpecError, HardwareSpecError, ParamsError: the message is prefixed with the
            command-line option (``--model``, ``--hardware``, ``--params``).
    """
    from hwspecs import HardwareSpecError, load_hardware

    from .models import ModelSpecError, get_model
    from .params import ParamsError, load_params

    try:
        m = get_model(model)
    except ModelSpecError as exc:
        raise ModelSpecError(f"--model: {exc}") from None
    try:
        hw = load_hardware(hardware)
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"--hardware: {exc}") from None
    try:
        p = load_params(params)
    except ParamsError as exc:
        raise ParamsError(f"--params: {exc}") from None
    return m, hw, p


def summary_tables(result) -> list:
    """Rich renderables describing ``result`` (a :class:`~symcost.api.TrainingResult`):
    performance, memory per GPU, and the step-time breakdown with each term's share."""
    from rich.table import Table

    v, d, cfg = result.values, result.to_dict(), result.config
    title = (f"{result.model.name} on {cfg.num_gpus} x {result.hardware.name}: "
             f"tp={cfg.tp} pp={cfg.pp} dp={cfg.dp} vpp={cfg.vpp} sp={'on' if cfg.sp else 'off'}, "
             f"micro-batch {cfg.micro_batch}, global batch {cfg.global_batch}, seq {cfg.seq_len}, "
             f"recompute {cfg.recompute}, ZeRO-{cfg.zero}, {cfg.dtype}")

    perf = Table(title=title, title_justify="left", show_header=True)
    perf.add_column("metric")
    perf.add_column("value", justify="right")
    perf.add_column("note")
    perf.add_row("step time", fmt_time(d["step_time_s"]), "per optimizer step")
    perf.add_row("tokens/s", f"{d['tokens_per_s']:,.0f}", "whole cluster")
    perf.add_row("tokens/s per GPU", f"{d['tokens_per_s_per_gpu']:,.1f}", "")
    perf.add_row("MFU", f"{100 * d['mfu']:.1f} %",
                 "model FLOPs / peak; excludes recomputation")
    perf.add_row("HFU", f"{100 * d['hfu']:.1f} %",
                 "hardware FLOPs / peak; includes recomputation (Korthikanti et al. 2022, Sec. 6)")
    perf.add_row("parameters", f"{d['params_total'] / 1e9:,.2f} B", "")

    mem = Table(title="Memory per GPU", title_justify="left")
    mem.add_column("part")
    mem.add_column("size", justify="right")
    mem.add_column("share", justify="right")
    total = d["memory_per_gpu_bytes"]["total"]
    for part in ("weights", "gradients", "optimizer", "activations"):
        b = d["memory_per_gpu_bytes"][part]
        mem.add_row(part, format_bytes(b), f"{100 * b / total:.1f} %" if total else "-")
    mem.add_row("total", format_bytes(total), "", style="bold")
    mem.add_row("usable HBM", format_bytes(d["memory_usable_bytes"]), "")
    headroom = v["mem_headroom"]
    mem.add_row("fits", f"yes, headroom {format_bytes(headroom)}" if result.fits
                else f"NO, short by {format_bytes(-headroom)}", "",
                style=None if result.fits else "bold red")

    brk = Table(title="Step-time breakdown", title_justify="left")
    brk.add_column("term")
    brk.add_column("time", justify="right")
    brk.add_column("share", justify="right")
    brk.add_column("what")
    step = d["step_time_s"]
    for name, t in d["breakdown_s"].items():
        brk.add_row(name, fmt_time(t), f"{100 * t / step:.1f} %" if step else "-",
                    BREAKDOWN_HELP.get(name, ""))
    brk.add_row("step time", fmt_time(step), "100.0 %", "", style="bold")
    return [perf, mem, brk]


def not_fit_message(result) -> str:
    """One-line warning for a configuration that does not fit in HBM."""
    d = result.to_dict()
    total, usable = d["memory_per_gpu_bytes"]["total"], d["memory_usable_bytes"]
    short = -result.values["mem_headroom"]
    return (f"warning: does not fit in memory: {format_bytes(total)} per GPU > usable "
            f"{format_bytes(usable)} (short by {format_bytes(short)})")


def train(
    model: Annotated[str, typer.Option(
        help="Model preset id (see --list-models) or path to a Hugging Face config.json.",
        show_default=False)],
    hardware: Annotated[str, typer.Option(
        help="Hardware id (see --list-hardware) or path to a hardware YAML file.",
        show_default=False)],
    num_gpus: Annotated[int | None, typer.Option(
        help="GPUs in the job (default tp*pp*dp).", show_default=False)] = _DEFAULT.num_gpus,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = _DEFAULT.tp,
    pp: Annotated[int, typer.Option(help="Pipeline-parallel degree.")] = _DEFAULT.pp,
    dp: Annotated[int | None, typer.Option(
        help="Data-parallel degree (default num_gpus/(tp*pp)).",
        show_default=False)] = _DEFAULT.dp,
    sp: Annotated[bool, typer.Option("--sp/--no-sp",
                                     help="Megatron sequence parallelism.")] = _DEFAULT.sp,
    vpp: Annotated[int, typer.Option(
        help="Virtual pipeline stages per GPU (interleaved 1F1B when > 1).")] = _DEFAULT.vpp,
    micro_batch: Annotated[int, typer.Option(
        help="Sequences per micro-batch per GPU.")] = _DEFAULT.micro_batch,
    global_batch: Annotated[int | None, typer.Option(
        help="Sequences per optimizer step (default dp*micro_batch).",
        show_default=False)] = _DEFAULT.global_batch,
    seq_len: Annotated[int | None, typer.Option(
        help="Tokens per sequence (default: the model's).", show_default=False)] = None,
    recompute: Annotated[Literal["none", "selective", "full"], typer.Option(
        help="Activation recomputation.")] = _DEFAULT.recompute,
    zero: Annotated[int, typer.Option(min=0, max=3, help="ZeRO stage 0-3.")] = _DEFAULT.zero,
    dtype: Annotated[Literal["bf16", "fp16", "fp8"], typer.Option(
        help="GEMM dtype.")] = _DEFAULT.dtype,
    flash_attention: Annotated[bool, typer.Option(
        "--flash-attention/--no-flash-attention", help="FlashAttention.")
    ] = _DEFAULT.flash_attention,
    dp_overlap: Annotated[bool, typer.Option(
        "--dp-overlap/--no-dp-overlap",
        help="Overlap data-parallel communication with backward compute.")
    ] = _DEFAULT.dp_overlap,
    params: Annotated[Path | None, typer.Option(
        help="Efficiency-parameter YAML (default: the shipped calibration).",
        show_default=False, dir_okay=False)] = None,
    precision: Annotated[Literal["float64", "float32"], typer.Option(
        help="Evaluation precision.")] = "float64",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object (TrainingResult.to_dict()) instead of tables.")
    ] = False,
    interval: Annotated[bool | None, typer.Option(
        "--interval/--no-interval", show_default=False,
        help="Add 90% prediction intervals from the calibration's uncertainty "
             "(step_time_s_interval, tokens_per_s_interval, mfu_interval; on by default "
             "with --json).")] = None,
    list_models: Annotated[bool, typer.Option(
        "--list-models", callback=_list_models, is_eager=True, expose_value=False,
        help="List the model preset ids and exit.")] = False,
    list_hardware: Annotated[bool, typer.Option(
        "--list-hardware", callback=_list_hardware, is_eager=True, expose_value=False,
        help="List the hardware ids and exit.")] = False,
) -> None:
    """Predict one training step: time, throughput, MFU/HFU, memory and breakdown."""
    from .api import predict_training

    m, hw, p = load_inputs(model, hardware, params)
    cfg = TrainingConfig(num_gpus=num_gpus, tp=tp, pp=pp, dp=dp, sp=sp, vpp=vpp,
                         micro_batch=micro_batch, global_batch=global_batch, seq_len=seq_len,
                         recompute=recompute, zero=zero, dtype=dtype,
                         flash_attention=flash_attention, dp_overlap=dp_overlap)
    result = predict_training(m, hw, cfg, params=p, precision=precision)
    want = as_json if interval is None else interval
    intervals = prediction_intervals(m, hw, cfg, p) if want else {}
    if as_json:
        typer.echo(json.dumps({**result.to_dict(), **intervals}))
        if not result.fits:
            typer.echo(not_fit_message(result), err=True)
        return
    from rich.console import Console

    console = Console(highlight=False)
    for table in summary_tables(result):
        console.print(table)
    for name, (lo, hi) in intervals.items():
        console.print(f"90% interval {name.removesuffix('_interval')}: [{lo:.4g}, {hi:.4g}]",
                      markup=False)
    if not result.fits:
        console.print(not_fit_message(result).replace("warning:", "WARNING:", 1),
                      style="bold red", markup=False)


def prediction_intervals(model, hw, cfg: TrainingConfig, params) -> dict[str, list[float]]:
    """90% prediction intervals ``{"step_time_s_interval": [lo, hi], "tokens_per_s_interval":
    ..., "mfu_interval": ...}`` from the calibration's parameter covariance and residual error
    (:func:`symcost.calibrate.predict_interval`); empty when the parameters carry no
    uncertainty for this GPU generation."""
    from .calibrate import CalibrationError, predict_interval

    try:
        iv = predict_interval(model, hw, cfg, params=params, level=0.9)
    except CalibrationError:
        return {}
    return {f"{k}_interval": [iv[k]["lo"], iv[k]["hi"]]
            for k in ("step_time_s", "tokens_per_s", "mfu")}


def register(app: typer.Typer) -> None:
    """Add the ``train`` command to ``app``."""
    app.command("train")(train)
