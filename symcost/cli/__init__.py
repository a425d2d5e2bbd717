"""The ``symcost`` command line: a typer layer over the public API (see :mod:`.main`).

Modules: :mod:`.main` (the app, error handling, start-up), :mod:`.common` (shared options,
input loading, output-path checks, warnings, the JSON writer), :mod:`.format` (numbers),
:mod:`.render` (rich tables of core results), :mod:`.plots` (PNG charts), :mod:`.report`
(validation report), and one module per feature: :mod:`.train`, :mod:`.search`,
:mod:`.validate`, :mod:`.infer`, :mod:`.sweep`, :mod:`.technology` (dissect, dse). The core (everything outside this package)
imports neither rich nor matplotlib.
"""

from __future__ import annotations

from .main import (COMMAND_MODULES, USER_ERROR_EXIT, app, build_app, enable_compilation_cache,
                   is_user_error, main, one_line)

__all__ = ["COMMAND_MODULES", "USER_ERROR_EXIT", "app", "build_app", "enable_compilation_cache",
           "is_user_error", "main", "one_line"]
