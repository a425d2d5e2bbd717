"""LoRA / QLoRA fine-tuning, ZeRO-Offload and host-link topologies, as SymPy expressions.

Pure functions over the symbols of :mod:`symcost.symbols` (the fine-tuning block); the
training model (:func:`symcost.training.training_expressions`) adds their terms. Mode flags
are numeric symbols chosen with ``Piecewise`` (no Python ``if``), so sweeps and gradients
work across ``finetune``, ``offload`` and ``intra_link``.

* **LoRA** (Hu et al. 2021, arXiv:2106.09685, Sec. 4.1): each targeted projection
  ``W[out, in]`` gets ``B[out, r] A[r, in]``; only the adapters are trained. Frozen weights
  still cost the forward GEMM and the input-gradient GEMM of the backward, not the
  weight-gradient GEMM; gradients, optimizer states and the data-parallel gradient sync
  cover the adapters only.
* **QLoRA** (Dettmers et al. 2023, arXiv:2305.14314, Sec. 3): the frozen linear weights are
  stored as NF4 with double quantization (:data:`symcost.symbols.BYTES_NF4` bytes per
  weight) and dequantized to 16 bits before every use (forward, input-gradient backward and
  recomputation): a memory-bound pass reading the NF4 bytes and writing 16-bit ones. Paged
  optimizer states (NVIDIA unified memory) count as GPU memory; they page out only under
  pressure, which the model does not represent.
* **ZeRO-Offload** (Ren et al. 2021, "ZeRO-Offload", USENIX ATC, Sec. 4) and parameter
  offload (Rajbhandari et al. 2021, "ZeRO-Infinity", SC'21, Sec. 5): the optimizer partition
  (fp32 master weights, Adam moments, fp32 gradients) lives in host memory; each step copies
  the gradient partition to the host (16-bit), runs CPU Adam and copies the updated 16-bit
  parameters back, not overlapped with compute (DeepSpeed's default, no delayed parameter
  update). With ``optimizer+params`` (ZeRO-3) the parameter partition also lives in host
  memory and is fetched over the host link for the forward, the backward and any
  recomputation of every micro-batch. CPU Adam runs at ``cpu_adam_rate`` parameters/s for
  the whole node; the processes of one node share it.
* **Topology**: ``intra_link`` replaces the hardware's intra-node bandwidth (see
  :func:`intra_bandwidth`).
"""

from __future__ import annotations

import sympy as sp

from . import symbols as S
from .functions import flag, smax, smin
from .ops.cost import Cost
from .ops.gemm import gemm

__all__ = ["IS_ADAPTER", "IS_QLORA", "IS_OFFLOAD", "IS_OFFLOAD_PARAMS", "adapter_compute_layer",
           "base_weight_bytes", "dequant_time_layer", "frozen_wgrad_time", "intra_bandwidth",
           "linear_params_layer", "lora_dims_layer", "offload_optimizer_time",
           "offload_param_fetch_time", "trainable_params"]

HALF = sp.Rational(1, 2)
#: 1 for LoRA and QLoRA (frozen base, trained adapters).
IS_ADAPTER = flag(S.finetune > HALF)
#: 1 for QLoRA (NF4 base).
IS_QLORA = flag(S.finetune > 3 * HALF)
#: 1 when the optimizer partition is in host memory.
IS_OFFLOAD = flag(S.offload > HALF)
#: 1 when the parameter partition is in host memory too.
IS_OFFLOAD_PARAMS = flag(S.offload > 3 * HALF)


# ----------------------------------------------------------------------------- topology
def intra_bandwidth() -> sp.Expr:
    """Intra-node bandwidth per GPU per direction (bytes/s) for the chosen ``intra_link``;
    it replaces ``intra_bw`` in every collective (which still applies ``eff_intra``).

    * 0 (default), 1 (``nvlink``): the hardware's intra-node link ``intra_bw``.
    * 3 (``pcie``): with peer-to-peer, the host link ``host_bw`` (GPU-to-GPU DMA through the
      PCIe switch or root complex). Without peer-to-peer (GeForce), NCCL's SHM transport
      copies every chunk into pinned host memory and the next GPU reads it back
      (NCCL documentation, "Environment Variables": NCCL_P2P_DISABLE, NCCL_SHM_DISABLE;
      "Troubleshooting": PCI P2P): the node's host link bandwidth is shared by the
      ``gpus_per_node`` GPUs of the ring and halved for the two copies:
      ``eff_host * host_bw / (2 * gpus_per_node)``.
    * 2 (``nvlink-bridge``): GPU pairs joined by bridges (``bridge_bw``), PCIe between pairs,
      used hierarchically: each pair reduces over its bridge, then the ``G/2`` pair leaders
      (``G = gpus_per_node``) run the PCIe ring, whose per-GPU volume factor is
      ``(G/2-1)/(G/2)`` instead of ``(G-1)/G``. At the PCIe rate above the bridges therefore
      act as a bandwidth gain of ``(G-1)/(G-2)`` (7/6 for 8 GPUs); with ``G <= 2`` the whole
      node is one pair and ``bridge_bw`` applies.

    References:
        NVIDIA NCCL documentation (transports: P2P, SHM); Zhang et al. 2023
        (arXiv:2311.03687v2), Sec. III (RTX 4090 without peer-to-peer, RTX 3090 bridges).
    """
    G = S.gpus_per_node
    staged = S.eff_host * S.host_bw / (2 * G)
    pcie = sp.Piecewise((S.host_bw, S.p2p > HALF), (staged, True))
    # G > 2 guarded twice (no division by zero in the branch not taken)
    gain = (G - 1) / smax(G - 2, 1)
    bridge = sp.Piecewise((smin(S.bridge_bw, pcie * gain), G > 5 * HALF), (S.bridge_bw, True))
    return sp.Piecewise((S.intra_bw, S.intra_link < 3 * HALF),
                        (bridge, S.intra_link < 5 * HALF), (pcie, True))


# ----------------------------------------------------------------------------- LoRA shapes
def linear_params_layer() -> sp.Expr:
    """Weights of one layer's linear projections on one TP rank (elements): QKV, output
    projection and the ``2+g`` MLP matrices (what QLoRA quantizes)."""
    t, h, f, g = S.tp, S.hidden, S.ffn_hidden, S.gated_mlp
    d = S.hidden / S.n_heads
    kv = S.n_kv_heads / t  # per rank (replication for k < t ignored: adapters are tiny)
    return h * (S.n_heads / t + 2 * kv) * d + S.n_heads / t * d * h + (2 + g) * h * f / t


def lora_dims_layer() -> tuple[sp.Expr, sp.Expr]:
    """``(sum of inputs, sum of outputs)`` of the targeted projections of one layer on one TP
    rank (elements): q ``h -> a*d``, k and v ``h -> k*d``, o ``a*d -> h``, gate and up
    ``h -> f``, down ``f -> h`` (the TP-split side divided by ``t``); the fused adapters read
    their input once: qkv ``h -> (a+2k)*d``, fc1 ``h -> (1+g)*f`` (Megatron-Core
    ``linear_qkv``, ``linear_fc1``; Megatron-Bridge ``peft/lora.py`` wraps the fused linear
    with one ``A: h -> r``, ``B: r -> out``). The gate target counts only for gated MLPs."""
    t, h, f = S.tp, S.hidden, S.ffn_hidden
    d = S.hidden / S.n_heads
    qo, kv = S.n_heads * d / t, S.n_kv_heads * d / t
    gate = S.lora_gate * S.gated_mlp
    ins = (S.lora_q + S.lora_k + S.lora_v + gate + S.lora_up + S.lora_qkv + S.lora_fc1) * h \
        + S.lora_o * qo + S.lora_down * f / t
    outs = S.lora_q * qo + (S.lora_k + S.lora_v) * kv + S.lora_o * h \
        + (gate + S.lora_up) * f / t + S.lora_down * h \
        + S.lora_qkv * (qo + 2 * kv) + S.lora_fc1 * (1 + S.gated_mlp) * f / t
    return ins, outs


def trainable_params(params_gpu: sp.Expr, layers: sp.Expr) -> sp.Expr:
    """Trained parameters per GPU before ZeRO sharding: all of ``params_gpu`` for full
    training, ``layers * r * (sum in + sum out)`` adapter weights for LoRA/QLoRA.

    Args:
        params_gpu: the model's parameters per GPU (elements).
        layers: layers held by the GPU (largest pipeline stage).
    """
    ins, outs = lora_dims_layer()
    adapters = layers * S.lora_rank * (ins + outs)
    return (1 - IS_ADAPTER) * params_gpu + IS_ADAPTER * adapters


def base_weight_bytes(params_gpu: sp.Expr, layers: sp.Expr) -> sp.Expr:
    """Bytes of the model's own weights per GPU before ZeRO sharding: 16-bit, except QLoRA's
    linear layer weights at :data:`~symcost.symbols.BYTES_NF4` bytes (embedding, norms and LM
    head stay 16-bit, as in bitsandbytes); LoRA adapters add ``2 * trainable`` bytes."""
    lin = layers * linear_params_layer()
    base = S.BYTES_PARAM * params_gpu - IS_QLORA * (S.BYTES_PARAM - S.BYTES_NF4) * lin
    return base + IS_ADAPTER * S.BYTES_PARAM * trainable_params(params_gpu, layers)


# ----------------------------------------------------------------------------- compute
def frozen_wgrad_time(fwd: dict[str, Cost]) -> sp.Expr:
    """Time (s) of one layer's weight-gradient GEMMs that a frozen base skips: each equals its
    forward GEMM (``qkv_proj``, ``out_proj``, ``mlp_up``, ``mlp_down``), times ``IS_ADAPTER``.

    Args:
        fwd: the layer's forward costs (:func:`symcost.training.layer_forward_compute`).
    """
    names = ("qkv_proj", "out_proj", "mlp_up", "mlp_down")
    return IS_ADAPTER * sp.Add(*(fwd[n].time for n in names))


def adapter_compute_layer(tokens: sp.Expr, peak: sp.Expr) -> Cost:
    """Forward cost of one layer's LoRA adapters for ``tokens`` tokens: ``x A^T`` (``tokens x
    r x sum in``) and ``(x A^T) B^T`` (``tokens x sum out x r``), zero for full training. The
    backward costs twice this (input and adapter-weight gradients)."""
    ins, outs = lora_dims_layer()
    r = S.lora_rank
    c = gemm(tokens, r, ins, peak) + gemm(tokens, outs, r, peak)
    return c.scale(IS_ADAPTER)


def dequant_time_layer() -> sp.Expr:
    """Time (s) to dequantize one layer's NF4 weights to 16 bits once (QLoRA only): read
    ``BYTES_NF4`` and write 2 bytes per weight at achieved HBM bandwidth, plus a fixed
    ``t_dequant_call`` (calibrated) per quantized linear module, ``4 + 2 + g`` of them (the
    separate q, k, v and o projections and the ``2 + g`` MLP matrices of the Hugging Face
    Llama-style modules bitsandbytes replaces). Paid in the forward, the input-gradient
    backward and a full recomputation.

    Why a fixed part: bitsandbytes' ``dequantize_4bit`` (called by ``MatMul4Bit`` in the
    forward and again in the backward, ``bitsandbytes/autograd/_functions.py``) dequantizes
    the double-quantized absmax, allocates the 16-bit weight and launches its kernel from
    Python for every module and micro-batch; at one sequence per GPU these calls, not their
    bytes, dominate (Zhang et al. 2023, arXiv:2311.03687, Sec. V: QLoRA about 2x slower than
    LoRA "primarily due to the overhead associated with quantization and de-quantization")."""
    nbytes = linear_params_layer() * (S.BYTES_NF4 + S.BYTES_PARAM)
    calls = 4 + 2 + S.gated_mlp
    return IS_QLORA * (nbytes / (S.hbm_bw * S.eff_hbm) + calls * S.t_dequant_call)


# ----------------------------------------------------------------------------- offload
def ranks_per_node(num_gpus: sp.Expr) -> sp.Expr:
    """GPU processes sharing one node's CPUs and host memory: ``min(num_gpus, gpus_per_node)``."""
    return smin(num_gpus, S.gpus_per_node)


def offload_optimizer_time(trainable_local: sp.Expr, num_gpus: sp.Expr,
                           hide: sp.Expr = sp.Integer(0)) -> sp.Expr:
    """Per-step time (s) of the offloaded optimizer on one GPU: copy the 16-bit gradient
    partition to the host, CPU Adam over the partition (the node's ``cpu_adam_rate`` shared by
    its ranks), copy the 16-bit parameters back; zero without offload.

    With ``dp_overlap`` the copies overlap compute (ZeRO-Offload streams gradients to the host
    during the backward and parameters back during the next forward; Ren et al. 2021,
    Sec. 4.2): only the part longer than ``hide`` is exposed. CPU Adam is never hidden (no
    delayed parameter update).

    Args:
        trainable_local: trained parameters this GPU's optimizer partition holds (elements).
        num_gpus: GPUs of the job.
        hide: compute time (s) the copies can overlap (forward and backward of the step).
    """
    copies = 2 * S.BYTES_PARAM * trainable_local / (S.eff_host * S.host_bw)
    exposed = S.dp_overlap * smax(copies - hide, 0) + (1 - S.dp_overlap) * copies
    cpu = trainable_local * ranks_per_node(num_gpus) / S.cpu_adam_rate
    return IS_OFFLOAD * (exposed + cpu)


def offload_param_fetch_time(weight_bytes_local: sp.Expr, passes: sp.Expr) -> sp.Expr:
    """Per-micro-batch time (s) to fetch this GPU's parameter partition from host memory
    ``passes`` times (forward, backward, and recomputation), with parameter offload only."""
    return IS_OFFLOAD_PARAMS * passes * weight_bytes_local / (S.eff_host * S.host_bw)
