"""The public API: every exported name resolves, submodules stay modules, import is cheap."""

import subprocess
import sys
import types

import symcost


def test_every_export_resolves():
    for name in symcost.__all__:
        assert getattr(symcost, name) is not None, name


def test_submodules_are_modules_even_after_exports_are_used():
    for name in symcost.__all__:
        getattr(symcost, name)
    import symcost.sensitivity as se
    import symcost.sweep as sw

    assert isinstance(se, types.ModuleType) and callable(se.sensitivity)
    assert isinstance(sw, types.ModuleType) and callable(sw.sweep)
    assert isinstance(symcost.calibrate, types.ModuleType)


def test_import_has_no_heavy_side_effects():
    code = ("import sys, symcost; "
            "print(sorted(m for m in ('jax', 'sympy', 'pandas', 'matplotlib') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
