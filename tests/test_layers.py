"""Layering: the core (everything outside ``symcost/cli/``) imports neither rich nor matplotlib,
no core module imports the CLI, modules import downward only (the layers of pyproject.toml),
no project module is imported inside a function, and no private name crosses modules."""

from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CORE_PACKAGES = ("symcost", "optimizers", "hwspecs")


def core_modules() -> list[str]:
    out = []
    for pkg in CORE_PACKAGES:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            if rel.parts[:2] == ("symcost", "cli"):
                continue
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out.append(".".join(parts))
    return out


def test_core_modules_are_found():
    mods = core_modules()
    assert {"symcost.api", "symcost.schema", "symcost.sensitivity", "symcost.bottleneck",
            "symcost.roofline", "optimizers.codesign", "hwspecs"} <= set(mods)
    assert not any(m.startswith("symcost.cli") for m in mods)


def test_core_imports_neither_rich_nor_matplotlib():
    mods = core_modules()
    code = ("import importlib, sys\n"
            f"for m in {mods!r}:\n"
            "    importlib.import_module(m)\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('rich', 'matplotlib', 'typer') or m.startswith('symcost.cli'))\n"
            "print(','.join(bad))\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO),
                                                      os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "", f"the core imported: {proc.stdout.strip()}"


def test_core_sources_do_not_mention_rendering_libraries():
    """Also function-local imports (which a fresh import does not execute)."""
    found = []
    for mod in core_modules():
        path = REPO / Path(*mod.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for n in names:
                head = n.split(".")
                if head[0] in ("rich", "matplotlib") or "cli" in head[:2]:
                    found.append(f"{mod}: {n}")
    # everything renders through symcost.cli
    assert found == []


# ----------------------------------------------------------------------------- layers
# The layer order is written once, as the import-linter contract in pyproject.toml
# ([tool.importlinter], id "layers"); symcost/__init__.py documents it. lint-imports checks it
# where import-linter is installed (the `test` extra); the ast checks below read the same
# contract, so they also run without it, and they cover what import-linter cannot express:
# function-local imports and private names.
INTERNAL = ("symcost", "optimizers", "hwspecs")
#: packages whose imports of private names are checked (optimizers/ is refactored by its own
#: task; add it here when that lands).
PRIVATE_CHECKED = ("symcost", "hwspecs")


def _contract(contract_id: str) -> dict:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts = config["tool"]["importlinter"]["contracts"]
    found = [c for c in contracts if c.get("id") == contract_id]
    assert len(found) == 1, f"expected one import-linter contract with id {contract_id!r}"
    return found[0]


def layers() -> list[tuple[str, list[str]]]:
    """The layers contract, top first: ``(separator, modules)`` per layer (separator ``|``:
    the modules must not import each other; ``:``: they may)."""
    out = []
    for layer in _contract("layers")["layers"]:
        sep = "|" if "|" in layer else ":"
        out.append((sep, [m.strip() for m in layer.split(sep)]))
    return out


def _module_path(mod: str) -> Path:
    path = REPO / Path(*mod.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def all_modules(packages: tuple[str, ...] = INTERNAL) -> list[str]:
    out = []
    for pkg in packages:
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out.append(".".join(parts))
    return out


def imports(mod: str) -> list[tuple[str, list[str], bool, int]]:
    """Every import of module ``mod`` (also inside functions and ``if`` blocks): ``(imported
    module, imported names, inside a function or class, line)``; relative imports resolved."""
    path = _module_path(mod)
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    out: list[tuple[str, list[str], bool, int]] = []

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                 ast.ClassDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names:
                    out.append((a.name, [], nested, child.lineno))
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[:len(package) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                out.append((target, [a.name for a in child.names], nested, child.lineno))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return out


def _is_module(name: str) -> bool:
    path = REPO / Path(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def _targets(target: str, names: list[str]) -> list[str]:
    """Modules an import statement reaches (``from pkg import mod`` reaches ``pkg.mod``)."""
    out = [target]
    out += [f"{target}.{n}" for n in names if _is_module(f"{target}.{n}")]
    return out


def _layer_of(mod: str) -> tuple[int, str] | None:
    """``(layer index from the top, the layer entry)`` of ``mod``: the longest contract entry
    that is ``mod`` or a package containing it."""
    best = None
    for i, (_, entries) in enumerate(layers()):
        for e in entries:
            if (mod == e or mod.startswith(e + ".")) and (best is None or len(e) > len(best[1])):
                best = (i, e)
    return best


def test_every_module_has_a_layer():
    """A new module must be placed in the layer list (else nothing checks its imports)."""
    entries = [e for _, es in layers() for e in es]
    assert len(entries) == len(set(entries))
    missing = [m for m in all_modules() if m not in ("symcost",) and _layer_of(m) is None]
    assert missing == []


def layer_violations(mod: str) -> list[str]:
    """Imports of ``mod`` that break the layers contract: a module imports only from lower
    layers, or from its own layer when the layer's separator is ``:``."""
    tiers = layers()
    here = _layer_of(mod)
    if here is None:
        return []
    bad = []
    for target, names, _, line in imports(mod):
        for t in _targets(target, names):
            there = _layer_of(t)
            if there is None or there[1] == here[1]:
                continue  # outside the project, the package root, or the same entry
            if there[0] < here[0] or (there[0] == here[0] and tiers[here[0]][0] == "|"):
                bad.append(f"{mod}:{line} imports {t} ({there[1]} is not below {here[1]})")
    return bad


def test_imports_go_downward_only():
    """The layers contract, checked with ast (function-local imports included)."""
    assert [v for mod in all_modules() for v in layer_violations(mod)] == []


def test_the_ast_checks_can_fail(tmp_path, monkeypatch):
    """An upward, function-local import written into a low module is reported."""
    src = _module_path("symcost.fields").read_text(encoding="utf-8")
    fake = tmp_path / "fields.py"
    fake.write_text(src + "\n\ndef f():\n    from .api import predict_training\n",
                    encoding="utf-8")
    real = _module_path
    monkeypatch.setattr(sys.modules[__name__], "_module_path",
                        lambda m: fake if m == "symcost.fields" else real(m))
    assert [t for t, _, nested, _ in imports("symcost.fields") if nested] == ["symcost.api"]
    assert len(layer_violations("symcost.fields")) == 1


def test_no_function_local_imports_inside_the_project():
    """No module imports a project module inside a function (such an import used to hide a
    cycle). Function-local imports remain only for heavy third-party packages (jax, pandas,
    scipy, matplotlib) that ``import symcost`` and ``symcost --help`` must not load."""
    bad = [f"{mod}:{line} imports {target}"
           for mod in all_modules(("symcost", "hwspecs"))
           if not mod.startswith("symcost.cli")
           for target, _, nested, line in imports(mod)
           if nested and target.split(".")[0] in INTERNAL]
    assert bad == []


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def test_no_private_names_cross_modules():
    """``from X import _name`` and ``module_alias._name`` only within one module."""
    bad = []
    for mod in all_modules(PRIVATE_CHECKED):
        for target, names, _, line in imports(mod):
            if target.split(".")[0] not in INTERNAL or target == mod:
                continue
            bad += [f"{mod}:{line} imports {target}.{n}" for n in names if _private(n)]
            if _private(target.split(".")[-1]) and target != mod:
                bad.append(f"{mod}:{line} imports private module {target}")
        # attribute access through an imported module: ``T._unfused_forward()``
        tree = ast.parse(_module_path(mod).read_text(encoding="utf-8"))
        aliases = {}
        for target, names, _, _ in imports(mod):
            for n in names:
                if _is_module(f"{target}.{n}"):
                    aliases[n] = f"{target}.{n}"
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for a in node.names:
                    if a.asname and (isinstance(node, ast.Import) or
                                     a.name in aliases):
                        aliases[a.asname] = aliases.get(a.name, a.name)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr)
                    and aliases[node.value.id].split(".")[0] in INTERNAL):
                bad.append(f"{mod}:{node.lineno} uses {aliases[node.value.id]}.{node.attr}")
    assert bad == []


def test_layer_order_is_documented():
    """The docstring of symcost/__init__.py lists the contract's layers, in order."""
    import symcost

    doc = symcost.__doc__ or ""
    pos = -1
    for sep, entries in layers():
        line = f" {sep} ".join(entries)
        assert f"\n    {line}\n" in doc, f"layer not documented: {line}"
        here = doc.find(f"\n    {line}\n")
        assert here > pos, f"layer documented out of order: {line}"
        pos = here


def test_lint_imports():
    """import-linter's own check of the contracts in pyproject.toml."""
    if importlib.util.find_spec("importlinter") is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    # what the ``lint-imports`` script runs, with this interpreter
    code = ("import sys; from importlinter.cli import lint_imports_command; "
            "sys.argv[0] = 'lint-imports'; sys.exit(lint_imports_command())")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [
        str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", code, "--no-cache"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "0 broken" in proc.stdout
