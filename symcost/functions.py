"""SymPy functions the cost model needs that SymPy does not have in a lowering-safe form."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import sympy as sp


# SymPy ships no type information, so its classes are ``Any`` to mypy.
class CeilDiv(sp.Function):  # type: ignore[misc]  # subclassing Any: sympy is untyped
    """Exact integer ceiling division ``ceil(a / b)`` for positive integer-valued ``a``, ``b``.

    SymPy's ``cse`` rewrites ``ceiling(a/b)`` as ``ceiling(a*b**-1)``, which in floating point
    is wrong for some pairs (``ceil(21*(1/7)) == 4``; ``shared/engineering-notes.md`` trap 5).
    Kept opaque, it is printed as ``ceil(a / b)`` with a true division, which IEEE-754 rounds
    correctly, so the result is exact for integers below 2**24 (float32) or 2**53 (float64).
    """

    is_real = True
    is_positive = True

    @classmethod
    def eval(cls, a: sp.Expr, b: sp.Expr) -> sp.Expr | None:
        if a.is_Integer and b.is_Integer:
            return sp.Integer(-(-int(a) // int(b)))
        if b == 1:
            return a
        return None

    def _eval_evalf(self, prec: int) -> sp.Expr | None:
        a, b = (x.evalf(prec) for x in self.args)
        if a.is_Number and b.is_Number:
            return sp.ceiling(a / b).evalf(prec)
        return None


def flag(cond: sp.Basic | bool) -> sp.Piecewise:
    """1 where the SymPy condition ``cond`` holds, else 0."""
    return sp.Piecewise((sp.Integer(1), cond), (sp.Integer(0), True))


def smax(*args: sp.Expr) -> sp.Expr:
    """``Max`` without SymPy's zero-finding simplification (which costs seconds on large
    arguments); it evaluates normally once numbers are substituted."""
    return sp.Max(*args, evaluate=False)


def smin(*args: sp.Expr) -> sp.Expr:
    """``Min`` without SymPy's simplification; see :func:`smax`."""
    return sp.Min(*args, evaluate=False)


def replace_symbols(expr: sp.Expr, mapping: Mapping[sp.Basic, sp.Expr],
                    _memo: dict[sp.Basic, sp.Expr] | None = None) -> sp.Expr:
    """``expr`` with the symbols of ``mapping`` replaced, rebuilding ``Max``/``Min`` with
    ``evaluate=False`` (``xreplace`` re-evaluates them, and SymPy's zero-finding on large
    arguments takes tens of seconds; see :func:`symcost.functions.smax`)."""
    return _replace(expr, mapping, {} if _memo is None else _memo, False)


def xreplace_shared(expr: sp.Basic, mapping: Mapping[sp.Basic, sp.Basic],
                    memo: dict[sp.Basic, sp.Basic] | None = None) -> sp.Basic:
    """``expr.xreplace(mapping)``, visiting each distinct subexpression once.

    SymPy's ``xreplace`` walks the expression as a tree, so a subexpression shared by many
    terms (the cost formulas share most of theirs) is rebuilt and re-evaluated once per
    occurrence; here each distinct node is rebuilt once, and ``memo`` (pass the same dict
    for several expressions over the same ``mapping``) carries the work across expressions.
    The result equals ``expr.xreplace(mapping)``: the same nodes rebuilt with the same SymPy
    evaluation (``Max``, ``Piecewise`` and :class:`CeilDiv` of numbers evaluate). Substituting
    numbers for every symbol of a training formula takes ~0.03 s instead of ~16 s.

    Args:
        expr: a SymPy expression.
        mapping: subexpression -> replacement (typically symbol -> number).
        memo: cache of rebuilt nodes for this ``mapping``; updated in place.
    """
    return _replace(expr, mapping, {} if memo is None else memo, True)


def free_symbols_shared(exprs: Iterable[sp.Basic]) -> set[sp.Symbol]:
    """The symbols free in ``exprs``: ``set().union(*(e.free_symbols for e in exprs))``,
    visiting each distinct subexpression once.

    SymPy's ``free_symbols`` walks an expression as a tree, so a subexpression shared by many
    terms is walked once per occurrence: ~10 s for the training formulas, against a few
    milliseconds here. A node that binds symbols (``Lambda``, ``Integral``, ``Sum``) defers to
    its own ``free_symbols``.

    Args:
        exprs: SymPy expressions (or values :func:`sympy.sympify` accepts).

    Returns:
        The set of free :class:`sympy.Symbol` s.
    """
    seen: set[int] = set()
    out: set[sp.Symbol] = set()
    stack: list[sp.Basic] = [sp.sympify(e) for e in exprs]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, sp.Symbol):
            out.add(node)
        elif getattr(node, "bound_symbols", None):
            out |= node.free_symbols
        else:
            stack.extend(node.args)
    return out


def _replace(expr: sp.Basic, mapping: Mapping[sp.Basic, sp.Basic],
             memo: dict[sp.Basic, sp.Basic], evaluate_extrema: bool) -> sp.Basic:
    """Memoized ``xreplace``; with ``evaluate_extrema`` False, ``Max``/``Min`` are rebuilt
    unevaluated."""
    hit = memo.get(expr)
    if hit is not None:
        return hit
    if expr in mapping:
        out = mapping[expr]
    elif not expr.args:
        out = expr
    else:
        args = [_replace(a, mapping, memo, evaluate_extrema) for a in expr.args]
        if all(x is y for x, y in zip(args, expr.args)):
            out = expr
        elif not evaluate_extrema and isinstance(expr, (sp.Max, sp.Min)):
            out = expr.func(*args, evaluate=False)
        else:
            out = expr.func(*args)
    memo[expr] = out
    return out
