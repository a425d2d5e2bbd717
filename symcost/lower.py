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
"""

from __future__ import annotations

import functools
import hashlib
import linecache
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import sympy as sp
from sympy.printing.numpy import JaxPrinter

from .functions import CeilDiv

DTYPES = ("float32", "float64")


class LoweringError(ValueError):
    """An expression cannot be lowered (e.g. a free symbol that is not an input)."""


class _Printer(JaxPrinter):
    """JAX printer with exact, branch-safe forms for the constructs the cost model uses."""

    def __init__(self):
        super().__init__({"fully_qualified_modules": False, "inline": True,
                          "allow_unknown_functions": False})

    def _module(self, name):
        return f"jnp.{name}"

    def _print_Integer(self, expr):
        return repr(float(int(expr)))

    def _print_Rational(self, expr):
        return f"({float(expr.p)!r} / {float(expr.q)!r})"

    def _print_Float(self, expr):
        return repr(float(expr))

    def _print_Half(self, expr):
        return "0.5"

    def _print_One(self, expr):
        return "1.0"

    def _print_Zero(self, expr):
        return "0.0"

    def _print_NegativeOne(self, expr):
        return "-1.0"

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"

    def _print_Piecewise(self, expr):
        if expr.args[-1].cond != sp.true:
            raise LoweringError("Piecewise without a final True branch cannot be lowered "
                                "safely (it would yield NaN where no branch matches)")
        out = self._print(expr.args[-1].expr)
        for e, c in reversed(expr.args[:-1]):
            out = f"jnp.where({self._print(c)}, {self._print(e)}, {out})"
        return out

    def _nest(self, fn, args):
        it = [self._print(a) for a in args]
        out = it[0]
        for a in it[1:]:
            out = f"jnp.{fn}({out}, {a})"
        return out

    def _print_Max(self, expr):
        return self._nest("maximum", expr.args)

    def _print_Min(self, expr):
        return self._nest("minimum", expr.args)

    def _print_CeilDiv(self, expr):
        a, b = expr.args
        return f"jnp.ceil(({self._print(a)}) / ({self._print(b)}))"

    def _print_ceiling(self, expr):
        return f"jnp.ceil({self._print(expr.args[0])})"

    def _print_floor(self, expr):
        return f"jnp.floor({self._print(expr.args[0])})"

    def _print_Relational(self, expr):
        ops = {"<": "jnp.less", "<=": "jnp.less_equal", ">": "jnp.greater",
               ">=": "jnp.greater_equal", "==": "jnp.equal", "!=": "jnp.not_equal"}
        return f"{ops[expr.rel_op]}({self._print(expr.lhs)}, {self._print(expr.rhs)})"

    def _print_And(self, expr):
        return self._nest("logical_and", expr.args)

    def _print_Or(self, expr):
        return self._nest("logical_or", expr.args)

    def _print_Not(self, expr):
        return f"jnp.logical_not({self._print(expr.args[0])})"

    def _print_Pow(self, expr, rational=False):
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


def _prepare(expr: sp.Expr) -> sp.Expr:
    """Make an expression safe to print: evaluate numbers, keep CeilDiv opaque."""
    return sp.sympify(expr)


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
    _fn: object = field(repr=False)
    _jitted: object = field(repr=False)

    @property
    def input_names(self) -> tuple[str, ...]:
        """Names of the input symbols, in positional order."""
        return tuple(s.name for s in self.inputs)

    def _args(self, args, kwargs):
        import jax.numpy as jnp

        if args and kwargs:
            raise TypeError("pass inputs either positionally or by name, not both")
        if kwargs:
            missing = [n for n in self.input_names if n not in kwargs]
            if missing:
                raise TypeError(f"missing inputs: {', '.join(missing)}")
            extra = set(kwargs) - set(self.input_names)
            if extra:
                raise TypeError(f"unknown inputs: {', '.join(sorted(extra))}")
            args = [kwargs[n] for n in self.input_names]
        if len(args) != len(self.inputs):
            raise TypeError(f"expected {len(self.inputs)} inputs, got {len(args)}")
        dt = jnp.float64 if self.dtype == "float64" else jnp.float32
        return [jnp.asarray(np.asarray(a, dtype=np.float64), dtype=dt) for a in args]

    def __call__(self, *args, **kwargs) -> dict[str, np.ndarray]:
        """Evaluate; returns ``{output name: numpy array}`` (broadcast shape of the inputs)."""
        import jax

        with jax.enable_x64(self.dtype == "float64"):
            vals = self._jitted(*self._args(args, kwargs))
            return {k: np.asarray(v) for k, v in zip(self.outputs, vals)}

    def call_jax(self, *args):
        """Evaluate on JAX arrays without conversion (for ``jax.grad``/``vmap``); returns a tuple
        in :attr:`outputs` order. The caller manages ``jax.enable_x64``."""
        return self._fn(*args)

    def evaluate_sympy(self, values: Mapping[sp.Symbol, float]) -> dict[str, float]:
        """Reference evaluation in SymPy at one point (slow; for tests and ``explain``)."""
        subs = {s: sp.Float(values[s], 30) for s in self.inputs}
        return {k: float(e.subs(subs).evalf(30)) for k, e in self.expressions.items()}


def _generate(exprs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol]) -> str:
    names = list(exprs)
    prepared = [_prepare(exprs[n]) for n in names]
    free = set().union(*(e.free_symbols for e in prepared)) if prepared else set()
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


@functools.lru_cache(maxsize=64)
def _compile(key: str, source: str):
    import jax
    import jax.numpy as jnp

    filename = f"<symcost-lowered-{key[:12]}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict = {"jnp": jnp}
    exec(compile(source, filename, "exec"), namespace)  # noqa: S102 - generated by _generate
    fn = namespace["_model"]
    return fn, jax.jit(fn)


def lower(exprs: Mapping[str, sp.Expr], inputs: Sequence[sp.Symbol],
          dtype: str = "float32") -> CompiledModel:
    """Lower output expressions to one jit-compiled JAX function.

    Args:
        exprs: mapping output name -> SymPy expression; every free symbol must be in ``inputs``.
        inputs: the input symbols, in positional order.
        dtype: ``float32`` (fast sweeps and ranking) or ``float64`` (reference accuracy).

    Returns:
        A :class:`CompiledModel`. Lowering the same expressions and inputs again reuses the
        compiled function (cached by a hash of the generated source and dtype).

    Raises:
        LoweringError: a free symbol is not an input, or a ``Piecewise`` lacks a final
            ``True`` branch.
        ValueError: unknown dtype.
    """
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    inputs = tuple(inputs)
    source = _generate_cached(tuple(exprs.items()), inputs)
    key = hashlib.sha1((source + dtype).encode()).hexdigest()
    fn, jitted = _compile(key, source)
    return CompiledModel(inputs, tuple(exprs), dict(exprs), dtype, source, fn, jitted)


@functools.lru_cache(maxsize=64)
def _generate_cached(items: tuple, inputs: tuple) -> str:
    return _generate(dict(items), inputs)


__all__ = ["CompiledModel", "LoweringError", "lower", "CeilDiv"]
