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
import time
from pathlib import Path
from collections.abc import Mapping
from typing import Annotated, Any

import typer

from hwspecs import HardwareSpecError, load_hardware

from ..config import TrainingConfig
from ..fields import INFERENCE_FIELDS, MODEL_FIELDS, TRAINING_FIELDS, Field
from ..models import ModelSpecError, get_model
from ..params import ParamsError, load_params
from ..schema import stamp
from .format import GIB

__all__ = ["AsJson", "CliInputError", "DEFAULTS", "Dp", "Dtype", "Flash", "GlobalBatch",
           "Hardware", "MicroBatch", "Model", "NumGpus", "Overlap", "ParamsFile", "Pp",
           "ProgressBar", "Recompute", "SeqLen", "Sp", "Tp", "Vpp", "Zero", "check_output_path",
           "console", "emit_json", "field_option", "flag_message", "load_inputs",
           "load_params_option", "memory_warning", "split_list", "training_fit", "warn"]

#: the defaults of the shared training options (those of :class:`TrainingConfig`).
DEFAULTS = TrainingConfig()


class CliInputError(ValueError):
    """A command-line value that is wrong before anything is computed (an output path, a
    price); printed as ``error: <option>: <rule>`` with exit code 2."""


def field_option(name: str, table: Mapping[str, Field] = TRAINING_FIELDS, **kw: Any) -> Any:
    """The typer option of configuration field ``name``, derived from its
    :class:`~symcost.fields.Field`: the flag is the field name with ``_`` -> ``-``
    (``--micro-batch``; on/off fields get ``--x/--no-x``), the help is the field's doc and
    allowed values. Values are checked by the field table in the core (one message for the
    API, the CLI and sweeps), not by click.

    Args:
        name: field name.
        table: :data:`~symcost.fields.TRAINING_FIELDS` or
            :data:`~symcost.fields.INFERENCE_FIELDS`.
        kw: other :func:`typer.Option` arguments (e.g. ``help`` to replace the field's doc).
    """
    f = table[name]
    decls = (f"{f.flag}/--no-{f.flag[2:]}",) if f.kind == "bool" else (f.flag,)
    text = f.doc[0].upper() + f.doc[1:]
    if f.kind in ("enum", "str"):
        text += f" ({f.describe()})"
    kw.setdefault("help", text + ".")
    kw.setdefault("show_default", f.default is not None)
    return typer.Option(*decls, **kw)


# --- options shared by the commands that take a training configuration (``train``, ``sweep``,
# ``sensitivity``, ``bottleneck``, ``explain``), each derived from its field.
Model = Annotated[str, typer.Option(
    help="Model preset id (see train --list-models) or a Hugging Face config.json path.",
    show_default=False)]
Hardware = Annotated[str, typer.Option(
    help="Hardware id (see train --list-hardware) or a hardware YAML path.",
    show_default=False)]
NumGpus = Annotated[int | None, field_option("num_gpus")]
Tp = Annotated[int, field_option("tp")]
Pp = Annotated[int, field_option("pp")]
Dp = Annotated[int | None, field_option("dp")]
Sp = Annotated[bool, field_option("sp")]
Vpp = Annotated[int, field_option("vpp")]
MicroBatch = Annotated[int, field_option("micro_batch")]
GlobalBatch = Annotated[int | None, field_option("global_batch")]
SeqLen = Annotated[int | None, field_option("seq_len")]
Recompute = Annotated[str, field_option("recompute")]
Zero = Annotated[int, field_option("zero")]
Dtype = Annotated[str, field_option("dtype")]
Flash = Annotated[bool, field_option("flash_attention")]
Overlap = Annotated[bool, field_option("dp_overlap")]
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


def flag_message(message: str, params: set[str]) -> str:
    """A core error message with its leading field name replaced by the command's flag for
    that field: ``"tp: 7 does not divide ..."`` -> ``"--tp: 7 does not divide ..."`` when the
    command has a ``tp`` option (``params``: the command's parameter names). Messages that
    start with anything else (``memory:``, ``context:``, a flag) are returned unchanged."""
    head, sep, rest = message.partition(":")
    tables = (TRAINING_FIELDS, INFERENCE_FIELDS, MODEL_FIELDS)
    if sep and head in params and any(head in t for t in tables):
        f = next(t[head] for t in tables if head in t)
        return f"{f.flag}:{rest}"
    return message


class ProgressBar:
    """A rich progress bar on stderr fed by the core's ``progress(done, total)`` callbacks
    (:data:`symcost.evaluate.Progress`), with rate and time remaining; silent (the callback
    is None) when ``enabled`` is False (``--json``, ``--quiet``) or stderr is not a terminal.

    Use as ``with ProgressBar("sweep", not as_json) as cb: sweep(..., progress=cb)``.
    """

    def __init__(self, label: str, enabled: bool = True) -> None:
        self.label = label
        self.enabled = enabled and sys.stderr.isatty()
        self._bar: Any = None
        self._task: Any = None
        self._t0 = 0.0

    def __enter__(self) -> Any:
        if not self.enabled:
            return None
        from rich.console import Console
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn,
                                   TextColumn, TimeRemainingColumn)

        self._bar = Progress(TextColumn(self.label), BarColumn(), MofNCompleteColumn(),
                             TaskProgressColumn(), TextColumn("{task.fields[rate]}"),
                             TimeRemainingColumn(), console=Console(stderr=True),
                             transient=True)
        self._bar.start()
        return self.update

    def update(self, done: int, total: int) -> None:
        """Move the bar to ``done`` of ``total`` rows."""
        now = time.perf_counter()
        if self._task is None:
            self._t0 = now
            self._task = self._bar.add_task(self.label, total=total, rate="")
        rate = done / (now - self._t0) if now > self._t0 else 0.0
        self._bar.update(self._task, completed=done, total=total,
                         rate=f"{rate:,.0f} rows/s" if rate else "")

    def __exit__(self, *exc: Any) -> None:
        if self._bar is not None:
            self._bar.stop()


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
