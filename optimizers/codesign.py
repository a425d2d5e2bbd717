"""Hardware co-design: the GPU parameters and parallel configuration that minimise step time
under a cost budget, and the Pareto front of step time against cost.

Continuous variables: dense 16-bit peak FLOP/s (the fp8 peak scales with it), HBM bandwidth,
HBM capacity, intra-node and inter-node bandwidth per GPU, each within multiplicative bounds
around a reference GPU (latencies, GPUs per node and efficiencies stay the reference's).
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
from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from hwspecs.units import GIB, format_bytes
from symcost.api import as_hardware, as_model, training_model
from symcost.config import ConfigError

from .cost_model import HW_VARIABLES, CostModel
from .evaluate import CHUNK_SMALL, base_inputs, candidate_inputs, evaluate_chunked, evaluate_float64
from .search import MODE_GRID, layout_codec
from .space import (FIELDS, SearchError, columns_frame, enumerate_space, make_constraints,
                    raise_if_empty, violations)

# SciPy and JAX are imported inside the functions that use them (differential evolution,
# SLSQP, gradients): importing this module must not pay for them.

#: default multiplicative bounds of every hardware variable around the reference GPU.
DEFAULT_BOUNDS = (0.25, 4.0)
#: relative weight of cost in the gradient refinement (breaks ties between equally fast designs)
COST_TIE_BREAK = 1e-4
#: hardware variable -> (column of the result frame, divisor from SI): FLOP/s -> TFLOP/s, ...
DISPLAY_UNITS = {"peak_flops_16": ("peak_tflops", 1e12), "hbm_bw": ("hbm_tbps", 1e12),
                 "hbm_cap": ("hbm_gib", GIB), "intra_bw": ("intra_gbps", 1e9),
                 "inter_bw": ("inter_gbps", 1e9)}


def _bounds(bounds: Mapping[str, tuple[float, float]] | None) -> np.ndarray:
    out = np.array([DEFAULT_BOUNDS] * len(HW_VARIABLES), dtype=np.float64)
    for k, (lo, hi) in (bounds or {}).items():
        if k not in HW_VARIABLES:
            raise ConfigError(f"bounds: unknown hardware variable {k!r}; known: "
                             f"{', '.join(HW_VARIABLES)}")
        if not (0 < lo <= hi) or not math.isfinite(hi):
            raise ConfigError(f"bounds: {k} needs 0 < low <= high (got {lo}, {hi})")
        out[HW_VARIABLES.index(k)] = (lo, hi)
    return out


def _hw_inputs(base: Mapping[str, float], ref: np.ndarray, mult: np.ndarray) -> dict:
    """Model inputs for hardware = ``ref * mult`` (``mult`` shape ``(5,)`` or ``(5, n)``)."""
    vals = ref.reshape(-1, *([1] * (mult.ndim - 1))) * mult
    out = dict(base)
    for name, v in zip(HW_VARIABLES, vals):
        out[name] = v
    out["peak_flops_8"] = vals[0] * (base["peak_flops_8"] / base["peak_flops_16"])
    return out


@functools.lru_cache(maxsize=2)
def _step_time_value_and_grad():
    """jit(value_and_grad) of float64 step time w.r.t. log hardware multipliers."""
    import jax   # lazy: see the note at the top of the module
    import jax.numpy as jnp

    cm = training_model("float64")
    names = cm.input_names
    idx = cm.outputs.index("step_time")
    pos = [names.index(n) for n in HW_VARIABLES]
    p8 = names.index("peak_flops_8")

    def f(logm, args, ref, ratio8):
        vals = ref * jnp.exp(logm)
        a = [args[i] for i in range(len(names))]
        for j, p in enumerate(pos):
            a[p] = vals[j]
        a[p8] = vals[0] * ratio8
        return cm.call_jax(*a)[idx]

    return names, jax.jit(jax.value_and_grad(f))


class _NonFinite(ArithmeticError):
    """The step time or its gradient is not finite at a point of the gradient refinement."""


def _refine_hardware(base, ref, cfg_cols, budget, cost_model, lo, hi, mem_need, x0):
    """SLSQP over log multipliers for one configuration.

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
    ratio8 = base["peak_flops_8"] / base["peak_flops_16"]
    coef = cost_model.coefficients * ref
    cap_i = HW_VARIABLES.index("hbm_cap")
    lb, ub = np.log(lo), np.log(hi)
    # 1e-6 relative margin: float32 ranking must not put a design right on the memory limit
    need = math.log(max(mem_need / ref[cap_i], 1e-12)) + 1e-6
    if need > ub[cap_i]:
        return None
    lb = lb.copy()
    lb[cap_i] = max(lb[cap_i], need)

    def step(x):
        with jax.enable_x64(True):
            v, g = vg(x, args, ref, ratio8)
        v, g = float(v), np.asarray(g, dtype=np.float64)
        if not (math.isfinite(v) and np.all(np.isfinite(g))):
            raise _NonFinite(x)
        return v, g

    def fun(x):
        # step time, with a 1e-4 relative cost tie-break: among designs equally fast (e.g.
        # any HBM capacity above what the configuration needs) the cheapest is chosen
        v, g = step(x)
        w = COST_TIE_BREAK * (cost_model.base + coef @ np.exp(x)) / budget
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


def _best_config(space_cols, base, ref, mult):
    """Exhaustive: best fitting configuration for hardware ``ref*mult``; (index, step)."""
    inp = candidate_inputs(_hw_inputs(base, ref, mult), space_cols)
    out = evaluate_chunked(inp)
    st = np.where(out["mem_headroom"] >= 0, out["step_time"], np.inf)
    i = int(np.argmin(st))
    return (i, float(st[i])) if np.isfinite(st[i]) else (None, math.inf)


def codesign(model, hardware, num_gpus: int, global_batch: int, *,
             budgets: Sequence[float] | None = None, n_budgets: int = 6,
             bounds: Mapping[str, tuple[float, float]] | None = None,
             cost_model: CostModel | None = None, seq_len: int | None = None,
             dtype: str = "bf16", flash_attention: bool = True, fix=None, minimum=None,
             maximum=None, max_tp: int | None = None, max_vpp: int | None = None,
             seed: int | None = 0, popsize: int = 12, maxiter: int = 40, rounds: int = 3,
             params=None) -> pd.DataFrame:
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
    from scipy.optimize import differential_evolution   # lazy: see the module note

    t0 = time.perf_counter()
    model, hw = as_model(model), as_hardware(hardware)
    cost_model = cost_model or CostModel()
    mb = _bounds(bounds)
    lo, hi = mb[:, 0], mb[:, 1]
    cons = make_constraints(fix, minimum, maximum, max_tp, max_vpp)
    space = enumerate_space(model, hw, int(num_gpus), global_batch, seq_len=seq_len, dtype=dtype,
                            flash_attention=flash_attention, constraints=cons)
    raise_if_empty(space, f" for {num_gpus} GPUs")
    base = base_inputs(model, hw, dtype, space.seq_len, global_batch, flash_attention, params)
    ref = np.array([base[n] for n in HW_VARIABLES])
    cols = space.columns
    B, seq = space.context.global_batch, space.seq_len
    # the memory of a configuration does not depend on the priced hardware: compute it once
    mem = evaluate_chunked(candidate_inputs(base, cols), ("mem_total",))["mem_total"]
    need_cap = mem + base["mem_reserved"]
    if need_cap.min() > ref[2] * hi[2]:
        raise SearchError(
            f"no valid configuration fits in memory even with {format_bytes(ref[2] * hi[2], 0)} "
            f"of HBM (the upper bound): the smallest footprint needs "
            f"{format_bytes(need_cap.min(), 0)}")
    cheapest = float(cost_model.per_gpu(dict(zip(HW_VARIABLES, ref * lo))))
    dearest = float(cost_model.per_gpu(dict(zip(HW_VARIABLES, ref * hi))))
    ref_cost = float(cost_model.per_gpu(dict(zip(HW_VARIABLES, ref))))
    if budgets is None:
        budgets = np.geomspace(cheapest * 1.05, dearest, int(n_budgets))
    budgets = [float(b) for b in budgets]
    for b in budgets:
        if not b > 0:
            raise ConfigError(f"budgets: must be > 0 USD per GPU (got {b})")

    # joint vector: log2 hardware multipliers (continuous), then the layout codec of
    # search_scipy (GPU count, TP, PP as integers; micro-batch and VPP as random keys)
    codec = layout_codec(space.context, [int(num_gpus)])
    ctx = space.context
    n_modes = len(MODE_GRID)
    log_lo, log_hi = np.log2(lo), np.log2(hi)
    n_hw = len(HW_VARIABLES)
    usable_ref = base["hbm_cap"] - base["mem_reserved"]

    def decode(x):
        x = np.atleast_2d(x)
        u = np.clip(x[:n_hw], log_lo[:, None], log_hi[:, None])
        return np.exp2(u), codec.decode(x[n_hw:])

    def joint_objective(budget):
        def fn(x):
            mult, c = decode(x)
            s = mult.shape[1]
            cost = cost_model.per_gpu(dict(zip(HW_VARIABLES, ref[:, None] * mult)))
            nv = violations(c, ctx)
            valid = nv == 0
            val = 1e9 * (1.0 + nv.astype(np.float64))
            if valid.any():
                m_rows = np.repeat(mult, n_modes, axis=1)[:, valid]
                sub = {k: v[valid] for k, v in c.items()}
                out = evaluate_chunked(candidate_inputs(_hw_inputs(base, ref, m_rows), sub),
                                       chunk=CHUNK_SMALL)
                head = out["mem_headroom"]
                v = np.where(head >= 0, out["step_time"],
                             1e7 * (1.0 + np.minimum(-head / usable_ref, 10.0)))
                val[valid] = v
            val = val.reshape(s, n_modes).min(axis=1)
            over = cost > budget
            return np.where(over, 1e8 * (1.0 + (cost - budget) / budget), val)
        return fn

    rows = []
    best_ref_i, _ = _best_config(cols, base, ref, np.ones(len(ref)))
    if best_ref_i is not None:
        rows.append(_row("reference", math.nan, ref, np.ones(len(ref)), cost_model,
                         {k: v[best_ref_i] for k, v in cols.items()}, base, B, seq,
                         int(num_gpus)))
    de_bounds = ([(a, b if b > a else a + 1e-12) for a, b in zip(log_lo, log_hi)]
                 + list(codec.bounds))
    integrality = [False] * n_hw + list(codec.integrality)
    for budget in budgets:
        if budget < cheapest:
            rows.append({"design": "codesign", "budget_usd_per_gpu": budget,
                         "status": f"infeasible: the cheapest hardware within bounds costs "
                                   f"{cheapest:.0f} USD per GPU"})
            continue
        res = differential_evolution(joint_objective(budget), de_bounds, integrality=integrality,
                                     vectorized=True, updating="deferred", seed=seed,
                                     popsize=popsize, maxiter=maxiter, tol=1e-6, polish=False,
                                     strategy="rand1bin")
        # start from the evolved design, the cheapest one and (when affordable) the reference
        starts = [decode(res.x[:, None])[0][:, 0], lo.copy(),
                  np.clip(np.ones(len(ref)), lo, hi)]
        mult, i, t = None, None, math.inf
        for m0 in starts:   # alternating refinement from each affordable start; keep the best
            if float(cost_model.per_gpu(dict(zip(HW_VARIABLES, ref * m0)))) > budget:
                continue
            m_k, (i_k, t_k) = m0, _best_config(cols, base, ref, m0)
            for _ in range(int(rounds) if i_k is not None else 0):
                step = _refine_hardware(base, ref, {k: v[i_k:i_k + 1] for k, v in cols.items()},
                                        budget, cost_model, lo, hi, float(need_cap[i_k]),
                                        np.log(m_k))
                if step is None:
                    break
                i_new, t_new = _best_config(cols, base, ref, step[0])
                if i_new is None or not t_new < t_k * (1 - 1e-9):
                    break
                m_k, i_k, t_k = step[0], i_new, t_new
            if i_k is not None and t_k < t:
                mult, i, t = m_k, i_k, t_k
        if i is None:
            rows.append({"design": "codesign", "budget_usd_per_gpu": budget,
                         "status": "infeasible: no configuration fits within this budget"})
            continue
        rows.append(_row("codesign", budget, ref, mult, cost_model,
                         {k: v[i] for k, v in cols.items()}, base, B, seq, int(num_gpus)))
    df = pd.DataFrame(rows)
    ok = df["status"] == "ok"
    df["pareto"] = False
    if ok.any():
        df.loc[ok, "pareto"] = _pareto(df.loc[ok, "cost_usd_per_gpu"].to_numpy(),
                                       df.loc[ok, "step_time"].to_numpy())
    df = df.sort_values(["cost_usd_per_gpu", "budget_usd_per_gpu"], na_position="last")
    df.attrs["seconds"] = time.perf_counter() - t0
    df.attrs["reference"] = hw.name
    df.attrs["reference_cost_usd_per_gpu"] = ref_cost
    df.attrs["candidates"] = len(space)
    return df.reset_index(drop=True)


def _row(design, budget, ref, mult, cost_model, cfg, base, B, seq, n) -> dict:
    """One result row; the step time re-checked in float64."""
    hwv = dict(zip(HW_VARIABLES, ref * mult))
    cost = float(cost_model.per_gpu(hwv))
    one = {k: np.atleast_1d(v) for k, v in cfg.items()}
    f64 = evaluate_float64(candidate_inputs(_hw_inputs(base, ref, mult), one),
                           ("step_time", "mem_total", "mfu"))
    step = float(f64["step_time"][0])
    row = {"design": design, "budget_usd_per_gpu": budget, "cost_usd_per_gpu": cost,
           "cluster_cost_usd": cost * n, "step_time": step, "tokens_per_s": B * seq / step,
           "mfu": float(f64["mfu"][0])}
    row.update({DISPLAY_UNITS[k][0]: v / DISPLAY_UNITS[k][1] for k, v in hwv.items()})
    row["mem_gib"] = float(f64["mem_total"][0]) / GIB
    frame = columns_frame(one)
    row.update({k: frame[k].iloc[0] for k in FIELDS})
    row["status"] = "ok"
    return row


def _pareto(cost: np.ndarray, step: np.ndarray) -> np.ndarray:
    """True where no other point is at least as cheap and as fast and better in one."""
    out = np.ones(len(cost), dtype=bool)
    for i in range(len(cost)):
        dom = (cost <= cost[i]) & (step <= step[i]) & ((cost < cost[i]) | (step < step[i]))
        out[i] = not dom.any()
    return out
