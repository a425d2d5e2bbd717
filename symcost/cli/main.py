"""The ``symcost`` command line: a thin typer layer over the public API.

Each feature lives in its own module ``symcost/cli/<feature>.py`` exposing
``register(app: typer.Typer) -> None``; :data:`COMMAND_MODULES` lists them explicitly and
:func:`build_app` imports each one and calls its ``register``. Feature modules import the
heavy parts (SymPy expressions, JAX) inside their command functions, so ``symcost --help``
and ``symcost --version`` never import JAX.

Errors: a user error (any :class:`ValueError` subclass defined in ``symcost``, ``hwspecs``
or ``optimizers``: ``ConfigError``, ``ModelSpecError``, ``HardwareSpecError``,
``ParamsError``, ``LoweringError``, ...) is printed as one line ``error: <message>`` on
stderr and exits with code 2, without a traceback. Anything else is a bug and keeps its
traceback.

Start-up: the app callback points JAX's persistent compilation cache at
``<cache dir>/jax`` (see :func:`symcost.lower.cache_dir`; ``$SYMCOST_CACHE_DIR``, default
``~/.cache/symcost``, ``off`` disables), so a repeated command skips the XLA compile.
"""

from __future__ import annotations

import importlib
import os
import sys

from typing import Any

import typer
from typer.core import TyperGroup

from .common import flag_message

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

#: feature modules, each exposing ``register(app)``; one line per module.
COMMAND_MODULES = [
    "symcost.cli.train",
    "symcost.cli.search",
    "symcost.cli.validate",
    "symcost.cli.infer",
    "symcost.cli.sweep",
    "symcost.cli.technology",
    "symcost.cli.ui",
]

#: top-level packages whose ValueError subclasses are user errors (printed, exit code 2).
_USER_ERROR_PACKAGES = frozenset({"symcost", "hwspecs", "optimizers"})
#: exit code of a user error (same as a usage error).
USER_ERROR_EXIT = 2


def is_user_error(exc: BaseException) -> bool:
    """True for our input-validation errors: a proper subclass of :class:`ValueError`
    defined in one of :data:`_USER_ERROR_PACKAGES` (a bare ``ValueError`` is a bug)."""
    cls = type(exc)
    return (isinstance(exc, ValueError) and cls is not ValueError
            and cls.__module__.split(".")[0] in _USER_ERROR_PACKAGES)


def one_line(exc: BaseException) -> str:
    """The exception message on one line (inner line breaks become ``; ``)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return "; ".join(lines) or type(exc).__name__


class _Group(TyperGroup):
    """Top-level group that turns user errors into ``error: <message>`` and exit code 2.

    Sub-commands (and sub-groups) run inside :meth:`invoke`, so this one handler covers all
    of them, including under ``typer.testing.CliRunner``."""

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Exception as exc:
            if not is_user_error(exc):
                raise
            typer.echo(f"error: {flag_message(one_line(exc), _command_params(ctx))}", err=True)
            ctx.exit(USER_ERROR_EXIT)


def _command_params(ctx: Any) -> set[str]:
    """Parameter names of the sub-command being invoked (empty when there is none)."""
    name = ctx.invoked_subcommand
    cmd = ctx.command.get_command(ctx, name) if name else None
    return {p.name for p in cmd.params if p.name} if cmd is not None else set()


def enable_compilation_cache() -> str | None:
    """Point JAX's persistent compilation cache at ``<cache dir>/jax`` and cache every
    compiled function (``jax_persistent_cache_min_compile_time_secs = 0``).

    Called by the CLI entry only (the library never changes JAX's configuration). JAX is not
    imported here: when it is not loaded yet the settings go into ``JAX_*`` environment
    variables that JAX reads at import (explicit user settings win); when it is, they are set
    with ``jax.config.update``.

    Returns:
        The cache directory (created if needed), or None when caching is disabled
        (``SYMCOST_CACHE_DIR=off``) or the directory cannot be created or written.
    """
    from ..lower import cache_dir

    base = cache_dir()
    if base is None:
        return None
    path = str(base / "jax")
    try:  # an unusable directory means no cache, not a warning on every run
        os.makedirs(path, exist_ok=True)
    except OSError:
        return None
    if not os.access(path, os.W_OK | os.X_OK):
        return None
    settings = {"jax_compilation_cache_dir": path,
                "jax_persistent_cache_min_compile_time_secs": 0.0}
    if "jax" in sys.modules:
        import jax

        for name, value in settings.items():
            jax.config.update(name, value)
    else:
        for name, value in settings.items():
            os.environ.setdefault(name.upper(), str(value))
    return path


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("symcost")
    except PackageNotFoundError:
        return "unknown (not installed)"


def _version_callback(value: bool) -> None:
    if value:
        typer.echo(f"symcost {_version()}")
        raise typer.Exit()


def _main(
    version: bool = typer.Option(False, "--version", callback=_version_callback,
                                 is_eager=True, help="Print the version and exit."),
) -> None:
    """symcost: symbolic + compiled performance model for distributed LLM training."""
    enable_compilation_cache()


def build_app() -> typer.Typer:
    """Create the typer app and register every module of :data:`COMMAND_MODULES`."""
    app = typer.Typer(cls=_Group, add_completion=False, no_args_is_help=True,
                      rich_markup_mode=None,  # plain click help: option names never truncated
                      pretty_exceptions_show_locals=False,
                      help="symcost: symbolic + compiled performance model for distributed "
                           "LLM training and inference.")
    app.callback()(_main)
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(app)
    return app


app = build_app()


def main() -> None:
    """The ``symcost`` console script: run :data:`app`, flush stdout and stderr, and leave
    with the command's exit code without tearing the interpreter down.

    Teardown of JAX/XLA and of the loaded modules takes about 0.4 s after a search or a sweep
    (measured on the reference 2-core CPU) and has nothing left to do: output files are
    closed by the commands, and JAX writes its persistent compilation cache when it
    compiles. A bug still raises its traceback before this point.
    """
    try:
        app()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
