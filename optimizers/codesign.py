"""Hardware co-design: the GPU parameters and parallel configuration that minimise step time
under a cost budget, and the Pareto front of step time against cost.

Continuous variables: dense 16-bit peak FLOP/s (the fp8 and fp4 peaks, the exponential rate
of the special function units and the FP32 peak scale with it, :data:`COMPUTE_TIED`), HBM
bandwidth, HBM capacity, intra-node and inter-node bandwidth per GPU, each within
multiplicative bounds around a reference GPU (latencies, GPUs per node and efficiencies stay
the reference's).
Discrete variables: the parallel configuration (:mod:`optimizers.space`). Cost: the linear
per-GPU model of :mod:`optimizers.cost_model`.

For each budget (USD per GPU):

1. ``scipy.optimize.differential_evolution`` over both at once: log2 multipliers of the five
   hardware parameters (continuous) and integer indices of TP, PP, micro-batch and VPP
   (``integrality``), each individual taking its best mode combination (recompute, SP, ZeRO,
   DP overlap); over-budget, invalid and out-of-memory points are penalised. The whole
   population is one vectorized call of the compiled model.
2. Alternating refinement from the evolved design: the exhaustive search picks the best
   configuration for the current hardware, then ``scipy.optimize.minimize`` (SLSQP) moves the
   hardware for that configuration with exact JAX gradients of the step time (float64), the
   budget as a constraint and the configuration's memory as a lower bound on HBM capacity;
   repeated until the configuration stops changing (at most ``rounds`` times).

The rows of all budgets plus the reference GPU form the Pareto front (cost, step time).
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from hwspecs import HardwareSpec
from hwspecs.units import GIB, format_bytes
from symcost.api import as_hardware, as_model, training_model
from symcost.config import ConfigError
from symcost.evaluate import Progress
from symcost.models import ModelSpec
from symcost.params import Params

from .cost_model import HW_VARIABLES, CostModel
from .evaluate import CHUNK_SMALL, base_inputs, candidate_inputs, evaluate_chunked, evaluate_float64
from .search import MODE_GRID, LayoutCodec, layout_codec
from .space import (FIELDS, Columns, FloatArray, SearchError, Space, columns_frame,
                    enumerate_space, make_constraints, raise_if_empty, violations)

# SciPy and JAX are imported inside the functions that use them (differential evolution,
# SLSQP, gradients): importing this module must not pay for them.

#: hardware symbols that move with the ``peak_flops_16`` variable at the reference's ratio: the
#: other tensor-core peaks, the special function units' exponential rate and the CUDA cores'
#: FP32 peak (all per SM per clock, so a chip with more SMs or a faster clock scales them
#: together).
COMPUTE_TIED: tuple[str, ...] = ("peak_flops_8", "peak_flops_4", "peak_exp", "peak_flops_fp32")
#: default multiplicative bounds of every hardware variable around the reference GPU.
DEFAULT_BOUNDS = (0.25, 4.0)
#: relative weight of cost in the gradient refinement (breaks ties between equally fast designs)
COST_TIE_BREAK = 1e-4
#: hardware variable -> (column of the result frame, divisor from SI): FLOP/s -> TFLOP/s, ...
DISPLAY_UNITS = {"peak_flops_16": ("peak_tflops", 1e12), "hbm_bw": ("hbm_tbps", 1e12),
                 "hbm_cap": ("hbm_gib", GIB), "intra_bw": ("intra_gbps", 1e9),
                 "inter_bw": ("inter_gbps", 1e9)}


def _bounds(bounds: Mapping[str, tuple[float, float]] | None) -> FloatArray:
    """Multiplier bounds ``(5, 2)`` (low, high per :data:`HW_VARIABLES`), defaults filled in.

    Raises:
        ConfigError: an unknown hardware variable, or bounds not ``0 < low <= high < inf``.
    """
    out = np.array([DEFAULT_BOUNDS] * len(HW_VARIABLES), dtype=np.float64)
    for k, (lo, hi) in (bounds or {}).items():
        if k not in HW_VARIABLES:
            raise ConfigError(f"bounds: unknown hardware variable {k!r}; known: "
                             f"{', '.join(HW_VARIABLES)}")
        if not (0 < lo <= hi) or not math.isfinite(hi):
            raise ConfigError(f"bounds: {k} needs 0 < low <= high (got {lo}, {hi})")
        out[HW_VARIABLES.index(k)] = (lo, hi)
    return out


def _hw_inputs(base: Mapping[str, float], ref: FloatArray, mult: FloatArray) -> dict[str, Any]:
    """Model inputs for hardware = ``ref * mult`` (``mult`` shape ``(5,)`` or ``(5, n)``)."""
    vals = ref.reshape(-1, *([1] * (mult.ndim - 1))) * mult
    out: dict[str, Any] = dict(base)
    for name, v in zip(HW_VARIABLES, vals):
        out[name] = v
    for name in COMPUTE_TIED:
        out[name] = vals[0] * (base[name] / base["peak_flops_16"])
    return out


#: ``(x, args, ref, tied) -> (step time, d step time / d x)`` (JAX arrays).
ValueAndGrad = Callable[..., tuple[Any, Any]]


@functools.lru_cache(maxsize=2)
def _step_time_value_and_grad() -> tuple[tuple[str, ...], ValueAndGrad]:
    """jit(value_and_grad) of float64 step time w.r.t. log hardware multipliers.

    Returns:
        ``(input names of the float64 training model, f)`` where ``f(logm, args, ref,
        tied)`` takes the log multipliers ``(5,)``, every model input in ``names`` order,
        the reference hardware ``(5,)`` and the ratios of :data:`COMPUTE_TIED` to the 16-bit
        peak ``(3,)``.
    """
    import jax   # lazy: see the note at the top of the module
    import jax.numpy as jnp

    cm = training_model("float64")
    names = cm.input_names
    idx = cm.outputs.index("step_time")
    pos = [names.index(n) for n in HW_VARIABLES]
    tied_pos = [names.index(n) for n in COMPUTE_TIED]

    def f(logm: Any, args: Any, ref: Any, tied: Any) -> Any:
        vals = ref * jnp.exp(logm)
        a = [args[i] for i in range(len(names))]
        for j, p in enumerate(pos):
            a[p] = vals[j]
        for j, p in enumerate(tied_pos):
            a[p] = vals[0] * tied[j]
        return cm.call_jax(*a)[idx]

    return names, jax.jit(jax.value_and_grad(f))


class _NonFinite(ArithmeticError):
    """The step time or its gradient is not finite at a point of the gradient refinement."""


def _refine_hardware(base: Mapping[str, float], ref: FloatArray, cfg_cols: Columns,
                     budget: float, cost_model: CostModel, lo: FloatArray, hi: FloatArray,
                     mem_need: float, x0: FloatArray) -> tuple[FloatArray, float] | None:
    """SLSQP over log multipliers for one configuration.

    Minimises the float64 step time (exact JAX gradients) with a :data:`COST_TIE_BREAK`
    relative cost term, under the budget (inequality constraint) and with the HBM capacity
    bounded below by what the configuration needs.

    Args:
        base: shared model inputs (:func:`optimizers.evaluate.base_inputs`).
        ref: reference hardware values (:data:`HW_VARIABLES` order, base units).
        cfg_cols: the configuration, one-row columns.
        budget: USD per GPU.
        cost_model: the per-GPU cost model.
        lo, hi: multiplier bounds ``(5,)``.
        mem_need: HBM the configuration needs (bytes, reserved memory included).
        x0: starting log multipliers ``(5,)``.

    Returns:
        ``(multipliers, step time)``, or None when the refinement is infeasible: the memory
        need exceeds the capacity bound, the result is over budget, or the step time or its
        gradient is not finite at a point SLSQP visits (never replaced by zeros).
    """
    import jax   # lazy: see the note at the top of the module
    from scipy.optimize import minimize

    names, vg = _step_time_value_and_grad()
    inputs = candidate_inputs(base, cfg_cols)
    args = np.array([float(np.asarray(inputs[n]).reshape(-1)[0]) for n in names])
    tied = np.array([base[n] / base["peak_flops_16"] for n in COMPUTE_TIED])
    coef = cost_model.coefficients * ref
    cap_i = HW_VARIABLES.index("hbm_cap")
    lb, ub = np.log(lo), np.log(hi)
    # 1e-6 relative margin: float32 ranking must not put a design right on the memory limit
    need = math.log(max(mem_need / ref[cap_i], 1e-12)) + 1e-6
    if need > ub[cap_i]:
        return None
    lb = lb.copy()
    lb[cap_i] = max(lb[cap_i], need)

    def step(x: FloatArray) -> tuple[float, FloatArray]:
        with jax.enable_x64(True):
            v, g = vg(x, args, ref, tied)
        v, g = float(v), np.asarray(g, dtype=np.float64)
        if not (math.isfinite(v) and np.all(np.isfinite(g))):
            raise _NonFinite(x)
        return v, g

    def fun(x: FloatArray) -> tuple[float, FloatArray]:
        # step time, with a 1e-4 relative cost tie-break: among designs equally fast (e.g.
        # any HBM capacity above what the configuration needs) the cheapest is chosen
        v, g = step(x)
        w = float(COST_TIE_BREAK * (cost_model.base + coef @ np.exp(x)) / budget)
        return v * (1 + w), g * (1 + w) + v * COST_TIE_BREAK * coef * np.exp(x) / budget

    cons = [{"type": "ineq",
             "fun": lambda x: (budget - cost_model.base - coef @ np.exp(x)) / budget,
             "jac": lambda x: -(coef * np.exp(x)) / budget}]
    x0 = np.clip(x0, lb, ub)
    try:
        res = minimize(fun, x0, jac=True, method="SLSQP", bounds=list(zip(lb, ub)),
                       constraints=cons, options={"maxiter": 200, "ftol": 1e-10})
        x = np.clip(res.x, lb, ub)
        if cost_model.base + coef @ np.exp(x) > budget * (1 + 1e-9):
            return None
        return np.exp(x), step(x)[0]
    except _NonFinite:
        # a NaN/inf step time or gradient (e.g. a 0/0 in a branch of the model) would steer
        # SLSQP blindly: the refinement from this point is infeasible, the caller keeps the
        # design it started from
        return None


def _best_config(space_cols: Columns, base: Mapping[str, float], ref: FloatArray,
                 mult: FloatArray) -> tuple[int | None, float]:
    """Exhaustive: best fitting configuration for hardware ``ref*mult``; (index, step)."""
    inp = candidate_inputs(_hw_inputs(base, ref, mult), space_cols)
    out = evaluate_chunked(inp)
    st = np.where(out["mem_headroom"] >= 0, out["step_time"], np.inf)
    i = int(np.argmin(st))
    return (i, float(st[i])) if np.isfinite(st[i]) else (None, math.inf)


@dataclass(frozen=True)
class _Problem:
    """What every budget of one co-design shares.

    Attributes:
        space: the valid configurations (for the reference GPU's rules).
        base: shared model inputs of the reference GPU (base units).
        ref: reference hardware values, :data:`HW_VARIABLES` order (base units).
        lo, hi: multiplier bounds ``(5,)``.
        cost_model: the per-GPU cost model.
        need_cap: HBM each configuration needs, reserved memory included (bytes): the memory
            of a configuration does not depend on the priced hardware.
        num_gpus: GPUs in the cluster.
    """

    space: Space
    base: dict[str, float]
    ref: FloatArray
    lo: FloatArray
    hi: FloatArray
    cost_model: CostModel
    need_cap: FloatArray
    num_gpus: int

    def cost(self, mult: FloatArray) -> float:
        """USD per GPU of the hardware ``ref * mult`` (``mult`` shape ``(5,)``)."""
        return float(self.cost_model.per_gpu(dict(zip(HW_VARIABLES, self.ref * mult))))


def _setup_problem(model: ModelSpec, hw: HardwareSpec, num_gpus: int, global_batch: int,
                   bounds: Mapping[str, tuple[float, float]] | None, cost_model: CostModel,
                   seq_len: int | None, dtype: str, flash_attention: bool,
                   fix: Any, minimum: Any, maximum: Any, max_tp: int | None,
                   max_vpp: int | None, params: Params | None) -> _Problem:
    """The hardware variables and their bounds, the configuration space and the memory each
    configuration needs (see :func:`codesign` for the arguments).

    Raises:
        ConfigError: malformed bounds, constraints or shared inputs.
        SearchError: no valid configuration, or none fits even with the largest HBM within
            the bounds.
    """
    mb = _bounds(bounds)
    lo, hi = mb[:, 0], mb[:, 1]
    cons = make_constraints(fix, minimum, maximum, max_tp, max_vpp)
    space = enumerate_space(model, hw, int(num_gpus), global_batch, seq_len=seq_len, dtype=dtype,
                            flash_attention=flash_attention, constraints=cons)
    raise_if_empty(space, f" for {num_gpus} GPUs")
    base = base_inputs(model, hw, dtype, space.seq_len, global_batch, flash_attention, params)
    ref = np.array([base[n] for n in HW_VARIABLES])
    mem = evaluate_chunked(candidate_inputs(base, space.columns), ("mem_total",))["mem_total"]
    need_cap = mem + base["mem_reserved"]
    if need_cap.min() > ref[2] * hi[2]:
        raise SearchError(
            f"no valid configuration fits in memory even with {format_bytes(ref[2] * hi[2], 0)} "
            f"of HBM (the upper bound): the smallest footprint needs "
            f"{format_bytes(need_cap.min(), 0)}")
    return _Problem(space, base, ref, lo, hi, cost_model, need_cap, int(num_gpus))


def _budgets(problem: _Problem, budgets: Sequence[float] | None, n_budgets: int
             ) -> list[float]:
    """The budgets (USD per GPU) to design for: ``budgets``, or ``n_budgets`` spaced
    geometrically from just above the cheapest to the dearest hardware within the bounds.

    Raises:
        ConfigError: a budget that is not > 0.
    """
    if budgets is None:
        budgets = np.geomspace(problem.cost(problem.lo) * 1.05, problem.cost(problem.hi),
                               int(n_budgets)).tolist()
    out = [float(b) for b in budgets]
    for b in out:
        if not b > 0:
            raise ConfigError(f"budgets: must be > 0 USD per GPU (got {b})")
    return out


class _Joint:
    """The joint differential-evolution vector of one co-design: log2 hardware multipliers
    (continuous), then the layout codec of :func:`optimizers.search.search_scipy` (GPU count,
    TP, PP as integers; micro-batch and VPP as random keys)."""

    def __init__(self, problem: _Problem) -> None:
        self.problem = problem
        self.codec: LayoutCodec = layout_codec(problem.space.context, [problem.num_gpus])
        self.log_lo, self.log_hi = np.log2(problem.lo), np.log2(problem.hi)
        self.n_hw = len(HW_VARIABLES)
        self.bounds = ([(a, b if b > a else a + 1e-12) for a, b in zip(self.log_lo, self.log_hi)]
                       + list(self.codec.bounds))
        self.integrality = [False] * self.n_hw + list(self.codec.integrality)

    def decode(self, x: FloatArray) -> tuple[FloatArray, Columns]:
        """Vectors ``(n_hw + 5, S)`` -> (multipliers ``(5, S)``, candidate columns of
        ``S * 48`` rows)."""
        x = np.atleast_2d(x)
        u = np.clip(x[:self.n_hw], self.log_lo[:, None], self.log_hi[:, None])
        return np.exp2(u), self.codec.decode(x[self.n_hw:])

    def objective(self, budget: float) -> Callable[[FloatArray], FloatArray]:
        """The vectorized DE objective under ``budget``: an individual's best valid, fitting
        mode combination's step time; ``1e9 * (1 + broken rules)`` when invalid,
        ``1e7 * (1 + memory deficit)`` when it does not fit, ``1e8 * (1 + overspend)`` when
        over budget."""
        pr = self.problem
        ctx = pr.space.context
        n_modes = len(MODE_GRID)
        usable_ref = pr.base["hbm_cap"] - pr.base["mem_reserved"]

        def fn(x: FloatArray) -> FloatArray:
            mult, c = self.decode(x)
            s = mult.shape[1]
            cost = pr.cost_model.per_gpu(dict(zip(HW_VARIABLES, pr.ref[:, None] * mult)))
            nv = violations(c, ctx)
            valid = nv == 0
            val = 1e9 * (1.0 + nv.astype(np.float64))
            if valid.any():
                m_rows = np.repeat(mult, n_modes, axis=1)[:, valid]
                sub = {k: v[valid] for k, v in c.items()}
                out = evaluate_chunked(candidate_inputs(_hw_inputs(pr.base, pr.ref, m_rows), sub),
                                       chunk=CHUNK_SMALL)
                head = out["mem_headroom"]
                v = np.where(head >= 0, out["step_time"],
                             1e7 * (1.0 + np.minimum(-head / usable_ref, 10.0)))
                val[valid] = v
            val = val.reshape(s, n_modes).min(axis=1)
            over = cost > budget
            return np.where(over, 1e8 * (1.0 + (cost - budget) / budget), val)
        return fn


def _evolve(joint: _Joint, budget: float, seed: int | None, popsize: int, maxiter: int
            ) -> FloatArray:
    """Differential evolution of hardware and layout together under ``budget``; the
    hardware multipliers ``(5,)`` of the best individual."""
    from scipy.optimize import differential_evolution   # lazy: see the module note

    res = differential_evolution(joint.objective(budget), joint.bounds,
                                 integrality=joint.integrality, vectorized=True,
                                 updating="deferred", seed=seed, popsize=popsize,
                                 maxiter=maxiter, tol=1e-6, polish=False, strategy="rand1bin")
    return joint.decode(res.x[:, None])[0][:, 0]


def _alternate(problem: _Problem, budget: float, m0: FloatArray, rounds: int
               ) -> tuple[FloatArray, int | None, float]:
    """Alternating refinement from hardware ``ref * m0``: the exhaustive layout search picks
    the best configuration for the current hardware, then :func:`_refine_hardware` moves the
    hardware for it; repeated while the step time improves (at most ``rounds`` times).

    Returns:
        ``(multipliers, configuration index or None when none fits, step time in s)``.
    """
    cols = problem.space.columns
    m_k, (i_k, t_k) = m0, _best_config(cols, problem.base, problem.ref, m0)
    for _ in range(int(rounds) if i_k is not None else 0):
        assert i_k is not None
        step = _refine_hardware(problem.base, problem.ref,
                                {k: v[i_k:i_k + 1] for k, v in cols.items()}, budget,
                                problem.cost_model, problem.lo, problem.hi,
                                float(problem.need_cap[i_k]), np.log(m_k))
        if step is None:
            break
        i_new, t_new = _best_config(cols, problem.base, problem.ref, step[0])
        if i_new is None or not t_new < t_k * (1 - 1e-9):
            break
        m_k, i_k, t_k = step[0], i_new, t_new
    return m_k, i_k, t_k


def _design(problem: _Problem, joint: _Joint, budget: float, seed: int | None, popsize: int,
            maxiter: int, rounds: int) -> dict[str, Any]:
    """The result row of one budget: evolve, then refine from the evolved design, the
    cheapest one and (when affordable) the reference; the best of these, or an
    ``infeasible`` row."""
    cheapest = problem.cost(problem.lo)
    if budget < cheapest:
        return {"design": "codesign", "budget_usd_per_gpu": budget,
                "status": f"infeasible: the cheapest hardware within bounds costs "
                          f"{cheapest:.0f} USD per GPU"}
    evolved = _evolve(joint, budget, seed, popsize, maxiter)
    starts = [evolved, problem.lo.copy(), np.clip(np.ones(len(problem.ref)), problem.lo,
                                                  problem.hi)]
    mult: FloatArray | None = None
    i: int | None = None
    t = math.inf
    for m0 in starts:   # alternating refinement from each affordable start; keep the best
        if problem.cost(m0) > budget:
            continue
        m_k, i_k, t_k = _alternate(problem, budget, m0, rounds)
        if i_k is not None and t_k < t:
            mult, i, t = m_k, i_k, t_k
    if i is None or mult is None:
        return {"design": "codesign", "budget_usd_per_gpu": budget,
                "status": "infeasible: no configuration fits within this budget"}
    cols = problem.space.columns
    return _row("codesign", budget, problem, mult, {k: v[i] for k, v in cols.items()})


def _front(rows: list[dict[str, Any]]) -> pd.DataFrame:
    """The result rows as a frame sorted by cost, with the ``pareto`` column (cost against
    step time over the feasible rows)."""
    df = pd.DataFrame(rows)
    ok = df["status"] == "ok"
    df["pareto"] = False
    if ok.any():
        df.loc[ok, "pareto"] = _pareto(df.loc[ok, "cost_usd_per_gpu"].to_numpy(),
                                       df.loc[ok, "step_time"].to_numpy())
    return df.sort_values(["cost_usd_per_gpu", "budget_usd_per_gpu"], na_position="last")


def codesign(model: ModelSpec | str, hardware: HardwareSpec | str, num_gpus: int,
             global_batch: int, *, budgets: Sequence[float] | None = None, n_budgets: int = 6,
             bounds: Mapping[str, tuple[float, float]] | None = None,
             cost_model: CostModel | None = None, seq_len: int | None = None,
             dtype: str = "bf16", flash_attention: bool = True, fix: Any = None,
             minimum: Any = None, maximum: Any = None, max_tp: int | None = None,
             max_vpp: int | None = None, seed: int | None = 0, popsize: int = 12,
             maxiter: int = 40, rounds: int = 3, params: Params | None = None,
             progress: Progress | None = None) -> pd.DataFrame:
    """Co-design GPU hardware and parallel configuration under cost budgets.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: the reference GPU (:class:`~hwspecs.HardwareSpec` or id): bounds are
            multiples of its parameters; latencies, node size and efficiencies are its own.
        num_gpus: GPUs in the cluster.
        global_batch: sequences per optimizer step.
        budgets: USD per GPU to evaluate; by default ``n_budgets`` values spaced
            geometrically between the cheapest and the dearest hardware within ``bounds``.
        n_budgets: number of default budgets.
        bounds: hardware variable (:data:`optimizers.cost_model.HW_VARIABLES`) ->
            (low, high) multiples of the reference; ``(0.25, 4)`` when not given.
        cost_model: per-GPU cost model (the sourced default when None).
        seq_len, dtype, flash_attention, fix, minimum, maximum, max_tp, max_vpp: as for
            :func:`optimizers.search.search`.
        seed, popsize, maxiter: differential-evolution settings.
        rounds: alternating refinement rounds (0 disables the gradient refinement).
        params: efficiency parameters (the shipped calibration when None).
        progress: ``progress(designs done, total)`` after the reference and each budget.

    Returns:
        DataFrame, one row per budget plus the reference GPU (``design == "reference"``):
        ``design``, ``budget_usd_per_gpu``, ``cost_usd_per_gpu``, ``cluster_cost_usd``,
        ``step_time`` (s), ``tokens_per_s``, the hardware (``peak_tflops``, ``hbm_tbps``,
        ``hbm_gib``, ``intra_gbps``, ``inter_gbps``), ``mem_gib`` (memory per GPU of the
        configuration), the configuration fields, ``pareto``
        (True on the front of cost vs step time) and ``status``. Sorted by cost.

    Raises:
        SearchError: no configuration is valid (names the rule), or none fits even with the
            largest HBM within bounds.
        ConfigError: malformed inputs, bounds or budgets (names the field and the rule).
    """
    t0 = time.perf_counter()
    spec, hw = as_model(model), as_hardware(hardware)
    problem = _setup_problem(spec, hw, num_gpus, global_batch, bounds, cost_model or CostModel(),
                             seq_len, dtype, flash_attention, fix, minimum, maximum, max_tp,
                             max_vpp, params)
    wanted = _budgets(problem, budgets, n_budgets)
    rows = []
    ones = np.ones(len(problem.ref))
    best_ref_i, _ = _best_config(problem.space.columns, problem.base, problem.ref, ones)
    if best_ref_i is not None:
        rows.append(_row("reference", math.nan, problem, ones,
                         {k: v[best_ref_i] for k, v in problem.space.columns.items()}))
    joint = _Joint(problem)
    if progress is not None:
        progress(1, len(wanted) + 1)
    for i, budget in enumerate(wanted):
        rows.append(_design(problem, joint, budget, seed, popsize, maxiter, rounds))
        if progress is not None:
            progress(i + 2, len(wanted) + 1)
    df = _front(rows)
    df.attrs["seconds"] = time.perf_counter() - t0
    df.attrs["reference"] = hw.name
    df.attrs["reference_cost_usd_per_gpu"] = problem.cost(ones)
    df.attrs["candidates"] = len(problem.space)
    return df.reset_index(drop=True)


def _row(design: str, budget: float, problem: _Problem, mult: FloatArray,
         cfg: Mapping[str, Any]) -> dict[str, Any]:
    """One result row for hardware ``ref * mult`` and configuration ``cfg`` (field ->
    value); the step time, MFU and memory re-checked in float64."""
    hwv = dict(zip(HW_VARIABLES, problem.ref * mult))
    cost = float(problem.cost_model.per_gpu(hwv))
    one = {k: np.atleast_1d(v) for k, v in cfg.items()}
    f64 = evaluate_float64(candidate_inputs(_hw_inputs(problem.base, problem.ref, mult), one),
                           ("step_time", "mem_total", "mfu"))
    step = float(f64["step_time"][0])
    space = problem.space
    tokens = space.context.global_batch * space.seq_len
    row: dict[str, Any] = {
        "design": design, "budget_usd_per_gpu": budget, "cost_usd_per_gpu": cost,
        "cluster_cost_usd": cost * problem.num_gpus, "step_time": step,
        "tokens_per_s": tokens / step, "mfu": float(f64["mfu"][0])}
    row.update({DISPLAY_UNITS[k][0]: v / DISPLAY_UNITS[k][1] for k, v in hwv.items()})
    row["mem_gib"] = float(f64["mem_total"][0]) / GIB
    frame = columns_frame(one)
    row.update({k: frame[k].iloc[0] for k in FIELDS})
    row["status"] = "ok"
    return row


def _pareto(cost: FloatArray, step: FloatArray) -> npt.NDArray[np.bool_]:
    """True where no other point is at least as cheap and as fast and better in one."""
    out = np.ones(len(cost), dtype=bool)
    for i in range(len(cost)):
        dom = (cost <= cost[i]) & (step <= step[i]) & ((cost < cost[i]) | (step < step[i]))
        out[i] = not dom.any()
    return out
