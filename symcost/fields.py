"""The configuration vocabulary: one field table per workload.

Each :class:`Field` is declared once, here, with its type, unit, default, allowed values and
one-line doc. Its name is the API keyword (``predict_training(tp=8)``), the JSON key, the CSV
column, the ``--vary``/``--fix`` name, and (with ``_`` written ``-``) the CLI flag. Fields
that bind a model symbol name it (:attr:`Field.symbol`); :func:`encode` turns a field value
into the number the symbol takes (``recompute='full'`` -> 2, ``sp=True`` -> 1).

Tables:

* :data:`TRAINING_FIELDS`: the parallel layout, batch and modes of a training job
  (:class:`symcost.config.TrainingConfig` has exactly these attributes).
* :data:`INFERENCE_FIELDS`: a serving request and layout
  (:class:`symcost.config.InferenceConfig`).
* :data:`MODEL_FIELDS`: the transformer shape fields a sweep may vary (their values come
  from :class:`symcost.models.ModelSpec`, whose attributes have these names).

Hardware and efficiency quantities are named by their symbols (:mod:`symcost.symbols`).

Values are checked by :func:`coerce` (scalar: the one-line :class:`ConfigError`) and
:func:`check_array` (a column of a sweep or a search constraint): the type, the allowed
values and the range of each field are written once, in its :class:`Field`.

Integer sizes are bounded by :data:`MAX_COUNT` (``2**24``): every count and size up to it is
exact in float32, the precision sweeps evaluate in, and products of them stay finite.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from . import symbols as S

#: largest integer size or count a field accepts: exact in float32 (sweeps), so a sequence of
#: 1e30 tokens is refused rather than turned into a NaN step time.
MAX_COUNT = 2**24
#: recompute mode names -> code of the ``recompute`` symbol (Korthikanti et al. 2022, Sec. 5).
RECOMPUTE_MODES: dict[str, int] = {"none": 0, "selective": 1, "full": 2}
#: training GEMM dtypes -> code (fp8: Transformer-Engine style: 16-bit activations in memory, the
#: linear layers' saved inputs quantized, symcost.training.gemm_input_bytes).
TRAIN_DTYPES: dict[str, int] = {"bf16": 0, "fp16": 1, "fp8": 2, "mxfp8": 3, "nvfp4": 4}
#: training GEMM dtype -> the hardware peak (``peak_flops`` key of a hwspecs YAML) its linear
#: layers run at: MXFP8 at the fp8 rate, NVFP4 at the fp4 rate (NVIDIA Blackwell
#: architecture technical brief, 2024: fifth-generation Tensor Cores, MX formats).
GEMM_PEAK_KEY: dict[str, str] = {"bf16": "bf16", "fp16": "fp16", "fp8": "fp8", "mxfp8": "fp8",
                                 "nvfp4": "fp4"}
#: storage dtypes of inference weights / activations / KV cache.
#: bytes per element of each storage dtype (int4: 4-bit values + a 16-bit scale per group of
#: 128, the AWQ/GPTQ default group size; Lin et al. 2024, Sec. 4; Frantar et al. 2023, Sec. 4).
INT4_GROUP = 128
DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                                 "int4": 0.5 + 2.0 / INT4_GROUP}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
ACT_DTYPES = ("bf16", "fp16", "fp8", "int8")
KV_DTYPES = ("bf16", "fp16", "fp8", "int8")
#: offload modes -> code of the ``offload`` symbol (Ren et al. 2021, ZeRO-Offload;
#: Rajbhandari et al. 2021, ZeRO-Infinity).
OFFLOAD_MODES: dict[str, int] = {"none": 0, "optimizer": 1, "optimizer+params": 2}
#: [memory] training frameworks -> code of the ``train_framework`` symbol (memory layout and
#: activation bookkeeping only; symcost.training, memory section): ``megatron`` (Megatron-LM /
#: NeMo: fp32 master weights and Adam moments, 16 bytes per parameter, Rajbhandari et al. 2020;
#: fused kernels, Korthikanti et al. 2022 activations) and ``hf`` (Hugging Face Transformers
#: modeling code and Trainer: ZeRO-0 is PyTorch DDP with torch AdamW on the 16-bit weights,
#: ZeRO 1-3 DeepSpeed's partitioned fp32 optimizer; eager attention and fp32 upcasts).
TRAIN_FRAMEWORKS: dict[str, int] = {"megatron": 0, "hf": 1}
#: attention kernel libraries -> code of the ``attention_backend`` symbol: ``native`` (the
#: generation's own fused kernels: cuDNN fused attention through Transformer Engine,
#: FlashAttention-3, which overlap one warpgroup's softmax with another's matmuls on Hopper and
#: Blackwell; FlashAttention-2 on Ampere and Ada, which have no asynchronous warpgroup MMA,
#: ``hwspecs.ASYNC_MMA_GENERATIONS``) and ``fa2`` (the flash-attn 2 library or llm-foundry's
#: Triton kernel, whose warps run the softmax between the matmuls on every GPU,
#: :func:`symcost.training.flash_serial`; on Hopper it reaches about 35% of peak against 75%
#: for FlashAttention-3, Shah et al. 2024, arXiv:2407.08608, Sec. 1 and 4.1).
ATTENTION_BACKENDS: dict[str, int] = {"native": 0, "fa2": 1}
#: context-parallel exchanges (Megatron-Core ``--cp-comm-type``) -> code of the
#: ``cp_comm_type`` symbol: ``p2p`` (ring attention: K/V blocks passed around the ring,
#: overlapped with attention; the default), ``allgather`` (K/V all-gathered before attention,
#: exposed; Llama 3, arXiv:2407.21783 Sec. 3.3.2) and ``a2a`` (all-to-all from sequence to head
#: split and back, exposed; DeepSpeed-Ulysses, arXiv:2309.14509). Megatron-Core's hierarchical
#: ``a2a+p2p`` is not modelled.
CP_COMM_TYPES: dict[str, int] = {"p2p": 0, "allgather": 1, "a2a": 2}
#: intra-node link names -> code of the ``intra_link`` symbol (``default``: the hardware's own).
INTRA_LINKS: dict[str, int] = {"default": 0, "nvlink": 1, "nvlink-bridge": 2, "pcie": 3}
#: fine-tuning modes -> code of the ``finetune`` symbol (Hu et al. 2021, LoRA; Dettmers et al.
#: 2023, QLoRA).
FINETUNE_MODES: dict[str, int] = {"full": 0, "lora": 1, "qlora": 2}
#: serving frameworks -> code of the ``framework`` symbol (Zhang et al. 2023 compare vLLM,
#: LightLLM, TGI and TensorRT-LLM).
SERVING_FRAMEWORKS: dict[str, int] = {"generic": 0, "vllm": 1, "lightllm": 2, "tgi": 3,
                                      "trtllm": 4}
#: projections a LoRA adapter may target, in canonical order: one adapter per projection
#: (Hugging Face PEFT ``q_proj`` ... ``down_proj``), or one adapter on a fused projection,
#: ``qkv`` the query/key/value projection (Megatron-Core ``linear_qkv``, NeMo 1.0
#: ``attention_qkv``: rank ``r`` from ``h`` to ``(a+2k)*d``, its input read once) and ``fc1``
#: the MLP's gate and up projection (``linear_fc1``: ``h -> (1+g)*f``). A fused target excludes
#: its separate ones (:data:`symcost.rules.LORA_FUSED_QKV`, ``LORA_FUSED_FC1``).
LORA_TARGETS: tuple[str, ...] = ("q", "k", "v", "o", "gate", "up", "down", "qkv", "fc1")
#: [recompute] modules selective recomputation may recompute, in canonical order: Megatron-Core
#: ``--recompute-modules`` (``TransformerConfig.recompute_modules``; default ``core_attn``,
#: the Korthikanti et al. 2022 selective recomputation):
#: ``core_attn`` the attention core, ``layernorm`` the two pre-norms, ``mla_up_proj`` the MLA
#: up-projections and RoPE, ``moe_act`` the routed experts' activation function, ``mlp`` the
#: dense MLP, ``shared_experts`` the MoE layer's shared experts. (Megatron-Core's ``moe``, the
#: whole MoE layer with its all-to-all, is not modelled.)
RECOMPUTE_MODULES: tuple[str, ...] = ("core_attn", "layernorm", "mla_up_proj", "moe_act",
                                      "mlp", "shared_experts")
#: the fields whose value is a non-empty set of names -> the names in canonical order and the
#: prefix of the flag symbols they bind (``lora_q``, ``rc_moe_act``: 1 when the name is in
#: the set). The field's code is the set's bit mask (bit ``i`` for the ``i``-th name).
SUBSET_FIELDS: dict[str, tuple[tuple[str, ...], str]] = {
    "lora_targets": (LORA_TARGETS, "lora_"),
    "recompute_modules": (RECOMPUTE_MODULES, "rc_"),
}


def subset_codes(names: tuple[str, ...]) -> dict[str, int]:
    """Every non-empty subset of ``names``, written canonically (in ``names`` order,
    comma-separated) -> its bit mask (bit ``i`` for ``names[i]``)."""
    return {",".join(t for i, t in enumerate(names) if mask >> i & 1): mask
            for mask in range(1, 1 << len(names))}


#: every non-empty LoRA target set -> its bit mask, the ``lora_targets`` field's code.
LORA_TARGET_SETS: dict[str, int] = subset_codes(LORA_TARGETS)
#: every non-empty recompute-module set -> its bit mask, the ``recompute_modules`` code.
RECOMPUTE_MODULE_SETS: dict[str, int] = subset_codes(RECOMPUTE_MODULES)


def normalize_subset(value: object, names: tuple[str, ...]) -> object:
    """``value`` (``"v, q"``, a list) as the canonical comma list of ``names`` (``"q,v"``);
    anything else (an unknown name, an empty set) is returned unchanged for :func:`coerce`
    to reject."""
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, (list, tuple)):
        return value
    chosen = {str(x).strip().lower() for x in items if str(x).strip()}
    if not chosen or not chosen <= set(names):
        return value
    return ",".join(t for t in names if t in chosen)


def subset_bindings(name: str, value: str) -> dict[str, float]:
    """The flag symbols of subset field ``name`` (:data:`SUBSET_FIELDS`) for its canonical
    ``value``: ``<prefix><member>`` -> 1.0 when the member is in the set, else 0.0."""
    names, prefix = SUBSET_FIELDS[name]
    chosen = set(value.split(","))
    return {prefix + t: float(t in chosen) for t in names}


#: spellings of on/off accepted from text (CLI, CSV, ``--vary``).
_ON = frozenset({"true", "on", "yes", "1"})
_OFF = frozenset({"false", "off", "no", "0"})


class ConfigError(ValueError):
    """An invalid configuration; the message names the field and the rule it breaks."""


@dataclass(frozen=True)
class Field:
    """One configuration field.

    Attributes:
        name: the field's one name (API keyword, JSON key, CSV column, ``--vary`` name).
        kind: ``int`` (a count or size), ``bool`` (on/off), ``enum`` (one of
            :attr:`choices`), ``float``, or ``str`` (a dtype name).
        unit: base unit of the value (``1`` for counts and flags, ``tokens``, ``sequences``).
        default: value when not given (None: derived, see the config's docs).
        doc: one-line meaning.
        symbol: name of the model symbol the field binds, or None (derived bindings).
        choices: allowed values; for ``enum`` a mapping name -> code (the symbol's value),
            for ``str`` a tuple of names.
        minimum, maximum: inclusive range of numeric values (``int`` fields: 1 to
            :data:`MAX_COUNT` unless stated).
        exclusive_minimum: True when ``minimum`` itself is not allowed.
        sweepable: a sweep may vary it per row.
    """

    name: str
    kind: str
    unit: str
    default: Any
    doc: str
    symbol: str | None = None
    choices: Mapping[str, int] | tuple[str, ...] | None = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: bool = False
    sweepable: bool = True

    @property
    def flag(self) -> str:
        """The CLI flag: ``--micro-batch`` for ``micro_batch``."""
        return "--" + self.name.replace("_", "-")

    @property
    def codes(self) -> tuple[float, ...] | None:
        """Allowed encoded values (enum codes, 0/1 for bools), or None when a range rules."""
        if self.kind == "bool":
            return (0.0, 1.0)
        if self.kind == "enum" and isinstance(self.choices, Mapping):
            return tuple(float(c) for c in self.choices.values())
        return None

    def describe(self) -> str:
        """Allowed values as one phrase, for messages and ``--help``."""
        if self.kind == "bool":
            return "on/off (true/false or 1/0)"
        if self.name in SUBSET_FIELDS:
            return "a comma-separated subset of " + ",".join(SUBSET_FIELDS[self.name][0])
        if self.kind in ("enum", "str") and self.choices is not None:
            return "one of " + ", ".join(str(c) for c in self.choices)
        if self.kind == "int":
            hi = int(self.maximum) if self.maximum is not None else MAX_COUNT
            kind = "a non-negative" if self.minimum == 0 else "a positive"
            return f"{kind} integer (at most {hi})"
        lo_b = "(" if self.exclusive_minimum else "["
        return f"a number in {lo_b}{self.minimum:g}, {self.maximum:g}]"


def _int(name: str, doc: str, default: Any = 1, *, unit: str = "1", symbol: str | None = None,
         minimum: int = 1, sweepable: bool = True) -> Field:
    return Field(name, "int", unit, default, doc, symbol if symbol is not None else name,
                 minimum=minimum, maximum=MAX_COUNT, sweepable=sweepable)


def _bool(name: str, doc: str, default: bool, symbol: str | None) -> Field:
    return Field(name, "bool", "1", default, doc, symbol)


def _table(*fields: Field) -> dict[str, Field]:
    return {f.name: f for f in fields}


#: training configuration fields (Narayanan et al. 2021 for tp/pp/dp/vpp; Korthikanti et al.
#: 2022 for sp and recompute; Rajbhandari et al. 2020 for zero).
TRAINING_FIELDS: dict[str, Field] = _table(
    Field("num_gpus", "int", "1", None, "GPUs in the job; tp*cp*pp*dp when not given", None,
          minimum=1, maximum=MAX_COUNT),
    _int("tp", "tensor-parallel degree (Megatron)"),
    _int("pp", "pipeline-parallel degree"),
    _int("cp", "context-parallel degree (ring attention over sequence chunks)"),
    Field("dp", "int", "1", None, "data-parallel degree; num_gpus/(tp*cp*pp) when not given",
          "dp", minimum=1, maximum=MAX_COUNT),
    _int("ep", "expert-parallel degree (MoE experts sharded over ep of the tp*cp*dp ranks)"),
    _int("etp", "expert tensor-parallel degree (each routed expert's FFN split over etp "
         "ranks; ep*etp of the tp*cp*dp ranks hold one copy of the experts)"),
    _int("dp_replicate", "HSDP replicas: ZeRO/FSDP shards over dp*cp/dp_replicate ranks and "
         "all-reduces gradients across replicas (FSDP HYBRID_SHARD); 1: full sharding"),
    _bool("sp", "Megatron sequence parallelism (Korthikanti et al. 2022)", False, "sp_on"),
    _int("vpp", "virtual pipeline stages per GPU (interleaved 1F1B when > 1)"),
    _int("micro_batch", "sequences per micro-batch per GPU (b)", unit="sequences"),
    Field("global_batch", "int", "sequences", None,
          "sequences per optimizer step (B); dp*micro_batch when not given and pp == 1",
          "global_batch", minimum=1, maximum=MAX_COUNT),
    Field("seq_len", "int", "tokens", None, "tokens per sequence; the model's when not given",
          "seq_len", minimum=1, maximum=MAX_COUNT),
    _int("doc_len", "packed sequences: tokens per packed document (mean of l^2 over mean of l); "
         "attention runs per document (THD, cu_seqlens); 0: one document per sequence", 0,
         unit="tokens", minimum=0),
    Field("recompute", "enum", "1", "none", "activation recomputation", "recompute",
          choices=RECOMPUTE_MODES),
    Field("recompute_modules", "enum", "1", "core_attn", "modules selective recomputation "
          "recomputes, comma-separated from core_attn,layernorm,mla_up_proj,moe_act,mlp,"
          "shared_experts (Megatron-Core --recompute-modules; code: bit mask)", None,
          choices=RECOMPUTE_MODULE_SETS, sweepable=False),
    _int("recompute_layers", "with recompute full, the layers of each pipeline chunk "
         "recomputed, the first ones (Megatron-Core --recompute-method block "
         "--recompute-num-layers); 0: every layer", 0, minimum=0),
    Field("zero", "enum", "1", 0,
          "ZeRO stage (1: distributed optimizer, 2: + gradients, 3: + parameters = FSDP)",
          "zero_stage", choices={"0": 0, "1": 1, "2": 2, "3": 3}),
    Field("dtype", "enum", "1", "bf16", "GEMM dtype (fp8: Transformer Engine; 16-bit "
          "activations, the linear layers' saved inputs in the GEMM dtype)", None,
          choices=TRAIN_DTYPES),
    _bool("flash_attention", "FlashAttention for the attention core", True, "flash_attn"),
    _bool("dp_overlap", "overlap data-parallel communication with compute", True, "dp_overlap"),
    _bool("zero3_per_tensor", "ZeRO-3 as DeepSpeed v0.3-v0.4 (2021) ran it: one synchronous "
          "all-gather per parameter tensor (again in the recomputed forward), gradients "
          "all-reduced, nothing overlapped", False, "zero3_per_tensor"),
    _bool("tp_overlap", "pipeline tensor-parallel collectives with the GEMMs they feed "
          "(Transformer Engine userbuffers, Megatron-Core --tp-comm-overlap; needs sp)", False,
          "tp_overlap"),
    _bool("pp_overlap", "overlap the interleaved schedule's pipeline sends with the next "
          "chunk's compute (Megatron-Core overlap_p2p_comm; vpp 1 always blocks)", True,
          "pp_overlap"),
    Field("train_framework", "enum", "1", "megatron", "training framework, for memory: "
          "megatron (fp32 master + Adam, fused kernels) or hf (Hugging Face Trainer: DDP with "
          "16-bit AdamW at ZeRO-0, DeepSpeed at ZeRO 1-3, eager modeling code)",
          "train_framework", choices=TRAIN_FRAMEWORKS),
    Field("attention_backend", "enum", "1", "native", "attention kernels with FlashAttention:"
          " native (cuDNN/Transformer Engine, FlashAttention-3: softmax overlapped with the "
          "matmuls on Hopper and Blackwell, FlashAttention-2 before) or fa2 (the flash-attn 2 "
          "library or Triton kernels: Hugging Face, llm-foundry; softmax after each matmul, at "
          "fa2_ratio of native speed)",
          "attention_backend", choices=ATTENTION_BACKENDS),
    Field("cp_comm_type", "enum", "1", "p2p", "context-parallel exchange (Megatron-Core "
          "--cp-comm-type): p2p (ring attention, overlapped), allgather (K/V all-gathered, "
          "Llama 3) or a2a (all-to-all over heads, DeepSpeed-Ulysses)", "cp_comm_type",
          choices=CP_COMM_TYPES),
    _bool("ep_overlap", "overlap the MoE all-to-all with another micro-batch's compute "
          "(DualPipe, Megatron-Core A2A overlap)", False, "ep_overlap"),
    _int("bf16_layers", "layers whose linear layers stay BF16 under fp8, mxfp8 or nvfp4 "
         "(Megatron-Core --first-last-layers-bf16 with --num-layers-at-start/end-in-bf16)", 0,
         symbol=S.bf16_layers.name, minimum=0),
    _bool("ep_dedup", "node-deduplicated MoE dispatch: each token crosses the network once "
          "per destination node, then NVLink (DeepEP, HybridEP)", False, "ep_dedup"),
    _bool("cuda_graph", "the whole iteration replays as CUDA graphs (Megatron-Core "
          "cuda_graph_impl full_iteration): no per-layer launch or MoE host-sync time", False,
          "cuda_graph"),
    _bool("fp8_attention", "the attention core's matmuls in FP8 at the fp8 peak "
          "(Transformer Engine fp8_dot_product_attention; needs dtype fp8, mxfp8 or nvfp4 "
          "and FlashAttention)", False, "fp8_attention"),
    Field("moe_imbalance", "float", "1", 1.0, "routed tokens of the busiest expert-parallel "
          "rank over the mean (1: balanced routing; at most min(ep, experts/top_k))",
          "moe_imbalance", minimum=1.0, maximum=float(MAX_COUNT)),
    Field("moe_capacity_factor", "float", "1", 0.0, "expert capacity in multiples of the "
          "balanced load, tokens beyond it dropped (0: dropless)", "moe_capacity_factor",
          minimum=0.0, maximum=float(MAX_COUNT)),
    # --- fine-tuning, offload, topology (issue 13; symcost.finetune) ---
    Field("offload", "enum", "1", "none", "optimizer states (and with ZeRO-3 parameters) in "
          "host memory: DeepSpeed ZeRO-Offload / ZeRO-Infinity", "offload",
          choices=OFFLOAD_MODES),
    _int("activation_offload_layers", "layers whose saved activations are copied to host "
         "memory in the forward and back for the backward, overlapped with compute "
         "(Megatron-Core --cpu-offloading-num-layers; pp 1, no recompute)", 0, minimum=0),
    Field("intra_node_link", "enum", "1", "default", "intra-node link of the collectives "
          "(default: the hardware's usual link; pcie without peer-to-peer stages through host "
          "memory)", "intra_link", choices=INTRA_LINKS),
    Field("finetune", "enum", "1", "full", "full training, LoRA, or QLoRA (NF4 base)",
          "finetune", choices=FINETUNE_MODES),
    _int("lora_rank", "LoRA adapter rank r", 16),
    Field("lora_targets", "enum", "1", "q,k,v,o,gate,up,down", "projections with LoRA "
          "adapters, comma-separated from q,k,v,o,gate,up,down, or fused qkv and fc1 "
          "(Megatron linear_qkv, linear_fc1: one adapter each; code: bit mask)", None,
          choices=LORA_TARGET_SETS, sweepable=False),
)

#: inference request and layout fields (TensorRT-LLM / vLLM terms where they exist).
INFERENCE_FIELDS: dict[str, Field] = _table(
    _int("batch", "sequences per model replica (decode batch)", unit="sequences"),
    _int("input_len", "prompt tokens per request", 1024, unit="tokens"),
    _int("output_len", "generated tokens per request", 128, unit="tokens"),
    _int("tp", "tensor-parallel degree"),
    _int("pp", "pipeline-parallel degree"),
    _int("ep", "expert-parallel degree: routed experts split over ep GPUs, inside the TP "
         "group (ep <= tp, expert TP tp/ep) or over ep/tp replicas (ep > tp, wide EP with "
         "all-to-all)"),
    # the same field as in training (one declaration): the busiest expert-parallel rank's load
    TRAINING_FIELDS["moe_imbalance"],
    Field("num_gpus", "int", "1", None, "GPUs; tp*pp (one replica) when not given", None,
          minimum=1, maximum=MAX_COUNT),
    Field("dtype", "str", "1", "bf16", "sets weight, activation and KV dtypes", None,
          choices=WEIGHT_DTYPES, sweepable=False),
    Field("weight_dtype", "str", "1", None, "linear-weight dtype (int4: AWQ/GPTQ groups of 128)",
          None, choices=WEIGHT_DTYPES, sweepable=False),
    Field("act_dtype", "str", "1", None, "activation and GEMM compute dtype", None,
          choices=ACT_DTYPES, sweepable=False),
    Field("kv_dtype", "str", "1", None, "KV-cache dtype", None, choices=KV_DTYPES,
          sweepable=False),
    _bool("flash_attention", "FlashAttention prefill and flash-decoding", True, "flash_attn"),
    _int("max_num_tokens", "most tokens per forward step (TensorRT-LLM max_num_tokens)", 8192,
         unit="tokens"),
    Field("kv_mem_frac", "float", "1", 0.9, "fraction of free memory given to the KV cache",
          "kv_mem_frac", minimum=0.0, maximum=1.0, exclusive_minimum=True),
    _bool("kv_on_demand", "KV blocks allocated as tokens are generated (vLLM, TRT-LLM "
          "MAX_UTILIZATION)", False, "kv_on_demand"),
    # issue 13: per-framework step overhead (calibratable t_sched_<framework>)
    Field("framework", "enum", "1", "generic", "serving framework whose per-step overhead "
          "applies (t_sched_<framework>)", "framework", choices=SERVING_FRAMEWORKS),
)

#: transformer shape fields (:class:`symcost.models.ModelSpec` attributes) a sweep may vary.
MODEL_FIELDS: dict[str, Field] = _table(
    _int("layers", "transformer layers L", symbol=S.n_layers.name),
    _int("hidden", "hidden size h", symbol=S.hidden.name),
    _int("heads", "query heads a", symbol=S.n_heads.name),
    _int("kv_heads", "key/value heads k", symbol=S.n_kv_heads.name),
    _int("ffn_hidden", "MLP intermediate size f", symbol=S.ffn_hidden.name),
    _int("vocab", "vocabulary size V", symbol=S.vocab.name),
    _int("max_seq_len", "maximum positions", unit="tokens", symbol=S.max_seq_len.name),
    _int("experts", "routed experts per MoE layer E (0: dense)", 0, symbol=S.n_experts.name,
         minimum=0),
    _int("top_k", "routed experts per token", 0, symbol=S.top_k.name, minimum=0),
    _int("shared_experts", "shared experts per MoE layer", 0, symbol=S.shared_experts.name,
         minimum=0),
    _int("moe_ffn_hidden", "FFN width of one expert f_e", 0, symbol=S.moe_ffn_hidden.name,
         minimum=0),
    _int("moe_latent_size", "LatentMoE width of the routed experts (0: hidden)", 0,
         symbol=S.moe_latent_size.name, minimum=0),
    _int("dense_layers", "leading dense layers of a MoE model", 0,
         symbol=S.dense_layers.name, minimum=0),
    _int("moe_layer_step", "1: every layer MoE, 2: every other", symbol=S.moe_layer_step.name),
    _int("kv_lora_rank", "MLA latent KV rank (0: no MLA)", 0, symbol=S.kv_lora_rank.name,
         minimum=0),
    _int("q_lora_rank", "MLA latent query rank", 0, symbol=S.q_lora_rank.name, minimum=0),
    _int("rope_head_dim", "MLA decoupled RoPE width per head", 0,
         symbol=S.rope_head_dim.name, minimum=0),
    _int("sliding_window", "sliding-window attention width W (0: full attention)", 0,
         unit="tokens", symbol=S.sliding_window.name, minimum=0),
    _int("full_attention_step", "with a window, every n-th layer full (0: none)", 0,
         symbol=S.full_attention_step.name, minimum=0),
    _int("mtp_layers", "multi-token-prediction modules (DeepSeek-V3: 1)", 0,
         symbol=S.mtp_layers.name, minimum=0),
    # [hybrid] Mamba-2 mixer sizes of a hybrid Mamba-Transformer (0 without Mamba-2 blocks)
    _int("mamba_heads", "Mamba-2 heads H", 0, symbol=S.mamba_heads.name, minimum=0),
    _int("mamba_head_dim", "Mamba-2 head width P", 0, symbol=S.mamba_head_dim.name,
         minimum=0),
    _int("mamba_state", "Mamba-2 state size N", 0, symbol=S.mamba_state.name, minimum=0),
    _int("mamba_groups", "Mamba-2 groups G sharing B and C", 0, symbol=S.mamba_groups.name,
         minimum=0),
)


def gemm_dtype_flags(code: Any) -> dict[str, Any]:
    """The ``fp8`` and ``fp4`` symbol values of a training ``dtype`` code (scalar or array):
    fp8 for ``fp8`` and ``mxfp8`` (codes 2, 3), fp4 for ``nvfp4`` (code 4); 0/1 floats. The
    one place where a GEMM dtype turns into the model's precision flags."""
    fp8 = ((code > 1.5) & (code < 3.5)) * 1.0
    fp4 = (code > 3.5) * 1.0
    return {"fp8": fp8, "fp4": fp4}


#: the parallel degrees whose product, times ``dp``, is ``num_gpus`` (Narayanan et al. 2021:
#: ``n = t * p * d``). A new model-parallel dimension (context or expert parallelism) is a
#: field plus its name here: the GPU-count rules, the derivation of ``dp`` in
#: :func:`symcost.config.resolve` and in sweeps follow.
MODEL_PARALLEL: tuple[str, ...] = ("tp", "cp", "pp")

#: the training fields a configuration search enumerates, in candidate-column order (the
#: columns of :mod:`optimizers.space`: the layout and its modes).
SEARCH_COLUMNS: tuple[str, ...] = ("num_gpus", "tp", "cp", "pp", "dp", "ep", "micro_batch",
                                   "vpp", "recompute", "sp", "zero", "dp_overlap",
                                   "tp_overlap")
#: the training fields a search takes as its own arguments (``recompute_modules``: what its
#: ``selective`` candidates recompute).
SEARCH_ARGUMENTS: tuple[str, ...] = ("global_batch", "seq_len", "dtype", "flash_attention",
                                     "recompute_modules")
#: the other training fields: settings every candidate of a search shares when given
#: (``search(..., ep_dedup=True)``, ``symcost search --ep-dedup``).
SEARCH_SHARED_FIELDS: tuple[str, ...] = tuple(
    k for k in TRAINING_FIELDS if k not in SEARCH_COLUMNS + SEARCH_ARGUMENTS)


def model_parallel_size(values: Mapping[str, Any]) -> Any:
    """Product of the :data:`MODEL_PARALLEL` degrees in ``values`` (scalars or arrays): the
    GPUs of one data-parallel replica. A degree absent from ``values`` is 1 (inference
    layouts have no context parallelism)."""
    out: Any = 1
    for name in MODEL_PARALLEL:
        out = out * values.get(name, 1)
    return out


def _fail(f: Field, value: object) -> ConfigError:
    return ConfigError(f"{f.name}: must be {f.describe()} (got {value!r})")


def coerce(f: Field, value: object) -> Any:
    """``value`` as field ``f``'s canonical Python value (text from a CLI or CSV accepted).

    Args:
        f: the field.
        value: a number, bool, name or text; None for a field whose default is None.

    Returns:
        ``int`` for ``int`` fields, ``bool``, the choice name (``enum``/``str``; ``zero`` as
        ``int``), ``float``; None passes through for derived fields.

    Raises:
        ConfigError: ``"<field>: must be <allowed values> (got ...)"``.
    """
    if value is None:
        if f.default is None:
            return None
        raise _fail(f, value)
    if f.kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, (int, float, np.integer, np.floating)) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _ON | _OFF:
            return value.strip().lower() in _ON
        raise _fail(f, value)
    if f.kind in ("enum", "str"):
        assert f.choices is not None
        if f.name in SUBSET_FIELDS:
            value = normalize_subset(value, SUBSET_FIELDS[f.name][0])
        key = str(value).strip().lower() if not isinstance(value, bool) else None
        if key is None or key not in f.choices:
            raise _fail(f, value)
        if f.name == "zero":
            return int(key)
        return key
    if isinstance(value, bool):
        raise _fail(f, value)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise _fail(f, value) from None
    try:
        num = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise _fail(f, value) from None
    if not math.isfinite(num):
        raise _fail(f, value)
    lo = f.minimum if f.minimum is not None else -math.inf
    hi = f.maximum if f.maximum is not None else math.inf
    if num < lo or num > hi or (f.exclusive_minimum and num == lo):
        raise _fail(f, value)
    if f.kind == "int":
        if not num.is_integer():
            raise _fail(f, value)
        return int(num)
    return num


def encode(f: Field, value: Any) -> float:
    """The number field ``f``'s symbol takes for a coerced ``value``: enum code, 0/1 for
    bools, the value itself for numbers."""
    if f.kind == "bool":
        return float(bool(value))
    if f.kind == "enum":
        assert isinstance(f.choices, Mapping)
        return float(f.choices[str(value)])
    return float(value)


def decode(f: Field, code: float) -> Any:
    """Inverse of :func:`encode` for ``bool`` and ``enum`` fields (ints for the others)."""
    if f.kind == "bool":
        return bool(code)
    if f.kind == "enum":
        assert isinstance(f.choices, Mapping)
        for name, c in f.choices.items():
            if c == int(code):
                return int(name) if f.name == "zero" else name
        raise _fail(f, code)
    return int(code) if f.kind == "int" else float(code)


def text_value(f: Field, text: str) -> float:
    """One ``--vary``/``--fix`` value as the encoded number (names accepted for enums/bools).

    Raises:
        ConfigError: as :func:`coerce`.
    """
    return encode(f, coerce(f, text))


def check_array(f: Field, values: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Encoded values of field ``f`` for many rows (a sweep axis, search bounds), checked.

    Integer fields must hold integers (``tp=1.5`` is an error, not rounded); enums and bools
    their codes; every value its range.

    Raises:
        ConfigError: the first offending value, as :func:`coerce` words it.
    """
    arr = np.asarray(values, dtype=np.float64).reshape(-1)
    codes = f.codes
    for v in arr:
        if codes is not None:
            if float(v) not in codes:
                raise _fail(f, decode_or_raw(f, v))
        else:
            coerce(f, float(v))
    return arr


def decode_or_raw(f: Field, v: float) -> object:
    """``v`` decoded for messages, or the raw number when it is no valid code."""
    try:
        return decode(f, v) if float(v).is_integer() else v
    except ConfigError:
        return v


__all__ = ["SERVING_FRAMEWORKS", "FINETUNE_MODES", "INTRA_LINKS", "LORA_TARGETS", "LORA_TARGET_SETS", "OFFLOAD_MODES",
           "RECOMPUTE_MODULES", "RECOMPUTE_MODULE_SETS", "SUBSET_FIELDS", "normalize_subset",
           "subset_bindings", "subset_codes", "ACT_DTYPES", "ConfigError", "DTYPE_BYTES",
           "INT4_GROUP", "MODEL_PARALLEL",
           "model_parallel_size", "Field", "INFERENCE_FIELDS", "KV_DTYPES", "MAX_COUNT",
           "MODEL_FIELDS", "GEMM_PEAK_KEY", "CP_COMM_TYPES", "gemm_dtype_flags", "RECOMPUTE_MODES",
           "SEARCH_ARGUMENTS", "SEARCH_COLUMNS", "SEARCH_SHARED_FIELDS",
           "TRAINING_FIELDS", "TRAIN_DTYPES",
           "WEIGHT_DTYPES", "check_array", "coerce", "decode", "encode",
           "text_value"]
