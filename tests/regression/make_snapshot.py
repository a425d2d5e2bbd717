"""Write the regression snapshot that ``tests/test_regression_snapshot.py`` checks.

Run once before a behaviour-preserving refactor (``python tests/regression/make_snapshot.py``)
and commit ``tests/regression/snapshot.json.gz``. It stores, in float64:

* every predicted row of ``../shared/validation/published_measurements.csv`` (the predicted
  metric, its interval and the step-time breakdown), and the ids of the rows skipped;
* 1,000 training configurations drawn at random (fixed seed) over presets, GPUs and every
  configuration field, with every output of the training model, or the field named by the
  error for a configuration that is rejected;
* 300 inference configurations drawn the same way, with every output of the inference model.

One intended change since (issue 10, "one rule, one outcome"): inference requests longer
than a RoPE/ALiBi model's ``max_seq_len`` are no longer rejected (only learned positions
bound the context, as in training); the 10 stored inference draws that changed were updated
in place. A second (issue 11's ``flops_convention``, merged with issue 10): the 38 MoE rows of
the shared file (MBRIDGE Qwen3-30B-A3B, gpt-oss-120b) are skipped instead of being predicted as
dense models, and the 18 MLM24 FLOP-rate rows use MLM24's own FLOP convention (step times
unchanged); the validation part was refreshed after checking that nothing else moved. A third
(issues 11 and 13, new hardware files a800-sxm4-80gb, rtx-4090, rtx-3090, gb200, gb300, ...):
72 rows that were skipped as unknown hardware are now predicted; only the validation part was
refreshed (``s["validation"] = run_validation(VALIDATION)``), after checking that the only
difference was those rows moving from ``skipped`` to predicted. A fourth (issue 13, offload,
LoRA/QLoRA and ``intra_node_link``): 229 rows that were skipped for their ``offload``,
``quant`` or ``finetune`` columns are now predicted (ZHANG23, MBRIDGE LoRA), and the 12
ZHANG23 ZeRO-3 rows on RTX 3090/4090 changed because their stated ``pcie``/``nvlink-bridge``
link now replaces the spec's intra-node figure, and then all 97 ZHANG23 step-time rows moved
when that source's gradient reduction became non-overlapped (DeepSpeed ``overlap_comm``
default); only the validation part was refreshed, after checking that no other row moved. A
fifth (issue 11: context and expert parallelism, MoE, MLA, HSDP, mxfp8/nvfp4, and the
interleaved-schedule rule relaxed from ``layers % (pp*vpp) == 0`` to ``pp*vpp <= layers + 2``
as Megatron-Core allows): with the previous parameter file, the only training draws that
changed were the 59 rejected on ``vpp`` (36 now valid, 23 now rejected by a later rule), and
no inference draw changed; the parameters were then recalibrated (``eff_moe``, ``eff_host``
and ``cpu_adam_rate`` added, Blackwell fitted on its own rows) and the whole snapshot was
rewritten; then once more after the data-parallel overlap window came to include the exposed
context- and expert-parallel communication of each pass (no dense row without CP moved). A
sixth (issues 11 and 13, evening of 2026-11-23): with the previous parameter file, (a)
``tp_overlap`` (validate turns it on with SP for MBRIDGE, MBRIDGE2511, NEMO2407 and MLM24; MLM24
also gets SP and the distributed optimizer from its notes) moved only the 186 validation rows
of those four sources and no training or inference draw; (b) the HF/DeepSpeed memory model
(``train_framework = hf`` for ZHANG23, device-level readings) moved only the 94 ZHANG23
``peak_memory_gib`` rows; (c) the MoE cost terms (token permutation, router, grouped-GEMM size
efficiency, fixed MoE layer time) moved only the 275 MoE rows (every dense prediction
identical). The parameters were then recalibrated (``moe_m_half`` and ``t_moe_layer`` added,
``mem_cache_frac`` fitted on the memory rows) and the whole snapshot was rewritten. A
seventh (issue 11, 2026-11-24): with the previous parameter file, (a) the FLOP-rate metrics
counted by their source's own formula (``validate.FLOPS_COUNTERS``: Megatron-Bridge, Megatron-LM
/ NeMo), (b) sliding-window attention (gpt-oss, Mistral-7B) and DeepSeek-V3's MTP module, and
(c) ``attention_backend = fa2`` for MPT and ZHANG23 (no effect at the fallback
``fa2_ratio = 1``) moved only the 301 MBRIDGE, 3 MBRIDGE2511, 27 MLM24 and 12 NEMO2407
validation rows (FLOP-rate rows, gpt-oss and DeepSeek-V3 rows) and the 10 Mistral-7B training
draws at 8,192 tokens (longer than its 4,096-token window); no inference draw. The parameters
were then recalibrated (``fa2_ratio`` added) and the whole snapshot was rewritten. An eighth
(same day): serving with MLA and sliding windows moved no stored draw (none serves DeepSeek or
exceeds Mistral-7B's window); B300/GB300 became their own generation ``blackwell_ultra``, which
with the previous parameter file (no values for it: Blackwell's, ``GENERATION_FALLBACK``) moved
nothing; the parameters were recalibrated with it and the whole snapshot was rewritten. A ninth
(issue 13, 2026-11-25): with the previous parameter file, PyTorch DDP's overlapped all-reduce
for ZHANG23's ZeRO-0 rows (``validate.dp_overlap_default``) moved only those 17 validation
rows, and the exact mean windowed context of decoding (``inference.mean_decode_window_
context``) moved no stored draw; the parameters were then recalibrated and the whole snapshot
was rewritten. A tenth (issue 11, same day): the dense GEMM size efficiency
(``training.dense_gemm_efficiency``, ``gemm_m_half``) moved nothing with the previous parameter
file (no ``gemm_m_half``: 0); the parameters were recalibrated with ``gemm_m_half`` = 128 and
the log-normal prior on the fitted parameters (``calibrate.PRIOR_SIGMA``; its precision also
enters the parameter covariance, which moved only the validation rows' ``pred_lo``/``pred_hi``)
and the whole snapshot was rewritten. An eleventh (issue 13, same day): DeepSpeed's
gradient-reduction buffers in the Hugging Face layout (``training.deepspeed_reduce_buffer_
bytes``) moved, with the previous parameter file, only 80 ZHANG23 validation rows (its ZeRO
1-3 memory rows and what derives from them) and no draw; ``mem_cache_frac`` was refitted and the
whole snapshot was rewritten. A twelfth (issue 11, same day): the Megatron-Bridge FLOP counter
of each row's container (``validate.flops_counter_of``: before 26.06, GeGLU experts as two
matrices and no window term) and the ``geglu`` MLP kind of gpt-oss and Grok-1 moved, with the
previous parameter file, only 24 MBRIDGE validation rows (gpt-oss FLOP-rate rows) and no draw;
the parameters were recalibrated and the whole snapshot was rewritten. A thirteenth (issues 11
and 13, 2026-11-25): MBRIDGE rows whose notes say ``fine-tuning method=LoRA`` are predicted as
LoRA (rank 32 on q,k,v, the performance recipes' adapter) and their FLOP-rate metric by
Megatron-Bridge's LoRA count (``megatron_bridge_lora``); with the previous parameter file this
moved only those 10 validation rows and no draw; the parameters were recalibrated and the
whole snapshot was rewritten. A fourteenth (issue 11, same day): expert parallelism and routing
imbalance in serving (``ep`` and ``moe_imbalance`` of ``InferenceConfig``, defaults 1) moved
nothing. A fifteenth (issue 13, same day): the
fitted ``mem_offload_layers`` of ZeRO-3 parameter offload in the Hugging Face layout
(``training.offload_cached_param_bytes``) moved nothing with the previous parameter file (0)
and, fitted (6.24), only the 32 ZHANG23 ZeRO-3 + offload peak-memory rows; the snapshot was
rewritten. A sixteenth (issue 11, 2026-11-26): rows whose source flags them as a known
performance regression (``validate.REGRESSION_NOTE``) are skipped; with the previous parameter
file this removed only those 4 MBRIDGE validation rows (26.06.01 gpt-oss-120b MXFP8) and moved
nothing else; the parameters were recalibrated and the whole snapshot was rewritten. A
seventeenth (issue 11, same day): hybrid Mamba-Transformer models (``ModelSpec.hybrid_pattern``,
the Mamba-2 mixer of ``ops.ssm``, layer fractions in ``training``, the calibrated ``eff_ssm``)
moved, with the previous parameter file, no stored draw and no validation row (the 40
Nemotron-3 Nano rows were added); the parameters were recalibrated with those rows and
``eff_ssm`` and the whole snapshot was rewritten. An eighteenth (same day): the
data-parallel overlap window includes the exposed tensor-parallel time (a faster GEMM that
hides less TP traffic no longer exposes more data-parallel traffic: hypothesis found a step
that grew with the peak); with the previous parameter file 103 stored training draws (DP-bound,
tp > 1; every one faster) and 48 validation rows (NAR21 30, MLM24 15, MLM22 3) moved; the parameters
were recalibrated and the whole snapshot was rewritten. A nineteenth (issue 11, same day):
NVFP4 linear layers run at the calibrated ``eff_fp4`` of the fp4 peak; with the previous
parameter file (``eff_fp4`` absent, so 1) nothing moved; the parameters were recalibrated
(Blackwell 0.86, Blackwell Ultra 0.59) and the whole snapshot was rewritten. A twentieth
(2026-11-26, calibration only): the fit no longer drops a parameter the rows identify because
two other parameters are collinear (``symcost.calibrate.identifiable_columns``); with the
previous parameter file nothing moved; recalibrated, Ampere's ``eff_inter`` is fitted (0.65
-> 0.70, it was dropped before) and the whole snapshot was rewritten. A twenty-first (issue
11, same day): a grouped expert GEMM's efficiency also falls with its work ``2*M*N*K``
(``moe_flop_half``); with the previous parameter file (``moe_flop_half`` absent, so 0)
nothing moved; the parameters were recalibrated (``moe_flop_half`` fitted, ``moe_m_half``
0) and the whole snapshot was rewritten. A twenty-second (issue 13, same day): a device-level
memory reading whose cached blocks do not fit holds ``mem_regrow_frac`` of the free HBM
instead of nothing, and the memory constants are one value for every GPU; with the previous
parameter file (``mem_regrow_frac`` absent, so 0) nothing moved; the memory constants were
refitted (``mem_cache_frac`` 0.71 everywhere, ``mem_regrow_frac`` 0.24) and the snapshot was
rewritten. A twenty-third (issue 13, same day): a QLoRA NF4 dequantization also costs a fixed
``t_dequant_call`` per quantized module; with the previous parameter file (``t_dequant_call``
absent, so 0) nothing moved; the parameters were recalibrated (Ampere 190 us, Ada 0, the
others their start value 100 us) and the snapshot was rewritten. A twenty-fourth (issue 13,
same day): the RTX 3090 (GA102) became its own generation ``ampere_ga10x``, which a parameter
file without it fills with Ampere's values; with the previous parameter file nothing moved;
recalibrated (the RTX 3090 server's host and QLoRA constants no longer shared with the A800
server's) and the snapshot was rewritten. A twenty-fifth (issue 11, 2026-11-26 fourth session):
``zero3_per_tensor`` (ZeRO-3 as DeepSpeed v0.3-v0.4 ran it), on for NAR21's six ZeRO-3 rows;
with the previous parameter file only those six validation rows moved (no draw: the field's
default is off); recalibrated (Ampere's ``eff_inter`` 0.70 -> 0.50, its lower bound) and the
snapshot was rewritten. A twenty-sixth (same day): the list-output copies of those per-tensor
all-gathers (``t_gather_copy`` per rank and tensor); with the previous parameter file
(``t_gather_copy`` absent, so 0) nothing moved; recalibrated (Ampere ``t_gather_copy`` 4.5 us,
``eff_inter`` 0.60) and the snapshot was rewritten. A twenty-seventh (issue 11, 2026-11-26
fifth session): ``validate`` turns ``ep_overlap`` on for the Megatron-Bridge MoE runs whose
recipe overlapped the all-to-all with full-iteration CUDA graphs (``BRIDGE_EP_OVERLAP``); with
the previous parameter file exactly those 48 validation rows moved (no draw); recalibrated
(Blackwell ``eff_moe`` 0.314 -> 0.294) and the snapshot was rewritten. A twenty-eighth (issue
11, 2026-11-26 sixth session): the logits GEMM runs at the 16-bit peak under fp8, MXFP8 and
NVFP4 (``training.lm_head_compute``: Megatron-Core's output layer is no Transformer Engine
module); with the previous parameter file only low-precision rows moved (all 497 fp8, MXFP8
and NVFP4 validation rows and 90 of the 1,000 training draws, all of them low-precision);
recalibrated (Hopper ``eff_attn`` 0.40 -> 0.46 with ``fa2_ratio`` 0.44 -> 0.38, Blackwell
``eff_gemm`` 0.53 -> 0.57) and the snapshot was rewritten. A twenty-ninth (same session): the
grouped expert GEMMs run at ``eff_gemm`` with their size penalty and ``eff_moe`` is retired
(``symcost.params.RETIRED``); with the previous parameter file (its ``eff_moe`` dropped on
reading) exactly the 311 MoE validation rows moved (no stored draw is an MoE model);
recalibrated (Blackwell ``moe_flop_half`` 32 -> 70 GFLOP and ``t_moe_layer`` 0.28 ms) and the
snapshot was rewritten. A thirtieth (issue 11, 2026-11-26 seventh session): under fp8, MXFP8
and NVFP4 the linear layers keep their saved inputs quantized, as Transformer Engine does
(``training.gemm_input_bytes``); exactly the memory outputs (``mem_activations``,
``mem_activations_layer``, ``mem_total``, ``mem_headroom``) of the 90 valid low-precision
training draws moved, no validation row (none reports fp8 memory), and the snapshot was
rewritten. (The same session's ``recompute_modules``, explicit head widths and MLA latents in
the activation memory moved nothing stored: the default modules are the old selective
recomputation, and no stored draw has a head width other than ``h/a`` or MLA.) A
thirty-first (same session): selective recomputation of the attention core with FlashAttention
re-runs the fused attention forward and drops its log-sum-exp, as Megatron-Core's checkpointed
core attention does (before: free and identical to no recomputation); exactly the 98 valid
training draws with ``recompute = selective`` and FlashAttention moved (step time, recompute
time, HFU/MFU, memory; no validation row has selective recomputation), and the snapshot was
rewritten. A thirty-second (issue 11, 2026-11-26 eighth session): LatentMoE
(``moe_latent_size``) and the MTP blocks of a hybrid model (``mtp_pattern``) gave Nemotron 3
Super a preset; with the previous parameter file exactly its 54 validation rows moved from
``skipped`` to predicted (its six B300 NVFP4 rows stay skipped: no fp4 peak), no other row and
no draw moved, and only the validation part was refreshed. A thirty-third (same session):
``ep_dedup`` (node-deduplicated MoE dispatch, on for Nemotron 3 Super's rows,
``validate.BRIDGE_EP_DEDUP``); with the previous parameter file only the eight rows of its
B200 runs (EP64 over eight nodes) moved, no draw (the field is off by default); the
parameters were recalibrated with the 54 new rows (Blackwell ``eff_ssm`` 0.27 -> 0.13,
``moe_flop_half`` 70 -> 54 GFLOP, ``eff_fp4`` 0.96 -> 0.80) and the whole snapshot was
rewritten. A thirty-fourth (same session): ``bf16_layers`` (layers kept in BF16 under
fp8/MXFP8/NVFP4; 14 for Nemotron 3 Super's NVFP4 rows, ``validate.BRIDGE_BF16_LAYERS``); with
the previous parameter file only those rows could move (the field is 0 elsewhere and in every
draw); recalibrated (Blackwell ``eff_fp4`` 0.80 -> 0.85) and the whole snapshot was rewritten.
A thirty-fifth (session of 2026-11-26, ninth): ``cp_comm_type`` (the context-parallel exchange,
default ``p2p``, the ring as before) moved no stored value (the test passed unchanged); then
FlashAttention's causal tiles (``ops.attention.causal_fraction``: ``1/2 + 64/s`` of the score
matrix executed instead of ``1/2``): with the previous parameter file every FlashAttention row
moved (predicted throughput 0.02-1.9% lower) and no row without it (NAR21, MLM22 and the
eager-attention ZHANG23 rows unchanged); recalibrated (Blackwell ``eff_attn`` 0.415 -> 0.421,
Blackwell Ultra 0.539 -> 0.549, Hopper ``fa2_ratio`` 0.380 -> 0.385) and the whole snapshot
was rewritten. A thirty-sixth (session of 2026-11-26, tenth): the interleaved schedule overlaps
its pipeline sends with the next chunk's compute (``training.pp_p2p_exposed``; Megatron-Core
``overlap_p2p_comm``): with the previous parameter file exactly the 78 stored draws with
``pp > 1`` and ``vpp > 1`` moved (all of them), and the validation rows with an interleaved
pipeline; recalibrated (in-sample 9.08% -> 8.66%) and the whole snapshot was rewritten. A
thirty-seventh (same session): DeepSeek-V3 on 256 B200 in MXFP8 from container 26.04.01 is
predicted with its recipe's DeepEP dispatch and all-to-all overlap (``validate.BRIDGE_EP_DEDUP``
now keyed by container like ``BRIDGE_EP_OVERLAP``): with the previous parameter file only its
two rows moved (-66% -> -10%); recalibrated (Blackwell constants within 1%) and the whole
snapshot was rewritten. A thirty-eighth (session of 2026-11-27): when ``p`` does not divide
the layers, the last pipeline stage holds one layer fewer and runs the output head
(``training.bottleneck_stage``; Megatron-Core ``account_for_loss_in_pipeline_split``): with
the previous parameter file exactly the 25 stored draws with ``pp > 1`` and ``L % pp != 0``
moved, and 203 validation rows, all with such a split (the 20 DeepSeek-V3 rows at PP2, where
it leaves the last stage no fewer layers, did not); recalibrated (in-sample 8.56%
-> 7.99%) and the whole snapshot was rewritten. A thirty-ninth (session of 2026-11-27,
twelfth): ``eff_hbm`` (the training's memory-bound kernels) joins the fitted parameters
(``calibrate.DEFAULT_FIT``); no expression changed (the snapshot passed unchanged with the
previous parameter file, after the free-symbol and Jacobian-chunk speed-ups); recalibrated
(in-sample 7.99% -> 7.75%) and the whole snapshot was rewritten. A fortieth (session of
2026-11-27, thirteenth): presets for Nemotron 3 Ultra and Nemotron 3.5 Lightning and a sourced
fp4 peak in ``b300.yaml`` (13.5 PFLOPS); with the previous parameter file every stored draw
passed and only the validation skip list moved (12 rows predicted that were skipped);
recalibrated with them (Blackwell and Blackwell Ultra constants within 7%, in-sample 7.75%)
and the whole snapshot was rewritten. A forty-first (same session): ``validate`` predicts the
full-parameter rows of MBRIDGE, MBRIDGE2511 and NEMO2407 with the distributed optimizer
(ZeRO-1, their recipes' setting) instead of ZeRO-0; no expression changed; recalibrated
(in-sample 7.75% -> 7.88%, leave-one-source-out 21.09% -> 20.87%) and the whole snapshot was
rewritten. A forty-second (session of 2026-11-27, sixteenth): the ``cuda_graph`` field
(full-iteration CUDA graphs pay no ``t_layer_overhead`` or ``t_moe_layer``), on for the
Megatron-Bridge MoE recipes of ``validate.BRIDGE_FULL_ITERATION_GRAPH``; with the previous
parameter file the stored draws (which leave it off) are unchanged and exactly the 48
validation rows of those runs (containers 26.06, 26.06.01 and 26.08) moved; recalibrated
(in-sample 7.88% -> 7.84%, leave-one-source-out 20.87% -> 20.89%) and the whole snapshot was
rewritten. A forty-third (session of 2026-11-27, seventeenth): ``validate`` gives the
Megatron-Bridge rows their recipes' selective recomputation (``validate.BRIDGE_RECOMPUTE``:
DeepSeek-V3, Kimi-K2, gpt-oss-120b, Nemotron 3 Super); no expression changed; with the
previous parameter file the stored draws passed and only the 101 validation rows of those runs
moved; recalibrated (in-sample 7.84% -> 7.83%) and the whole snapshot was rewritten. A
forty-fourth (same session): the ``recompute_layers`` field (Megatron-Core block
recomputation; 0, every layer, leaves every stored draw unchanged) and ``validate``'s
``BRIDGE_RECOMPUTE_LAYERS`` (Llama-3-8B on H100 in FP8 recomputes 5 layers from 25.11: the 2
validation rows of that run moved); recalibrated (Hopper constants within 0.6%) and the whole
snapshot was rewritten. A forty-fifth (session of 2026-11-27, twentieth): MBRIDGE2511's stated
``zero_stage`` 0 is its table's ``FSDP=0`` and keeps the distributed optimizer
(``validate.SOURCE_DEFAULTS``, ``zero_stage_is_fsdp``); with the previous parameter file only
the 4 validation rows of its Llama-3-70B and 405B runs moved; recalibrated (Hopper constants
within 0.2%) and the whole snapshot was rewritten. A forty-sixth (same session): ``validate``
reads the two Llama-3-70B GB300 runs that the 26.02.01 Megatron-Bridge page printed with a
wrong layout in their recipe's layout (``validate.BRIDGE_LAYOUT_ERRATA``); with the previous
parameter file only their 4 validation rows moved; recalibrated (only Blackwell Ultra
constants moved, within 4%) and the whole snapshot was rewritten; then the same for that page's
Llama-3.1-405B GB200 NVFP4 run (VP 8, not 4: 2 rows moved; Blackwell constants within 0.2%).
A forty-seventh (session of 2026-11-27, twenty-first): the ``doc_len`` field (packed
sequences; 0, unpacked, leaves every stored draw unchanged) and ``validate``'s
``finetune_doc_len`` for MBRIDGE's SFT and LoRA rows (SQuAD packed); with the previous
parameter file only those 20 validation rows moved; recalibrated (``eff_attn`` of Blackwell
0.75 -> 0.65 and of Blackwell Ultra 1.0 -> 0.90, whose SFT/LoRA rows had carried unpacked
attention, and with them Blackwell's ``eff_hbm`` +6% and ``eff_ssm`` -12%; Hopper constants
within 2%) and the whole snapshot was rewritten. A forty-eighth (same session): the fused LoRA
targets ``qkv`` and ``fc1`` (one adapter on Megatron-Core's ``linear_qkv``/``linear_fc1``;
every stored draw's targets are separate projections and unchanged), MBRIDGE's and NEMO2407's
LoRA adapter on ``qkv`` (``validate.SOURCE_DEFAULTS``); with the previous parameter file only
the 10 MBRIDGE LoRA validation rows moved; recalibrated (every constant within 3%) and the
whole snapshot was rewritten. A forty-ninth (same session): the model FLOPs (``mfu``) of a
packed run count the attention within its documents, as they count a sliding window's; only
the ``mfu`` of the 20 packed validation rows moved (their predictions did not). A fiftieth
(session of 2026-11-28, twenty-second): FlashAttention kernels take the longer of their
matmuls and their softmax exponentials on the special function units (``peak_exp``, each
hardware file's ``exp_tera_per_s``); with the previous parameter file only the draws and rows
with fewer than 128 FLOP of matmul per exponential below the 16-bit peak's ratio moved: 4
training draws (GPT-1.7B, head dim 96, on B200) and the 34 gpt-oss-120b (head dim 64)
validation rows on B200/GB200 (B300/GB300 tie); recalibrated (Blackwell ``eff_attn`` 0.66 ->
0.61, ``eff_hbm`` +4%, ``eff_ssm`` -8%; no other generation moved) and the whole snapshot
was rewritten. A fifty-first (same session): ring attention's per-step kernels re-read the
queries and merge partial outputs and gradients (``training.cp_ring_merge_bytes``); with the
previous parameter file only the 40 validation rows of the 20 runs with ring context
parallelism moved (0.5-2.2% slower; no stored draw has ``cp > 1`` with the ring);
recalibrated (every constant within 1.1%) and the whole snapshot was rewritten. A fifty-second
(2026-11-28, the next session): ``validate.BRIDGE_LAYOUT_ERRATA`` corrects three more printed
layouts (25.09 GB200 Llama-3-70B FP8, second configuration, MBS 2 -> 1; 25.11 gpt-oss-120b on
H100 MBS 4 -> 1 and on B200 EP8 -> 64); with the previous parameter file only their 6 validation
rows moved (no draw); recalibrated (Blackwell ``eff_inter`` +5.6%, every other constant within
2.1%) and the whole snapshot was rewritten. A fifty-third (same session): without
userbuffers the backward's tensor-parallel collectives under sequence parallelism are partly
hidden (``training.tp_comm_layer_exposed``: each row-parallel GEMM's output-gradient all-gather
exposed, each column-parallel GEMM's input-gradient reduce-scatter behind its weight-gradient
GEMM, as Transformer Engine's ``Linear`` runs them), and ``validate.BRIDGE_TP_OVERLAP_OFF``
turns ``tp_overlap`` off for the 32 Megatron-Bridge runs whose recipes do not overlap (Llama 3
in NVFP4, Qwen3-235B-A22B on H100, Nemotron 3 Super and Ultra); with the previous parameter file
206 of the 526 valid training draws (``sp`` on, ``tp`` > 1, no ``tp_overlap``) got 0.2-9.3%
faster and only those 64 validation rows moved (1-13% slower); recalibrated (NVFP4's
``eff_fp4`` +15% on Blackwell, +17% on Blackwell Ultra, Blackwell Ultra's ``eff_attn`` -6%,
``eff_ssm`` +5% on Blackwell) and the whole snapshot was rewritten. A fifty-fourth
(2026-11-28, the next session): FlashAttention-2 kernels (``attention_backend = fa2``) add their
softmax's exponentials and FP32 FLOP to the matmul time instead of overlapping them
(``ops.attention.flash_work``; new hardware symbol ``peak_flops_fp32``, the files' ``fp32``
peak); with the previous parameter file only the 476 validation rows of the two ``fa2`` sources
moved (432 MPT, 44 ZHANG23; no draw uses ``fa2``, and no native kernel is bound by its FP32
FLOP); recalibrated (Ampere ``eff_attn`` 0.31 -> 0.42, ``eff_hbm`` +8%; Hopper ``eff_attn``
+11%, ``fa2_ratio`` 0.39 -> 0.49) and the whole snapshot was rewritten. A fifty-fifth (same
session): on GPUs without asynchronous warpgroup MMA (``async_mma`` 0: Ampere, Ada, CDNA3) the
native FlashAttention kernels are serial too (``training.flash_serial``), and serving's prefill
likewise; 137 training draws on A100 and MI300X with FlashAttention moved (up to 6.3% slower),
29 inference draws and the 31 TensorRT-LLM rows on A100 (``TRT017``); no training row of the
shared file moved (its Ampere FlashAttention runs are ``fa2`` already), so the parameters were
not refitted; the whole snapshot was rewritten. A fifty-sixth (2026-12-07): compute times divide
by the GPU's measured matmul ceiling (``matmul_ceiling``: the maximum achievable bf16 matmul rate
over the bf16 peak, ``matmul_tflops_measured`` in the hardware files, 0.803 where not measured;
``ops.cost.time_roofline``) and the efficiencies were refitted as fractions of it (Hopper
``eff_gemm`` 0.62 -> 0.78, Blackwell 0.48 -> 0.65, Blackwell Ultra ``eff_attn`` at its bound 1);
every valid training draw moved: B200 0.92-1.03x (median 0.97), A100 PCIe 1.00-1.07x, MI300X
1.03-1.55x (median 1.28: its ceiling is 51% of the peak), A100 SXM, H100 and H200 within 1%;
every inference draw's compute-bound terms moved; the whole snapshot was rewritten. A
fifty-seventh (2026-12-07, later): MFU and HFU divide by the datasheet peak of the GEMM dtype
(``training.spec_peak``), no longer by NVFP4's calibrated rate (the fp4 peak times
``eff_fp4``); the ``mfu`` of the 66 NVFP4 rows of the shared file moved (Blackwell x0.91,
Blackwell Ultra x0.75, the shipped ``eff_fp4``), nothing else (no draw is NVFP4); only the
validation part was refreshed (``s["validation"] = run_validation(VALIDATION)``). A
fifty-eighth (2026-12-07, night): fp8 and MXFP8 GEMMs run at the GPU's measured fp8 matmul
ceiling (``matmul_ceiling_fp8``, ``matmul_tflops_measured_fp8`` in the hardware files: H100 and
H800 70.9% of the fp8 peak, H200 73.4%, B200 76.3%, B300 74.5%, GB200 72.3%; the bf16 fraction
where not measured; ``training.gemm_peak``), serving's 8-bit GEMMs keep the bf16 fraction
(``config.inference_hardware_bindings``), and the parameters were recalibrated (Hopper
``eff_attn`` 0.63 -> 0.72, ``eff_hbm`` 0.46 -> 0.56, ``eff_gemm`` 0.775 -> 0.769; Ampere's
fitted values unchanged); the whole snapshot was rewritten. A fifty-ninth (same night): gpt-oss's
clamped activation (``ModelSpec.act_clamp``: Megatron-Core clamps the two halves and
concatenates them outside its fused kernel, 8 more element reads and writes per output element,
``ops.elementwise.activation``) moved, with the previous parameter file, only the gpt-oss
training draws and validation rows; the parameters were recalibrated (Blackwell ``eff_hbm``
0.60 -> 0.40, ``eff_attn`` 0.74 -> 0.98, ``eff_ssm`` 0.34 -> 0.66, ``moe_flop_half`` 55 -> 40
GFLOP; Hopper ``moe_flop_half`` 43 -> 36 GFLOP) and the whole snapshot was rewritten. A
sixtieth (2026-12-08): the new field ``fp8_attention`` (Transformer Engine
``fp8_dot_product_attention``, off by default: no draw sets it) and the Megatron-Bridge rows whose
recipes set it (``validate.BRIDGE_FP8_ATTENTION``); the parameters were recalibrated (Blackwell
``eff_attn`` 0.98 -> 0.90, Blackwell Ultra ``eff_gemm`` 0.79 -> 0.81, ``eff_ssm`` 0.67 -> 0.78;
Hopper's and Ampere's fitted values unchanged) and the whole snapshot was rewritten. A
sixty-first (same day): the ``alltoall`` dispatcher's chunk sorts (``training.moe_chunk_sort``:
with more than one expert per GPU and without ``ep_dedup``, the received rows regrouped by local
expert after the dispatch and back before the combine, forward and backward) moved the MoE
training draws and validation rows; the parameters were recalibrated (Blackwell ``eff_hbm``
0.39 -> 0.63, ``eff_attn`` 0.90 -> 0.73; Hopper ``eff_hbm`` 0.56 -> 0.58, ``eff_gemm`` 0.771 ->
0.766) and the whole snapshot was rewritten;
sixty-second (same day): the calibration's robust loss became quadratic only below 2% log error
(``calibrate.ROBUST_SCALE`` 0.1 -> 0.02), the model unchanged; the parameters were recalibrated
(Hopper ``eff_attn`` 0.707 -> 0.689, ``eff_hbm`` 0.58 -> 0.55; Blackwell ``eff_attn`` 0.73 ->
0.66, ``eff_hbm`` 0.63 -> 0.68) and the whole snapshot was rewritten.
Every other value is as first written.

The draws are described by plain field values (API keywords), so the test can replay them
through the public API whatever the internals become.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import numpy as np

import symcost

HERE = Path(__file__).resolve().parent
SNAPSHOT = HERE / "snapshot.json.gz"
VALIDATION = HERE.parents[2] / "shared" / "validation" / "published_measurements.csv"

TRAIN_MODELS = ("gpt3-175b", "gpt-1.7b", "gpt-18.4b", "mpt-7b", "mpt-30b", "llama-2-7b",
                "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b", "llama-3.1-405b")
HARDWARE = ("a100-sxm4-80gb", "a100-sxm4-40gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200",
            "mi300x", "a100-pcie-80gb")
INFER_MODELS = ("llama-2-7b", "llama-2-70b", "llama-3-8b", "llama-3-70b", "mistral-7b",
                "gpt3-175b", "mpt-30b")


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(float(x)) else None


def training_draws(n: int = 1000, seed: int = 20261123) -> list[dict]:
    """``n`` random training configurations as keyword dicts for ``predict_training``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        tp = int(rng.choice([1, 2, 4, 8]))
        pp = int(rng.choice([1, 1, 2, 4, 8, 16]))
        dp = int(rng.choice([1, 2, 4, 8, 16, 32, 64]))
        mb = int(rng.choice([1, 1, 2, 4]))
        gb = int(mb * dp * rng.choice([1, 2, 4, 8, 16, 32]))
        draw = {
            "model": str(rng.choice(TRAIN_MODELS)), "hardware": str(rng.choice(HARDWARE)),
            "num_gpus": tp * pp * dp, "tp": tp, "pp": pp,
            "micro_batch": mb, "global_batch": gb,
            "vpp": int(rng.choice([1, 1, 1, 2, 3, 4])) if pp > 1 else 1,
            "seq_len": int(rng.choice([1024, 2048, 4096, 8192])),
            "recompute": str(rng.choice(["none", "selective", "full"])),
            "zero": int(rng.choice([0, 1, 1, 2, 3])),
            "sp": bool(rng.integers(0, 2)), "flash_attention": bool(rng.integers(0, 2)),
            "dp_overlap": bool(rng.integers(0, 2)),
            "dtype": str(rng.choice(["bf16", "bf16", "fp16", "fp8"])),
        }
        out.append(draw)
    return out


def inference_draws(n: int = 300, seed: int = 20261124) -> list[dict]:
    """``n`` random inference requests as keyword dicts for ``predict_inference``."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        tp = int(rng.choice([1, 2, 4, 8]))
        pp = int(rng.choice([1, 1, 2]))
        dtype = str(rng.choice(["bf16", "fp16", "fp8"]))
        out.append({
            "model": str(rng.choice(INFER_MODELS)), "hardware": str(rng.choice(HARDWARE)),
            "tp": tp, "pp": pp, "num_gpus": tp * pp * int(rng.choice([1, 2])),
            "batch": int(rng.choice([1, 4, 16, 64, 256])),
            "input_len": int(rng.choice([128, 512, 2048])),
            "output_len": int(rng.choice([1, 128, 1024])),
            "dtype": dtype,
            "weight_dtype": str(rng.choice([dtype, dtype, "int8", "int4"])),
            "flash_attention": bool(rng.integers(0, 2)),
            "kv_on_demand": bool(rng.integers(0, 2)),
        })
    return out


def run_training(draw: dict) -> dict:
    """Outputs of one training draw, or the field its error names."""
    kw = dict(draw)
    model, hw = kw.pop("model"), kw.pop("hardware")
    try:
        r = symcost.predict_training(model, hw, **kw)
    except ValueError as exc:
        return {"error": str(exc).split(":", 1)[0]}
    return {"values": {k: _num(v) for k, v in r.values.items()}}


def run_inference(draw: dict) -> dict:
    """Outputs of one inference draw, or the field its error names."""
    kw = dict(draw)
    model, hw = kw.pop("model"), kw.pop("hardware")
    try:
        r = symcost.predict_inference(model, hw, check_memory=False, **kw)
    except ValueError as exc:
        return {"error": str(exc).split(":", 1)[0]}
    return {"values": {k: _num(v) for k, v in r.values.items()}}


VALIDATION_COLUMNS = ("predicted", "pred_lo", "pred_hi", "step_time", "mfu")


def run_validation(path: Path) -> dict:
    """Predicted columns of every predicted row, and the skipped ids."""
    rep = symcost.validate_file(path)
    rows = {}
    for rec in rep.rows.to_dict(orient="records"):
        rows[f"{rec['case_id']}|{rec['metric']}"] = {
            c: _num(rec[c]) if rec.get(c) is not None else None for c in VALIDATION_COLUMNS}
    return {"rows": rows, "skipped": sorted(s.case_id for s in rep.skipped)}


def main() -> int:
    snap = {
        "training": [{"draw": d, **run_training(d)} for d in training_draws()],
        "inference": [{"draw": d, **run_inference(d)} for d in inference_draws()],
        "validation": run_validation(VALIDATION),
    }
    with gzip.open(SNAPSHOT, "wt") as fh:
        json.dump(snap, fh, sort_keys=True)
    ok = sum("values" in r for r in snap["training"])
    print(f"wrote {SNAPSHOT}: {ok} valid training draws of {len(snap['training'])}, "
          f"{sum('values' in r for r in snap['inference'])} inference, "
          f"{len(snap['validation']['rows'])} validation rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
