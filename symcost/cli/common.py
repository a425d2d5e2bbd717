"""What the command modules share: option declarations, input loading, output-path checks,
warnings, the memory-fit outcome and the ``--json`` writer.

Command modules import from here (and from :mod:`symcost.cli.format`), never from each other.
Function-local imports in the CLI modules are kept only for start-up time: ``symcost --help``
imports neither NumPy, pandas nor JAX, builds no SymPy cost expressions and loads no rich
tables; nothing in the CLI needs a local import to avoid an import cycle.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer

from hwspecs import HardwareSpecError, load_hardware

from ..config import TrainingConfig
from ..models import ModelSpecError, get_model
from ..params import ParamsError, load_params
from ..schema import stamp
from .format import GIB

__all__ = ["DEFAULTS", "AsJson", "CliInputError", "Dp", "Dtype", "Flash", "GlobalBatch",
           "Hardware", "MicroBatch", "Model", "NumGpus", "Overlap", "ParamsFile", "Pp", "Recompute",
           "SeqLen", "Sp", "Tp", "Vpp", "Zero", "check_output_path", "console", "emit_json",
           "load_inputs", "load_params_option", "memory_warning", "split_list",
           "training_fit", "warn"]

#: the defaults of the shared training options (those of :class:`TrainingConfig`).
DEFAULTS = TrainingConfig()


class CliInputError(ValueError):
    """A command-line value that is wrong before anything is computed (an output path, a
    price); printed as ``error: <option>: <rule>`` with exit code 2."""


# --- options shared by the commands that take a training configuration (``train``, ``sweep``,
# ``sensitivity``, ``bottleneck``, ``explain``); the flag is the field name with ``_`` -> ``-``.
Model = Annotated[str, typer.Option(
    help="Model preset id (see train --list-models) or a Hugging Face config.json path.",
    show_default=False)]
Hardware = Annotated[str, typer.Option(
    help="Hardware id (see train --list-hardware) or a hardware YAML path.",
    show_default=False)]
NumGpus = Annotated[int | None, typer.Option(help="GPUs in the job (default tp*pp*dp).",
                                             show_default=False)]
Tp = Annotated[int, typer.Option(help="Tensor-parallel degree.")]
Pp = Annotated[int, typer.Option(help="Pipeline-parallel degree.")]
Dp = Annotated[int | None, typer.Option(help="Data-parallel degree (default num_gpus/(tp*pp)).",
                                        show_default=False)]
Sp = Annotated[bool, typer.Option("--sp/--no-sp", help="Megatron sequence parallelism.")]
Vpp = Annotated[int, typer.Option(
    help="Virtual pipeline stages per GPU (interleaved 1F1B when > 1).")]
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
                                       help="Overlap data-parallel communication with "
                                            "backward compute.")]
ParamsFile = Annotated[Path | None, typer.Option(
    help="Efficiency-parameter YAML (default: the shipped calibration).", show_default=False,
    dir_okay=False)]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def load_params_option(params: Path | None):
    """The efficiency parameters of ``--params`` (the shipped calibration when None).

    Raises:
        ParamsError: unreadable or invalid file; the message starts with ``--params:``.
    """
    try:
        return load_params(params)
    except ParamsError as exc:
        raise ParamsError(f"--params: {exc}") from None


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
    try:
        m = get_model(model)
    except ModelSpecError as exc:
        raise ModelSpecError(f"--model: {exc}") from None
    try:
        hw = load_hardware(hardware)
    except HardwareSpecError as exc:
        raise HardwareSpecError(f"--hardware: {exc}") from None
    return m, hw, load_params_option(params)


def split_list(text: str | None) -> list[str]:
    """``"a, b,,c"`` -> ``["a", "b", "c"]``."""
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def check_output_path(path: Path | None, option: str, suffixes: tuple[str, ...] = (),
                      directory: bool = False) -> None:
    """Check, before anything is computed, that the command can write ``path``.

    A file path must not name an existing directory, its parent directory must exist and be
    writable, and its name must end in one of ``suffixes`` (when given). A directory path
    (``directory=True``, e.g. ``validate --report DIR``) must not name an existing file and
    must be, or be creatable in, a writable directory.

    Args:
        path: the path given, or None (nothing to check).
        option: the option that named it (``--out``), used in the message.
        suffixes: allowed file-name endings, e.g. ``(".csv", ".parquet")``.
        directory: ``path`` is a directory the command writes into.

    Raises:
        CliInputError: ``<option>: <rule>``.
    """
    if path is None:
        return
    if directory:
        if path.exists() and not path.is_dir():
            raise CliInputError(f"{option}: {str(path)!r} is an existing file, not a "
                                "directory")
        target = path if path.is_dir() else path.parent
        if not path.is_dir() and not path.parent.is_dir():
            raise CliInputError(f"{option}: directory {str(path.parent)!r} does not exist")
    else:
        if path.is_dir():
            raise CliInputError(f"{option}: {str(path)!r} is a directory; give a file name")
        if suffixes and not path.name.lower().endswith(suffixes):
            raise CliInputError(f"{option}: {str(path)!r} must end in "
                                f"{' or '.join(suffixes)}")
        target = path.parent
        if not target.is_dir():
            raise CliInputError(f"{option}: directory {str(target)!r} does not exist")
    if not os.access(target, os.W_OK | os.X_OK):
        raise CliInputError(f"{option}: directory {str(target)!r} is not writable")


def warn(message: str) -> None:
    """Print ``warning: <message>`` on stderr (the one way every command warns)."""
    typer.echo(f"warning: {message}", err=True)


def memory_warning(needed_bytes: float, usable_bytes: float) -> None:
    """Warn, when ``needed_bytes > usable_bytes``, that the configuration does not fit:
    ``warning: memory: <needed> GiB per GPU exceeds the usable <usable> GiB``.

    Args:
        needed_bytes: memory per GPU the configuration needs, bytes.
        usable_bytes: usable HBM per GPU (capacity minus reserved), bytes.
    """
    if needed_bytes > usable_bytes:
        warn(f"memory: {needed_bytes / GIB:.2f} GiB per GPU exceeds the usable "
             f"{usable_bytes / GIB:.2f} GiB")


def training_fit(model, hardware, config: TrainingConfig, params) -> dict[str, Any]:
    """Memory outcome of one training configuration: ``{"fits": bool, "needed": bytes,
    "usable": bytes}`` (one NumPy evaluation of :func:`symcost.api.predict_training`)."""
    from ..api import predict_training

    r = predict_training(model, hardware, config, params=params)
    return {"fits": bool(r.fits), "needed": r.values["mem_total"],
            "usable": r.values["mem_usable"]}


def emit_json(obj: dict[str, Any]) -> None:
    """Print ``obj`` as exactly one JSON object on stdout, with ``"schema_version"``
    (:func:`symcost.schema.stamp`: NumPy scalars converted, NaN and infinities as null)."""
    typer.echo(json.dumps(stamp(obj), allow_nan=False))


def console(width: int | None = None):
    """A rich console without highlighting; ``width`` columns (at least) when stdout is not a
    terminal (pipes, files, tests), the terminal's width otherwise."""
    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    return Console(highlight=False, width=width or 130)
