"""Bottleneck attribution: what limits a training step, operator by operator.

The step time of :func:`symcost.training.training_expressions` is split into per-operator
rows that sum to ``step_time`` exactly:

* per-layer operators (``qkv_proj``, ``attention``, ``out_proj``, ``mlp_up``, ``mlp_down``,
  ``activation``, ``norms``, ``residual_dropout``), each with its forward, backward and
  recomputed work over the ``L_c`` layers of the critical stage (``ceil(L/p)``, or the last
  stage's when it runs the head and is slower: :func:`symcost.training.critical_stage`) and
  the ``m`` micro-batches: ``m*L_c*(fwd + bwd + recompute)``;
* ``layer_overhead`` (fixed per-layer launch time), ``lm_head``, ``cross_entropy`` and
  ``embedding`` (their forward and backward), built from the same operator functions
  (:mod:`symcost.ops`) as :mod:`symcost.training`;
* ``activation_offload``: the activation copies to host memory and back that the layers'
  compute does not hide (:func:`symcost.training.activation_offload_exposed`);
* ``tp_comm``, ``cp_comm`` (exposed), ``ep_comm``, ``pp_p2p``, ``dp_comm`` (exposed), ``optimizer``, ``pp_bubble`` and
  ``step_overhead``: the corresponding terms of the step-time breakdown.

Classification rule: every roofline ``Max(compute, memory)`` in an operator's time (GEMMs,
FlashAttention, the GEMMs of unfused attention) is attributed to ``compute`` when its compute
side (the argument holding a peak FLOP/s) is the larger, else to ``memory``; terms outside a
roofline are memory-bound elementwise traffic (``memory``) in compute operators, and
``communication`` in collectives, ``idle`` for the pipeline bubble, ``overhead`` for fixed
times. An operator's class is the category with the largest share of its time; its share is
its time over the step time. The answer to "what limits it" is the largest operator and the
category totals. (Roofline: Williams, Waterman and Patterson, "Roofline: an insightful visual
performance model for multicore architectures", CACM 52(4), 2009; the per-operator costs are
those of :mod:`symcost.ops`, which cite their own sources.)

``dp_comm`` is the *exposed* data-parallel time of the breakdown: with overlap, compute that
hides communication stays attributed to the compute operators and only the excess appears
under ``dp_comm``.

The expressions are built once and lowered once (float64) to one compiled function; a
configuration is evaluated with the NumPy form of the generated source (no jit compile).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import sympy as sp

from hwspecs import HardwareSpec

from . import symbols as S
from . import training as T
from .api import prepare_training, training_inputs_symbols
from .config import TrainingConfig
from .lower import CompiledModel, lower
from .models import ModelSpec
from .ops import embedding as emb
from .params import Params
from .schema import SCHEMA_VERSION

CATEGORIES = ("compute", "memory", "communication", "idle", "overhead")
#: the step-time terms taken whole from the breakdown, with their category.
_BREAKDOWN_ROWS = {
    "tp_comm": ("time_tp_comm", "communication"),
    "cp_comm": ("time_cp_comm", "communication"),
    "ep_comm": ("time_ep_comm", "communication"),
    "pp_p2p": ("time_pp_p2p", "communication"),
    "dp_comm": ("time_dp_comm", "communication"),
    "optimizer": ("time_optimizer", "memory"),
    "pp_bubble": ("time_pp_bubble", "idle"),
    "step_overhead": ("time_overhead", "overhead"),
}
#: what each operator row is.
DESCRIPTIONS = {
    "qkv_proj": "QKV projection GEMM",
    "attention": "attention core (FlashAttention or unfused QK^T/softmax/AV)",
    "out_proj": "attention output projection GEMM",
    "mlp_up": "MLP up (and gate) projection GEMM",
    "mlp_down": "MLP down projection GEMM",
    "activation": "GeLU / SwiGLU",
    "norms": "LayerNorm / RMSNorm (two per layer, one per hybrid block)",
    "residual_dropout": "bias + dropout + residual add",
    "layer_overhead": "fixed per-layer time (kernel launches)",
    "lm_head": "LM head GEMM",
    "cross_entropy": "vocabulary-parallel cross-entropy",
    "embedding": "embedding lookup",
    "activation_offload": "activation copies to host memory and back (exposed part)",
    "tp_comm": "tensor-parallel collectives",
    "cp_comm": "context-parallel exchange of keys/values (exposed part; ring, all-gather or "
               "all-to-all by cp_comm_type)",
    "ep_comm": "expert-parallel all-to-all dispatch and combine",
    "pp_p2p": "pipeline send/receive",
    "dp_comm": "data-parallel gradient/parameter sync (exposed part)",
    "router": "MoE router GEMM, score function and top-k",
    "expert_up": "routed experts' up (and gate) projections (grouped GEMM)",
    "expert_down": "routed experts' down projections (grouped GEMM)",
    "moe_latent_proj": "LatentMoE projections h -> l and l -> h",  # [moe]
    "expert_activation": "routed experts' GeLU / SwiGLU",
    "shared_experts": "shared experts (GEMMs and activation)",
    "moe_permute": "MoE token permutation and unpermutation",  # [moe]
    "moe_overhead": "fixed time per MoE layer (launches, dispatcher sync)",  # [moe]
    # [hybrid] Mamba-2 mixer (symcost.ops.ssm)
    "mamba_in_proj": "Mamba-2 input projection GEMM (z, x, B, C, dt)",
    "mamba_conv": "Mamba-2 causal convolution with SiLU",
    "mamba_scan": "Mamba-2 chunked SSD scan",
    "mamba_norm": "Mamba-2 norm gated by z",
    "mamba_out_proj": "Mamba-2 output projection GEMM",
    "fp8_cast": "fp8/fp4 casts of GEMM inputs (activations per micro-batch, weights per step)",
    "optimizer": "Adam step",
    "pp_bubble": "pipeline fill and drain",
    "step_overhead": "fixed per-step overhead",
}

_PEAKS = (S.peak_flops_16, S.peak_flops_8, S.peak_flops_4)


def _is_compute(e: sp.Expr) -> bool:
    return any(e.has(p) for p in _PEAKS)


def split_roofline(expr: sp.Expr, leaf: str = "memory") -> dict[str, sp.Expr]:
    """Split a time expression into its ``compute`` and non-compute parts.

    A ``Max`` with one argument holding a peak FLOP/s and one not is a roofline: it goes to
    ``compute`` where that argument is the larger, else to ``leaf``. Sums, products with
    ``Max``-free factors (a factor holding a ``Heaviside``, the critical stage's layer count,
    is a coefficient) and ``Piecewise`` branches are split recursively; any other term goes
    to ``compute`` if it holds a peak FLOP/s, else to ``leaf``.

    Args:
        expr: time in s.
        leaf: category of the non-compute side (``memory`` for kernels).

    Returns:
        ``{"compute": expr, leaf: expr}``; the two add up to ``expr``.
    """
    zero = sp.Integer(0)
    if isinstance(expr, sp.Max) and len(expr.args) == 2 and \
            _is_compute(expr.args[0]) != _is_compute(expr.args[1]):
        c, m = expr.args if _is_compute(expr.args[0]) else expr.args[::-1]
        # 1 where compute is the larger side (a tie goes to compute): a Heaviside, not a
        # Piecewise, whose condition SymPy would fold and rewrite (~40 s over all operators)
        active = sp.Heaviside(c - m, 1)
        return {"compute": c * active, leaf: m * (1 - active)}
    if isinstance(expr, sp.Add):
        parts = [split_roofline(a, leaf) for a in expr.args]
        return {k: sp.Add(*(p[k] for p in parts)) for k in ("compute", leaf)}
    if isinstance(expr, sp.Mul):
        # the critical stage's layer count (a Heaviside of layer times) scales the row: a
        # coefficient, whatever rooflines and peaks its comparison holds
        stage = [a for a in expr.args if a.has(sp.Heaviside)]
        if stage:
            rest = split_roofline(sp.Mul(*(a for a in expr.args if a not in stage)), leaf)
            return {k: sp.Mul(*stage) * v for k, v in rest.items()}
        inner = [a for a in expr.args if a.has(sp.Max)]
        if len(inner) == 1:
            coeff = sp.Mul(*(a for a in expr.args if a is not inner[0]))
            part = split_roofline(inner[0], leaf)
            return {k: coeff * v for k, v in part.items()}
    if isinstance(expr, sp.Piecewise) and expr.has(sp.Max):
        branches = [(split_roofline(e, leaf), c) for e, c in expr.args]
        return {k: sp.Piecewise(*((p[k], c) for p, c in branches))
                for k in ("compute", leaf)}
    if _is_compute(expr):
        return {"compute": expr, leaf: zero}
    return {"compute": zero, leaf: expr}


@functools.lru_cache(maxsize=1)
def operator_times() -> dict[str, tuple[sp.Expr, str | None]]:
    """Per-step time of every operator (s, SymPy), unsplit.

    Returns:
        ``{operator: (expr, category)}``; ``category`` is None for operators split by
        :func:`split_roofline` (their non-compute side is ``memory``). The times sum to
        ``training_expressions()["step_time"]``.
    """
    m = T.micro_batches()
    Ls, heads = T.critical_stage()  # the slowest stage's layers and output heads (0 or 1)
    fwd = T.layer_forward_compute()
    bwd = T.layer_backward_compute()
    selective = T.selective_recompute_by_op()  # as in layer_recompute
    out: dict[str, tuple[sp.Expr, str | None]] = {}
    for op, cost in fwd.items():
        t = cost.time * (1 + T.FULL_SHARE) + bwd[op].time
        if op in selective:
            t = t + selective[op].time
        out[op] = (m * Ls * t, "overhead" if op == "moe_overhead" else None)  # [moe] fixed time
    # [fp8] the weight casts once per step (Transformer Engine reuses them across micro-batches)
    out["fp8_cast"] = (out["fp8_cast"][0] + T.fp8_weight_cast_time(), None)
    out["layer_overhead"] = (m * Ls * (3 + T.FULL_SHARE) * T.host_overhead(S.t_layer_overhead),
                             "overhead")
    n = T.tokens_micro()
    vocab_local = S.vocab / S.tp
    out["lm_head"] = (3 * m * heads * T.lm_head_compute().time, None)
    out["cross_entropy"] = (m * heads * emb.cross_entropy(n, vocab_local).time, "memory")
    out["embedding"] = (2 * m * heads * emb.embedding_lookup(n, S.hidden).time, "memory")
    # [offload] activation copies over the host link that the layers' compute does not hide
    off_f, off_b = T.activation_offload_exposed(*T.layer_pass_times()[:2])
    out["activation_offload"] = (m * (off_f + off_b), "communication")
    exprs = T.training_expressions()
    for row, (name, cat) in _BREAKDOWN_ROWS.items():
        out[row] = (exprs[name], cat)
    return out


@functools.lru_cache(maxsize=1)
def operator_expressions() -> dict[str, dict[str, sp.Expr]]:
    """Per-step time of every operator, split by category (s, SymPy).

    Returns:
        ``{operator: {category: expr}}``; the sum over operators and categories equals
        ``training_expressions()["step_time"]``.
    """
    return {op: split_roofline(e) if cat is None else {cat: e}
            for op, (e, cat) in operator_times().items()}


@functools.lru_cache(maxsize=1)
def _compiled() -> CompiledModel:
    flat = {f"{op}|{cat}": e for op, parts in operator_expressions().items()
            for cat, e in parts.items()}
    flat["step_time"] = T.training_expressions()["step_time"]
    return lower(flat, training_inputs_symbols(), "float64")


@dataclass
class OperatorRow:
    """One operator's part of the step.

    Attributes:
        name: operator name (see :data:`DESCRIPTIONS`).
        time: seconds per step attributed to it.
        share: ``time / step_time``.
        bound: the category with the largest time (``compute``, ``memory``,
            ``communication``, ``idle``, ``overhead``); ``-`` when the time is 0.
        parts: category -> seconds.
    """

    name: str
    time: float
    share: float
    bound: str
    parts: dict[str, float]


@dataclass
class Bottleneck:
    """Bottleneck attribution of one configuration.

    Attributes:
        step_time: s.
        operators: rows, largest time first.
        categories: category -> share of the step time.
        model, hardware, config: what was analysed.
    """

    step_time: float
    operators: list[OperatorRow]
    categories: dict[str, float]
    model: ModelSpec | None
    hardware: HardwareSpec | None
    config: TrainingConfig | None

    @property
    def limiter(self) -> OperatorRow:
        """The operator with the largest share of the step time."""
        return self.operators[0]

    def summary(self) -> str:
        """One line: what limits the step."""
        top = self.limiter
        cats = ", ".join(f"{k} {100 * v:.1f} %" for k, v in
                         sorted(self.categories.items(), key=lambda kv: -kv[1]) if v > 0)
        return (f"limited by {top.name} ({top.bound}-bound, {100 * top.share:.1f} % of the "
                f"step); step time by category: {cats}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the ``bottleneck --json`` object without ``fits``): ``model``,
        ``hardware``, ``config``, ``step_time_s``, ``summary``, ``categories`` (shares) and
        ``operators`` (``time_s``, ``share``, ``bound``, ``parts_s``)."""
        cfg = self.config
        return {"schema_version": SCHEMA_VERSION,
                "model": getattr(self.model, "name", None),
                "hardware": getattr(self.hardware, "name", None),
                "config": None if cfg is None else dataclasses.asdict(cfg),
                "step_time_s": self.step_time, "summary": self.summary(),
                "categories": self.categories,
                "operators": [{"name": r.name, "time_s": r.time, "share": r.share,
                               "bound": r.bound, "parts_s": r.parts,
                               "description": DESCRIPTIONS.get(r.name, "")}
                              for r in self.operators]}


def bottleneck(model: ModelSpec | str, hardware: HardwareSpec | str,
               config: TrainingConfig | None = None, params: Params | None = None,
               **config_fields: Any) -> Bottleneck:
    """Attribute the step time of one configuration to operators and bound categories.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        config: :class:`~symcost.config.TrainingConfig`, or its fields as keywords.
        params: efficiency parameters; the shipped calibration when None.

    Returns:
        :class:`Bottleneck` (times in s, shares as fractions of the step time).

    Raises:
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input.
    """
    m, hw, cfg, inputs = prepare_training(model, hardware, config, params,
                                          **config_fields)
    return attribute(inputs, m, hw, cfg)


def attribute(inputs: dict[str, float], model: ModelSpec | None = None,
              hardware: HardwareSpec | None = None, config: TrainingConfig | None = None
              ) -> Bottleneck:
    """:func:`bottleneck` from symbol bindings (``symcost.api.training_inputs``)."""
    cm = _compiled()
    vals = cm.call_numpy(**{n: inputs[n] for n in cm.input_names})
    step = float(vals["step_time"])
    rows: list[OperatorRow] = []
    cats = dict.fromkeys(CATEGORIES, 0.0)
    for op, parts in operator_expressions().items():
        p = {cat: float(vals[f"{op}|{cat}"]) for cat in parts}
        total = sum(p.values())
        bound = max(p, key=lambda c: p[c]) if total > 0 else "-"
        rows.append(OperatorRow(op, total, total / step if step else 0.0, bound, p))
        for cat, v in p.items():
            cats[cat] += v / step if step else 0.0
    rows.sort(key=lambda r: r.time, reverse=True)
    return Bottleneck(step, rows, cats, model, hardware, config)


__all__ = ["CATEGORIES", "Bottleneck", "OperatorRow", "attribute", "bottleneck",
           "operator_expressions", "operator_times", "split_roofline"]
