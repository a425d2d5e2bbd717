"""Configurations of a training job and of a serving request: validation and symbol bindings.

The fields are declared once in :mod:`symcost.fields` (:data:`~symcost.fields.TRAINING_FIELDS`,
:data:`~symcost.fields.INFERENCE_FIELDS`); the validity rules once in :mod:`symcost.rules`.
:func:`resolve` and :func:`resolve_inference` coerce each field (type, allowed values, range),
fill in the derived ones and check the rule table, in plain Python, before anything is
lowered: a bad configuration raises :class:`ConfigError` with a one-line message naming the
field and the rule. The same rule objects mask sweep rows and prune the search space.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from hwspecs import HardwareSpec

from . import rules as R
from . import symbols as S
from .fields import (ACT_DTYPES, DTYPE_BYTES, INFERENCE_FIELDS, INT4_GROUP, KV_DTYPES,
                     MODEL_FIELDS, RECOMPUTE_MODES, SEARCH_SHARED_FIELDS, SUBSET_FIELDS,
                     TRAIN_DTYPES,
                     TRAINING_FIELDS, WEIGHT_DTYPES,
                     ConfigError, coerce, encode, gemm_dtype_flags, model_parallel_size,
                     subset_bindings)
from .models import ModelSpec

#: training GEMM dtypes (the choices of the ``dtype`` field).
DTYPES = tuple(TRAINING_FIELDS["dtype"].choices or ())
#: tensor-core peaks the training rules ask about (``hw_<dtype>`` facts).
HW_GEMM_DTYPES = ("bf16", "fp16", "fp8", "fp4")


@dataclass(frozen=True)
class TrainingConfig:
    """How one training job is laid out on the cluster.

    The attributes are exactly the fields of :data:`symcost.fields.TRAINING_FIELDS` (their
    docs, units, defaults and allowed values are there).

    Attributes:
        num_gpus: GPUs in the job; derived as ``tp*cp*pp*dp`` when None.
        tp: tensor-parallel degree (Megatron).
        pp: pipeline-parallel degree.
        cp: context-parallel degree (each sequence split over ``cp`` GPUs, ring attention).
        dp: data-parallel degree; derived as ``num_gpus/(tp*cp*pp)`` when None.
        ep: expert-parallel degree: the routed experts of a MoE model are sharded over ``ep``
            of the ``tp*cp*dp`` ranks (Megatron-Core MoE parallel folding; ``ep`` divides
            ``tp*cp*dp`` and the expert count).
        etp: expert tensor-parallel degree: each routed expert's FFN is split over ``etp``
            ranks (Megatron-Core ``expert_tensor_parallel_size``); ``ep*etp`` must divide
            ``tp*cp*dp``.
        dp_replicate: HSDP replicas ``r``: ZeRO (FSDP with ``zero=3``) shards over the
            ``dp*cp/r`` ranks of a shard group and all-reduces the sharded gradients across
            the ``r`` replicas (PyTorch FSDP ``HYBRID_SHARD``); 1 = full sharding.
        sp: Megatron sequence parallelism (Korthikanti et al. 2022).
        vpp: virtual pipeline stages per GPU (interleaved 1F1B when > 1).
        micro_batch: sequences per micro-batch per GPU (``b``).
        global_batch: sequences per optimizer step (``B``); ``dp*micro_batch`` when None and
            ``pp == 1``; required when ``pp > 1`` (the bubble depends on it).
        seq_len: tokens per sequence; the model's ``seq_len`` when None.
        doc_len: packed sequences (fine-tuning sets packed to ``seq_len``): the attention
            length of the documents in a pack, ``E[l^2]/E[l]`` tokens over their lengths
            ``l``; FlashAttention runs per document (varlen / THD kernels with ``cu_seqlens``:
            Dao 2023, FlashAttention-2; Megatron-Core ``PackedSeqParams``; Krell et al. 2021,
            arXiv:2107.02027), so a micro-batch's attention costs that of ``b*s/doc_len``
            sequences of ``doc_len`` tokens. At most ``seq_len``; 0: one document per
            sequence. The GEMMs, and unfused attention (which masks a full ``s x s`` matrix),
            are unchanged; model FLOPs (MFU) count the attention within documents.
        recompute: ``none``, ``selective`` or ``full`` activation recomputation.
        recompute_modules: with ``selective``, the modules recomputed: comma list from
            ``core_attn,layernorm,mla_up_proj,moe_act,mlp,shared_experts``
            (:data:`symcost.fields.RECOMPUTE_MODULES`; Megatron-Core ``--recompute-modules``);
            another value than the default ``core_attn`` needs ``recompute='selective'``.
        recompute_layers: with ``full``, the layers of each pipeline chunk (``L/(pp*vpp)``
            layers) recomputed, the first ones; the others keep their activations (Megatron-Core
            ``--recompute-method block --recompute-num-layers``). 0, the default, recomputes
            every layer; a value above the chunk's layers recomputes them all. Another value
            than 0 needs ``recompute='full'``.
        zero: ZeRO stage 0-3 (1 = Megatron distributed optimizer, 3 = FSDP full shard).
        dtype: GEMM dtype ``bf16``, ``fp16``, ``fp8`` (Transformer-Engine per-tensor scaling),
            ``mxfp8`` (block-scaled fp8, Blackwell) or ``nvfp4`` (fp4 linear layers,
            Blackwell); 16-bit activations and weights in memory, except the inputs the
            linear layers keep for backward (:func:`symcost.training.gemm_input_bytes`).
        flash_attention: FlashAttention for the attention core.
        dp_overlap: overlap data-parallel communication with compute.
        zero3_per_tensor: ZeRO-3 as DeepSpeed v0.3-v0.4 ran it (2021): one all-gather per
            parameter tensor after a device synchronize, repeated by the recomputed forward,
            and gradients all-reduced in buckets (``contiguous_gradients`` off); nothing
            overlaps compute (:func:`symcost.training.param_tensors_layer`).
        tp_overlap: pipeline the tensor-parallel all-gathers/reduce-scatters with the GEMMs
            they feed (Transformer Engine userbuffers, Megatron-Core ``--tp-comm-overlap``;
            needs ``sp``).
        pp_overlap: the interleaved schedule (``vpp > 1``) overlaps its pipeline sends with
            the next chunk's compute (Megatron-Core ``overlap_p2p_comm``, Megatron-LM's default;
            off: ``--no-overlap-p2p-communication``, batched blocking sends as 1F1B uses, which
            zero-bubble schedules require); no effect with ``vpp = 1``
            (:func:`symcost.training.pp_p2p_exposed`).
        train_framework: ``megatron`` or ``hf`` (Hugging Face Trainer + DeepSpeed); memory only.
        attention_backend: ``native`` (cuDNN / Transformer Engine fused attention,
            FlashAttention-3) or ``fa2`` (the flash-attn 2 library), with FlashAttention.
        cp_comm_type: the context-parallel exchange (Megatron-Core ``--cp-comm-type``):
            ``p2p`` (ring attention, K/V blocks overlapped with attention), ``allgather``
            (K/V all-gathered before attention and again in the backward, dK/dV
            reduce-scattered, all exposed: Llama 3, Transformer Engine
            ``AttnFuncWithCPAndKVAllGather``) or ``a2a`` (DeepSpeed-Ulysses: all-to-all of
            Q/K/V to a head split and of the output back, exposed; ``tp*cp`` divides the heads
            and the KV heads).
        ep_overlap: overlap the MoE all-to-all with another micro-batch's compute (DeepSeek-V3
            DualPipe, arXiv:2412.19437 Sec. 3.2.1; Megatron-Core's 1F1B all-to-all overlap).
        bf16_layers: layers (blocks of a hybrid) whose linear layers run in BF16 although
            ``dtype`` is fp8, mxfp8 or nvfp4 (Megatron-Core ``--first-last-layers-bf16`` with
            ``--num-layers-at-start-in-bf16`` and ``--num-layers-at-end-in-bf16``; Nemotron 3
            Super's NVFP4 recipe keeps its last 14 blocks in BF16). Costed as that fraction of
            every stage's layers (exact at ``pp = 1``; with pipelining the first or last stage
            holds them and is slower than this average). No effect in bf16/fp16.
        ep_dedup: node-deduplicated MoE dispatch: each token crosses the network once per
            destination node and is forwarded to its experts' GPUs over NVLink (DeepEP,
            HybridEP: Megatron-Core ``--moe-token-dispatcher-type flex``; DeepSeek-V3 Sec.
            3.2.2; :func:`symcost.ops.collectives.all_to_all_node_dedup`), permuting once on
            the receiving side. Off: the plain all-to-all sends every routed copy
            (``alltoall`` dispatcher), which with more than one expert per GPU also sorts the
            received rows by expert and back (:func:`symcost.training.moe_chunk_sort`).
        cuda_graph: the whole training iteration is captured once and replayed as CUDA
            graphs (Megatron-Core ``--cuda-graph-impl full_iteration``, with the dropless MoE
            padded to a fixed capacity so no host synchronisation on the per-expert token
            counts remains): the fixed host-side times ``t_layer_overhead`` (kernel launches
            per layer pass) and ``t_moe_layer`` (the MoE layer's launches and host sync) are
            not paid (:func:`symcost.training.host_overhead`). The GPU work is unchanged.
        fp8_attention: the FlashAttention kernels run their two matmuls (``QK^T`` and
            ``PV``, and the backward's) in FP8 at the GPU's fp8 tensor-core peak
            (Transformer Engine ``fp8_dot_product_attention``, cuDNN FP8 fused attention;
            Megatron-Core ``--fp8-dot-product-attention``); the softmax's exponentials and
            FP32 work keep their rates (:func:`symcost.ops.attention.flash_work`). Needs an
            8- or 4-bit ``dtype`` recipe (fp8, mxfp8, nvfp4) and FlashAttention.
        moe_imbalance: routed tokens of the busiest expert-parallel rank over the mean (1:
            balanced routing); at most ``min(ep, experts/top_k)``.
        moe_capacity_factor: expert capacity in multiples of the balanced load, tokens beyond
            it dropped (GShard, Switch Transformer); 0: dropless.
        offload: ``none``, ``optimizer`` or ``optimizer+params`` (host memory, DeepSpeed).
        activation_offload_layers: decoder layers (blocks of a hybrid) whose saved
            activations are copied to host memory after their forward and back before their
            backward, on copy streams that overlap the other layers' compute (Megatron-Core
            ``cpu_offloading`` with ``cpu_offloading_num_layers``; Transformer Engine
            ``get_cpu_offload_context``): fewer activations in HBM, host-link copies that
            show only when they outlast the compute they hide behind
            (:func:`symcost.training.activation_offload_exposed`). Fewer than the layers,
            with ``pp = 1`` and no recomputation (Megatron-Core ``TransformerConfig``).
        intra_node_link: ``default``, ``nvlink``, ``nvlink-bridge`` or ``pcie``.
        finetune: ``full``, ``lora`` or ``qlora``.
        lora_rank: adapter rank ``r``.
        lora_targets: comma list from ``q,k,v,o,gate,up,down``, or the fused ``qkv`` and
            ``fc1`` (one adapter on Megatron-Core's ``linear_qkv`` / ``linear_fc1``;
            :data:`symcost.fields.LORA_TARGETS`).
    """

    num_gpus: int | None = None
    tp: int = 1
    pp: int = 1
    cp: int = 1
    dp: int | None = None
    ep: int = 1
    etp: int = 1
    dp_replicate: int = 1
    sp: bool = False
    vpp: int = 1
    micro_batch: int = 1
    global_batch: int | None = None
    seq_len: int | None = None
    doc_len: int = 0
    recompute: str = "none"
    recompute_modules: str = "core_attn"
    recompute_layers: int = 0
    zero: int = 0
    dtype: str = "bf16"
    flash_attention: bool = True
    dp_overlap: bool = True
    zero3_per_tensor: bool = False
    tp_overlap: bool = False
    pp_overlap: bool = True
    train_framework: str = "megatron"
    attention_backend: str = "native"
    cp_comm_type: str = "p2p"
    ep_overlap: bool = False
    ep_dedup: bool = False
    cuda_graph: bool = False
    fp8_attention: bool = False
    bf16_layers: int = 0
    moe_imbalance: float = 1.0
    moe_capacity_factor: float = 0.0
    # fine-tuning, offload and topology (issue 13; see symcost.fields / symcost.finetune)
    offload: str = "none"
    activation_offload_layers: int = 0
    intra_node_link: str = "default"
    finetune: str = "full"
    lora_rank: int = 16
    lora_targets: str = "q,k,v,o,gate,up,down"

    def replace(self, **changes: Any) -> "TrainingConfig":
        """A copy with ``changes`` applied (not validated until :func:`resolve`)."""
        return dataclasses.replace(self, **changes)


def positive_int(name: str, value: object, error: type[ConfigError] = ConfigError) -> int:
    """``value`` as a positive ``int`` (at most :data:`symcost.fields.MAX_COUNT`).

    Raises:
        ``error`` (a :class:`ConfigError`): ``"{name}: must be a positive integer ..."``
            for booleans, non-integral numbers, non-numbers and values <= 0.
    """
    f = dataclasses.replace(TRAINING_FIELDS["tp"], name=name)
    try:
        return int(coerce(f, value))
    except ConfigError as exc:
        raise error(str(exc)) from None


def hardware_facts(hw: "HardwareSpec") -> dict[str, float]:
    """The hardware values the rules read: ``hw_bf16``, ``hw_fp16``, ``hw_fp8``, ``hw_fp4`` (1
    when the GPU has that dense tensor-core peak) and ``hw_mx`` (1 on a GPU with MX block-
    scaled tensor cores), ``hw_bridge`` (1 with NVLink bridges), ``hw_node`` (GPUs per node /
    NVLink domain)."""
    out = {f"hw_{d}": float(d in hw.peak_flops) for d in HW_GEMM_DTYPES}
    # block-scaled MX formats (OCP Microscaling: mxfp8) run on Blackwell's fifth-generation
    # tensor cores (NVIDIA Blackwell architecture technical brief, 2024)
    out["hw_mx"] = float(hw.generation in ("blackwell", "blackwell_ultra"))
    out["hw_bridge"] = float(hw.bridge_bandwidth is not None)
    out["hw_node"] = float(hw.gpus_per_node)
    return out


def model_facts(model: "ModelSpec") -> dict[str, float]:
    """The model values the rules read, by field name (``layers``, ``heads``, ...),
    ``learned_pos`` and ``hybrid`` (1 for a hybrid Mamba-Transformer)."""
    out = {name: float(getattr(model, name)) for name in MODEL_FIELDS}
    out["learned_pos"] = float(model.position == "learned")
    out["hybrid"] = float(model.is_hybrid)  # [hybrid]
    return out


def _coerce_all(fields: dict[str, Any], cfg: Any, error: type[ConfigError]) -> dict[str, Any]:
    out = {}
    for name, f in fields.items():
        try:
            out[name] = coerce(f, getattr(cfg, name))
        except ConfigError as exc:
            raise error(str(exc)) from None
    return out


def resolve(model: "ModelSpec", hw: "HardwareSpec", cfg: TrainingConfig) -> TrainingConfig:
    """Validate ``cfg`` against ``model`` and ``hw`` and fill in derived fields.

    Args:
        model: the transformer.
        hw: the GPU system.
        cfg: the requested layout; ``dp``, ``num_gpus``, ``global_batch`` and ``seq_len`` may
            be None.

    Returns:
        A :class:`TrainingConfig` with every field set.

    Raises:
        ConfigError: naming the field and the rule: a value outside its field's type, choices
            or range (:mod:`symcost.fields`), or a broken rule of
            :data:`symcost.rules.TRAINING_RULES` (divisibility of heads, FFN and KV heads by
            ``tp``; ``tp*pp*dp == num_gpus``; ``pp`` at most the layers; the interleaved
            schedule's conditions; ZeRO-2/3 without ``pp``; a dtype the GPU lacks; learned
            positions; the global batch needed with ``pp > 1``).
    """
    c = _coerce_all(TRAINING_FIELDS, cfg, ConfigError)
    replica = model_parallel_size(c)
    if c["dp"] is None:
        n = replica if c["num_gpus"] is None else c["num_gpus"]
        dp = n / replica
        c["dp"] = int(dp) if float(dp).is_integer() else dp
    if c["num_gpus"] is None:
        c["num_gpus"] = replica * c["dp"]
    given = c["global_batch"] is not None
    if not given:
        c["global_batch"] = c["micro_batch"] * c["dp"]
    if c["seq_len"] is None:
        c["seq_len"] = model.seq_len
    values = {**model_facts(model), **hardware_facts(hw),
              **{k: encode(TRAINING_FIELDS[k], v) for k, v in c.items()},
              "global_batch_given": float(given), "dtype_name": c["dtype"], "hw_name": hw.name,
              "hw_dtypes": frozenset(hw.peak_flops)}
    R.check(R.TRAINING_RULES, values)
    return TrainingConfig(**c)


def model_bindings(model: "ModelSpec") -> dict[str, float]:
    """Values of the ``model`` symbols for ``model`` (by symbol name)."""
    return {
        S.n_layers.name: model.layers, S.hidden.name: model.hidden,
        S.n_heads.name: model.heads, S.n_kv_heads.name: model.kv_heads,
        S.ffn_hidden.name: model.ffn_hidden, S.vocab.name: model.vocab,
        S.seq_len.name: model.seq_len, S.max_seq_len.name: model.max_seq_len,
        S.gated_mlp.name: float(model.is_gated), S.has_bias.name: float(model.bias),
        S.norm_bias.name: float(model.norm == "layernorm" and model.bias),
        S.tied_embed.name: float(model.tied_embeddings),
        S.learned_pos.name: float(model.position == "learned"),
        S.rotary_pos.name: float(model.position == "rope"),
        S.has_dropout.name: float(model.dropout), S.act_clamp.name: float(model.act_clamp),
        # 0 unless the model sets a head width other than h/a (see training.head_dim), so a
        # sweep over ``hidden`` keeps d = h/a for models that derive it
        S.head_dim_given.name: (0.0 if (model.head_dim or 0) * model.heads == model.hidden
                                else float(model.head_dim or 0)),
        **{f.symbol: float(getattr(model, name)) for name, f in MODEL_FIELDS.items()
           if f.symbol is not None and name not in ("layers", "hidden", "heads", "kv_heads",
                                                    "ffn_hidden", "vocab", "max_seq_len")},
        # [hybrid] the pattern's block counts (0 for a transformer: not read then)
        S.hybrid.name: float(model.is_hybrid),
        S.attn_layers.name: float(model.attention_layers if model.is_hybrid else 0),
        S.mamba_layers.name: float(model.mamba_layers),
        S.mlp_layers.name: float(model.mlp_layers if model.is_hybrid else 0),
        S.mtp_blocks.name: float(len(model.mtp_pattern) or 1),
    }


#: ``host_mem_cap`` (bytes) of a hardware spec that does not state its node's system memory
#: (``host_memory_gb``): 2**60, so large that no configuration is limited by host memory there
#: (a finite number, so the headroom and its gradient stay finite).
HOST_MEMORY_UNSTATED = 2.0 ** 60


def hardware_bindings(hw: "HardwareSpec", dtype: str = "bf16") -> dict[str, float]:
    """Values of the ``hardware`` symbols for ``hw``; the 16-bit peak is that of ``dtype``
    when it is 16-bit (else bf16), the fp8 peak falls back to it where fp8 is absent. A spec
    without an exponential rate (``exp_tera_per_s``) binds ``peak_exp`` to the 16-bit peak,
    one exponential per FLOP, so the softmax's exponentials never bound a kernel there (a
    FlashAttention kernel does ``4*d`` FLOP per exponential); one without a non-tensor FP32
    peak (``fp32``) binds ``peak_flops_fp32`` to it likewise."""
    p16 = hw.peak(dtype) if dtype in ("bf16", "fp16") else hw.peak("bf16")
    return {
        S.peak_flops_16.name: p16,
        S.peak_exp.name: hw.peak_exp or p16,
        S.peak_flops_fp32.name: hw.peak_flops.get("fp32", p16),
        S.async_mma.name: float(hw.async_mma),
        S.matmul_ceiling.name: hw.matmul_ceiling,
        S.matmul_ceiling_fp8.name: hw.matmul_ceiling_fp8,
        S.peak_flops_8.name: hw.peak_flops.get("fp8", p16),
        S.peak_flops_4.name: hw.peak_flops.get("fp4", hw.peak_flops.get("fp8", p16)),
        S.hbm_bw.name: hw.hbm_bandwidth, S.hbm_cap.name: hw.hbm_capacity,
        S.intra_bw.name: hw.intra_node_bandwidth, S.intra_lat.name: hw.intra_node_latency,
        S.inter_bw.name: hw.inter_node_bandwidth, S.inter_lat.name: hw.inter_node_latency,
        S.gpus_per_node.name: hw.gpus_per_node,
        # host link (issue 13): offload copies and host-staged collectives; without a stated
        # host link the intra-node link stands in, without bridges the host link
        S.host_bw.name: hw.host_link_bandwidth or hw.intra_node_bandwidth,
        S.p2p.name: float(hw.peer_to_peer),
        S.bridge_bw.name: hw.bridge_bandwidth or hw.host_link_bandwidth or hw.intra_node_bandwidth,
        # the node's system memory shared by its GPUs; not stated: not checked
        S.host_mem_cap.name: (hw.host_memory / hw.gpus_per_node if hw.host_memory
                              else HOST_MEMORY_UNSTATED),
    }


def field_bindings(fields: dict[str, Any], cfg: Any) -> dict[str, float]:
    """Symbol values of the fields of a resolved ``cfg`` that bind a symbol
    (:attr:`symcost.fields.Field.symbol`), encoded by :func:`symcost.fields.encode`."""
    return {f.symbol: encode(f, getattr(cfg, name)) for name, f in fields.items()
            if f.symbol is not None}


def parallel_bindings(cfg: TrainingConfig) -> dict[str, float]:
    """Values of the ``parallel`` symbols for a resolved ``cfg`` (see :func:`resolve`): every
    field's symbol, and ``fp8``/``fp4`` from ``dtype`` (:func:`symcost.fields.gemm_dtype_flags`)."""
    out = field_bindings(TRAINING_FIELDS, cfg)
    out.update({k: float(v) for k, v in gemm_dtype_flags(TRAIN_DTYPES[cfg.dtype]).items()})
    out.update(set_field_bindings(cfg))
    return out


def search_settings(cfg: TrainingConfig) -> dict[str, Any]:
    """The fields of ``cfg`` a configuration search shares with every candidate
    (:data:`symcost.fields.SEARCH_SHARED_FIELDS`) whose values differ from their defaults, by
    field name: what ``search(..., **settings)`` needs to price candidates as ``cfg`` is
    priced."""
    default = TrainingConfig()
    return {k: getattr(cfg, k) for k in SEARCH_SHARED_FIELDS
            if getattr(cfg, k) != getattr(default, k)}


def set_field_bindings(cfg: Any) -> dict[str, float]:
    """The flag symbols of every set-valued field of a training ``cfg``
    (:data:`symcost.fields.SUBSET_FIELDS`: ``lora_<target>``, ``rc_<module>``; 1 in the set,
    0 not), each field's value coerced to its canonical list first."""
    out: dict[str, float] = {}
    for name in SUBSET_FIELDS:
        out.update(subset_bindings(name, coerce(TRAINING_FIELDS[name], getattr(cfg, name))))
    return out


# ----------------------------------------------------------------------------- inference


class InferenceConfigError(ConfigError):
    """An invalid inference request; the message names the field and the rule it breaks."""


@dataclass(frozen=True)
class InferenceConfig:
    """How one model is served.

    Attributes:
        batch: sequences per replica (decode batch; prompts prefilled together; with
            continuous batching, the cap on sequences in flight).
        input_len: prompt tokens per request.
        output_len: generated tokens per request (>= 1; the first comes from prefill).
        tp: tensor-parallel degree.
        pp: pipeline-parallel degree.
        ep: expert-parallel degree of the MoE layers (1: every expert split by TP, vLLM and
            TensorRT-LLM tensor-parallel MoE). ``ep`` dividing ``tp``: the experts are split
            into ``ep`` groups inside the TP group, each group over ``tp/ep`` GPUs
            (TensorRT-LLM ``moe_ep_size``, ``moe_tp_size = tp/ep``); a multiple of ``tp``:
            whole experts over the TP groups of ``ep/tp`` replicas (attention data
            parallelism, vLLM ``--enable-expert-parallel`` and SGLang wide EP), which
            exchange their tokens by all-to-all in every MoE layer.
        moe_imbalance: routed tokens of the busiest expert-parallel rank over the mean (>= 1,
            at most ``min(ep, experts/top_k)``; 1: balanced routing, and the only value
            without expert parallelism).
        num_gpus: GPUs in total; ``tp*pp`` (one replica) when None; must be a multiple of
            ``tp*pp`` (``num_gpus/(tp*pp)`` independent replicas).
        dtype: default for the three dtypes below.
        weight_dtype: storage dtype of the layers' linear weights (bf16, fp16, fp8, int8,
            int4); ``dtype`` when None.
        act_dtype: activation / GEMM compute dtype (bf16, fp16, fp8, int8); ``dtype`` when
            None, except that an int4 ``dtype`` means bf16 activations.
        kv_dtype: KV-cache dtype (bf16, fp16, fp8, int8); like ``act_dtype`` when None.
        flash_attention: FlashAttention for prefill and flash-decoding for decode.
        max_num_tokens: most tokens per forward step (prefill chunk size); TensorRT-LLM's
            default 8192.
        kv_mem_frac: fraction of the memory left after weights and activation buffers given
            to the KV cache (TensorRT-LLM ``kv_cache_free_gpu_mem_fraction``, default 0.9).
        kv_on_demand: continuous batching allocates KV-cache blocks as tokens are generated
            (TensorRT-LLM ``MAX_UTILIZATION``, vLLM) instead of reserving ``input_len +
            output_len`` tokens per request (``GUARANTEED_NO_EVICT``, the default).
        framework: serving framework whose per-step overhead applies (``generic``, ``vllm``,
            ``lightllm``, ``tgi``, ``trtllm``).
    """

    batch: int = 1
    input_len: int = 1024
    output_len: int = 128
    tp: int = 1
    pp: int = 1
    ep: int = 1
    moe_imbalance: float = 1.0
    num_gpus: int | None = None
    dtype: str = "bf16"
    weight_dtype: str | None = None
    act_dtype: str | None = None
    kv_dtype: str | None = None
    flash_attention: bool = True
    max_num_tokens: int = 8192
    kv_mem_frac: float = 0.9
    kv_on_demand: bool = False
    framework: str = "generic"

    def replace(self, **changes: Any) -> "InferenceConfig":
        """A copy with ``changes`` applied (not validated until :func:`resolve_inference`)."""
        return dataclasses.replace(self, **changes)

    @property
    def dp(self) -> int:
        """Independent replicas ``num_gpus / (tp*pp)`` (after :func:`resolve_inference`)."""
        return (self.num_gpus or self.tp * self.pp) // (self.tp * self.pp)


def resolve_dtypes(cfg: InferenceConfig) -> tuple[str, str, str]:
    """``(weight, activation, kv)`` dtypes of ``cfg`` with the defaults filled in: each is
    ``dtype`` when None, except that int4 (a weight-only format) defaults the activations and
    KV cache to bf16.

    Raises:
        InferenceConfigError: a dtype outside its field's choices (int4 activations or KV
            cache included).
    """
    base = coerce(INFERENCE_FIELDS["dtype"], cfg.dtype)
    default_act = "bf16" if base == "int4" else base
    out = []
    for name, default in (("weight_dtype", base), ("act_dtype", default_act),
                          ("kv_dtype", default_act)):
        value = getattr(cfg, name)
        try:
            out.append(coerce(INFERENCE_FIELDS[name], default if value is None else value))
        except ConfigError as exc:
            raise InferenceConfigError(str(exc)) from None
    return out[0], out[1], out[2]


def resolve_inference(model: "ModelSpec", hw: "HardwareSpec",
                      cfg: InferenceConfig) -> InferenceConfig:
    """Validate ``cfg`` against ``model`` and ``hw`` and fill in the derived fields.

    Args:
        model: :class:`~symcost.models.ModelSpec`.
        hw: :class:`~hwspecs.HardwareSpec`.
        cfg: the request.

    Returns:
        An :class:`InferenceConfig` with ``num_gpus`` and the three dtypes set.

    Raises:
        InferenceConfigError: naming the field and the rule: a value outside its field's
            type, choices or range (:data:`symcost.fields.INFERENCE_FIELDS`), or a broken rule
            of :data:`symcost.rules.INFERENCE_RULES` (``num_gpus`` a multiple of ``tp*pp``;
            learned positions; ``tp`` dividing heads and ``ffn_hidden``; ``tp`` and
            ``kv_heads`` dividing one another; ``pp`` at most the layers; the quantization
            rules of :mod:`symcost.infer_api`).
    """
    c = _coerce_all(INFERENCE_FIELDS, cfg, InferenceConfigError)
    if c["num_gpus"] is None:
        c["num_gpus"] = model_parallel_size(c)
    w, a, kv = resolve_dtypes(cfg)
    c.update(weight_dtype=w, act_dtype=a, kv_dtype=kv)
    values = {**model_facts(model), **c, "hw_dtypes": frozenset(hw.peak_flops),
              "hw_name": hw.name}
    R.check(R.INFERENCE_RULES, values, InferenceConfigError)
    return InferenceConfig(**c)


def inference_hardware_bindings(hw: "HardwareSpec", act_dtype: str) -> dict[str, float]:
    """Hardware symbol values for GEMMs computing in ``act_dtype``: ``peak_flops_8`` is the
    fp8 or int8 peak for an 8-bit compute dtype, ``peak_flops_16`` the 16-bit peak (attention
    and the LM head run in it).

    Serving's 8-bit GEMMs reach the bf16 fraction of their peak (``matmul_ceiling_fp8`` bound
    to ``matmul_ceiling``): the fp8 measurement (:attr:`hwspecs.HardwareSpec.matmul_ceiling_fp8`)
    is the clock a GPU holds under a saturating stream of fp8 matmuls, training's regime, and
    it measures no int8 kernel. Bound to it, the TensorRT-LLM fp8 throughput rows on H100 and
    H200 (TRT017) came out too slow: serving MAPE 7.69% -> 8.69% (TRT017 7.15% -> 7.95%,
    signed mean error -3.4%), and refitting the inference-only constants did not recover it
    (8.74%), on 2026-12-07."""
    out = hardware_bindings(hw, act_dtype if act_dtype in ("bf16", "fp16") else "bf16")
    out[S.matmul_ceiling_fp8.name] = out[S.matmul_ceiling.name]
    if act_dtype in ("fp8", "int8"):
        out[S.peak_flops_8.name] = hw.peak(act_dtype)
    return out


def inference_parallel_bindings(cfg: InferenceConfig) -> dict[str, float]:
    """Values of the parallel and inference symbols for a resolved ``cfg``: every field's
    symbol, ``dp`` (replicas), ``fp8`` (8-bit GEMMs) and the byte widths of the dtypes."""
    w, a, kv = cfg.weight_dtype or cfg.dtype, cfg.act_dtype or cfg.dtype, cfg.kv_dtype or cfg.dtype
    out = field_bindings(INFERENCE_FIELDS, cfg)
    out.update({
        S.dp.name: cfg.dp, S.fp8.name: float(a in ("fp8", "int8")), S.fp4.name: 0.0,
        S.w_bytes.name: DTYPE_BYTES[w], S.act_bytes.name: DTYPE_BYTES[a],
        S.kv_bytes.name: DTYPE_BYTES[kv],
        S.w_dequant.name: float(DTYPE_BYTES[w] < DTYPE_BYTES[a]),
    })
    return out


__all__ = ["ACT_DTYPES", "DTYPES", "DTYPE_BYTES", "HOST_MEMORY_UNSTATED", "INT4_GROUP",
           "KV_DTYPES", "RECOMPUTE_MODES", "WEIGHT_DTYPES", "ConfigError", "InferenceConfig",
           "InferenceConfigError", "TrainingConfig", "field_bindings", "hardware_bindings",
           "hardware_facts", "inference_hardware_bindings", "set_field_bindings",
           "inference_parallel_bindings", "model_bindings", "model_facts", "parallel_bindings",
           "positive_int", "resolve", "resolve_dtypes", "search_settings", "resolve_inference"]
