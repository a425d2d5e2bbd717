"""Dissect a speed-up between two systems into hardware factors (Shapley and Aumann-Shapley).

The question of Kundu et al. 2024 (arXiv:2407.14645): of the speed-up of one training
workload from system A (say A100, bf16) to system B (B200, fp8), how much comes from
tensor-core throughput, lower precision, HBM bandwidth, HBM capacity (and the layout it
allows), the intra-node link, the network, and the kernels' achieved efficiencies?

Factors (:data:`FACTORS`) partition what differs between the two systems:

==================  ===================================================================
factor              what is swapped from A to B
==================  ===================================================================
``compute``         dense 16/32-bit tensor-core peaks (``peak_flops`` bf16, fp16, tf32, fp32)
``precision``       the workload dtype (``dtype_from`` -> ``dtype_to``) and the 8/4-bit peaks
``hbm_bandwidth``   ``hbm_bandwidth``
``hbm_capacity``    ``hbm_capacity`` (with the layout re-optimized, the capacity buys layouts)
``intra_node``      scale-up link bandwidth and latency, GPUs per node (NVLink domain)
``network``         scale-out bandwidth and latency per GPU
``kernels``         the GPU generation, which selects the calibrated efficiency constants
==================  ===================================================================

A hybrid system takes B's values for a subset ``S`` of factors and A's for the rest; its step
time ``T(S)`` is that of the best layout found by :func:`optimizers.search.search` (or of a
fixed layout). The value of a coalition is ``v(S) = ln T(A) - ln T(S)``, so
``v(all) = ln(speed-up)``.

* **Shapley values** (Shapley 1953) ``phi_i = sum_S |S|!(n-|S|-1)!/n! [v(S+i) - v(S)]``
  over all ``2^n`` hybrids: independent of the order in which factors are swapped, and they
  add up to ``ln(speed-up)``, so the factors ``exp(phi_i)`` multiply to the speed-up
  (log-additive).
* **Integrated gradients** (Aumann-Shapley; Sundararajan et al. 2017, Eq. 1) on the
  differentiable model: along the straight path in log space from A's continuous parameters
  to B's, ``IG_i = (ln b_i - ln a_i) * mean_path(d ln T / d ln x_i)`` with the layout and the
  discrete inputs (dtype, GPUs per node) held at B's. Completeness: they add up to the
  log-change of step time along the path; what they cannot see (the discrete swaps and the
  layout change) is reported as the ``discrete_and_layout`` residual. Where the model is
  smooth along the path and the layout is unchanged, the two methods agree; a difference
  larger than :data:`AGREEMENT_TOLERANCE` is explained in the result.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from itertools import combinations
from typing import Any

import numpy as np

from hwspecs import HardwareSpec
from hwspecs.prices import PriceModel, cost_per_token
from symcost import symbols as S
from symcost.api import as_hardware, as_model, predict_training, training_inputs
from symcost.config import (ConfigError, InferenceConfig, TrainingConfig, hardware_bindings,
                            inference_hardware_bindings)
from symcost.evaluate import Progress
from symcost.infer_api import evaluate_inference, inference_inputs
from symcost.params import Params, load_params
from symcost.schema import json_key
from symcost.sensitivity import continuous_parameters, elasticities

from .search import search
from .space import SearchError

#: factors in report order -> HardwareSpec fields they swap (``dtype``: the workload dtype;
#: ``generation``: the calibrated efficiency constants). ``compute`` is the SM array: its
#: 16-bit tensor peak (with the other non-low-precision peaks, FP32 among them), its special
#: function units' exponential rate and its measured matmul rate (the clock it sustains, so
#: the hybrid keeps the ceiling fraction of the system whose peaks it has); ``precision`` the
#: low-precision peaks with their measured fp8 matmul rate, likewise.
FACTORS: dict[str, tuple[str, ...]] = {
    "compute": ("peak_flops:16", "peak_exp", "matmul_measured"),
    "precision": ("dtype", "peak_flops:8", "matmul_measured_fp8"),
    "hbm_bandwidth": ("hbm_bandwidth",),
    "hbm_capacity": ("hbm_capacity",),
    "intra_node": ("intra_node_bandwidth", "intra_node_latency", "gpus_per_node"),
    "network": ("inter_node_bandwidth", "inter_node_latency"),
    "kernels": ("generation",),
}
#: model symbols each factor moves (integrated gradients group their attributions this way).
FACTOR_SYMBOLS: dict[str, tuple[str, ...]] = {
    "compute": ("peak_flops_16", "peak_exp", "peak_flops_fp32", "matmul_ceiling"),
    "precision": ("peak_flops_8", "matmul_ceiling_fp8"),
    "hbm_bandwidth": ("hbm_bw",),
    "hbm_capacity": ("hbm_cap",),
    "intra_node": ("intra_bw", "intra_lat"),
    "network": ("inter_bw", "inter_lat"),
}
#: dtypes whose peaks move with the ``precision`` factor (the others with ``compute``).
LOW_PRECISION = frozenset({"fp8", "int8", "fp4", "fp6"})
#: |Shapley - integrated gradients| share of ln(speed-up) below which the two agree.
AGREEMENT_TOLERANCE = 0.05
#: points of the midpoint rule along the integrated-gradients path.
IG_POINTS = 64


class DissectError(ValueError):
    """A dissection that cannot be computed; the message names the input or the hybrid."""


@dataclass
class DissectResult:
    """Attribution of a training speed-up to hardware factors.

    Attributes:
        factors: factor names, in :data:`FACTORS` order (only those that differ).
        speedup: ``T(A) / T(B)`` (dimensionless).
        step_time_from_s, step_time_to_s: step times of A and B, s.
        shapley: factor -> Shapley value of ``ln(speed-up)`` (sums to ``ln(speedup)``).
        integrated_gradients: factor -> Aumann-Shapley attribution of the continuous part,
            plus ``discrete_and_layout`` (the rest of ``ln(speedup)``).
        hybrids: one record per subset: ``factors`` (list), ``step_time_s`` and the layout.
        layout_from, layout_to: the layouts of A and B.
        agreement: per factor, Shapley minus integrated gradients as a share of
            ``ln(speedup)``; ``explanation``: why they differ where they do.
        ig_completeness_error: log-change along the gradient path minus the sum of the
            continuous attributions (quadrature error of the midpoint rule).
        tokens_per_s_from, tokens_per_s_to: tokens per second of the whole job on A and B
            (training: ``global_batch * seq_len / step``; serving: generated tokens/s), the
            basis of :meth:`costs`.
    """

    factors: list[str]
    speedup: float
    step_time_from_s: float
    step_time_to_s: float
    shapley: dict[str, float]
    integrated_gradients: dict[str, float]
    hybrids: list[dict[str, Any]]
    layout_from: dict[str, Any]
    layout_to: dict[str, Any]
    agreement: dict[str, float] = field(default_factory=dict)
    explanation: str = ""
    ig_completeness_error: float = 0.0
    tokens_per_s_from: float = 0.0
    tokens_per_s_to: float = 0.0

    def costs(self, price_from: PriceModel, price_to: PriceModel, num_gpus: int, *,
              power_from_w: float = 0.0, power_to_w: float = 0.0) -> dict[str, Any]:
        """Cost per token on each system under a price model
        (:func:`hwspecs.prices.cost_per_token`, ``num_gpus`` GPUs on both).

        Args:
            price_from, price_to: :class:`~hwspecs.prices.PriceModel` of A and of B.
            num_gpus: GPUs of the job.
            power_from_w, power_to_w: chip power, W (only an energy price uses it).

        Returns:
            ``{"from": {...}, "to": {...}, "cost_reduction": ...}``; each side has
            ``gpu_hour_cost_usd``, ``cost_per_token_usd``, ``cost_per_million_tokens_usd``,
            ``tokens_per_usd`` and ``price`` (the model's inputs); ``cost_reduction`` is
            cost per token on A over that on B (= speed-up x price(A) / price(B)).

        Raises:
            HardwareSpecError: no token rate (a result built without one) or a bad power.
        """
        out: dict[str, Any] = {}
        for side, price, tps, watts in (("from", price_from, self.tokens_per_s_from,
                                         power_from_w),
                                        ("to", price_to, self.tokens_per_s_to, power_to_w)):
            usd_h = price.usd_per_gpu_hour(watts)
            usd_tok = cost_per_token(usd_h, num_gpus, tps)
            out[side] = {json_key("usd_per_gpu_hour"): usd_h, json_key("usd_per_token"): usd_tok,
                         json_key("usd_per_million_tokens"): usd_tok * 1e6,
                         json_key("tokens_per_usd"): 1.0 / usd_tok, "price": price.to_dict()}
        out["cost_reduction"] = (out["from"][json_key("usd_per_token")]
                                 / out["to"][json_key("usd_per_token")])
        return out

    def factor_speedups(self, method: str = "shapley") -> dict[str, float]:
        """Multiplicative speed-up of each factor, ``exp(value)``: they multiply to
        :attr:`speedup` (``method``: ``shapley`` or ``integrated_gradients``)."""
        vals = self.shapley if method == "shapley" else self.integrated_gradients
        return {k: math.exp(v) for k, v in vals.items()}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (``symcost dissect --json``)."""
        return {
            "factors": self.factors, "speedup": self.speedup,
            "step_time_from_s": self.step_time_from_s, "step_time_to_s": self.step_time_to_s,
            "shapley_log": self.shapley,
            "shapley_speedup": self.factor_speedups("shapley"),
            "integrated_gradients_log": self.integrated_gradients,
            "integrated_gradients_speedup": self.factor_speedups("integrated_gradients"),
            "agreement_share": self.agreement, "explanation": self.explanation,
            "ig_completeness_error": self.ig_completeness_error,
            "throughput_from_tokens_per_s": self.tokens_per_s_from,
            "throughput_to_tokens_per_s": self.tokens_per_s_to,
            "layout_from": self.layout_from, "layout_to": self.layout_to,
            "hybrids": self.hybrids,
        }


def _peaks(a: Mapping[str, float], b: Mapping[str, float], low: bool) -> dict[str, float]:
    """``a``'s peaks with ``b``'s for the low-precision dtypes (``low``) or the others."""
    out = dict(a)
    for k in set(a) | set(b):
        if (k in LOW_PRECISION) == low:
            if k in b:
                out[k] = b[k]
            else:
                out.pop(k, None)
    return out


def hybrid(a: HardwareSpec, b: HardwareSpec, swapped: Sequence[str], dtype_a: str,
           dtype_b: str) -> tuple[HardwareSpec, str]:
    """System ``a`` with ``b``'s values for the factors in ``swapped``.

    Returns:
        ``(HardwareSpec, workload dtype)``.

    Raises:
        DissectError: an unknown factor.
    """
    unknown = [f for f in swapped if f not in FACTORS]
    if unknown:
        raise DissectError(f"factors: unknown {', '.join(unknown)}; known: {', '.join(FACTORS)}")
    changes: dict[str, Any] = {}
    peaks = dict(a.peak_flops)
    dtype = dtype_a
    for f in swapped:
        for item in FACTORS[f]:
            if item == "peak_flops:16":
                peaks = _peaks(peaks, b.peak_flops, low=False)
            elif item == "peak_flops:8":
                peaks = _peaks(peaks, b.peak_flops, low=True)
            elif item == "dtype":
                dtype = dtype_b
            else:
                changes[item] = getattr(b, item)
    name = f"{a.name}+{'+'.join(swapped)}" if swapped else a.name
    try:
        spec = dataclasses.replace(a, name=name, peak_flops=peaks, **changes)
    except ValueError as exc:
        raise DissectError(f"hybrid {name}: {exc}") from None
    return spec, dtype


def _best(model: Any, hw: HardwareSpec, dtype: str, num_gpus: int, global_batch: int,
          seq_len: int | None, params: Params, layout: TrainingConfig | None,
          search_options: Mapping[str, Any]) -> tuple[float, TrainingConfig]:
    """Step time (s) and layout of one system: the best layout, or ``layout`` fixed."""
    if layout is not None:
        cfg = layout.replace(dtype=dtype)
        return predict_training(model, hw, cfg, params=params).step_time, cfg
    try:
        res = search(model, hw, num_gpus, global_batch, seq_len=seq_len, dtype=dtype, top=1,
                     params=params, **search_options)
    except SearchError as exc:
        raise DissectError(f"{hw.name} ({dtype}): {exc}") from None
    return float(res.table["step_time"].iloc[0]), res.best


def _layout(cfg: TrainingConfig) -> dict[str, Any]:
    return {k: getattr(cfg, k) for k in TrainingConfig.__dataclass_fields__}


def _same_layout(a: TrainingConfig, b: TrainingConfig) -> bool:
    """The same parallel layout (the dtype is a factor, not part of the layout)."""
    return _layout(a.replace(dtype="bf16")) == _layout(b.replace(dtype="bf16"))


def shapley_values(values: Mapping[frozenset[str], float], players: Sequence[str]
                   ) -> dict[str, float]:
    """Shapley values of a game given on every coalition.

    Args:
        values: coalition (frozenset of players) -> value, for all ``2^n`` coalitions.
        players: the ``n`` players.

    Returns:
        player -> ``sum_S |S|!(n-|S|-1)!/n! [v(S+i) - v(S)]`` (Shapley 1953); they sum to
        ``v(all) - v(empty)``.
    """
    n = len(players)
    out = {}
    for p in players:
        others = [q for q in players if q != p]
        total = 0.0
        for k in range(n):
            w = math.factorial(k) * math.factorial(n - k - 1) / math.factorial(n)
            for combo in combinations(others, k):
                s = frozenset(combo)
                total += w * (values[s | {p}] - values[s])
        out[p] = total
    return out


def integrated_gradients(inputs_from: Mapping[str, float], inputs_to: Mapping[str, float],
                         groups: Mapping[str, Sequence[str]], points: int = IG_POINTS
                         ) -> tuple[dict[str, float], float]:
    """Aumann-Shapley attribution of ``ln T(to) - ln T(from)`` along the straight path in log
    space between two input bindings (differing only in continuous parameters).

    Args:
        inputs_from, inputs_to: symbol bindings (base units) of the two ends.
        groups: factor -> continuous symbols it moves.
        points: midpoint-rule points.

    Returns:
        ``(factor -> attribution of ln T, ln T(to) - ln T(from))``; the attributions of the
        symbols that move sum to the second value up to the quadrature error.
    """
    moving = [k for syms in groups.values() for k in syms
              if k in inputs_to and inputs_from[k] != inputs_to[k]]
    alpha = (np.arange(points) + 0.5) / points
    path: dict[str, Any] = dict(inputs_to)
    for k in moving:
        la, lb = math.log(inputs_from[k]), math.log(inputs_to[k])
        path[k] = np.exp(la + alpha * (lb - la))
    if not moving:
        return {f: 0.0 for f in groups}, 0.0
    path = {k: (v if np.ndim(v) else np.full(points, v)) for k, v in path.items()}
    el = elasticities(path, wrt=moving, outputs=("step_time",))["step_time"]
    per_symbol = {k: (math.log(inputs_to[k]) - math.log(inputs_from[k])) * float(np.mean(el[k]))
                  for k in moving}
    ends = elasticities({k: np.array([inputs_from[k] if k in moving else inputs_to[k],
                                      inputs_to[k]]) for k in inputs_to},
                        wrt=moving, outputs=("step_time",))["step_time"]["value"]
    total = math.log(float(ends[1])) - math.log(float(ends[0]))
    return {f: sum(per_symbol.get(k, 0.0) for k in syms) for f, syms in groups.items()}, total


def dissect(model: Any, hardware_from: Any, hardware_to: Any, num_gpus: int,
            global_batch: int, *, dtype_from: str = "bf16", dtype_to: str | None = None,
            seq_len: int | None = None, layout: TrainingConfig | None = None,
            factors: Sequence[str] | None = None, params: Params | None = None,
            progress: Progress | None = None, **search_options: Any) -> DissectResult:
    """Attribute the training speed-up from one system to another to hardware factors.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware_from, hardware_to: :class:`~hwspecs.HardwareSpec` or hardware ids.
        num_gpus: GPUs in the job (the same on both systems).
        global_batch: sequences per optimizer step.
        dtype_from, dtype_to: workload GEMM dtype on each system (``dtype_to`` defaults to
            ``dtype_from``); the ``precision`` factor swaps it.
        seq_len: tokens per sequence (the model's when None).
        layout: a fixed parallel layout for every hybrid; None (default) re-optimizes the
            layout of each hybrid with :func:`optimizers.search.search`, so that capacity and
            links are credited with the layouts they make possible.
        factors: subset of :data:`FACTORS` to attribute (default: all that differ).
        params: efficiency parameters (shipped calibration when None).
        progress: ``progress(hybrids done, hybrids)`` after each hybrid system.
        search_options: passed to :func:`optimizers.search.search` (``max_tp``, ``fix``, ...).

    Returns:
        :class:`DissectResult` (Shapley and integrated-gradient attributions of
        ``ln(speed-up)``).

    Raises:
        DissectError: an unknown factor, or a hybrid in which no layout is valid and fits.
        ConfigError, ModelSpecError, HardwareSpecError: bad inputs.

    References:
        Shapley, L. S. (1953), "A value for n-person games"; Sundararajan, Taly and Yan
        (2017), "Axiomatic attribution for deep networks", Eq. 1; Kundu et al. (2024),
        arXiv:2407.14645 (the A100 -> B200 study).
    """
    m = as_model(model)
    a, b = as_hardware(hardware_from), as_hardware(hardware_to)
    params = params or load_params()
    dtype_to = dtype_to or dtype_from
    names = list(FACTORS) if factors is None else list(dict.fromkeys(factors))
    hybrid(a, b, names, dtype_from, dtype_to)               # checks the names
    players = [f for f in names if _differs(a, b, f, dtype_from, dtype_to)]
    times: dict[frozenset[str], float] = {}
    layouts: dict[frozenset[str], TrainingConfig] = {}
    records = []
    for k in range(len(players) + 1):
        for combo in combinations(players, k):
            spec, dt = hybrid(a, b, combo, dtype_from, dtype_to)
            t, cfg = _best(m, spec, dt, num_gpus, global_batch, seq_len, params, layout,
                           search_options)
            times[frozenset(combo)] = t
            layouts[frozenset(combo)] = cfg
            records.append({"factors": list(combo), "step_time_s": t,
                            "layout": _layout(cfg)})
            if progress is not None:
                progress(len(records), 2 ** len(players))
    full, empty = frozenset(players), frozenset[str]()
    values = {s: math.log(times[empty]) - math.log(t) for s, t in times.items()}
    shap = shapley_values(values, players)

    # integrated gradients at B's layout and discrete inputs
    spec_b, _ = hybrid(a, b, players, dtype_from, dtype_to)
    cfg_b = layouts[full]
    inputs_to = training_inputs(m, spec_b, cfg_b, params)
    inputs_from = dict(inputs_to)
    from_values = {**hardware_bindings(a, dtype_from), **params.for_generation(a.generation)}
    groups = {f: FACTOR_SYMBOLS.get(f, ()) for f in players}
    if "kernels" in players:
        cont = set(continuous_parameters())
        groups["kernels"] = tuple(k for k in params.for_generation(a.generation) if k in cont)
    for syms in groups.values():
        for sym in syms:
            if sym in from_values and from_values[sym] > 0 and inputs_to.get(sym, 0) > 0:
                inputs_from[sym] = from_values[sym]
    ig_ln_t, path_total = integrated_gradients(inputs_from, inputs_to, groups)
    ig = {f: -v for f, v in ig_ln_t.items()}             # attribution of ln(speed-up)
    completeness = -path_total - sum(ig.values())
    total = values[full]
    ig["discrete_and_layout"] = total - sum(ig.values())
    agreement = {f: (shap[f] - ig[f]) / total if total else 0.0 for f in players}
    tokens = global_batch * (layouts[empty].seq_len or m.seq_len)
    return DissectResult(players, math.exp(total), times[empty], times[full], shap, ig,
                         records, _layout(layouts[empty]), _layout(cfg_b), agreement,
                         _explain(agreement, ig, total, layouts[empty], cfg_b),
                         completeness, tokens / times[empty], tokens / times[full])


#: decode batch caps tried per tensor-parallel degree by :func:`serving_value`: every integer
#: from 1 to 4,096 (a serving framework's ``max_num_seqs`` is any integer). Until 2026-11-27
#: only powers of two were tried, so a latency-bound optimum could jump by a factor of two in
#: batch (and up to 5% in a claim's ratio) when a constant moved by 1%.
SERVE_BATCHES = tuple(range(1, 4097))
#: relative step of the central differences in :func:`serving_integrated_gradients`.
FD_STEP = 1e-4


def serving_value(model: Any, hw: HardwareSpec, num_gpus: int, dtype: str, input_len: int,
                  output_len: int, tpot_target_s: float, params: Params
                  ) -> tuple[float, InferenceConfig, dict[str, float]]:
    """Best serving throughput of ``num_gpus`` GPUs at a latency target.

    Every tensor-parallel degree dividing ``num_gpus`` (``num_gpus/tp`` replicas, ``pp = 1``),
    for a MoE model every expert-parallel degree the serving rules allow with it (dividing
    ``tp``, or a multiple of ``tp`` dividing ``num_gpus``: :class:`symcost.config.
    InferenceConfig`), and every batch cap of :data:`SERVE_BATCHES` is evaluated in one
    vectorized call per layout; the value is the largest continuous-batching ``throughput``
    (generated tokens/s, all replicas) whose iteration time (the time per output token of a
    request in flight) is at most ``tpot_target_s`` and whose model fits.

    Returns:
        ``(tokens/s, the configuration, its symbol bindings)``.

    Raises:
        DissectError: no degree and batch meet the target on ``hw``.
    """
    best: tuple[float, InferenceConfig, dict[str, float]] | None = None
    divisors = [d for d in range(1, num_gpus + 1) if num_gpus % d == 0]
    # a dense model refuses every ep > 1 (rule ep_divides_experts): only ep = 1 is evaluated
    for tp, ep in ((t, e) for t in divisors for e in divisors):
        cfg = InferenceConfig(batch=1, input_len=input_len, output_len=output_len, tp=int(tp),
                              ep=int(ep), num_gpus=num_gpus, dtype=dtype)
        try:
            inputs = inference_inputs(model, hw, cfg, params)
        except ConfigError:
            continue
        grid = {k: np.full(len(SERVE_BATCHES), v) for k, v in inputs.items()}
        grid[S.batch.name] = np.asarray(SERVE_BATCHES, dtype=np.float64)
        out = evaluate_inference(grid, "float64")
        ok = ((out["serve_iteration"] <= tpot_target_s) & (out["serve_max_batch"] >= 1)
              & (out["serve_batch"] >= grid[S.batch.name]))
        if not ok.any():
            continue
        thr = np.where(ok, out["throughput"], -np.inf)
        j = int(np.argmax(thr))
        if best is None or thr[j] > best[0]:
            best = (float(thr[j]), cfg.replace(batch=SERVE_BATCHES[j]),
                    {**inputs, S.batch.name: float(SERVE_BATCHES[j])})
    if best is None:
        raise DissectError(f"{hw.name} ({dtype}): no tensor-parallel degree and batch of "
                           f"{num_gpus} GPUs serve {model.name} within tpot "
                           f"{tpot_target_s * 1e3:g} ms")
    return best


def serving_integrated_gradients(inputs_from: Mapping[str, float],
                                 inputs_to: Mapping[str, float],
                                 groups: Mapping[str, Sequence[str]], points: int = IG_POINTS
                                 ) -> tuple[dict[str, float], float]:
    """Aumann-Shapley attribution of ``ln throughput(to) - ln throughput(from)`` of the
    inference model along the log-space path, the derivatives by central differences of
    relative step :data:`FD_STEP` (every path point and perturbation in one vectorized call).

    Returns:
        ``(factor -> attribution of ln throughput, ln throughput(to) - ln throughput(from))``.
    """
    moving = [k for syms in groups.values() for k in syms
              if k in inputs_to and inputs_from[k] != inputs_to[k]]
    if not moving:
        return {f: 0.0 for f in groups}, 0.0
    alpha = (np.arange(points) + 0.5) / points
    base = {k: np.full(points, float(v)) for k, v in inputs_to.items()}
    for k in moving:
        la, lb = math.log(inputs_from[k]), math.log(inputs_to[k])
        base[k] = np.exp(la + alpha * (lb - la))
    blocks = [base]
    for k in moving:
        for sign in (1.0, -1.0):
            blocks.append({**base, k: base[k] * math.exp(sign * FD_STEP)})
    ends = {k: np.array([inputs_from[k] if k in moving else inputs_to[k], inputs_to[k]])
            for k in inputs_to}
    stacked = {k: np.concatenate([b[k] for b in blocks] + [ends[k]]) for k in inputs_to}
    ln_thr = np.log(evaluate_inference(stacked, "float64")["throughput"])
    per_symbol = {}
    for i, k in enumerate(moving):
        up = ln_thr[(1 + 2 * i) * points:(2 + 2 * i) * points]
        down = ln_thr[(2 + 2 * i) * points:(3 + 2 * i) * points]
        el = (up - down) / (2 * FD_STEP)
        per_symbol[k] = (math.log(inputs_to[k]) - math.log(inputs_from[k])) * float(np.mean(el))
    total = float(ln_thr[-1] - ln_thr[-2])
    return {f: sum(per_symbol.get(k, 0.0) for k in syms) for f, syms in groups.items()}, total


def dissect_serving(model: Any, hardware_from: Any, hardware_to: Any, num_gpus: int, *,
                    input_len: int, output_len: int, tpot_target_s: float,
                    dtype_from: str = "bf16", dtype_to: str | None = None,
                    factors: Sequence[str] | None = None, params: Params | None = None,
                    progress: Progress | None = None) -> DissectResult:
    """Attribute the serving speed-up (throughput at a latency target) from one system to
    another to hardware factors, as :func:`dissect` does for training.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware_from, hardware_to: specs or hardware ids.
        num_gpus: GPUs serving the model on each system.
        input_len, output_len: tokens per request.
        tpot_target_s: largest time per output token, s.
        dtype_from, dtype_to: serving dtype on each system (the ``precision`` factor).
        factors: subset of :data:`FACTORS` (default: all that differ).
        params: efficiency parameters (shipped calibration when None).
        progress: ``progress(hybrids done, hybrids)`` after each hybrid system.

    Returns:
        :class:`DissectResult` whose ``speedup`` is the throughput ratio (B over A) and whose
        ``step_time_*_s`` are the iteration times (time per output token) of the two best
        configurations; ``layout_*`` are the serving configurations.

    Raises:
        DissectError: an unknown factor, or a hybrid that cannot meet the target.
    """
    m = as_model(model)
    a, b = as_hardware(hardware_from), as_hardware(hardware_to)
    params = params or load_params()
    dtype_to = dtype_to or dtype_from
    names = list(FACTORS) if factors is None else list(dict.fromkeys(factors))
    hybrid(a, b, names, dtype_from, dtype_to)
    players = [f for f in names if _differs(a, b, f, dtype_from, dtype_to)]
    thr: dict[frozenset[str], float] = {}
    best: dict[frozenset[str], tuple[InferenceConfig, dict[str, float]]] = {}
    records = []
    for k in range(len(players) + 1):
        for combo in combinations(players, k):
            spec, dt = hybrid(a, b, combo, dtype_from, dtype_to)
            t, cfg, inputs = serving_value(m, spec, num_gpus, dt, input_len, output_len,
                                           tpot_target_s, params)
            thr[frozenset(combo)] = t
            best[frozenset(combo)] = (cfg, inputs)
            records.append({"factors": list(combo), "throughput_tokens_per_s": t,
                            "layout": dataclasses.asdict(cfg)})
            if progress is not None:
                progress(len(records), 2 ** len(players))
    full, empty = frozenset(players), frozenset[str]()
    values = {s: math.log(t) - math.log(thr[empty]) for s, t in thr.items()}
    shap = shapley_values(values, players)
    inputs_to = best[full][1]
    inputs_from = dict(inputs_to)
    from_values = {**inference_hardware_bindings(a, dtype_from),
                   **params.for_generation(a.generation)}
    groups = {f: FACTOR_SYMBOLS.get(f, ()) for f in players}
    if "kernels" in players:
        groups["kernels"] = tuple(k for k in params.for_generation(a.generation)
                                  if k in inputs_to)
    for syms in groups.values():
        for sym in syms:
            if sym in from_values and from_values[sym] > 0 and inputs_to.get(sym, 0) > 0:
                inputs_from[sym] = from_values[sym]
    ig, path_total = serving_integrated_gradients(inputs_from, inputs_to, groups)
    total = values[full]
    completeness = path_total - sum(ig.values())
    ig["discrete_and_layout"] = total - sum(ig.values())
    agreement = {f: (shap[f] - ig[f]) / total if total else 0.0 for f in players}
    cfg_a, cfg_b = best[empty][0], best[full][0]
    same = dataclasses.replace(cfg_a, dtype="bf16") == dataclasses.replace(cfg_b, dtype="bf16")
    return DissectResult(players, math.exp(total), tpot_target_s, tpot_target_s, shap, ig,
                         records, dataclasses.asdict(cfg_a), dataclasses.asdict(cfg_b),
                         agreement, _explain_serving(agreement, ig, total, same),
                         completeness, thr[empty], thr[full])


def _explain_serving(agreement: Mapping[str, float], ig: Mapping[str, float], total: float,
                     same_layout: bool) -> str:
    off = sorted(f for f, d in agreement.items() if abs(d) > AGREEMENT_TOLERANCE)
    if not off:
        return (f"Shapley and integrated gradients agree within "
                f"{AGREEMENT_TOLERANCE:.0%} of ln(speed-up) for every factor.")
    parts = []
    if not same_layout:
        parts.append("the best tensor-parallel degree or batch changes between the systems "
                     "(integrated gradients hold B's fixed)")
    parts.append("the batch that meets the latency target moves with every factor, and "
                 "throughput is a max/min of compute-, memory- and KV-bound regimes")
    return (f"they differ by more than {AGREEMENT_TOLERANCE:.0%} for {', '.join(off)}: "
            + "; ".join(parts) + ".")


def _differs(a: HardwareSpec, b: HardwareSpec, factor: str, dtype_a: str, dtype_b: str) -> bool:
    """True when swapping ``factor`` changes the system."""
    for item in FACTORS[factor]:
        if item == "dtype":
            if dtype_a != dtype_b:
                return True
        elif item.startswith("peak_flops:"):
            low = item.endswith(":8")
            pa = {k: v for k, v in a.peak_flops.items() if (k in LOW_PRECISION) == low}
            pb = {k: v for k, v in b.peak_flops.items() if (k in LOW_PRECISION) == low}
            if pa != pb:
                return True
        elif getattr(a, item) != getattr(b, item):
            return True
    return False


def _explain(agreement: Mapping[str, float], ig: Mapping[str, float], total: float,
             layout_a: TrainingConfig, layout_b: TrainingConfig) -> str:
    """Why Shapley and integrated gradients differ, in one or two sentences."""
    off = {f: d for f, d in agreement.items() if abs(d) > AGREEMENT_TOLERANCE}
    if not off:
        return (f"Shapley and integrated gradients agree within "
                f"{AGREEMENT_TOLERANCE:.0%} of ln(speed-up) for every factor.")
    parts = []
    if not _same_layout(layout_a, layout_b):
        parts.append("the best layout changes between the systems, and integrated gradients "
                     "hold B's layout fixed (Shapley credits capacity and links with the "
                     "layouts they allow)")
    if "precision" in off and layout_a.dtype != layout_b.dtype:
        parts.append(f"compute and precision interact: with B's dtype ({layout_b.dtype}) held "
                     "along the gradient path the GEMMs run at the low-precision peak, so "
                     "gradients credit precision with the GEMM speed-up that Shapley shares "
                     "between the two 'peak' factors")
    if abs(ig.get("discrete_and_layout", 0.0)) > AGREEMENT_TOLERANCE * abs(total or 1.0):
        parts.append("discrete swaps (dtype, GPUs per node) are invisible to gradients and "
                     f"carry {ig['discrete_and_layout'] / total:.0%} of ln(speed-up)")
    parts.append("the step time is a max/sum of regimes (roofline, overlap), so a factor's "
                 "marginal effect depends on which others were swapped first")
    return (f"they differ by more than {AGREEMENT_TOLERANCE:.0%} for "
            f"{', '.join(sorted(off))}: " + "; ".join(parts) + ".")


__all__ = ["AGREEMENT_TOLERANCE", "DissectError", "DissectResult", "FACTORS", "FACTOR_SYMBOLS",
           "SERVE_BATCHES", "dissect", "dissect_serving", "hybrid", "integrated_gradients",
           "serving_integrated_gradients", "serving_value", "shapley_values"]
