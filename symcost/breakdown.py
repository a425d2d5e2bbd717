"""Module-wise time breakdown of a decoder layer in the categories of Zhang et al. 2023.

Zhang et al. 2023 (arXiv:2311.03687v2, Sec. IV-B and Figs. 5-7) break a Llama decoder layer
into RMSNorm, QKV projection, RoPE, QK^T, softmax, attention·V, output projection and MLP,
for the forward, backward and optimizer phases of training and the prefill and decode phases
of inference. This module builds those terms from the same operator costs the training and
inference models use (:mod:`symcost.training`, :mod:`symcost.inference`) and evaluates them
for one configuration; it returns data (seconds per module and phase), the CLI draws it.

Conventions:

* Times are per optimizer step (training: every micro-batch and every layer of the critical
  pipeline stage) or per request batch (inference: the prefill of ``batch`` prompts and the
  ``output_len - 1`` decode steps at the mean context).
* The backward phase includes recomputation. LoRA/QLoRA: frozen projections have no weight
  gradient, adapters and NF4 dequantization are added to their projection.
* FlashAttention fuses QK^T, softmax and attention·V into one kernel: its time is split
  between QK^T and attention·V by their FLOPs (half each) and softmax gets none, but for the
  merges of ring context parallelism's per-step partial outputs and gradients (the online
  softmax's rescaling across ring steps, :func:`symcost.training.cp_ring_merge`).
* ``RoPE`` (rotary position embedding, not in the step-time model) is the memory-bound
  rotation of Q and K: read and write ``(a + k) * d`` 16-bit elements per token per rank
  (Su et al. 2021, RoFormer, Sec. 3.4.2). It is reported here only, not added to the step,
  and is zero for a model without rotary embeddings (``position`` learned, alibi or none).
* ``other`` collects what is not a layer module: embedding and LM head with the loss,
  residual adds and dropout, fp8 casts, a hybrid model's Mamba-2 mixers, communication,
  pipeline bubble and fixed overheads,
  so that the phases sum to the predicted step time plus the RoPE terms (training).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import sympy as sp

from hwspecs import HardwareSpec

from . import finetune as ft
from . import inference as inf
from . import symbols as S
from . import training as tr
from .api import as_model, training_inputs
from .config import InferenceConfig, TrainingConfig, model_bindings
from .infer_api import inference_inputs
from .models import ModelSpec
from .params import Params
from .ops import attention as att
from .ops.cost import Cost, time_memory_bound
from .ops.gemm import gemm
from .functions import replace_symbols, smax, xreplace_shared

__all__ = ["inference_modules", "training_modules", "MODULES", "TRAIN_PHASES", "INFER_PHASES", "evaluate_terms", "rope_cost",
           "training_module_terms", "inference_module_terms"]

#: module names, in layer order (the seed's categories), then ``other``.
MODULES = ("rmsnorm", "qkv_proj", "rope", "qk_t", "softmax", "attn_v", "out_proj", "mlp",
           "other")
TRAIN_PHASES = ("forward", "backward", "optimizer")
INFER_PHASES = ("prefill", "decode")
HALF = sp.Rational(1, 2)


def rope_cost(tokens: sp.Expr) -> Cost:
    """Rotary embedding of the Q and K heads of ``tokens`` tokens on one TP rank: read and
    write ``(a/t + k_l) * d`` 16-bit elements per token (and 6 FLOP per element pair),
    memory-bound at achieved HBM bandwidth."""
    elems = tokens * (S.n_heads / S.tp + tr.kv_heads_local()) * tr.head_dim()
    nbytes = 2 * S.BYTES_ACT * elems
    return Cost(3 * elems, nbytes, time_memory_bound(nbytes, S.hbm_bw, S.eff_hbm))


def _attention_parts_unfused(b: sp.Expr, s: sp.Expr, heads: sp.Expr, kv: sp.Expr,
                             d: sp.Expr, dropout: sp.Expr) -> dict[str, sp.Expr]:
    """QK^T, softmax (with the GQA expansion and dropout) and AV times of the unfused core
    attention (forward)."""
    full = att.attention_unfused(b, s, heads, kv, d, S.peak_flops_16, dropout).time
    scores = gemm(s, s, d, S.peak_flops_16, batch=b * heads, weight=False).time
    av = gemm(s, d, s, S.peak_flops_16, batch=b * heads, weight=False).time
    return {"qk_t": scores, "attn_v": av, "softmax": full - scores - av}


def training_module_terms() -> dict[str, dict[str, sp.Expr]]:
    """Per phase, per module, the time (s) per optimizer step as SymPy expressions.

    ``mlp`` is the dense MLP or, in MoE layers, the router and the routed and shared experts
    (GEMMs and activations); token permutation and the expert-parallel all-to-all are in
    ``other``.

    Returns:
        ``{"forward" | "backward" | "optimizer": {module: expr}}`` over :data:`MODULES`;
        the three phases sum to ``step_time`` of
        :func:`symcost.training.training_expressions` plus the ``rope`` terms.
    """
    ex = tr.training_expressions()
    m = tr.micro_batches()
    Ls, _ = tr.critical_stage()  # the slowest stage's layers; its head goes to "other"
    n = tr.tokens_micro()
    peak = tr.gemm_peak()
    fwd = tr.layer_forward_compute()
    d, heads, kv = tr.head_dim(), S.n_heads / S.tp, tr.kv_heads_local()
    flash = S.flash_attn > HALF
    # the attention core's time is the training model's (context parallelism, sliding
    # windows, the kernel library, hybrid blocks); the unfused kernels' parts split it by
    # their own times, FlashAttention's fused kernel half each to QK^T and attention.V
    unf = _attention_parts_unfused(S.micro_batch, S.seq_len, heads, kv, d, S.has_dropout)
    unf_total = unf["qk_t"] + unf["softmax"] + unf["attn_v"]
    core = {False: fwd["attention"].time,
            True: tr.layer_backward_compute()["attention"].time}

    fa = tr.attention_layer_fraction()  # [hybrid] attention blocks per layer
    # [cp] the ring's per-step merges inside the attention time (zero without a ring)
    merge = {False: fa * tr.cp_ring_merge().time,
             True: fa * tr.cp_ring_merge(backward=True).time}

    def share(part: str, backward: bool = False) -> sp.Expr:
        ring = merge[backward] / smax(core[backward], sp.Float(1e-30))
        fused = ring if part == "softmax" else (1 - ring) * HALF
        return sp.Piecewise((fused, flash), (unf[part] / unf_total, True))

    def attn(part: str, backward: bool) -> sp.Expr:
        return core[backward] * share(part, backward)

    adapters = ft.adapter_compute_layer(n, peak).time
    deq = ft.dequant_time_layer()
    frozen = ft.IS_ADAPTER
    # share of the adapter and dequantization time per projection: by weight size
    h, f, g = S.hidden, S.ffn_hidden, S.gated_mlp
    w_qkv = h * (heads + 2 * kv) * d
    w_o = heads * d * h
    w_mlp = (2 + g) * h * f / S.tp
    w_all = w_qkv + w_o + w_mlp

    def proj(names: tuple[str, ...], weight: sp.Expr, backward: bool) -> sp.Expr:
        t = sp.Add(*(fwd[k].time for k in names))
        extra = (adapters + deq) * weight / w_all
        if not backward:
            return t + extra
        return (2 - frozen) * t + (2 * adapters + deq) * weight / w_all

    def layer(backward: bool) -> dict[str, sp.Expr]:
        k = 2 if backward else 1
        return {
            "rmsnorm": k * fwd["norms"].time,
            "qkv_proj": proj(("qkv_proj",), w_qkv, backward),
            "rope": k * fa * S.rotary_pos * rope_cost(n).time,
            "qk_t": attn("qk_t", backward),
            "softmax": attn("softmax", backward),
            "attn_v": attn("attn_v", backward),
            "out_proj": proj(("out_proj",), w_o, backward),
            # the dense MLP and, in MoE layers, the router and the routed and shared experts
            # (their adapters and dequantization are not modelled: share 0)
            "mlp": (proj(("mlp_up", "mlp_down"), w_mlp, backward)
                    + proj(("router", "expert_up", "expert_down", "shared_experts",
                            "moe_latent_proj"),
                           sp.Integer(0), backward)
                    + k * (fwd["activation"].time + fwd["expert_activation"].time)),
        }

    rec_share = tr.FULL_SHARE  # full recompute re-runs the forward of its share of layers
    f_layer, b_layer = layer(False), layer(True)
    out: dict[str, dict[str, sp.Expr]] = {p: {} for p in TRAIN_PHASES}
    for mod in MODULES[:-1]:
        out["forward"][mod] = m * Ls * f_layer[mod]
        out["backward"][mod] = m * Ls * (b_layer[mod] + rec_share * f_layer[mod])
    # selective recomputation (tr.selective_recompute_by_op): the attention core's forward
    # goes to its three parts as in the forward, the other modules to theirs
    rec = {op: c.time for op, c in tr.selective_recompute_by_op().items()}
    for part in ("qk_t", "softmax", "attn_v"):
        out["backward"][part] += m * Ls * rec["attention"] * share(part)
    out["backward"]["rmsnorm"] += m * Ls * rec["norms"]
    out["backward"]["qkv_proj"] += m * Ls * rec["qkv_proj"]
    out["backward"]["mlp"] += m * Ls * sum(rec[op] for op in (
        "mlp_up", "mlp_down", "activation", "expert_activation", "shared_experts"))
    out["optimizer"] = {mod: sp.Integer(0) for mod in MODULES}
    out["optimizer"]["other"] = ex["time_optimizer"]
    known = sum((sum(out[p][mod] for mod in MODULES[:-1]) for p in ("forward", "backward")),
                sp.Integer(0))
    rope_total = out["forward"]["rope"] + out["backward"]["rope"]
    rest = ex["step_time"] - ex["time_optimizer"] - (known - rope_total)
    # the rest of the step (head, residuals, comm, bubble, overheads) by phase
    fwd_share = ex["time_forward"] / (ex["time_forward"] + ex["time_backward"]
                                      + ex["time_recompute"])
    out["forward"]["other"] = rest * fwd_share
    out["backward"]["other"] = rest * (1 - fwd_share)
    return out


def _serving_mlp(gemms: dict[str, Cost]) -> sp.Expr:
    """Time of the MLP GEMMs of one serving layer (:func:`symcost.inference.layer_gemms`):
    the dense MLP's and, weighted by the MoE fraction, the router and the routed and shared
    experts."""
    return sp.Add(*(gemms[k].time for k in ("mlp_up", "mlp_down", "router", "experts",
                                              "shared_experts")))


def inference_module_terms() -> dict[str, dict[str, sp.Expr]]:
    """Per phase (prefill of the batch's prompts, all decode steps), per module, the time (s)
    on the critical stage as SymPy expressions over the inference symbols. ``mlp``: the dense
    MLP or, in MoE layers, the router, routed and shared experts and their activation;
    ``other``: LM head, residuals, KV-cache writes, tensor- and expert-parallel communication
    and step overheads."""
    Ls = tr.layers_per_stage()
    b, s_in, s_out = S.batch, S.input_len, S.output_len
    d, heads, kv = tr.head_dim(), S.n_heads / S.tp, tr.kv_heads_local()
    flash = S.flash_attn > HALF
    out: dict[str, dict[str, sp.Expr]] = {}
    # prefill: b prompts of s_in tokens
    rows = b * s_in
    gm = inf.layer_gemms(rows)
    mo = inf.layer_memory_ops(rows)
    # the serving model's prefill attention (sliding windows, MLA), split as in training
    unf = _attention_parts_unfused(b, s_in, heads, kv, d, sp.Integer(0))
    unf_total = unf["qk_t"] + unf["softmax"] + unf["attn_v"]
    core = inf.attention_prefill(b, s_in).time

    def part(name: str) -> sp.Expr:
        fused = 0 if name == "softmax" else HALF
        return core * sp.Piecewise((fused, flash), (unf[name] / unf_total, True))

    pre = {
        "rmsnorm": mo["norms"].time, "qkv_proj": gm["qkv_proj"].time,
        "rope": S.rotary_pos * rope_cost(rows).time,
        "qk_t": part("qk_t"), "softmax": part("softmax"), "attn_v": part("attn_v"),
        "out_proj": gm["out_proj"].time,
        "mlp": _serving_mlp(gm) + mo["activation"].time,
    }
    pre_other = (mo["residual"].time + mo["kv_write"].time + inf.tp_comm(rows).time
                 + inf.ep_comm(rows).time)
    head = sum((c.time for c in inf.lm_head(rows, b).values()), sp.Integer(0))
    out["prefill"] = {k: Ls * v for k, v in pre.items()}
    out["prefill"]["other"] = Ls * pre_other + head + S.t_infer_step
    # decode: s_out - 1 steps of b tokens at the mean context
    ctx = inf.mean_decode_context()
    steps = s_out - 1
    gd = inf.layer_gemms(b)
    md = inf.layer_memory_ops(b)
    ad = inf.attention_decode(b, ctx, inf.mean_decode_window_context()).time
    dec = {
        "rmsnorm": md["norms"].time, "qkv_proj": gd["qkv_proj"].time,
        "rope": S.rotary_pos * rope_cost(b).time,
        # decode attention: QK^T and AV each read one of K and V (half the bytes each)
        "qk_t": ad / 2, "softmax": sp.Integer(0), "attn_v": ad / 2,
        "out_proj": gd["out_proj"].time,
        "mlp": _serving_mlp(gd) + md["activation"].time,
    }
    dec_other = (md["residual"].time + md["kv_write"].time + inf.tp_comm(b).time
                 + inf.ep_comm(b).time)
    head_d = sum((c.time for c in inf.lm_head(b, b).values()), sp.Integer(0))
    out["decode"] = {k: steps * Ls * v for k, v in dec.items()}
    out["decode"]["other"] = steps * (Ls * dec_other + head_d + S.t_infer_step)
    memo: dict[sp.Basic, sp.Expr] = {}
    return {ph: {k: replace_symbols(sp.sympify(v), inf.INFERENCE_EFFICIENCIES, memo)
                 for k, v in mods.items()} for ph, mods in out.items()}


def evaluate_terms(terms: Mapping[str, Mapping[str, sp.Expr]],
                   values: Mapping[str, float]) -> dict[str, dict[str, float]]:
    """Evaluate nested module terms at one configuration's symbol ``values`` (by name).

    Raises:
        ValueError: a term depends on a symbol missing from ``values``.
    """
    subs = {S.REGISTRY[k].symbol: sp.Float(v) for k, v in values.items() if k in S.REGISTRY}
    memo: dict[sp.Basic, sp.Basic] = {}
    out: dict[str, dict[str, float]] = {}
    for phase, mods in terms.items():
        out[phase] = {}
        for mod, expr in mods.items():
            val: Any = xreplace_shared(sp.sympify(expr), subs, memo)
            if val.free_symbols:
                missing = ", ".join(sorted(str(x) for x in val.free_symbols))
                raise ValueError(f"breakdown: {phase}.{mod} needs values for {missing}")
            out[phase][mod] = float(val.evalf())
    return out


def training_modules(model: ModelSpec | str, hardware: HardwareSpec | str,
                     config: TrainingConfig, params: Params | None = None
                     ) -> dict[str, dict[str, float]]:
    """Module-wise training time (s per optimizer step) of one configuration.

    Args:
        model, hardware: specs or preset/hardware ids.
        config: the training layout (validated).
        params: efficiency parameters; the shipped calibration when None.

    Returns:
        ``{"forward" | "backward" | "optimizer": {module: seconds}}`` over :data:`MODULES`.

    Raises:
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input.
    """
    values = training_inputs(model, hardware, config, params)
    return evaluate_terms(training_module_terms(), values)


def inference_modules(model: ModelSpec | str, hardware: HardwareSpec | str,
                      config: InferenceConfig, params: Params | None = None
                      ) -> dict[str, dict[str, float]]:
    """Module-wise inference time of one request batch: ``{"prefill" | "decode": {module:
    seconds}}`` (prefill of ``batch`` prompts; all ``output_len - 1`` decode steps).

    Raises:
        InferenceConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input.
    """
    spec = as_model(model)
    # the compiled serving model's inputs, and the model facts only the modules read (RoPE)
    values = {**model_bindings(spec), **inference_inputs(spec, hardware, config, params)}
    return evaluate_terms(inference_module_terms(), values)
