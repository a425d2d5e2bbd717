"""Training step of a dense decoder-only transformer under TP/SP/PP/DP/ZeRO, as SymPy expressions.

Everything is built once with every quantity a free symbol (:mod:`symcost.symbols`); a
prediction, a sweep and a gradient are then the same lowered function on different arrays.

Execution model (per optimizer step, the critical pipeline stage):

* Each GPU holds ``ceil(L/p)`` layers (the largest stage) plus the embedding and the LM head
  with the loss (exact for ``p = 1``; for ``p > 1`` the first and last stage hold them).
* Per micro-batch a stage runs forward, backward, recomputation, Megatron TP all-reduces
  (or SP all-gather/reduce-scatter, equal volume in the ring model), pipeline p2p of the
  boundary activations (scatter/gather optimisation: ``1/t`` of them), and with ZeRO-3 the
  exposed part of the parameter all-gathers and gradient reduce-scatter.
* ``m = B/(d*b)`` micro-batches per step; 1F1B/interleaved bubble ``(p-1)/v`` micro-batch
  times (Narayanan et al. 2021, Sec. 2.2, bubble fraction ``(p-1)/(v*m)``).
* ZeRO 0-2 synchronise gradients once per step (all-reduce, or reduce-scatter plus the
  parameter all-gather of the distributed optimizer), overlapped with the last micro-batch's
  backward (and the next forward) when ``dp_overlap`` is 1; ZeRO-3 (FSDP) gathers parameters
  in every micro-batch's forward and backward and reduce-scatters gradients. Reduce-scatters
  and all-gathers run one per layer (FSDP units, distributed-optimizer buckets), each paying
  its ring latency; the ZeRO-0 gradient all-reduce is one bucketed collective.
* Adam step memory-bound on the locally held optimizer shard; a fixed per-step overhead.

MFU counts model FLOPs without recomputation; HFU adds the recomputed forward work
(Korthikanti et al. 2022, arXiv:2205.05198, Sec. 6; Chowdhery et al. 2022, PaLM, App. B).
Both use the dense peak of the compute dtype.
"""

from __future__ import annotations

import functools

import sympy as sp

from . import finetune as ft
from . import symbols as S
from .functions import CeilDiv, flag, replace_symbols, smax, smin
from .ops import attention as att
from .ops import collectives as coll
from .ops import elementwise as ew
from .ops import embedding as emb
from .ops.cost import Cost, select, sum_time
from .ops.gemm import gemm
from .ops.optimizer import adam_step

# ----------------------------------------------------------------------------- mode flags
IS_SELECTIVE = flag((S.recompute > sp.Rational(1, 2)) & (S.recompute < sp.Rational(3, 2)))
IS_FULL = flag(S.recompute > sp.Rational(3, 2))
IS_NONE = flag(S.recompute < sp.Rational(1, 2))
IS_ZERO3 = flag(S.zero_stage > sp.Rational(5, 2))
IS_PP = flag(S.pp > sp.Rational(3, 2))
IS_INTERLEAVED = flag(S.vpp > sp.Rational(3, 2))


# ----------------------------------------------------------------------------- shapes
def head_dim() -> sp.Expr:
    """Head dimension ``d = h/a`` (elements)."""
    return S.hidden / S.n_heads


def kv_heads_local() -> sp.Expr:
    """KV heads per TP rank: ``max(k, t)/t`` (KV heads are replicated when ``k < t``, as
    Megatron-LM and vLLM do; validation requires ``k % t == 0`` or ``t % k == 0``)."""
    return smax(S.n_kv_heads, S.tp) / S.tp


def tokens_micro() -> sp.Expr:
    """Tokens in one micro-batch: ``b*s``."""
    return S.micro_batch * S.seq_len


def tokens_sp() -> sp.Expr:
    """Tokens of one micro-batch held per TP rank outside the TP regions: ``b*s/t`` with SP."""
    return tokens_micro() * (1 - S.sp_on + S.sp_on / S.tp)


def gemm_peak() -> sp.Expr:
    """Dense peak FLOP/s of the GEMM dtype (fp8 when ``fp8`` is 1, else 16-bit)."""
    return sp.Piecewise((S.peak_flops_8, S.fp8 > sp.Rational(1, 2)), (S.peak_flops_16, True))


def micro_batches() -> sp.Expr:
    """Micro-batches per step per pipeline: ``m = B/(d*b)``."""
    return S.global_batch / (S.dp * S.micro_batch)


def layers_per_stage() -> sp.Expr:
    """Layers on the largest pipeline stage: ``ceil(L/p)`` (uneven splits put the extra layers
    on the first stages)."""
    return CeilDiv(S.n_layers, S.pp)


# ----------------------------------------------------------------------------- parameters
def params_layer() -> sp.Expr:
    """Parameters of one transformer layer (unsharded).

    ``h*d*(a+2k) + a*d*h`` attention, ``(2+g)*h*f`` MLP, two norms of ``h*(1+norm_bias)``, and with
    biases ``(a+2k)*d + h`` (attention) and ``(1+g)*f + h`` (MLP). For GPT (``k=a``, ``f=4h``,
    biases) this is ``12h^2 + 13h`` (Narayanan et al. 2021, Sec. 5.1).
    """
    h, a, k, f, g, bias = S.hidden, S.n_heads, S.n_kv_heads, S.ffn_hidden, S.gated_mlp, S.has_bias
    d = head_dim()
    attn = h * d * (a + 2 * k) + a * d * h + bias * ((a + 2 * k) * d + h)
    mlp = (2 + g) * h * f + bias * ((1 + g) * f + h)
    norms = 2 * h * (1 + S.norm_bias)
    return attn + mlp + norms


def params_total() -> sp.Expr:
    """All parameters: layers, embedding (and an untied LM head), learned positions, final norm."""
    h, V = S.hidden, S.vocab
    return (S.n_layers * params_layer() + V * h * (2 - S.tied_embed)
            + S.learned_pos * S.max_seq_len * h + h * (1 + S.norm_bias))


def params_stage() -> sp.Expr:
    """Parameters of the first (largest) pipeline stage: ``ceil(L/p)`` layers, the embedding and
    positions; with ``p = 1`` also the untied LM head and final norm."""
    h, V = S.hidden, S.vocab
    last = V * h * (1 - S.tied_embed) + h * (1 + S.norm_bias)
    return (layers_per_stage() * params_layer() + V * h + S.learned_pos * S.max_seq_len * h
            + (1 - IS_PP) * last)


def params_gpu() -> sp.Expr:
    """Parameters per GPU before ZeRO sharding: ``params_stage / t``."""
    return params_stage() / S.tp


# ----------------------------------------------------------------------------- layer costs
def layer_forward_compute() -> dict[str, Cost]:
    """Forward compute of one layer for one micro-batch on one GPU, by operator.

    Returns:
        Mapping operator name -> :class:`Cost` (FLOP, bytes, s).
    """
    t, h, f, g = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp
    d = head_dim()
    n = tokens_micro()
    heads = S.n_heads / t
    kv = kv_heads_local()
    peak = gemm_peak()
    flash = att.attention_flash(S.micro_batch, S.seq_len, heads, kv, d, S.peak_flops_16)
    unfused = att.attention_unfused(S.micro_batch, S.seq_len, heads, kv, d, S.peak_flops_16,
                                    S.has_dropout)
    return {
        "qkv_proj": gemm(n, (heads + 2 * kv) * d, h, peak),
        "attention": select(S.flash_attn > sp.Rational(1, 2), flash, unfused),
        "out_proj": gemm(n, h, heads * d, peak),
        "mlp_up": gemm(n, (1 + g) * f / t, h, peak),
        "mlp_down": gemm(n, h, f / t, peak),
        "activation": ew.activation(n * f / t, g),
        "norms": ew.norm(tokens_sp() * h).scale(2),
        "residual_dropout": ew.residual_dropout(tokens_sp() * h, S.has_dropout).scale(2),
        "fp8_cast": fp8_cast_layer(),
    }


def fp8_cast_layer() -> Cost:
    """FP8 quantisation traffic of one layer's activations per micro-batch (zero unless ``fp8``).

    Transformer Engine casts each of the four linear layers' 16-bit input activations to fp8
    before the GEMM (read 2 bytes, write 1 byte per element, amax fused); the backward casts
    the output gradients the same way (counted by :func:`layer_backward_compute` as twice the
    forward). Weights are cast once per step, see :func:`fp8_weight_cast_bytes_layer`.
    Memory-bound at achieved HBM bandwidth.

    References:
        Micikevicius et al. 2022, "FP8 formats for deep learning" (arXiv:2209.05433), Sec. 4
        (per-tensor scaling and casts); NVIDIA Transformer Engine documentation, "Using FP8
        with Transformer Engine" (delayed scaling, cast kernels).
    """
    t, h, f = S.tp, S.hidden, S.ffn_hidden
    n = tokens_micro()
    activations = n * (h + S.n_heads / t * head_dim() + h + f / t)
    nbytes = S.fp8 * 3 * activations
    return Cost(sp.Integer(0), nbytes, nbytes / (S.hbm_bw * S.eff_hbm))


def fp8_weight_cast_bytes_layer() -> sp.Expr:
    """Bytes one layer moves per optimizer step to cast its linear weights to fp8 (read 16-bit,
    write fp8 and its transpose for the backward): Transformer Engine casts weights at the first
    micro-batch of a step and reuses them (``is_first_microbatch``), also in recomputation."""
    t, h, f, g = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp
    d = head_dim()
    heads, kv = S.n_heads / t, kv_heads_local()
    weights = h * (heads + 2 * kv) * d + heads * d * h + (2 + g) * h * f / t
    return S.fp8 * 4 * weights


def layer_backward_compute() -> dict[str, Cost]:
    """Backward compute of one layer for one micro-batch: GEMMs and memory-bound ops twice the
    forward (input and weight gradients), attention per its kernel."""
    fwd = layer_forward_compute()
    t = S.tp
    d = head_dim()
    flash_b = att.attention_flash_backward(S.micro_batch, S.seq_len, S.n_heads / t,
                                           kv_heads_local(), d, S.peak_flops_16)
    out = {k: v.scale(2) for k, v in fwd.items() if k != "attention"}
    out["attention"] = select(S.flash_attn > sp.Rational(1, 2), flash_b,
                               att.attention_unfused_backward(unfused_attention_forward()))
    return out


def unfused_attention_forward() -> Cost:
    """Forward cost of the unfused attention core of one layer and micro-batch (scores,
    softmax, dropout, AV): what selective recomputation recomputes."""
    return att.attention_unfused(S.micro_batch, S.seq_len, S.n_heads / S.tp, kv_heads_local(),
                                 head_dim(), S.peak_flops_16, S.has_dropout)


def layer_recompute() -> Cost:
    """Recomputed forward work of one layer in the backward pass.

    Full: the whole layer forward. Selective (Korthikanti et al. 2022, Sec. 5): the core
    attention (scores, softmax, dropout, AV) — nothing extra with FlashAttention, which keeps
    no ``s x s`` tensor. None: nothing.
    """
    fwd = sum(layer_forward_compute().values(), start=Cost(0, 0, 0))
    selective = unfused_attention_forward().scale(1 - S.flash_attn)
    return Cost(*(IS_FULL * x + IS_SELECTIVE * y for x, y in zip(fwd, selective)))


def tp_comm_layer_forward() -> Cost:
    """Megatron TP communication of one layer's forward: two all-reduces of ``b*s*h`` 16-bit
    activations (with SP: two all-gathers and two reduce-scatters, the same ring volume).

    References:
        Shoeybi et al. 2019, Sec. 3 (f/g operators); Korthikanti et al. 2022, Sec. 4.2.2.
    """
    return coll.all_reduce(tokens_micro() * S.hidden * S.BYTES_ACT, S.tp).scale(2)


# ----------------------------------------------------------------------------- activations
def activation_bytes_layer() -> sp.Expr:
    """Activation memory one layer keeps for one micro-batch (bytes), by recompute mode.

    Generalises Korthikanti et al. 2022, Table 2, to GQA (``k`` KV heads), any FFN size ``f``,
    SwiGLU (``g``), dropout on/off and FlashAttention; with MHA, ``f = 4h``, GeLU and dropout it
    reduces to Table 2 exactly:

    * none: ``s*b*h*(10 + 24/t + 5*a*s/(h*t))``; with SP ``s*b*h/t*(34 + 5*a*s/h)``
    * selective: ``s*b*h*(10 + 24/t)``; with SP ``34*s*b*h/t``
    * full: ``2*s*b*h`` (layer input only; ``/t`` with SP).

    Terms (16-bit unless noted): replicated across TP (split by SP): QKV input 2, LN inputs 4,
    MLP input 2, dropout masks 1+1 (uint8); split by TP: Q ``2sbh``, K and V ``4*s*b*k*d``,
    output-projection input 2, activation input ``2*s*b*f*(1+g)``, down-projection input
    ``2*s*b*f``; score tensors ``a*s^2*b*(2 + 3*dropout)`` (softmax output, mask, dropout
    output); FlashAttention keeps only the fp32 log-sum-exp ``4*a*s*b``.
    """
    t, h, f, g, drop = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp, S.has_dropout
    b, s, a = S.micro_batch, S.seq_len, S.n_heads
    d = head_dim()
    sbh = tokens_micro() * h
    replicated = tokens_sp() * h * (8 + 2 * drop)
    split = (2 * sbh + 2 * sbh + 2 * s * b * f * (2 + g)) / t + 4 * s * b * d * kv_heads_local()
    scores = a * s**2 * b * (2 + 3 * drop) / t
    lse = 4 * a * s * b / t
    score_mem = sp.Piecewise((lse, S.flash_attn > sp.Rational(1, 2)), (scores * IS_NONE, True))
    full = 2 * tokens_sp() * h
    return sp.Piecewise((full, S.recompute > sp.Rational(3, 2)),
                        (replicated + split + score_mem, True))


def activation_bytes_layer_no_recompute() -> sp.Expr:
    """Activation bytes of one layer without recomputation (the transient working set a fully
    recomputed layer rebuilds during its backward)."""
    return activation_bytes_layer().subs(S.recompute, 0)


def microbatches_in_flight() -> sp.Expr:
    """Micro-batches whose activations the first pipeline stage holds at peak: ``min(m, p)``
    for 1F1B, times ``1 + (p-1)/(p*v)`` for the interleaved schedule (Korthikanti et al. 2022,
    Sec. 4.2.3)."""
    p, v = S.pp, S.vpp
    interleave = 1 + IS_INTERLEAVED * (p - 1) / (p * v)
    return smin(micro_batches(), p) * interleave


# ----------------------------------------------------------------------------- the model
@functools.lru_cache(maxsize=1)
def training_expressions() -> dict[str, sp.Expr]:
    """All training outputs as SymPy expressions over the symbols of :mod:`symcost.symbols`.

    Returns:
        Mapping name -> expression. Times in s (``step_time`` and its breakdown
        ``time_forward``, ``time_backward``, ``time_recompute``, ``time_tp_comm``,
        ``time_pp_p2p``, ``time_pp_bubble``, ``time_dp_comm``, ``time_optimizer``,
        ``time_overhead``), ``tokens_per_s`` (tokens/s, whole cluster), ``mfu`` and ``hfu``
        (fractions), ``flops_model`` and ``flops_hardware`` (FLOP per step, whole cluster),
        memory per GPU in bytes (``mem_weights``, ``mem_gradients``, ``mem_optimizer``,
        ``mem_activations``, ``mem_total``, ``mem_usable``, ``mem_headroom``; it fits when
        headroom >= 0),
        ``params_total`` and ``num_gpus``.
    """
    t, p, d, v = S.tp, S.pp, S.dp, S.vpp
    z = S.zero_stage
    m = micro_batches()
    Ls = layers_per_stage()
    n = tokens_micro()
    peak = gemm_peak()
    ovh = S.t_layer_overhead

    # --- per micro-batch, per stage
    fwd_layer = sum_time(layer_forward_compute()) + ovh
    bwd_layer = sum_time(layer_backward_compute()) + 2 * ovh
    rec_layer = layer_recompute().time + IS_FULL * ovh
    # [finetune] LoRA/QLoRA (symcost.finetune): frozen base skips weight-gradient GEMMs;
    # adapters' GEMMs; QLoRA dequantizes NF4 weights in every pass
    ft_fwd = ft.adapter_compute_layer(n, peak).time + ft.dequant_time_layer()
    fwd_layer += ft_fwd
    bwd_layer += (2 * ft.adapter_compute_layer(n, peak).time + ft.dequant_time_layer()
                  - ft.frozen_wgrad_time(layer_forward_compute()))
    rec_layer += IS_FULL * ft_fwd
    tp_layer = tp_comm_layer_forward().time * (2 + IS_FULL)

    vocab_local = S.vocab / t
    head_fwd = (emb.lm_head(n, S.hidden, vocab_local, peak).time
                + emb.cross_entropy(n, vocab_local).time
                + emb.embedding_lookup(n, S.hidden).time)
    head_bwd = ((2 - ft.IS_ADAPTER) * emb.lm_head(n, S.hidden, vocab_local, peak).time  # [finetune]
                + emb.embedding_lookup(n, S.hidden).time)

    t_f = Ls * fwd_layer + head_fwd
    t_b = Ls * bwd_layer + head_bwd
    t_r = Ls * rec_layer
    t_tp = Ls * tp_layer
    intra_pp = t * d * p <= S.gpus_per_node
    t_p2p = IS_PP * v * 2 * coll.p2p(n * S.hidden * S.BYTES_ACT / t, intra_pp).time

    # --- data parallel: ZeRO-3 per micro-batch, ZeRO 0-2 per step
    # [finetune] gradients and their sync cover the trained parameters only (LoRA adapters)
    train_params = ft.trainable_params(params_gpu(), Ls)
    grad_bytes = S.BYTES_PARAM * train_params
    weight_bytes = ft.base_weight_bytes(params_gpu(), Ls)
    ar = coll.all_reduce(grad_bytes, d, t).time
    # ZeRO-3/FSDP gathers and reduce-scatters one layer at a time (one FSDP unit per layer):
    # the stage's bytes split over its layers, each collective paying its own ring latency
    ag = Ls * coll.all_gather(weight_bytes / Ls, d, t).time
    rs = Ls * coll.reduce_scatter(grad_bytes / Ls, d, t).time
    ag_train = Ls * coll.all_gather(grad_bytes / Ls, d, t).time
    ov = S.dp_overlap
    z3_exposed = (ov * (smax(ag - t_f, 0) + ag / Ls + smax(ag + rs - t_b - t_r, 0))
                  + (1 - ov) * (2 * ag + rs))
    # [finetune] parameter offload: the partition comes over the host link in every pass
    t_z3 = IS_ZERO3 * z3_exposed + ft.offload_param_fetch_time(weight_bytes / d, 2 + IS_FULL)
    is_z12 = flag((z > sp.Rational(1, 2)) & (z < sp.Rational(5, 2)))
    is_z0 = flag(z < sp.Rational(1, 2))
    grad_sync = is_z0 * ar + is_z12 * rs
    param_gather = is_z12 * ag_train
    dp_step = (ov * (smax(grad_sync - t_b - t_r, 0) + smax(param_gather - t_f, 0))
               + (1 - ov) * (grad_sync + param_gather))

    t_mb = t_f + t_b + t_r + t_tp + t_p2p + t_z3
    bubble = (p - 1) / v * t_mb

    shard_opt = sp.Piecewise((d, z > sp.Rational(1, 2)), (1, True))
    shard_grad = sp.Piecewise((d, z > sp.Rational(3, 2)), (1, True))
    shard_w = sp.Piecewise((d, z > sp.Rational(5, 2)), (1, True))
    # [finetune] Adam over the trained partition, on the GPU or (offload) on the host CPUs
    t_opt = ((1 - ft.IS_OFFLOAD) * adam_step(train_params / shard_opt).time
             + ft.offload_optimizer_time(train_params / shard_opt, t * p * d, m * (t_f + t_b)))

    out: dict[str, sp.Expr] = {
        "time_forward": m * t_f + Ls * fp8_weight_cast_bytes_layer() / (S.hbm_bw * S.eff_hbm),
        "time_backward": m * t_b,
        "time_recompute": m * t_r,
        "time_tp_comm": m * t_tp,
        "time_pp_p2p": m * t_p2p,
        "time_pp_bubble": bubble,
        "time_dp_comm": m * t_z3 + dp_step,
        "time_optimizer": t_opt,
        "time_overhead": S.t_step_overhead,
    }
    step = sp.Add(*out.values())
    out["step_time"] = step

    # --- FLOPs, throughput, utilisation
    s, h, a, k, f, g = S.seq_len, S.hidden, S.n_heads, S.n_kv_heads, S.ffn_hidden, S.gated_mlp
    dh = head_dim()
    layer_matmul = 2 * s * (h * dh * (a + 2 * k) + a * dh * h + (2 + g) * h * f)
    layer_attn = 4 * s**2 * a * dh
    head_flops = 2 * s * h * S.vocab
    B = S.global_batch
    flops_model = 3 * B * (S.n_layers * (layer_matmul + layer_attn) + head_flops)
    flops_recompute = B * S.n_layers * (IS_FULL * (layer_matmul + layer_attn)
                                        + IS_SELECTIVE * (1 - S.flash_attn) * layer_attn)
    n_gpus = t * p * d
    out["flops_model"] = flops_model
    out["flops_hardware"] = flops_model + flops_recompute
    out["tokens_per_s"] = B * s / step
    out["mfu"] = flops_model / (step * n_gpus * peak)
    out["hfu"] = (flops_model + flops_recompute) / (step * n_gpus * peak)

    # --- memory per GPU (first pipeline stage)
    psi = params_gpu()
    zero3_buffer = IS_ZERO3 * 2 * S.BYTES_PARAM * params_layer() / t
    # [finetune] frozen/NF4 base weights; gradients and optimizer of the trained parameters;
    # offload moves the optimizer (and gradient) partition, and the parameter partition, to host
    out["mem_weights"] = (1 - ft.IS_OFFLOAD_PARAMS) * weight_bytes / shard_w + zero3_buffer
    out["mem_gradients"] = (1 - ft.IS_OFFLOAD) * S.BYTES_PARAM * train_params / shard_grad
    out["mem_optimizer"] = (1 - ft.IS_OFFLOAD) * S.BYTES_OPTIMIZER * train_params / shard_opt
    logits = (1 - IS_PP) * S.BYTES_LOGIT * n * vocab_local
    out["mem_activations"] = (Ls * activation_bytes_layer() * microbatches_in_flight()
                              + IS_FULL * activation_bytes_layer_no_recompute() + logits)
    out["mem_total"] = (out["mem_weights"] + out["mem_gradients"] + out["mem_optimizer"]
                        + out["mem_activations"])
    out["mem_usable"] = S.hbm_cap - S.mem_reserved
    # headroom, not a Piecewise flag: a relational over Piecewise terms makes SymPy fold every
    # branch combination into the condition (exponential blow-up); ``fits`` is headroom >= 0.
    out["mem_headroom"] = out["mem_usable"] - out["mem_total"]
    out["params_total"] = params_total()
    out["num_gpus"] = n_gpus
    # [finetune] the intra-node link of the chosen topology (NVLink, bridges, PCIe/host-staged)
    memo: dict[sp.Basic, sp.Expr] = {}
    link = {S.intra_bw: ft.intra_bandwidth()}
    return {k: replace_symbols(sp.sympify(v), link, memo) for k, v in out.items()}


#: names of the step-time breakdown terms, in order; they sum to ``step_time``.
BREAKDOWN = ("time_forward", "time_backward", "time_recompute", "time_tp_comm", "time_pp_p2p",
             "time_pp_bubble", "time_dp_comm", "time_optimizer", "time_overhead")
#: names of the memory terms; they sum to ``mem_total``.
MEMORY = ("mem_weights", "mem_gradients", "mem_optimizer", "mem_activations")
