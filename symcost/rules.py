"""The validity rules of a configuration, each written once.

A :class:`Rule` is a predicate over named values that works on Python scalars and on NumPy or
JAX arrays alike (``xp`` is the array module). The same objects serve three uses:

* :func:`check` raises the one-line :class:`~symcost.fields.ConfigError` for one
  configuration (:func:`symcost.config.resolve`, :func:`symcost.config.resolve_inference`);
* :func:`first_broken` gives, per row, the code of the first rule a row breaks, inside the
  compiled sweep function (:mod:`symcost.sweep`: masks and their reasons);
* the search space (:mod:`optimizers.space`) applies each rule at the enumeration stage
  where the columns it reads are complete (pruning, with counts).

Value names a rule reads: configuration fields (:data:`symcost.fields.TRAINING_FIELDS`,
:data:`~symcost.fields.INFERENCE_FIELDS`; enums and bools by their codes), model fields
(:data:`~symcost.fields.MODEL_FIELDS`, ``learned_pos`` and ``hybrid``), hardware facts ``hw_bf16``,
``hw_fp16``, ``hw_fp8`` (1 when the GPU has that dense tensor-core peak), ``hw_node`` (GPUs
per node), ``global_batch_given``
(1 when the user gave the global batch), and model outputs for :data:`OUTPUT_RULES`.
Integer values are integer-valued floats; a remainder test ``floor(a/b)*b != a`` is exact for
integers below ``2**24`` in float32 (the field range, :data:`symcost.fields.MAX_COUNT`).

Sources: divisibility of heads and FFN by TP, and KV-head replication, Shoeybi et al. 2019
(Megatron-LM) Sec. 3 and Megatron-Core GQA; pipeline rules and the interleaved schedule,
Narayanan et al. 2021, Sec. 2.2; ZeRO stages, Rajbhandari et al. 2020.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .fields import (DTYPE_BYTES, LORA_TARGETS, MODEL_PARALLEL, RECOMPUTE_MODULE_SETS,
                     ConfigError, model_parallel_size)

Values = Mapping[str, Any]


@dataclass(frozen=True)
class Rule:
    """One validity rule.

    Attributes:
        code: stable identifier (``tp_divides_heads``).
        field: the field a broken rule is reported on (first word of the message).
        reads: value names the predicate reads.
        ok: ``ok(values, xp) -> bool or bool array``: True where the rule holds.
        reason: short text for sweep masks and search logs (without the field).
        message: ``message(values) -> str``: the detailed scalar message (without the
            field); defaults to :attr:`reason`.
        vectorized: False for rules over text values (inference dtypes) that only
            :func:`check` evaluates.
    """

    code: str
    field: str
    reads: tuple[str, ...]
    ok: Callable[[Values, Any], Any]
    reason: str
    message: Callable[[Values], str] | None = None
    vectorized: bool = True

    @property
    def text(self) -> str:
        """``"<field>: <reason>"``, the label of a masked sweep row or a search rejection."""
        return f"{self.field}: {self.reason}"

    def error(self, values: Values, cls: type[ConfigError] = ConfigError) -> ConfigError:
        """The error (a ``cls``, by default :class:`ConfigError`) for a configuration that
        breaks this rule: ``"<field>: <detail>"``."""
        detail = self.message(values) if self.message is not None else self.reason
        return cls(f"{self.field}: {detail}")


def indivisible(xp: Any, a: Any, b: Any) -> Any:
    """True where ``b`` does not divide ``a`` (positive integer-valued floats or ints).

    ``floor(a/b)*b`` is exact for integers below ``2**24`` in float32 (``2**53`` in float64):
    the rounded quotient of a non-multiple stays more than half an ulp from an integer.
    (``fmod`` is a scalar libm call in XLA:CPU, about 10x slower.)"""
    return xp.floor(a / b) * b != a


def _i(x: Any) -> str:
    """A count for a message: ``8`` rather than ``8.0``."""
    f = float(x)
    return str(int(f)) if f.is_integer() else f"{f:g}"


# ----------------------------------------------------------------------------- model shape
HIDDEN_HEADS = Rule(
    "hidden_divisible_by_heads", "hidden", ("hidden", "heads"),
    lambda v, xp: ~indivisible(xp, v["hidden"], v["heads"]), "not divisible by heads",
    lambda v: f"{_i(v['hidden'])} is not divisible by heads ({_i(v['heads'])})")
HEADS_KV = Rule(
    "heads_divisible_by_kv_heads", "heads", ("heads", "kv_heads"),
    lambda v, xp: ~indivisible(xp, v["heads"], v["kv_heads"]), "not divisible by kv_heads",
    lambda v: f"{_i(v['heads'])} is not divisible by kv_heads ({_i(v['kv_heads'])})")

# ----------------------------------------------------------------------------- layout
_MP = "*".join(MODEL_PARALLEL)
def _mp_names(v: Values) -> str:
    """The model-parallel degrees a configuration has (inference has no ``cp``)."""
    return "*".join(k for k in MODEL_PARALLEL if k in v)


NUM_GPUS_DIVISIBLE = Rule(
    "num_gpus_divisible_by_tp_pp", "num_gpus", ("num_gpus",) + MODEL_PARALLEL,
    lambda v, xp: ~indivisible(xp, v["num_gpus"], model_parallel_size(v)),
    f"not divisible by {_MP}",
    lambda v: f"{_i(v['num_gpus'])} is not divisible by {_mp_names(v)} = "
              f"{_i(model_parallel_size(v))}")
NUM_GPUS_PRODUCT = Rule(
    "num_gpus_is_tp_pp_dp", "num_gpus", ("num_gpus", "dp") + MODEL_PARALLEL,
    lambda v, xp: model_parallel_size(v) * v["dp"] == v["num_gpus"], f"{_MP}*dp != num_gpus",
    lambda v: f"{_MP}*dp = {'*'.join(_i(v[k]) for k in MODEL_PARALLEL + ('dp',))} = "
              f"{_i(model_parallel_size(v) * v['dp'])} != num_gpus = {_i(v['num_gpus'])}")
GLOBAL_BATCH_NEEDED = Rule(
    "global_batch_given_with_pp", "global_batch", ("global_batch_given", "pp"),
    lambda v, xp: (v["global_batch_given"] > 0.5) | (v["pp"] < 1.5),
    "must be given when pp > 1",
    lambda v: "must be given when pp > 1: the pipeline bubble, (pp-1)/(m+pp-1) of the step, "
              "depends on the micro-batch count m = global_batch/(micro_batch*dp), so there "
              "is no neutral default (Narayanan et al. 2021, Sec. 2.2)")
GLOBAL_BATCH_DIVISIBLE = Rule(
    "global_batch_divisible", "global_batch", ("global_batch", "micro_batch", "dp"),
    lambda v, xp: ~indivisible(xp, v["global_batch"], v["micro_batch"] * v["dp"]),
    "not divisible by micro_batch*dp",
    lambda v: f"{_i(v['global_batch'])} is not divisible by micro_batch*dp = "
              f"{_i(v['micro_batch'])}*{_i(v['dp'])} = {_i(v['micro_batch'] * v['dp'])}")


def _position_rule(field: str, length: Callable[[Values], Any], what: str) -> Rule:
    """Tokens beyond the model's learned position embeddings have no embedding (models with
    RoPE or ALiBi may run longer contexts: context extension)."""
    reads = ("seq_len",) if field == "seq_len" else ("input_len", "output_len")
    return Rule(
        f"{field}_within_learned_positions", field, reads + ("learned_pos", "max_seq_len"),
        lambda v, xp: (v["learned_pos"] < 0.5) | (length(v) <= v["max_seq_len"]),
        "exceeds max_seq_len with learned positions",
        lambda v: f"{what}{_i(length(v))}{' tokens' if what else ''} exceeds the model's learned positions "
                  f"(max_seq_len = {_i(v['max_seq_len'])})")


SEQ_LEN_POSITIONS = _position_rule("seq_len", lambda v: v["seq_len"], "")
CONTEXT_POSITIONS = _position_rule("context", lambda v: v["input_len"] + v["output_len"],
                                   "input_len + output_len = ")
TP_HEADS = Rule(
    "tp_divides_heads", "tp", ("tp", "heads"),
    lambda v, xp: ~indivisible(xp, v["heads"], v["tp"]), "does not divide heads",
    lambda v: f"{_i(v['tp'])} does not divide the number of attention heads "
              f"({_i(v['heads'])})")
TP_FFN = Rule(
    "tp_divides_ffn_hidden", "tp", ("tp", "ffn_hidden"),
    lambda v, xp: ~indivisible(xp, v["ffn_hidden"], v["tp"]), "does not divide ffn_hidden",
    lambda v: f"{_i(v['tp'])} does not divide ffn_hidden ({_i(v['ffn_hidden'])})")
TP_KV_HEADS = Rule(
    "tp_kv_heads_divide", "tp", ("tp", "kv_heads"),
    lambda v, xp: ~(indivisible(xp, v["kv_heads"], v["tp"])
                    & indivisible(xp, v["tp"], v["kv_heads"])),
    "tp and kv_heads must divide one another",
    lambda v: f"{_i(v['tp'])} and kv_heads ({_i(v['kv_heads'])}) must divide one another "
              "(KV heads are split when kv_heads % tp == 0, replicated when "
              "tp % kv_heads == 0)")
PP_LAYERS = Rule(
    "pp_at_most_layers", "pp", ("pp", "layers"),
    lambda v, xp: v["pp"] <= v["layers"], "exceeds the number of layers",
    lambda v: f"{_i(v['pp'])} exceeds the number of layers ({_i(v['layers'])})")
BF16_LAYERS = Rule(
    "bf16_layers_at_most_layers", "bf16_layers", ("bf16_layers", "layers"),
    lambda v, xp: v.get("bf16_layers", 0.0) <= v["layers"], "exceeds the number of layers",
    lambda v: f"{_i(v['bf16_layers'])} exceeds the number of layers ({_i(v['layers'])})")
VPP_NEEDS_PP = Rule(
    "vpp_needs_pp", "vpp", ("vpp", "pp"),
    lambda v, xp: (v["vpp"] < 1.5) | (v["pp"] > 1.5),
    "interleaving (vpp > 1) needs pp > 1",
    lambda v: "the interleaved schedule (vpp > 1) needs pp > 1")
VPP_LAYERS = Rule(
    "vpp_at_most_layers", "vpp", ("vpp", "pp", "layers"),
    lambda v, xp: v["pp"] * v["vpp"] <= v["layers"] + 2,
    "fewer layers than pp*vpp - 2",
    lambda v: f"layers ({_i(v['layers'])}) must be at least pp*vpp - 2 = "
              f"{_i(v['pp'] * v['vpp'] - 2)}: every virtual stage of the interleaved schedule "
              "needs a layer, the embedding and the loss counting as one each "
              "(Megatron-Core account_for_embedding_in_pipeline_split and "
              "account_for_loss_in_pipeline_split; uneven splits put the extra layers on the "
              "first stages)")
VPP_MICROBATCHES = Rule(
    "vpp_microbatches_multiple_of_pp", "vpp",
    ("vpp", "pp", "global_batch", "micro_batch", "dp"),
    lambda v, xp: (v["vpp"] < 1.5) | ~indivisible(
        xp, v["global_batch"] / (v["micro_batch"] * v["dp"]), v["pp"]),
    "micro-batch count not a multiple of pp",
    lambda v: "the interleaved schedule needs the micro-batch count "
              f"({_i(v['global_batch'] / (v['micro_batch'] * v['dp']))}) to be a multiple of "
              f"pp ({_i(v['pp'])})")
ZERO_PP = Rule(
    "zero_2_3_without_pp", "zero", ("zero", "pp"),
    lambda v, xp: (v["zero"] < 1.5) | (v["pp"] < 1.5),
    "ZeRO-2/3 cannot be combined with pp > 1",
    lambda v: f"ZeRO-{_i(v['zero'])} shards gradients across micro-batches and cannot be "
              "combined with pipeline parallelism (pp > 1); use zero <= 1")
DTYPE_HARDWARE = Rule(
    "dtype_supported_by_hardware", "dtype",
    ("dtype", "hw_bf16", "hw_fp16", "hw_fp8", "hw_fp4", "hw_mx"),
    # mxfp8 (block-scaled, OCP MX) needs MX tensor cores and an fp8 peak, nvfp4 an fp4 peak
    lambda v, xp: (((v["dtype"] < 0.5) & (v["hw_bf16"] > 0.5))
                   | ((v["dtype"] > 0.5) & (v["dtype"] < 1.5) & (v["hw_fp16"] > 0.5))
                   | ((v["dtype"] > 1.5) & (v["dtype"] < 2.5) & (v["hw_fp8"] > 0.5))
                   | ((v["dtype"] > 2.5) & (v["dtype"] < 3.5) & (v["hw_fp8"] > 0.5)
                      & (v["hw_mx"] > 0.5))
                   | ((v["dtype"] > 3.5) & (v["hw_fp4"] > 0.5))),
    "not supported by the hardware",
    lambda v: f"{v.get('hw_name', 'this GPU')} has no {v.get('dtype_name', 'such')} "
              f"tensor-core peak (it supports {', '.join(sorted(v.get('hw_dtypes', ())))})")
CP_SEQ = Rule(
    "cp_divides_seq_len", "cp", ("cp", "seq_len"),
    lambda v, xp: (v["cp"] < 1.5) | ~indivisible(xp, v["seq_len"], 2 * v["cp"]),
    "2*cp does not divide seq_len",
    lambda v: f"2*cp = {_i(2 * v['cp'])} does not divide seq_len ({_i(v['seq_len'])}): "
              "load-balanced causal context parallelism splits each sequence into 2*cp chunks "
              "(Megatron-Core context parallelism)")
DOC_LEN_SEQ = Rule(
    "doc_len_within_seq_len", "doc_len", ("doc_len", "seq_len"),
    lambda v, xp: v.get("doc_len", 0.0) <= v["seq_len"],
    "exceeds seq_len",
    lambda v: f"{_i(v['doc_len'])} exceeds seq_len ({_i(v['seq_len'])}): the documents are "
              "packed into sequences of seq_len tokens")
CP_FLASH = Rule(
    "cp_needs_flash_attention", "cp", ("cp", "flash_attention"),
    lambda v, xp: (v["cp"] < 1.5) | (v["flash_attention"] > 0.5),
    "context parallelism needs flash_attention",
    lambda v: f"{_i(v['cp'])} > 1 needs flash_attention (ring attention runs on fused "
              "attention kernels that keep no s x s score matrix)")
CP_A2A_HEADS = Rule(
    "cp_a2a_divides_heads", "cp_comm_type", ("cp_comm_type", "cp", "tp", "heads", "kv_heads"),
    lambda v, xp: (v.get("cp_comm_type", 0.0) < 1.5) | (v["cp"] < 1.5)
    | ~(indivisible(xp, v["heads"], v["tp"] * v["cp"])
        | indivisible(xp, v["kv_heads"], v["tp"] * v["cp"])),
    "a2a needs tp*cp to divide heads and kv_heads",
    lambda v: f"a2a needs tp*cp = {_i(v['tp'] * v['cp'])} to divide the attention heads "
              f"({_i(v['heads'])}) and the KV heads ({_i(v['kv_heads'])}): each rank takes "
              "whole heads after the all-to-all (DeepSpeed-Ulysses; Transformer Engine "
              "asserts it)")
EP_DP = Rule(
    "ep_divides_tp_cp_dp", "ep", ("ep", "tp", "dp", "cp"),
    lambda v, xp: ~indivisible(xp, v["tp"] * v["dp"] * v["cp"], v["ep"]),
    "does not divide tp*cp*dp",
    lambda v: f"{_i(v['ep'])} does not divide tp*cp*dp = {_i(v['tp'] * v['cp'] * v['dp'])} "
              "(expert-parallel ranks are folded over the tensor-, context- and data-parallel "
              "ranks of the attention layers: Megatron-Core MoE parallel folding)")
# a search space does not vary etp: 1 (the default) where a value set has none
ETP_DP = Rule(
    "ep_etp_divides_tp_cp_dp", "etp", ("etp", "ep", "tp", "dp", "cp"),
    lambda v, xp: ~indivisible(xp, v["tp"] * v["dp"] * v["cp"], v["ep"] * v.get("etp", 1.0)),
    "ep*etp does not divide tp*cp*dp",
    lambda v: f"ep*etp = {_i(v['ep'] * v.get('etp', 1.0))} does not divide tp*cp*dp = "
              f"{_i(v['tp'] * v['cp'] * v['dp'])} (one copy of the experts is split over "
              "ep*etp of the attention layers' ranks: Megatron-Core MoE parallel folding)")
ETP_FFN = Rule(
    "etp_divides_moe_ffn_hidden", "etp", ("etp", "experts", "moe_ffn_hidden"),
    lambda v, xp: (v.get("etp", 1.0) < 1.5) | ((v["experts"] > 0.5) & ~indivisible(
        xp, xp.maximum(v["moe_ffn_hidden"], 1), v.get("etp", 1.0))),
    "does not divide moe_ffn_hidden",
    lambda v: (f"{_i(v.get('etp', 1.0))} does not divide moe_ffn_hidden "
               f"({_i(v['moe_ffn_hidden'])}) (each expert's FFN is split over etp ranks)"
               if v["experts"] > 0.5 else
               f"{_i(v.get('etp', 1.0))} > 1 needs a mixture-of-experts model (this model is "
               "dense)"))


def _imbalance_bound(v: Values, xp: Any) -> Any:
    """Largest routed-token load factor an expert-parallel rank can have: all of a token's
    ``k`` copies on one rank of ``E/ep`` experts, ``min(ep, E/k)``; 1 for a dense model."""
    moe = v["experts"] > 0.5
    bound = xp.minimum(v["ep"], xp.maximum(v["experts"], 1) / xp.maximum(v["top_k"], 1))
    return xp.where(moe, bound, 1.0)


MOE_IMBALANCE = Rule(
    "moe_imbalance_at_most_bound", "moe_imbalance", ("moe_imbalance", "ep", "experts", "top_k"),
    # a search space does not vary it: the default, balanced routing
    lambda v, xp: v.get("moe_imbalance", 1.0) <= _imbalance_bound(v, xp) * (1 + 1e-6),
    "exceeds min(ep, experts/top_k) (every routed token on one expert-parallel rank)",
    lambda v: (f"{v['moe_imbalance']:g} exceeds min(ep, experts/top_k) = "
               f"{float(_imbalance_bound(v, np)):g} (the busiest of the ep ranks holds at most "
               "all routed token copies; 1 without expert parallelism or experts)"))
HSDP_DP = Rule(
    "dp_replicate_divides_dp_cp", "dp_replicate", ("dp_replicate", "dp", "cp"),
    lambda v, xp: ~indivisible(xp, v["dp"] * v["cp"], v["dp_replicate"]),
    "does not divide dp*cp",
    lambda v: f"{_i(v['dp_replicate'])} does not divide dp*cp = {_i(v['dp'] * v['cp'])} "
              "(HSDP replicas each hold a whole shard group)")
MOE_TP_SP = Rule(
    "moe_tp_needs_sp", "sp", ("sp", "tp", "experts"),
    lambda v, xp: (v["experts"] < 0.5) | (v["tp"] < 1.5) | (v["sp"] > 0.5),
    "MoE with tp > 1 needs sequence parallelism",
    lambda v: "must be on for a mixture-of-experts model with tp > 1 (each TP rank dispatches "
              "its own 1/tp of the tokens to the experts; Megatron-Core requires "
              "--sequence-parallel with MoE and tensor parallelism)")
TP_OVERLAP_SP = Rule(
    "tp_overlap_needs_sp", "tp_overlap", ("tp_overlap", "tp", "sp"),
    lambda v, xp: (v.get("tp_overlap", 0.0) < 0.5) | (v["tp"] < 1.5) | (v["sp"] > 0.5),
    "needs sequence parallelism when tp > 1",
    lambda v: "needs sp when tp > 1 (the overlapped collectives are the sequence-parallel "
              "all-gathers and reduce-scatters; Megatron-Core requires --sequence-parallel "
              "with --tp-comm-overlap)")
ZERO3_PER_TENSOR = Rule(
    "zero3_per_tensor_needs_zero3", "zero3_per_tensor", ("zero3_per_tensor", "zero"),
    lambda v, xp: (v.get("zero3_per_tensor", 0.0) < 0.5) | (v["zero"] > 2.5),
    "needs zero 3",
    lambda v: f"needs zero 3 (it describes how ZeRO-3 gathers parameters; zero = "
              f"{_i(v['zero'])})")
FP8_ATTENTION = Rule(
    "fp8_attention_needs_fp8_recipe", "fp8_attention",
    ("fp8_attention", "dtype", "flash_attention"),
    lambda v, xp: (v.get("fp8_attention", 0.0) < 0.5)
    | ((v["dtype"] > 1.5) & (v["flash_attention"] > 0.5)),
    "needs dtype fp8, mxfp8 or nvfp4 and FlashAttention",
    lambda v: "needs an fp8, mxfp8 or nvfp4 dtype and FlashAttention (Transformer Engine "
              "runs fp8_dot_product_attention in its fused attention kernels inside an FP8 "
              "recipe; a bf16/fp16 run or unfused attention has no FP8 attention)")
#: [recompute] code of the default module set (``core_attn``, Korthikanti et al. 2022 selective)
_CORE_ATTN = float(RECOMPUTE_MODULE_SETS["core_attn"])
RECOMPUTE_MODULES_SELECTIVE = Rule(
    "recompute_modules_need_selective", "recompute_modules",
    ("recompute_modules", "recompute", "train_framework"),
    lambda v, xp: (v.get("recompute_modules", _CORE_ATTN) == _CORE_ATTN)
    | ((v["recompute"] > 0.5) & (v["recompute"] < 1.5)
       & (v.get("train_framework", 0.0) < 0.5)),
    "modules other than core_attn need recompute selective (Megatron layout)",
    lambda v: "modules other than core_attn need recompute = selective in the Megatron layout "
              "(train_framework megatron): they name what Megatron-Core's selective "
              "recomputation recomputes (--recompute-granularity selective "
              "--recompute-modules)")
RECOMPUTE_LAYERS_FULL = Rule(
    "recompute_layers_need_full", "recompute_layers", ("recompute_layers", "recompute"),
    lambda v, xp: (v.get("recompute_layers", 0.0) < 0.5) | (v["recompute"] > 1.5),
    "needs recompute full",
    lambda v: f"{_i(v['recompute_layers'])} needs recompute = full (it counts the layers "
              "Megatron-Core's full recomputation recomputes per pipeline chunk: "
              "--recompute-granularity full --recompute-method block --recompute-num-layers)")
TP_OVERLAP_NODE = Rule(
    "tp_overlap_inside_node", "tp_overlap", ("tp_overlap", "tp", "hw_node"),
    lambda v, xp: (v.get("tp_overlap", 0.0) < 0.5) | (v["tp"] <= v["hw_node"]),
    "needs the TP group inside one node (tp <= gpus_per_node)",
    lambda v: f"needs the tensor-parallel group inside one NVLink domain (tp = {_i(v['tp'])} > "
              f"{_i(v['hw_node'])} GPUs per node): Transformer Engine userbuffers exchange "
              "through CUDA IPC over NVLink")
EP_EXPERTS = Rule(
    "ep_divides_experts", "ep", ("ep", "experts"),
    lambda v, xp: (v["ep"] < 1.5) | ((v["experts"] > 0.5)
                                     & ~indivisible(xp, xp.maximum(v["experts"], 1), v["ep"])),
    "does not divide the number of experts",
    lambda v: (f"{_i(v['ep'])} does not divide the number of experts ({_i(v['experts'])})"
               if v["experts"] > 0.5 else
               f"{_i(v['ep'])} > 1 needs a mixture-of-experts model (this model is dense)"))

# --- fine-tuning, offload and topology rules (issue 13; symcost.finetune) ---------------
# A value these rules read but a caller does not enumerate (the configuration search fixes
# offload and the link at their defaults) is taken at the field's default, 0.
OFFLOAD_NEEDS_ZERO = Rule(
    "offload_needs_zero", "offload", ("offload", "zero"),
    lambda v, xp: (v.get("offload", 0.0) < 0.5) | (v["zero"] > 0.5),
    "optimizer offload needs ZeRO stage 1-3",
    lambda v: "ZeRO-Offload moves the optimizer partition of a ZeRO stage to host memory; "
              "use zero >= 1 (Ren et al. 2021, ZeRO-Offload, Sec. 4)")
OFFLOAD_PARAMS_ZERO3 = Rule(
    "offload_params_needs_zero3", "offload", ("offload", "zero"),
    lambda v, xp: (v.get("offload", 0.0) < 1.5) | (v["zero"] > 2.5),
    "parameter offload needs ZeRO-3",
    lambda v: "offloading parameters (optimizer+params) needs them partitioned: use zero 3 "
              "(DeepSpeed offload_param is a ZeRO-3 option; Rajbhandari et al. 2021, "
              "ZeRO-Infinity)")
# Layer-level activation offloading: Megatron-Core TransformerConfig.__post_init__ refuses
# cpu_offloading_num_layers outside [0, num_layers), with pipeline parallelism and with any
# recompute_granularity (megatron/core/transformer/transformer_config.py; Megatron-Bridge
# docs/training/cpu-offloading.md, "Feature Interactions").
ACT_OFFLOAD_LAYERS = Rule(
    "activation_offload_layers_below_layers", "activation_offload_layers",
    ("activation_offload_layers", "layers"),
    lambda v, xp: v.get("activation_offload_layers", 0.0) < v["layers"],
    "not fewer than the layers",
    lambda v: f"{_i(v['activation_offload_layers'])} must be fewer than the layers "
              f"({_i(v['layers'])}) (Megatron-Core: cpu_offloading_num_layers < num_layers)")


def _act_offload_needs(code: str, other: str, below: float, reason: str, why: str) -> Rule:
    """A rule ``activation_offload_layers > 0`` allows only with ``other < below``."""
    return Rule(code, "activation_offload_layers", ("activation_offload_layers", other),
                lambda v, xp: (v.get("activation_offload_layers", 0.0) < 0.5)
                | (v[other] < below), reason,
                lambda v: f"{reason} (Megatron-Core: {why})")


ACT_OFFLOAD_PP = _act_offload_needs(
    "activation_offload_needs_pp1", "pp", 1.5, "activation offloading needs pp = 1",
    "no pipeline parallelism with CPU offloading")
ACT_OFFLOAD_RECOMPUTE = _act_offload_needs(
    "activation_offload_without_recompute", "recompute", 0.5,
    "activation offloading needs recompute = none",
    "CPU offloading does not work when activation recomputation is enabled")
BRIDGE_HARDWARE = Rule(
    "nvlink_bridge_needs_bridges", "intra_node_link", ("intra_node_link", "hw_bridge"),
    lambda v, xp: (v.get("intra_node_link", 0.0) < 1.5) | (v.get("intra_node_link", 0.0) > 2.5)
    | (v.get("hw_bridge", 0.0) > 0.5),
    "nvlink-bridge on hardware without NVLink bridges",
    lambda v: f"{v.get('hw_name', 'this GPU')} has no NVLink bridges in its hardware spec "
              "(host_link.bridge_gbps_per_direction)")


def _has_target(xp: Any, code: Any, name: str) -> Any:
    """True where the ``lora_targets`` bit mask ``code`` holds target ``name``."""
    bit = 2.0 ** LORA_TARGETS.index(name)
    return xp.floor(code / bit) - 2 * xp.floor(code / (2 * bit)) > 0.5


def _any_target(xp: Any, code: Any, names: tuple[str, ...]) -> Any:
    """True where the bit mask ``code`` holds any of ``names``."""
    out = _has_target(xp, code, names[0])
    for n in names[1:]:
        out = out | _has_target(xp, code, n)
    return out


def _fused_lora_rule(fused: str, parts: tuple[str, ...], linear: str) -> Rule:
    """A fused LoRA target excludes separate adapters on the projections it fuses."""
    return Rule(
        f"lora_{fused}_excludes_{'_'.join(parts)}", "lora_targets", ("lora_targets",),
        lambda v, xp: ~(_has_target(xp, v.get("lora_targets", 1.0), fused)
                        & _any_target(xp, v.get("lora_targets", 1.0), parts)),
        f"{fused} with {', '.join(parts)}",
        lambda v: f"{fused} (one adapter on the fused projection, Megatron-Core {linear}) "
                  f"cannot be combined with separate {'/'.join(parts)} adapters")


LORA_FUSED_QKV = _fused_lora_rule("qkv", ("q", "k", "v"), "linear_qkv")
LORA_FUSED_FC1 = _fused_lora_rule("fc1", ("gate", "up"), "linear_fc1")
FINETUNE_RULES: tuple[Rule, ...] = (OFFLOAD_NEEDS_ZERO, OFFLOAD_PARAMS_ZERO3, ACT_OFFLOAD_LAYERS,
                                     ACT_OFFLOAD_PP, ACT_OFFLOAD_RECOMPUTE, BRIDGE_HARDWARE,
                                     LORA_FUSED_QKV, LORA_FUSED_FC1)
# --- end of fine-tuning rules -------------------------------------------------------------

# --- hybrid Mamba-Transformer models (issue 11; symcost.training, symcost.ops.ssm) ---------
# ``hybrid`` is a model fact (1 for a hybrid_pattern); a caller without it is a transformer.
TP_MAMBA = Rule(
    "tp_divides_mamba_heads_groups", "tp", ("tp", "mamba_heads", "mamba_groups"),
    lambda v, xp: ~(indivisible(xp, v.get("mamba_heads", 0.0), v["tp"])
                    | indivisible(xp, v.get("mamba_groups", 0.0), v["tp"])),
    "does not divide the Mamba-2 heads and groups",
    lambda v: f"{_i(v['tp'])} does not divide the Mamba-2 heads ({_i(v['mamba_heads'])}) "
              f"and groups ({_i(v['mamba_groups'])}) (Megatron-Core MambaMixer splits both "
              "over the tensor-parallel ranks)")
HYBRID_CP = Rule(
    "hybrid_without_cp", "cp", ("cp", "hybrid"),
    lambda v, xp: (v["cp"] < 1.5) | (v.get("hybrid", 0.0) < 0.5),
    "context parallelism of a hybrid Mamba-Transformer is not modelled",
    lambda v: f"{_i(v['cp'])} > 1 with a hybrid Mamba-Transformer model: context parallelism "
              "of the Mamba-2 scan (state passing between sequence chunks) is not modelled")
HYBRID_FULL_MEGATRON = Rule(
    "hybrid_full_training_megatron", "finetune", ("finetune", "train_framework", "hybrid"),
    lambda v, xp: (v.get("hybrid", 0.0) < 0.5)
    | ((v.get("finetune", 0.0) < 0.5) & (v.get("train_framework", 0.0) < 0.5)),
    "a hybrid Mamba-Transformer is modelled for full training with Megatron only",
    lambda v: "hybrid Mamba-Transformer models are modelled for full training "
              "(finetune full) in the Megatron layout (train_framework megatron) only")
HYBRID_SERVING = Rule(
    "hybrid_not_served", "model", ("hybrid",),
    lambda v, xp: v.get("hybrid", 0.0) < 0.5,
    "serving a hybrid Mamba-Transformer is not modelled",
    lambda v: "serving hybrid Mamba-Transformer models is not modelled (their Mamba-2 "
              "blocks keep a recurrent state, not a KV cache)")
HYBRID_RULES: tuple[Rule, ...] = (TP_MAMBA, HYBRID_CP, HYBRID_FULL_MEGATRON)
# --- end of hybrid rules ------------------------------------------------------------------


# ----------------------------------------------------------------------------- inference dtypes
def _fp8_rule(field: str) -> Rule:
    return Rule(
        f"{field}_fp8_supported", field, (field, "hw_dtypes"),
        lambda v, xp: v[field] != "fp8" or "fp8" in v["hw_dtypes"],
        "fp8 needs fp8 support on the GPU",
        lambda v: f"fp8 needs fp8 support on the GPU; {v.get('hw_name', 'this GPU')} has none "
                  f"(supports {', '.join(sorted(v['hw_dtypes']))})", vectorized=False)


ACT_DTYPE_PEAK = Rule(
    "act_dtype_has_peak", "act_dtype", ("act_dtype", "hw_dtypes"),
    lambda v, xp: v["act_dtype"] in v["hw_dtypes"], "no tensor-core peak for this dtype",
    lambda v: f"{v.get('hw_name', 'this GPU')} has no {v['act_dtype']} tensor-core peak, so "
              f"GEMMs cannot compute in {v['act_dtype']} (supports "
              f"{', '.join(sorted(v['hw_dtypes']))})", vectorized=False)
WEIGHT_NOT_WIDER = Rule(
    "weight_dtype_not_wider_than_act", "weight_dtype", ("weight_dtype", "act_dtype"),
    lambda v, xp: DTYPE_BYTES[v["weight_dtype"]] <= DTYPE_BYTES[v["act_dtype"]],
    "weights wider than the activations",
    lambda v: f"{v['weight_dtype']} weights are wider than the {v['act_dtype']} activations; "
              "quantize the weights to the activation width or narrower", vectorized=False)
ONE_8BIT_FORMAT = Rule(
    "one_8bit_format", "weight_dtype", ("weight_dtype", "act_dtype"),
    lambda v, xp: not (DTYPE_BYTES[v["weight_dtype"]] == DTYPE_BYTES[v["act_dtype"]] == 1.0
                       and v["weight_dtype"] != v["act_dtype"]),
    "two different 8-bit formats",
    lambda v: f"{v['weight_dtype']} weights with {v['act_dtype']} activations mix two 8-bit "
              "formats; use the same one", vectorized=False)

# ----------------------------------------------------------------------------- outputs
MEMORY_FITS = Rule(
    "memory_fits", "memory", ("mem_headroom",),
    lambda v, xp: v["mem_headroom"] >= 0,
    "does not fit in HBM or host memory (mem_headroom < 0)")

#: the training rules, in the order they are checked (the first broken one is reported).
TRAINING_RULES: tuple[Rule, ...] = (
    HIDDEN_HEADS, HEADS_KV, NUM_GPUS_DIVISIBLE, NUM_GPUS_PRODUCT, GLOBAL_BATCH_DIVISIBLE,
    SEQ_LEN_POSITIONS, TP_HEADS, TP_FFN, TP_KV_HEADS, PP_LAYERS, GLOBAL_BATCH_NEEDED,
    VPP_NEEDS_PP, VPP_LAYERS, VPP_MICROBATCHES, ZERO_PP, DTYPE_HARDWARE, CP_SEQ, DOC_LEN_SEQ,
    CP_FLASH, CP_A2A_HEADS, EP_DP, EP_EXPERTS, ETP_DP, ETP_FFN, MOE_IMBALANCE, MOE_TP_SP,
    TP_OVERLAP_SP, TP_OVERLAP_NODE, HSDP_DP, ZERO3_PER_TENSOR, RECOMPUTE_MODULES_SELECTIVE,
    RECOMPUTE_LAYERS_FULL, BF16_LAYERS, FP8_ATTENTION
) + FINETUNE_RULES + HYBRID_RULES

def _expert_tp(v: Values, xp: Any) -> Any:
    """Serving's expert tensor-parallel size ``max(tp/ep, 1)`` (``ep`` absent: 1)."""
    return xp.maximum(v["tp"] / v.get("ep", 1.0), 1.0)


TP_MOE_FFN = Rule(
    "tp_divides_moe_ffn_hidden", "tp", ("tp", "moe_ffn_hidden", "ep"),
    lambda v, xp: (v["moe_ffn_hidden"] < 0.5) | ~indivisible(
        xp, xp.maximum(v["moe_ffn_hidden"], 1), _expert_tp(v, xp)),
    "tp/ep does not divide moe_ffn_hidden",
    lambda v: f"expert tensor parallelism max(tp/ep, 1) = {_i(_expert_tp(v, np))} does not "
              f"divide moe_ffn_hidden ({_i(v['moe_ffn_hidden'])}) (serving splits every expert "
              "over the tp/ep GPUs of its expert-parallel group)")
EP_SERVING = Rule(
    "ep_divides_tp_or_replicas", "ep", ("ep", "tp", "pp", "num_gpus"),
    lambda v, xp: ~indivisible(xp, v["tp"], v["ep"]) | (
        ~indivisible(xp, v["ep"], v["tp"])
        & ~indivisible(xp, v["num_gpus"] / v["pp"], v["ep"])),
    "neither divides tp nor is a multiple of tp dividing num_gpus/pp",
    lambda v: f"{_i(v['ep'])} neither divides tp = {_i(v['tp'])} (experts split inside the "
              f"tensor-parallel group) nor is a multiple of tp that divides num_gpus/pp = "
              f"{_i(v['num_gpus'] / v['pp'])} (experts over the TP groups of ep/tp replicas)")

#: the inference rules, in order.
INFERENCE_RULES: tuple[Rule, ...] = (
    HYBRID_SERVING, NUM_GPUS_DIVISIBLE, CONTEXT_POSITIONS, TP_HEADS, TP_FFN, TP_KV_HEADS,
    EP_SERVING, EP_EXPERTS, MOE_IMBALANCE, TP_MOE_FFN, PP_LAYERS,
    _fp8_rule("weight_dtype"), _fp8_rule("act_dtype"), _fp8_rule("kv_dtype"), ACT_DTYPE_PEAK,
    WEIGHT_NOT_WIDER, ONE_8BIT_FORMAT)
#: rules on model outputs, checked after evaluation.
OUTPUT_RULES: tuple[Rule, ...] = (MEMORY_FITS,)


def check(rules: Iterable[Rule], values: Values,
          error: type[ConfigError] = ConfigError) -> None:
    """Raise for the first rule of ``rules`` that ``values`` (one configuration) breaks.

    Raises:
        ConfigError: (an ``error``) ``"<field>: <detail>"``.
    """
    for rule in rules:
        if not bool(rule.ok(values, np)):
            raise rule.error(values, error)


def broken(rules: Iterable[Rule], values: Values) -> list[Rule]:
    """Every rule of ``rules`` that one configuration breaks, in order."""
    return [r for r in rules if not bool(r.ok(values, np))]


def first_broken(rules: Sequence[Rule], values: Values, xp: Any, shape: Any) -> Any:
    """Per row, ``i + 1`` for the first of ``rules`` the row breaks, 0 when none.

    Args:
        rules: vectorized rules.
        values: name -> array (or scalar, broadcast) for every name the rules read.
        xp: ``numpy`` or ``jax.numpy``.
        shape: shape of the result.

    Returns:
        int8 array of ``shape``.
    """
    code = xp.zeros(shape, dtype=xp.int8)
    for i in range(len(rules) - 1, -1, -1):
        code = xp.where(rules[i].ok(values, xp), code, xp.int8(i + 1))
    return code


__all__ = ["FINETUNE_RULES", "HYBRID_RULES", "CONTEXT_POSITIONS", "INFERENCE_RULES", "MEMORY_FITS", "OUTPUT_RULES", "Rule",
           "TRAINING_RULES", "broken", "check", "first_broken", "indivisible"]
