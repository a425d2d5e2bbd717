"""Public inference API: validated predictions of prefill, decode, memory and serving throughput,
vectorized evaluation of the compiled inference model, and predictions of the ``serve`` /
``prefill`` rows of a published-measurements file.

The expressions are :func:`symcost.inference.inference_expressions`, lowered once per
precision by :func:`inference_model`. Validation happens here, in plain Python, before any
evaluation; a bad request raises :class:`InferenceConfigError` (a
:class:`~symcost.config.ConfigError`) with a one-line message naming the field and the rule.

Quantization rules (``weight_dtype``, ``act_dtype``, ``kv_dtype``; ``dtype`` sets all three):

* bytes per element: bf16/fp16 2, fp8/int8 1, int4 ``0.5 + 2/128`` (4-bit values plus one
  16-bit scale per group of 128, the AWQ/GPTQ default group size; Lin et al. 2024, AWQ,
  Sec. 4; Frantar et al. 2023, GPTQ, Sec. 4).
* GEMMs compute in the activation dtype at the GPU's dense peak for it (``hwspecs``
  ``peak_flops``); int4 exists only as a weight dtype and computes in the activation dtype.
* weights narrower than the activations are dequantized inside the GEMM (weight-only
  quantization: W8A16, W4A16, W4A8), at ``eff_dequant`` of the GEMM rate; weights wider than
  the activations, or two different 8-bit formats, are rejected.
* fp8 storage (weights, activations or KV cache) needs fp8 support on the GPU (an ``fp8``
  peak in its spec); an int8 activation dtype needs an ``int8`` peak.

KV-head rule: with ``k`` KV heads and TP degree ``t``, heads are split when ``k % t == 0``
and replicated (each rank keeps ``max(k, t)/t = 1`` head) when ``t % k == 0``; anything else
is an error.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import sympy as sp

from hwspecs import HardwareSpec, HardwareSpecError, format_bytes, list_hardware, load_hardware

from . import symbols as S
from .api import as_hardware, as_model, used_symbols
from .config import (ACT_DTYPES, DTYPE_BYTES, INT4_GROUP, KV_DTYPES, WEIGHT_DTYPES,
                     InferenceConfig, InferenceConfigError, inference_hardware_bindings,
                     inference_parallel_bindings, model_bindings, resolve_dtypes,
                     resolve_inference)
from .evaluate import evaluate_broadcast
from .inference import (DECODE_BREAKDOWN, PREFILL_BREAKDOWN, STAGE_TERMS, TTFT_ITERATIONS,
                        inference_expressions)
from .lower import CompiledModel, lower
from .measurements import Row, RowError, cell, cell_float, cell_int, source_of
from .models import ModelSpec, ModelSpecError, get_model
from .params import Params, load_params
from .schema import keyed, stamp
from .substitution import formula_with

# pandas is imported inside the function that uses it, so that importing this module (and
# ``symcost --help``) does not load it.
if TYPE_CHECKING:
    import pandas as pd

__all__ = ["ACT_DTYPES", "DTYPE_BYTES", "INT4_GROUP", "KV_DTYPES", "WEIGHT_DTYPES",
           "InferenceConfig", "InferenceConfigError", "InferenceResult", "evaluate_inference",
           "inference_hardware_bindings", "inference_inputs", "inference_model",
           "inference_parallel_bindings", "predict_inference", "predict_inference_rows",
           "resolve_dtypes", "resolve_inference"]


@functools.lru_cache(maxsize=4)
def inference_model(precision: str = "float64") -> CompiledModel:
    """The inference expressions lowered once to a jit-compiled JAX function.

    Args:
        precision: ``float32`` or ``float64``.

    Returns:
        :class:`~symcost.lower.CompiledModel`; inputs are the symbols the expressions use in
        :data:`symcost.symbols.ALL_SYMBOLS` order, outputs as in
        :func:`symcost.inference.inference_expressions`.
    """
    exprs = inference_expressions()
    return lower(exprs, used_symbols(exprs.values()), precision)


def inference_inputs(model: ModelSpec | str, hardware: HardwareSpec | str,
                     config: InferenceConfig, params: Params | None = None
                     ) -> dict[str, float]:
    """Bind every input symbol of the inference model for one request (validated).

    Returns:
        Mapping symbol name -> value in base units (only the names the compiled model uses).

    Raises:
        InferenceConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input.
    """
    model, hw = as_model(model), as_hardware(hardware)
    return _bind_inputs(model, hw, resolve_inference(model, hw, config), params)


def _bind_inputs(model: ModelSpec, hw: HardwareSpec, cfg: InferenceConfig,
                 params: Params | None) -> dict[str, float]:
    """:func:`inference_inputs` for specs and an already resolved ``cfg``."""
    params = params or load_params()
    assert cfg.act_dtype is not None  # resolved: every dtype is set
    values = model_bindings(model)
    values.update(inference_hardware_bindings(hw, cfg.act_dtype))
    values.update(params.for_generation(hw.generation))
    values.update(inference_parallel_bindings(cfg))
    names = inference_model().input_names
    return {k: float(values[k]) for k in names}


# ----------------------------------------------------------------------------- results


@dataclass
class InferenceResult:
    """One inference prediction.

    Attributes:
        values: every output of :func:`~symcost.inference.inference_expressions` (base
            units: s, bytes, tokens/s, FLOP).
        model, hardware, config: what was evaluated (config resolved).
        inputs: the symbol bindings used.
    """

    values: dict[str, float]
    model: ModelSpec
    hardware: HardwareSpec
    config: InferenceConfig
    inputs: dict[str, float] = field(repr=False)

    @property
    def ttft(self) -> float:
        """Time to first token of a batch of ``batch`` prompts, s."""
        return self.values["ttft"]

    @property
    def tpot(self) -> float:
        """Time per output token (one decode step of the batch, mean context), s."""
        return self.values["tpot"]

    @property
    def throughput(self) -> float:
        """Generated tokens/s over all replicas under continuous batching."""
        return self.values["throughput"]

    @property
    def max_batch(self) -> int:
        """Largest batch whose KV cache fits (0 when nothing fits)."""
        return max(int(self.values["max_batch"]), 0)

    @property
    def fits(self) -> bool:
        """True when ``batch`` sequences of ``input_len + output_len`` tokens fit."""
        return self.values["mem_headroom"] >= 0

    @property
    def memory(self) -> dict[str, float]:
        """Memory per GPU in bytes: weights, kv_cache, activations, logits, total, usable,
        kv_budget."""
        v = self.values
        return {"weights": v["mem_weights"], "kv_cache": v["mem_kv_cache"],
                "activations": v["mem_activations"], "logits": v["mem_logits"],
                "total": v["mem_total"], "usable": v["mem_usable"],
                "kv_budget": v["mem_kv_budget"]}

    def breakdown(self, phase: str) -> dict[str, float]:
        """Stage-time terms of ``phase`` (``prefill``: one chunk; ``decode``: one step), s."""
        names = {"prefill": PREFILL_BREAKDOWN, "decode": DECODE_BREAKDOWN}[phase]
        return {k: self.values[n] for k, n in zip(STAGE_TERMS, names)}

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary keyed by :data:`symcost.schema.OUTPUT_KEYS` (the ``infer --json``
        object): ``ttft_s``, ``tpot_s``, ``e2e_latency_s``, ``throughput_tokens_per_s``
        (continuous batching), ``throughput_static_tokens_per_s``, memory per GPU
        ``memory_*_bytes`` (``memory_per_gpu_bytes`` is the total), ``max_batch``, ``fits``,
        ``serve_*``, the stage times ``prefill_*_s`` / ``decode_*_s``, the configuration and
        ``schema_version``."""
        v, cfg = self.values, self.config
        return stamp({
            "model": self.model.name,
            "hardware": self.hardware.name,
            "config": {k: getattr(cfg, k) for k in InferenceConfig.__dataclass_fields__},
            "num_gpus": int(v["num_gpus"]),
            **keyed(v, ("ttft", "tpot", "e2e_latency", "throughput", "throughput_static",
                        "serve_batch", "serve_iteration", "serve_ttft", "kv_bytes_per_token",
                        "kv_bytes_per_sequence", "prefill_flops", "mem_weights",
                        "mem_activations", "mem_kv_cache", "mem_logits", "mem_total",
                        "mem_usable", "mem_kv_budget", "mem_headroom", *PREFILL_BREAKDOWN,
                        *DECODE_BREAKDOWN)),
            "max_batch": self.max_batch,
            "fits": bool(self.fits),
            "prefill_chunks": int(v["prefill_chunks"]),
            "decode_gemm_bound": ("compute" if v["decode_gemm_time_compute"]
                                  >= v["decode_gemm_time_memory"] else "memory"),
        })

    def formula(self, name: str = "tpot", keep: tuple[str, ...] | None = None) -> sp.Expr:
        """The SymPy expression behind output ``name``; symbols not named in ``keep``
        (configuration fields such as ``layers``/``batch``, or symbol names; see
        :func:`symcost.substitution.keep_symbols`) are replaced by this request's values,
        unrounded (all kept when ``keep`` is None). Substitution is structural
        (:func:`symcost.substitution.substitute`, ``xreplace``), so mode flags select their
        ``Piecewise`` branch.

        Raises:
            KeyError: unknown output ``name``.
            ExplainError: unknown name in ``keep``.
        """
        return formula_with(inference_expressions()[name], self.inputs, keep)


def memory_error(result: InferenceResult) -> InferenceConfigError | None:
    """The one-line error for a request whose batch does not fit, or None when it fits."""
    v, cfg, hw = result.values, result.config, result.hardware
    per_seq = v["kv_bytes_per_sequence"] + v["mem_logits"] / max(cfg.batch, 1)
    ctx = cfg.input_len + cfg.output_len
    if v["max_batch"] < 1:
        return InferenceConfigError(
            f"memory: even batch 1 does not fit on {hw.name} (tp={cfg.tp}, pp={cfg.pp}): "
            f"weights {format_bytes(v['mem_weights'], 2)} + activation buffers "
            f"{format_bytes(v['mem_activations'], 2)} of usable "
            f"{format_bytes(v['mem_usable'], 2)} leave a KV budget of "
            f"{format_bytes(v['mem_kv_budget'], 2)} < {format_bytes(per_seq, 3)} for one "
            f"sequence of {ctx} tokens; use more GPUs or narrower dtypes")
    if v["mem_headroom"] < 0:
        return InferenceConfigError(
            f"batch: {cfg.batch} sequences of {ctx} tokens do not fit on {hw.name}; at most "
            f"{int(v['max_batch'])} fit (KV cache {format_bytes(per_seq, 3)} per sequence, budget "
            f"{format_bytes(v['mem_kv_budget'], 2)} per GPU)")
    return None


def predict_inference(model: ModelSpec | str, hardware: HardwareSpec | str,
                      config: InferenceConfig | None = None, params: Params | None = None,
                      precision: str = "float64", *, check_memory: bool = True,
                      **config_fields: Any) -> InferenceResult:
    """Predict prefill, decode, memory and serving throughput for one request shape.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        config: the serving layout; or pass its fields as keyword arguments.
        params: efficiency parameters; the shipped calibration when None.
        precision: ``float64`` (default; the generated source evaluated on NumPy, so one
            prediction needs neither JAX nor a jit compile) or ``float32`` (the jit-compiled
            JAX function).
        check_memory: raise when ``batch`` does not fit (default); when False the result is
            returned with ``fits`` False (the continuous-batching throughput then uses the
            largest batch that fits, see :mod:`symcost.inference`).

    Returns:
        :class:`InferenceResult` (times in s, memory in bytes, throughput in tokens/s).

    Raises:
        InferenceConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input,
            or (``check_memory``) a batch that does not fit, with a one-line message.

    Example:
        >>> r = predict_inference("llama-2-70b", "h100-sxm5-80gb", tp=2, dtype="fp8",
        ...                       batch=64, input_len=2048, output_len=128)  # doctest: +SKIP
    """
    if config is None:
        config = InferenceConfig(**config_fields)
    elif config_fields:
        config = config.replace(**config_fields)
    m, hw = as_model(model), as_hardware(hardware)
    cfg = resolve_inference(m, hw, config)
    inputs = _bind_inputs(m, hw, cfg, params)
    cm = inference_model(precision)
    # one request: the generated source on NumPy answers without importing JAX or compiling
    out = cm.call_numpy(**inputs) if precision == "float64" else cm(**inputs)
    values = {k: float(v) for k, v in out.items()}
    result = InferenceResult(values, m, hw, cfg, inputs)
    if check_memory:
        err = memory_error(result)
        if err is not None:
            raise err
    return result


def evaluate_inference(inputs: Mapping[str, npt.ArrayLike],
                       precision: str = "float32") -> dict[str, npt.NDArray[Any]]:
    """Evaluate the compiled inference model on broadcast arrays (no validation).

    Args:
        inputs: symbol name -> array or scalar for every name in
            ``inference_model().input_names``; extra names are ignored.
        precision: ``float32`` or ``float64``.

    Returns:
        Output name -> array of the broadcast shape.

    Raises:
        KeyError: an input is missing.
    """
    return evaluate_broadcast(inference_model(precision), inputs)


# ----------------------------------------------------------------------------- measurements
#: TensorRT-LLM v0.17 ``trtllm-bench`` settings of the TRT017 rows (NVIDIA/TensorRT-LLM
#: docs/source/performance/perf-overview.md @ 258c7540 and tensorrt_llm/bench/build/tuning.py):
#: "we also use a higher KV cache percentage by setting --kv_cache_free_gpu_mem_fraction 0.95";
#: "If you specify FP8 quantization, the KV cache will automatically be set to FP8 as well";
#: the build caps the batch at 4096 requests and sizes max_num_tokens from the dataset
#: (see :func:`trtllm_bench_max_num_tokens`); scheduling policy GUARANTEED_NO_EVICT.
TRT017_SETTINGS: dict[str, Any] = {"kv_mem_frac": 0.95, "batch_cap": 4096}
#: NVIDIA's MLPerf Inference v4.0 closed configuration for Llama-2-70B on 2x H100-SXM-80GB
#: (mlcommons/inference_results_v4.0 closed/NVIDIA/configs/llama2-70b/{Offline,Server}/
#: __init__.py, class H100_SXM_80GB_TP2x1): tensor_parallelism 2, use_fp8 True,
#: kvcache_free_gpu_mem_frac 0.90, gpu_batch_size 896 (Offline) and 1024 (Server).
#: Runtime: NVIDIA's LLM harness runs TensorRT-LLM with batch_scheduler_policy 'max_util'
#: (on-demand KV blocks; DEFAULT_RUNTIME_FLAGS of the harness in later rounds, the v4.0 runtime
#: flags were not read) and max_num_tokens 8192 (TensorRT-LLM's default; not read).
MLPI40_SETTINGS: dict[str, Any] = {"kv_mem_frac": 0.90, "batch_cap": {"offline": 896, "server": 1024},
                   "max_num_tokens": 8192, "kv_on_demand": True}
#: MLPerf Llama-2-70B dataset (OpenOrca, 24,576 samples, inputs <= 1024 tokens; mlcommons/
#: inference language/llama2-70b/README.md, "Tokens per sample: 294.45" for the reference).
#: The generated tokens per sample are read from each row (tokens/s over the samples/s in its
#: notes). THE MEAN INPUT LENGTH IS AN ASSUMPTION: no stored source states it. 350 tokens is
#: a typical OpenOrca prompt (a ~40-token system prompt plus an instruction, question or short
#: passage, Llama-2 chat template) -- but it was chosen after seeing the MLPerf sensitivity
#: (``benchmarks/inference_accuracy.py`` section 3: the offline throughput is consistent with
#: means of 300-350 tokens; 750 would need GEMMs above 65% of the fp8 peak with nothing else
#: costing time), so the MLPerf figures are not an independent check until the dataset's
#: ``tok_input_length`` mean replaces it.
MLPERF_OPENORCA_INPUT_MEAN = 350
MLPERF_OPENORCA_OUTPUT_MEAN = 294.45

#: metrics of the format this module predicts, and the output each maps to.
ROW_METRICS = {
    "output_throughput": "throughput",
    "peak_output_throughput": "throughput",
    "offline_tokens_per_s": "throughput",
    "server_tokens_per_s": "throughput",
    "ttft_mean_ms": "serve_ttft", "ttft_p50_ms": "serve_ttft",
    "tpot_mean_ms": "serve_iteration", "tpot_p50_ms": "serve_iteration",
    "ttft_ms": "ttft", "first_token_latency_ms": "ttft",
    "inter_token_latency_ms": "tpot",
}
_MS = {"ttft_mean_ms", "ttft_p50_ms", "tpot_mean_ms", "tpot_p50_ms", "ttft_ms",
       "first_token_latency_ms", "inter_token_latency_ms"}


def trtllm_bench_max_num_tokens(max_requests: float, input_len: int, output_len: int,
                                pp: int = 1) -> tuple[int, int]:
    """``(max_batch_size, max_num_tokens)`` as ``trtllm-bench build`` picks them
    (TensorRT-LLM ``tensorrt_llm/bench/build/tuning.py``, ``finetune_setting``) from the
    number of requests the KV cache holds.

    Args:
        max_requests: requests of ``input_len + output_len`` tokens the KV cache holds.
        input_len, output_len: the dataset's lengths.
        pp: pipeline stages.

    Returns:
        ``(max_batch_size, max_num_tokens)``: the batch-size cap in requests (a multiple of
        32, 128 or 256, at least 64) and the token budget of one iteration in tokens (a
        multiple of 256, 512 or 1024, between 2048 and 32768).
    """
    raw_bs = min(max(max_requests, 0.0), 4096) / pp
    raw_token = min(raw_bs * (1 + input_len / output_len), 32768)
    if raw_bs < 256:
        bs = max(64, 32 * math.ceil(raw_bs / 32))
    elif raw_bs < 1024:
        bs = 128 * math.ceil(raw_bs / 128)
    else:
        bs = 256 * math.ceil(raw_bs / 256)
    if raw_token < 4096:
        tok = max(2048, 256 * math.ceil(raw_token / 256))
    elif raw_token < 8192:
        tok = 512 * math.ceil(raw_token / 512)
    else:
        tok = 1024 * math.ceil(raw_token / 1024)
    return bs, tok


def _row_model(row: Row) -> ModelSpec:
    """The preset named by the row, with the row's shape columns applied.

    Raises:
        RowError: blank or unknown model, malformed shape column (naming the column).
    """
    name = cell(row, "model")
    if name is None:
        raise RowError("model: blank (a preset name is needed for the architecture)")
    try:
        m = get_model(str(name).lower())
    except ModelSpecError:
        raise RowError(f"model: {name!r} has no preset to supply its architecture") from None
    shape: dict[str, int] = {}
    for col in ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab"):
        v = cell_int(row, col)
        if v is not None:
            shape[col] = v
    return m.replace(**shape) if shape else m


def _row_request(row: Row, source: str, metric: str, measured: float,
                 mlperf_input_mean: float) -> tuple[int, int, dict[str, Any]]:
    """``(input_len, output_len, settings)`` of one row (``measured``: its positive value).

    Raises:
        RowError: lengths not stated or malformed (naming the column).
    """
    s_in, s_out = cell_int(row, "input_len"), cell_int(row, "output_len")
    if source == "TRT017":
        if s_in is None or s_out is None:
            raise RowError("input_len/output_len: blank (both are needed)")
        return s_in, s_out, dict(TRT017_SETTINGS)
    if source == "MLPI40":
        settings = {k: MLPI40_SETTINGS[k] for k in ("kv_mem_frac", "max_num_tokens",
                                                    "kv_on_demand")}
        scenario = "offline" if "offline" in str(cell(row, "case_id") or "").lower() \
            else "server"
        settings["batch_cap"] = MLPI40_SETTINGS["batch_cap"][scenario]
        out_mean = MLPERF_OPENORCA_OUTPUT_MEAN
        notes = str(cell(row, "notes") or "")
        match = re.search(r"([0-9]+(?:\.[0-9]*)?)\s*(?:completed\s+)?samples/s", notes)
        if match and float(match.group(1)) > 0 and metric in ("offline_tokens_per_s",
                                                              "server_tokens_per_s"):
            out_mean = measured / float(match.group(1))
        rate = re.search(r"target_qps\s*([0-9]+(?:\.[0-9]*)?)", notes)
        if scenario == "server" and rate:
            settings["arrival_rate"] = float(rate.group(1))
        s_in = int(round(mlperf_input_mean)) if s_in is None else s_in
        s_out = max(int(round(out_mean)), 1) if s_out is None else s_out
        return s_in, s_out, settings
    if s_in is None or s_out is None:
        raise RowError("input_len/output_len: blank (both are needed)")
    # other sources: the stated batch, else one request for a latency metric and the
    # TensorRT-LLM defaults (memory-limited batch, capped at 4096) for a throughput metric
    batch = cell_int(row, "micro_batch")
    batch = cell_int(row, "global_batch") if batch is None else batch
    if batch is None:
        batch = 4096 if ROW_METRICS[metric] == "throughput" else 1
    return s_in, s_out, {"kv_mem_frac": 0.9, "batch_cap": batch, "max_num_tokens": 8192}


#: points of the concurrency grid :func:`solve_arrival_rate` evaluates (one compiled shape).
RATE_GRID_POINTS = 256


def solve_arrival_rate(inputs: Mapping[str, float], rate: float,
                       precision: str = "float64") -> dict[str, float]:
    """Steady state of continuous batching under a Poisson-free (fluid) arrival rate.

    With ``rate`` requests/s, Little's law gives the sequences in flight
    ``B = rate * (serve_ttft + (output_len - 1) * t_iter(B)) = rate * (output_len - 1 + n_f) *
    t_iter(B)`` with ``n_f`` = :data:`symcost.inference.TTFT_ITERATIONS` (first token after
    ``n_f = 1.5`` iterations, one token per iteration after that). ``t_iter`` grows with
    ``B``, so the fixed point is found on a grid of :data:`RATE_GRID_POINTS` concurrencies up
    to the saturation batch (one vectorized call) and refined by linear interpolation.
    Queueing delay is not modelled.

    Args:
        inputs: bindings of :func:`inference_inputs` (``batch`` is the cap on sequences in
            flight).
        rate: arrival rate, requests/s (per replica group: all ``dp`` replicas share it).
        precision: ``float64`` (default) or ``float32``.

    Returns:
        ``concurrency`` (sequences in flight per replica), ``iteration_s`` (= time per output
        token), ``ttft_s``, ``throughput_tokens_per_s`` (all replicas), ``saturated`` (1.0
        when the rate exceeds what the replicas sustain; then the saturation values).

    Raises:
        InferenceConfigError: ``rate`` not positive.
    """
    if not rate > 0:
        raise InferenceConfigError(f"rate: must be positive (got {rate!r})")
    sat = evaluate_inference(dict(inputs), precision)
    cap = float(sat["serve_batch"])
    o = float(inputs[S.output_len.name])
    dp = float(inputs[S.dp.name])
    per_replica = rate / dp
    n_first = float(TTFT_ITERATIONS)
    grid = np.geomspace(min(1.0, cap), max(cap, 1.0), RATE_GRID_POINTS)
    arrays = {k: np.full(RATE_GRID_POINTS, v, dtype=np.float64) for k, v in inputs.items()}
    arrays[S.batch.name] = grid
    t_iter = np.asarray(evaluate_inference(arrays, precision)["serve_iteration"], dtype=float)
    f = grid - per_replica * (o - 1 + n_first) * t_iter
    if f[-1] < 0:  # cannot keep up: saturated
        t = float(sat["serve_iteration"])
        return {"concurrency": cap, "iteration_s": t, "ttft_s": float(sat["serve_ttft"]),
                "throughput_tokens_per_s": float(sat["throughput"]), "saturated": 1.0}
    k = int(np.argmax(f >= 0))
    if k == 0:
        b, t = float(grid[0]), float(t_iter[0])
    else:
        w = f[k - 1] / (f[k - 1] - f[k])
        b = float(grid[k - 1] + w * (grid[k] - grid[k - 1]))
        t = float(t_iter[k - 1] + w * (t_iter[k] - t_iter[k - 1]))
    return {"concurrency": b, "iteration_s": t, "ttft_s": n_first * t,
            "throughput_tokens_per_s": rate * o, "saturated": 0.0}


def _stack(rows_inputs: list[dict[str, float]]) -> dict[str, npt.NDArray[np.float64]]:
    names = inference_model().input_names
    return {n: np.array([r[n] for r in rows_inputs], dtype=np.float64) for n in names}


def predict_inference_rows(df: pd.DataFrame, params: Params | None = None, *,
                           input_mean_mlperf: float | None = None) -> pd.DataFrame:
    """Predict the ``serve`` and ``prefill`` rows of a published-measurements table.

    Conventions (``shared/validation/README.md``): ``output_throughput`` (TRT017) is generated
    tokens/s over all GPUs with in-flight batching at a saturating request rate, predicted by
    the continuous-batching ``throughput`` with the batch limited by the KV cache and the
    harness's caps; MLPerf ``offline_tokens_per_s`` likewise. MLPerf Server rows run at the
    offered load stated in the notes (``target_qps``): the steady state at that rate
    (:func:`solve_arrival_rate`) gives ``server_tokens_per_s`` (the offered tokens/s unless
    the system saturates), ``ttft_*`` (:data:`symcost.inference.TTFT_ITERATIONS`
    iterations) and ``tpot_*`` (the iteration time); mean and median are both predicted by
    the mean; tail percentiles (p90/p99) are not modelled. Rows of other sources (a user's
    own file): ``ttft_ms`` /
    ``first_token_latency_ms`` -> ``ttft`` and ``inter_token_latency_ms`` -> ``tpot`` of a
    batch of ``micro_batch`` (else ``global_batch``, else 1) requests; throughput metrics ->
    the continuous-batching ``throughput`` with that batch as the cap (else 4096). Each row's
    engine settings are documented in :data:`TRT017_SETTINGS` and :data:`MLPI40_SETTINGS`.
    All rows are evaluated in one vectorized call (two: the first sizes ``max_num_tokens`` as
    ``trtllm-bench`` does).

    Args:
        df: :class:`pandas.DataFrame` in the published-measurements format.
        params: efficiency parameters; the shipped calibration when None.
        input_mean_mlperf: override of :data:`MLPERF_OPENORCA_INPUT_MEAN` (sensitivity).

    Returns:
        :class:`pandas.DataFrame` with columns ``case_id``, ``source``, ``metric``,
        ``measured``, ``predicted``, ``error_pct`` (100*(predicted-measured)/measured),
        ``hardware``, ``serve_batch``; ``df.attrs["skipped"]`` is a list of dicts
        ``{case_id, source, metric, reason}`` for every serve/prefill row not predicted.
        Row errors never raise: a blank or non-positive ``value``, a blank or unknown
        ``model``/``hardware``, a malformed number (the reason names the column, as
        :mod:`symcost.validate` does), an invalid layout or a model that does not fit make
        the row skipped. Blank ``tp``/``pp`` are 1, blank ``n_gpus`` is ``tp*pp``, blank
        ``dtype`` is bf16.
    """
    import pandas as pd

    params = params or load_params()
    mlperf_in = MLPERF_OPENORCA_INPUT_MEAN if input_mean_mlperf is None else input_mean_mlperf
    skipped: list[dict[str, str]] = []
    prepared: list[ServeRow] = []
    for rec in df.to_dict("records"):
        item = _prepare_serve_row(rec, params, mlperf_in)
        if item is None:
            continue
        if isinstance(item, dict):
            skipped.append(item)
        else:
            prepared.append(item)
    rows = _predict_serve_rows(prepared, skipped) if prepared else []
    frame = pd.DataFrame(rows, columns=["case_id", "source", "metric", "measured",
                                        "predicted", "error_pct", "hardware", "serve_batch"])
    frame.attrs["skipped"] = skipped
    return frame


@dataclass
class ServeRow:
    """A ``serve``/``prefill`` measurement ready to predict.

    Attributes:
        case_id, source, metric: the row's identity.
        measured: its value.
        hardware: hardware id.
        config: the resolved serving configuration.
        inputs: symbol bindings (base units).
        size_max_num_tokens: size ``max_num_tokens`` as ``trtllm-bench`` does (TRT017).
        rate: offered request rate in requests/s (MLPerf Server), or None.
    """

    case_id: str
    source: str
    metric: str
    measured: float
    hardware: str
    config: InferenceConfig
    inputs: dict[str, float]
    size_max_num_tokens: bool
    rate: float | None


def _prepare_serve_row(rec: Row, params: Params, mlperf_in: float
                       ) -> ServeRow | dict[str, str] | None:
    """One record as a :class:`ServeRow`; a dict ``{case_id, source, metric, reason}`` when
    it cannot be predicted; None when it is not a serve/prefill row."""
    workload = str(cell(rec, "workload") or "").lower()
    if workload not in ("serve", "prefill"):
        return None
    case_id = str(cell(rec, "case_id") or "")
    source = source_of(case_id)
    metric = str(cell(rec, "metric") or "")

    def skip(reason: str) -> dict[str, str]:
        return {"case_id": case_id, "source": source, "metric": metric, "reason": reason}

    if metric not in ROW_METRICS:
        return skip(f"metric {metric!r} is not modelled (tail percentiles and unknown "
                    "metrics are not predicted)")
    try:
        measured = cell_float(rec, "value")
        if measured is None or measured <= 0:
            raise RowError(f"value: must be a positive number (got {cell(rec, 'value')!r})")
        m = _row_model(rec)
        hw_id = cell(rec, "hardware")
        if hw_id is None:
            raise RowError("hardware: blank (a canonical hardware id is needed)")
        try:
            hw = load_hardware(str(hw_id))
        except HardwareSpecError:
            raise RowError(f"hardware: unknown id {hw_id!r} (known: "
                           f"{', '.join(list_hardware())})") from None
        tp, pp, n = cell_int(rec, "tp"), cell_int(rec, "pp"), cell_int(rec, "n_gpus")
        ep = cell_int(rec, "ep")
        tp = 1 if tp is None else tp
        pp = 1 if pp is None else pp
        ep = 1 if ep is None else ep
        n = tp * pp if n is None else n
        dtype = str(cell(rec, "dtype") or "bf16").lower()
        s_in, s_out, settings = _row_request(rec, source, metric, measured, mlperf_in)
        cfg = InferenceConfig(batch=settings["batch_cap"], input_len=s_in,
                              output_len=s_out, tp=tp, pp=pp, ep=ep, num_gpus=n,
                              dtype=dtype,
                              max_num_tokens=settings.get("max_num_tokens", 8192),
                              kv_mem_frac=settings["kv_mem_frac"],
                              kv_on_demand=settings.get("kv_on_demand", False))
        cfg = resolve_inference(m, hw, cfg)
        inputs = _bind_inputs(m, hw, cfg, params)
    except (ValueError, HardwareSpecError, ModelSpecError) as exc:
        # RowError, InferenceConfigError and the spec errors all name the field
        return skip(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return ServeRow(case_id, source, metric, measured, hw.name, cfg, inputs,
                    "max_num_tokens" not in settings, settings.get("arrival_rate"))


def _predict_serve_rows(prepared: list[ServeRow], skipped: list[dict[str, str]]
                        ) -> list[dict[str, Any]]:
    """Predictions of prepared rows (two vectorized evaluations: the first sizes
    ``max_num_tokens`` as ``trtllm-bench`` does); rows whose model does not fit go to
    ``skipped``."""
    first = evaluate_inference(_stack([p.inputs for p in prepared]), "float64")
    for i, p in enumerate(prepared):
        if p.size_max_num_tokens:
            _, tok = trtllm_bench_max_num_tokens(float(first["serve_max_batch"][i]),
                                                 p.config.input_len, p.config.output_len,
                                                 p.config.pp)
            p.inputs[S.max_num_tokens.name] = float(tok)
    out = evaluate_inference(_stack([p.inputs for p in prepared]), "float64")
    rows = []
    at_rate = {"throughput": "throughput_tokens_per_s", "serve_ttft": "ttft_s",
               "serve_iteration": "iteration_s"}
    for i, p in enumerate(prepared):
        if float(out["serve_max_batch"][i]) < 1:
            skipped.append({"case_id": p.case_id, "source": p.source, "metric": p.metric,
                            "reason": "the model does not fit in memory in this layout"})
            continue
        name = ROW_METRICS[p.metric]
        if p.rate is not None and name in at_rate:
            steady = solve_arrival_rate(p.inputs, p.rate)
            pred = steady[at_rate[name]]
            batch_used = steady["concurrency"]
        else:
            pred = float(out[name][i])
            batch_used = float(out["serve_batch"][i])
        pred *= 1e3 if p.metric in _MS else 1.0
        rows.append({"case_id": p.case_id, "source": p.source, "metric": p.metric,
                     "measured": p.measured, "predicted": pred,
                     "error_pct": 100.0 * (pred - p.measured) / p.measured,
                     "hardware": p.hardware, "serve_batch": batch_used})
    return rows


def mape_by_source(frame: pd.DataFrame) -> dict[str, float]:
    """Mean absolute percentage error per source (and ``all``) of a
    :func:`predict_inference_rows` frame."""
    out = {str(src): float(g["error_pct"].abs().mean()) for src, g in frame.groupby("source")}
    out["all"] = float(frame["error_pct"].abs().mean()) if len(frame) else float("nan")
    return out
