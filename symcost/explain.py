"""Formula inspection: any output's or operator's cost as a formula in the symbols you name.

:func:`explain` takes the SymPy expression of a training output (``step_time``, ``mfu``,
``mem_total``, any ``time_*``/``mem_*`` term, ...) or of one operator's per-step time
(:func:`symcost.bottleneck.operator_times`: ``qkv_proj``, ``attention``, ``tp_comm``, ...),
substitutes the configuration's values for every symbol except those in ``keep``, and returns
a :class:`Formula` that prints as text, LaTeX, or displays itself in a notebook
(``_repr_latex_``/``_repr_markdown_``). Mode flags that are substituted select their
``Piecewise`` branch, so only the active branch of the formula remains.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy as sp

from hwspecs import HardwareSpec

from .api import prepare_training
from .bottleneck import operator_times
from .config import TrainingConfig
from .models import ModelSpec
from .params import Params
from .substitution import DIGITS, ExplainError, keep_symbols, substitute
from .training import training_expressions

#: widest 2-D pretty form :meth:`Formula.text` prints (else one line).
PRETTY_WIDTH = 160


def formula_names() -> dict[str, list[str]]:
    """Names :func:`explain` accepts: ``{"outputs": [...], "operators": [...]}``."""
    return {"outputs": list(training_expressions()), "operators": list(operator_times())}


def expression(name: str) -> sp.Expr:
    """The SymPy expression of output or operator ``name`` (all symbols free).

    Raises:
        ExplainError: unknown name.
    """
    exprs = training_expressions()
    if name in exprs:
        return exprs[name]
    ops = operator_times()
    if name in ops:
        return ops[name][0]
    known = formula_names()
    raise ExplainError(f"name: unknown formula {name!r}; outputs: "
                       f"{', '.join(known['outputs'])}; operators: "
                       f"{', '.join(known['operators'])}")


@dataclass
class Formula:
    """A formula with some symbols substituted.

    Attributes:
        name: output or operator name.
        expr: the SymPy expression (kept symbols free, numbers rounded to :data:`DIGITS`
            significant digits).
        keep: names of the symbols left free.
        value: the formula's value at the configuration (base units), or None.
        unit: unit of the value (``s``, ``bytes``, ``1``, ...).
        substituted: symbol name -> value used for the others.
    """

    name: str
    expr: sp.Expr
    keep: tuple[str, ...]
    value: float | None = None
    unit: str = ""
    substituted: dict[str, float] = field(default_factory=dict, repr=False)

    def text(self, width: int = PRETTY_WIDTH) -> str:
        """Pretty (2-D unicode) text; one-line ``sstr`` form when the 2-D form is wider than
        ``width`` characters."""
        pretty = sp.pretty(self.expr, use_unicode=True, wrap_line=False)
        if max(len(line) for line in pretty.splitlines()) <= width:
            return f"{self.name} =\n{pretty}"
        return f"{self.name} = {sp.sstr(self.expr)}"

    def latex(self) -> str:
        """LaTeX source of ``name = expr`` (no surrounding ``$``); symbols print as their
        names (``\\mathit{hbm\\_bw}``)."""
        names = {s: f"\\mathit{{{_tex_name(s.name)}}}" for s in self.expr.free_symbols}
        return (f"\\mathrm{{{_tex_name(self.name)}}} = "
                f"{sp.latex(self.expr, symbol_names=names)}")

    def __str__(self) -> str:
        return f"{self.name} = {sp.sstr(self.expr)}"

    def _repr_latex_(self) -> str:
        return f"$\\displaystyle {self.latex()}$"

    def _repr_markdown_(self) -> str:
        val = f" ({self.value:.4g} {self.unit} here)" if self.value is not None else ""
        kept = ", ".join(self.keep) if self.keep else "none"
        return (f"**{self.name}**{val}, free symbols: {kept}\n\n"
                f"$$ {self.latex()} $$")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: name, text (``sstr``), latex, keep, value, unit."""
        return {"name": self.name, "formula": sp.sstr(self.expr), "latex": self.latex(),
                "keep": list(self.keep), "value": self.value, "unit": self.unit}


def _tex_name(name: str) -> str:
    return name.replace("_", "\\_")


def _unit(name: str) -> str:
    if name.startswith("time_") or name == "step_time" or name not in _OUTPUT_UNITS:
        return _OUTPUT_UNITS.get(name, "s")
    return _OUTPUT_UNITS[name]


_OUTPUT_UNITS = {"tokens_per_s": "tokens/s", "mfu": "1", "hfu": "1", "flops_model": "FLOP",
                 "flops_hardware": "FLOP", "params_total": "parameters", "num_gpus": "GPUs",
                 "mem_weights": "bytes", "mem_gradients": "bytes", "mem_optimizer": "bytes",
                 "mem_activations": "bytes", "mem_total": "bytes", "mem_usable": "bytes",
                 "mem_headroom": "bytes", "mem_cached": "bytes"}


def explain(name: str, model: ModelSpec | str | os.PathLike[str],
            hardware: HardwareSpec | str | os.PathLike[str],
            config: TrainingConfig | None = None, params: Params | None = None,
            keep: Sequence[str] = (), **config_fields: Any) -> Formula:
    """The formula of ``name`` at one configuration with only ``keep`` left symbolic.

    Args:
        name: a training output (``step_time``, ``mfu``, ``mem_total``, ...) or an operator
            (``qkv_proj``, ``attention``, ``tp_comm``, ...); see :func:`formula_names`.
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        config: :class:`~symcost.config.TrainingConfig`, or its fields as keywords.
        params: efficiency parameters; the shipped calibration when None.
        keep: names to leave free: configuration fields (``tp``, ``layers``, ``zero``, ...;
            each stands for the symbol it binds) or symbols (``n_layers``, ``hbm_bw``, ...);
            see :func:`symcost.substitution.keep_symbols`.

    Returns:
        :class:`Formula`; with ``keep`` empty, the formula is the number itself.

    Raises:
        ExplainError: unknown name or symbol.
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid configuration.
    """
    expr = expression(name)
    keep = tuple(dict.fromkeys(k.strip() for k in keep if k.strip()))
    kept = {s.name for s in keep_symbols(keep)}
    m, hw, cfg, values = prepare_training(model, hardware, config, params,
                                          **config_fields)
    full = substitute(expr, values, ())
    try:
        value = float(full)
    except TypeError:
        value = None
    out = substitute(expr, values, keep) if keep else sp.Float(value, DIGITS) \
        if value is not None else full
    return Formula(name, out, keep, value, _unit(name),
                   {k: v for k, v in values.items() if k not in kept})


__all__ = ["ExplainError", "Formula", "explain", "expression", "formula_names", "substitute"]
