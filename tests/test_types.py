"""Type checking as a test (issue 10): ``mypy --strict`` on the core modules must pass.

The core modules are the ``[[tool.mypy.overrides]]`` section of ``pyproject.toml`` that spells
out the strict flags (mypy cannot scope ``strict = true`` to some modules, python/mypy#11401);
running ``--strict`` itself on them here also catches a flag missing from that section.
``.ci/run`` type-checks every package (``python -m mypy symcost optimizers hwspecs``).
Skipped where mypy or the stub packages of the ``test`` extra are not installed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: stub packages the core needs (``yaml``); from the ``test`` extra.
STUBS = ("types-PyYAML",)


def strict_modules() -> list[str]:
    """Module patterns of the strict section of ``[tool.mypy]`` in ``pyproject.toml``."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    sections = [o for o in config["tool"]["mypy"]["overrides"]
                if o.get("disallow_untyped_defs") is True]
    assert len(sections) == 1, "expected one strict section in [tool.mypy] overrides"
    modules = sections[0]["module"]
    return [modules] if isinstance(modules, str) else list(modules)


def _mypy_targets(patterns: list[str]) -> list[str]:
    """mypy arguments for module patterns: ``-p pkg`` for ``pkg.*`` (which also covers
    ``pkg`` itself), ``-m mod`` otherwise."""
    packages = [p.removesuffix(".*") for p in patterns if p.endswith(".*")]
    out: list[str] = []
    for p in packages:
        out += ["-p", p]
    for p in patterns:
        if not p.endswith(".*") and p not in packages:
            out += ["-m", p]
    return out


def test_strict_modules_cover_the_core() -> None:
    mods = strict_modules()
    for name in ("symcost.symbols", "symcost.lower", "symcost.training", "symcost.inference",
                 "symcost.params", "symcost.explain", "symcost.functions", "symcost.ops.*",
                 "hwspecs.*"):
        assert name in mods


def test_mypy_strict_on_core(tmp_path: Path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    for dist in STUBS:
        try:
            importlib.metadata.distribution(dist)
        except importlib.metadata.PackageNotFoundError:
            pytest.skip(f"{dist} is not installed (pip install -e '.[test]')")
    cmd = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent",
           "--no-warn-unused-configs", "--cache-dir", str(tmp_path / "mypy-cache"),
           *_mypy_targets(strict_modules())]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"{' '.join(cmd[1:])}\n{proc.stdout}{proc.stderr}"
