"""Validation of the training model against published measurements.

Reads files in the format of ``shared/validation/published_measurements.csv`` (one measured
figure per row: model shape, cluster, parallel layout, metric and value; the format's README
defines every column and each metric's convention), turns each ``train`` row into a
``(ModelSpec, HardwareSpec, TrainingConfig)``, predicts every predictable row in ONE vectorized
call of the compiled training model, and converts the predicted step time to the row's metric
with that metric's published convention. The published measurements ship with the package
(:func:`builtin_measurements`, a copy of ``shared/validation/`` with its README):
:func:`load_measurements`, :func:`validate_file` and :func:`symcost.calibrate.calibrate` use
them when no file is given.

A row that cannot be predicted is never dropped silently: :func:`prepare_rows` returns it with
the reason (inference workload, unknown hardware or metric, parallel layout not stated,
malformed value, invalid configuration, ...). Serve/prefill rows go to the inference model
through :func:`predict_inference_hook` (:func:`symcost.infer_api.predict_inference_rows`);
their conventions are documented there, and the summary keeps the training MAPE (train rows) apart.

Defaults for blank fields (the format: "blank means the source does not say"):

=================  =====================================================================
field              default
=================  =====================================================================
micro_batch        1
vpp                1 (plain 1F1B)
sp                 on with tp > 1 (:data:`GENERIC_FACTS`: Megatron-Core, NeMo and
                   Megatron-Bridge practice); off for NAR21, MLM22, MPT and ZHANG23
                   (:data:`SOURCE_DEFAULTS`)
cp, ep             1 (no context or expert parallelism)
zero_stage         0; 1 for MLM24 and for the full-parameter rows of MBRIDGE, MBRIDGE2511 and
                   NEMO2407 (:data:`SOURCE_DEFAULTS`; MBRIDGE2511's stated 0 is its table's
                   ``FSDP=0``, not FSDP, and takes that default too)
tp_overlap         on with sp (:data:`GENERIC_FACTS`); off for NAR21, MLM22, MPT and
                   ZHANG23, and for the MBRIDGE rows whose container's recipe did not overlap
                   (:data:`BRIDGE_TP_OVERLAP_OFF`, :func:`tp_overlap_off_default`)
ep_overlap         off; on for the MBRIDGE MoE rows whose container's recipe overlapped the
                   all-to-all (:data:`BRIDGE_EP_OVERLAP`, :func:`ep_overlap_default`)
ep_dedup           off; on for the MBRIDGE MoE rows whose container's recipe used a
                   node-deduplicating dispatcher (:data:`BRIDGE_EP_DEDUP`,
                   :func:`ep_dedup_default`)
cuda_graph         off; on for the MBRIDGE MoE rows whose container's recipe captured the
                   whole iteration as CUDA graphs (:data:`BRIDGE_FULL_ITERATION_GRAPH`,
                   :func:`cuda_graph_default`)
fp8_attention      off; on for the MBRIDGE rows whose container's recipe ran the attention
                   matmuls in FP8 (:data:`BRIDGE_FP8_ATTENTION`, :func:`fp8_attention_default`)
bf16_layers        0; the layers an MBRIDGE run's precision recipe keeps in BF16
                   (:data:`BRIDGE_BF16_LAYERS`)
recompute          ``none``; for the MBRIDGE rows whose container's recipe recomputed
                   selected modules, ``selective`` with those ``recompute_modules``
                   (:data:`BRIDGE_RECOMPUTE`, :func:`recompute_default`), or whose recipe
                   recomputed the first layers of each pipeline chunk, ``full`` with those
                   ``recompute_layers`` (:data:`BRIDGE_RECOMPUTE_LAYERS`)
doc_len            the column when stated; :data:`SQUAD_DOC_LEN` when the notes say SQuAD
                   packed; for the fine-tuning rows of a source whose recipes pack their
                   dataset (``finetune_doc_len`` of :data:`SOURCE_DEFAULTS`: MBRIDGE, SQuAD
                   packed to ``seq_len``), that length; else 0 (unpacked)
offload            the column (optimizer and parameter offload); ``activation_offload_layers``
                   0, except the MBRIDGE rows whose recipe offloaded activations
                   (:data:`BRIDGE_ACTIVATION_OFFLOAD`, :func:`activation_offload_default`:
                   Llama-3-70B's FP8 FSDP runs on GB200 and GB300, 40 and 20 layers;
                   Llama-3.1-405B's on 128 GB200 in 25.09, 95)
dtype              canonical ``dtype``; else ``bf16``
dp                 derived ``n_gpus / (tp * cp * pp)`` (a stated dp must agree)
n_gpus             ``tp * cp * pp * dp`` when all four are stated
tp, pp             both blank: unpredictable ("parallel config not stated"), unless
                   ``dp == n_gpus`` (then tp = pp = 1); one blank: the other is derived
                   from ``n_gpus / (stated * dp)`` when dp is stated, else unpredictable
global_batch       ``micro_batch * dp``
dp_overlap         on; off for ZHANG23's DeepSpeed ZeRO runs, on for its ZeRO-0 (PyTorch
                   DDP) runs (:data:`SOURCE_DEFAULTS`, :func:`dp_overlap_default`)
zero3_per_tensor   off; on for NAR21's ZeRO-3 rows (DeepSpeed of March 2021,
                   :data:`SOURCE_DEFAULTS`)
train_framework    ``megatron``; ``hf`` for ZHANG23 (:data:`SOURCE_DEFAULTS`; memory only)
attention_backend  ``native``; ``fa2`` for MPT and ZHANG23 (:data:`SOURCE_DEFAULTS`)
flash_attention    the column when stated (0/1); else see :data:`SOURCE_DEFAULTS` and
                   :func:`flash_attention_rule`
gated_mlp          the column when stated (1: SwiGLU, 0: GELU MLP); else the preset's flag
kv_heads           ``heads`` (MHA) when blank and the model is not a preset
ffn_hidden         ``4 * hidden`` when blank and the model is not a preset (the GPT
                   convention)
experts, ...       the MoE columns (``experts``, ``top_k``, ``shared_experts``,
                   ``moe_ffn_hidden``, ``dense_layers``, ``moe_layer_step``) when stated,
                   else the preset's (blank and no preset: dense)
=================  =====================================================================

Rows the training model cannot represent are skipped with the column named, never predicted
as something else (:func:`unmodelled_reason`): hybrid Mamba-Transformer models without a hybrid preset and
``quant`` other than ``nf4``. Rows whose source flags them as a known performance regression
(:data:`REGRESSION_NOTE`) are skipped too: they measure a software defect, not the
configuration.

Architecture flags (MLP kind, norm, biases, tied embeddings, positions, dropout) come from the
preset the row's model name maps to (see :func:`preset_for_name`), else from the preset of the
same family (:data:`FAMILY_PRESETS`: ``mpt*`` -> ``mpt-7b``, ``gpt-oss*`` -> ``gpt-oss-120b``,
``gpt*``/``megatron*`` -> ``gpt3-175b``, ``llama*`` -> ``llama-2-7b``, ``qwen3*`` ->
``qwen3-30b-a3b``, ...), else GPT-style defaults (``gpt3-175b``'s flags); the shape always
comes from the row's columns (a blank shape column takes the preset's value, or makes the row
unpredictable when there is no preset). Per-source overrides are in :data:`SOURCE_DEFAULTS`.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import os
import re
import warnings
from importlib import resources
from pathlib import Path
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO, TypeVar

import numpy as np
import numpy.typing as npt
import pandas as pd

from hwspecs import HardwareSpecError, list_hardware, load_hardware

from .api import evaluate_training, stack_training_inputs
from .evaluate import Progress
from .config import ConfigError, TrainingConfig, resolve
from .fields import GEMM_PEAK_KEY
from .infer_api import predict_inference_rows
from .measurements import (PreparedRow, Row, RowError, SkippedRow, cell, cell_float, cell_int,
                           source_of)
from .models import GATED_MLP_KINDS, ModelSpec, ModelSpecError, find_preset, get_model
from .params import Params, load_params
from .training import BREAKDOWN
from .uncertainty import row_intervals

__all__ = [
    "MEMORY_METRICS", "OTHER_METRICS", "SCALING_METRICS", "LAYER_METRICS", "finetune_columns",
    "fit_agreement",
    "memory_reading",
    "device_reading", "device_read", "generation_values",
    "predict_other_rows", "prepare_other_rows",
    "SQUAD_DOC_LEN", "SQUAD_PACKED_NOTE",
    "FLOPS_CONVENTIONS", "KNOWN_METRICS", "INFERENCE_METRICS", "SOURCE_DEFAULTS", "MeasurementsError", "PreparedRow",
    "SkippedRow", "ValidationReport", "builtin_measurements", "evaluate_rows", "flash_attention_rule",
    "llm_foundry_flops_per_token", "megatron_flops_per_token", "model_flops_per_token",
    "FLOPS_COUNTERS", "MEGATRON_COUNTERS", "BRIDGE_COUNTER_REVISED", "flops_counter_of",
    "BRIDGE_EP_OVERLAP", "BRIDGE_EP_DEDUP", "BRIDGE_FULL_ITERATION_GRAPH",
    "bridge_recipe_default", "container_of", "cuda_graph_default",
    "BRIDGE_ACTIVATION_OFFLOAD", "activation_offload_default", "bridge_recipe_latest",
    "BRIDGE_RECOMPUTE", "recompute_default", "BRIDGE_RECOMPUTE_LAYERS",
    "recompute_layers_default", "BRIDGE_LAYOUT_ERRATA", "layout_errata",
    "ep_dedup_default", "ep_overlap_default", "GENERIC_FACTS", "source_fact",
    "BRIDGE_FP8_ATTENTION", "fp8_attention_default",
    "BRIDGE_TP_OVERLAP_OFF", "tp_overlap_off_default",
    "load_measurements", "mape", "metric_factor", "nar21_flops",
    "predict_rows", "prepare_rows", "preset_for_name", "source_of", "split_by_params",
    "unmodelled_reason", "REGRESSION_NOTE", "replicate_floor", "replicate_groups",
    "predict_inference_hook", "stack_inputs", "summarize", "validate_file", "validate_frame",
]

#: columns a measurements file must have (all others may be absent: treated as blank).
REQUIRED_COLUMNS = ("case_id", "workload", "metric", "value")

#: training metrics this module converts from a predicted step time (see :func:`metric_factor`).
KNOWN_METRICS = (
    "iteration_time_s", "train_step_time_s", "achieved_tflops_per_gpu", "pct_of_peak",
    "aggregate_pflops", "MFU", "HFU", "model_tflops_per_gpu", "tokens_per_s_per_gpu",
    "tokens_per_s", "samples_per_s",
)
#: inference metrics of the format (predicted by the inference model, not this one).
INFERENCE_METRICS = (
    "output_throughput", "offline_tokens_per_s", "server_tokens_per_s", "peak_output_throughput",
    "first_token_latency_ms", "ttft_ms", "inter_token_latency_ms",
)
INFERENCE_REASON = "inference rows: not predicted by the training model"

#: Per-source defaults, keyed by the ``case_id`` prefix (the text before the first ``-``).
#: ``flash_attention`` applies when the notes do not say (see :func:`flash_attention_rule`);
#: ``arch`` overrides the preset's architecture flags; ``max_seq_len_is_seq_len`` sizes
#: learned positions to the row's sequence length.
#:
#: * NAR21, MLM22 (Megatron-LM 2021/22): unfused "core attention" (FlashAttention appeared in
#:   2022, after these runs).
#: * NAR21's ZeRO-3 rows (Table 2, "ZeRO-3 via DeepSpeed", arXiv:2104.04473 v1 of April 2021,
#:   a month after DeepSpeed v0.3.13 introduced ZeRO-3): ``zero3_per_tensor`` (one synchronous
#:   all-gather per parameter tensor, gradients all-reduced; the DeepSpeed v0.3-v0.4 code
#:   and defaults, :func:`symcost.training.param_tensors_layer`).
#: * MPT (llm-foundry benchmarks): FlashAttention (its notes say so); the benchmark YAMLs used
#:   learned position embeddings and biases (the published ``n_params_b`` grows by ``hidden``
#:   per token of ``seq_len`` and matches ``bias=True, position='learned'`` to 4 digits), with
#:   ``max_seq_len = seq_len``.
#: * MBRIDGE, MBRIDGE2511, NEMO2407 (Megatron-Bridge and NeMo recipes): sequence parallelism
#:   on whenever ``tp > 1`` when the table does not say (``sp_with_tp``: the recipes set
#:   ``sequence_parallel = tensor_model_parallel_size > 1``, and Megatron-Core requires it for
#:   MoE with TP).
#: * MBRIDGE, MBRIDGE2511, NEMO2407, MLM24: tensor-parallel communication overlap
#:   (``tp_overlap_with_sp``: on whenever sequence parallelism is; the NeMo/Megatron-Bridge
#:   performance recipes enable Transformer Engine's ``tp_comm_overlap`` for TP > 1, and the
#:   MLM24 table's notes state "TP comm overlap"). MLM24 also gets sequence parallelism with
#:   TP (Megatron-Core requires it for ``--tp-comm-overlap``) and the distributed optimizer
#:   (``zero_stage`` 1: its notes state overlapped "param-gather", which only the distributed
#:   optimizer does).
#: * MBRIDGE, MBRIDGE2511, NEMO2407: the distributed optimizer (``zero_stage`` 1) for
#:   full-parameter runs, as their recipes shard it (Megatron-Bridge
#:   ``recipes/utils/optimizer_utils.py`` @067f987: ``use_distributed_optimizer=True``; NeMo
#:   2.0 ``nemo/collections/llm/recipes/optim/adam.py``,
#:   ``distributed_fused_adam_with_cosine_annealing``: the same, with ``overlap_grad_reduce``
#:   and ``overlap_param_gather``); parameter-efficient runs keep a replicated optimizer (the
#:   PEFT recipes set ``use_distributed_optimizer = False``). A stated ``zero_stage`` wins
#:   (MBRIDGE's FSDP rows 3), except that MBRIDGE2511's column transcribes its table's
#:   ``FSDP`` column (``zero_stage_is_fsdp``): ``FSDP`` is 3 and ``0`` only "not FSDP", which
#:   keeps the distributed optimizer (until 2026-11-27 read as ZeRO-0, so its Llama-3-70B and
#:   405B H100 runs, the same runs as MBRIDGE's 25.11 rows, needed more than 80 GB).
#:   Until 2026-11-27 the MBRIDGE and NEMO2407 rows were predicted at ZeRO-0: 76 of the 472
#:   distinct published training layouts then needed more memory than the GPU has (replicated
#:   fp32 Adam states), 27 with this default. Refitted, in-sample MAPE rose 7.75% -> 7.88%
#:   (NEMO2407 5.5% -> 6.4%, MBRIDGE 9.4% -> 9.6%,
#:   MBRIDGE2511 8.0% -> 8.4%) while leave-one-source-out fell 21.09% -> 20.87% (MBRIDGE
#:   Blackwell 33.2% -> 31.8%): the model's ZeRO-1 hides more of the data-parallel traffic
#:   than these runs do, and ZeRO-0's exposed all-reduce had stood in for it. Charging the
#:   overlapped gradient and parameter collectives a fraction of their time (SM contention,
#:   0.3 or 0.6) did worse (7.89%, 7.98%; MLM24 4.3% -> 5.6%, 7.3%).
#: * MBRIDGE, MBRIDGE2511, NEMO2407, MLM24: FLOP-rate metrics counted with the source's own
#:   formula (``flops_counter``, :data:`FLOPS_COUNTERS`): the MBRIDGE notes name
#:   Megatron-Bridge's ``flop_utils.py``, whose count changed with container 26.06 (a row's
#:   ``container=NeMo`` note selects it, :func:`flops_counter_of`); NEMO2407 is NeMo 24.07
#:   and MLM24 Megatron-LM at commit f2e5db402c, both ``num_floating_point_operations``.
#: * MBRIDGE: a row whose notes say ``fine-tuning method=LoRA`` (its ``finetune`` cell
#:   blank) is LoRA fine-tuning with the performance recipes' adapter: rank 32 (the ``LoRA``
#:   default ``dim``, ``src/megatron/bridge/peft/lora.py``) on the fused QKV projection only
#:   (``cfg.peft.target_modules = ["linear_qkv"]`` in every ``llama3_70b_peft_*`` recipe of
#:   ``src/megatron/bridge/perf_recipes/llama/*/llama3.py``, both @067f987): ``lora_targets``
#:   ``qkv``, one adapter on the fused projection (``q,k,v`` until 2026-11-27: three
#:   adapters, each reading the layer input).
#: * NEMO2407 (NeMo 24.07, NeMo 1.0 fine-tuning): a LoRA row's adapter is NeMo 1.0's default,
#:   ``adapter_dim`` 32 on ``attention_qkv``, the fused QKV projection
#:   (``examples/nlp/language_modeling/tuning/conf/megatron_gpt_finetuning_config.yaml``,
#:   ``model.peft.lora_tuning``, NVIDIA/NeMo): ``lora_rank`` 32, ``lora_targets`` ``qkv``.
#: * MBRIDGE: its SFT and LoRA rows fine-tune on SQuAD packed into sequences of ``seq_len``
#:   tokens (``packed_sequence_specs.packed_sequence_size = seq_length`` in every
#:   ``scripts/performance/configs/llama/llama3_llm_finetune.py`` recipe, NVIDIA-NeMo/
#:   Megatron-Bridge v0.5.0; ``squad_packed`` data, ``scripts/performance/utils/datasets.py``):
#:   ``finetune_doc_len`` = :data:`SQUAD_DOC_LEN`.
#: * MPT and ZHANG23: FlashAttention kernels whose warps run the softmax between the matmuls
#:   (``attention_backend = fa2``). llm-foundry's tables of October 2023 (A100 40 and 80 GB,
#:   H100 BF16 and FP8 at up to 64 GPUs; commit b2a43a14) ran ``submit_benchmarks.py``'s
#:   default ``attn_impl: triton`` (its Triton FlashAttention kernel; flash-attn 1.0.9
#:   installed by ``.[gpu]``, ``sweep.sh`` passes no ``--attn_impl``); its large-scale H100
#:   table (January 2024, commit 5e85bd62, ``sweep.py``) ran ``attn_impl: flash`` (flash-attn
#:   2.3.2 from ``.[gpu-flash2]``) for 1b, 3b, 7b and 70b and ``triton`` for 13b and 30b
#:   (mosaicml/llm-foundry ``scripts/train/benchmarking/``). The paper's llm-toolkit passes
#:   ``--flash_attn True`` to Hugging Face's ``flash_attention_2``. The Megatron sources use
#:   Transformer Engine's cuDNN fused attention (native).
#: * ZHANG23 (DeepSpeed data parallelism through the Hugging Face Trainer): gradient
#:   reduction predicted as not overlapped with the backward. The authors' DeepSpeed files
#:   set ``"overlap_comm": true`` (AaronZLT/llm-toolkit examples/e2e-benchmark/zero2.json,
#:   zero3.json, zero2off.json, zero3off.json), but predicting the reduction as hidden behind
#:   the backward raises the tokens/s MAPE of the 94 ZHANG23 rows from 18.3% to 25.0% in
#:   sample (44.5% to 50.0% leave-one-platform-out, ``benchmarks/zhang23_accuracy.py``,
#:   2026-11-25): on these hosts the reduction is staged through host memory, and DeepSpeed's
#:   double-buffered buckets stall the backward once both are in flight, so it behaves as
#:   exposed. The buffers' memory is counted (:func:`symcost.training.
#:   deepspeed_reduce_buffer_bytes`).
#:   Its ZeRO-0 runs are plain PyTorch DDP (no DeepSpeed config, see below), which always
#:   overlaps its bucketed gradient all-reduce with the backward (Li et al. 2020, "PyTorch
#:   Distributed", VLDB 13(12), Sec. 3.2.3): ``dp_overlap_zero0`` on.
#:   [memory] Its memory layout is the Hugging Face Trainer's (``train_framework = hf``:
#:   the llm-toolkit scripts of the paper's authors load the model in bf16 and run the
#:   baseline without a DeepSpeed config, i.e. PyTorch DDP; AaronZLT/llm-toolkit
#:   examples/e2e-benchmark/run.sh and llmtoolkit/model.py), and its printed peak memory is
#:   the device's used memory, ``total - free`` of ``torch.cuda.mem_get_info`` at the end of
#:   training (llmtoolkit/callbacks.py, ``on_train_end``), so it includes what the CUDA
#:   context and the caching allocator hold beyond the tensors (``memory_reading = device``:
#:   predicted by :func:`device_reading`, ``mem_total + mem_reserved`` plus the cached blocks).
#: attention length ``E[l^2]/E[l]`` (tokens) of SQuAD examples packed for fine-tuning
#: (:attr:`symcost.config.TrainingConfig.doc_len`), in the Megatron-Bridge/NeMo template
#: ``"Context: ... Question: ... Answer:"`` plus the answer
#: (``src/megatron/bridge/data/hf_processors/squad.py``): 156 words and punctuation marks on
#: 1,407 SQuAD dev examples (Rajpurkar et al. 2016, arXiv:1606.05250), counted 2026-11-27; a
#: subword tokenizer gives somewhat more. Predictions hardly depend on it: at 128 to 256 tokens
#: packed attention is bound by its Q/K/V/O traffic (Llama-2-7B SFT on 8 H100 in fp8 at 4,096
#: tokens: 1.042 s at either, 1.149 s unpacked).
SQUAD_DOC_LEN = 160
#: a row whose ``notes`` say it fine-tunes on SQuAD packed into sequences (NeMo's and
#: Megatron-Bridge's fine-tuning tables: "SQuAD packed to 4096"): ``doc_len`` =
#: :data:`SQUAD_DOC_LEN` unless the row states it.
SQUAD_PACKED_NOTE = re.compile(r"squad\b.*\bpack|\bpack\w*\b.*\bsquad", re.IGNORECASE)
SOURCE_DEFAULTS: dict[str, dict[str, Any]] = {
    "ZHANG23": {"dp_overlap": False, "dp_overlap_zero0": True, "train_framework": "hf",
                "memory_reading": "device", "attention_backend": "fa2",
                "sp_with_tp": False, "tp_overlap_with_sp": False},
    "NAR21": {"flash_attention": False, "zero3_per_tensor": True, "sp_with_tp": False,
              "tp_overlap_with_sp": False},
    "MLM22": {"flash_attention": False, "sp_with_tp": False, "tp_overlap_with_sp": False},
    "MBRIDGE": {"sp_with_tp": True, "tp_overlap_with_sp": True, "zero_stage": 1,
                "flops_counter": "megatron_bridge", "lora_rank": 32, "lora_targets": "qkv",
                "finetune_doc_len": SQUAD_DOC_LEN},
    "MBRIDGE2511": {"sp_with_tp": True, "tp_overlap_with_sp": True, "zero_stage": 1,
                    "zero_stage_is_fsdp": True,
                    "flops_counter": "megatron_bridge"},
    "NEMO2407": {"sp_with_tp": True, "tp_overlap_with_sp": True, "zero_stage": 1,
                 "flops_counter": "megatron", "lora_rank": 32, "lora_targets": "qkv"},
    "MLM24": {"sp_with_tp": True, "tp_overlap_with_sp": True, "zero_stage": 1,
              "flops_counter": "megatron"},
    "MPT": {"flash_attention": True, "arch": {"position": "learned", "bias": True},
            "max_seq_len_is_seq_len": True, "attention_backend": "fa2", "sp_with_tp": False,
            "tp_overlap_with_sp": False},
}

#: facts assumed for a source without an entry in :data:`SOURCE_DEFAULTS` (a user's own
#: measurements, other published tables): sequence parallelism whenever ``tp > 1`` and the
#: tensor-parallel collectives overlapped with the GEMMs whenever sequence parallelism is on,
#: as Megatron-Core, NeMo and Megatron-Bridge train today (Korthikanti et al. 2022 introduced
#: sequence parallelism; Megatron-Core requires it for MoE with TP and for
#: ``--tp-comm-overlap``; the NeMo and Megatron-Bridge performance recipes turn both on for
#: TP > 1). NeMo 24.09-25.07 pre-training tables (not in the shared data), predicted without
#: these facts, were 12.7% off in tokens/s (GPT-3 175B and Nemotron-4 340B 15-28% too slow);
#: with them 8.6% (2026-11-26). Sources that ran without them say so in their entry (NAR21
#: and MLM22 state ``sp = 0``; MPT and ZHANG23 have no tensor parallelism).
GENERIC_FACTS: dict[str, Any] = {"sp_with_tp": True, "tp_overlap_with_sp": True}


def source_fact(source: str, key: str) -> Any:
    """A fact of ``source``: its :data:`SOURCE_DEFAULTS` entry's, else :data:`GENERIC_FACTS`'
    (None when neither has ``key``)."""
    return SOURCE_DEFAULTS.get(source, {}).get(key, GENERIC_FACTS.get(key))


#: family prefix of a model name -> preset supplying its architecture flags (MLP kind, norm,
#: biases, tied embeddings, positions, dropout) when the name is no preset, in order (the
#: first prefix that matches wins: ``gpt-oss`` before ``gpt``, ``qwen3`` before ``qwen``).
FAMILY_PRESETS = (("mpt", "mpt-7b"), ("gpt-oss", "gpt-oss-120b"), ("gpt", "gpt3-175b"),
                  ("megatron", "gpt3-175b"), ("llama", "llama-2-7b"),
                  ("mixtral", "mixtral-8x7b"), ("mistral", "mistral-7b"),
                  ("qwen3", "qwen3-30b-a3b"), ("qwen", "qwen2.5-7b"),
                  ("deepseek", "deepseek-v3"), ("kimi", "kimi-k2"))
GPT_DEFAULT_PRESET = "gpt3-175b"

_SHAPE_COLUMNS = {"layers": "layers", "hidden": "hidden", "heads": "heads",
                  "kv_heads": "kv_heads", "ffn_hidden": "ffn_hidden", "vocab": "vocab",
                  "seq_len": "seq_len"}
#: blank shape column of a model without a preset -> (column, factor) it defaults from: the
#: GPT convention ``kv_heads = heads`` (MHA), ``ffn_hidden = 4 * hidden`` (shared README).
_GPT_DEFAULTS = {"kv_heads": ("heads", 1), "ffn_hidden": ("hidden", 4)}
#: mixture-of-experts columns of the format (:class:`~symcost.models.ModelSpec` fields).
_MOE_COLUMNS = ("experts", "top_k", "shared_experts", "moe_ffn_hidden", "dense_layers",
                "moe_layer_step")
#: attention details no column gives (head width, MLA ranks, sliding window, multi-token
#: prediction), taken from a preset of the same width and heads.
_ATTENTION_FROM_PRESET = ("head_dim", "kv_lora_rank", "q_lora_rank", "rope_head_dim",
                          "sliding_window", "full_attention_step", "mtp_layers")
#: expert details no column gives (the LatentMoE width), taken from a preset with the same
#: experts and expert width.
_MOE_FROM_PRESET = ("moe_latent_size",)
#: the block layout and Mamba-2 sizes of a hybrid Mamba-Transformer (no column gives them),
#: taken from its preset (a row stating another layer count is refused).
_HYBRID_FROM_PRESET = ("hybrid_pattern", "mamba_heads", "mamba_head_dim", "mamba_state",
                       "mamba_groups", "mtp_pattern")
#: percent metrics: a published value above 100 is a data error.
PERCENT_METRICS = ("MFU", "HFU", "pct_of_peak")
#: plausible range of the measured step time a row implies (s): below a microsecond (a kernel
#: launch) or above a million seconds (11.6 days per optimizer step) the value is a data-entry
#: error (unit or exponent), and one such row would drag a calibration to a parameter bound.
MEASURED_STEP_RANGE_S = (1e-6, 1e6)
#: training-configuration field -> measurements column, for messages (the format's names).
_CONFIG_FIELD_TO_COLUMN = {"zero": "zero_stage", "num_gpus": "n_gpus"}

#: columns that describe one run (two rows equal on all of them measure the same run).
RUN_COLUMNS = ("model", "n_params_b", "layers", "hidden", "heads", "kv_heads", "ffn_hidden",
               "seq_len", "vocab", "global_batch", "micro_batch", "hardware", "n_gpus", "tp",
               "pp", "vpp", "dp", "cp", "ep", "sp", "recompute", "zero_stage", "dtype", "notes",
               "offload", "finetune", "lora_rank", "quant", "intra_node_link", "doc_len")


class MeasurementsError(ValueError):
    """The measurements file itself is unusable (unreadable, not CSV, required column missing)."""


#: ``zero_stage`` written as a framework's sharding mode: FSDP FULL_SHARD is ZeRO-3 (the
#: format's README), SHARD_GRAD_OP ZeRO-2 (PyTorch FSDP documentation, ShardingStrategy).
ZERO_NAMES = {"FSDP": 3, "FULL_SHARD": 3, "SHARD_GRAD_OP": 2, "NO_SHARD": 0}

#: values of the ``flops_convention`` column (README of the format).
FLOPS_CONVENTIONS = ("model", "hardware", "megatron_sc21")


# ----------------------------------------------------------------------------- metric formulas
def nar21_flops(batch: npt.ArrayLike, seq: npt.ArrayLike, layers: npt.ArrayLike,
                hidden: npt.ArrayLike, vocab: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """FLOPs per step as Narayanan et al. count them (with full activation recomputation).

    ``F = 96 * B * s * l * h^2 * (1 + s/(6h) + V/(16 l h))``.

    Args:
        batch: global batch B (sequences); seq: sequence length s (tokens); layers: l;
        hidden: h; vocab: V. Scalars or arrays (broadcast).

    Returns:
        FLOP per optimizer step, whole cluster.

    References:
        Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU Clusters
        Using Megatron-LM" (SC'21, arXiv:2104.04473), Sec. 5.1 (the achieved-FLOP/s formula of
        Tables 1 and 2).
    """
    B, s, l, h, V = (np.asarray(x, dtype=np.float64) for x in (batch, seq, layers, hidden, vocab))
    return 96.0 * B * s * l * h**2 * (1.0 + s / (6.0 * h) + V / (16.0 * l * h))


def llm_foundry_flops_per_token(n_params: npt.ArrayLike, layers: npt.ArrayLike,
                                hidden: npt.ArrayLike, seq: npt.ArrayLike,
                                recompute: str = "none") -> npt.NDArray[np.float64]:
    """Model FLOPs per token as llm-foundry's benchmark README counts them.

    MFU: ``6*N + 12*L*h*s`` (``3 * (2N + 4*L*h*s)``: dense matmuls and attention, no norms or
    activations, no recomputation). HFU: with full recomputation the forward is counted twice,
    ``8*N + 16*L*h*s`` ("4x fwd FLOPs when ckpt"); with selective recomputation (not an
    llm-foundry mode) the recomputed attention core adds ``4*L*h*s``.

    Args:
        n_params: N (parameters); layers: L; hidden: h; seq: s (tokens).
        recompute: ``none`` (MFU convention), ``selective`` or ``full`` (HFU convention).

    Returns:
        FLOP per token.

    References:
        mosaicml/llm-foundry ``scripts/train/benchmarking/README.md`` (MFU/HFU definitions);
        checked against the published MFU/HFU/model TFLOP/s of every llm-foundry row of the
        shared measurements file (tests and ``benchmarks/validate_accuracy.py``).
    """
    N, L, h, s = (np.asarray(x, dtype=np.float64) for x in (n_params, layers, hidden, seq))
    base = 6.0 * N + 12.0 * L * h * s
    if recompute == "full":
        return base * 4.0 / 3.0
    if recompute == "selective":
        return base + 4.0 * L * h * s
    return base


#: the Megatron FLOP counters :func:`megatron_flops_per_token` reproduces (``flops_counter``
#: of :data:`SOURCE_DEFAULTS`, revised per row by :func:`flops_counter_of`).
MEGATRON_COUNTERS: tuple[str, ...] = ("megatron", "megatron_bridge", "megatron_bridge_2601",
                                       "megatron_bridge_lora")
#: NeMo container from which Megatron-Bridge counts every gated MLP as three matrices and
#: sliding-window layers by their mean causal context (Megatron-Bridge commit baa0259,
#: "[training] fix flops computation", 2026-05-28, first in container 26.06); the rows of
#: earlier containers are counted by ``megatron_bridge_2601`` (``flop_utils.py`` @5831d8f).
BRIDGE_COUNTER_REVISED: tuple[int, int] = (26, 6)


def megatron_flops_per_token(model: ModelSpec, seq: float, *, counter: str,
                             tp: int = 1) -> tuple[float, float]:
    """Model FLOPs per token as Megatron-LM/NeMo or Megatron-Bridge count them.

    Per token, forward plus backward (``3 x`` the forward's ``2`` FLOP per multiply-add), no
    recomputation, input embedding not counted::

        6 * ( h*f*m * L_dense + h*f_e*(k + S)*m * L_moe            MLP (m = 3 gated, else 2)
              + sum over layers of [ h*(q + 2*kv) + q*h              Q, K, V, O projections
                                     + c * q * ctx ]                  attention core
              + h*V )                                                 logits

    with ``q = a*d``, ``kv = k*d`` (MLA: the latent down/up projections, as written in
    ``flop_utils``). By ``counter`` (:data:`MEGATRON_COUNTERS`):

    * ``megatron`` (Megatron-LM 2024 ``num_floating_point_operations``, NeMo 24.07
      ``flops_formulas.py``): the whole score matrix (``c*ctx = 2*s``) in every layer; the
      gated third matrix only for a SiLU gate (``args.swiglu``).
    * ``megatron_bridge_2601`` (Megatron-Bridge ``flop_utils.py`` @5831d8f, the NeMo
      containers before 26.06): causal attention halved (``c*ctx = s``) in every layer,
      windowed ones included; the gated third matrix only for a SiLU gate
      (``gated_linear_unit and activation_func == F.silu``: gpt-oss's GeGLU experts count as
      two matrices); each multi-token-prediction module as one more layer, its ``2h -> h``
      projection and one more pass through the output head; the vocabulary padded to a
      multiple of ``128*tp``.
    * ``megatron_bridge`` (@067f987, containers 26.06 on): as ``megatron_bridge_2601``, but
      every gated MLP counts three matrices and a sliding-window layer its average causal
      context ``W - W(W-1)/(2s)`` (times 2).
    * ``megatron_bridge_lora`` (@067f987, LoRA runs of Llama-3-70B on packed SQuAD,
      :data:`BRIDGE_LORA_MODEL`): the frozen base counted as forward plus input-gradient
      backward, ``2/3`` of ``L*h^2*(12 + 12*k/a + 18*f/h + 6*V/(L*h))`` per token (the
      adapters' own FLOPs are not counted); the score-matrix term over the packed
      sub-sequences (``12*L*h*sum(s_i^2)``, data-dependent) is left out: it reproduces the
      published TFLOP/s over tokens/s of the 26.06 LoRA runs to 0.4% (the term is the rest).

    Args:
        model: the row's model; seq: sequence length (tokens); counter: one of
            :data:`MEGATRON_COUNTERS`; tp: tensor-parallel degree (vocabulary padding).

    Returns:
        ``(total, attention)``: model FLOP per token and its attention-core part (FLOP).

    Raises:
        ValueError: ``counter`` is not one of :data:`MEGATRON_COUNTERS`.

    References:
        NVIDIA-NeMo/Megatron-Bridge ``src/megatron/bridge/training/utils/flop_utils.py``
        (``transformer_flops``; with the counter of each row's container this reproduces the
        published model TFLOP/s over tokens/s of the MBRIDGE pre-training runs to 0.5%,
        except four DeepSeek-V3 25.11 GB200/GB300 runs, 4%; the 26.06 LoRA runs to 0.4% by
        ``megatron_bridge_lora``); Megatron-LM ``megatron/training/training.py``
        ``num_floating_point_operations`` and NeMo ``utils/flops_formulas.py`` (the NEMO2407
        and MLM24 counts; NEMO2407 reproduced to 0.1%); Narayanan et al. 2021 (SC'21), App.
    """
    if counter not in MEGATRON_COUNTERS:
        raise ValueError(f"counter: {counter!r} is not one of {', '.join(MEGATRON_COUNTERS)}")
    if counter == "megatron_bridge_lora":
        vocab = -(-model.vocab // (128 * tp)) * (128 * tp)
        h, L = model.hidden, model.layers
        frozen = L * h * h * (12 + 12 * model.kv_heads / model.heads
                              + 18 * model.ffn_hidden / h + 6 * vocab / (L * h))
        return 2.0 / 3.0 * frozen, 0.0
    bridge = counter != "megatron"
    if bridge and model.is_hybrid:
        return _bridge_hybrid_flops_per_token(model, seq, tp)
    revised = counter == "megatron_bridge"
    h, a, k, d, L = model.hidden, model.heads, model.kv_heads, model.head_dim or 0, model.layers
    m = 3 if (model.is_gated if revised else model.mlp == "swiglu") else 2
    n_moe = model.moe_layers
    mtp = model.mtp_layers if bridge else 0
    # LatentMoE: the routed experts run l-wide and the layer adds its 2*h*l projections
    latent = model.moe_latent_size
    expert = (model.moe_ffn_hidden * (model.top_k * (latent or h) / h + model.shared_experts)
              * m + 2 * latent)
    last_is_moe = n_moe > 0
    mlp = h * (model.ffn_hidden * m * (L - n_moe) + expert * n_moe
               + mtp * (expert if last_is_moe else model.ffn_hidden * m))
    core = 1.0 if bridge else 2.0  # multiply-adds per (query element, context token)
    if model.kv_lora_rank:
        dq, r, rq = d + model.rope_head_dim, model.kv_lora_rank, model.q_lora_rank
        query = rq * (h + a * dq + 1) if rq else h * a * dq
        proj = query + r * (h + a * 2 * d + 1) + h * model.rope_head_dim + a * d * h
        attn_core = core * seq * a * (dq + d) / 2
        attn = (L + mtp) * attn_core
        proj_total = (L + mtp) * proj
    else:
        q, kv = a * d, k * d
        proj_total = (L + mtp) * (h * (q + 2 * kv) + q * h)
        full = core * q * seq
        n_swa = model.swa_layers if revised else 0
        w = model.sliding_window
        swa = (2 * q * (w - w * (w - 1) / (2 * seq)) if w < seq else full) if n_swa else 0.0
        attn = (L + mtp - n_swa) * full + n_swa * swa
    vocab = model.vocab
    if bridge:
        multiple = 128 * tp
        vocab = -(-vocab // multiple) * multiple
    extra = mtp * (3 * h + 2 * h * h) if bridge else 0
    total = 6.0 * (mlp + proj_total + attn + h * vocab * (mtp + 1) + extra)
    return total, 6.0 * attn


def _bridge_hybrid_flops_per_token(model: ModelSpec, seq: float, tp: int) -> tuple[float, float]:
    """Megatron-Bridge's count for a hybrid Mamba-Transformer (``flop_utils.py`` @067f987,
    ``hybrid_flops``), per token: ``3 x`` the forward of its blocks, which counts an attention
    block's projections ``4*h*q*(1 + k/a)`` and its whole score matrix ``2*q*s`` (not halved),
    a Mamba-2 block ``2*h*(2*d + 2*G*N + H) + 7*d*N + 2*d*h`` with ``d = 2h`` (Bridge's
    ``mamba_layer_flops`` takes the inner width as twice the hidden size whatever the heads),
    a dense MLP ``4*h*f`` (``6*h*f`` gated), a MoE block ``4*h*f_e*(k + S)`` (gated ``x 3/2``;
    no router; with a LatentMoE width ``l`` the routed part is ``4*l*f_e*k + 4*h*l``,
    ``moe_layer_flops``) and the logits ``2*h*V`` (vocabulary padded to ``128*tp``), each MTP
    module adding its blocks (``mtp_pattern``, counted with the pattern's blocks by
    ``get_hybrid_layer_counts``) and one more logits pass. Returns ``(total, attention)`` as
    :func:`megatron_flops_per_token`."""
    h, a, k, q = model.hidden, model.heads, model.kv_heads, model.heads * (model.head_dim or 0)
    scale = 1.5 if model.is_gated else 1.0
    attn_proj = 4 * h * q * (1 + k / a)
    attn_core = 2 * q * seq
    d_in = 2 * h
    mamba = (2 * h * (2 * d_in + 2 * model.mamba_groups * model.mamba_state
                      + model.mamba_heads) + 7 * d_in * model.mamba_state + 2 * d_in * h)
    mlp = 4 * h * model.ffn_hidden * scale
    latent = model.moe_latent_size
    moe = (4 * model.moe_ffn_hidden * scale * ((latent or h) * model.top_k
                                               + h * model.shared_experts) + 4 * h * latent)
    vocab = -(-model.vocab // (128 * tp)) * (128 * tp)
    mtp = {kind: model.mtp_layers * model.mtp_pattern.count(kind) for kind in "*M-E"}
    n_attn = model.attention_layers + mtp["*"]
    fwd = (n_attn * (attn_proj + attn_core) + (model.mamba_layers + mtp["M"]) * mamba
           + (model.mlp_layers + mtp["-"]) * mlp + (model.moe_layers + mtp["E"]) * moe
           + 2 * h * vocab * (1 + model.mtp_layers))
    return 3.0 * fwd, 3.0 * n_attn * attn_core


#: the model whose LoRA runs Megatron-Bridge counts with its LoRA formula
#: (``flop_utils.py`` @067f987: ``is_lora and is_squad and "Meta-Llama-3-70B" in
#: hf_model_id``, since commit c8eefcf, 2026-03-03); a row's ``model`` cell is matched.
BRIDGE_LORA_MODEL = re.compile(r"(?i)(^|[^0-9.])llama-?3-70b")


def flops_counter_of(source: str, notes: object, *, lora: bool = False,
                     model_name: str = "") -> str | None:
    """The FLOP counter of a row: its source's (:data:`FLOPS_COUNTERS`; None: the
    PaLM/llm-foundry count), with ``megatron_bridge`` read as ``megatron_bridge_2601`` when the
    row's ``notes`` name a NeMo container before :data:`BRIDGE_COUNTER_REVISED`
    (``container=NeMo 26.04.01``), and as ``megatron_bridge_lora`` for a LoRA run (``lora``)
    of :data:`BRIDGE_LORA_MODEL` (``model_name``: the row's ``model`` cell) counted by the
    revised formula."""
    counter = FLOPS_COUNTERS.get(source)
    if counter == "megatron_bridge":
        container = container_of(notes)
        if container is not None and container < BRIDGE_COUNTER_REVISED:
            return "megatron_bridge_2601"
        if lora and BRIDGE_LORA_MODEL.search(model_name):
            return "megatron_bridge_lora"
    return counter


#: how a row's ``notes`` name the NeMo container of a Megatron-Bridge run
#: (``container=NeMo 26.06.01``).
CONTAINER_NOTE = re.compile(r"container=NeMo (\d+(?:\.\d+)+)")


def container_of(notes: object) -> tuple[int, ...] | None:
    """The NeMo container a row's ``notes`` name, as a tuple of ints (``26.06.01`` ->
    ``(26, 6, 1)``, which sorts after ``(26, 6)``), or None when they name none."""
    found = CONTAINER_NOTE.search(str(notes or ""))
    return tuple(int(x) for x in found[1].split(".")) if found else None


#: a recipe table's wildcard for the hardware or the dtype (every one)
ANY = "*"
#: the value type of a recipe table (:func:`bridge_recipe_latest`)
V = TypeVar("V")

#: Megatron-Bridge performance recipes whose MoE all-to-all runs overlapped with another
#: micro-batch's compute (``ep_overlap``): first container -> the (``model`` cell, canonical
#: ``hardware``, ``dtype``) rows it covers; a row of that container or a later one is
#: predicted with ``ep_overlap`` on. These are the recipes that set ``moe_a2a_overlap``
#: (Megatron-Core ``overlap_moe_expert_parallel_comm`` with ``delay_wgrad_compute``)
#: together with full-iteration CUDA graphs (``cuda_graph_impl = "full_iteration"``: the
#: dropless MoE padded to a fixed capacity with paged stashing, so no host synchronisation
#: on the per-expert token counts stalls the overlapped schedule): Megatron-Bridge commits
#: bac3ffebf (#4249, Qwen3), 7a8bd64b2 (#3983/#4226, DeepSeek-V3) and 0d3b6dd43 (#4173,
#: gpt-oss), first in v0.5.0 = container 26.06; the B200/B300 presets in v0.5.1 = 26.06.01
#: (``scripts/performance/configs/*/*_workload_base_configs.py`` at those tags; v0.6.0 =
#: 26.08 keeps them, ``src/megatron/bridge/perf_recipes``). Recipes that set
#: ``moe_a2a_overlap`` without these graphs are predicted with the all-to-all exposed: their
#: runs show no gain from it (gpt-oss-120b on 64 GB200 in BF16 ran 15,784 tokens/s/GPU in
#: 26.02 without it and 15,938 in 26.04 with it, the same layout). One exception, from 26.04.01:
#: DeepSeek-V3 on 256 B200 in MXFP8 (commit 5acef9309 of 2026-04-18, "b200 DSv3 better cfg":
#: PP8, VPP2, EP32 over four nodes, ``moe_a2a_overlap``, the DeepEP dispatcher, TE-scoped CUDA
#: graphs), the only layout of its run: exposed, even node-deduplicated, its all-to-all alone
#: (18 s) would take 91% of the published 19.7 s step, whose compute is about 18 s.
#: ``BRIDGE_FULL_ITERATION_GRAPH`` holds the recipes with full-iteration CUDA graphs, whose
#: rows are predicted with ``cuda_graph`` on too (:func:`cuda_graph_default`);
#: ``BRIDGE_EP_OVERLAP`` is those and the DeepSeek-V3 exception. Most other MoE recipes capture
#: per-layer Transformer Engine graphs (``cuda_graph_impl = "transformer_engine"``, scopes ``attn``,
#: ``moe_router``, ``moe_preprocess``): the router and the dispatcher's metadata preprocessing are
#: replayed, the dispatch, experts and combine stay eager. Treating those rows as free of
#: ``t_moe_layer`` was tried on 2026-11-27 (scopes read from every tag's presets) and not kept:
#: in-sample 7.83% -> 7.95% after the refit (Qwen3-235B-A22B on GB200/GB300 in 26.02-26.04 went from
#: 15% to 2% too slow, gpt-oss-120b on GB300 from 30% to 44% too fast); on top of a grouped-GEMM
#: depth factor that was also tried 7.61% -> 7.58%, too little for a new field and a table.
BRIDGE_FULL_ITERATION_GRAPH: dict[tuple[int, ...], frozenset[tuple[str, str, str]]] = {
    (26, 6): frozenset({
        ("Qwen3-30B-A3B", "b300", "mxfp8"), ("Qwen3-30B-A3B", "gb200", "mxfp8"),
        ("Qwen3-30B-A3B", "gb300", "mxfp8"), ("Qwen3-235B-A22B", "gb200", "mxfp8"),
        ("Qwen3-235B-A22B", "gb300", "mxfp8"), ("DeepSeek-V3-671B", "gb200", "mxfp8"),
        ("DeepSeek-V3-671B", "gb300", "mxfp8"), ("gpt-oss-120b", "gb200", "mxfp8"),
        ("gpt-oss-120b", "gb300", "mxfp8")}),
    (26, 6, 1): frozenset({
        ("Qwen3-30B-A3B", "b200", "mxfp8"), ("Qwen3-235B-A22B", "b200", "mxfp8"),
        ("Qwen3-235B-A22B", "b300", "mxfp8"), ("DeepSeek-V3-671B", "b300", "mxfp8")}),
}
BRIDGE_EP_OVERLAP: dict[tuple[int, ...], frozenset[tuple[str, str, str]]] = {
    (26, 4, 1): frozenset({("DeepSeek-V3-671B", "b200", "mxfp8")}), **BRIDGE_FULL_ITERATION_GRAPH}

#: Megatron-Bridge recipes that ran the attention core in FP8 (``fp8_attention``: Transformer
#: Engine ``fp8_dot_product_attention``), in the form of :data:`BRIDGE_EP_OVERLAP`. First set
#: in v0.5.0 = container 26.06 (no earlier tag sets it in ``scripts/performance``): the MXFP8
#: full-iteration presets of Qwen3-30B-A3B (B300, GB200, GB300) and Qwen3-235B-A22B (GB200,
#: GB300), gpt-oss-120b's ``*_FP8_MX_V2`` (GB200, GB300) and DeepSeek-V3's GB300 MXFP8
#: (``scripts/performance/configs/{qwen,gpt_oss,deepseek}/*_workload_base_configs.py``);
#: v0.5.1 = 26.06.01 adds Qwen3-30B-A3B on B200, Qwen3-235B-A22B on B200 and B300, and
#: DeepSeek-V3 on B300; v0.6.0 = 26.08 keeps them (``perf_recipes/qwen/common.py``
#: ``_enable_hybridep_full_iteration_mxfp8``, ``perf_recipes/gpt_oss/common.py``,
#: ``perf_recipes/deepseek/{b300,gb300}``). DeepSeek-V3's GB200 MXFP8 preset is the one
#: full-iteration recipe without it (``_enable_deepseek_full_iteration_mxfp8``'s default).
BRIDGE_FP8_ATTENTION: dict[tuple[int, ...], frozenset[tuple[str, str, str]]] = {
    (26, 6): frozenset({
        ("Qwen3-30B-A3B", "b300", "mxfp8"), ("Qwen3-30B-A3B", "gb200", "mxfp8"),
        ("Qwen3-30B-A3B", "gb300", "mxfp8"), ("Qwen3-235B-A22B", "gb200", "mxfp8"),
        ("Qwen3-235B-A22B", "gb300", "mxfp8"), ("DeepSeek-V3-671B", "gb300", "mxfp8"),
        ("gpt-oss-120b", "gb200", "mxfp8"), ("gpt-oss-120b", "gb300", "mxfp8")}),
    (26, 6, 1): frozenset({
        ("Qwen3-30B-A3B", "b200", "mxfp8"), ("Qwen3-235B-A22B", "b200", "mxfp8"),
        ("Qwen3-235B-A22B", "b300", "mxfp8"), ("DeepSeek-V3-671B", "b300", "mxfp8")}),
}

#: Megatron-Bridge recipes with a node-deduplicating dispatcher (``ep_dedup``: Megatron-Core's
#: flex dispatcher with HybridEP or DeepEP), in the form of :data:`BRIDGE_EP_OVERLAP`.
#: Nemotron 3 Super, on every GPU and dtype from its first published container (26.04):
#: ``moe_flex_dispatcher_backend="hybridep"`` in its first recipe, Megatron-Bridge commit
#: 988294b42 of 2026-03-30, ``scripts/performance/configs/nemotronh/
#: nemotron_3_workload_base_configs.py``, and in every ``perf_recipes/nemotronh/*`` at 067f987.
#: DeepSeek-V3 on B200 in MXFP8 from 26.04.01 (``"deepep"``, commit 5acef9309, above). The
#: other MoE recipes switched between the ``alltoall`` and ``flex`` dispatchers over the
#: containers, which the rows do not record and the recipes do (``moe_flex_dispatcher_backend`` in
#: the presets, ``moe_token_dispatcher_type`` in the ``*_pretrain_config_*`` functions); they are
#: predicted with ``ep_dedup`` off (so with the ``alltoall`` dispatcher's chunk sorts,
#: :func:`symcost.training.moe_chunk_sort`; marking the full-iteration recipes, which
#: dispatch with HybridEP inside one NVLink domain, was tried on 2026-12-08 and not kept:
#: in-sample 7.38% -> 7.56%, leave-one-source-out 15.91% -> 16.33%). Setting it from the
#: recipes was tried on 2026-11-27: in-sample
#: 7.83% -> 7.82% after the refit, but Qwen3-30B-A3B (EP16) and Qwen3-235B-A22B (EP32) on H100,
#: whose all-to-all crosses InfiniBand, went from 13-17% too slow to 20-26% too fast.
BRIDGE_EP_DEDUP: dict[tuple[int, ...], frozenset[tuple[str, str, str]]] = {
    (26, 4): frozenset({("Nemotron-3-Super-120B-A12B", ANY, ANY)}),
    (26, 4, 1): frozenset({("DeepSeek-V3-671B", "b200", "mxfp8")}),
}

#: Megatron-Bridge recipes that run their tensor-parallel collectives without Transformer
#: Engine's communication overlap although the row uses sequence parallelism (``tp_overlap``
#: off; every other MBRIDGE row with ``sp`` has it on, :data:`SOURCE_DEFAULTS`), in the form of
#: :data:`BRIDGE_EP_OVERLAP`. Llama 3 and 3.1 in NVFP4: ``cfg.comm_overlap.tp_comm_overlap =
#: False if precision == "nvfp4"`` in every ``llama3*_pretrain_config_*`` of
#: ``scripts/performance/configs/llama3``/``llama31`` (v0.2.0 = container 25.11) and
#: ``configs/llama`` (v0.3.0 to v0.5.1), ``tp_comm_overlap = False`` in the NVFP4 functions of
#: ``src/megatron/bridge/perf_recipes/llama`` (v0.6.0). Qwen3-235B-A22B on H100 (TP2):
#: ``CommOverlapConfig(tp_comm_overlap=False)`` in ``qwen3_235b_a22b_*_h100`` at every tag
#: from v0.2.0 to v0.6.0 (``perf_recipes/qwen/h100/qwen3_moe.py``). Nemotron 3 Super and Ultra
#: (TP2 on GB200, Super's NVFP4 on B200): no communication-overlap configuration at all
#: (``ConfigContainer.comm_overlap`` None: Megatron-Core's ``tp_comm_overlap`` default, off) in
#: ``src/megatron/bridge/recipes/nemotronh/nemotron_3_super.py`` and ``nemotron_3_ultra.py``
#: and their ``perf_recipes/nemotronh/*`` presets (v0.4.0 = 26.04, their first container, to
#: v0.6.0 = 26.08), while Nemotron 3 Nano's recipes set it (at TP1, where it does nothing). The
#: 25.09 rows (no tagged release) keep the default.
BRIDGE_TP_OVERLAP_OFF: dict[tuple[int, ...], frozenset[tuple[str, str, str]]] = {
    (25, 11): frozenset({("Llama-3-70B", ANY, "nvfp4"), ("Llama-3.1-405B", ANY, "nvfp4"),
                         ("Qwen3-235B-A22B", "h100-sxm5-80gb", ANY)}),
    (26, 4): frozenset({("Nemotron-3-Super-120B-A12B", ANY, ANY)}),
    (26, 8): frozenset({("Nemotron-3-Ultra", ANY, ANY)}),
}


def bridge_recipe_default(table: Mapping[tuple[int, ...], frozenset[tuple[str, str, str]]],
                          source: str, notes: object, model_name: str, hardware: str,
                          dtype: str) -> bool:
    """Whether an MBRIDGE row's recipe had a setting: its container (:func:`container_of`)
    is at or after one whose ``table`` entry covers its model, canonical hardware and dtype
    (:data:`ANY` matches every hardware or dtype). False for every other source and for rows
    naming no container. The matching is :func:`bridge_recipe_latest`'s, every entry on."""
    on = {first: dict.fromkeys(runs, True) for first, runs in table.items()}
    return bridge_recipe_latest(on, source, notes, model_name, hardware, dtype) is not None


def bridge_recipe_latest(table: Mapping[tuple[int, ...], Mapping[tuple[str, str, str], V]],
                         source: str, notes: object, model_name: str, hardware: str,
                         dtype: str) -> V | None:
    """The value an MBRIDGE row's recipe had for a setting: of the ``table`` entries (first
    container -> (``model`` cell, canonical hardware, dtype) -> value; :data:`ANY` matches
    every hardware or dtype) that cover the row, the one of the latest container at or
    before the row's (:func:`container_of`). None for every other source, for rows naming no
    container and when no entry covers the row."""
    container = container_of(notes)
    if source != "MBRIDGE" or container is None:
        return None
    found = [(first, value) for first, runs in table.items() if container >= first
             for (m, h, d), value in runs.items()
             if m == model_name and h in (ANY, hardware) and d in (ANY, dtype)]
    return max(found, key=lambda f: f[0])[1] if found else None


#: Layouts a Megatron-Bridge performance page printed wrongly, as the container's recipe ran
#: them: container -> (``model`` cell, canonical ``hardware``, ``dtype``) -> column -> (as
#: printed, as run), ``""`` for a blank cell. Exact container only, and applied only while every
#: listed cell reads as printed (a corrected data file is left alone); each correction is
#: recorded in the prepared row's ``defaults`` (``symcost validate --json``: ``assumed``).
#: 26.02.01: the DGX-GB300 Llama-3-70B MXFP8 and NVFP4 rows print MBS 2 and no VP, the NVFP4 one
#: also PP 1 (no FSDP either: about 540 GiB per GPU, no 288 GB GPU holds it), while that
#: container's recipes (Megatron-Bridge v0.3.1, ``LLAMA3_70B_PRETRAIN_CONFIG_GB300_FP8_MX_V2``
#: and ``..._NVFP4_V2`` in
#: ``scripts/performance/configs/llama/llama3_workload_base_configs.py``) run TP1 PP4 VP5 MBS 1,
#: the layout the 26.02 and 26.04 pages print for the same two runs, at 4,596 and 4,742 (MXFP8)
#: and 6,798 and 7,397 (NVFP4) tokens/s/GPU around 26.02.01's 4,798 and 7,002; and
#: Llama-3.1-405B on 256 GB200 in NVFP4 with VP 4, where the recipe of the tags v0.3.0 to v0.4.0
#: (``LLAMA31_405B_PRETRAIN_CONFIG_GB200_NVFP4_V2``) and the 26.02 and 26.04 pages have VP 8
#: (1,076, 1,083 and 1,136 tokens/s/GPU). The rule: a page's layout that contradicts its
#: container's recipe while the pages before and after print the recipe's layout for the same
#: run. Not listed because a neighbouring page agrees with the printed layout: Qwen3-30B-A3B on
#: 16 H100 (26.02.01 prints 26.02's PP2 VP12 EP8, v0.3.1 has PP1 EP16 as 26.04 prints),
#: gpt-oss-120b on B200/B300 (EP8 as 26.04, v0.3.1 has EP64 as 26.02), Qwen3-235B-A22B on B300
#: and DeepSeek-V3 on B200/B300 in 26.04.01 (the later pages print the same layouts).
#: A second rule, for runs that no other page prints: a printed layout that the page's own GA column
#: (``ga=`` in the notes: GBS = DP x MBS x GA) or the GPU's memory rules out is corrected to the
#: recipe's layout. 25.09: the DGX-GB200 Llama-3-70B FP8 row prints its second configuration in
#: parentheses (FSDP 0, TP 2, PP 4, VP 5, GA 16) next to the first one's MBS 2, which the second
#: cannot have had (8 x 2 x 16 = 256, not the GBS 128; 213 GiB per GPU in symcost, of 184 usable);
#: MBS 1, the value of the next tag's (v0.2.0) MXFP8 recipe ``LLAMA3_70B_GB200_FP8_MX_BASE_CONFIG``,
#: gives 128 and 130 GiB. 25.11: gpt-oss-120b on 64 H100 prints MBS 4 with GA 2 (16 x 4 x 2 = 128,
#: not the GBS 512; 123 GiB on an 80 GB GPU), and the recipe of the tags v0.2.0 to v0.4.1 has MBS 1
#: (``GPT_OSS_120B_H100_BF16_BASE_CONFIG``, later ``..._PRETRAIN_CONFIG_H100_BF16_V1``, in
#: ``scripts/performance/configs/gpt_oss/``), as the 26.02 to 26.04.01 pages print for its GBS-1280
#: sibling (59 GiB; the page's GA fits neither MBS). Also corrected, on the recipe's evidence:
#: gpt-oss-120b on 64 B200 at GBS 512, printed with EP8 (GA consistent; 180 GiB of 178 in symcost),
#: where those tags' recipe (``GPT_OSS_120B_B200_BF16_BASE_CONFIG``, later ``..._V1``) has EP64 (134
#: GiB) and its 8,213 tokens/s/GPU is that of the EP64 run on the 26.02 page (8,047), not of the EP8
#: run on 26.04 (13,045). Not corrected: Qwen3-235B-A22B on 256 GB300 in 25.11 BF16 prints PP4 VP12
#: EP16 MBS 2 with GA 32 (4,096, not the GBS 8,192), but the recipe has that layout (v0.3.0
#: ``QWEN3_235B_A22B_PRETRAIN_CONFIG_GB300_BF16_V2``): the GA is the misprint.
BRIDGE_LAYOUT_ERRATA: dict[tuple[int, ...], dict[tuple[str, str, str],
                                                 dict[str, tuple[str, str]]]] = {
    (25, 9): {
        ("Llama-3-70B", "gb200", "fp8"): {"tp": ("2", "2"), "pp": ("4", "4"),
                                          "vpp": ("5", "5"), "micro_batch": ("2", "1")},
    },
    (25, 11): {
        ("gpt-oss-120b", "h100-sxm5-80gb", "bf16"): {"micro_batch": ("4", "1")},
        ("gpt-oss-120b", "b200", "bf16"): {"ep": ("8", "64")},
    },
    (26, 2, 1): {
        ("Llama-3-70B", "gb300", "mxfp8"): {"pp": ("4", "4"), "vpp": ("", "5"),
                                            "micro_batch": ("2", "1"), "dp": ("16", "16")},
        ("Llama-3-70B", "gb300", "nvfp4"): {"pp": ("1", "4"), "vpp": ("", "5"),
                                            "micro_batch": ("2", "1"), "dp": ("64", "16")},
        ("Llama-3.1-405B", "gb200", "nvfp4"): {"vpp": ("4", "8")},
    },
}


def layout_errata(row: Mapping[str, Any], source: str) -> dict[str, tuple[str, str]]:
    """The corrections of :data:`BRIDGE_LAYOUT_ERRATA` that apply to a measurements row.

    Args:
        row: the row, column -> cell (the format of ``../shared/validation/``).
        source: its source id (:func:`source_of` of its ``case_id``).

    Returns:
        column -> (as printed, as run), both as cell strings; empty for sources other than
        MBRIDGE, for runs without an entry and for rows whose cells no longer read as printed.
    """
    container = container_of(cell(row, "notes"))
    if source != "MBRIDGE" or container is None:
        return {}
    key = (str(cell(row, "model") or ""), str(cell(row, "hardware") or "").lower(),
           str(cell(row, "dtype") or "").lower())
    fix = BRIDGE_LAYOUT_ERRATA.get(container, {}).get(key, {})
    as_printed = all(str(cell(row, col) or "").strip() == old for col, (old, _) in fix.items())
    return dict(fix) if as_printed else {}


def ep_overlap_default(source: str, notes: object, model_name: str, hardware: str,
                       dtype: str) -> bool:
    """Whether an MBRIDGE row ran its MoE all-to-all overlapped (:data:`BRIDGE_EP_OVERLAP`,
    read by :func:`bridge_recipe_default`)."""
    return bridge_recipe_default(BRIDGE_EP_OVERLAP, source, notes, model_name, hardware, dtype)


def cuda_graph_default(source: str, notes: object, model_name: str, hardware: str,
                       dtype: str) -> bool:
    """Whether an MBRIDGE row's recipe captured the whole iteration as CUDA graphs
    (:data:`BRIDGE_FULL_ITERATION_GRAPH`, read by :func:`bridge_recipe_default`)."""
    return bridge_recipe_default(BRIDGE_FULL_ITERATION_GRAPH, source, notes, model_name,
                                 hardware, dtype)


def fp8_attention_default(source: str, notes: object, model_name: str, hardware: str,
                          dtype: str) -> bool:
    """Whether an MBRIDGE row's recipe ran the attention matmuls in FP8
    (:data:`BRIDGE_FP8_ATTENTION`, read by :func:`bridge_recipe_default`)."""
    return bridge_recipe_default(BRIDGE_FP8_ATTENTION, source, notes, model_name, hardware,
                                 dtype)


def ep_dedup_default(source: str, notes: object, model_name: str, hardware: str,
                     dtype: str) -> bool:
    """Whether an MBRIDGE row dispatched its tokens node-deduplicated
    (:data:`BRIDGE_EP_DEDUP`, read by :func:`bridge_recipe_default`)."""
    return bridge_recipe_default(BRIDGE_EP_DEDUP, source, notes, model_name, hardware, dtype)


def tp_overlap_off_default(source: str, notes: object, model_name: str, hardware: str,
                           dtype: str) -> bool:
    """Whether an MBRIDGE row's recipe ran its tensor-parallel collectives without overlap
    (:data:`BRIDGE_TP_OVERLAP_OFF`, read by :func:`bridge_recipe_default`)."""
    return bridge_recipe_default(BRIDGE_TP_OVERLAP_OFF, source, notes, model_name, hardware,
                                 dtype)


#: Megatron-Bridge recipes that offload activations to host memory
#: (``activation_offload_layers``, Megatron-Core ``--cpu-offloading-num-layers``): first
#: container -> (``model`` cell, canonical ``hardware``, ``dtype``) -> layers; a row of that
#: container or a later one takes the value of the latest entry at or before it
#: (:func:`activation_offload_default`). Llama-3-70B's FP8 (current scaling) FSDP recipes on
#: 64 GB200 and GB300: ``cpu_offloading_num_layers`` 40 and 20 in
#: ``LLAMA3_70B_*_GB200_FP8_CS_*`` / ``*_GB300_FP8_CS_*`` of
#: ``scripts/performance/configs/llama3/workload_base_configs.py`` (v0.2.0 = container 25.11)
#: and ``configs/llama/llama3_workload_base_configs.py`` (v0.3.0-v0.5.1 = 26.02-26.06.01) and
#: ``src/megatron/bridge/perf_recipes/llama/gb200|gb300/llama3.py`` (v0.6.0 = 26.08), the same
#: values in every variant. Container 25.09 (v0.1.0rc4,
#: ``scripts/performance/configs/llama3/llama3_70b_llm_pretrain.yaml`` and
#: ``llama31/llama31_405b_llm_pretrain.yaml``, GB200 ``fp8_cs``): 40 for Llama-3-70B on 64 GPUs
#: and 95 for Llama-3.1-405B on 128 (TP2 FSDP). Their MXFP8 and NVFP4 recipes, the H100 one
#: and the Llama-3.1-405B ones at 256 GPUs offload nothing (the B200 FP8 recipe's 5 layers and
#: the BF16 recipes' 20-30 have no row in the shared data). Every offloading recipe is a
#: Megatron-FSDP one (``use_megatron_fsdp``), so only rows sharded as FSDP (``zero_stage``
#: 3) take these values: the 25.09 page prints its FP8 current-scaling runs (FSDP, offloaded)
#: and its MXFP8 runs (pipelined, DDP) under one FP8 label.
BRIDGE_ACTIVATION_OFFLOAD: dict[tuple[int, ...], dict[tuple[str, str, str], int]] = {
    (25, 9): {("Llama-3-70B", "gb200", "fp8"): 40, ("Llama-3.1-405B", "gb200", "fp8"): 95},
    (25, 11): {("Llama-3-70B", "gb300", "fp8"): 20},
}


def activation_offload_default(source: str, notes: object, model_name: str, hardware: str,
                               dtype: str, workload: str, zero: int) -> int:
    """Layers whose activations an MBRIDGE FSDP pretraining row's recipe offloaded to host
    memory (:data:`BRIDGE_ACTIVATION_OFFLOAD`: the latest entry at or before the row's
    container, :func:`container_of`, that names its model, canonical hardware and dtype); 0
    for every other source, for fine-tuning rows (``workload`` ``finetune``: their SFT and
    LoRA recipes are other configs), for rows not sharded as FSDP (``zero`` below 3: another
    recipe), for rows naming no container and for recipes without offload."""
    if workload != "train" or zero != 3:
        return 0
    return bridge_recipe_latest(BRIDGE_ACTIVATION_OFFLOAD, source, notes, model_name, hardware,
                                dtype) or 0


#: Megatron-Bridge recipes that recompute selected modules (Megatron-Core
#: ``recompute_granularity = "selective"`` with ``recompute_modules``), in the form of
#: :data:`BRIDGE_ACTIVATION_OFFLOAD`: first container -> (``model`` cell, canonical
#: ``hardware``, ``dtype``; :data:`ANY` matches every one) -> the modules as a canonical
#: ``recompute_modules`` list, ``""`` for none; a row takes the latest entry at or before its
#: container (:func:`recompute_default`). Read by executing each tag's
#: ``scripts/performance/configs/*/*workload_base_configs.py`` (the V2 presets inherit from
#: V1 through nested ``dataclasses.replace``) and picking the preset whose layout (tp, pp,
#: vpp, ep, micro and global batch) is the row's: v0.1.0rc4 = container 25.09
#: (``deepseek_v3_llm_pretrain.yaml``: ``recompute_granularity: "selective"`` without
#: modules, Megatron-Core's default ``core_attn``), v0.2.0 = 25.11 (its DeepSeek-V3 GB200
#: FP8 and GB300 rows ran layouts that are not in the tag; they take the tag's values for
#: their GPU), v0.3.0/v0.3.1 = 26.02/26.02.01, v0.4.0/v0.4.1 = 26.04/26.04.01 (DeepSeek-V3 on
#: B200 in MXFP8: commit 5acef9309, above), v0.5.0/v0.5.1 = 26.06/26.06.01, and
#: ``src/megatron/bridge/perf_recipes/<family>/<gpu>/*.py`` at v0.6.0 = 26.08. In v0.2.0 the
#: performance scripts set the modules without the selective granularity, which only
#: DeepSeek-V3's script sets (``set_deepseek_v3_common_configs``): gpt-oss ran 25.11
#: without recomputation; from v0.3.0 on, setting modules sets the granularity too
#: (``utils/overrides._set_recompute_overrides``). Megatron-Core's ``mlp`` recomputes the
#: dense MLP layers only (``TransformerLayer``: not an ``MoELayer``), as symcost's does. The
#: recipes that recompute ``moe`` (the whole MoE layer: Nemotron 3 Nano on H100), which
#: symcost does not model, are left out. The recipes that recompute whole layers are in
#: :data:`BRIDGE_RECOMPUTE_LAYERS`. Qwen3's scripts turn recomputation off
#: (``set_qwen3_common_configs``).
BRIDGE_RECOMPUTE: dict[tuple[int, ...], dict[tuple[str, str, str], str]] = {
    (25, 9): {("DeepSeek-V3-671B", ANY, ANY): "core_attn"},
    (25, 11): {("DeepSeek-V3-671B", "gb200", ANY): "mla_up_proj",
               ("DeepSeek-V3-671B", "gb300", ANY): "moe_act",
               ("DeepSeek-V3-671B", "b200", ANY): "mla_up_proj"},
    (26, 2): {("DeepSeek-V3-671B", "gb200", "mxfp8"): "mla_up_proj",
              ("DeepSeek-V3-671B", "gb300", "mxfp8"): "mla_up_proj",
              ("DeepSeek-V3-671B", "b200", "mxfp8"): "mla_up_proj",
              ("DeepSeek-V3-671B", "b300", "mxfp8"): "mla_up_proj",
              ("gpt-oss-120b", "b200", "bf16"): "layernorm,moe_act",
              ("gpt-oss-120b", "gb200", "bf16"): "layernorm,moe_act",
              ("gpt-oss-120b", "h100-sxm5-80gb", "bf16"): "layernorm,moe_act"},
    (26, 2, 1): {("Kimi-K2", "gb300", "mxfp8"): "mla_up_proj"},
    (26, 4): {("DeepSeek-V3-671B", "gb200", "mxfp8"): "mlp",
              ("Nemotron-3-Super-120B-A12B", "b200", "mxfp8"): "layernorm,moe_act",
              ("Nemotron-3-Super-120B-A12B", "b300", "nvfp4"): "layernorm,moe_act"},
    (26, 4, 1): {("DeepSeek-V3-671B", "b200", "mxfp8"): "mla_up_proj,mlp"},
    (26, 6): {("DeepSeek-V3-671B", "gb200", "mxfp8"): "mla_up_proj",
              ("DeepSeek-V3-671B", "gb300", "mxfp8"): ""},
}


#: Megatron-Bridge recipes that recompute the first layers of each pipeline chunk in full
#: (``recompute_num_layers``: ``recompute_granularity = "full"``, ``recompute_method =
#: "block"``, set by ``utils/helpers.set_recompute_overrides``), in the form of
#: :data:`BRIDGE_ACTIVATION_OFFLOAD`: first container -> (``model`` cell, canonical
#: ``hardware``, ``dtype``) -> layers (``recompute_layers`` with ``recompute = full``). Read
#: like :data:`BRIDGE_RECOMPUTE`: Llama-3-8B on 8 H100 in FP8 (current scaling, FSDP), 5 in
#: ``LLAMA3_8B_H100_FP8_CS_BASE_CONFIG`` of v0.2.0 = 25.11 and in the V1 preset of every
#: later tag (25.09's YAML has none). The other recipes with it have no row in the shared
#: data (Llama-3.1-405B in NVFP4 at 128 GPUs: 1; Llama-3-70B on B200 in FP8 in 25.09: 5).
BRIDGE_RECOMPUTE_LAYERS: dict[tuple[int, ...], dict[tuple[str, str, str], int]] = {
    (25, 11): {("Llama-3-8B", "h100-sxm5-80gb", "fp8"): 5},
}


def recompute_layers_default(source: str, notes: object, model_name: str, hardware: str,
                             dtype: str, workload: str) -> int:
    """Layers per pipeline chunk an MBRIDGE pretraining row's recipe recomputed in full
    (:data:`BRIDGE_RECOMPUTE_LAYERS`, read by :func:`bridge_recipe_latest`); 0 when no entry
    covers the row (other sources, fine-tuning rows, rows naming no container)."""
    if workload != "train":
        return 0
    return bridge_recipe_latest(BRIDGE_RECOMPUTE_LAYERS, source, notes, model_name, hardware,
                                dtype) or 0


def recompute_default(source: str, notes: object, model_name: str, hardware: str,
                      dtype: str, workload: str) -> str | None:
    """The modules an MBRIDGE pretraining row's recipe recomputed selectively
    (:data:`BRIDGE_RECOMPUTE`, read by :func:`bridge_recipe_latest`): a canonical
    ``recompute_modules`` list, ``""`` when the recipe recomputed nothing, None when no
    entry covers the row (other sources, fine-tuning rows, rows naming no container)."""
    if workload != "train":
        return None
    return bridge_recipe_latest(BRIDGE_RECOMPUTE, source, notes, model_name, hardware, dtype)


#: Megatron-Bridge runs whose precision recipe keeps layers in BF16 (``bf16_layers``):
#: (``model`` cell, canonical ``dtype``) -> layers. Nemotron 3 Super in NVFP4 keeps its last
#: 14 blocks in BF16 (``nemotron_3_super_bf16_with_nvfp4_mixed``: ``first_last_layers_bf16``,
#: ``num_layers_at_end_in_bf16 = 14``), in its performance configs since Megatron-Bridge commit
#: 8625e4a38 of 2026-04-07; its published runs start with container 26.04, whose NVFP4 rates
#: are within 6% of the later containers' (which ones ran it before is not recorded). The other
#: recipes' performance precisions keep none (``perf_recipes/_common._perf_precision`` turns
#: ``first_last_layers_bf16`` off for fp8; MXFP8 and NVFP4 leave it off).
BRIDGE_BF16_LAYERS: dict[tuple[str, str], int] = {("Nemotron-3-Super-120B-A12B", "nvfp4"): 14}


#: how a source counts the FLOPs of its ``model``/``hardware`` FLOP-rate metrics (the row's
#: ``flops_convention`` says which FLOPs; this says with whose formula), from the
#: ``flops_counter`` entries of :data:`SOURCE_DEFAULTS`: ``megatron_bridge`` and ``megatron``
#: (:func:`megatron_flops_per_token`), else the PaLM/llm-foundry count
#: (:func:`llm_foundry_flops_per_token`).
FLOPS_COUNTERS: dict[str, str] = {src: str(d["flops_counter"])
                                  for src, d in SOURCE_DEFAULTS.items() if "flops_counter" in d}


def model_flops_per_token(row: PreparedRow, n_params: float, recompute: str) -> float:
    """Model FLOPs per token of ``row`` by its source's formula (``row.flops_counter``, from
    :data:`FLOPS_COUNTERS` and :func:`flops_counter_of`),
    with the row's recomputation counted for ``recompute`` ``selective``/``full`` (the
    ``hardware`` convention: full recomputes the forward, a third of the total; selective
    the attention core's forward). ``n_params``: the PaLM/llm-foundry count's N."""
    cfg, m = row.config, row.model
    assert cfg.seq_len is not None
    s = float(cfg.seq_len)
    if not row.flops_counter:
        return float(llm_foundry_flops_per_token(n_params, m.layers, m.hidden, s, recompute))
    total, attn = megatron_flops_per_token(m, s, counter=row.flops_counter, tp=int(cfg.tp))
    return total * (4.0 / 3.0 if recompute == "full" else 1.0) + (
        attn / 3.0 if recompute == "selective" else 0.0)


def metric_factor(row: PreparedRow) -> tuple[float, float]:
    """The row's metric as ``value = coef * step_time ** power`` (step time in s).

    Conventions (README of the measurements format):

    * ``iteration_time_s``, ``train_step_time_s``: the step time (coef 1, power +1).
    * ``achieved_tflops_per_gpu``: F / (step time * GPUs) / 1e12, where F, the FLOPs per
      step, follows the row's ``flops_convention``: ``megatron_sc21`` or blank (NAR21,
      MLM22): :func:`nar21_flops`; ``model`` (e.g. MLM24, whose TFLOP/s equal MFU x 989 TFLOP/s):
      :func:`model_flops_per_token` without recomputation times tokens per step, the
      count of the ``MFU`` metric, so every metric of one run implies the same step time
      (the source's own formula, :data:`FLOPS_COUNTERS`: Megatron-Bridge, Megatron-LM/NeMo,
      else PaLM/llm-foundry); ``hardware``: the same with the row's recomputation counted
      (the ``HFU`` count).
    * ``pct_of_peak``: the same over the dense peak of the row's dtype (312 TFLOP/s on A100),
      in percent.
    * ``aggregate_pflops``: F / step time / 1e15.
    * ``MFU`` / ``HFU`` (percent), ``model_tflops_per_gpu``:
      :func:`model_flops_per_token` * tokens per step / (step time * GPUs) over the dense
      peak of the row's dtype (fp8 rows: the fp8 peak) / over 1e12. ``N`` is the published
      ``n_params_b``, else the model's exact parameter count; for a mixture-of-experts model
      the active parameters (:meth:`~symcost.models.ModelSpec.active_params`).
    * ``tokens_per_s_per_gpu``, ``tokens_per_s``, ``samples_per_s``: ``B*s``, ``B*s``, ``B``
      per step time, per GPU for the first.

    Every metric except the step time itself is inversely proportional to the step time, so
    errors of every metric are errors of the predicted step time.

    Returns:
        ``(coef, power)`` with ``power`` in ``{+1, -1}``.

    Raises:
        RowError: unknown metric.
    """
    cfg, m, hw = row.config, row.model, row.hardware
    # a prepared row's configuration is resolved: every derived field is set
    assert cfg.global_batch is not None and cfg.seq_len is not None and cfg.num_gpus is not None
    B, s, n = float(cfg.global_batch), float(cfg.seq_len), float(cfg.num_gpus)
    peak = hw.peak(GEMM_PEAK_KEY[cfg.dtype])
    tokens = B * s
    # MoE: model FLOPs count the parameters a token uses (the published n_params_b counts
    # every expert); dense: the published count, else the model's
    N = (float(m.active_params()) if m.is_moe
         else row.n_params if row.n_params is not None else float(m.num_params()))
    metric = row.metric
    if metric in ("iteration_time_s", "train_step_time_s"):
        return 1.0, 1.0
    if metric in ("achieved_tflops_per_gpu", "pct_of_peak", "aggregate_pflops"):
        if row.flops_convention in ("model", "hardware"):
            mode = cfg.recompute if row.flops_convention == "hardware" else "none"
            F = model_flops_per_token(row, N, mode) * tokens
        else:
            F = float(nar21_flops(B, s, m.layers, m.hidden, m.vocab))
        scale = {"achieved_tflops_per_gpu": 1.0 / (n * 1e12), "pct_of_peak": 100.0 / (n * peak),
                 "aggregate_pflops": 1e-15}[metric]
        return F * scale, -1.0
    if metric in ("MFU", "model_tflops_per_gpu", "HFU"):
        mode = cfg.recompute if metric == "HFU" else "none"
        per_token = model_flops_per_token(row, N, mode)
        denom = n * (1e12 if metric == "model_tflops_per_gpu" else peak / 100.0)
        return per_token * tokens / denom, -1.0
    if metric == "tokens_per_s_per_gpu":
        return tokens / n, -1.0
    if metric == "tokens_per_s":
        return tokens, -1.0
    if metric == "samples_per_s":
        return B, -1.0
    raise RowError(f"unknown metric {metric!r} (known: {', '.join(KNOWN_METRICS)})")


# ----------------------------------------------------------------------------- reading rows
#: package-relative location of the shipped measurements (a copy of
#: ``shared/validation/published_measurements.csv`` and its ``README.md``, which documents every
#: column, metric and source).
BUILTIN_MEASUREMENTS = ("data", "validation", "published_measurements.csv")


def builtin_measurements() -> Path:
    """Path of the published measurements shipped with the package.

    The file is a byte-identical copy of ``shared/validation/published_measurements.csv``
    (sources: NAR21, MLM22, MPT, TRT017, MLPI40, NEMO2407, MLM24, MBRIDGE, ZHANG23; the
    ``README.md`` next to it, also shipped, defines every column, metric convention and
    source), installed as package data (``symcost/data/validation/``), so validation and
    calibration work without the repository's ``shared/`` folder.

    Returns:
        Path to the CSV inside the installed package (found with :mod:`importlib.resources`).

    Raises:
        MeasurementsError: the installation does not contain the file (a broken install, or a
            package imported from a zip archive).
    """
    res = resources.files("symcost").joinpath(*BUILTIN_MEASUREMENTS)
    path = Path(str(res))
    if not isinstance(res, Path) or not path.is_file():
        raise MeasurementsError(f"measurements: the built-in file {'/'.join(BUILTIN_MEASUREMENTS)}"
                                " is missing from the symcost installation")
    return path


def load_measurements(path: str | os.PathLike[str] | TextIO | None = None) -> pd.DataFrame:
    """Read a measurements CSV; every cell as text (parsed per row by :func:`prepare_rows`).

    Args:
        path: a local CSV file in the format of
            ``shared/validation/published_measurements.csv`` (UTF-8, an optional byte-order
            mark is ignored; no URLs, no compression), or an open text file; None reads the
            built-in copy (:func:`builtin_measurements`).

    Returns:
        DataFrame with one row per measurement, blank cells as NaN, and a ``source_id``
        column added (the ``case_id`` prefix).

    Raises:
        MeasurementsError: unreadable file, not CSV (including a row with more fields than
            the header, which would otherwise shift every column), a duplicated or a
            required column missing, or no data rows (``"<path>: no measurement rows"``).
    """
    if path is None:
        path = builtin_measurements()
    try:
        if hasattr(path, "read"):
            text = path.read()
            path = getattr(path, "name", "<file>")
        else:
            with open(path, encoding="utf-8-sig", newline="") as fh:
                text = fh.read()
    except FileNotFoundError:
        raise MeasurementsError(f"measurements: {path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise MeasurementsError(f"measurements: {path}: cannot read ({exc})") from None
    header = next(csv.reader(io.StringIO(text)), [])
    names = [c.strip() for c in header]
    dup = sorted({c for c in names if names.count(c) > 1})
    if dup:
        raise MeasurementsError(f"measurements: {path}: duplicate column(s) {', '.join(dup)}")
    try:
        with warnings.catch_warnings():
            # index_col=False: a row longer than the header is an error, not an index column
            warnings.simplefilter("error", pd.errors.ParserWarning)
            df = pd.read_csv(io.StringIO(text), dtype=str, skipinitialspace=True,
                             index_col=False)
    except pd.errors.ParserWarning:
        line = next((i for i, rec in enumerate(csv.reader(io.StringIO(text)), start=1)
                     if len(rec) > len(header)), "?")
        raise MeasurementsError(f"measurements: {path}: not a valid CSV (line {line} has more "
                                f"fields than the header's {len(header)})") from None
    except (pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else "empty file"
        raise MeasurementsError(f"measurements: {path}: not a valid CSV ({msg})") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in REQUIRED_COLUMNS if c not in df.columns]
    if missing:
        sep = next((c for c in (";", "\t", "|") if len(names) == 1 and c in names[0]), None)
        hint = f"; the file seems to separate fields with {sep!r}, not ','" if sep else ""
        raise MeasurementsError(f"measurements: {path}: missing required column(s) "
                                f"{', '.join(missing)} (the format needs "
                                f"{', '.join(REQUIRED_COLUMNS)}{hint})")
    if df.empty:
        raise MeasurementsError(f"measurements: {path}: no measurement rows")
    df = df.copy()
    df["case_id"] = df["case_id"].fillna("").astype(str).str.strip()
    df["source_id"] = df["case_id"].map(source_of)
    return df.reset_index(drop=True)


def preset_for_name(name: str | None) -> tuple[ModelSpec | None, ModelSpec]:
    """The preset a model name maps to, and the preset supplying architecture flags.

    The name as written, without a parenthesised remark, a Hugging Face organisation or the
    words that name a variant of the same architecture, by
    :func:`~symcost.models.find_preset` (case, spaces, ``-`` and ``_`` ignored; e.g.
    ``'GPT-1.7B (Megatron SC21)'`` -> ``gpt-1.7b``, ``'GPT-3 175B'`` -> ``gpt3-175b``,
    ``'MPT-7b'`` -> ``mpt-7b``, ``'LLAMA4-Scout-LLM'`` -> ``llama-4-scout``); never a file, no
    substring guessing.

    Returns:
        ``(exact, flags)``: the matched preset or None, and the preset whose architecture flags
        apply (the match, else the family preset of :data:`FAMILY_PRESETS`, else
        ``gpt3-175b``).
    """
    if name:
        spec = find_preset(str(name))
        if spec is not None:
            return spec, spec
        low = str(name).strip().lower()
        for prefix, preset in FAMILY_PRESETS:
            if low.startswith(prefix):
                return None, get_model(preset)
    return None, get_model(GPT_DEFAULT_PRESET)


def flash_attention_rule(source: str, notes: str | None) -> tuple[bool, str]:
    """Whether the run used FlashAttention, and why.

    Rule, first match wins: notes mentioning "unfused" or "no flash" -> off; notes mentioning
    "flash" (e.g. "FlashAttention") -> on; the source's entry in :data:`SOURCE_DEFAULTS`;
    otherwise on (the default of current training stacks).

    Returns:
        ``(flash, reason)``.
    """
    text = (notes or "").lower()
    if "unfused" in text or "no flash" in text or "without flash" in text:
        return False, "notes: unfused attention"
    if "flash" in text:
        return True, "notes mention FlashAttention"
    if "flash_attention" in SOURCE_DEFAULTS.get(source, {}):
        return bool(SOURCE_DEFAULTS[source]["flash_attention"]), f"default for source {source}"
    return True, "default (FlashAttention)"


#: how a row's ``notes`` say that its source published the run as a known performance
#: regression (MBRIDGE 26.06.01 gpt-oss-120b: "footnote: Performance regression in GPT-OSS
#: 120B pre-training is a known issue ... It will be resolved with the next container
#: release", Megatron-Bridge docs/performance-summary-archive.md @067f987).
REGRESSION_NOTE = re.compile(r"\bperformance regression\b", re.IGNORECASE)


def unmodelled_reason(row: Row) -> str | None:
    """Why the training model cannot represent a measurement row, or None.

    Checked: ``notes`` naming a hybrid Mamba-Transformer whose model has no hybrid preset
    (its block pattern and Mamba-2 sizes are in no column; the Nemotron-H, Nemotron 3 and
    3.5 presets have them); ``notes`` saying the source published the run as a
    known performance regression (:data:`REGRESSION_NOTE`: a software defect its source
    announces a fix for, not what the configuration achieves; predicting it would teach the
    calibration the defect); ``quant`` other than ``nf4`` (quantized base weights).

    Args:
        row: one measurement row (column -> cell; blank cells None/NaN/empty).

    Returns:
        A one-line reason naming the column, or None when the row is a dense pre-training run.

    Raises:
        RowError: one of those columns holds a malformed number.
    """
    notes = (cell(row, "notes") or "").lower()
    if "mamba" in notes or "hybrid" in notes:
        exact, _ = preset_for_name(cell(row, "model"))
        if exact is None or not exact.is_hybrid:
            return (f"model: hybrid Mamba-Transformer {cell(row, 'model')!r} has no preset "
                    "with its block pattern and Mamba-2 sizes (no column gives them)")
    if REGRESSION_NOTE.search(notes):
        return ("notes: the source flags this run as a known performance regression (a "
                "software defect, not what the configuration achieves)")
    # [finetune] offload, quant (nf4) and finetune (lora/qlora) are modelled: finetune_columns
    quant = cell(row, "quant")
    if quant is not None and str(quant).lower() != "nf4":
        return f"quant: {quant!r} base-weight quantization is not modelled (only nf4)"
    return None


def _model_for_row(row: Row, source: str, seq: int | None) -> ModelSpec:
    exact, flags = preset_for_name(cell(row, "model"))
    shape: dict[str, Any] = {}
    for col, fld in _SHAPE_COLUMNS.items():
        v = cell_int(row, col)
        if v is None and exact is not None:
            v = getattr(exact, fld)
        elif v is None and col in _GPT_DEFAULTS and shape.get(_GPT_DEFAULTS[col][0]):
            v = shape[_GPT_DEFAULTS[col][0]] * _GPT_DEFAULTS[col][1]
        elif v is None and col == "vocab":
            v = flags.vocab
        elif v is None:
            raise RowError(f"{col}: blank and model {cell(row, 'model')!r} is not a preset")
        shape[fld] = v
    for col in _MOE_COLUMNS:
        v = cell_int(row, col)
        if v is None and exact is not None:
            v = getattr(exact, col)
        if v is not None:
            shape[col] = v
    if exact is not None and (shape["hidden"], shape["heads"]) == (exact.hidden, exact.heads):
        shape.update({k: getattr(exact, k) for k in _ATTENTION_FROM_PRESET})
    if exact is not None and (shape.get("experts"), shape.get("moe_ffn_hidden")) == (
            exact.experts, exact.moe_ffn_hidden):
        shape.update({k: getattr(exact, k) for k in _MOE_FROM_PRESET})
    if exact is not None and exact.is_hybrid:
        if shape["layers"] != exact.layers:
            raise RowError(f"layers: {shape['layers']} does not match the block pattern of the "
                           f"hybrid preset {exact.name!r} ({exact.layers} blocks)")
        shape.update({k: getattr(exact, k) for k in _HYBRID_FROM_PRESET})
    if shape.get("kv_lora_rank"):
        shape["kv_heads"] = shape["heads"]
    if seq is not None:
        shape["seq_len"] = seq
    extra = SOURCE_DEFAULTS.get(source, {})
    arch = {k: getattr(flags, k) for k in ("mlp", "norm", "bias", "tied_embeddings",
                                            "position", "dropout", "act_clamp")}
    arch.update(extra.get("arch", {}))
    gated = cell_int(row, "gated_mlp")
    if gated is not None:
        if gated not in (0, 1):
            raise RowError(f"gated_mlp: must be 0 or 1 (got {gated})")
        # a gated row keeps its preset's gated kind (GeGLU); a two-matrix preset becomes SwiGLU
        arch["mlp"] = ((arch["mlp"] if arch["mlp"] in GATED_MLP_KINDS else "swiglu") if gated
                       else "gelu")
    base_max = exact.max_seq_len if exact is not None else flags.max_seq_len
    max_seq = shape["seq_len"] if extra.get("max_seq_len_is_seq_len") else max(
        base_max, shape["seq_len"])
    name = str(cell(row, "model") or flags.name)
    try:
        return ModelSpec(name=name, max_seq_len=max_seq, source=f"measurements row "
                         f"{cell(row, 'case_id')}", **shape, **arch)
    except ModelSpecError as exc:
        raise RowError(str(exc)) from None


def _parallel(row: Row, n_gpus: int, defaults: dict[str, object]
              ) -> tuple[int, int, int | None]:
    tp, pp, dp = cell_int(row, "tp"), cell_int(row, "pp"), cell_int(row, "dp")
    if tp is None and pp is None:
        if dp is not None and dp == n_gpus:
            defaults.update(tp=1, pp=1)
            return 1, 1, dp
        raise RowError("parallel config not stated (tp and pp blank)")
    if tp is None or pp is None:
        known, other = ("tp", tp) if tp is not None else ("pp", pp)
        assert other is not None  # one of tp, pp is stated
        missing = "pp" if known == "tp" else "tp"
        if dp is None or n_gpus % (other * dp):
            raise RowError(f"{missing}: blank and not derivable ({known}={other}, "
                           f"dp={'blank' if dp is None else dp}, n_gpus={n_gpus})")
        val = n_gpus // (other * dp)
        defaults[missing] = val
        return (other, val, dp) if known == "tp" else (val, other, dp)
    return tp, pp, dp


def _prepare_one(row: Row, other_metrics: bool = False) -> PreparedRow:
    case_id = str(row.get("case_id") or "")
    source = source_of(case_id)
    metric = cell(row, "metric")
    workload = (cell(row, "workload") or "").lower()
    if workload in ("serve", "prefill") or metric in INFERENCE_METRICS:
        raise RowError(INFERENCE_REASON)
    if workload not in ("train", "finetune"):
        raise RowError(f"workload: {workload or 'blank'!r} is not train, finetune, prefill or "
                       "serve")
    if metric in OTHER_METRICS and not other_metrics:
        raise RowError(OTHER_REASON)
    if metric not in KNOWN_METRICS and not (other_metrics and metric in OTHER_METRICS):
        raise RowError(f"unknown metric {metric!r} (known: {', '.join(KNOWN_METRICS)})")
    value = cell_float(row, "value")
    if value is None or (value <= 0 and metric not in OTHER_METRICS):
        raise RowError(f"value: must be a positive number (got {cell(row, 'value')!r})")
    why_not = unmodelled_reason(row)
    if why_not:
        raise RowError(why_not)
    hw_id = cell(row, "hardware")
    if hw_id is None:
        raise RowError("hardware: blank (a canonical hardware id is needed)")
    try:
        hw = load_hardware(str(hw_id))
    except HardwareSpecError:
        raise RowError(f"unknown hardware {hw_id!r} (known: {', '.join(list_hardware())})"
                       ) from None
    defaults: dict[str, object] = {}
    errata = layout_errata(row, source)
    if errata:
        row = {**row, **{col: new for col, (_, new) in errata.items()}}
        defaults.update({col: f"{new} (the page printed {old or 'blank'}; the container's "
                              "recipe, BRIDGE_LAYOUT_ERRATA)"
                         for col, (old, new) in errata.items() if old != new})
    n_gpus = cell_int(row, "n_gpus")
    stated = (cell_int(row, "tp"), cell_int(row, "pp"), cell_int(row, "dp"))
    if n_gpus is None and stated[0] is not None and stated[1] is not None \
            and stated[2] is not None:
        n_gpus = stated[0] * stated[1] * stated[2]
        defaults["n_gpus"] = "tp*pp*dp"
    if n_gpus is None or n_gpus <= 0:
        raise RowError("n_gpus: blank or not positive")
    tp, pp, dp = _parallel(row, n_gpus, defaults)
    if dp is None:
        defaults["dp"] = "n_gpus/(tp*cp*pp)"

    def opt(name: str, default: int) -> int:
        v = cell_int(row, name)
        if v is None:
            defaults[name] = default
            return default
        return v

    mb = opt("micro_batch", 1)
    vpp = opt("vpp", 1)
    cp = opt("cp", 1)
    ep = opt("ep", 1)
    sp_on = opt("sp", int(bool(source_fact(source, "sp_with_tp"))
                          and (cell_int(row, "tp") or 1) > 1))
    if source_fact(source, "zero_stage_is_fsdp") and str(cell(row, "zero_stage")).strip() == "0":
        row = {**row, "zero_stage": ""}  # its table's FSDP=0: not FSDP, the source's default
    if str(cell(row, "zero_stage") or "").strip().upper() in ZERO_NAMES:
        row = {**row, "zero_stage": ZERO_NAMES[str(cell(row, "zero_stage")).strip().upper()]}
    tuning = finetune_columns(row, defaults, source)
    # the source's optimizer sharding for full-parameter training; parameter-efficient runs
    # keep a replicated optimizer (Megatron-Bridge's PEFT recipes turn the distributed
    # optimizer off: use_distributed_optimizer = False)
    zero = opt("zero_stage", int(SOURCE_DEFAULTS.get(source, {}).get("zero_stage", 0))
               if tuning["finetune"] == "full" else 0)
    dtype = (cell(row, "dtype") or "").lower()
    if not dtype:
        dtype = "bf16"
        defaults["dtype"] = "bf16"
    seq = cell_int(row, "seq_len")
    notes = cell(row, "notes")
    # the row's recipe key: its ``model`` cell and canonical hardware (the recipe tables')
    model_cell, hw_key = str(cell(row, "model") or ""), str(hw_id).lower()
    recompute = (cell(row, "recompute") or "").lower()
    recipe_layers = 0 if recompute else recompute_layers_default(
        source, notes, model_cell, hw_key, dtype, workload)
    recipe_modules = None if recompute or recipe_layers else recompute_default(
        source, notes, model_cell, hw_key, dtype, workload)
    if recipe_layers:
        recompute = "full"
        defaults["recompute"] = (f"full, the first {recipe_layers} layers of each pipeline "
                                 "chunk (the row's Megatron-Bridge recipe, "
                                 "BRIDGE_RECOMPUTE_LAYERS)")
    elif recipe_modules:
        recompute = "selective"
        defaults["recompute"] = (f"selective, {recipe_modules} (the row's Megatron-Bridge "
                                 "recipe, BRIDGE_RECOMPUTE)")
    elif not recompute:
        recompute = "none"
        defaults["recompute"] = "none" if recipe_modules is None else (
            "none (the row's Megatron-Bridge recipe, BRIDGE_RECOMPUTE)")
    stated_flash = cell_int(row, "flash_attention")
    if stated_flash is None:
        flash, why = flash_attention_rule(source, notes)
        defaults["flash_attention"] = f"{flash} ({why})"
    elif stated_flash in (0, 1):
        flash = bool(stated_flash)
    else:
        raise RowError(f"flash_attention: must be 0 or 1 (got {stated_flash})")
    model = _model_for_row(row, source, seq)
    gb = cell_int(row, "global_batch")
    if gb is None:
        defaults["global_batch"] = "micro_batch*dp"
    if sp_on not in (0, 1):
        raise RowError(f"sp: must be 0 or 1 (got {sp_on})")
    tp_overlap = bool(source_fact(source, "tp_overlap_with_sp")) and sp_on == 1
    if tp_overlap and tp_overlap_off_default(source, notes, model_cell, hw_key, dtype):
        tp_overlap = False
        defaults["tp_overlap"] = "off (the row's Megatron-Bridge recipe, BRIDGE_TP_OVERLAP_OFF)"
    elif tp_overlap:
        defaults["tp_overlap"] = f"on (default for source {source} with sp)"
    ep_overlap = ep_overlap_default(source, notes, model_cell, hw_key, dtype)
    if ep_overlap:
        defaults["ep_overlap"] = "on (the row's Megatron-Bridge recipe, BRIDGE_EP_OVERLAP)"
    ep_dedup = ep_dedup_default(source, notes, model_cell, hw_key, dtype)
    if ep_dedup:
        defaults["ep_dedup"] = "on (the row's Megatron-Bridge recipe, BRIDGE_EP_DEDUP)"
    cuda_graph = cuda_graph_default(source, notes, model_cell, hw_key, dtype)
    offloaded = activation_offload_default(source, notes, model_cell, hw_key, dtype,
                                           workload, zero)
    if offloaded:
        defaults["activation_offload_layers"] = (f"{offloaded} (the row's Megatron-Bridge "
                                                 "recipe, BRIDGE_ACTIVATION_OFFLOAD)")
    if cuda_graph:
        defaults["cuda_graph"] = ("on (the row's Megatron-Bridge recipe, "
                                  "BRIDGE_FULL_ITERATION_GRAPH)")
    fp8_attention = fp8_attention_default(source, notes, model_cell, hw_key, dtype)
    if fp8_attention:
        defaults["fp8_attention"] = ("on (the row's Megatron-Bridge recipe, "
                                     "BRIDGE_FP8_ATTENTION)")
    bf16_layers = (BRIDGE_BF16_LAYERS.get((model_cell, dtype), 0)
                   if source == "MBRIDGE" else 0)
    if bf16_layers:
        defaults["bf16_layers"] = f"{bf16_layers} (the run's precision recipe, BRIDGE_BF16_LAYERS)"
    cfg = TrainingConfig(num_gpus=n_gpus, tp=tp, pp=pp, cp=cp, dp=dp, ep=ep, sp=bool(sp_on),
                         vpp=vpp,
                         micro_batch=mb, global_batch=gb, seq_len=model.seq_len,
                         recompute=recompute, zero=zero, dtype=dtype, flash_attention=flash,
                         dp_overlap=dp_overlap_default(source, zero),
                         zero3_per_tensor=zero == 3 and bool(
                             SOURCE_DEFAULTS.get(source, {}).get("zero3_per_tensor")),
                         tp_overlap=tp_overlap, ep_overlap=ep_overlap, ep_dedup=ep_dedup,
                         cuda_graph=cuda_graph, fp8_attention=fp8_attention,
                         bf16_layers=bf16_layers,
                         activation_offload_layers=offloaded,
                         train_framework=str(SOURCE_DEFAULTS.get(source, {}).get(
                             "train_framework", "megatron")),
                         attention_backend=str(SOURCE_DEFAULTS.get(source, {}).get(
                             "attention_backend", "native")),
                         **tuning)
    if recipe_modules:
        cfg = dataclasses.replace(cfg, recompute_modules=recipe_modules)
    if recipe_layers:
        cfg = dataclasses.replace(cfg, recompute_layers=recipe_layers)
    try:
        cfg = resolve(model, hw, cfg)
    except ConfigError as exc:
        raise RowError(_column_names(str(exc))) from None
    nb = cell_float(row, "n_params_b")
    n_params = nb * 1e9 if nb is not None and nb > 0 else None
    run = "|".join([source] + [str(cell(row, c)) for c in RUN_COLUMNS])
    convention = str(cell(row, "flops_convention") or "").lower()
    if convention and convention not in FLOPS_CONVENTIONS:
        raise RowError(f"flops_convention: {convention!r} is not one of "
                       f"{', '.join(FLOPS_CONVENTIONS)}")
    prepared = PreparedRow(case_id, source, metric, value, model, hw, cfg, n_params, run,
                           defaults, convention,
                           flops_counter_of(source, cell(row, "notes"),
                                            lora=cfg.finetune != "full",
                                            model_name=model_cell) or "")
    if metric not in OTHER_METRICS:
        _check_measured(prepared)
    return prepared


# --- [finetune] offload / LoRA / topology columns; memory, OOM and scaling metrics --------
#: metrics not derived from the step time: peak memory per GPU (GiB = 2**30 bytes, the
#: model's ``mem_total``), out-of-memory flags (predicted: ``mem_headroom < 0``) and scaling
#: efficiencies (two evaluations); predicted by :func:`predict_other_rows`, never calibrated.
MEMORY_METRICS = ("peak_memory_gib", "oom")
SCALING_METRICS = ("scaling_efficiency_pct", "scaling_efficiency_gain_pct")
#: per-layer metrics (one transformer layer, one micro-batch, one GPU; Korthikanti et al.
#: 2022 report forward/backward/recompute times per layer in Table 4 and activation memory per
#: layer in Table 2): metric -> (training output, factor from its base unit).
LAYER_METRICS: dict[str, tuple[str, float]] = {
    "layer_forward_time_ms": ("time_layer_forward", 1e3),
    "layer_backward_time_ms": ("time_layer_backward", 1e3),
    "layer_recompute_time_ms": ("time_layer_recompute", 1e3),
    "activation_memory_per_layer_bytes": ("mem_activations_layer", 1.0),
    "activation_memory_per_layer_mib": ("mem_activations_layer", 2.0**-20),
    "activation_memory_per_layer_gib": ("mem_activations_layer", 2.0**-30),
}
OTHER_METRICS = MEMORY_METRICS + SCALING_METRICS + tuple(LAYER_METRICS)
OTHER_REASON = ("memory/OOM/scaling/per-layer metric: predicted by predict_other_rows, not from "
                "step time")
#: QLoRA defaults when a row states ``quant = nf4`` but no adapter: rank 64 on every linear
#: projection (Dettmers et al. 2023, QLoRA, Sec. 4 and its reference scripts: lora_r 64, all
#: linear layers), the setting of bitsandbytes 4-bit training with PEFT.
QLORA_DEFAULT_RANK = 64


def dp_overlap_default(source: str, zero: int) -> bool:
    """Whether a row of ``source`` at ZeRO stage ``zero`` overlaps its data-parallel
    communication with compute: the source's ``dp_overlap`` (on when unstated), or its
    ``dp_overlap_zero0`` for ZeRO stage 0 when it gives one (:data:`SOURCE_DEFAULTS`)."""
    facts = SOURCE_DEFAULTS.get(source, {})
    if zero == 0 and "dp_overlap_zero0" in facts:
        return bool(facts["dp_overlap_zero0"])
    return bool(facts.get("dp_overlap", True))


#: how a row's ``notes`` name its fine-tuning method (MBRIDGE: ``fine-tuning method=LoRA``):
#: ``LoRA`` or ``QLoRA`` sets a blank ``finetune`` cell; ``SFT`` is full fine-tuning.
FINETUNE_NOTE = re.compile(r"fine-tuning method=(SFT|LoRA|QLoRA)\b", re.IGNORECASE)


def finetune_columns(row: Row, defaults: dict[str, object], source: str = "") -> dict[str, Any]:
    """The training fields of the ``offload``, ``finetune``, ``lora_rank``, ``quant``,
    ``intra_node_link`` and (optional) ``doc_len`` columns (README of the format; ``doc_len``
    is symcost's field, read when a file has the column). ``quant = nf4`` without ``finetune``
    means QLoRA (4-bit base weights cannot be trained; bitsandbytes trains adapters on them);
    a blank ``finetune`` whose ``notes`` state the method (:data:`FINETUNE_NOTE`) takes it.
    A blank ``lora_rank`` is the source's (``lora_rank`` of :data:`SOURCE_DEFAULTS`), else
    :data:`QLORA_DEFAULT_RANK`; the adapter's projections are the source's ``lora_targets``
    when it states them (else every projection). Blank ``offload`` is ``none``, blank
    ``intra_node_link`` the hardware's usual link. A blank ``doc_len`` is
    :data:`SQUAD_DOC_LEN` when the ``notes`` say SQuAD packed (:data:`SQUAD_PACKED_NOTE`); for
    a fine-tuning row (a ``finetune`` other than full, or ``notes`` naming a method,
    :data:`FINETUNE_NOTE`) the source's ``finetune_doc_len`` when it has one (packed
    data); else 0.

    Raises:
        RowError: a value outside the field's choices.
    """
    out: dict[str, Any] = {}
    offload = (cell(row, "offload") or "none").lower()
    out["offload"] = offload
    link = cell(row, "intra_node_link")
    out["intra_node_link"] = str(link).lower() if link is not None else "default"
    tune = cell(row, "finetune")
    quant = cell(row, "quant")
    rank = cell_int(row, "lora_rank")
    if tune is None and quant is not None and str(quant).lower() == "nf4":
        tune = "qlora"
        defaults["finetune"] = "qlora (quant = nf4)"
    if tune is None and rank is not None:
        tune = "lora"
    notes = str(cell(row, "notes") or "")
    stated = FINETUNE_NOTE.search(notes)
    if tune is None and stated and stated[1].lower() != "sft":
        tune = stated[1].lower()
        defaults["finetune"] = f"{tune} (notes: {stated[0]})"
    out["finetune"] = str(tune).lower() if tune is not None else "full"
    facts = SOURCE_DEFAULTS.get(source, {})
    if out["finetune"] != "full" and rank is None:
        rank = int(facts.get("lora_rank", QLORA_DEFAULT_RANK))
        defaults["lora_rank"] = rank
    if out["finetune"] != "full" and "lora_targets" in facts:
        out["lora_targets"] = str(facts["lora_targets"])
        defaults["lora_targets"] = f"{facts['lora_targets']} (source {source} recipes)"
    if rank is not None:
        out["lora_rank"] = rank
    doc = cell_int(row, "doc_len")
    tuning = out["finetune"] != "full" or stated is not None
    if doc is None and SQUAD_PACKED_NOTE.search(notes):
        doc = SQUAD_DOC_LEN
        defaults["doc_len"] = f"{doc} (notes: SQuAD packed; SQUAD_DOC_LEN)"
    elif doc is None and tuning and "finetune_doc_len" in facts:
        doc = int(facts["finetune_doc_len"])
        defaults["doc_len"] = (f"{doc} (source {source}'s fine-tuning recipes pack their "
                               "dataset into seq_len; finetune_doc_len)")
    if doc is not None:
        out["doc_len"] = doc
    return out


def prepare_other_rows(df: pd.DataFrame) -> tuple[list[PreparedRow], list[SkippedRow]]:
    """The rows of :data:`OTHER_METRICS` as prepared rows (as :func:`prepare_rows`)."""
    prepared: list[PreparedRow] = []
    skipped: list[SkippedRow] = []
    for rec in df.to_dict(orient="records"):
        metric = str(cell(rec, "metric") or "")
        if metric not in OTHER_METRICS:
            continue
        case_id = str(rec.get("case_id") or "")
        try:
            prepared.append(_prepare_one(rec, other_metrics=True))
        except RowError as exc:
            skipped.append(SkippedRow(case_id, str(exc), source_of(case_id), metric))
    return prepared, skipped


def _single_gpu(row: PreparedRow) -> PreparedRow:
    cfg = row.config
    assert cfg.num_gpus is not None and cfg.global_batch is not None and cfg.dp is not None
    one = cfg.replace(num_gpus=cfg.tp * cfg.pp, dp=1,
                      global_batch=cfg.global_batch // cfg.dp)
    return dataclasses.replace(row, config=resolve(row.model, row.hardware, one))


def _with_link(row: PreparedRow, link: str) -> PreparedRow:
    cfg = row.config.replace(intra_node_link=link)
    return dataclasses.replace(row, config=resolve(row.model, row.hardware, cfg))


def device_reading(total: np.ndarray, cached: np.ndarray, usable: np.ndarray,
                   reserved: np.ndarray, regrow: np.ndarray) -> np.ndarray:
    """[memory] A device-level peak-memory reading (``total - free`` of
    ``torch.cuda.mem_get_info``, nvidia-smi), bytes, from the tensors ``total``, the
    freed-but-cached blocks ``cached``, the HBM the model may use ``usable`` and the part it
    may not ``reserved`` (CUDA context, allocator), all bytes, arrays of one shape (or
    broadcastable):

    * the cached blocks fit (``total + cached <= usable``): ``total + reserved + cached``;
    * they do not: the allocator has released its cached blocks and retried the failed
      allocation, then cached again for the rest of the step; it holds ``regrow`` (a fraction
      in [0, 1], ``mem_regrow_frac``) of the HBM still free, ``total + reserved + regrow *
      max(usable - total, 0)``.

    The release-and-retry is PyTorch's ``CUDACachingAllocator`` behaviour on a failed
    ``cudaMalloc`` (``release_cached_blocks``, PyTorch CUDA semantics docs, "Memory
    management"). The reading is never below ``total + reserved`` and, for ``total <=
    usable``, never above ``usable + reserved``.
    """
    fits = total + cached <= usable
    kept = np.where(fits, cached, regrow * np.maximum(usable - total, 0.0))
    return np.asarray(total + reserved + kept, dtype=float)


def device_read(prepared: Sequence[PreparedRow]) -> np.ndarray:
    """[memory] Boolean array, one entry per row: its source printed a device-level memory
    reading (``memory_reading = device`` in :data:`SOURCE_DEFAULTS`), not the tensors."""
    return np.array([SOURCE_DEFAULTS.get(r.source, {}).get("memory_reading") == "device"
                     for r in prepared], dtype=bool)


def generation_values(prepared: Sequence[PreparedRow], params: Params, name: str
                      ) -> np.ndarray:
    """Parameter ``name`` of each row's GPU generation in ``params``, one float per row (its
    unit is the parameter's).

    Raises:
        ParamsError: no parameters for a row's generation.
    """
    return np.array([float(params.for_generation(r.hardware.generation)[name])
                     for r in prepared])


def memory_reading(prepared: Sequence[PreparedRow], out: Mapping[str, np.ndarray],
                   params: Params) -> np.ndarray:
    """[memory] The peak memory a row's source printed, predicted from the model outputs
    ``out`` (first ``len(prepared)`` entries, one per row), bytes:

    * ``mem_total`` (the tensors: what must fit) for a tensor-level reading
      (``torch.cuda.max_memory_allocated``, the default);
    * :func:`device_reading` of ``mem_total``, ``mem_cached``, ``mem_usable``, the
      generation's ``mem_reserved`` and ``mem_regrow_frac`` for a device-level reading
      (``memory_reading = device`` in :data:`SOURCE_DEFAULTS`).

    Raises:
        ParamsError: no parameters for a row's generation.
    """
    k = len(prepared)
    total = np.asarray(out["mem_total"][:k], dtype=float)
    device = device_read(prepared)
    reading = device_reading(total, np.asarray(out["mem_cached"][:k], dtype=float),
                             np.asarray(out["mem_usable"][:k], dtype=float),
                             generation_values(prepared, params, "mem_reserved"),
                             generation_values(prepared, params, "mem_regrow_frac"))
    return np.where(device, reading, total)


def predict_other_rows(prepared: Sequence[PreparedRow], params: Params | None = None
                       ) -> pd.DataFrame:
    """Predict memory, OOM, scaling-efficiency and per-layer rows (:data:`OTHER_METRICS`).

    * ``peak_memory_gib``: the model's ``mem_total / 2**30`` (weights, gradients, optimizer,
      activations; no allocator reserve), or the device-level reading of
      :func:`memory_reading` for a source that printed one.
    * ``oom``: 1 when ``mem_headroom < 0`` (``mem_total`` above ``hbm_cap - mem_reserved``).
    * ``scaling_efficiency_pct``: ``tokens/s(n GPUs) / (n * tokens/s(1 GPU)) * 100`` with the
      same micro-batch per GPU.
    * ``scaling_efficiency_gain_pct``: the row's link (``nvlink-bridge``) minus ``pcie``, in
      percentage points of scaling efficiency.
    * :data:`LAYER_METRICS`: the average layer's forward, backward or recomputation time
      (``time_layer_*``, compute and the fixed per-layer overhead) or activation memory
      (``mem_activations_layer``) for one micro-batch on one GPU, in the metric's unit.

    Returns:
        DataFrame with the columns of :func:`predict_rows` (``error_pct`` for ``oom`` rows:
        0 when the prediction agrees, -100 when it does not) plus ``fits``.
    """
    params = params or load_params()
    cols = ["case_id", "source", "metric", "workload", "measured", "predicted", "error_pct",
            "hardware", "generation", "model", "run", "fits"]
    if not prepared:
        return pd.DataFrame({c: pd.Series(dtype=object) for c in cols})
    evals: list[PreparedRow] = list(prepared)
    extra: list[PreparedRow] = []
    for r in prepared:
        if r.metric in SCALING_METRICS:
            extra.append(_single_gpu(r))
            if r.metric == "scaling_efficiency_gain_pct":
                extra.extend([_with_link(r, "pcie"), _single_gpu(_with_link(r, "pcie"))])
    out = evaluate_rows(stack_inputs(evals + extra, params))
    step, total, head = out["step_time"], out["mem_total"], out["mem_headroom"]
    reading = memory_reading(prepared, out, params)  # [memory]
    preds: list[float] = []
    k = len(evals)
    for i, r in enumerate(prepared):
        if r.metric == "peak_memory_gib":
            preds.append(float(reading[i]) / 2**30)
        elif r.metric == "oom":
            preds.append(float(head[i] < 0))
        elif r.metric in LAYER_METRICS:
            name, factor = LAYER_METRICS[r.metric]
            preds.append(float(out[name][i]) * factor)
        else:
            eff = step[k] / step[i] * 100.0  # same tokens per GPU: t(1) / t(n)
            k += 1
            if r.metric == "scaling_efficiency_gain_pct":
                eff_pcie = step[k + 1] / step[k] * 100.0
                k += 2
                eff = eff - eff_pcie
            preds.append(float(eff))
    pred = np.array(preds)
    meas = np.array([r.measured for r in prepared])
    err = np.where([r.metric == "oom" for r in prepared],
                   np.where(pred == meas, 0.0, -100.0),
                   (pred - meas) / np.where(meas == 0, np.nan, meas) * 100.0)
    return pd.DataFrame({
        "case_id": [r.case_id for r in prepared], "source": [r.source for r in prepared],
        "metric": [r.metric for r in prepared], "workload": "train", "measured": meas,
        "predicted": pred, "error_pct": err,
        "hardware": [r.hardware.name for r in prepared],
        "generation": [r.hardware.generation for r in prepared],
        "model": [r.model.name for r in prepared], "run": [r.run for r in prepared],
        "fits": np.asarray(head[:len(prepared)]) >= 0,
    })[cols]


def fit_agreement(rows: pd.DataFrame) -> dict[str, Any] | None:
    """Agreement of predicted fit vs out-of-memory over ``oom`` rows (ran out) and
    ``peak_memory_gib`` rows (ran, so fitted): ``{"n", "agreement_pct", "n_oom",
    "oom_predicted_pct"}``, or None without such rows."""
    if "fits" not in rows:
        return None
    g = rows[rows["metric"].isin(MEMORY_METRICS) & rows["fits"].notna()]
    if not len(g):
        return None
    ran = g["metric"] == "peak_memory_gib"
    oom = g[~ran]
    truth = ran.to_numpy()
    fits = g["fits"].astype(bool).to_numpy()
    return {"n": int(len(g)), "agreement_pct": float((truth == fits).mean() * 100.0),
            "n_oom": int(len(oom)),
            "oom_predicted_pct": float((~oom["fits"].astype(bool)).mean() * 100.0)
            if len(oom) else None}
# --- end of [finetune] block ----------------------------------------------------------------


def _column_names(message: str) -> str:
    """A configuration error's leading field name as the measurements column it came from."""
    field, sep, rest = message.partition(":")
    return f"{_CONFIG_FIELD_TO_COLUMN[field]}{sep}{rest}" if field in _CONFIG_FIELD_TO_COLUMN \
        else message


def _check_measured(row: PreparedRow) -> None:
    """Reject a value no real run can have: a percentage above 100 (:data:`PERCENT_METRICS`)
    or an implied step time outside :data:`MEASURED_STEP_RANGE_S`.

    Raises:
        RowError: naming the ``value`` column, the metric and the implied step time.
    """
    if row.metric in PERCENT_METRICS and row.measured > 100.0:
        raise RowError(f"value: {row.measured:g} % {row.metric} exceeds 100 %")
    coef, power = metric_factor(row)  # raises RowError for an unknown metric
    with np.errstate(all="ignore"):
        step = float(np.float64(row.measured) / coef if power > 0 else coef / np.float64(
            row.measured))
    lo, hi = MEASURED_STEP_RANGE_S
    if not (math.isfinite(step) and lo <= step <= hi):
        raise RowError(f"value: {row.measured:g} {row.metric} implies a step time of "
                       f"{step:.3g} s, outside the plausible range [{lo:g}, {hi:g}] s")


def prepare_rows(df: pd.DataFrame, progress: Progress | None = None
                 ) -> tuple[list[PreparedRow], list[SkippedRow]]:
    """Turn measurement rows into predictable rows, or reasons they cannot be predicted.

    Args:
        df: as returned by :func:`load_measurements`.
        progress: ``progress(rows read, total)`` every 64 rows and at the end.

    Returns:
        ``(prepared, skipped)``: one :class:`PreparedRow` per predictable ``train`` row, one
        :class:`SkippedRow` (case id and one-line reason) per other row. Every input row is in
        exactly one of the two lists.
    """
    prepared: list[PreparedRow] = []
    skipped: list[SkippedRow] = []
    seen: set[str] = set()
    records = df.to_dict(orient="records")
    for i, rec in enumerate(records):
        if progress is not None and i % 64 == 0:
            progress(i, len(records))
        case_id = str(rec.get("case_id") or "")
        source, metric = source_of(case_id), str(cell(rec, "metric") or "")
        if not case_id:
            skipped.append(SkippedRow("", "case_id: blank", source, metric))
            continue
        if case_id in seen:
            skipped.append(SkippedRow(case_id, "case_id: duplicate (the first row is used)",
                                      source, metric))
            continue
        seen.add(case_id)
        try:
            prepared.append(_prepare_one(rec))
        except RowError as exc:
            skipped.append(SkippedRow(case_id, str(exc), source, metric))
    if progress is not None:
        progress(len(records), len(records))
    return prepared, skipped


# ----------------------------------------------------------------------------- prediction
def _pad_length(n: int) -> int:
    """Row count padded to a power of two (>= 8) so repeated calls reuse compiled shapes."""
    return max(8, 1 << max(0, (n - 1).bit_length()))


def stack_inputs(prepared: Sequence[PreparedRow], params: Params,
                 names: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Stack each row's :func:`~symcost.api.training_inputs` into float64 arrays
    (:func:`symcost.api.stack_training_inputs` of the rows' configurations).

    Args:
        prepared: rows from :func:`prepare_rows`.
        params: efficiency parameters (each row takes its GPU generation's set).
        names: input names to stack (default: every input of the compiled training model).

    Returns:
        Mapping input name -> array of shape ``(len(prepared),)``.

    Raises:
        ParamsError: ``params`` has no entry for a row's GPU generation.
    """
    return stack_training_inputs([(r.model, r.hardware, r.config) for r in prepared], params,
                                 names)


def evaluate_rows(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """One vectorized float64 evaluation of the training model over stacked rows (padded to a
    power of two to reuse compiled shapes; the padding is cut off)."""
    n = len(next(iter(inputs.values())))
    pad = _pad_length(n)
    padded = {k: np.concatenate([v, np.repeat(v[-1:], pad - n)]) for k, v in inputs.items()}
    out = evaluate_training(padded, precision="float64")
    return {k: np.asarray(v)[:n] for k, v in out.items()}


def predict_rows(prepared: Sequence[PreparedRow], params: Params | None = None,
                 intervals: bool = True, level: float = 0.9) -> pd.DataFrame:
    """Predict every prepared row in one vectorized call of the training model.

    Args:
        prepared: rows from :func:`prepare_rows` (their generations must be in ``params``).
        params: efficiency parameters; the shipped calibration when None.
        intervals: add ``pred_lo``/``pred_hi`` (``level`` prediction interval, see
            :func:`symcost.uncertainty.row_intervals`) where ``params`` carries a covariance for
            the row's generation (NaN elsewhere).
        level: interval probability.

    Returns:
        DataFrame, one row per prepared row: ``case_id``, ``source``, ``metric``,
        ``workload`` (``train``), ``measured``, ``predicted``, ``error_pct`` (signed,
        ``(pred - meas)/meas*100``),
        ``pred_lo``, ``pred_hi``, ``step_time`` (s), the breakdown ``time_*`` (s), ``mfu``,
        ``hardware``, ``generation``, ``model``, ``run``, ``coef`` and ``power`` (metric =
        ``coef * step_time**power``), ``fits`` (``mem_headroom >= 0``: the row's layout is
        predicted to fit in memory).

    Raises:
        ParamsError: no parameters for a row's generation.
    """
    params = params or load_params()
    cols = ["case_id", "source", "metric", "workload", "measured", "predicted", "error_pct",
            "pred_lo", "pred_hi", "step_time", *BREAKDOWN, "mfu", "hardware", "generation",
            "model", "run", "coef", "power", "fits"]
    if not prepared:
        text = {"case_id", "source", "metric", "workload", "hardware", "generation", "model",
                "run"}
        return pd.DataFrame({c: pd.Series(dtype=object if c in text else np.float64)
                             for c in cols})
    inputs = stack_inputs(prepared, params)
    out = evaluate_rows(inputs)
    factors = np.array([metric_factor(r) for r in prepared], dtype=np.float64)
    coef, power = factors[:, 0], factors[:, 1]
    step = out["step_time"]
    pred = coef * step**power
    meas = np.array([r.measured for r in prepared])
    df = pd.DataFrame({
        "case_id": [r.case_id for r in prepared], "source": [r.source for r in prepared],
        "metric": [r.metric for r in prepared], "workload": "train", "measured": meas,
        "predicted": pred,
        "error_pct": (pred - meas) / meas * 100.0, "pred_lo": np.nan, "pred_hi": np.nan,
        "step_time": step, **{k: out[k] for k in BREAKDOWN}, "mfu": out["mfu"],
        "hardware": [r.hardware.name for r in prepared],
        "generation": [r.hardware.generation for r in prepared],
        "model": [r.model.name for r in prepared], "run": [r.run for r in prepared],
        "coef": coef, "power": power, "fits": out["mem_headroom"] >= 0,
    })
    if intervals and params.provenance.get("residual_sigma_log"):
        lo, hi = row_intervals(prepared, params, inputs, level=level)
        # metric = coef * t**power: power -1 swaps the ends
        a, b = coef * lo**power, coef * hi**power
        df["pred_lo"], df["pred_hi"] = np.minimum(a, b), np.maximum(a, b)
    return df[cols]


def split_by_params(prepared: Sequence[PreparedRow], params: Params
                    ) -> tuple[list[PreparedRow], list[SkippedRow]]:
    """Rows whose GPU generation has parameters, and the others as skipped rows."""
    ok, bad = [], []
    for r in prepared:
        if params.has_generation(r.hardware.generation):
            ok.append(r)
        else:
            bad.append(SkippedRow(r.case_id, f"params: no efficiency parameters for GPU "
                                  f"generation {r.hardware.generation!r}", r.source, r.metric))
    return ok, bad


# ----------------------------------------------------------------------------- summary
def mape(errors_pct: npt.ArrayLike) -> float:
    """Mean absolute percentage error of signed errors in percent (NaN when empty)."""
    e = np.abs(np.asarray(errors_pct, dtype=np.float64))
    return float(e.mean()) if e.size else float("nan")


def replicate_groups(prepared: Sequence[PreparedRow]) -> pd.DataFrame:
    """The rows of ``prepared`` grouped by identical inputs (source, metric, hardware,
    configuration, model, FLOP convention and counter, parameter count): one deterministic
    prediction serves every row of a group, so where a source published the same inputs more
    than once with different values (e.g. successive container releases of a benchmark
    table), the group's spread is error no cost model can remove.

    The group's best single prediction ``best`` is the median of its measured values weighted
    by ``1/value``, which minimizes ``sum |c - v| / v``.

    Returns:
        DataFrame with one row per group (rows measured once included), columns ``source``,
        ``metric``, ``case_ids`` (tuple, in the order of ``prepared``), ``n``, ``min_value``,
        ``max_value``, ``spread`` (``max_value / min_value``, 1 for a single row), ``best``
        and ``abs_pct_sum`` (``100 * sum |best - v| / v`` over the group, percent).
    """
    groups: dict[tuple[Any, ...], list[PreparedRow]] = {}
    for r in prepared:
        key = (r.source, r.metric, r.hardware.name, r.config,
               dataclasses.replace(r.model, source="-"), r.flops_convention, r.flops_counter,
               r.n_params)
        groups.setdefault(key, []).append(r)
    records = []
    for rows in groups.values():
        v = np.sort(np.asarray([float(r.measured) for r in rows]))
        w = 1.0 / v
        c = float(v[np.searchsorted(np.cumsum(w), 0.5 * w.sum())])
        records.append({"source": rows[0].source, "metric": rows[0].metric,
                        "case_ids": tuple(r.case_id for r in rows), "n": len(rows),
                        "min_value": float(v[0]), "max_value": float(v[-1]),
                        "spread": float(v[-1] / v[0]), "best": c,
                        "abs_pct_sum": float(np.sum(np.abs(c - v) / v)) * 100.0})
    return pd.DataFrame.from_records(
        records, columns=["source", "metric", "case_ids", "n", "min_value", "max_value",
                          "spread", "best", "abs_pct_sum"])


def replicate_floor(prepared: Sequence[PreparedRow]) -> pd.DataFrame:
    """The smallest MAPE any deterministic model can reach on ``prepared``, per source: the
    mean absolute percentage error of each identical-input group's best single prediction
    (:func:`replicate_groups`) over every row of the source (rows measured once contribute 0).

    Returns:
        DataFrame indexed by source with columns ``n`` (rows), ``n_replicated`` (rows whose
        inputs another row shares) and ``floor_mape_pct``.
    """
    g = replicate_groups(prepared)
    g["n_replicated"] = g["n"].where(g["n"] > 1, 0)
    df = g.groupby("source")[["n", "n_replicated", "abs_pct_sum"]].sum()
    df["floor_mape_pct"] = df["abs_pct_sum"] / df["n"]
    df.index.name = None
    return df.drop(columns="abs_pct_sum").astype({"n": int, "n_replicated": int}).sort_index()


def summarize(rows: pd.DataFrame, skipped: Sequence[SkippedRow] = ()) -> dict[str, Any]:
    """MAPE per (source, metric), per source and overall, plus counts.

    ``mape_pct`` and ``max_abs_error_pct`` are over the ``train`` rows of step-time metrics
    (the training model's accuracy; memory, OOM and scaling rows, :data:`OTHER_METRICS`, only
    per source and metric); ``inference_mape_pct`` over the serve/prefill rows when there are
    any.

    Returns:
        ``{"n_predicted", "n_skipped", "mape_pct", "max_abs_error_pct", "inference_mape_pct",
        "by_source": [{"source", "workload", "n", "mape_pct", "mean_error_pct"}],
        "by_source_metric": [{"source", "metric", "workload", "n", "mape_pct",
        "mean_error_pct", "max_abs_error_pct"}], "coverage", "skipped_reasons"}``
        (``coverage``: fraction of rows inside ``[pred_lo, pred_hi]`` where intervals exist;
        ``skipped_reasons``: reason -> count).
    """
    if "workload" not in rows:
        rows = rows.assign(workload="train")
    # [finetune] the headline MAPE stays a step-time MAPE: memory/OOM/scaling rows are
    # reported per (source, metric) and in ``fit_agreement``
    train = rows[(rows["workload"] == "train") & ~rows["metric"].isin(OTHER_METRICS)]
    infer = rows[rows["workload"] != "train"]
    out: dict[str, Any] = {"n_predicted": int(len(rows)), "n_skipped": len(skipped),
                 "mape_pct": mape(train["error_pct"]) if len(train) else None,
                 "max_abs_error_pct": float(train["error_pct"].abs().max()) if len(train)
                 else None,
                 "inference_mape_pct": mape(infer["error_pct"]) if len(infer) else None}
    by_s, by_sm = [], []
    for (src, wl), g in rows.groupby(["source", "workload"], sort=True):
        by_s.append({"source": src, "workload": wl, "n": int(len(g)),
                     "mape_pct": mape(g["error_pct"]),
                     "mean_error_pct": float(g["error_pct"].mean())})
    for (src, met, wl), g in rows.groupby(["source", "metric", "workload"], sort=True):
        by_sm.append({"source": src, "metric": met, "workload": wl, "n": int(len(g)),
                      "mape_pct": mape(g["error_pct"]),
                      "mean_error_pct": float(g["error_pct"].mean()),
                      "max_abs_error_pct": float(g["error_pct"].abs().max())})
    out["by_source"], out["by_source_metric"] = by_s, by_sm
    if len(rows) and "pred_lo" in rows and rows["pred_lo"].notna().any():
        g = rows[rows["pred_lo"].notna()]
        inside = (g["measured"] >= g["pred_lo"]) & (g["measured"] <= g["pred_hi"])
        out["coverage"] = {"n": int(len(g)), "fraction_inside": float(inside.mean())}
    reasons: dict[str, int] = {}
    for sk in skipped:
        reasons[sk.reason] = reasons.get(sk.reason, 0) + 1
    out["skipped_reasons"] = reasons
    return out


def predict_inference_hook(df: pd.DataFrame, params: Params
                           ) -> tuple[pd.DataFrame | None, list[SkippedRow]]:
    """Serve/prefill rows through the inference model.

    Uses :func:`symcost.infer_api.predict_inference_rows` (owned by the inference model; its
    conventions are documented there). Returns ``(None, [])`` when the file has no
    serve/prefill rows.

    Returns:
        ``(rows, skipped)``: predictions with the columns of :func:`predict_rows` that apply
        (``workload`` = the row's workload, no interval or breakdown), and the serve/prefill
        rows it did not predict, with its reasons.
    """
    if "workload" not in df:
        return None, []
    wl = df["workload"].fillna("").astype(str).str.strip().str.lower()
    sub = df[wl.isin(["serve", "prefill"])]
    if sub.empty:
        return None, []
    out = predict_inference_rows(sub, params)
    skipped = [SkippedRow(str(x.get("case_id")), str(x.get("reason")), str(x.get("source", "")),
                          str(x.get("metric", ""))) for x in out.attrs.get("skipped", [])]
    out = out.copy()
    out["workload"] = out["case_id"].map(dict(zip(sub["case_id"], wl[sub.index])))
    return out, skipped


@dataclass
class ValidationReport:
    """Result of :func:`validate_file`.

    Attributes:
        rows: per-row predictions (see :func:`predict_rows`).
        skipped: rows not predicted, with reasons.
        summary: see :func:`summarize`.
        params: the parameters used.
        path: the measurements file.
        prepared: the predictable rows (for reports and calibration).
    """

    rows: pd.DataFrame
    skipped: list[SkippedRow]
    summary: dict[str, Any]
    params: Params
    path: str = ""
    prepared: list[PreparedRow] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"rows": [{case_id, source, metric, workload, measured, predicted,
        error_pct, pred_lo, pred_hi, assumed}...], "summary": {...}, "skipped": [{case_id,
        reason}...]}`` (NaN becomes null). ``assumed`` maps each configuration field a training
        row did not state, or whose stated value ``validate`` corrected
        (:data:`BRIDGE_LAYOUT_ERRATA`), to the value used and why (empty for serving rows)."""
        keep = ["case_id", "source", "metric", "workload", "measured", "predicted", "error_pct",
                "pred_lo", "pred_hi"]
        assumed = {r.case_id: _assumed(r) for r in self.prepared}
        rows = [{**{k: _jsonable(v) for k, v in rec.items()},
                 "assumed": assumed.get(str(rec["case_id"]), {})}
                for rec in self.rows[keep].to_dict(orient="records")]
        return {"rows": rows, "summary": _jsonable(self.summary),
                "skipped": [{"case_id": s.case_id, "reason": s.reason} for s in self.skipped]}


    def assumptions(self) -> pd.DataFrame:
        """What ``validate`` assumed, grouped: one row per configuration field and value used
        (the same text as each JSON row's ``assumed``), with how many prediction rows used it.

        Returns:
            DataFrame with columns ``field``, ``value`` (the value used and why, e.g.
            ``"1 (the page printed 2; the container's recipe, BRIDGE_LAYOUT_ERRATA)"``),
            ``n_rows`` and ``case_ids`` (list of str, in file order); sorted by field, then by
            ``n_rows`` descending. Empty (same columns) when nothing was assumed.
        """
        groups: dict[tuple[str, str], list[str]] = {}
        for r in self.prepared:
            for k, v in _assumed(r).items():
                groups.setdefault((k, v), []).append(r.case_id)
        recs = [{"field": k, "value": v, "n_rows": len(ids), "case_ids": ids}
                for (k, v), ids in groups.items()]
        df = pd.DataFrame(recs, columns=["field", "value", "n_rows", "case_ids"])
        return df.sort_values(["field", "n_rows", "value"], ascending=[True, False, True],
                              ignore_index=True)


def _assumed(row: PreparedRow) -> dict[str, str]:
    """A prepared row's assumed fields as text: field -> value used and why."""
    return {k: str(v) for k, v in row.defaults.items()}


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.floating, float)):
        return None if not math.isfinite(float(v)) else float(v)
    if isinstance(v, np.integer):
        return int(v)
    return v


def validate_frame(df: pd.DataFrame, params: Params, path: str = "",
                   intervals: bool = True, level: float = 0.9,
                   inference: bool = True,
                   progress: Progress | None = None) -> ValidationReport:
    """Validate against measurement rows already loaded (see :func:`validate_file`);
    ``progress(done, total)`` counts the rows read, then the prediction stages."""
    n = len(df)

    def stage(k: int) -> None:
        if progress is not None:
            progress(n + k, n + 3)

    def rows_read(i: int, _total: int) -> None:
        if progress is not None:
            progress(i, n + 3)

    prepared, skipped = prepare_rows(df, rows_read)
    prepared, no_params = split_by_params(prepared, params)
    skipped = skipped + no_params
    rows = predict_rows(prepared, params, intervals=intervals, level=level)
    stage(1)
    # [finetune] memory, OOM and scaling-efficiency rows
    other, other_skipped = prepare_other_rows(df)
    other, other_no_params = split_by_params(other, params)
    handled = {r.case_id for r in other} | {x.case_id for x in other_skipped + other_no_params}
    skipped = [x for x in skipped if not (x.reason == OTHER_REASON and x.case_id in handled)]
    skipped += other_skipped + other_no_params
    if other:
        rows = pd.concat([rows, predict_other_rows(other, params)], ignore_index=True)
    stage(2)
    if inference:
        inf_rows, inf_skipped = predict_inference_hook(df, params)
        if inf_rows is not None:
            handled = set(inf_rows["case_id"]) | {x.case_id for x in inf_skipped}
            skipped = [x for x in skipped if not (x.reason == INFERENCE_REASON
                                                  and x.case_id in handled)] + inf_skipped
            if len(inf_rows):
                rows = pd.concat([rows, inf_rows.reindex(columns=rows.columns)],
                                 ignore_index=True)
    stage(3)
    summary = summarize(rows, skipped)
    agree = fit_agreement(rows)
    if agree is not None:
        summary["fit_agreement"] = agree
    return ValidationReport(rows, skipped, summary, params, path, prepared)


def validate_file(path: str | os.PathLike[str] | None = None,
                  params: Params | str | os.PathLike[str] | None = None,
                  intervals: bool = True, level: float = 0.9,
                  inference: bool = True) -> ValidationReport:
    """Validate the model against a measurements file.

    Args:
        path: measurements CSV; None scores the built-in published measurements
            (:func:`builtin_measurements`).
        params: :class:`Params`, a parameter file path, or None for the shipped calibration.
        intervals: compute ``pred_lo``/``pred_hi`` (``level`` prediction interval) where the
            parameters are a calibration of the row's GPU generation.
        level: interval probability.
        inference: also predict serve/prefill rows with the inference model when available
            (:func:`predict_inference_hook`); otherwise they are listed as skipped.

    Returns:
        :class:`ValidationReport`.

    Raises:
        MeasurementsError: the file is unusable.
        ParamsError: the parameter file is invalid.
    """
    if params is None or isinstance(params, (str, os.PathLike)):
        params = load_params(params)
    if path is None:
        path = builtin_measurements()
    return validate_frame(load_measurements(path), params, str(path), intervals, level,
                          inference)
