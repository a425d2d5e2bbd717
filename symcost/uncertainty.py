"""Prediction intervals of the training model from a calibration, and its log-step-time
derivatives w.r.t. the efficiency parameters.

Uncertainty (standard nonlinear-regression results, e.g. Seber and Wild 1989, "Nonlinear
Regression", Sec. 2.1 and 5.1): a calibration (:mod:`symcost.calibrate`) records per GPU
generation the covariance ``cov`` of the fitted parameters, the residual standard deviation
``s`` of the log error and its degrees of freedom. A prediction interval for a configuration
with gradient ``g`` (``d log t / d theta``) is, in log space,
``log t +- q * sqrt(g^T cov g + v_prior + s^2)`` with ``q`` the Student-t quantile: the delta
method for the parameter uncertainty, a prior variance
``v_prior = sum_j (g_j * PRIOR_REL_SD * theta_j)^2`` for the parameters the data did not
determine (on a bound, not identifiable, or copied from another generation), and the
residual (model) error of the fit, which dominates in-sample. Many rows
(:func:`row_intervals`) take ``g`` from the JAX Jacobian (:func:`log_step_time_jacobian`,
also what the fit uses); one configuration (:func:`predict_interval`, ``symcost train
--json``) takes it from NumPy central differences (:func:`log_step_time_gradient`), which
agree to ~1e-8 and need no JAX compile.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt

from hwspecs import HardwareSpec

from .api import (as_hardware, as_model, merge_config, stack_training_inputs, training_inputs,
                  training_model)
from .config import TrainingConfig
from .evaluate import column_source, evaluate_chunks
from .measurements import PreparedRow
from .models import ModelSpec
from .params import BOUNDS, PARAM_NAMES, Params, load_params

#: float64 array (per-row values, Jacobians).
FloatArray = npt.NDArray[np.float64]

# jax and scipy are imported inside the functions that use them, so that importing this
# module (and ``symcost --help``) loads neither, and predict_interval needs no jax.

__all__ = ["FD_REL_STEP", "JACOBIAN_CHUNK", "PRIOR_REL_SD", "CalibrationError", "interval_sd",
           "log_step_time_gradient", "log_step_time_jacobian", "predict_interval",
           "row_intervals"]

#: prior relative standard deviation of a parameter the data did not determine (not
#: identifiable from the rows, on a bound, or copied from another generation): one standard
#: deviation is 30% of its value. An assumption, used only for prediction intervals.
PRIOR_REL_SD = 0.3

#: rows per call of the compiled Jacobian: one size, so one XLA compile (~9 s for the
#: training model) serves every row count (a calibration's few hundred rows, validation's
#: thousand) through the one evaluator; a smaller size would call it more often.
JACOBIAN_CHUNK = 256


class CalibrationError(ValueError):
    """Calibration cannot proceed or did not converge, or parameters were never calibrated
    for a GPU generation (the message says why); nothing is written."""


# ----------------------------------------------------------------------------- JAX Jacobian
@functools.lru_cache(maxsize=8)
def _chunk_jacobian_fn(wrt_idx: tuple[int, ...]) -> Callable[..., Any]:
    """The jitted ``fn(columns, scalars) -> (J, log t)`` of the float64 training model for
    :func:`symcost.evaluate.evaluate_chunks` (every input a per-row column): ``J[:, j]`` is
    ``d log t / d x`` for the input at position ``wrt_idx[j]``.

    Reverse mode, one pullback for every row: the rows are independent, so the gradient of
    ``sum_i log t_i`` with respect to a per-row input column is each row's own derivative (as
    :mod:`symcost.sensitivity` does). XLA compiles this in about a tenth of the time of the
    row-vectorized forward-mode Jacobian (``vmap(jacfwd)``: ~95 s against ~9 s for the
    training model on a 2-core CPU, 2026-12-07), with the same derivatives.
    """
    import jax
    import jax.numpy as jnp

    cm = training_model("float64")
    step = cm.outputs.index("step_time")

    def run(cols: tuple[Any, ...], sc: tuple[Any, ...]) -> Any:
        def log_step(*theta: Any) -> Any:
            x = list(cols)
            for i, th in zip(wrt_idx, theta):
                x[i] = th
            return jnp.log(cm.call_jax(*x)[step])

        ls, pullback = jax.vjp(log_step, *(cols[i] for i in wrt_idx))
        grads = pullback(jnp.ones_like(ls))
        return jnp.stack(grads, axis=1), ls

    return cast(Callable[..., Any], jax.jit(run))


def _checked_wrt(who: str, names: Sequence[str], inputs: Mapping[str, Any],
                 wrt: Sequence[str]) -> tuple[str, ...]:
    """``wrt`` as a tuple, after checking that ``inputs`` binds every model input and that
    every ``wrt`` name is one.

    Raises:
        KeyError: ``"<who>: missing inputs ..."`` or ``"<who>: ... not inputs of the training
            model"``.
    """
    missing = [n for n in names if n not in inputs]
    if missing:
        raise KeyError(f"{who}: missing inputs {', '.join(missing)}")
    unknown = [w for w in wrt if w not in names]
    if unknown:
        raise KeyError(f"{who}: {', '.join(unknown)} not inputs of the training model")
    return tuple(wrt)


def log_step_time_jacobian(inputs: Mapping[str, npt.ArrayLike], wrt: Sequence[str]
                           ) -> tuple[FloatArray, FloatArray]:
    """Log step time and its gradient w.r.t. parameters, for many configurations at once.

    Args:
        inputs: symbol name -> array ``(n,)`` for every input of the training model (as from
            :func:`symcost.api.stack_training_inputs`).
        wrt: names of input symbols to differentiate by (usually efficiency parameters).

    Returns:
        ``(log_t, J)``: ``log_t`` shape ``(n,)`` (log of seconds), ``J`` shape
        ``(n, len(wrt))`` with ``J[i, j] = d log t_i / d wrt_j`` (per base unit of the
        parameter). Computed in float64 by reverse-mode autodiff (``jax.vjp``).

    Raises:
        KeyError: an input is missing.
    """
    names = training_model("float64").input_names
    wrt = _checked_wrt("log_step_time_jacobian", names, inputs, wrt)
    # one compiled function for every subset of the efficiency parameters
    eff = tuple(n for n in names if n in PARAM_NAMES)
    basis = eff if set(wrt) <= set(eff) else wrt
    idx = tuple(names.index(w) for w in basis)
    columns = {k: np.asarray(inputs[k], dtype=np.float64).reshape(-1) for k in names}
    n = len(columns[names[0]])
    jac, ls = evaluate_chunks(_chunk_jacobian_fn(idx), column_source(columns, names),
                              len(names), (), n, 2, "float64", JACOBIAN_CHUNK)
    cols = [basis.index(w) for w in wrt]
    return ls, jac[:, cols]


#: relative step of the central differences of :func:`log_step_time_gradient`.
FD_REL_STEP = 1e-6


def log_step_time_gradient(inputs: Mapping[str, float], wrt: Sequence[str]
                           ) -> tuple[float, FloatArray]:
    """Log step time and its gradient w.r.t. a few parameters, for ONE configuration,
    without JAX.

    The value is the float64 training model evaluated by NumPy
    (:meth:`~symcost.lower.CompiledModel.call_numpy`); the gradient is a central difference
    ``(log t(theta + h e_j) - log t(theta - h e_j)) / (2 h)`` with ``h = FD_REL_STEP * |theta_j|``
    (``FD_REL_STEP`` times the width of the parameter's :data:`~symcost.params.BOUNDS` when
    ``theta_j = 0``). All ``1 + 2 * len(wrt)`` points go through one broadcast NumPy call
    (~ms), where :func:`log_step_time_jacobian` pays a jit compile (~seconds) for the exact
    derivative. Truncation error O(h^2) and rounding error O(eps / h) keep the relative error
    near 1e-9 on these smooth-per-branch expressions; at a ``Max`` kink the difference is the
    mean of the two one-sided slopes.

    Args:
        inputs: symbol name -> value (base units) for every input of the training model (as
            from :func:`symcost.api.training_inputs`).
        wrt: names of input symbols to differentiate by.

    Returns:
        ``(log_t, g)``: log of the step time in s, and ``g`` shape ``(len(wrt),)`` with
        ``g[j] = d log t / d wrt_j`` (per base unit of the parameter).

    Raises:
        KeyError: an input is missing, or a name of ``wrt`` is not an input of the model.
    """
    cm = training_model("float64")
    names = cm.input_names
    wrt = _checked_wrt("log_step_time_gradient", names, inputs, wrt)
    k = len(wrt)
    args: dict[str, float | FloatArray] = {n: float(inputs[n]) for n in names}
    steps = np.empty(k)
    for j, w in enumerate(wrt):
        v = float(inputs[w])
        lo, hi = BOUNDS.get(w, (0.0, 1.0))
        steps[j] = FD_REL_STEP * (abs(v) if v != 0 else (hi - lo) or 1.0)
        # point 0 is the centre; points 1+2j and 2+2j move parameter j by +h and -h
        col = np.full(1 + 2 * k, v)
        col[1 + 2 * j], col[2 + 2 * j] = v + steps[j], v - steps[j]
        args[w] = col
    log_t = np.log(np.asarray(cm.call_numpy(**args)["step_time"], dtype=np.float64)
                   * np.ones(1 + 2 * k))
    grad = (log_t[1::2] - log_t[2::2]) / (2 * steps)
    return float(log_t[0]), grad


# ----------------------------------------------------------------------------- intervals
def _quantile(level: float, dof: float | None) -> float:
    """Student-t quantile of a two-sided ``level`` interval (``scipy.special.stdtrit``, the
    same function as ``scipy.stats.t.ppf`` without importing ``scipy.stats``, ~0.5 s)."""
    from scipy.special import stdtrit

    if not 0 < level < 1:
        raise ValueError("level must be in (0, 1)")
    return float(stdtrit(max(int(dof or 1000), 1), 0.5 + level / 2))


def interval_sd(prepared: Sequence[PreparedRow], params: Params,
                inputs: Mapping[str, npt.ArrayLike]
                ) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Log step time, its predictive standard deviation and Student-t dof, per row.

    ``var = g_c^T cov g_c + sum_j (g_j * PRIOR_REL_SD * theta_j)^2 + s^2`` where ``g_c`` is
    ``d log t / d theta`` over the generation's parameters with a covariance
    (``params.fitted``), the sum runs over the other parameters the calibration meant to fit
    (``provenance.fitted_parameters``: not identifiable, on a bound, or copied from another
    generation), and ``s`` is the generation's residual sigma.

    Returns:
        ``(log_t, sd, dof)``, NaN ``sd`` for rows whose generation was never calibrated.
    """
    n = len(prepared)
    gens = np.array([r.hardware.generation for r in prepared])
    log_t, sd, dof = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    for g in sorted({str(x) for x in gens}):
        terms = _uncertainty_terms(params, g)
        if terms is None:
            continue
        idx = np.nonzero(gens == g)[0]
        sub = {k: np.asarray(v)[idx] for k, v in inputs.items()}
        ls, J = log_step_time_jacobian(sub, terms.wrt or ("eff_gemm",))
        log_t[idx], dof[idx] = ls, terms.dof
        sd[idx] = np.sqrt(_predictive_variance(terms, J[:, :len(terms.wrt)], sub))
    return log_t, sd, dof


@dataclass(frozen=True)
class _Terms:
    """What one generation's calibration says about the uncertainty of a prediction."""

    covaried: tuple[str, ...]   # parameters with a covariance (``params.fitted``), its order
    prior: tuple[str, ...]      # other parameters the calibration meant to fit (prior sd)
    cov: FloatArray             # covariance over ``covaried``
    sigma: float                # residual sd of the log error
    dof: float                  # Student-t degrees of freedom
    rel: float                  # prior relative sd

    @property
    def wrt(self) -> tuple[str, ...]:
        """Every parameter with an uncertainty: ``covaried`` then ``prior``."""
        return self.covaried + self.prior


def _uncertainty_terms(params: Params, gen: str) -> _Terms | None:
    """The uncertainty of generation ``gen`` in ``params`` (of the generation it was split from
    when the file predates it); None when never calibrated."""
    gen = params.values_generation(gen)
    prov = params.provenance
    sig = dict(cast(Mapping[str, float], prov.get("residual_sigma_log") or {}))
    if gen not in sig:
        return None
    names_c = tuple(params.fitted.get(gen, ()))
    want = list(cast(Sequence[str], prov.get("fitted_parameters") or ()))
    k = len(names_c)
    cov = (np.asarray(params.covariance[gen], dtype=np.float64).reshape(k, k) if k
           else np.zeros((0, 0)))
    return _Terms(names_c, tuple(p for p in want if p not in names_c), cov, float(sig[gen]),
                  float(dict(cast(Mapping[str, float], prov.get("dof") or {})).get(gen) or 1000),
                  float(cast(float, prov.get("prior_rel_sd", PRIOR_REL_SD))))


def _predictive_variance(terms: _Terms, J: npt.ArrayLike,
                         values: Mapping[str, npt.ArrayLike]) -> FloatArray:
    """``g_c^T cov g_c + sum_j (g_j * rel * theta_j)^2 + s^2`` per row of ``J`` (rows x
    ``terms.wrt``; ``values`` holds the parameter values, scalars or per-row arrays)."""
    jac = np.atleast_2d(np.asarray(J, dtype=np.float64))
    k = len(terms.covaried)
    var = np.full(jac.shape[0], terms.sigma ** 2)
    if k:
        Jc = jac[:, :k]
        var += np.einsum("ij,jk,ik->i", Jc, terms.cov, Jc)
    for j, p in enumerate(terms.prior, start=k):
        var += (jac[:, j] * terms.rel * np.asarray(values[p], dtype=np.float64)) ** 2
    return var


def row_intervals(prepared: Sequence[PreparedRow], params: Params,
                  inputs: Mapping[str, npt.ArrayLike] | None = None,
                  level: float = 0.9) -> tuple[FloatArray, FloatArray]:
    """Prediction interval of the step time of each row: ``log t +- q * sd`` with ``sd`` from
    :func:`interval_sd` and ``q`` the Student-t quantile of ``level``.

    Args:
        prepared: rows (see :func:`symcost.validate.prepare_rows`; only ``hardware`` is
            read when ``inputs`` is given).
        params: a calibration (``covariance``, ``fitted``, ``provenance.residual_sigma_log``).
        inputs: stacked inputs of ``prepared`` (:func:`symcost.api.stack_training_inputs`;
            computed when None).
        level: interval probability (0.9: 5% to 95%).

    Returns:
        ``(lo, hi)`` step times in s, NaN for rows whose generation was never calibrated.
    """
    n = len(prepared)
    if not n:
        return np.full(0, np.nan), np.full(0, np.nan)
    inputs = inputs if inputs is not None else stack_training_inputs(
        [(r.model, r.hardware, r.config) for r in prepared], params)
    log_t, sd, dof = interval_sd(prepared, params, inputs)
    q = np.array([_quantile(level, d) if np.isfinite(d) else np.nan for d in dof])
    return np.exp(log_t - q * sd), np.exp(log_t + q * sd)


def predict_interval(model: ModelSpec | str, hardware: HardwareSpec | str,
                     config: TrainingConfig | None = None, params: Params | None = None,
                     level: float = 0.9, **config_fields: Any
                     ) -> dict[str, Any]:
    """A prediction with its ``level`` interval on step time, throughput and MFU.

    Same interval as :func:`row_intervals` (``log t +- q * sd``, ``sd`` as in
    :func:`interval_sd`), computed for one configuration without JAX: the value by the float64
    model on NumPy and the gradient by central differences (:func:`log_step_time_gradient`),
    so ``symcost train --json`` answers in about a second.

    Args:
        model, hardware, config, config_fields: as :func:`symcost.api.predict_training`.
        params: a calibration (the shipped defaults are one); None: the shipped defaults.
        level: interval probability (0.9 gives the 5%-95% interval).

    Returns:
        ``{"level", "step_time_s": {"value", "lo", "hi"}, "tokens_per_s": {...},
        "tokens_per_s_per_gpu": {...}, "mfu": {...}}`` (s, tokens/s, fraction). Throughput
        and MFU are inversely proportional to the step time: their ``lo`` comes from the step
        time's ``hi``.

    Raises:
        CalibrationError: the parameters were never calibrated for that GPU generation.
        ConfigError, ModelSpecError, HardwareSpecError: invalid input.
    """
    params = params or load_params()
    config = merge_config(config, **config_fields)
    m, hw = as_model(model), as_hardware(hardware)
    terms = _uncertainty_terms(params, hw.generation)
    if terms is None:
        raise CalibrationError(f"predict_interval: the parameters were never calibrated for "
                               f"GPU generation {hw.generation!r} (run symcost calibrate)")
    X = training_inputs(m, hw, config, params)
    cm = training_model("float64")
    vals = {k: float(v) for k, v in
            cm.call_numpy(**{n: X[n] for n in cm.input_names}).items()}
    # one configuration: NumPy central differences over the few fitted parameters, no JAX
    _, g = log_step_time_gradient(X, terms.wrt)
    sd = math.sqrt(float(_predictive_variance(terms, g[None, :], X)[0]))
    q = _quantile(level, terms.dof)
    t = vals["step_time"]
    tl, th = t * math.exp(-q * sd), t * math.exp(q * sd)
    out: dict[str, Any] = {"level": level, "step_time_s": {"value": t, "lo": tl, "hi": th}}
    for name, val in (("tokens_per_s", vals["tokens_per_s"]),
                      ("tokens_per_s_per_gpu", vals["tokens_per_s"] / vals["num_gpus"]),
                      ("mfu", vals["mfu"])):
        out[name] = {"value": val, "lo": val * t / th, "hi": val * t / tl}
    return out
