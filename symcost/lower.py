"""Lowering: SymPy expressions -> one jit-compiled JAX function over broadcast arrays.

One call of :func:`lower` turns a mapping of output expressions into a
:class:`CompiledModel`: common subexpressions are shared (``sympy.cse``), the result is
printed as JAX source, and jit-compiled once per dtype. Traps handled (see
``shared/engineering-notes.md``):

1. ``Piecewise`` is printed as nested ``jnp.where`` ending in its ``True`` branch (a
   ``Piecewise`` without a final ``True`` branch is rejected), never ``select``.
2. Ceiling division is the opaque :class:`~symcost.functions.CeilDiv`, printed as
   ``ceil(a / b)`` with a true division, so ``cse`` cannot rewrite it as ``a * b**-1``.
3. Integer literals are printed as float literals (no int32 overflow, no ``OverflowError``).
4. Inputs are always cast to the float dtype (configurations are passed as floats).
5. ``float64`` mode runs under ``jax.enable_x64``; ``float32`` is the default for sweeps.

The generated source is cached on disk (``cse`` plus printing costs ~0.5-1 s for the training
model), keyed by :func:`expression_key`: a SHA-256 over the expressions' structure, the input
names, the SymPy version and this file's own bytes, so any change of an expression, of the
inputs or of the printer gives a new key. The directory is :func:`cache_dir`
(``$SYMCOST_CACHE_DIR``, else ``$XDG_CACHE_HOME/symcost`` or ``~/.cache/symcost``; set
``SYMCOST_CACHE_DIR=off`` to disable). An unreadable or unwritable cache is ignored silently.
"""

from __future__ import annotations

import functools
import hashlib
import linecache
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, cast, overload

import numpy as np
import sympy as sp
from numpy.typing import ArrayLike, NDArray
from sympy.printing.numpy import JaxPrinter

from .functions import CeilDiv, free_symbols_shared, xreplace_shared

# jax is imported inside the functions that use it, so that importing this module (and
# ``symcost --help``) does not load it, and ``call_numpy`` never does.
if TYPE_CHECKING:
    import jax

DTYPES = ("float32", "float64")

#: the generated function: one array per input -> a tuple of arrays, one per output.
ModelFunction = Callable[..., tuple[Any, ...]]


class LoweringError(ValueError):
    """An expression cannot be lowered (e.g. a free symbol that is not an input)."""


class _Printer(JaxPrinter):  # type: ignore[misc]  # subclassing Any: sympy is untyped
    """JAX printer with exact, branch-safe forms for the constructs the cost model uses."""

    def __init__(self) -> None:
        super().__init__({"fully_qualified_modules": False, "inline": True,
                          "allow_unknown_functions": False})

    def _module(self, name: str) -> str:
        return f"jnp.{name}"

    def _module_format(self, fqn: str, register: bool = True) -> str:
        # every numeric function is taken from ``jnp`` (``jax.numpy.exp`` -> ``jnp.exp``)
        return "jnp." + fqn.split(".")[-1] if fqn.startswith(("jax.numpy.", "numpy.")) else fqn

    def _print_Integer(self, expr: sp.Basic) -> str:
        return repr(float(int(expr)))

    def _print_Rational(self, expr: sp.Basic) -> str:
        return f"({float(expr.p)!r} / {float(expr.q)!r})"

    def _print_Float(self, expr: sp.Basic) -> str:
        return repr(float(expr))

    def _print_Half(self, expr: sp.Basic) -> str:
        return "0.5"

    def _print_One(self, expr: sp.Basic) -> str:
        return "1.0"

    def _print_Zero(self, expr: sp.Basic) -> str:
        return "0.0"

    def _print_NegativeOne(self, expr: sp.Basic) -> str:
        return "-1.0"

    def _print_BooleanTrue(self, expr: sp.Basic) -> str:
        return "True"

    def _print_BooleanFalse(self, expr: sp.Basic) -> str:
        return "False"

    def _print_Piecewise(self, expr: sp.Basic) -> str:
        if expr.args[-1].cond != sp.true:
            raise LoweringError("Piecewise without a final True branch cannot be lowered "
                                "safely (it would yield NaN where no branch matches)")
        out: str = self._print(expr.args[-1].expr)
        for e, c in reversed(expr.args[:-1]):
            out = f"jnp.where({self._print(c)}, {self._print(e)}, {out})"
        return out

    def _nest(self, fn: str, args: Sequence[sp.Basic]) -> str:
        it: list[str] = [self._print(a) for a in args]
        out = it[0]
        for a in it[1:]:
            out = f"jnp.{fn}({out}, {a})"
        return out

    def _print_Max(self, expr: sp.Basic) -> str:
        return self._nest("maximum", expr.args)

    def _print_Min(self, expr: sp.Basic) -> str:
        return self._nest("minimum", expr.args)

    def _print_CeilDiv(self, expr: sp.Basic) -> str:
        a, b = expr.args
        return f"jnp.ceil(({self._print(a)}) / ({self._print(b)}))"

    def _print_ceiling(self, expr: sp.Basic) -> str:
        return f"jnp.ceil({self._print(expr.args[0])})"

    def _print_floor(self, expr: sp.Basic) -> str:
        return f"jnp.floor({self._print(expr.args[0])})"

    def _print_Relational(self, expr: sp.Basic) -> str:
        ops = {"<": "jnp.less", "<=": "jnp.less_equal", ">": "jnp.greater",
               ">=": "jnp.greater_equal", "==": "jnp.equal", "!=": "jnp.not_equal"}
        return f"{ops[expr.rel_op]}({self._print(expr.lhs)}, {self._print(expr.rhs)})"

    def _print_And(self, expr: sp.Basic) -> str:
        return self._nest("logical_and", expr.args)

    def _print_Or(self, expr: sp.Basic) -> str:
        return self._nest("logical_or", expr.args)

    def _print_Not(self, expr: sp.Basic) -> str:
        return f"jnp.logical_not({self._print(expr.args[0])})"

    def _print_Pow(self, expr: sp.Pow, rational: bool = False) -> str:
        base, e = expr.args
        if e.is_Integer:
            ei = int(e)
            if ei == -1:
                return f"(1.0 / {self.parenthesize(base, 1000)})"
            if ei < 0:
                return f"(1.0 / ({self.parenthesize(base, 1000)} ** {-ei}))"
            return f"({self.parenthesize(base, 1000)} ** {ei})"
        if e == sp.Rational(1, 2):
            return f"jnp.sqrt({self._print(base)})"
        return f"jnp.power({self._print(base)}, {self._print(e)})"


@dataclass
class CompiledModel:
    """A set of output expressions lowered to one jit-compiled JAX function.

    Call it with one array (or scalar) per input symbol, by keyword (symbol name) or
    positionally in :attr:`inputs` order; arrays broadcast. It returns a dict name -> array.

    Attributes:
        inputs: input symbols, in positional order.
        outputs: output names, in order.
        expressions: the SymPy expressions, by output name.
        dtype: ``float32`` or ``float64``.
        source: the generated JAX source (for inspection).
    """

    inputs: tuple[sp.Symbol, ...]
    outputs: tuple[str, ...]
    expressions: dict[str, sp.Expr]
    dtype: str
    source: str
    key: str = field(repr=False)

    @property
    def _fn(self) -> ModelFunction:
        return _jax_functions(self.key, self.source)[0]

    @property
    def _jitted(self) -> ModelFunction:
        return _jax_functions(self.key, self.source)[1]

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the input symbols, in positional order."""
        return tuple(s.name for s in self.inputs)

    def _check_names(self, kwargs: Mapping[str, ArrayLike]) -> None:
        missing = [n for n in self.input_names if n not in kwargs]
        if missing:
            raise TypeError(f"missing inputs: {', '.join(missing)}")
        extra = set(kwargs) - set(self.input_names)
        if extra:
            raise TypeError(f"unknown inputs: {', '.join(sorted(extra))}")

    def _ordered(self, args: Sequence[ArrayLike],
                 kwargs: Mapping[str, ArrayLike]) -> list[ArrayLike]:
        """Inputs in positional order, from positional or keyword arguments."""
        if args and kwargs:
            raise TypeError("pass inputs either positionally or by name, not both")
        if kwargs:
            self._check_names(kwargs)
            args = [kwargs[n] for n in self.input_names]
        if len(args) != len(self.inputs):
            raise TypeError(f"expected {len(self.inputs)} inputs, got {len(args)}")
        return list(args)

    def _args(self, args: Sequence[ArrayLike],
              kwargs: Mapping[str, ArrayLike]) -> list[jax.Array]:
        import jax.numpy as jnp

        ordered = self._ordered(args, kwargs)
        dt = jnp.float64 if self.dtype == "float64" else jnp.float32
        return [jnp.asarray(np.asarray(a, dtype=np.float64), dtype=dt) for a in ordered]

    def __call__(self, *args: ArrayLike,
                 **kwargs: ArrayLike) -> dict[str, NDArray[np.floating[Any]]]:
        """Evaluate; returns ``{output name: numpy array}`` (broadcast shape of the inputs)."""
        import jax

        with jax.enable_x64(self.dtype == "float64"):
            vals = self._jitted(*self._args(args, kwargs))
            return {k: np.asarray(v) for k, v in zip(self.outputs, vals)}

    def call_numpy(self, *args: ArrayLike,
                   **kwargs: ArrayLike) -> dict[str, NDArray[np.float64]]:
        """Evaluate the same generated source with NumPy in float64 (no JAX import, no compile).

        For single predictions: it answers in microseconds where the first jit call costs a
        second. Values equal the float64 JAX result (same operations in the same order);
        ``where`` evaluates both branches, so floating-point warnings of the branch not taken
        are silenced.
        """
        ordered = self._ordered(args, kwargs)
        fn = _numpy_function(self.key, self.source)
        with np.errstate(all="ignore"):
            vals = fn(*[np.asarray(a, dtype=np.float64) for a in ordered])
        return {k: np.asarray(v) for k, v in zip(self.outputs, vals)}

    def call_jax(self, *args: jax.Array) -> tuple[jax.Array, ...]:
        """Evaluate on JAX arrays without conversion (for ``jax.grad``/``vmap``); returns a tuple
        in :attr:`outputs` order. The caller manages ``jax.enable_x64``."""
        return self._fn(*args)

    def evaluate_sympy(self, values: Mapping[sp.Symbol, float],
                       names: Sequence[str] | None = None) -> dict[str, float]:
        """Reference evaluation in SymPy at one point, with 30-digit floats (for tests and
        ``explain``); ``names`` restricts the outputs evaluated.

        Uses ``xreplace`` (structural replacement, then SymPy's own evaluation of ``Max``,
        ``Piecewise`` and :class:`~symcost.functions.CeilDiv` on numbers), which is ~1000x
        faster than ``subs`` on these expressions, once per distinct subexpression for all
        outputs together (:func:`symcost.functions.xreplace_shared`). Independent of the
        generated source: no ``cse``, no printer.
        """
        repl = {s: sp.Float(values[s], 30) for s in self.inputs}
        memo: dict[sp.Basic, sp.Basic] = {}
        out: dict[str, float] = {}
        for k in names if names is not None else self.outputs:
            v = xreplace_shared(self.expressions[k], repl, memo)
            out[k] = float(v.evalf(30))
        return out


def _generate(exprs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol]) -> str:
    names = list(exprs)
    prepared = [sp.sympify(exprs[n]) for n in names]
    free = free_symbols_shared(prepared)
    unknown = free - set(inputs)
    if unknown:
        raise LoweringError(
            f"free symbols not among the inputs: {', '.join(sorted(s.name for s in unknown))}")
    repl, reduced = sp.cse(prepared, symbols=sp.numbered_symbols("_c"), order="none")
    pr = _Printer()
    arg_names = [f"_x{i}" for i in range(len(inputs))]
    sub = dict(zip(inputs, sp.symbols(arg_names, real=True)))
    lines = [f"def _model({', '.join(arg_names)}):"]
    for sym, e in repl:
        lines.append(f"    {sym} = {pr.doprint(e.xreplace(sub))}")
    outs = []
    for e in reduced:
        code = pr.doprint(sp.sympify(e).xreplace(sub))
        outs.append(code)
    # broadcast every output to the common input shape (constants become arrays)
    lines.append(f"    _shape = jnp.broadcast_shapes({', '.join(f'jnp.shape({a})' for a in arg_names)})")
    lines.append(f"    _like = jnp.zeros(_shape, dtype=jnp.result_type({arg_names[0]}))"
                 if arg_names else "    _like = 0.0")
    lines.append("    return (" + "".join(f"({o}) + _like, " for o in outs) + ")")
    return "\n".join(lines) + "\n"


def _exec_source(key: str, source: str, module: ModuleType) -> ModelFunction:
    filename = f"<symcost-lowered-{key[:12]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {"jnp": module}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - generated by _generate
    return cast(ModelFunction, namespace["_model"])


@functools.lru_cache(maxsize=64)
def _jax_functions(key: str, source: str) -> tuple[ModelFunction, ModelFunction]:
    """(plain function, jitted function) of the generated source, built on first use."""
    import jax
    import jax.numpy as jnp

    fn = _exec_source(key, source, jnp)
    return fn, jax.jit(fn)


@functools.lru_cache(maxsize=64)
def _numpy_function(key: str, source: str) -> ModelFunction:
    """The generated source bound to NumPy instead of ``jax.numpy``."""
    return _exec_source(key, source, np)


def lower(exprs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol],
          dtype: str = "float32") -> CompiledModel:
    """Lower output expressions to one jit-compiled JAX function.

    Args:
        exprs: mapping output name -> SymPy expression; every free symbol must be in ``inputs``.
        inputs: the input symbols, in positional order.
        dtype: ``float32`` (fast sweeps and ranking) or ``float64`` (reference accuracy).

    Returns:
        A :class:`CompiledModel`; JAX tracing and XLA compilation happen at its first call
        (not here), once per dtype and input shape. Lowering the same expressions and inputs
        again reuses the compiled function (cached by a hash of the generated source); the generated
        source is also cached on disk across processes (see :func:`cache_dir`).

    Raises:
        LoweringError: a free symbol is not an input, or a ``Piecewise`` lacks a final
            ``True`` branch.
        ValueError: unknown dtype.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    inputs = tuple(inputs)
    source = _generate_cached(tuple(exprs.items()), inputs)
    key = hashlib.sha1(source.encode()).hexdigest()
    return CompiledModel(inputs, tuple(exprs), dict(exprs), dtype, source, key)


@functools.lru_cache(maxsize=64)
def _generate_cached(items: tuple[tuple[str, sp.Expr], ...],
                     inputs: tuple[sp.Symbol, ...]) -> str:
    exprs = dict(items)
    directory = cache_dir()
    if directory is None:
        return _generate(exprs, inputs)
    key = expression_key(exprs, inputs)
    path = cached_source_path(key, directory)
    source = _read_cached_source(path, key)
    if source is None:
        source = _generate(exprs, inputs)
        _write_cached_source(path, key, source)
    return source


# --- on-disk cache of the generated source --------------------------------------------------

#: bump to invalidate every cached source (the key also covers this file's bytes and SymPy).
_SOURCE_CACHE_VERSION = "1"
_CACHE_ENV = "SYMCOST_CACHE_DIR"
_CACHE_OFF = frozenset({"off", "none", "0", "false", "no"})


def cache_dir() -> Path | None:
    """The user cache directory of symcost (lowered sources; the CLI also keeps JAX's
    compilation cache there), or None when caching is disabled.

    Read at each call: ``$SYMCOST_CACHE_DIR`` (``off``, ``none``, ``0``, ``false`` or ``no``
    disable caching), else ``$XDG_CACHE_HOME/symcost``, else ``~/.cache/symcost``. The
    directory is not created here.
    """
    env = os.environ.get(_CACHE_ENV, "").strip()
    if env:
        return None if env.lower() in _CACHE_OFF else Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    try:
        base = Path(xdg) if xdg else Path.home() / ".cache"
    except (RuntimeError, KeyError):  # no home directory: no cache
        return None
    return base / "symcost"


@overload
def cached_source_path(key: str, directory: Path) -> Path: ...


@overload
def cached_source_path(key: str, directory: Path | None = None) -> Path | None: ...


def cached_source_path(key: str, directory: Path | None = None) -> Path | None:
    """Where the generated source for ``key`` (see :func:`expression_key`) is cached, or None
    when caching is disabled."""
    directory = cache_dir() if directory is None else directory
    return None if directory is None else directory / "lowered" / f"{key}.py"


@functools.lru_cache(maxsize=1)
def _lowerer_fingerprint() -> str:
    try:
        return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
    except OSError:  # e.g. zipped install: fall back to the manual version only
        return "unknown"


def _digest(expr: sp.Basic, memo: dict[sp.Basic, str]) -> str:
    """Structural digest of a SymPy tree; shared subtrees are hashed once (``srepr`` of the
    whole tree would print them again at every use: ~1 s for the training model)."""
    out = memo.get(expr)
    if out is None:
        if expr.args:
            cls = type(expr)
            body = (f"{cls.__module__}.{cls.__qualname__}:{getattr(expr.func, '__name__', '')}("
                    + ",".join(_digest(a, memo) for a in expr.args) + ")")
        else:
            body = sp.srepr(expr)  # atoms: Symbol with assumptions, Integer, Float(precision)
        out = hashlib.blake2b(body.encode(), digest_size=16).hexdigest()
        memo[expr] = out
    return out


def expression_key(exprs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol]) -> str:
    """Cache key of the source :func:`lower` generates for ``exprs`` over ``inputs``.

    Args:
        exprs: output name -> SymPy expression.
        inputs: the input symbols, in positional order.

    Returns:
        64 hex digits: SHA-256 over a cache-format version, the SymPy version, the bytes of
        this module (printer and generator), each output name with a structural digest of its
        expression (class names and atoms' ``srepr``, so any change of an expression changes
        the key), and the inputs' digests in order.
    """
    memo: dict[sp.Basic, str] = {}
    h = hashlib.sha256()
    h.update(f"symcost-lower/{_SOURCE_CACHE_VERSION}/sympy-{sp.__version__}/"
             f"{_lowerer_fingerprint()}\n".encode())
    for name, e in exprs.items():
        h.update(f"{name}={_digest(sp.sympify(e), memo)}\n".encode())
    h.update(("inputs=" + ",".join(_digest(s, memo) for s in inputs)).encode())
    return h.hexdigest()


def _source_header(key: str) -> str:
    return f"# symcost lowered source {key}\n"


_SOURCE_FOOTER = "# end of symcost lowered source\n"


def _read_cached_source(path: Path, key: str) -> str | None:
    """The cached source at ``path`` if it is complete and was written for ``key``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    header = _source_header(key)
    if not (text.startswith(header) and text.endswith(_SOURCE_FOOTER)):
        return None
    return text[len(header):-len(_SOURCE_FOOTER)]


def _write_cached_source(path: Path, key: str, source: str) -> None:
    """Write atomically (temporary file + rename); any OS error leaves no cache, silently."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(_source_header(key) + source + _SOURCE_FOOTER, encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


__all__ = ["CompiledModel", "LoweringError", "lower", "CeilDiv", "cache_dir",
           "cached_source_path", "expression_key"]
