"""Training configuration: parallel layout, batch and modes; validation and symbol bindings.

Validation happens here, in plain Python, before anything is lowered: a bad configuration
raises :class:`ConfigError` with a one-line message naming the field and the rule.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import symbols as S

if TYPE_CHECKING:  # pragma: no cover
    from hwspecs import HardwareSpec

    from .models import ModelSpec

RECOMPUTE_MODES = {"none": 0, "selective": 1, "full": 2}
DTYPES = ("bf16", "fp16", "fp8")


class ConfigError(ValueError):
    """An invalid configuration; the message names the field and the rule it breaks."""


@dataclass(frozen=True)
class TrainingConfig:
    """How one training job is laid out on the cluster.

    Attributes:
        num_gpus: GPUs in the job; derived as ``tp*pp*dp`` when None.
        tp: tensor-parallel degree (Megatron).
        pp: pipeline-parallel degree.
        dp: data-parallel degree; derived as ``num_gpus/(tp*pp)`` when None.
        sp: Megatron sequence parallelism (Korthikanti et al. 2022).
        vpp: virtual pipeline stages per GPU (interleaved 1F1B when > 1).
        micro_batch: sequences per micro-batch per GPU (``b``).
        global_batch: sequences per optimizer step (``B``); ``dp*micro_batch`` when None.
        seq_len: tokens per sequence; the model's ``seq_len`` when None.
        recompute: ``none``, ``selective`` or ``full`` activation recomputation.
        zero: ZeRO stage 0-3 (1 = Megatron distributed optimizer, 3 = FSDP full shard).
        dtype: GEMM dtype ``bf16``, ``fp16`` or ``fp8`` (fp8: Transformer-Engine style,
            16-bit activations and weights in memory).
        flash_attention: FlashAttention for the attention core.
        dp_overlap: overlap data-parallel communication with compute.
    """

    num_gpus: int | None = None
    tp: int = 1
    pp: int = 1
    dp: int | None = None
    sp: bool = False
    vpp: int = 1
    micro_batch: int = 1
    global_batch: int | None = None
    seq_len: int | None = None
    recompute: str = "none"
    zero: int = 0
    dtype: str = "bf16"
    flash_attention: bool = True
    dp_overlap: bool = True

    def replace(self, **changes) -> "TrainingConfig":
        """A copy with ``changes`` applied (not validated until :func:`resolve`)."""
        return dataclasses.replace(self, **changes)


def positive_int(name: str, value, error: type[ConfigError] = ConfigError) -> int:
    """``value`` as a positive ``int``.

    Raises:
        ``error`` (a :class:`ConfigError`): ``"{name}: must be a positive integer (got ...)"``
            for booleans, non-integral numbers, non-numbers and values <= 0.
    """
    if isinstance(value, bool):
        raise error(f"{name}: must be a positive integer (got {value!r})")
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        raise error(f"{name}: must be a positive integer (got {value!r})") from None
    if as_int != value or as_int <= 0:
        raise error(f"{name}: must be a positive integer (got {value!r})")
    return as_int



def on_off(name: str, value, error: type[ConfigError] = ConfigError) -> bool:
    """``value`` as a bool; accepts ``True``/``False`` and the numbers 0/1 only.

    Raises:
        ``error``: ``"{name}: must be on/off (true/false or 1/0), got ..."``.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    raise error(f"{name}: must be on/off (true/false or 1/0), got {value!r}")


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
        ConfigError: naming the field and the rule, for: non-positive sizes; ``tp`` not
            dividing heads or ``ffn_hidden``; ``tp`` and ``kv_heads`` not dividing one another;
            ``tp*pp*dp != num_gpus``; ``num_gpus`` not divisible by ``tp*pp``; ``pp`` above
            the layer count; interleaving without ``pp > 1`` or with layers not divisible by
            ``pp*vpp``; ``global_batch`` not divisible by ``micro_batch*dp``; unknown
            recompute mode, ZeRO stage or dtype; an on/off field (``sp``,
            ``flash_attention``, ``dp_overlap``) that is not a bool or 0/1; a dtype the GPU lacks; ZeRO-2/3 with
            ``pp > 1``; a sequence longer than learned position embeddings allow.
    """
    tp = positive_int("tp", cfg.tp)
    pp = positive_int("pp", cfg.pp)
    vpp = positive_int("vpp", cfg.vpp)
    mb = positive_int("micro_batch", cfg.micro_batch)
    if cfg.dp is None:
        if cfg.num_gpus is None:
            dp = 1
        else:
            n = positive_int("num_gpus", cfg.num_gpus)
            if n % (tp * pp):
                raise ConfigError(f"num_gpus: {n} is not divisible by tp*pp = {tp * pp}")
            dp = n // (tp * pp)
    else:
        dp = positive_int("dp", cfg.dp)
    n_gpus = tp * pp * dp
    if cfg.num_gpus is not None and positive_int("num_gpus", cfg.num_gpus) != n_gpus:
        raise ConfigError(f"num_gpus: tp*pp*dp = {tp}*{pp}*{dp} = {n_gpus} != num_gpus = "
                          f"{cfg.num_gpus}")
    gb = mb * dp if cfg.global_batch is None else positive_int("global_batch", cfg.global_batch)
    if gb % (mb * dp):
        raise ConfigError(f"global_batch: {gb} is not divisible by micro_batch*dp = {mb}*{dp}"
                          f" = {mb * dp}")
    seq = model.seq_len if cfg.seq_len is None else positive_int("seq_len", cfg.seq_len)
    if model.position == "learned" and seq > model.max_seq_len:
        raise ConfigError(f"seq_len: {seq} exceeds the model's learned positions "
                          f"(max_seq_len = {model.max_seq_len})")
    if model.heads % tp:
        raise ConfigError(f"tp: {tp} does not divide the number of attention heads "
                          f"({model.heads})")
    if model.ffn_hidden % tp:
        raise ConfigError(f"tp: {tp} does not divide ffn_hidden ({model.ffn_hidden})")
    if model.kv_heads % tp and tp % model.kv_heads:
        raise ConfigError(f"tp: {tp} and kv_heads ({model.kv_heads}) must divide one another "
                          "(KV heads are split, or replicated when kv_heads < tp)")
    if pp > model.layers:
        raise ConfigError(f"pp: {pp} exceeds the number of layers ({model.layers})")
    if vpp > 1:
        if pp == 1:
            raise ConfigError("vpp: the interleaved schedule (vpp > 1) needs pp > 1")
        if model.layers % (pp * vpp):
            raise ConfigError(f"vpp: layers ({model.layers}) must be divisible by pp*vpp = "
                              f"{pp * vpp} for the interleaved schedule")
        if (gb // (mb * dp)) % pp:
            raise ConfigError(f"vpp: the interleaved schedule needs the micro-batch count "
                              f"({gb // (mb * dp)}) to be a multiple of pp ({pp})")
    if cfg.recompute not in RECOMPUTE_MODES:
        raise ConfigError(f"recompute: {cfg.recompute!r} is not one of "
                          f"{', '.join(RECOMPUTE_MODES)}")
    if isinstance(cfg.zero, bool) or cfg.zero not in (0, 1, 2, 3):
        raise ConfigError(f"zero: ZeRO stage must be 0, 1, 2 or 3 (got {cfg.zero!r})")
    if cfg.zero >= 2 and pp > 1:
        raise ConfigError(f"zero: ZeRO-{cfg.zero} shards gradients across micro-batches and "
                          "cannot be combined with pipeline parallelism (pp > 1); use zero<=1")
    if cfg.dtype not in DTYPES:
        raise ConfigError(f"dtype: {cfg.dtype!r} is not one of {', '.join(DTYPES)}")
    if cfg.dtype not in hw.peak_flops:
        raise ConfigError(f"dtype: {hw.name} has no {cfg.dtype} tensor-core peak "
                          f"(it supports {', '.join(sorted(hw.peak_flops))})")
    return dataclasses.replace(cfg, num_gpus=n_gpus, tp=tp, pp=pp, dp=dp, vpp=vpp,
                               micro_batch=mb, global_batch=gb, seq_len=seq,
                               sp=on_off("sp", cfg.sp),
                               flash_attention=on_off("flash_attention", cfg.flash_attention),
                               dp_overlap=on_off("dp_overlap", cfg.dp_overlap))


def model_bindings(model: "ModelSpec") -> dict[str, float]:
    """Values of the ``model`` symbols for ``model`` (by symbol name)."""
    return {
        S.n_layers.name: model.layers, S.hidden.name: model.hidden,
        S.n_heads.name: model.heads, S.n_kv_heads.name: model.kv_heads,
        S.ffn_hidden.name: model.ffn_hidden, S.vocab.name: model.vocab,
        S.seq_len.name: model.seq_len, S.max_seq_len.name: model.max_seq_len,
        S.gated_mlp.name: float(model.mlp == "swiglu"), S.has_bias.name: float(model.bias),
        S.norm_bias.name: float(model.norm == "layernorm" and model.bias),
        S.tied_embed.name: float(model.tied_embeddings),
        S.learned_pos.name: float(model.position == "learned"),
        S.has_dropout.name: float(model.dropout),
    }


def hardware_bindings(hw: "HardwareSpec", dtype: str = "bf16") -> dict[str, float]:
    """Values of the ``hardware`` symbols for ``hw``; the 16-bit peak is that of ``dtype``
    when it is 16-bit (else bf16), the fp8 peak falls back to it where fp8 is absent."""
    p16 = hw.peak(dtype) if dtype in ("bf16", "fp16") else hw.peak("bf16")
    return {
        S.peak_flops_16.name: p16,
        S.peak_flops_8.name: hw.peak_flops.get("fp8", p16),
        S.hbm_bw.name: hw.hbm_bandwidth, S.hbm_cap.name: hw.hbm_capacity,
        S.intra_bw.name: hw.intra_node_bandwidth, S.intra_lat.name: hw.intra_node_latency,
        S.inter_bw.name: hw.inter_node_bandwidth, S.inter_lat.name: hw.inter_node_latency,
        S.gpus_per_node.name: hw.gpus_per_node,
    }


def parallel_bindings(cfg: TrainingConfig) -> dict[str, float]:
    """Values of the ``parallel`` symbols for a resolved ``cfg`` (see :func:`resolve`)."""
    return {
        S.tp.name: cfg.tp, S.pp.name: cfg.pp, S.dp.name: cfg.dp, S.sp_on.name: float(cfg.sp),
        S.vpp.name: cfg.vpp, S.micro_batch.name: cfg.micro_batch,
        S.global_batch.name: cfg.global_batch, S.seq_len.name: cfg.seq_len,
        S.recompute.name: RECOMPUTE_MODES[cfg.recompute], S.zero_stage.name: cfg.zero,
        S.flash_attn.name: float(cfg.flash_attention), S.fp8.name: float(cfg.dtype == "fp8"),
        S.dp_overlap.name: float(cfg.dp_overlap),
    }


# ----------------------------------------------------------------------------- inference
#: bytes per element of each storage dtype (int4: 4-bit values + a 16-bit scale per 128).
INT4_GROUP = 128
DTYPE_BYTES: dict[str, float] = {"bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                                 "int4": 0.5 + 2.0 / INT4_GROUP}
WEIGHT_DTYPES = ("bf16", "fp16", "fp8", "int8", "int4")
ACT_DTYPES = ("bf16", "fp16", "fp8", "int8")
KV_DTYPES = ("bf16", "fp16", "fp8", "int8")


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
    """

    batch: int = 1
    input_len: int = 1024
    output_len: int = 128
    tp: int = 1
    pp: int = 1
    num_gpus: int | None = None
    dtype: str = "bf16"
    weight_dtype: str | None = None
    act_dtype: str | None = None
    kv_dtype: str | None = None
    flash_attention: bool = True
    max_num_tokens: int = 8192
    kv_mem_frac: float = 0.9
    kv_on_demand: bool = False

    def replace(self, **changes) -> "InferenceConfig":
        """A copy with ``changes`` applied (not validated until :func:`resolve_inference`)."""
        return dataclasses.replace(self, **changes)

    @property
    def dp(self) -> int:
        """Independent replicas ``num_gpus / (tp*pp)`` (after :func:`resolve_inference`)."""
        return (self.num_gpus or self.tp * self.pp) // (self.tp * self.pp)
