"""Sensitivity of step time, MFU and memory to every parameter: elasticities ``d ln y / d ln x``.

Continuous parameters (:func:`continuous_parameters`: hardware figures, efficiencies and
overheads, and the model sizes ``hidden``, ``ffn_hidden``, ``vocab``, ``seq_len``, which enter
the formulas polynomially and in no ceiling or branch condition) are differentiated with
``jax.vjp`` through the lowered model in float64, and every elasticity is checked against a
central finite difference in log space (step :data:`FD_STEP`, float64). An elasticity ``e``
means: 1 % more ``x`` changes ``y`` by about ``e`` %.

Statuses:

* ``active``: the derivative is non-zero and agrees with the finite difference.
* ``not limiting``: the symbol is in the formula but its derivative is exactly 0 because the
  branch it sits in is inactive (the other side of a roofline ``Max``, an intra-node link
  when the group spans nodes, ...).
* ``not in formula``: the output does not depend on the symbol at all.
* ``kink``: autodiff and the finite difference disagree: the point sits on (or within
  :data:`FD_STEP` of) a ``Max``/``Min`` tie or a branch switch, where ``jax`` picks one side.
* ``zero value``: the parameter is 0 here (an overhead switched off), so its elasticity is 0.

Discrete parameters (``tp``, ``pp``, ``dp``, ``micro_batch``, ``vpp``; ``layers``/
``heads``/``global_batch``/... on request) are never differentiated (``ceil`` has zero
gradient, and only integers are meaningful): each gets the arc elasticity
``(ln y' - ln y)/(ln x' - ln x)`` to its next valid value up and down, found by stepping the
value and testing it with :func:`symcost.config.resolve` (and :class:`ModelSpec`). Changing
``tp``/``pp`` keeps the GPU count when the base gives ``num_gpus`` (``dp`` follows), changing
``dp`` changes the GPU count; the global batch is held fixed.

Everything is evaluated by one jit-compiled function per differentiated expression and
parameter set with a fixed chunk shape, so the point analysis, its finite differences and the
neighbours share one compile, and :func:`elasticities` streams sweeps of any size through it.
A per-step rate ``X / step_time`` (MFU, HFU, tokens/s) is differentiated as its numerator and
the step time (:func:`per_step_numerator`), so the step-time graph compiles once: cold
``symcost sensitivity`` on one configuration took 64 s before, 44 s after (2026-12-07, 2 cores).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import sympy as sp

from hwspecs import HardwareSpec

from . import symbols as S
from .api import prepare_training, training_inputs, training_inputs_symbols, training_model
from .config import ConfigError, TrainingConfig, resolve
from .evaluate import column_source, evaluate_chunks
from .fields import MODEL_FIELDS, TRAINING_FIELDS
from .functions import free_symbols_shared
from .lower import lower
from .models import ModelSpec, ModelSpecError
from .params import Params, load_params
from .schema import OUTPUT_KEYS, SCHEMA_VERSION
from .training import training_expressions

# jax is imported inside the functions that use it, so that importing this module (and
# ``symcost --help``) does not load it.

DEFAULT_OUTPUTS = ("step_time", "mfu", "mem_total")
DEFAULT_DISCRETE = ("tp", "pp", "dp", "micro_batch", "vpp")
#: model sizes treated as continuous (polynomial in the formulas, in no ceiling or condition).
MODEL_CONTINUOUS = ("hidden", "ffn_hidden", "vocab", "seq_len")
#: discrete parameters that may be requested, with the config/model field they change.
DISCRETE_FIELDS = {
    "tp": ("config", "tp"), "pp": ("config", "pp"), "dp": ("config", "dp"),
    "micro_batch": ("config", "micro_batch"), "vpp": ("config", "vpp"),
    "global_batch": ("config", "global_batch"), "layers": ("model", "layers"),
    "heads": ("model", "heads"), "kv_heads": ("model", "kv_heads"),
}


def _discrete_symbol(name: str) -> str:
    """The symbol bound by discrete field ``name`` (``layers`` -> ``n_layers``)."""
    f = TRAINING_FIELDS.get(name) or MODEL_FIELDS[name]
    return f.symbol or name


#: central-difference step in ln x.
FD_STEP = 1e-6
#: agreement of autodiff and finite differences: ``|e_ad - e_fd| <= FD_ATOL + FD_RTOL*|e_fd|``.
FD_ATOL, FD_RTOL = 1e-6, 1e-5
#: rows per compiled call.
DEFAULT_CHUNK = 2**14
#: how far the neighbour search steps (multiples of the value) before giving up.
_MAX_NEIGHBOUR_FACTOR = 8


class SensitivityError(ValueError):
    """Bad sensitivity request (unknown output or parameter); names the argument."""


@functools.lru_cache(maxsize=1)
def continuous_parameters() -> tuple[str, ...]:
    """Names of the parameters differentiated by autodiff, in symbol-declaration order:
    non-discrete ``hardware`` and ``efficiency`` symbols the training model uses, and
    :data:`MODEL_CONTINUOUS`."""
    used = {s.name for s in training_inputs_symbols()}
    out = []
    for name, info in S.REGISTRY.items():
        if name not in used:
            continue
        if (info.kind in ("hardware", "efficiency") and not info.discrete) or \
                name in MODEL_CONTINUOUS:
            out.append(name)
    return tuple(out)


# ----------------------------------------------------------------------------- compiled
def per_step_numerator(output: str) -> sp.Expr | None:
    """``output * step_time`` when ``output`` is a per-step rate ``X / step_time`` whose
    ``step_time`` factor cancels symbolically (``mfu``, ``hfu``, ``tokens_per_s``: model FLOPs,
    hardware FLOPs or tokens per step over the step time), else None (``step_time`` itself,
    memory, the time components).

    Since ``ln(X / T) = ln X - ln T``, such an output's elasticities are ``X``'s minus the step
    time's, exactly; ``X`` is a small expression, so :func:`elasticities` differentiates it
    and the step time instead of a second copy of the step-time graph (one reverse pass
    through the model less to compile).

    Args:
        output: a training output (a key of :func:`symcost.training.training_expressions`).

    Returns:
        SymPy expression ``X`` (the rate's unit times seconds: FLOP for ``mfu``/``hfu`` over
        the peak, tokens for ``tokens_per_s``), or None.

    Raises:
        KeyError: ``output`` is not a training output.
    """
    exprs = training_expressions()
    step = exprs["step_time"]
    if output == "step_time":
        return None
    q = exprs[output] * step
    factors = q.args if isinstance(q, sp.Mul) else (q,)
    if any(f == step or (isinstance(f, sp.Pow) and f.base == step) for f in factors):
        return None
    return q


@functools.lru_cache(maxsize=64)
def _expression_elasticity(key: str, wrt: tuple[str, ...], dtype: str) -> Callable[..., Any]:
    """``(wrt arrays, other inputs) -> (y, elasticity per wrt)`` of one expression, jitted on
    its own: ``key`` is a training output, or ``"<output>*step_time"`` for a per-step rate's
    numerator (:func:`per_step_numerator`).

    Per-row derivatives come from one reverse pass: rows are independent, so the gradient of
    ``sum(y)`` with respect to a per-row input array is each row's derivative. Each expression
    is its own XLA program because compiling them together costs more than the sum of
    compiling them apart (the step time alone about 24 s, with the memory and the MFU
    numerator beside it about 44 s, on 2 cores).
    """
    import jax
    import jax.numpy as jnp

    output, _, times = key.partition("*")
    expr = per_step_numerator(output) if times else training_expressions()[output]
    inputs = training_inputs_symbols()
    cm = lower({key: expr}, inputs, dtype)
    names = [s.name for s in inputs]
    others = tuple(n for n in names if n not in wrt)

    def run(xw: tuple[Any, ...], xo: tuple[Any, ...]) -> tuple[Any, Any]:
        def f(*w: Any) -> Any:
            v = dict(zip(wrt, w))
            v.update(zip(others, xo))
            return cm.call_jax(*(v[n] for n in names))[0]

        y, pullback = jax.vjp(f, *xw)
        grads = pullback(jnp.ones_like(y))
        safe = jnp.where(y == 0, 1.0, y)
        return y, tuple(jnp.where(y == 0, 0.0, g * x / safe) for g, x in zip(grads, xw))

    return cast(Callable[..., Any], jax.jit(run))


@functools.lru_cache(maxsize=16)
def _elasticity_function(outputs: tuple[str, ...], wrt: tuple[str, ...], dtype: str
                         ) -> tuple[Callable[..., Any], tuple[str, ...]]:
    """``(wrt arrays, other inputs) -> (y per output, elasticity[output][param])``.

    Each output is differentiated by :func:`_expression_elasticity`; a per-step rate
    (:func:`per_step_numerator`) as its numerator ``X`` and the step time: ``y = X/T`` and
    ``e_y = e_X - e_T`` (0 where ``y`` is 0, as every elasticity), so the step-time graph is
    compiled once however many rates are asked for. Not jitted as a whole (that would
    compile the expressions as one program again); the combination runs eagerly.
    """
    import jax.numpy as jnp

    names = [s.name for s in training_inputs_symbols()]
    others = tuple(n for n in names if n not in wrt)
    numerators = {o: per_step_numerator(o) is not None for o in outputs}
    keys = tuple(dict.fromkeys(k for o in outputs for k in (
        (f"{o}*step_time", "step_time") if numerators[o] else (o,))))
    fns = {k: _expression_elasticity(k, wrt, dtype) for k in keys}

    def run(xw: tuple[Any, ...], xo: tuple[Any, ...]) -> tuple[Any, Any]:
        z = {k: fn(xw, xo) for k, fn in fns.items()}
        ys, out = [], []
        for o in outputs:
            if not numerators[o]:
                ys.append(z[o][0])
                out.append(z[o][1])
                continue
            (t, et), (q, eq) = z["step_time"], z[f"{o}*step_time"]
            y = q / jnp.where(t == 0, 1.0, t)
            ys.append(y)
            out.append(tuple(jnp.where(y == 0, 0.0, a - b) for a, b in zip(eq, et)))
        return tuple(ys), tuple(out)

    return run, others


def elasticities(inputs: Mapping[str, Any], wrt: Sequence[str] | None = None,
                 outputs: Sequence[str] = DEFAULT_OUTPUTS, precision: str = "float64",
                 chunk_size: int = DEFAULT_CHUNK) -> dict[str, dict[str, npt.NDArray[Any]]]:
    """Vectorized elasticities ``d ln y / d ln x`` over many configurations (no validation).

    Args:
        inputs: symbol name -> array of shape ``(n,)`` or scalar, for every input of the
            training model (``training_model().input_names``); extra names are ignored.
        wrt: continuous parameters to differentiate (default :func:`continuous_parameters`).
        outputs: training outputs.
        precision: ``float64`` (default) or ``float32``.
        chunk_size: rows per compiled call (the last chunk is padded).

    Returns:
        ``{output: {param: array (n,)}}`` (dimensionless) and ``{output: {"value": y}}``
        merged in: ``result[output]["value"]`` holds the output itself.

    Raises:
        SensitivityError: unknown output, a ``wrt`` that is discrete or not an input,
            missing inputs, or arrays of different lengths.
    """
    outputs = _check_outputs(outputs)
    wrt = tuple(continuous_parameters() if wrt is None else wrt)
    bad = [w for w in wrt if w not in continuous_parameters()]
    if bad:
        raise SensitivityError(f"wrt: {', '.join(bad)} not differentiable (continuous "
                               f"parameters: {', '.join(continuous_parameters())})")
    names = [s.name for s in training_inputs_symbols()]
    missing = [n for n in names if n not in inputs]
    if missing:
        raise SensitivityError(f"inputs: missing {', '.join(missing)}")
    lengths = {np.size(inputs[n]) for n in names if np.ndim(inputs[n]) > 0}
    if len(lengths) > 1:
        raise SensitivityError(f"inputs: arrays of different lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 1
    _, others = _elasticity_function(outputs, wrt, precision)
    col_others = tuple(k for k in others if np.ndim(inputs[k]) > 0)
    sc_others = tuple(k for k in others if np.ndim(inputs[k]) == 0)
    fn = _chunked_elasticity_function(outputs, wrt, precision, col_others, sc_others)
    # every wrt input is a per-row column (the derivative is taken per row)
    cols = {k: np.broadcast_to(np.asarray(inputs[k], np.float64), (n,)) for k in wrt}
    cols.update({k: np.asarray(inputs[k], np.float64) for k in col_others})
    columns = wrt + col_others
    flat = evaluate_chunks(fn, column_source(cols, columns), len(columns),
                           [float(inputs[k]) for k in sc_others], n,
                           len(outputs) * (1 + len(wrt)), precision, chunk_size)
    res = {}
    for i, o in enumerate(outputs):
        res[o] = {"value": flat[i]}
        for j, w in enumerate(wrt):
            res[o][w] = flat[len(outputs) + i * len(wrt) + j]
    return res


@functools.lru_cache(maxsize=16)
def _chunked_elasticity_function(outputs: tuple[str, ...], wrt: tuple[str, ...], dtype: str,
                                 col_others: tuple[str, ...], sc_others: tuple[str, ...]
                                 ) -> Callable[..., Any]:
    """:func:`_elasticity_function` as ``fn(columns, scalars) -> flat outputs`` for the one
    evaluator (:func:`symcost.evaluate.evaluate_chunks`): columns are the ``wrt`` inputs then
    ``col_others``; outputs are the values, then the elasticities output by output. Not
    jitted as a whole: the expressions stay separate XLA programs
    (:func:`_expression_elasticity`)."""
    inner, others = _elasticity_function(outputs, wrt, dtype)

    def run(cols: tuple[Any, ...], sc: tuple[Any, ...]) -> tuple[Any, ...]:
        env = dict(zip(wrt + col_others, cols))
        env.update(zip(sc_others, sc))
        ys, es = inner(tuple(env[w] for w in wrt), tuple(env[k] for k in others))
        return tuple(ys) + tuple(e for per_output in es for e in per_output)

    return run


def _check_outputs(outputs: Sequence[str]) -> tuple[str, ...]:
    known = tuple(training_expressions())
    checked: tuple[str, ...] = tuple(dict.fromkeys(outputs))
    bad = [o for o in checked if o not in known]
    if bad or not checked:
        raise SensitivityError(f"outputs: unknown {', '.join(bad) or '(none given)'}; "
                               f"known: {', '.join(known)}")
    return checked


# ----------------------------------------------------------------------------- results
@dataclass
class ParameterSensitivity:
    """Sensitivity of the outputs to one parameter.

    Attributes:
        name: symbol name.
        kind: ``hardware``, ``efficiency``, ``model`` or ``parallel``.
        method: ``autodiff`` or ``neighbour``.
        value: the parameter's value at the configuration (base units).
        elasticity: output -> ``d ln y / d ln x`` (autodiff), or None (neighbour).
        finite_difference: output -> central-difference elasticity (autodiff rows).
        status: output -> ``active``, ``not limiting``, ``not in formula``, ``kink``,
            ``zero value`` (autodiff), or ``neighbour`` / ``no valid neighbour``.
        down, up: neighbour rows: ``{"value": x', "elasticity": {output: arc}, "outputs":
            {output: y'}, "fits": bool}`` or None when no valid neighbour exists.
        tornado: output -> ``(relative change at the low side, at the high side)``: at
            ``x*(1 -/+ TORNADO_STEP)`` (continuous, exact evaluation) or the neighbours.
    """

    name: str
    kind: str
    method: str
    value: float
    elasticity: dict[str, float] | None = None
    finite_difference: dict[str, float] | None = None
    status: dict[str, str] = field(default_factory=dict)
    down: dict[str, Any] | None = None
    up: dict[str, Any] | None = None
    tornado: dict[str, tuple[float, float]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (NaN becomes None); per-output dicts are keyed by
        :data:`symcost.schema.OUTPUT_KEYS` (``step_time_s``, ...)."""
        def by_key(d: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return None if d is None else {OUTPUT_KEYS[o]: v for o, v in d.items()}

        def side(d: Mapping[str, Any] | None) -> dict[str, Any] | None:
            return None if d is None else {k: by_key(v) if k in ("elasticity", "outputs") else v
                                           for k, v in d.items()}

        return _clean_dict({"name": self.name, "kind": self.kind, "method": self.method,
                       "value": self.value, "elasticity": by_key(self.elasticity),
                       "finite_difference": by_key(self.finite_difference),
                       "status": by_key(self.status), "down": side(self.down),
                       "up": side(self.up), "tornado": by_key(self.tornado)})


#: relative step of the tornado chart's continuous bars.
TORNADO_STEP = 0.1


@dataclass
class SensitivityResult:
    """Elasticities at one configuration.

    Attributes:
        outputs: output name -> value at the configuration.
        parameters: one :class:`ParameterSensitivity` per parameter (continuous first).
        model, hardware, config: what was analysed (config resolved).
    """

    outputs: dict[str, float]
    parameters: list[ParameterSensitivity]
    model: ModelSpec
    hardware: HardwareSpec
    config: TrainingConfig

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the ``sensitivity --json`` object without ``fits``): outputs
        keyed by :data:`symcost.schema.OUTPUT_KEYS`, one entry per parameter."""
        return _clean_dict({"schema_version": SCHEMA_VERSION,
            "model": self.model.name, "hardware": self.hardware.name,
            "config": {k: getattr(self.config, k) for k in TrainingConfig.__dataclass_fields__},
            "outputs": {OUTPUT_KEYS[o]: v for o, v in self.outputs.items()},
            "fd_step": FD_STEP,
            "parameters": [p.to_dict() for p in self.parameters],
        })


def _clean_dict(obj: dict[str, Any]) -> dict[str, Any]:
    """:func:`_clean` of a dict."""
    return cast(dict[str, Any], _clean(obj))


def _clean(obj: Any) -> Any:
    """``obj`` with non-finite floats as None and NumPy scalars as Python values, recursively
    (lists and tuples become lists)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    if isinstance(obj, np.generic):
        return _clean(obj.item())
    return obj


# ----------------------------------------------------------------------------- point analysis
def sensitivity(model: ModelSpec | str, hardware: HardwareSpec | str,
                config: TrainingConfig | None = None, params: Params | None = None, *,
                outputs: Sequence[str] = DEFAULT_OUTPUTS, wrt: Sequence[str] | None = None,
                discrete: Sequence[str] = DEFAULT_DISCRETE, **config_fields: Any
                ) -> SensitivityResult:
    """Elasticities of ``outputs`` at one configuration.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        config: :class:`~symcost.config.TrainingConfig`, or its fields as keywords.
        params: efficiency parameters; the shipped calibration when None.
        outputs: training outputs (default step_time, mfu, mem_total).
        wrt: continuous parameters (default :func:`continuous_parameters`).
        discrete: discrete parameters for neighbour differences (keys of
            :data:`DISCRETE_FIELDS`: field names).

    Returns:
        :class:`SensitivityResult`.

    Raises:
        SensitivityError: unknown output or parameter.
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid configuration.
    """
    outputs = _check_outputs(outputs)
    disc = []
    for d in discrete:
        if d not in DISCRETE_FIELDS:
            raise SensitivityError(f"discrete: unknown {d!r}; known: "
                                   f"{', '.join(DISCRETE_FIELDS)}")
        disc.append(d)
    params = params or load_params()
    m, hw, cfg, base = prepare_training(model, hardware, config, params,
                                        **config_fields)
    wrt = tuple(continuous_parameters() if wrt is None else wrt)

    # rows: [base] + [x*e^{+h}, x*e^{-h}] per wrt + [x*(1 +/- 10%)] per wrt + neighbours
    rows: list[dict[str, float]] = [dict(base)]
    for w in wrt:
        for f in (math.exp(FD_STEP), math.exp(-FD_STEP), 1 - TORNADO_STEP, 1 + TORNADO_STEP):
            r = dict(base)
            r[w] = base[w] * f
            rows.append(r)
    neigh = {}
    for d in disc:
        neigh[d] = [_neighbour(m, hw, cfg, params, d, -1), _neighbour(m, hw, cfg, params, d, 1)]
        for nb in neigh[d]:
            if nb is not None:
                rows.append(nb["inputs"])
    table = {k: np.array([r[k] for r in rows]) for k in base}
    ev = elasticities(table, wrt, outputs)
    y0 = {o: float(ev[o]["value"][0]) for o in outputs}
    exprs = training_expressions()
    free = {o: {s.name for s in free_symbols_shared([exprs[o]])} for o in outputs}

    result = []
    for i, w in enumerate(wrt):
        j = 1 + 4 * i
        el: dict[str, float] = {}
        fds: dict[str, float] = {}
        p = ParameterSensitivity(w, S.REGISTRY[w].kind, "autodiff", float(base[w]), el, fds)
        for o in outputs:
            e = float(ev[o][w][0])
            yp, ym = ev[o]["value"][j], ev[o]["value"][j + 1]
            fd = float((math.log(yp) - math.log(ym)) / (2 * FD_STEP)) if yp > 0 and ym > 0 \
                else float((yp - ym) / (2 * FD_STEP * y0[o])) if y0[o] else 0.0
            el[o], fds[o] = e, fd
            if w not in free[o]:
                p.status[o] = "not in formula"
            elif base[w] == 0:
                p.status[o] = "zero value"   # elasticity x*dy/dx/y is 0 at x = 0
            elif abs(e - fd) > FD_ATOL + FD_RTOL * abs(fd):
                p.status[o] = "kink"
            elif e == 0.0:
                p.status[o] = "not limiting"
            else:
                p.status[o] = "active"
            lo, hi = ev[o]["value"][j + 2], ev[o]["value"][j + 3]
            p.tornado[o] = _rel(lo, y0[o]), _rel(hi, y0[o])
        result.append(p)
    k = 1 + 4 * len(wrt)
    for d in disc:
        sym = _discrete_symbol(d)
        p = ParameterSensitivity(d, S.REGISTRY[sym].kind, "neighbour", float(base[sym]))
        sides: list[dict[str, Any] | None] = []
        for nb in neigh[d]:
            if nb is None:
                sides.append(None)
                continue
            ys = {o: float(ev[o]["value"][k]) for o in outputs}
            k += 1
            arc = {o: ((math.log(ys[o]) - math.log(y0[o]))
                       / (math.log(nb["value"]) - math.log(base[sym])))
                   if ys[o] > 0 and y0[o] > 0 else float("nan") for o in outputs}
            sides.append({"value": nb["value"], "elasticity": arc, "outputs": ys,
                          "fits": nb["fits"], "changed": nb["changed"]})
        p.down, p.up = sides
        for o in outputs:
            p.status[o] = "neighbour" if any(sides) else "no valid neighbour"
            t = [_rel(s["outputs"][o], y0[o]) if s else 0.0 for s in sides]
            p.tornado[o] = (t[0], t[1])
        result.append(p)
    return SensitivityResult(y0, result, m, hw, cfg)


def _rel(y: float, y0: float) -> float:
    return float((y - y0) / y0) if y0 else 0.0


def _neighbour(model: ModelSpec, hw: HardwareSpec, cfg: TrainingConfig, params: Params,
               name: str, direction: int) -> dict[str, Any] | None:
    """The next valid value of discrete parameter ``name`` below (-1) or above (+1) its
    value, with the symbol bindings there; None if there is none within a factor
    :data:`_MAX_NEIGHBOUR_FACTOR`.

    ``tp``/``pp`` changes keep ``num_gpus`` (``dp`` follows), a ``dp`` change moves
    ``num_gpus``; the global batch is held at its resolved value.
    """
    where, fld = DISCRETE_FIELDS[name]
    v0 = getattr(cfg if where == "config" else model, fld)
    limit = max(v0 * _MAX_NEIGHBOUR_FACTOR, v0 + 64) if direction > 0 else 1
    v = v0 + direction
    while (v <= limit) if direction > 0 else (v >= limit):
        try:
            if where == "model":
                m2, c2 = model.replace(**{fld: v}), cfg
            else:
                m2 = model
                changes = {fld: v}
                if fld in ("tp", "pp"):
                    changes["dp"] = None
                elif fld == "dp":
                    changes["num_gpus"] = None
                c2 = cfg.replace(**changes)
            c2 = resolve(m2, hw, c2)
            inputs = training_inputs(m2, hw, c2, params)
        except (ConfigError, ModelSpecError):
            v += direction
            continue
        changed = {k: getattr(c2, k) for k in ("tp", "pp", "dp", "num_gpus", "vpp",
                                                "micro_batch", "global_batch")
                   if getattr(c2, k) != getattr(cfg, k)}
        return {"value": float(v), "inputs": inputs, "changed": changed,
                "fits": _fits(inputs)}
    return None


def _fits(inputs: Mapping[str, float]) -> bool:
    cm = training_model("float64")
    out = cm(**{n: inputs[n] for n in cm.input_names})
    return bool(out["mem_headroom"] >= 0)


__all__ = ["DEFAULT_DISCRETE", "DEFAULT_OUTPUTS", "ParameterSensitivity", "SensitivityError",
           "SensitivityResult", "TORNADO_STEP", "continuous_parameters", "elasticities",
           "per_step_numerator", "sensitivity"]
