"""Print the module import graph of the project: one line per module,
``module -> imported project modules`` (every import, also inside functions; ``[local]`` marks
targets imported only inside a function), then the layer of each module as the import-linter
contract in ``pyproject.toml`` declares it, and counts of function-local project imports and
of private names imported across modules.

Usage::

    python benchmarks/import_graph.py            # symcost (without the CLI) and hwspecs
    python benchmarks/import_graph.py --all      # also symcost.cli and optimizers

Reads the sources with :mod:`ast`; imports nothing of the project. No assertions: the checks
are ``tests/test_layers.py``.
"""

from __future__ import annotations

import argparse
import ast
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PROJECT = ("symcost", "optimizers", "hwspecs")


def modules(include_all: bool) -> list[str]:
    """Dotted names of the modules to show."""
    out = []
    for pkg in PROJECT if include_all else ("symcost", "hwspecs"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            rel = path.relative_to(REPO).with_suffix("")
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            name = ".".join(parts)
            if include_all or not name.startswith("symcost.cli"):
                out.append(name)
    return out


def source(mod: str) -> Path:
    """Path of module ``mod``."""
    path = REPO / Path(*mod.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def is_module(name: str) -> bool:
    """True when ``name`` is a module or package of the project."""
    path = REPO / Path(*name.split("."))
    return path.is_dir() or path.with_suffix(".py").is_file()


def project_imports(mod: str) -> tuple[dict[str, bool], list[str]]:
    """``({imported project module: imported only inside functions}, [private names
    imported from another module])`` of module ``mod``."""
    path = source(mod)
    package = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    found: dict[str, bool] = {}
    private: list[str] = []

    def add(target: str, nested: bool) -> None:
        if target != mod and target.split(".")[0] in PROJECT:
            found[target] = found.get(target, True) and nested

    def visit(node: ast.AST, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = nested or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                 ast.ClassDef, ast.Lambda))
            if isinstance(child, ast.Import):
                for a in child.names:
                    add(a.name, nested)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package[:len(package) - (child.level - 1)]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                subs = [f"{target}.{a.name}" for a in child.names
                        if is_module(f"{target}.{a.name}")]
                for t in subs or [target]:
                    add(t, nested)
                if target.split(".")[0] in PROJECT and target != mod:
                    private.extend(f"{target}.{a.name}" for a in child.names
                                   if a.name.startswith("_") and not a.name.startswith("__"))
            visit(child, inner)

    visit(ast.parse(path.read_text(encoding="utf-8")), False)
    return found, private


def layers() -> list[str]:
    """The layers of the import-linter contract (top first)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    for c in config.get("tool", {}).get("importlinter", {}).get("contracts", []):
        if c.get("type") == "layers":
            return list(c["layers"])
    return []


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="also symcost.cli and optimizers")
    args = parser.parse_args()
    n_local, privates = 0, []
    print("# module -> imported project modules ([local]: only inside a function)")
    for mod in modules(args.all):
        found, private = project_imports(mod)
        n_local += sum(found.values())
        privates += [f"{mod}: {p}" for p in private]
        targets = ", ".join(f"{t} [local]" if nested else t for t, nested in sorted(found.items()))
        print(f"{mod} -> {targets}")
    print("\n# layers (pyproject.toml [tool.importlinter]), top to bottom")
    for i, layer in enumerate(layers()):
        print(f"{i:2d}  {layer}")
    print(f"\n# project modules imported only inside functions: {n_local}")
    print(f"# private names imported across modules: {len(privates)}")
    for p in privates:
        print(f"#   {p}")


if __name__ == "__main__":
    main()
