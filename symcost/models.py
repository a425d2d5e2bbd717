"""Transformer model specifications, named presets and Hugging Face config loading.

A :class:`ModelSpec` describes the *shape* of a dense decoder-only transformer
(GPT or Llama style): the sizes that drive FLOP, memory and communication
costs, plus the architectural switches that change the parameter count.

Presets live in ``symcost/data/models.yaml`` (each with its ``source``) and are
read lazily on first use, then cached. :func:`get_model` also accepts a path to
a Hugging Face ``config.json`` (see :func:`from_hf_config`) or to a YAML/JSON
file holding :class:`ModelSpec` fields.

All sizes are element counts (parameters, features) or token counts; nothing
here carries a byte size or a dtype.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

__all__ = [
    "HF_DEFAULT_SEQ_LEN",
    "MAX_SIZE",
    "GATED_MLP_KINDS",
    "HYBRID_SYMBOLS",
    "MLP_KINDS",
    "NORM_KINDS",
    "POSITION_KINDS",
    "ModelSpec",
    "ModelSpecError",
    "VARIANT_PREFIXES",
    "VARIANT_SUFFIXES",
    "find_preset",
    "from_hf_config",
    "get_model",
    "list_models",
]

#: Upper bound of every integer shape field (``layers``, ``hidden``, ``heads``, ``kv_heads``,
#: ``ffn_hidden``, ``vocab``, ``seq_len``, ``max_seq_len``): ``2**24 = 16,777,216``, the largest
#: range in which float32 (the default precision of the compiled models) represents every
#: integer exactly. It is above every real value (vocabularies up to ~256k, widths up to ~53k,
#: contexts up to ~10M tokens) and keeps cost products such as ``B*s*L*h^2`` far from float32
#: overflow (3.4e38). One rule, checked in one place (:func:`_size_problem`), for
#: presets, model files, Hugging Face configs and :meth:`ModelSpec.replace`.
MAX_SIZE: int = 2**24

#: Default training sequence length (tokens) of a model read from a Hugging Face
#: ``config.json``: ``min(max_position_embeddings, HF_DEFAULT_SEQ_LEN)``. ``config.json``
#: records the longest context the weights support (131072 for Qwen2 and Llama 3.1), not the
#: length pre-training ran at, which is much shorter: 4096 tokens for Llama 2 (Touvron et al.
#: 2023, arXiv:2307.09288, Sec. 2.2 and Table 1); 8192 for Llama 3's initial pre-training
#: (arXiv:2407.21783, Sec. 3.4, after which the context is extended in a short final stage). 4096 is the common choice of a practitioner
#: training or fine-tuning such a model; set another with ``spec.replace(seq_len=...)`` or the
#: ``seq_len`` of the training configuration. Presets keep their own ``seq_len``.
HF_DEFAULT_SEQ_LEN: int = 4096

#: ``gelu``: two matrices; ``relu2``: two matrices with a squared-ReLU activation (Nemotron-H,
#: Nemotron-3; the same FLOPs and memory as ``gelu``); ``swiglu``: gated with a SiLU gate (three matrices); ``geglu``: gated
#: with a GELU-type gate (three matrices, the same FLOPs and memory as ``swiglu``; Gemma's
#: tanh-GELU gate, gpt-oss's ``x*sigmoid(1.702*x)``). Megatron's FLOP counters count the gated
#: third matrix only for a SiLU gate (:func:`symcost.validate.megatron_flops_per_token`).
MLP_KINDS: tuple[str, ...] = ("gelu", "swiglu", "geglu", "relu2")
#: the gated kinds of :data:`MLP_KINDS` (gate, up and down projections).
GATED_MLP_KINDS: frozenset[str] = frozenset({"swiglu", "geglu"})
NORM_KINDS: tuple[str, ...] = ("layernorm", "rmsnorm")
POSITION_KINDS: tuple[str, ...] = ("learned", "rope", "alibi", "none")

_SIZE_FIELDS: tuple[str, ...] = (
    "layers",
    "hidden",
    "heads",
    "kv_heads",
    "ffn_hidden",
    "vocab",
    "seq_len",
    "max_seq_len",
    "head_dim",
    "moe_layer_step",
)
#: counts that may be 0 (a dense model, no MLA); ``moe_layer_step`` and an explicit
#: ``head_dim`` are sizes (>= 1).
_COUNT_FIELDS: tuple[str, ...] = ("experts", "top_k", "shared_experts", "moe_ffn_hidden",
                                  "moe_latent_size", "dense_layers", "kv_lora_rank", "q_lora_rank",
                                  "rope_head_dim", "sliding_window", "full_attention_step",
                                  "mtp_layers", "mamba_heads", "mamba_head_dim", "mamba_state",
                                  "mamba_groups")
#: the block kinds of a hybrid layer pattern (Megatron-Core ``hybrid_layer_pattern``): a
#: Mamba-2 mixer, self-attention, a dense MLP, a mixture-of-experts MLP.
HYBRID_SYMBOLS: dict[str, str] = {"M": "mamba", "*": "attention", "-": "mlp", "E": "moe"}
_BOOL_FIELDS: tuple[str, ...] = ("bias", "tied_embeddings", "dropout", "act_clamp")
_ENUM_FIELDS: dict[str, tuple[str, ...]] = {
    "mlp": MLP_KINDS,
    "norm": NORM_KINDS,
    "position": POSITION_KINDS,
}

_PRESET_FILE = Path(__file__).resolve().parent / "data" / "models.yaml"


class ModelSpecError(ValueError):
    """Invalid model specification, unknown preset or malformed model config file.

    The message is a single line naming the offending field (or file) and the
    rule it breaks.
    """


@dataclass(frozen=True)
class ModelSpec:
    """Shape of a decoder-only transformer (GPT or Llama style), dense or mixture-of-experts,
    with multi-head, grouped-query or multi-head latent attention.

    Attributes:
        name: Identifier (the preset id for presets).
        layers: Number of transformer blocks, L.
        hidden: Model width h (features).
        heads: Number of query heads a.
        kv_heads: Number of key/value heads k (``heads`` for MHA, 1 for MQA,
            otherwise GQA); must divide ``heads``.
        ffn_hidden: MLP intermediate size f (features). For SwiGLU it is the
            size of each of the gate and up projections.
        vocab: Vocabulary size V as used by the embedding/LM-head matrices
            (i.e. already padded, e.g. 51200 for Megatron GPT).
        seq_len: Default training sequence length (tokens).
        max_seq_len: Maximum context, ``max_position_embeddings`` (tokens).
        mlp: ``'gelu'`` or ``'relu2'`` (2 matrices), ``'swiglu'`` or ``'geglu'`` (3 matrices,
            gated by a SiLU or a GELU-type activation; :data:`MLP_KINDS`).
        norm: ``'layernorm'`` or ``'rmsnorm'``.
        bias: Linear layers (and LayerNorms) carry biases (GPT-2/3, Megatron
            GPT) or not (Llama, MPT).
        tied_embeddings: The LM head shares the input embedding matrix.
        position: ``'learned'`` (adds ``max_seq_len * hidden`` parameters),
            ``'rope'``, ``'alibi'`` or ``'none'`` (no position encoding: Nemotron-H and
            Nemotron-3, whose Mamba-2 blocks carry the order).
        dropout: Dropout layers are active during training (Megatron GPT:
            True; Llama/MPT pretraining: False).
        source: Where the numbers come from (paper table / config file).
        act_clamp: The gated activation clamps its two inputs first (gpt-oss: the gate at most
            7, the linear half within +-7; HF ``swiglu_limit``, Megatron-Core
            ``activation_func_clamp_value``). Megatron-Core applies the clamps and
            concatenates the halves outside its fused activation kernel
            (``fusions/fused_bias_geglu.py``, ``weighted_bias_quick_geglu_impl``), so each
            activation pays that traffic (:func:`symcost.ops.elementwise.activation`).
        head_dim: Attention head width d; None (the default) means ``hidden // heads``.
            Some models set it apart (Qwen3: 128 with h/a = 64; MLA: the no-RoPE part).
        experts: Routed experts per MoE layer E (0: a dense model).
        top_k: Routed experts per token (MoE; 0 for dense).
        shared_experts: Always-active experts per MoE layer (DeepSeek, Kimi-K2, Qwen2-MoE).
        moe_ffn_hidden: FFN width of one expert f_e (features; ``ffn_hidden`` is the width of
            the dense layers' MLP).
        moe_latent_size: LatentMoE (Nemotron 3 Super): the width ``l`` the routed experts run
            in. Each MoE layer projects its input ``h -> l`` before the dispatch and the
            combined output ``l -> h`` after it (``2*h*l`` weights), so the routed experts'
            GEMMs are ``l``-wide and the all-to-all carries ``l`` per token; the router and
            the shared experts stay ``h``-wide. 0 (the default): no latent, the experts run in
            ``h`` (HF and Megatron-Core ``moe_latent_size``; Megatron-Bridge ``flop_utils.py``
            ``moe_layer_flops`` @067f987).
        dense_layers: Leading dense layers before the first MoE layer (DeepSeek
            ``first_k_dense_replace``).
        moe_layer_step: 1 when every layer after the dense ones is MoE, 2 every other
            (Llama-4 Maverick ``interleave_moe_layer_step``, Qwen ``decoder_sparse_step``).
        kv_lora_rank: Latent KV rank of multi-head latent attention (DeepSeek-V2/V3; 0: MHA
            or GQA). With MLA ``kv_heads == heads`` (keys and values are per head after the
            up-projection) and ``head_dim`` is the no-RoPE query/key width, also the value
            width.
        q_lora_rank: Latent query rank of MLA (0: a full-rank query projection).
        rope_head_dim: Decoupled RoPE query/key width per head of MLA.
        sliding_window: Sliding-window attention width W in tokens (0: every layer attends
            to the whole causal context). A token attends to itself and the ``W - 1``
            tokens before it (Mistral 7B, arXiv:2310.06825, Sec. 2; HF ``sliding_window``).
        full_attention_step: With a sliding window, every ``full_attention_step``-th layer
            (1-indexed) keeps full causal attention (gpt-oss and Gemma-2: 2, alternating;
            Gemma-3: 6); 0: every layer is windowed. Megatron-Core ``window_attn_skip_freq``.
        mtp_layers: Multi-token-prediction modules trained with the model (DeepSeek-V3,
            arXiv:2412.19437, Sec. 2.2: one module, a transformer block of the last layer's
            kind plus a ``2h -> h`` projection, sharing the embedding and output head;
            HF ``num_nextn_predict_layers``). Not counted in :meth:`num_params` (the
            published 671B excludes the 14B MTP module).
        mtp_pattern: [hybrid] The blocks of one MTP module of a hybrid model, in the
            ``hybrid_pattern`` alphabet (Nemotron 3 Super: ``'*E'``, an attention and a MoE
            block; NemotronH ``mtp_hybrid_override_pattern``). The cost model charges
            ``len(mtp_pattern)`` average blocks per module; Megatron-Bridge's FLOP count
            counts these blocks. Empty (the default): one layer per module.
        hybrid_pattern: Hybrid Mamba-Transformer layout, one character per block
            (Megatron-Core ``hybrid_layer_pattern``, NemotronH ``hybrid_override_pattern``):
            ``M`` a Mamba-2 mixer, ``*`` self-attention, ``-`` a dense MLP, ``E`` a MoE MLP
            (:data:`HYBRID_SYMBOLS`); each block has its own pre-norm and residual and counts
            as one of the ``layers``. Empty (the default): a transformer, every layer an
            attention block and an MLP (dense or MoE per ``dense_layers``/``moe_layer_step``).
        mamba_heads, mamba_head_dim, mamba_state, mamba_groups: the Mamba-2 mixer's heads
            ``H``, head width ``P`` (inner width ``H*P``), state size ``N`` and groups ``G``
            sharing ``B``/``C`` (Dao and Gu 2024, arXiv:2405.21060, Sec. 7.1); set exactly
            when the pattern has ``M`` blocks.

    Raises:
        ModelSpecError: On construction (and :meth:`replace`) if a size is not
            an int in ``[1, MAX_SIZE]`` (:data:`MAX_SIZE` = 2**24), ``hidden % heads != 0``, ``heads % kv_heads != 0``,
            an enum value is unknown, a flag is not a bool, ``name``/``source``
            is not a non-empty string, or ``position == 'learned'`` with
            ``seq_len > max_seq_len`` (no position rows for those tokens), or a hybrid
            pattern that does not match ``layers``, the Mamba-2 sizes or the experts.
    """

    name: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    vocab: int
    seq_len: int
    max_seq_len: int
    mlp: str
    norm: str
    bias: bool
    tied_embeddings: bool
    position: str
    dropout: bool
    source: str
    head_dim: int | None = None
    act_clamp: bool = False
    experts: int = 0
    top_k: int = 0
    shared_experts: int = 0
    moe_ffn_hidden: int = 0
    moe_latent_size: int = 0
    dense_layers: int = 0
    moe_layer_step: int = 1
    kv_lora_rank: int = 0
    q_lora_rank: int = 0
    rope_head_dim: int = 0
    sliding_window: int = 0
    full_attention_step: int = 0
    mtp_layers: int = 0
    mtp_pattern: str = ""
    hybrid_pattern: str = ""
    mamba_heads: int = 0
    mamba_head_dim: int = 0
    mamba_state: int = 0
    mamba_groups: int = 0

    def __post_init__(self) -> None:
        if self.head_dim is None and isinstance(self.heads, int) and self.heads > 0 \
                and isinstance(self.hidden, int):
            object.__setattr__(self, "head_dim", self.hidden // self.heads)
        _validate(self)

    @property
    def is_gated(self) -> bool:
        """True for a gated MLP (``swiglu`` or ``geglu``: gate, up and down projections)."""
        return self.mlp in GATED_MLP_KINDS

    @property
    def is_moe(self) -> bool:
        """True for a mixture-of-experts model (``experts > 0``)."""
        return self.experts > 0

    @property
    def is_hybrid(self) -> bool:
        """True for a hybrid Mamba-Transformer (a non-empty ``hybrid_pattern``)."""
        return bool(self.hybrid_pattern)

    @property
    def attention_layers(self) -> int:
        """Blocks with self-attention: the pattern's ``*`` blocks, or every layer."""
        return self.hybrid_pattern.count("*") if self.is_hybrid else self.layers

    @property
    def mamba_layers(self) -> int:
        """Mamba-2 blocks: the pattern's ``M`` blocks (0 for a transformer)."""
        return self.hybrid_pattern.count("M")

    @property
    def mlp_layers(self) -> int:
        """Blocks with a dense MLP: the pattern's ``-`` blocks, or the non-MoE layers."""
        return self.hybrid_pattern.count("-") if self.is_hybrid else \
            self.layers - self.moe_layers

    @property
    def moe_layers(self) -> int:
        """Number of MoE layers: the pattern's ``E`` blocks, or
        ``ceil((layers - dense_layers) / moe_layer_step)``."""
        if self.is_hybrid:
            return self.hybrid_pattern.count("E")
        if not self.is_moe:
            return 0
        return -(-(self.layers - self.dense_layers) // self.moe_layer_step)

    def mamba_params(self) -> int:
        """Parameters of one Mamba-2 mixer (no pre-norm; 0 without Mamba-2 blocks): input
        projection ``h*(2HP + 2GN + H)``, convolution weights and biases
        ``(HP + 2GN)*(4 + 1)``, ``dt`` bias, ``A`` and ``D`` (``3H``), the gated norm ``HP`` and
        the output projection ``HP*h`` (Megatron-Core ``MambaMixer``; Dao and Gu 2024,
        arXiv:2405.21060, Sec. 7.1)."""
        heads, inner = self.mamba_heads, self.mamba_heads * self.mamba_head_dim
        xbc = inner + 2 * self.mamba_groups * self.mamba_state
        return (self.hidden * (inner + xbc + heads) + xbc * 5 + 3 * heads + inner
                + inner * self.hidden)

    @property
    def swa_layers(self) -> int:
        """Layers with sliding-window attention: 0 without a window, else ``L - floor(L/n)``
        with ``n = full_attention_step`` (every n-th layer full), or ``L`` when ``n = 0``."""
        if not self.sliding_window:
            return 0
        step = self.full_attention_step
        return self.layers - (self.layers // step if step else 0)

    def active_params(self) -> int:
        """Parameters one token uses (elements): :meth:`num_params` with only ``top_k`` of the
        routed experts of each MoE layer (the MFU numerator of MoE models counts these).

        Returns:
            Active parameter count (equal to :meth:`num_params` for a dense model).
        """
        idle = self.moe_layers * (self.experts - self.top_k) * self._expert_params()
        return self.num_params() - idle

    def _expert_params(self) -> int:
        """Weights of one routed expert: ``(2+g) * w * f_e`` with ``w`` the latent width
        (``moe_latent_size``) or the hidden size."""
        width = self.moe_latent_size or self.hidden
        return (3 if self.is_gated else 2) * width * self.moe_ffn_hidden

    def num_params(self) -> int:
        """Exact parameter count implied by the fields (elements, not bytes).

        With L layers, width h, a query heads, k KV heads, head width
        d = h / a, MLP size f, vocabulary V and maximum context S::

            P = V*h                                  token embedding
              + V*h              if not tied_embeddings   (LM head)
              + S*h              if position == 'learned'
              + L * ( h*(a + 2k)*d + a*d*h           Q, K, V and output projections
                      + m*h*f                        MLP, m = 2 (gelu) or 3 (swiglu)
                      + 2*n                          two norms per layer
                      + [(a + 2k)*d + h              attention biases  } if bias
                         + g*f + h] )                MLP biases, g = 1 (gelu) or 2 (swiglu)
              + n                                    final norm

        where a norm has ``n = 2h`` parameters for a LayerNorm with bias and
        ``n = h`` otherwise (RMSNorm, or LayerNorm without bias as in MPT).
        For GPT (MHA, gelu, bias, LayerNorm, learned positions, tied) this is
        Narayanan et al. SC'21 (arXiv:2104.04473) Sec. 5.1
        ``P = 12 L h^2 (1 + 13/(12 h) + (V + S)/(12 L h))`` plus the final
        LayerNorm's 2h.

        Returns:
            Number of trainable parameters.
        """
        h, f = self.hidden, self.ffn_hidden
        d = self.head_dim if self.head_dim is not None else h // self.heads
        a, k = self.heads, self.kv_heads
        gated = self.is_gated
        norm = 2 * h if (self.norm == "layernorm" and self.bias) else h

        if self.kv_lora_rank:
            # MLA (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1.2, eqs. 9-14 and App. C): query
            # down/up projections (or one full-rank one), the joint KV down-projection with
            # the shared RoPE key, the KV up-projection, latent norms, the output projection.
            r, rq, dr = self.kv_lora_rank, self.q_lora_rank, self.rope_head_dim
            query = (h * rq + rq * a * (d + dr) + rq) if rq else h * a * (d + dr)
            attention = query + h * (r + dr) + r + r * a * 2 * d + a * d * h
        else:
            attention = h * (a + 2 * k) * d + a * d * h
        mlp = (3 if gated else 2) * h * f
        per_layer = attention + 2 * norm
        if self.bias:
            per_layer += (a + 2 * k) * d + h  # QKV and output-projection biases
        mlp_bias = ((2 if gated else 1) * f + h) if self.bias else 0
        n_moe = self.moe_layers
        # MoE layers: router h*E, E routed and S shared experts of width f_e (Fedus et al.
        # 2022, Switch Transformer, Sec. 2; DeepSeek-V3, arXiv:2412.19437, Sec. 2.1.2); with
        # a latent width l the routed experts are l-wide and the layer adds its h -> l and
        # l -> h projections (the shared experts stay h-wide).
        moe = (h * self.experts + self.experts * self._expert_params()
               + self.shared_experts * (3 if gated else 2) * h * self.moe_ffn_hidden
               + 2 * h * self.moe_latent_size)
        if self.is_hybrid:
            # one pre-norm per block; attention, MLP, MoE and Mamba-2 blocks as counted
            attn_block = per_layer - 2 * norm
            total = (self.vocab * h + self.layers * norm + self.attention_layers * attn_block
                     + self.mlp_layers * (mlp + mlp_bias) + n_moe * moe
                     + self.mamba_layers * self.mamba_params() + norm)
        else:
            total = (self.vocab * h + self.layers * per_layer + (self.layers - n_moe)
                     * (mlp + mlp_bias) + n_moe * moe + norm)
        if not self.tied_embeddings:
            total += self.vocab * h
        if self.position == "learned":
            total += self.max_seq_len * h
        return total

    def replace(self, **changes: Any) -> ModelSpec:
        """Return a validated copy with some fields changed.

        Args:
            **changes: New values for :class:`ModelSpec` fields.

        Returns:
            A new :class:`ModelSpec`.

        Raises:
            ModelSpecError: If a key is not a field, or the result is invalid.
        """
        unknown = sorted(set(changes) - _FIELD_NAMES)
        if unknown:
            raise ModelSpecError(
                f"unknown ModelSpec field(s): {', '.join(map(repr, unknown))}"
            )
        derived = self.head_dim == self.hidden // self.heads
        if derived and "head_dim" not in changes and ({"hidden", "heads"} & set(changes)):
            changes = {**changes, "head_dim": None}  # re-derived as hidden // heads
        return dataclasses.replace(self, **changes)


_FIELD_NAMES: frozenset[str] = frozenset(f.name for f in dataclasses.fields(ModelSpec))


def _size_problem(value: Any) -> str | None:
    """The rule for every integer shape field: an int (not a bool) in ``[1, MAX_SIZE]``.

    Returns:
        None if ``value`` satisfies it, else the message tail (``"must be a positive int
        (got 1.5)"``, ``"must be at most 16777216 (2**24, see symcost.models.MAX_SIZE) (got
        ...)"``), to be prefixed with the field's name.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return f"must be a positive int (got {_show(value)})"
    if value > MAX_SIZE:
        return (f"must be at most {MAX_SIZE} (2**24, see symcost.models.MAX_SIZE) "
                f"(got {_show(value)})")
    return None


def _show(value: Any) -> str:
    """``repr`` for a one-line message: huge ints by their magnitude (``str`` of an int of more
    than 4300 digits raises ValueError), long texts cut."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value) if abs(value) < 10**30 else f"~1e{int(value.bit_length() * 0.30103)}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _validate(spec: ModelSpec) -> None:
    """Check a spec's invariants; raise :class:`ModelSpecError` on the first violation."""
    for field in ("name", "source"):
        value = getattr(spec, field)
        if not isinstance(value, str) or not value.strip():
            raise ModelSpecError(f"{field} must be a non-empty string (got {value!r})")
    who = f"model {spec.name!r}"
    for field in _SIZE_FIELDS:
        problem = _size_problem(getattr(spec, field))
        if problem:
            raise ModelSpecError(f"{who}: {field} {problem}")
    for field in _COUNT_FIELDS:
        value = getattr(spec, field)
        problem = _size_problem(value + 1) if isinstance(value, int) and not isinstance(
            value, bool) else f"must be a non-negative int (got {_show(value)})"
        if problem:
            raise ModelSpecError(f"{who}: {field} {problem.replace('positive', 'non-negative')}")
    for field, allowed in _ENUM_FIELDS.items():
        value = getattr(spec, field)
        if value not in allowed:
            raise ModelSpecError(
                f"{who}: {field} must be one of {', '.join(allowed)} (got {value!r})"
            )
    for field in _BOOL_FIELDS:
        value = getattr(spec, field)
        if not isinstance(value, bool):
            raise ModelSpecError(f"{who}: {field} must be a bool (got {value!r})")
    d = spec.head_dim
    assert d is not None  # set in __post_init__ and checked as a size above
    if d * spec.heads == spec.hidden or d != spec.hidden // spec.heads:
        pass
    elif spec.hidden % spec.heads:
        raise ModelSpecError(
            f"{who}: hidden ({spec.hidden}) must be divisible by heads ({spec.heads}), or "
            "head_dim given"
        )
    if spec.experts:
        if not 1 <= spec.top_k <= spec.experts:
            raise ModelSpecError(f"{who}: top_k must be in [1, experts = {spec.experts}] for a "
                                 f"mixture-of-experts model (got {spec.top_k})")
        if not spec.moe_ffn_hidden:
            raise ModelSpecError(f"{who}: moe_ffn_hidden must be positive for a "
                                 "mixture-of-experts model (got 0)")
        if spec.dense_layers >= spec.layers:
            raise ModelSpecError(f"{who}: dense_layers ({spec.dense_layers}) must be fewer "
                                 f"than layers ({spec.layers})")
    elif spec.top_k or spec.shared_experts or spec.dense_layers or spec.moe_latent_size:
        raise ModelSpecError(f"{who}: top_k, shared_experts, dense_layers and moe_latent_size "
                             "need experts > 0")
    if spec.kv_lora_rank and spec.kv_heads != spec.heads:
        raise ModelSpecError(f"{who}: kv_heads ({spec.kv_heads}) must equal heads "
                             f"({spec.heads}) with multi-head latent attention (kv_lora_rank > 0)")
    if not spec.kv_lora_rank and (spec.q_lora_rank or spec.rope_head_dim):
        raise ModelSpecError(f"{who}: q_lora_rank and rope_head_dim need kv_lora_rank > 0 (MLA)")
    if spec.heads % spec.kv_heads:
        raise ModelSpecError(
            f"{who}: heads ({spec.heads}) must be divisible by kv_heads ({spec.kv_heads})"
        )
    _validate_hybrid(spec, who)
    if spec.position == "learned" and spec.seq_len > spec.max_seq_len:
        raise ModelSpecError(
            f"{who}: seq_len ({spec.seq_len}) must not exceed max_seq_len "
            f"({spec.max_seq_len}) with learned positions"
        )


def _validate_hybrid(spec: ModelSpec, who: str) -> None:
    """The hybrid-pattern rules: characters of :data:`HYBRID_SYMBOLS`, one per layer; ``E``
    blocks exactly when ``experts > 0`` (and then no ``dense_layers``/``moe_layer_step``:
    the pattern places them); Mamba-2 sizes set exactly when there are ``M`` blocks, with
    ``mamba_groups`` dividing ``mamba_heads``; an ``mtp_pattern`` only with MTP modules and
    of block kinds the hybrid_pattern has."""
    pattern = spec.hybrid_pattern
    if not isinstance(pattern, str):
        raise ModelSpecError(f"{who}: hybrid_pattern must be a string (got {pattern!r})")
    mamba = ("mamba_heads", "mamba_head_dim", "mamba_state", "mamba_groups")
    mtp = spec.mtp_pattern
    if not isinstance(mtp, str):
        raise ModelSpecError(f"{who}: mtp_pattern must be a string (got {mtp!r})")
    if mtp and not (pattern and spec.mtp_layers and set(mtp) <= set(pattern)):
        raise ModelSpecError(f"{who}: mtp_pattern ({mtp!r}) needs mtp_layers > 0 and a "
                             "hybrid_pattern holding each of its block kinds")
    if not pattern:
        if any(getattr(spec, f) for f in mamba):
            raise ModelSpecError(f"{who}: {', '.join(mamba)} need a hybrid_pattern with "
                                 "M (Mamba-2) blocks")
        return
    bad = sorted(set(pattern) - set(HYBRID_SYMBOLS))
    if bad:
        raise ModelSpecError(f"{who}: hybrid_pattern may only hold "
                             f"{', '.join(HYBRID_SYMBOLS)} (got {''.join(bad)!r})")
    if len(pattern) != spec.layers:
        raise ModelSpecError(f"{who}: hybrid_pattern has {len(pattern)} blocks but layers is "
                             f"{spec.layers} (one character per block)")
    if ("E" in pattern) != bool(spec.experts):
        raise ModelSpecError(f"{who}: hybrid_pattern has E (MoE) blocks exactly when experts "
                             f"> 0 (experts = {spec.experts})")
    if spec.dense_layers or spec.moe_layer_step != 1:
        raise ModelSpecError(f"{who}: dense_layers and moe_layer_step must stay 0 and 1 with "
                             "a hybrid_pattern (it places the MoE blocks)")
    if "M" in pattern:
        for f in mamba:
            if getattr(spec, f) < 1:
                raise ModelSpecError(f"{who}: {f} must be positive with M (Mamba-2) blocks "
                                     "in the hybrid_pattern")
        if spec.mamba_heads % spec.mamba_groups:
            raise ModelSpecError(f"{who}: mamba_heads ({spec.mamba_heads}) must be divisible "
                                 f"by mamba_groups ({spec.mamba_groups})")
    elif any(getattr(spec, f) for f in mamba):
        raise ModelSpecError(f"{who}: {', '.join(mamba)} need M (Mamba-2) blocks in the "
                             "hybrid_pattern")


# --------------------------------------------------------------------------- presets


@functools.lru_cache(maxsize=None)
def _registry() -> tuple[Mapping[str, ModelSpec], Mapping[str, str]]:
    """Load and validate ``data/models.yaml`` once: (presets by id, lookup key -> id)."""
    label = _PRESET_FILE.name
    try:
        text = _PRESET_FILE.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelSpecError(f"{_PRESET_FILE}: cannot read preset file ({exc.strerror})") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ModelSpecError(f"{label}: invalid YAML ({_one_line(exc)})") from exc
    if not isinstance(data, Mapping):
        raise ModelSpecError(f"{label}: top level must be a mapping")
    extra = sorted(set(data) - {"templates", "aliases", "models"})
    if extra:
        raise ModelSpecError(f"{label}: unknown top-level key(s) {', '.join(map(repr, extra))}")

    models = data.get("models")
    if not isinstance(models, Mapping) or not models:
        raise ModelSpecError(f"{label}: 'models' must be a non-empty mapping")
    presets: dict[str, ModelSpec] = {}
    for model_id, entry in models.items():
        if not isinstance(model_id, str) or model_id != model_id.strip().lower():
            raise ModelSpecError(f"{label}: model id {model_id!r} must be a lower-case string")
        if not isinstance(entry, Mapping):
            raise ModelSpecError(f"{label}: models.{model_id} must be a mapping")
        if "name" in entry and entry["name"] != model_id:
            raise ModelSpecError(f"{label}: models.{model_id}.name must equal its id")
        presets[model_id] = _spec_from_fields(
            {**entry, "name": model_id}, label=f"{label}: models.{model_id}"
        )

    aliases_raw = data.get("aliases") or {}
    if not isinstance(aliases_raw, Mapping):
        raise ModelSpecError(f"{label}: 'aliases' must be a mapping")
    # lookup key -> preset id, for the ids and then the aliases; a key met twice is an error
    # (an ambiguity, or an alias the lookup does not need).
    keys: dict[str, str] = {}
    for model_id in presets:
        key = lookup_key(model_id)
        if key in keys:
            raise ModelSpecError(f"{label}: model ids {keys[key]!r} and {model_id!r} have one "
                                 "lookup key (case, spaces, '-' and '_' are ignored)")
        keys[key] = model_id
    for alias, target in aliases_raw.items():
        if not isinstance(alias, str) or alias != alias.strip().lower():
            raise ModelSpecError(f"{label}: alias {alias!r} must be a lower-case string")
        if target not in presets:
            raise ModelSpecError(f"{label}: alias {alias!r} points to unknown model {target!r}")
        key = lookup_key(alias)
        if key in keys:
            raise ModelSpecError(f"{label}: alias {alias!r} of {target!r} has the lookup key of "
                                 f"{keys[key]!r} (case, spaces, '-' and '_' are ignored)")
        keys[key] = target
    return MappingProxyType(presets), MappingProxyType(keys)


def lookup_key(name: str) -> str:
    """The key a preset name is looked up by: lower case, without spaces, ``-`` and ``_``.

    ``'Llama 3 70B'``, ``'LLAMA3_70B'`` and ``'llama-3-70b'`` all give ``'llama370b'``. Dots
    and ``/`` are kept (``'llama-3.1-8b'`` is not ``'llama-31-8b'``).

    Args:
        name: A preset id, an alias or a name as a user or a measurement table writes it.

    Returns:
        The lookup key (str).
    """
    return re.sub(r"[\s_-]+", "", name.strip().lower())


#: Leading words of a published model name that name its publisher, not its shape
#: (``'Meta-Llama-3-8B'`` is ``llama-3-8b``), matched case-insensitively before a space, ``-``
#: or ``_``.
VARIANT_PREFIXES: tuple[str, ...] = ("meta",)
#: Trailing words of a published model name that name a post-training or packaging variant of
#: the same architecture, matched case-insensitively after a space, ``-`` or ``_``: Hugging
#: Face instruction-tuned, base and chat checkpoints (``-Instruct``, ``-Base``, ``-Chat``,
#: ``-it``), the ``-hf`` conversions of Meta's checkpoints, and ``-LLM``, NVIDIA NeMo's name for
#: the language model of a multimodal model (performance summary 25.07: ``LLAMA4-Scout-LLM``).
#: A size or a version is never stripped.
VARIANT_SUFFIXES: tuple[str, ...] = ("instruct", "base", "chat", "it", "hf", "llm")
_PAREN = re.compile(r"\s*\(.*?\)\s*")
_ORG = re.compile(r"^[^/\s]+/(?=[^/]+$)")
_PREFIX = re.compile(rf"^(?:{'|'.join(VARIANT_PREFIXES)})[\s_-]+", re.IGNORECASE)
_SUFFIX = re.compile(rf"[\s_-]+(?:{'|'.join(VARIANT_SUFFIXES)})$", re.IGNORECASE)


def _name_variants(name: str) -> list[str]:
    """``name`` as written, then without parenthesised remarks, without a Hugging Face
    organisation (``org/``), without the :data:`VARIANT_SUFFIXES` (one at a time) and without
    the :data:`VARIANT_PREFIXES`, in that order (each step keeps the earlier ones)."""
    out = [name.strip()]
    cur = _PAREN.sub(" ", out[0]).strip()
    out.append(cur)
    cur = _ORG.sub("", cur)
    out.append(cur)
    while (shorter := _SUFFIX.sub("", cur)) != cur:
        cur = shorter
        out.append(cur)
    out.append(_PREFIX.sub("", cur))
    return [c for c in dict.fromkeys(out) if c]


def find_preset(name: str) -> ModelSpec | None:
    """The preset a model name denotes, or None; never reads a file.

    The name is matched exactly (:func:`lookup_key`: case, spaces, ``-`` and ``_`` ignored)
    against the preset ids and the explicit alias map of ``symcost/data/models.yaml``; if that
    fails, the same exact match is tried on the name without parenthesised remarks
    (``'GPT-1.7B (Megatron SC21)'``, ``'Nemotron V3 Nano 30B (26.02)'``), without a Hugging Face
    organisation (``'meta-llama/Llama-3.1-8B'``), without trailing variant words
    (:data:`VARIANT_SUFFIXES`: ``'Llama-3.1-8B-Instruct'``, ``'LLAMA4-Scout-LLM'``) and without a
    publisher word (:data:`VARIANT_PREFIXES`: ``'Meta-Llama-3-70B'``). No substring guessing:
    the stripped name must still equal an id or an alias.

    Args:
        name: A model name as a user or a measurement table writes it.

    Returns:
        The preset (a shared immutable :class:`ModelSpec`), or None.

    Raises:
        ModelSpecError: If the bundled preset file is malformed.
    """
    presets, keys = _registry()
    for cand in _name_variants(name):
        model_id = keys.get(lookup_key(cand))
        if model_id is not None:
            return presets[model_id]
    return None


def list_models() -> list[str]:
    """Return the preset ids, in the order of ``symcost/data/models.yaml``.

    Aliases (e.g. ``'llama3-70b'``) are accepted by :func:`get_model` but not
    listed.

    Returns:
        Preset ids (lower case).

    Raises:
        ModelSpecError: If the bundled preset file is malformed.
    """
    return list(_registry()[0])


def get_model(name_or_path: str | os.PathLike[str]) -> ModelSpec:
    """Look up a preset, or load a model file.

    A string is first matched exactly (no substring guessing), ignoring case,
    spaces, ``-`` and ``_`` (:func:`lookup_key`), against the preset ids of
    ``symcost/data/models.yaml`` and its explicit alias map, then (unless it names an
    existing file) as a published variant of a preset's name (:func:`find_preset`:
    ``'meta-llama/Llama-3.1-8B-Instruct'`` is ``llama-3.1-8b``). Otherwise, and
    always for an ``os.PathLike``, it is treated as a path if it names an
    existing file/directory, contains a path separator or ends in
    ``.json``/``.yaml``/``.yml``:

    * a directory means ``<dir>/config.json``;
    * a JSON or YAML mapping whose keys include ``layers`` and ``hidden`` is
      read as :class:`ModelSpec` fields (``name`` defaults to the file stem and
      ``source`` to the path; every other field is required, unknown keys are
      errors);
    * any other mapping is read as a Hugging Face config (:func:`from_hf_config`).

    Args:
        name_or_path: Preset id or alias (e.g. ``'gpt3-175b'``, ``'Llama3-70B'``),
            or a path.

    Returns:
        The model spec (presets are cached, shared immutable instances).

    Raises:
        ModelSpecError: Unknown preset (the message lists the known ids), a
            missing or malformed file, or an invalid spec.
        TypeError: If ``name_or_path`` is neither ``str`` nor ``os.PathLike``.
    """
    if isinstance(name_or_path, os.PathLike):
        return _load_file(Path(name_or_path))
    if not isinstance(name_or_path, str):
        raise TypeError(
            f"get_model expects a str or os.PathLike, not {type(name_or_path).__name__}"
        )
    presets, keys = _registry()
    model_id = keys.get(lookup_key(name_or_path))
    if model_id is not None:
        return presets[model_id]
    # an existing file wins over a variant name (a local 'org/name' checkout)
    exists = _exists(name_or_path)
    if not exists:
        spec = find_preset(name_or_path)
        if spec is not None:
            return spec
    if _looks_like_path(name_or_path):
        path = Path(name_or_path)
        if not exists and path.suffix.lower() not in {".json", ".yaml", ".yml"}:
            # an 'org/name' that is neither a local checkout nor a preset's variant
            raise ModelSpecError(f"unknown model {name_or_path!r}: no such file or directory, "
                                 "and no preset, alias or published variant of one (symcost "
                                 "train --list-models)")
        return _load_file(path)
    raise ModelSpecError(f"unknown model {name_or_path!r}; known: {', '.join(presets)}")


def _looks_like_path(text: str) -> bool:
    if not text.strip():
        return False
    if "/" in text or os.sep in text or (os.altsep and os.altsep in text):
        return True
    if Path(text).suffix.lower() in {".json", ".yaml", ".yml"}:
        return True
    return _exists(text)


def _exists(text: str) -> bool:
    """Whether ``text`` names an existing file or directory (False for a name the file system
    cannot hold, e.g. longer than its limit)."""
    try:
        return Path(text).exists()
    except (OSError, ValueError):
        return False


def _load_file(path: Path) -> ModelSpec:
    if path.is_dir():
        path = path / "config.json"
    data = _read_mapping(path)
    if "layers" in data and "hidden" in data:
        fields = {"name": _default_hf_name(path), "source": str(path), **data}
        return _spec_from_fields(fields, label=str(path))
    return _from_hf_mapping(data, _default_hf_name(path), str(path), f"Hugging Face {path}")


def _read_mapping(path: Path) -> dict[str, Any]:
    """Parse a JSON (or, by suffix, YAML) file that must hold a mapping."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ModelSpecError(f"{path}: no such file") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelSpecError(f"{path}: cannot read ({_one_line(exc)})") from exc
    if path.suffix.lower() in {".yaml", ".yml"}:
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ModelSpecError(f"{path}: invalid YAML ({_one_line(exc)})") from exc
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise ModelSpecError(f"{path}: invalid YAML ({_one_line(exc)})") from exc
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ModelSpecError(
                f"{path}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})"
            ) from exc
        except ValueError as exc:  # e.g. an integer of more than 4300 digits
            raise ModelSpecError(f"{path}: invalid JSON ({_one_line(exc)})") from exc
    if not isinstance(data, Mapping):
        raise ModelSpecError(f"{path}: top level must be a mapping, not {type(data).__name__}")
    return dict(data)


def _spec_from_fields(data: Mapping[str, Any], *, label: str) -> ModelSpec:
    unknown = sorted(str(k) for k in set(data) - _FIELD_NAMES)
    if unknown:
        raise ModelSpecError(f"{label}: unknown field(s) {', '.join(map(repr, unknown))}")
    for field in dataclasses.fields(ModelSpec):
        if field.name not in data and field.default is dataclasses.MISSING:
            raise ModelSpecError(f"{label}: missing {field.name!r}")
    return ModelSpec(**data)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


# --------------------------------------------------------------------------- Hugging Face


# model_type values whose HF implementation uses a gated SiLU MLP (gate/up/down),
# RMSNorm and rotary position embeddings.
_LLAMA_LIKE: frozenset[str] = frozenset({"llama", "mistral", "qwen2", "qwen3", "mixtral",
                                         "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3",
                                         "gpt_oss", "kimi_k2"})
#: model_type values whose HF MLP is always gated, ``down(act(gate(x)) * up(x))``, whatever
#: ``hidden_act`` is (transformers ``LlamaMLP``, ``MistralMLP``, ``Qwen2MLP``, ``GemmaMLP``):
#: a GELU activation there is GeGLU (``'geglu'``), with SwiGLU's three matrices and FLOPs.
_GATED_MLP: frozenset[str] = _LLAMA_LIKE | {"gemma"}
#: model_type values whose experts are gated by ``x * sigmoid(1.702 * x)`` (a GELU
#: approximation) whatever ``hidden_act`` says: gpt-oss (transformers ``GptOssExperts``,
#: ``alpha = 1.702``; OpenAI gpt-oss model card, arXiv:2508.10925, Sec. 2.1 "SwiGLU" with
#: clamping; Megatron-Bridge's gpt-oss provider ``activation_func = quick_gelu``).
_GEGLU_MODEL_TYPES: frozenset[str] = frozenset({"gpt_oss"})
#: model_type values whose config class ties the embeddings by default
#: (``GemmaConfig(tie_word_embeddings=True)``; Llama, Mistral and Qwen2 default to False).
_TIED_BY_DEFAULT: frozenset[str] = frozenset({"gemma"})
_DROPOUT_KEYS: tuple[str, ...] = ("attention_dropout", "hidden_dropout")
_GPT2_DROPOUT_KEYS: tuple[str, ...] = ("resid_pdrop", "embd_pdrop", "attn_pdrop")
_GPT2_DROPOUT_DEFAULT = 0.1  # transformers.GPT2Config default for resid/embd/attn_pdrop
#: config.json keys that make a model a mixture of experts when > 1: experts per MoE layer
#: (Mixtral/Phi-3.5-MoE ``num_local_experts``, Qwen-MoE/OLMoE ``num_experts``, DeepSeek
#: ``n_routed_experts``) and experts per token (``num_experts_per_tok``).
_EXPERT_KEYS: tuple[str, ...] = ("num_local_experts", "num_experts", "n_routed_experts")
_TOP_K_KEYS: tuple[str, ...] = ("num_experts_per_tok", "experts_per_token")
_MOE_STEP_KEYS: tuple[str, ...] = ("moe_layer_freq", "decoder_sparse_step",
                                   "interleave_moe_layer_step")


def from_hf_config(
    config: Mapping[str, Any] | str | os.PathLike[str],
    name: str | None = None,
) -> ModelSpec:
    """Build a :class:`ModelSpec` from a Hugging Face ``config.json``.

    Three schemas are understood: Llama style, GPT-2 style (below) and the hybrid
    Mamba-Transformer ``NemotronHConfig`` (a ``hybrid_override_pattern`` or
    ``layers_block_type`` key; see :func:`_nemotron_h_fields`).

    Llama style (``model_type`` llama / mistral / qwen2, or any config with
    ``hidden_size``): ``hidden_size``, ``num_hidden_layers``,
    ``num_attention_heads``, ``num_key_value_heads`` (default: the number of
    heads), ``intermediate_size``, ``vocab_size``, ``max_position_embeddings``
    and ``tie_word_embeddings`` (default False) are read directly.
    ``hidden_act`` ``'silu'``/``'swish'`` maps to ``'swiglu'`` for the
    llama/mistral/qwen2/gemma model types (a plain SiLU MLP cannot be told apart
    otherwise, so it is an error); ``'gelu*'`` maps to ``'geglu'`` for those
    types (their HF MLP is always gated: GeGLU, SwiGLU's three matrices)
    and to ``'gelu'`` (two matrices) for any other type; ``gpt_oss`` is ``'geglu'``
    whatever ``hidden_act`` says (its experts' gate is ``x*sigmoid(1.702x)``).
    ``tie_word_embeddings`` defaults to True for ``gemma`` (its config class default). The norm is
    RMSNorm if ``rms_norm_eps`` is present (LayerNorm if ``layer_norm_eps`` /
    ``layer_norm_epsilon`` is). Positions are RoPE for those model types or
    when ``rope_theta``/``rope_scaling`` is present. ``bias`` is
    ``attention_bias``/``mlp_bias`` (default False; they must agree). Qwen2's
    hard-wired QKV-only bias is not represented (bias=False undercounts its
    parameters by a negligible ``L*(a+2k)*d``). An explicit ``head_dim`` is kept (Qwen3,
    gpt-oss). Mixture-of-experts keys (see :func:`_moe_fields`) and multi-head latent
    attention keys (see :func:`_mla_fields`) are read.

    GPT-2 style (``n_embd``, ``n_layer``, ``n_head``, ``n_positions`` or
    ``n_ctx``, ``n_inner`` default ``4*n_embd``, ``vocab_size``): learned
    positions, LayerNorm, GELU, biases, tied embeddings
    (``tie_word_embeddings`` default True), MHA.

    ``config.json`` does not record the training sequence length:
    ``max_seq_len`` is ``max_position_embeddings`` (``n_positions``) and the
    default ``seq_len`` is ``min(max_position_embeddings, HF_DEFAULT_SEQ_LEN)``
    = ``min(max_position_embeddings, 4096)``, a practitioner's training length
    (see :data:`HF_DEFAULT_SEQ_LEN` for the sources), not the 131072-token
    maximum context of e.g. Qwen2; use ``spec.replace(seq_len=...)``.
    Every size must be an int in ``[1, MAX_SIZE]`` (:data:`MAX_SIZE` = 2**24).
    ``dropout`` is True if any of attention_dropout, hidden_dropout,
    resid_pdrop, embd_pdrop, attn_pdrop is positive (GPT-2 defaults: 0.1).
    ``vocab_size`` is taken as is (no padding is applied).

    Args:
        config: The parsed config mapping, or a path to ``config.json`` (or to
            the directory holding it).
        name: Name for the spec. Defaults to the containing directory's name
            for a ``.../config.json`` path (the file stem for other names);
            for a mapping, ``_name_or_path`` or
            ``model_type`` from the config, else ``'hf-model'``.

    Returns:
        The model spec; its ``source`` names the file it was read from.

    Raises:
        ModelSpecError: Unreadable file or invalid JSON (naming the file), a
            required key missing (``"config.json: missing 'hidden_size'"``), a
            value of the wrong type or out of range (non-integral, non-finite,
            above :data:`MAX_SIZE`), an unsupported activation/norm/position, or an invalid resulting spec.
    """
    if isinstance(config, (str, os.PathLike)):
        path = Path(config)
        if path.is_dir():
            path = path / "config.json"
        if name is None:
            name = _default_hf_name(path)
        return _from_hf_mapping(_read_mapping(path), name, str(path), f"Hugging Face {path}")
    if isinstance(config, Mapping):
        return _from_hf_mapping(config, name, "config.json", "Hugging Face config.json mapping")
    raise ModelSpecError(f"config must be a mapping or a path, not {type(config).__name__}")


def _from_hf_mapping(
    cfg: Mapping[str, Any], name: str | None, label: str, source: str
) -> ModelSpec:
    if name is None:
        name = str(cfg.get("_name_or_path") or cfg.get("model_type") or "hf-model")

    if "hidden_size" not in cfg and isinstance(cfg.get("text_config"), Mapping):
        raise ModelSpecError(
            f"{label}: a multimodal config (its language model is under 'text_config'); "
            "only the language model can be modelled: pass config['text_config'] to "
            "from_hf_config"
        )
    if any(key in cfg for key in ("n_embd", "n_layer", "n_head")):
        fields = _gpt2_fields(cfg, label)
    elif any(key in cfg for key in _HYBRID_KEYS):
        fields = _nemotron_h_fields(cfg, label)
    else:
        fields = _llama_fields(cfg, label)
        fields.update(_moe_fields(cfg, label, fields["ffn_hidden"]))
        fields.update(_mla_fields(cfg, label))
        fields.update(_window_fields(cfg, label, fields["layers"]))
        fields["mtp_layers"] = _first_int(cfg, ("num_nextn_predict_layers",), label) or 0
        if fields.get("kv_lora_rank"):
            fields["kv_heads"] = fields["heads"]
    try:
        return ModelSpec(name=name, source=source, **fields)
    except ModelSpecError as exc:
        raise ModelSpecError(f"{label}: {exc}") from exc


#: keys that mark a hybrid Mamba-Transformer config (HF ``NemotronHConfig``): the block pattern
#: as a string (``hybrid_override_pattern``) or as a list of block kinds
#: (``layers_block_type``).
_HYBRID_KEYS: tuple[str, ...] = ("hybrid_override_pattern", "layers_block_type")
_BLOCK_KINDS: dict[str, str] = {kind: sym for sym, kind in HYBRID_SYMBOLS.items()}


def _nemotron_h_fields(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    """Fields of a hybrid Mamba-Transformer config (Hugging Face ``NemotronHConfig``,
    ``model_type`` ``nemotron_h``): the block pattern (``hybrid_override_pattern``, or
    ``layers_block_type`` mapped through :data:`HYBRID_SYMBOLS`), the Mamba-2 sizes
    (``mamba_num_heads``, ``mamba_head_dim``, ``ssm_state_size``, ``n_groups``), attention
    (``num_attention_heads``, ``num_key_value_heads``, ``head_dim``), the squared-ReLU MLP
    (``mlp_hidden_act`` ``relu2``), the experts of the ``E`` blocks (``n_routed_experts``,
    ``num_experts_per_tok``, ``moe_intermediate_size``, ``n_shared_experts`` of
    ``moe_shared_expert_intermediate_size``, counted as experts of ``moe_intermediate_size``),
    RMSNorm and no position encoding, ``num_nextn_predict_layers`` with the MTP module's
    blocks (``mtp_hybrid_override_pattern``) and the LatentMoE width ``moe_latent_size``
    (Nemotron 3 Super).

    Raises:
        ModelSpecError: another MLP activation, a block kind outside
            :data:`HYBRID_SYMBOLS`, or a shared-expert width that is not a multiple of the
            routed one.
    """
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is None:
        kinds = cfg.get("layers_block_type")
        if not isinstance(kinds, list) or any(k not in _BLOCK_KINDS for k in kinds):
            raise ModelSpecError(f"{label}: 'layers_block_type' must list block kinds of "
                                 f"{', '.join(_BLOCK_KINDS)} (got {kinds!r})")
        pattern = "".join(_BLOCK_KINDS[k] for k in kinds)
    if not isinstance(pattern, str):
        raise ModelSpecError(f"{label}: 'hybrid_override_pattern' must be a string")
    act = cfg.get("mlp_hidden_act", "relu2")
    if act != "relu2":
        raise ModelSpecError(f"{label}: unsupported 'mlp_hidden_act' {act!r} (expected relu2)")
    hidden = _get_int(cfg, "hidden_size", label)
    heads = _get_int(cfg, "num_attention_heads", label)
    max_pos = _get_int(cfg, "max_position_embeddings", label)
    head_dim = _head_dim(cfg, label)
    bias = _get_bool(cfg, "attention_bias", label, False)
    fields: dict[str, Any] = dict(
        layers=len(pattern), hybrid_pattern=pattern, hidden=hidden, heads=heads,
        kv_heads=_get_int(cfg, "num_key_value_heads", label, default=heads),
        head_dim=head_dim, ffn_hidden=_get_int(cfg, "intermediate_size", label),
        vocab=_get_int(cfg, "vocab_size", label, default=131072),
        seq_len=min(max_pos, HF_DEFAULT_SEQ_LEN), max_seq_len=max_pos, mlp="relu2",
        norm="rmsnorm", bias=bias,
        tied_embeddings=_get_bool(cfg, "tie_word_embeddings", label, False),
        position="none", dropout=False,
        mtp_layers=_first_int(cfg, ("num_nextn_predict_layers",), label) or 0)
    mtp = cfg.get("mtp_hybrid_override_pattern")
    if fields["mtp_layers"] and isinstance(mtp, str):
        fields["mtp_pattern"] = mtp
    if "M" in pattern:
        fields.update(mamba_heads=_get_int(cfg, "mamba_num_heads", label),
                      mamba_head_dim=_get_int(cfg, "mamba_head_dim", label),
                      mamba_state=_get_int(cfg, "ssm_state_size", label),
                      mamba_groups=_get_int(cfg, "n_groups", label, default=1))
    if "E" in pattern:
        fe = _get_int(cfg, "moe_intermediate_size", label)
        shared_width = (_first_int(cfg, ("n_shared_experts",), label) or 0) * (
            _first_int(cfg, ("moe_shared_expert_intermediate_size",), label) or 0)
        if shared_width % fe:
            raise ModelSpecError(f"{label}: the shared experts' width ({shared_width}) is not a "
                                 f"multiple of moe_intermediate_size ({fe})")
        fields.update(experts=_get_int(cfg, "n_routed_experts", label),
                      top_k=_get_int(cfg, "num_experts_per_tok", label),
                      moe_ffn_hidden=fe, shared_experts=shared_width // fe,
                      moe_latent_size=_first_int(cfg, ("moe_latent_size",), label) or 0)
    return fields


def _head_dim(cfg: Mapping[str, Any], label: str) -> int | None:
    """A config's explicit ``head_dim`` (None when absent), checked as a size.

    Raises:
        ModelSpecError: ``head_dim`` is not an int in ``[1, MAX_SIZE]``.
    """
    head_dim = cfg.get("head_dim")
    if head_dim is not None and _size_problem(head_dim):
        raise ModelSpecError(f"{label}: 'head_dim' {_size_problem(head_dim)}")
    return head_dim


def _first_int(cfg: Mapping[str, Any], keys: tuple[str, ...], label: str) -> int | None:
    """The first of ``keys`` present in ``cfg`` as a non-negative int, else None."""
    for key in keys:
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ModelSpecError(f"{label}: {key!r} must be a non-negative int (got {value!r})")
        return value
    return None


def _moe_fields(cfg: Mapping[str, Any], label: str, ffn_hidden: int) -> dict[str, Any]:
    """The mixture-of-experts fields of a config: experts (Mixtral/gpt-oss
    ``num_local_experts``, Qwen-MoE ``num_experts``, DeepSeek ``n_routed_experts``), top-k
    (``num_experts_per_tok``, gpt-oss ``experts_per_token``), the expert width
    (``moe_intermediate_size``, else ``intermediate_size``), shared experts (DeepSeek
    ``n_shared_experts``; Qwen2-MoE ``shared_expert_intermediate_size`` in expert widths),
    leading dense layers (DeepSeek ``first_k_dense_replace``) and the MoE layer step
    (``moe_layer_freq``, ``decoder_sparse_step``, ``interleave_moe_layer_step``). A config
    with at most one expert is dense (empty result)."""
    experts = _first_int(cfg, _EXPERT_KEYS, label) or 0
    if experts <= 1:
        return {}
    top_k = _first_int(cfg, _TOP_K_KEYS, label)
    if top_k is None:
        raise ModelSpecError(f"{label}: a mixture-of-experts config needs "
                             "'num_experts_per_tok'")
    width = _first_int(cfg, ("moe_intermediate_size",), label) or ffn_hidden
    shared = _first_int(cfg, ("n_shared_experts",), label)
    if shared is None:
        shared_width = _first_int(cfg, ("shared_expert_intermediate_size",), label) or 0
        shared = -(-shared_width // width)
    return dict(experts=experts, top_k=top_k, moe_ffn_hidden=width, shared_experts=shared,
                dense_layers=_first_int(cfg, ("first_k_dense_replace",), label) or 0,
                moe_layer_step=_first_int(cfg, _MOE_STEP_KEYS, label) or 1)


def _window_fields(cfg: Mapping[str, Any], label: str, layers: int) -> dict[str, Any]:
    """Sliding-window attention: ``sliding_window`` (Mistral, Qwen2 only with
    ``use_sliding_window``, gpt-oss, Gemma) and which layers keep full attention: HF
    ``layer_types`` (``"full_attention"`` every n-th layer gives ``full_attention_step = n``;
    an irregular list takes the nearest step ``round(L / full layers)``), Gemma-3
    ``sliding_window_pattern``, else every layer windowed (``full_attention_step = 0``)."""
    window = _first_int(cfg, ("sliding_window",), label) or 0
    if not window or cfg.get("use_sliding_window") is False:
        return {}
    step = _first_int(cfg, ("sliding_window_pattern",), label) or 0
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        full = sum(1 for t in types if t == "full_attention")
        if full == len(types):
            return {}
        step = round(layers / full) if full else 0
    return dict(sliding_window=window, full_attention_step=step)


def _mla_fields(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    """Multi-head latent attention fields (DeepSeek-V2/V3, Kimi-K2): ``kv_lora_rank``,
    ``q_lora_rank`` (null: full-rank queries), ``qk_rope_head_dim`` and
    ``qk_nope_head_dim`` (the head width; ``v_head_dim`` must equal it)."""
    rank = _first_int(cfg, ("kv_lora_rank",), label) or 0
    if not rank:
        return {}
    nope = _get_int(cfg, "qk_nope_head_dim", label)
    v = _get_int(cfg, "v_head_dim", label, default=nope)
    if v != nope:
        raise ModelSpecError(f"{label}: v_head_dim ({v}) must equal qk_nope_head_dim ({nope})"
                             " (one head width)")
    return dict(kv_lora_rank=rank, q_lora_rank=_first_int(cfg, ("q_lora_rank",), label) or 0,
                rope_head_dim=_first_int(cfg, ("qk_rope_head_dim",), label) or 0,
                head_dim=nope)


def _default_hf_name(path: Path) -> str:
    if path.name == "config.json" and path.parent.name:
        return path.parent.name
    return path.stem


def _get_int(cfg: Mapping[str, Any], key: str, label: str, default: Any = None) -> int:
    value = cfg.get(key)
    if value is None:
        if default is None:
            raise ModelSpecError(f"{label}: missing {key!r}")
        value = default
    problem = _size_problem(value)
    if problem:
        raise ModelSpecError(f"{label}: {key!r} {problem}")
    return value


def _get_bool(cfg: Mapping[str, Any], key: str, label: str, default: bool) -> bool:
    value = cfg.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise ModelSpecError(f"{label}: {key!r} must be true or false (got {value!r})")
    return value


def _has_dropout(
    cfg: Mapping[str, Any], keys: tuple[str, ...], label: str, default: float = 0.0
) -> bool:
    for key in keys:
        value = cfg.get(key, default)
        if value is None:
            value = default
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ModelSpecError(f"{label}: {key!r} must be a number (got {value!r})")
        if value > 0:
            return True
    return False


def _llama_fields(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    model_type = cfg.get("model_type")
    llama_like = model_type in _LLAMA_LIKE

    hidden = _get_int(cfg, "hidden_size", label)
    layers = _get_int(cfg, "num_hidden_layers", label)
    heads = _get_int(cfg, "num_attention_heads", label)
    kv_heads = _get_int(cfg, "num_key_value_heads", label, default=heads)
    ffn = _get_int(cfg, "intermediate_size", label)
    vocab = _get_int(cfg, "vocab_size", label)
    max_pos = _get_int(cfg, "max_position_embeddings", label)

    head_dim = _head_dim(cfg, label)

    act = cfg.get("hidden_act")
    if act is None:
        if not llama_like:
            raise ModelSpecError(f"{label}: missing 'hidden_act'")
        act = "silu"
    if not isinstance(act, str):
        raise ModelSpecError(f"{label}: 'hidden_act' must be a string (got {act!r})")
    gated = model_type in _GATED_MLP
    if act in ("silu", "swish"):
        if not gated:
            raise ModelSpecError(
                f"{label}: hidden_act {act!r} with model_type {model_type!r} is ambiguous "
                f"(gated SwiGLU is assumed only for model_type {', '.join(sorted(_GATED_MLP))})"
            )
        mlp = "swiglu"
    elif act.startswith("gelu"):
        mlp = "geglu" if gated else "gelu"
    else:
        raise ModelSpecError(
            f"{label}: unsupported 'hidden_act' {act!r} (expected silu, swish or gelu*)"
        )
    if model_type in _GEGLU_MODEL_TYPES:
        mlp = "geglu"

    if "rms_norm_eps" in cfg:
        norm = "rmsnorm"
    elif "layer_norm_eps" in cfg or "layer_norm_epsilon" in cfg:
        norm = "layernorm"
    elif llama_like:
        norm = "rmsnorm"
    else:
        raise ModelSpecError(
            f"{label}: cannot tell the norm (no 'rms_norm_eps' or 'layer_norm_eps')"
        )

    if llama_like or cfg.get("rope_theta") is not None or cfg.get("rope_scaling") is not None:
        position = "rope"
    else:
        raise ModelSpecError(
            f"{label}: cannot tell the position encoding for model_type {model_type!r} "
            "(expected 'rope_theta')"
        )

    attention_bias = _get_bool(cfg, "attention_bias", label, False)
    mlp_bias = _get_bool(cfg, "mlp_bias", label, attention_bias)
    if attention_bias != mlp_bias:
        raise ModelSpecError(
            f"{label}: attention_bias ({attention_bias}) and mlp_bias ({mlp_bias}) differ; "
            "ModelSpec has a single bias flag"
        )

    return dict(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=kv_heads,
        ffn_hidden=ffn,
        vocab=vocab,
        seq_len=min(max_pos, HF_DEFAULT_SEQ_LEN),
        max_seq_len=max_pos,
        mlp=mlp,
        norm=norm,
        bias=attention_bias,
        tied_embeddings=_get_bool(cfg, "tie_word_embeddings", label,
                                  model_type in _TIED_BY_DEFAULT),
        position=position,
        dropout=_has_dropout(cfg, _DROPOUT_KEYS + _GPT2_DROPOUT_KEYS, label),
        head_dim=head_dim,
        act_clamp=cfg.get("swiglu_limit") is not None,
    )


def _gpt2_fields(cfg: Mapping[str, Any], label: str) -> dict[str, Any]:
    hidden = _get_int(cfg, "n_embd", label)
    layers = _get_int(cfg, "n_layer", label)
    heads = _get_int(cfg, "n_head", label)
    if cfg.get("n_positions") is None and cfg.get("n_ctx") is not None:
        max_pos = _get_int(cfg, "n_ctx", label)
    else:
        max_pos = _get_int(cfg, "n_positions", label)
    ffn = _get_int(cfg, "n_inner", label, default=4 * hidden)
    vocab = _get_int(cfg, "vocab_size", label)
    act = cfg.get("activation_function", "gelu_new")
    if not isinstance(act, str) or not act.startswith("gelu"):
        raise ModelSpecError(
            f"{label}: unsupported 'activation_function' {act!r} (expected gelu*)"
        )
    return dict(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=heads,
        ffn_hidden=ffn,
        vocab=vocab,
        seq_len=min(max_pos, HF_DEFAULT_SEQ_LEN),
        max_seq_len=max_pos,
        mlp="gelu",
        norm="layernorm",
        bias=True,
        tied_embeddings=_get_bool(cfg, "tie_word_embeddings", label, True),
        position="learned",
        dropout=_has_dropout(cfg, _GPT2_DROPOUT_KEYS, label, default=_GPT2_DROPOUT_DEFAULT),
    )
