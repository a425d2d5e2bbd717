"""Configuration values substituted into cost formulas, with chosen symbols left free.

The one implementation behind :func:`symcost.explain.explain`,
:meth:`symcost.api.TrainingResult.formula` and :meth:`symcost.infer_api.InferenceResult.formula`.

Names to keep free are read in the one configuration vocabulary: a field name of
:data:`~symcost.fields.TRAINING_FIELDS`, :data:`~symcost.fields.MODEL_FIELDS` or
:data:`~symcost.fields.INFERENCE_FIELDS` (``layers``, ``zero``, ``sp``, ``flash_attention``,
...) stands for the symbol the field binds (:attr:`symcost.fields.Field.symbol`); any other name
must be a symbol of :data:`symcost.symbols.REGISTRY` (the formula's own names, ``n_layers``,
``zero_stage``, ``hbm_bw``, ...).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import sympy as sp

from . import symbols as S
from .fields import INFERENCE_FIELDS, MODEL_FIELDS, TRAINING_FIELDS
from .functions import free_symbols_shared, xreplace_shared

#: significant digits of substituted numbers in printed formulas.
DIGITS = 4


class ExplainError(ValueError):
    """Unknown formula name, field or symbol; the message lists what is known."""


@functools.lru_cache(maxsize=1)
def field_symbols() -> dict[str, str]:
    """Field name -> name of the symbol it binds, for every field of the training, model and
    inference tables that binds one (``layers`` -> ``n_layers``, ``zero`` -> ``zero_stage``,
    ``tp`` -> ``tp``). Fields bound through derived values (``num_gpus``, ``dtype``) have no
    entry."""
    out: dict[str, str] = {}
    for table in (TRAINING_FIELDS, MODEL_FIELDS, INFERENCE_FIELDS):
        for name, f in table.items():
            if f.symbol is not None:
                out[name] = f.symbol
    return out


def keep_symbols(keep: Sequence[str]) -> list[sp.Symbol]:
    """The symbols named by ``keep``: field names (see :func:`field_symbols`) or symbol names.

    Args:
        keep: names; surrounding blanks are ignored.

    Returns:
        One SymPy symbol per name, in order.

    Raises:
        ExplainError: a name that is neither a field binding a symbol nor a symbol, or a
            field that binds none (``num_gpus``, ``dtype``); the message lists both
            vocabularies.
    """
    fields = field_symbols()
    out = []
    for k in keep:
        name = k.strip()
        sym = fields.get(name, name)
        if sym not in S.REGISTRY:
            known = (f"fields: {', '.join(sorted(fields))}; symbols: "
                     f"{', '.join(S.REGISTRY)}")
            if any(name in t for t in (TRAINING_FIELDS, MODEL_FIELDS, INFERENCE_FIELDS)):
                raise ExplainError(f"keep: field {name!r} binds no symbol of its own (its "
                                   f"value enters through derived symbols); {known}")
            raise ExplainError(f"keep: unknown name {k!r} (neither a configuration field nor "
                               f"a symbol); {known}")
        out.append(S.REGISTRY[sym].symbol)
    return out


def substitute(expr: sp.Expr, values: Mapping[str, float], keep: Sequence[str] = ()
               ) -> sp.Expr:
    """``expr`` with every symbol not in ``keep`` replaced by ``values`` (by symbol name).

    Mode flags are substituted exactly (integers), so ``Piecewise`` branches on them
    resolve; other values become Floats. With ``keep`` non-empty, numbers are rounded to
    :data:`DIGITS` significant digits (for printing).

    Args:
        expr: a SymPy expression over :mod:`symcost.symbols`.
        values: symbol name -> value in base units; symbols without a value stay free.
        keep: names (fields or symbols, see :func:`keep_symbols`) to leave free.

    Raises:
        ExplainError: unknown name in ``keep``.
    """
    kept = set(keep_symbols(keep))
    subs = {}
    for s in free_symbols_shared([expr]):
        if s in kept or s.name not in values:
            continue
        v = values[s.name]
        subs[s] = sp.Integer(int(v)) if float(v).is_integer() and abs(v) < 2**53 else \
            sp.Float(v, 15)
    out: sp.Expr = xreplace_shared(expr, subs)
    if not kept:
        return out
    out = out.evalf(DIGITS)
    # 2.0*tp - 2.0 -> 2*tp - 2: small integral floats print as integers
    return out.xreplace({f: sp.Integer(int(f)) for f in out.atoms(sp.Float)
                         if float(f).is_integer() and abs(f) < 1e4})


def formula_with(expr: sp.Expr, inputs: Mapping[str, float],
                 keep: Sequence[str] | None) -> sp.Expr:
    """``expr`` with the symbols not named in ``keep`` replaced, unrounded, by ``inputs``;
    ``expr`` itself when ``keep`` is None (every symbol kept). What the ``formula`` methods
    of the result objects return.

    Raises:
        ExplainError: unknown name in ``keep``.
    """
    if keep is None:
        return expr
    kept = {s.name for s in keep_symbols(keep)}
    return substitute(expr, {k: v for k, v in inputs.items() if k not in kept})


__all__ = ["DIGITS", "ExplainError", "field_symbols", "formula_with", "keep_symbols",
           "substitute"]
