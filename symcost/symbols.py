"""Every symbol of the cost model, declared once, with its assumptions, unit and meaning.

Symbols fall into kinds:

* ``hardware``: what a datasheet gives (bound by :mod:`hwspecs`).
* ``efficiency``: achieved fractions of peak and fixed overheads (bound by a calibration
  parameter file, see :mod:`symcost.params`).
* ``model``: the transformer's shape and architecture flags (bound by
  :class:`symcost.models.ModelSpec`).
* ``parallel``: parallel degrees, batch sizes and mode flags (bound by
  :class:`symcost.config.TrainingConfig`).

Mode flags are numeric symbols (0/1, or 0/1/2/3) so one expression serves every mode, and
sweeps and gradients work across them; formulas choose branches with ``Piecewise`` on ranges
(never ``Eq`` on floats).

Units are base units: FLOP, bytes, seconds, FLOP/s, bytes/s. Conversion from datasheet units
happens only in :mod:`hwspecs`.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp


@dataclass(frozen=True)
class SymbolInfo:
    """Metadata of one model symbol.

    Attributes:
        symbol: the SymPy symbol.
        kind: one of ``hardware``, ``efficiency``, ``model``, ``parallel``.
        unit: base unit (``FLOP/s``, ``bytes``, ``bytes/s``, ``s``, ``1`` for counts/flags).
        description: what the symbol means.
        discrete: True when the quantity only takes integer values (never differentiated).
    """

    symbol: sp.Symbol
    kind: str
    unit: str
    description: str
    discrete: bool


REGISTRY: dict[str, SymbolInfo] = {}


def _declare(name: str, kind: str, unit: str, description: str, *, integer: bool = False,
             nonneg: bool = False) -> sp.Symbol:
    # Integer-valued quantities are declared real (not integer=True) so that SymPy never
    # rewrites floor/ceiling or integer powers in ways the JAX lowering cannot follow; the
    # ``discrete`` flag records that they are integers.
    if nonneg:
        sym = sp.Symbol(name, nonnegative=True, real=True)
    else:
        sym = sp.Symbol(name, positive=True, real=True)
    REGISTRY[name] = SymbolInfo(sym, kind, unit, description, integer)
    return sym


# --- hardware -------------------------------------------------------------------------
peak_flops_16 = _declare("peak_flops_16", "hardware", "FLOP/s",
                         "dense peak of 16-bit (bf16/fp16) tensor-core math per GPU")
peak_flops_8 = _declare("peak_flops_8", "hardware", "FLOP/s",
                        "dense peak of fp8 tensor-core math per GPU (= peak_flops_16 where fp8 is absent)")
peak_flops_4 = _declare("peak_flops_4", "hardware", "FLOP/s",
                        "dense peak of fp4 (NVFP4) tensor-core math per GPU (= peak_flops_8 where "
                        "fp4 is absent)")
peak_exp = _declare("peak_exp", "hardware", "1/s",
                    "peak rate of 32-bit exponentials (special function units, MUFU.EX2) per GPU:"
                    " the softmax of a FlashAttention kernel, one per score element")
peak_flops_fp32 = _declare("peak_flops_fp32", "hardware", "FLOP/s",
                           "dense peak of non-tensor FP32 math (CUDA cores) per GPU, an FMA "
                           "counted as two FLOP (= peak_flops_16 where not stated)")
matmul_ceiling = _declare("matmul_ceiling", "hardware", "1",
                          "fraction of the peaks the GPU sustains at best: its measured maximum "
                          "achievable bf16 matmul rate over the bf16 peak "
                          "(HardwareSpec.matmul_ceiling); compute times divide by "
                          "peak * matmul_ceiling * efficiency")
matmul_ceiling_fp8 = _declare("matmul_ceiling_fp8", "hardware", "1",
                              "fraction of the fp8 peak the GPU sustains at best with fp8 "
                              "operands: its measured maximum achievable fp8 matmul rate over "
                              "the fp8 peak (HardwareSpec.matmul_ceiling_fp8; matmul_ceiling "
                              "where not measured); fp8 GEMMs run at peak_flops_8 * "
                              "matmul_ceiling_fp8 * efficiency")
async_mma = _declare("async_mma", "hardware", "1",
                     "1 when the GPU has asynchronous warpgroup matrix multiplies (Hopper, "
                     "Blackwell), so attention kernels can overlap the softmax with the matmuls;"
                     " 0 before (hwspecs.ASYNC_MMA_GENERATIONS)", integer=True, nonneg=True)
hbm_bw = _declare("hbm_bw", "hardware", "bytes/s", "HBM bandwidth per GPU")
hbm_cap = _declare("hbm_cap", "hardware", "bytes", "HBM capacity per GPU")
intra_bw = _declare("intra_bw", "hardware", "bytes/s",
                    "intra-node (NVLink) bandwidth per GPU per direction")
intra_lat = _declare("intra_lat", "hardware", "s", "intra-node link latency per message step")
inter_bw = _declare("inter_bw", "hardware", "bytes/s",
                    "inter-node network bandwidth per GPU per direction (its NIC share)")
inter_lat = _declare("inter_lat", "hardware", "s", "inter-node network latency per message step")
gpus_per_node = _declare("gpus_per_node", "hardware", "1", "GPUs per node (NVLink domain)",
                         integer=True)

# --- efficiencies and overheads (calibrated) -------------------------------------------
eff_gemm = _declare("eff_gemm", "efficiency", "1",
                    "achieved fraction of dense peak for large GEMMs")
eff_attn = _declare("eff_attn", "efficiency", "1",
                    "achieved fraction of dense peak inside attention kernels (FlashAttention)")
eff_hbm = _declare("eff_hbm", "efficiency", "1", "achieved fraction of HBM bandwidth")
eff_intra = _declare("eff_intra", "efficiency", "1",
                     "achieved fraction of intra-node bandwidth by collectives")
eff_inter = _declare("eff_inter", "efficiency", "1",
                     "achieved fraction of inter-node bandwidth by collectives")
t_layer_overhead = _declare("t_layer_overhead", "efficiency", "s",
                            "fixed time per transformer layer per forward pass (kernel launches,"
                            " synchronisation); backward counts it twice", nonneg=True)
t_step_overhead = _declare("t_step_overhead", "efficiency", "s",
                           "fixed time per optimizer step (data loading, logging, launch)",
                           nonneg=True)
mem_reserved = _declare("mem_reserved", "efficiency", "bytes",
                        "HBM not available to the model (CUDA context, allocator fragmentation)",
                        nonneg=True)

# [memory] caching-allocator retention (issue 13; symcost.training ``mem_cached``)
mem_cache_frac = _declare("mem_cache_frac", "efficiency", "1",
                          "fraction of one 16-bit copy of the trained parameters the PyTorch"
                          " caching allocator still holds (freed, cached) at the peak of"
                          " DeepSpeed ZeRO 1-3 training without parameter offload",
                          nonneg=True)
mem_regrow_frac = _declare("mem_regrow_frac", "efficiency", "1",
                           "fraction of the free HBM the PyTorch caching allocator holds again"
                           " at the peak after it released cached blocks that did not fit",
                           nonneg=True)
mem_offload_layers = _declare("mem_offload_layers", "efficiency", "1",
                              "decoder layers of 16-bit weights a device-level reading shows"
                              " beyond the tensors with DeepSpeed ZeRO-3 parameter offload"
                              " (empirical, fitted)", nonneg=True)

# --- model shape and architecture flags ------------------------------------------------
n_layers = _declare("n_layers", "model", "1", "transformer layers L", integer=True)
hidden = _declare("hidden", "model", "1", "hidden size h", integer=True)
n_heads = _declare("n_heads", "model", "1", "query heads a", integer=True)
n_kv_heads = _declare("n_kv_heads", "model", "1", "key/value heads k (a: MHA, 1: MQA)",
                      integer=True)
ffn_hidden = _declare("ffn_hidden", "model", "1",
                      "MLP intermediate size f (each of gate/up for SwiGLU)", integer=True)
vocab = _declare("vocab", "model", "1", "vocabulary size V (padded)", integer=True)
seq_len = _declare("seq_len", "model", "1", "sequence length s, tokens", integer=True)
max_seq_len = _declare("max_seq_len", "model", "1",
                       "maximum positions (sizes learned position embeddings)", integer=True)
gated_mlp = _declare("gated_mlp", "model", "1",
                     "1 for a gated MLP, SwiGLU or GeGLU (3 matrices), 0 for GeLU (2)",
                     integer=True, nonneg=True)
has_bias = _declare("has_bias", "model", "1", "1 when linear layers and norms carry biases",
                    integer=True, nonneg=True)
norm_bias = _declare("norm_bias", "model", "1",
                     "1 when norms carry a bias (LayerNorm with bias); 0 for RMSNorm or "
                     "bias-free LayerNorm", integer=True, nonneg=True)
tied_embed = _declare("tied_embed", "model", "1", "1 when the LM head shares the embedding",
                      integer=True, nonneg=True)
learned_pos = _declare("learned_pos", "model", "1", "1 for learned position embeddings",
                       integer=True, nonneg=True)
rotary_pos = _declare("rotary_pos", "model", "1",
                      "1 for rotary position embeddings (RoPE; Su et al. 2021)",
                      integer=True, nonneg=True)
has_dropout = _declare("has_dropout", "model", "1", "1 when dropout layers are active",
                       integer=True, nonneg=True)
act_clamp = _declare("act_clamp", "model", "1",
                     "1 when the gated activation clamps its inputs outside the fused kernel "
                     "(gpt-oss, ModelSpec.act_clamp)", integer=True, nonneg=True)
head_dim_given = _declare("head_dim_given", "model", "1",
                          "attention head width d when the model sets it (Qwen3, gpt-oss, MLA's"
                          " no-RoPE part); 0: d = h/a", integer=True, nonneg=True)
n_experts = _declare("n_experts", "model", "1", "routed experts E per MoE layer (0: dense)",
                     integer=True, nonneg=True)
top_k = _declare("top_k", "model", "1", "routed experts per token", integer=True, nonneg=True)
shared_experts = _declare("shared_experts", "model", "1",
                          "shared (always active) experts per MoE layer", integer=True,
                          nonneg=True)
moe_ffn_hidden = _declare("moe_ffn_hidden", "model", "1", "FFN width of one expert f_e",
                          integer=True, nonneg=True)
moe_latent_size = _declare("moe_latent_size", "model", "1",
                           "LatentMoE: width the routed experts run in and the all-to-all "
                           "carries (0: the hidden size h)", integer=True, nonneg=True)
dense_layers = _declare("dense_layers", "model", "1",
                        "leading dense layers before the MoE layers (DeepSeek first_k_dense)",
                        integer=True, nonneg=True)
moe_layer_step = _declare("moe_layer_step", "model", "1",
                          "1: every layer after the dense ones is MoE, 2: every other",
                          integer=True)
kv_lora_rank = _declare("kv_lora_rank", "model", "1",
                        "latent KV rank of multi-head latent attention (MLA; 0: no MLA)",
                        integer=True, nonneg=True)
q_lora_rank = _declare("q_lora_rank", "model", "1",
                       "latent query rank of MLA (0: full-rank query projection)", integer=True,
                       nonneg=True)
rope_head_dim = _declare("rope_head_dim", "model", "1",
                         "decoupled RoPE key/query width per head of MLA", integer=True,
                         nonneg=True)
sliding_window = _declare("sliding_window", "model", "1",
                          "sliding-window attention width W, tokens (0: full causal attention)",
                          integer=True, nonneg=True)
full_attention_step = _declare("full_attention_step", "model", "1",
                               "with a window, every n-th layer keeps full attention (0: none)",
                               integer=True, nonneg=True)
mtp_layers = _declare("mtp_layers", "model", "1",
                      "multi-token-prediction modules trained with the model (DeepSeek-V3)",
                      integer=True, nonneg=True)
mtp_blocks = _declare("mtp_blocks", "model", "1",
                      "layers (hybrid: blocks) of one multi-token-prediction module (1, or "
                      "the length of a hybrid model's mtp_pattern)", integer=True, nonneg=True)
# [hybrid] hybrid Mamba-Transformer models (ModelSpec.hybrid_pattern): block counts of the
# pattern (used only when ``hybrid`` is 1) and the Mamba-2 mixer's sizes
hybrid = _declare("hybrid", "model", "1",
                  "1 for a hybrid Mamba-Transformer (layers are single blocks of a pattern)",
                  integer=True, nonneg=True)
attn_layers = _declare("attn_layers", "model", "1",
                       "self-attention blocks of a hybrid pattern", integer=True, nonneg=True)
mamba_layers = _declare("mamba_layers", "model", "1",
                        "Mamba-2 blocks of a hybrid pattern (0: a transformer)", integer=True,
                        nonneg=True)
mlp_layers = _declare("mlp_layers", "model", "1",
                      "dense MLP blocks of a hybrid pattern", integer=True, nonneg=True)
mamba_heads = _declare("mamba_heads", "model", "1", "Mamba-2 heads H", integer=True,
                       nonneg=True)
mamba_head_dim = _declare("mamba_head_dim", "model", "1", "Mamba-2 head width P",
                          integer=True, nonneg=True)
mamba_state = _declare("mamba_state", "model", "1", "Mamba-2 state size N", integer=True,
                       nonneg=True)
mamba_groups = _declare("mamba_groups", "model", "1",
                        "Mamba-2 groups G (heads of a group share B and C)", integer=True,
                        nonneg=True)

# --- parallelism, batch and modes ------------------------------------------------------
tp = _declare("tp", "parallel", "1", "tensor-parallel degree t", integer=True)
pp = _declare("pp", "parallel", "1", "pipeline-parallel degree p", integer=True)
dp = _declare("dp", "parallel", "1", "data-parallel degree d", integer=True)
dp_replicate = _declare("dp_replicate", "parallel", "1",
                        "HSDP replicas r: ZeRO shards over d*c/r ranks, replicas all-reduce"
                        " (1: full sharding)", integer=True)
cp = _declare("cp", "parallel", "1", "context-parallel degree c (sequence split across GPUs)",
              integer=True)
cp_comm_type = _declare("cp_comm_type", "parallel", "1",
                        "context-parallel exchange: 0 p2p (ring attention), 1 allgather (K/V "
                        "all-gathered, Llama 3), 2 a2a (all-to-all over heads, DeepSpeed-Ulysses)",
                        integer=True, nonneg=True)
ep = _declare("ep", "parallel", "1",
              "expert-parallel degree e (experts sharded over e of the dp*cp ranks)",
              integer=True)
sp_on = _declare("sp_on", "parallel", "1", "1 when Megatron sequence parallelism is on",
                 integer=True, nonneg=True)
vpp = _declare("vpp", "parallel", "1", "virtual pipeline stages per GPU v (1: plain 1F1B)",
               integer=True)
micro_batch = _declare("micro_batch", "parallel", "1", "micro-batch size b, sequences",
                       integer=True)
global_batch = _declare("global_batch", "parallel", "1", "global batch B, sequences per step",
                        integer=True)
recompute = _declare("recompute", "parallel", "1",
                     "activation recomputation: 0 none, 1 selective, 2 full", integer=True,
                     nonneg=True)
recompute_layers = _declare("recompute_layers", "parallel", "1",
                            "with full recomputation, the layers of each pipeline chunk "
                            "recomputed (Megatron-Core --recompute-method block "
                            "--recompute-num-layers; 0: every layer)", integer=True,
                            nonneg=True)
# [recompute] selective recomputation by module (Megatron-Core --recompute-modules; the
# recompute_modules field, symcost.fields.RECOMPUTE_MODULES): 1 when the module is recomputed
# under recompute = selective
rc_core_attn = _declare("rc_core_attn", "parallel", "1",
                        "1 when selective recomputation recomputes the attention core",
                        integer=True, nonneg=True)
rc_layernorm = _declare("rc_layernorm", "parallel", "1",
                        "1 when selective recomputation recomputes the two pre-norms",
                        integer=True, nonneg=True)
rc_mla_up_proj = _declare("rc_mla_up_proj", "parallel", "1",
                          "1 when selective recomputation recomputes the MLA up-projections "
                          "and RoPE", integer=True, nonneg=True)
rc_moe_act = _declare("rc_moe_act", "parallel", "1",
                      "1 when selective recomputation recomputes the routed experts' "
                      "activation function", integer=True, nonneg=True)
rc_mlp = _declare("rc_mlp", "parallel", "1",
                  "1 when selective recomputation recomputes the dense MLP", integer=True,
                  nonneg=True)
rc_shared_experts = _declare("rc_shared_experts", "parallel", "1",
                             "1 when selective recomputation recomputes the shared experts",
                             integer=True, nonneg=True)
zero_stage = _declare("zero_stage", "parallel", "1",
                      "ZeRO stage 0-3 (1: distributed optimizer, 3: FSDP)", integer=True,
                      nonneg=True)
flash_attn = _declare("flash_attn", "parallel", "1", "1 when FlashAttention is used",
                      integer=True, nonneg=True)
fp8 = _declare("fp8", "parallel", "1", "1 when GEMMs run in fp8 (activations stay 16-bit)",
               integer=True, nonneg=True)
fp4 = _declare("fp4", "parallel", "1",
               "1 when the linear layers' GEMMs run in fp4 (NVFP4; activations stay 16-bit)",
               integer=True, nonneg=True)
ep_overlap = _declare("ep_overlap", "parallel", "1",
                      "1 when the expert-parallel all-to-all overlaps compute of another "
                      "micro-batch (DualPipe, Megatron-Core 1F1B all-to-all overlap)",
                      integer=True, nonneg=True)
bf16_layers = _declare("bf16_layers", "parallel", "1",
                       "layers whose linear layers stay BF16 under fp8/MXFP8/NVFP4 (Megatron-Core "
                       "--num-layers-at-start/end-in-bf16)", integer=True, nonneg=True)
doc_len = _declare("doc_len", "parallel", "1",
                   "packed sequences: attention length of the documents packed into one "
                   "sequence, tokens (E[l^2]/E[l]; 0: one document per sequence)",
                   integer=True, nonneg=True)
activation_offload_layers = _declare(
    "activation_offload_layers", "parallel", "1",
    "layers whose saved activations go to host memory in the forward and come back for the "
    "backward (Megatron-Core --cpu-offloading-num-layers)", integer=True, nonneg=True)
cuda_graph = _declare("cuda_graph", "parallel", "1",
                      "1 when the whole training iteration replays as captured CUDA graphs "
                      "(no kernel-launch or host-synchronisation time)", integer=True,
                      nonneg=True)
fp8_attention = _declare("fp8_attention", "parallel", "1",
                         "1 when the attention core's matmuls run in FP8 (Transformer Engine "
                         "fp8_dot_product_attention)", integer=True, nonneg=True)
ep_dedup = _declare("ep_dedup", "parallel", "1",
                    "1 when the MoE dispatch sends each token once per destination node and "
                    "forwards it over NVLink (DeepEP, HybridEP)", integer=True, nonneg=True)
etp = _declare("etp", "parallel", "1",
               "expert tensor-parallel degree (each routed expert's FFN split over etp ranks)",
               integer=True)
moe_imbalance = _declare("moe_imbalance", "parallel", "1",
                         "routed-token load of the busiest expert-parallel rank over the mean "
                         "(1: balanced routing)")
moe_capacity_factor = _declare("moe_capacity_factor", "parallel", "1",
                               "expert capacity in multiples of the balanced load, tokens beyond"
                               " it dropped (0: dropless)", nonneg=True)
tp_overlap = _declare("tp_overlap", "parallel", "1",
                      "1 when tensor-parallel collectives are pipelined with the GEMMs they "
                      "feed (Transformer Engine userbuffers, Megatron-Core --tp-comm-overlap)",
                      integer=True, nonneg=True)
pp_overlap = _declare("pp_overlap", "parallel", "1",
                      "1 when the interleaved pipeline schedule overlaps its point-to-point "
                      "sends with the next chunk's compute (Megatron-Core overlap_p2p_comm)",
                      integer=True, nonneg=True)
dp_overlap = _declare("dp_overlap", "parallel", "1",
                      "1 when data-parallel communication overlaps compute", integer=True,
                      nonneg=True)
zero3_per_tensor = _declare("zero3_per_tensor", "parallel", "1",
                            "1 when ZeRO-3 gathers each parameter tensor with its own "
                            "synchronous all-gather and all-reduces gradients (DeepSpeed "
                            "v0.3-v0.4, 2021)", integer=True, nonneg=True)
# [memory] training framework (issue 13; symcost.training, memory section)
train_framework = _declare("train_framework", "parallel", "1",
                           "training framework, for memory: 0 Megatron-LM (fp32 master weights,"
                           " fused kernels), 1 Hugging Face Trainer (ZeRO-0: PyTorch DDP with"
                           " torch AdamW on 16-bit weights; ZeRO 1-3: DeepSpeed; eager modeling"
                           " code)", integer=True, nonneg=True)
#: [memory] DeepSpeed ZeRO-3 ``stage3_max_live_parameters`` default (parameters resident per
#: GPU before release; DeepSpeed configuration JSON docs, ZeRO optimizations; 1e9 in
#: deepspeed/runtime/zero/config.py, v0.10-v0.16, also the value of the Hugging Face ZeRO-3
#: example configs).
DS_MAX_LIVE_PARAMETERS = sp.Integer(10**9)
#: [memory] DeepSpeed ZeRO-1/2 ``reduce_bucket_size`` of the Hugging Face Trainer's ZeRO-2
#: example configuration (elements; "reduce_bucket_size": 2e8 with "overlap_comm": true and
#: "contiguous_gradients": true; Hugging Face transformers docs, DeepSpeed integration,
#: "ZeRO-2 Example"; the same file is AaronZLT/llm-toolkit examples/e2e-benchmark/zero2.json,
#: the configuration of the ZHANG23 runs). At ZeRO-3 the Trainer fills ``"auto"`` with
#: ``hidden**2`` (transformers ``HfTrainerDeepSpeedConfig.trainer_config_finalize``).
DS_REDUCE_BUCKET_ZERO2 = sp.Integer(2 * 10**8)

# --- fixed byte counts (one place for each) --------------------------------------------
#: bytes per activation element (bf16/fp16 activations, also in fp8 training).
BYTES_ACT = sp.Integer(2)
#: bytes per weight and per gradient element (16-bit mixed precision).
BYTES_PARAM = sp.Integer(2)
#: bytes of Adam optimizer state per parameter: fp32 master copy, momentum and variance
#: (Rajbhandari et al. 2020, ZeRO, Sec. 3.1: K = 12 for mixed-precision Adam).
BYTES_OPTIMIZER = sp.Integer(12)
#: bytes moved per parameter by one Adam step: read gradient (2) master (4) m (4) v (4),
#: write master, m, v (12) and the 16-bit weight (2).
BYTES_ADAM_STEP = sp.Integer(28)
#: bytes per logit element in the fp32 cross-entropy (Megatron computes the loss in fp32).
BYTES_LOGIT = sp.Integer(4)


def by_kind(kind: str) -> list[sp.Symbol]:
    """Symbols of one kind, in declaration order.

    Args:
        kind: ``hardware``, ``efficiency``, ``model`` or ``parallel``.

    Returns:
        The list of SymPy symbols of that kind.

    Raises:
        ValueError: unknown kind.
    """
    kinds = {info.kind for info in REGISTRY.values()}
    if kind not in kinds:
        raise ValueError(f"unknown symbol kind {kind!r}; known: {', '.join(sorted(kinds))}")
    return [info.symbol for info in REGISTRY.values() if info.kind == kind]


def lookup(name: str) -> sp.Symbol:
    """The symbol called ``name``.

    Raises:
        KeyError: with the list of known names.
    """
    try:
        return REGISTRY[name].symbol
    except KeyError:
        raise KeyError(f"unknown symbol {name!r}; known: {', '.join(REGISTRY)}") from None


# --- inference -------------------------------------------------------------------------
# Symbols only the inference model (symcost.inference) uses. Serving settings and dtype
# byte widths are 'parallel' (configuration); the two calibrated constants are 'efficiency'.
batch = _declare("batch", "parallel", "1",
                 "sequences per model replica: decode batch, prompts per prefill batch, and the"
                 " cap on in-flight sequences under continuous batching", integer=True)
input_len = _declare("input_len", "parallel", "1", "prompt tokens per request", integer=True)
output_len = _declare("output_len", "parallel", "1",
                      "generated tokens per request (the first one comes from prefill)",
                      integer=True)
max_num_tokens = _declare("max_num_tokens", "parallel", "1",
                          "most tokens one forward step processes (prefill chunk; TensorRT-LLM"
                          " max_num_tokens, vLLM max_num_batched_tokens)", integer=True)
w_bytes = _declare("w_bytes", "parallel", "bytes",
                   "bytes per element of the transformer layers' linear weights, quantization"
                   " scales included")
act_bytes = _declare("act_bytes", "parallel", "bytes",
                     "bytes per activation element a GEMM reads and writes")
kv_bytes = _declare("kv_bytes", "parallel", "bytes", "bytes per KV-cache element")
w_dequant = _declare("w_dequant", "parallel", "1",
                     "1 when weights are stored narrower than the compute dtype and dequantized"
                     " inside the GEMM (weight-only quantization)", integer=True, nonneg=True)
kv_mem_frac = _declare("kv_mem_frac", "parallel", "1",
                       "fraction of the HBM left after weights and activation buffers that the"
                       " runtime gives the KV cache (TensorRT-LLM kv_cache_free_gpu_mem_fraction)")
kv_on_demand = _declare("kv_on_demand", "parallel", "1",
                        "1 when the serving runtime allocates KV-cache blocks as tokens are"
                        " generated (TensorRT-LLM MAX_UTILIZATION, vLLM), 0 when it reserves"
                        " input_len + output_len tokens per request up front"
                        " (GUARANTEED_NO_EVICT)", integer=True, nonneg=True)
eff_hbm_infer = _declare("eff_hbm_infer", "efficiency", "1",
                         "achieved fraction of HBM bandwidth by serving kernels (weight-streaming"
                         " GEMVs, KV-cache reads, fused elementwise); replaces eff_hbm in the"
                         " inference model")
eff_attn_infer = _declare("eff_attn_infer", "efficiency", "1",
                          "achieved fraction of the 16-bit peak by the serving runtime's prefill"
                          " attention kernels; replaces eff_attn in the inference model")
eff_dequant = _declare("eff_dequant", "efficiency", "1",
                       "achieved fraction of the GEMM rate when weights are dequantized in the"
                       " GEMM main loop (weight-only quantization)")
gemm_overlap = _declare("gemm_overlap", "efficiency", "1",
                        "fraction of the shorter of compute and HBM time a serving GEMM hides"
                        " under the longer (1: roofline max, 0: serial sum)", nonneg=True)
t_infer_step = _declare("t_infer_step", "efficiency", "s",
                        "fixed time per inference forward step (scheduling, sampling, launch)",
                        nonneg=True)


# --- fine-tuning, offload and host-link topology (issue 13) ---------------------------
# Symbols of LoRA/QLoRA, ZeRO-Offload and PCIe/host-staged topologies (symcost.finetune).
host_bw = _declare("host_bw", "hardware", "bytes/s",
                   "GPU-to-host link (PCIe x16, NVLink-C2C) bandwidth per GPU per direction")
p2p = _declare("p2p", "hardware", "1",
               "1 when GPUs of a node reach each other peer-to-peer over PCIe; 0 when NCCL stages"
               " PCIe transfers through pinned host memory (GeForce)", integer=True,
               nonneg=True)
bridge_bw = _declare("bridge_bw", "hardware", "bytes/s",
                     "NVLink-bridge bandwidth per GPU per direction inside a bridged GPU pair"
                     " (the PCIe host link where the GPU has no bridge)")
host_mem_cap = _declare("host_mem_cap", "hardware", "bytes",
                        "host (CPU system) memory per GPU: the node's memory / gpus_per_node,"
                        " where offloaded optimizer states, parameters and activations live")
eff_host = _declare("eff_host", "efficiency", "1",
                    "achieved fraction of the host-link bandwidth by offload copies and by"
                    " collectives staged through host memory")
cpu_adam_rate = _declare("cpu_adam_rate", "efficiency", "1/s",
                         "parameters per second one node's CPUs update with (DeepSpeed) CPU Adam,"
                         " all GPU processes of the node together")
offload = _declare("offload", "parallel", "1",
                   "optimizer offload to host memory: 0 none, 1 optimizer states (ZeRO-Offload),"
                   " 2 optimizer states and parameters (ZeRO-Infinity style, ZeRO-3)",
                   integer=True, nonneg=True)
intra_link = _declare("intra_link", "parallel", "1",
                      "intra-node link used by collectives: 0 the hardware's usual link, 1 NVLink,"
                      " 2 NVLink bridges joining GPU pairs (PCIe between pairs), 3 PCIe only",
                      integer=True, nonneg=True)
finetune = _declare("finetune", "parallel", "1",
                    "0 full training, 1 LoRA adapters on a frozen 16-bit base, 2 QLoRA (frozen"
                    " NF4 base with double quantization)", integer=True, nonneg=True)
lora_rank = _declare("lora_rank", "parallel", "1", "LoRA adapter rank r", integer=True)
lora_q = _declare("lora_q", "parallel", "1", "1 when the query projection has a LoRA adapter",
                  integer=True, nonneg=True)
lora_k = _declare("lora_k", "parallel", "1", "1 when the key projection has a LoRA adapter",
                  integer=True, nonneg=True)
lora_v = _declare("lora_v", "parallel", "1", "1 when the value projection has a LoRA adapter",
                  integer=True, nonneg=True)
lora_o = _declare("lora_o", "parallel", "1", "1 when the output projection has a LoRA adapter",
                  integer=True, nonneg=True)
lora_gate = _declare("lora_gate", "parallel", "1",
                     "1 when the MLP gate projection has a LoRA adapter", integer=True,
                     nonneg=True)
lora_up = _declare("lora_up", "parallel", "1", "1 when the MLP up projection has a LoRA adapter",
                   integer=True, nonneg=True)
lora_down = _declare("lora_down", "parallel", "1",
                     "1 when the MLP down projection has a LoRA adapter", integer=True,
                     nonneg=True)
lora_qkv = _declare("lora_qkv", "parallel", "1",
                    "1 when the fused query/key/value projection has one LoRA adapter "
                    "(Megatron-Core linear_qkv)", integer=True, nonneg=True)
lora_fc1 = _declare("lora_fc1", "parallel", "1",
                    "1 when the fused MLP gate/up projection has one LoRA adapter "
                    "(Megatron-Core linear_fc1)", integer=True, nonneg=True)
#: bytes per NF4 base weight with double quantization: 4-bit values, one 8-bit absmax per block
#: of 64 and one fp32 constant per 256 blocks (Dettmers et al. 2023, QLoRA, arXiv:2305.14314,
#: Sec. 3: 0.5 + 8/64/8 + 32/(64*256)/8 bytes = 4.127 bits per parameter).
BYTES_NF4 = sp.Rational(1, 2) + sp.Rational(8, 64 * 8) + sp.Rational(32, 64 * 256 * 8)
# serving-framework overheads (issue 13, item 7; symcost.inference.framework_step_overhead)
framework = _declare("framework", "parallel", "1",
                     "serving framework: 0 generic, 1 vLLM, 2 LightLLM, 3 TGI, 4 TensorRT-LLM",
                     integer=True, nonneg=True)
t_sched_vllm = _declare("t_sched_vllm", "efficiency", "s",
                        "vLLM's own time per forward step (scheduler, block tables, sampling)"
                        " beyond t_infer_step", nonneg=True)
t_sched_lightllm = _declare("t_sched_lightllm", "efficiency", "s",
                            "LightLLM's own time per forward step beyond t_infer_step",
                            nonneg=True)
t_sched_tgi = _declare("t_sched_tgi", "efficiency", "s",
                       "Text Generation Inference's own time per forward step beyond"
                       " t_infer_step", nonneg=True)
t_sched_trtllm = _declare("t_sched_trtllm", "efficiency", "s",
                          "TensorRT-LLM's own time per forward step beyond t_infer_step",
                          nonneg=True)
# --- end of fine-tuning block -----------------------------------------------------------
# --- dense GEMM size (issue 11, item 5; symcost.training.dense_gemm_efficiency)
gemm_m_half = _declare("gemm_m_half", "efficiency", "1",
                       "tokens per micro-batch at which a layer's dense GEMMs reach half of "
                       "eff_gemm (small M: tile and wave quantization, fixed kernel cost)",
                       nonneg=True)
# --- [moe] mixture-of-experts layer costs (issue 11; symcost.training.layer_forward_compute)
moe_m_half = _declare("moe_m_half", "efficiency", "1",
                      "tokens per local expert at which the grouped expert GEMMs reach half of "
                      "eff_gemm (small per-expert M: tile and wave quantization)", nonneg=True)
moe_flop_half = _declare("moe_flop_half", "efficiency", "FLOP",
                         "work of one expert's GEMM (2*M*N*K) at which the grouped expert "
                         "GEMMs reach half of eff_gemm (per-expert fixed costs: partly filled "
                         "tiles and waves, prologue and epilogue)", nonneg=True)
t_moe_layer = _declare("t_moe_layer", "efficiency", "s",
                       "fixed time per MoE layer per forward pass (router, permutation and "
                       "dispatcher kernel launches, host sync of the per-expert token counts); "
                       "backward counts it twice", nonneg=True)
# --- [moe] end ---------------------------------------------------------------------------
# attention kernel library (issue 11 item 5: attention efficiency per kernel and generation)
attention_backend = _declare("attention_backend", "parallel", "1",
                             "attention kernels: 0 the generation's native fused kernels "
                             "(cuDNN / Transformer Engine, FlashAttention-3 on Hopper), 1 the "
                             "FlashAttention-2 library", integer=True, nonneg=True)
fa2_ratio = _declare("fa2_ratio", "efficiency", "1",
                     "speed of FlashAttention-2 kernels relative to the generation's native "
                     "fused attention (1 where FlashAttention-2 is the native kernel: Ampere, "
                     "Ada)")
# [hybrid] Mamba-2 mixer kernels (symcost.ops.ssm)
eff_ssm = _declare("eff_ssm", "efficiency", "1",
                   "achieved fraction of the roofline speed of the Mamba-2 mixer's non-GEMM "
                   "kernels (causal convolution, chunked SSD scan, gated norm)")

# [finetune] QLoRA: fixed cost of one NF4 dequantization call
t_dequant_call = _declare("t_dequant_call", "efficiency", "s",
                          "fixed time of one NF4 weight dequantization call in QLoRA training "
                          "(host-side dispatch and kernel launches of bitsandbytes' "
                          "dequantize_4bit), beyond its memory traffic", nonneg=True)
# ZeRO-3 as DeepSpeed v0.3-v0.4 ran it (zero3_per_tensor): host time per output partition
t_gather_copy = _declare("t_gather_copy", "efficiency", "s",
                         "host time of one partition copy of an all-gather with list outputs "
                         "(torch.distributed.all_gather: one copy_ per rank after the NCCL "
                         "call)", nonneg=True)
# NVFP4 linear layers (training)
eff_fp4 = _declare("eff_fp4", "efficiency", "1",
                   "speed of NVFP4 linear layers relative to the fp4 peak at the GEMM "
                   "efficiency (its quantization, random Hadamard transforms and block scales "
                   "included; 1: at the fp4 peak)")


ALL_SYMBOLS: tuple[sp.Symbol, ...] = tuple(info.symbol for info in REGISTRY.values())
