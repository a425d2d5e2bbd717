"""One JSON vocabulary for every command: the key of each output quantity and the JSON Schema
(draft 2020-12) of each command's ``--json`` object.

Keys carry the SI unit in their suffix: ``_s`` (seconds), ``_bytes``, ``_flops`` (floating-point
operations), ``_flops_per_s``, ``_tokens_per_s``, ``_bytes_per_s``, ``_usd``; fractions
(``mfu``, ``hfu``, shares) and counts (``params_total``, ``max_batch``) have no suffix. The
model's output names (:func:`symcost.training.training_expressions`,
:func:`symcost.inference.inference_expressions`) map to keys through :data:`OUTPUT_KEYS`, the
only place that mapping is written: :meth:`symcost.api.TrainingResult.to_dict`,
:meth:`symcost.infer_api.InferenceResult.to_dict`, the search and sweep tables and every CLI
``--json`` writer use it. Configuration fields (``tp``, ``micro_batch``, ...) and hardware
symbols (``hbm_bw`` in B/s, ``peak_flops_16`` in FLOP/s, ...) keep their names.

Every ``--json`` object carries ``"schema_version"`` (:data:`SCHEMA_VERSION`, bumped when a
key is renamed or removed). This module imports nothing outside the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

__all__ = ["COMMAND_SCHEMAS", "OUTPUT_KEYS", "SCHEMA_VERSION", "json_key", "keyed",
           "rename_keys", "stamp", "to_json_value"]

#: version of the JSON vocabulary below; every ``--json`` object carries it.
SCHEMA_VERSION = 1

#: the step-time terms of :data:`symcost.training.BREAKDOWN` without ``time_`` (a test checks
#: the two agree; this layer cannot import the model).
_TRAIN_BREAKDOWN = ("forward", "backward", "recompute", "tp_comm", "cp_comm", "ep_comm",
                    "pp_p2p", "pp_bubble", "dp_comm", "optimizer", "overhead")
_INFER_STAGES = ("gemm", "attention", "memory_ops", "tp_comm", "ep_comm", "lm_head", "pp_p2p")

#: model output name -> JSON key (also the CSV / Parquet column of a sweep).
OUTPUT_KEYS: dict[str, str] = {
    # training
    "step_time": "step_time_s",
    **{f"time_{t}": f"time_{t}_s" for t in _TRAIN_BREAKDOWN},
    "flops_model": "model_flops",
    "flops_hardware": "hardware_flops",
    "tokens_per_s": "tokens_per_s",
    "tokens_per_s_per_gpu": "tokens_per_s_per_gpu",
    "mfu": "mfu",
    "hfu": "hfu",
    "params_total": "params_total",
    "num_gpus": "num_gpus",
    # memory per GPU (training and inference)
    "mem_weights": "memory_weights_bytes",
    "mem_gradients": "memory_gradients_bytes",
    "mem_optimizer": "memory_optimizer_bytes",
    "mem_activations": "memory_activations_bytes",
    "mem_kv_cache": "memory_kv_cache_bytes",
    "mem_logits": "memory_logits_bytes",
    "mem_total": "memory_per_gpu_bytes",
    "mem_host": "memory_host_bytes",  # [offload] host (CPU) memory per GPU
    "mem_usable": "memory_usable_bytes",
    "mem_kv_budget": "memory_kv_budget_bytes",
    "mem_headroom": "memory_headroom_bytes",
    "mem_cached": "memory_cached_bytes",  # [memory] freed blocks the allocator still holds
    # per transformer layer, one micro-batch on one GPU (the average layer)
    "time_layer_forward": "time_layer_forward_s",
    "time_layer_backward": "time_layer_backward_s",
    "time_layer_recompute": "time_layer_recompute_s",
    "mem_activations_layer": "memory_activations_per_layer_bytes",
    # inference
    "ttft": "ttft_s",
    "tpot": "tpot_s",
    "e2e_latency": "e2e_latency_s",
    "throughput": "throughput_tokens_per_s",
    "throughput_static": "throughput_static_tokens_per_s",
    "serve_batch": "serve_batch",
    "serve_iteration": "serve_iteration_s",
    "serve_ttft": "serve_ttft_s",
    "max_batch": "max_batch",
    "serve_max_batch": "serve_max_batch",
    "kv_bytes_per_token": "kv_bytes_per_token",
    "kv_bytes_per_sequence": "kv_bytes_per_sequence",
    "prefill_chunks": "prefill_chunks",
    "prefill_flops": "prefill_flops",
    **{f"{ph}_{t}": f"{ph}_{t}_s" for ph in ("prefill", "decode", "serve")
       for t in _INFER_STAGES},
    "decode_gemm_time_compute": "decode_gemm_compute_s",
    "decode_gemm_time_memory": "decode_gemm_memory_s",
    "decode_flops_per_step": "decode_flops",
    "decode_bytes_per_step": "decode_bytes",
    # search and co-design (derived)
    "usd_per_step": "step_cost_usd",
    "tokens_per_usd": "tokens_per_usd",
    # price model (hwspecs.prices; dse and dissect with a price)
    "usd_per_gpu_hour": "gpu_hour_cost_usd",
    "usd_per_token": "cost_per_token_usd",
    "usd_per_million_tokens": "cost_per_million_tokens_usd",
    # roofline and DRAM study
    "flops": "flops",
    "bytes": "bytes",
    "intensity": "intensity_flops_per_byte",
    "ridge": "ridge_flops_per_byte",
    "peak_flops": "peak_flops_per_s",
    "attainable_flops": "attainable_flops_per_s",
    "bandwidth": "bandwidth_bytes_per_s",
    "bw_compute_bound": "compute_bound_above_bytes_per_s",
    "time_s": "time_s",
}


def json_key(name: str) -> str:
    """The JSON key of output ``name`` (``"step_time"`` -> ``"step_time_s"``).

    Raises:
        KeyError: ``name`` is not an output quantity of :data:`OUTPUT_KEYS`.
    """
    return OUTPUT_KEYS[name]


def rename_keys(names: Iterable[str]) -> dict[str, str]:
    """``{name: key}`` for the names that are output quantities (others keep their name:
    configuration fields, hardware symbols, labels); for ``DataFrame.rename(columns=...)``."""
    return {n: OUTPUT_KEYS[n] for n in names if n in OUTPUT_KEYS}


def to_json_value(v: Any) -> Any:
    """A JSON-ready value: NumPy scalars become Python numbers, non-finite floats ``None``;
    dicts, lists and tuples are converted recursively."""
    if hasattr(v, "item") and not isinstance(v, (list, dict, str)) and getattr(v, "ndim", 1) == 0:
        v = v.item()
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, Mapping):
        return {str(k): to_json_value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [to_json_value(x) for x in v]
    return v


def keyed(values: Mapping[str, Any], names: Iterable[str] | None = None) -> dict[str, Any]:
    """``{json_key(name): value}`` for ``names`` (default: every output in ``values``),
    values made JSON-ready (:func:`to_json_value`).

    Raises:
        KeyError: a name is not an output quantity.
    """
    return {json_key(n): to_json_value(values[n]) for n in (values if names is None else names)}


def stamp(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` with ``"schema_version"`` first, made JSON-ready (:func:`to_json_value`)."""
    return {"schema_version": SCHEMA_VERSION, **to_json_value(dict(obj))}


# ----------------------------------------------------------------------------- JSON Schemas
_NUM = {"type": "number"}
_NUM_OR_NULL = {"type": ["number", "null"]}
_INT = {"type": "integer"}
_STR = {"type": "string"}
_BOOL = {"type": "boolean"}
_OBJ = {"type": "object"}
_INTERVAL = {"type": "array", "items": _NUM, "minItems": 2, "maxItems": 2}


def _object(required: Mapping[str, dict], optional: Mapping[str, dict] | None = None,
            closed: bool = False) -> dict:
    props = {"schema_version": {"const": SCHEMA_VERSION}, **required, **(optional or {})}
    out: dict[str, Any] = {"type": "object", "properties": props,
                           "required": ["schema_version", *required]}
    if closed:
        out["additionalProperties"] = False
    return out


def _keys(names: Iterable[str], schema: dict = _NUM) -> dict[str, dict]:
    return {OUTPUT_KEYS[n]: schema for n in names}


def _rows(item: dict) -> dict:
    return {"type": "array", "items": item}


_TRAIN_MEMORY = ("mem_weights", "mem_gradients", "mem_optimizer", "mem_activations",
                 "mem_total", "mem_host", "mem_usable", "mem_headroom")
_TRAIN_OUTPUTS = ("step_time", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                  "flops_model", "flops_hardware", "params_total", *_TRAIN_MEMORY,
                  *(f"time_{t}" for t in _TRAIN_BREAKDOWN))
_INFER_OUTPUTS = ("ttft", "tpot", "e2e_latency", "throughput", "throughput_static",
                  "serve_batch", "serve_iteration", "serve_ttft", "kv_bytes_per_token",
                  "kv_bytes_per_sequence", "prefill_flops", "mem_weights", "mem_activations",
                  "mem_kv_cache", "mem_logits", "mem_total", "mem_usable", "mem_kv_budget",
                  "mem_headroom", *(f"{ph}_{t}" for ph in ("prefill", "decode")
                                    for t in _INFER_STAGES))

_train = _object({"model": _STR, "hardware": _STR, "config": _OBJ, "fits": _BOOL,
                  **_keys(_TRAIN_OUTPUTS)},
                 {f"{k}_interval": _INTERVAL for k in ("step_time_s", "tokens_per_s", "mfu")},
                 closed=True)
_infer = _object({"model": _STR, "hardware": _STR, "config": _OBJ, "fits": _BOOL,
                  "num_gpus": _INT, "max_batch": _INT, "prefill_chunks": _INT,
                  "decode_gemm_bound": {"enum": ["compute", "memory"]},
                  **_keys(_INFER_OUTPUTS)}, closed=True)
_layout = {k: _INT for k in ("num_gpus", "tp", "pp", "dp", "micro_batch", "vpp", "zero")}
_search_row = {"type": "object",
               "properties": {"rank": _INT, **_layout, "recompute": _STR,
                              "sp": {"type": ["boolean", "integer"]},
                              "dp_overlap": {"type": ["boolean", "integer"]},
                              **_keys(("step_time", "tokens_per_s", "tokens_per_s_per_gpu",
                                       "mfu", "hfu", *_TRAIN_MEMORY,
                                       *(f"time_{t}" for t in _TRAIN_BREAKDOWN))),
                              "score": _NUM},
               "required": ["rank", *_layout, "recompute",
                            *(OUTPUT_KEYS[n] for n in ("step_time", "tokens_per_s", "mfu",
                                                       "mem_total", "mem_headroom"))]}
_codesign_row = {"type": "object",
                 "properties": {"design": {"enum": ["reference", "codesign"]},
                                "status": _STR, "pareto": _BOOL,
                                "budget_usd_per_gpu": _NUM_OR_NULL,
                                "cost_usd_per_gpu": _NUM_OR_NULL,
                                **_keys(("step_time", "mfu", "tokens_per_s", "mem_total"),
                                        _NUM_OR_NULL),
                                **{k: _NUM_OR_NULL for k in ("peak_flops_16", "hbm_bw",
                                                             "hbm_cap", "intra_bw",
                                                             "inter_bw")}},
                 "required": ["design", "status", "budget_usd_per_gpu"]}
_roofline_row = {"type": "object",
                 "properties": {"hardware": _STR, "phase": {"enum": ["prefill", "decode"]},
                                "op": _STR, "dtype": _STR, "bound": _STR,
                                **_keys(("flops", "bytes", "intensity", "ridge", "peak_flops",
                                         "attainable_flops", "bandwidth", "time_s"))},
                 "required": ["hardware", "phase", "op", "flops", "bytes", "time_s",
                              "attainable_flops_per_s"], "additionalProperties": False}
_dram_row = {"type": "object",
             "properties": {"technology": _STR, "batch": _INT, "fits": _BOOL,
                            "decode_bound": _STR,
                            **_keys(("bandwidth", "ttft", "tpot", "throughput",
                                     "decode_gemm_time_compute", "decode_gemm_time_memory",
                                     "bw_compute_bound"), _NUM_OR_NULL)},
             "required": ["technology", "batch", "bandwidth_bytes_per_s", "ttft_s", "tpot_s",
                          "throughput_tokens_per_s"]}
_price_keys = ("usd_per_gpu_hour", "usd_per_token", "usd_per_million_tokens", "tokens_per_usd")
#: a dse point: the price columns are present only when a price model is given.
_dse_row = {"type": "object",
            "properties": {"node": _STR, "memory": _STR, "network": _STR, "speedup": _NUM,
                           "energy_per_token_j": _NUM, "bound": _STR,
                           **_keys(("step_time", "throughput", *_price_keys))},
            "required": ["node", "memory", "network", "speedup", "energy_per_token_j",
                         "bound"]}
_cost_side = {"type": "object", "properties": {**_keys(_price_keys), "price": _OBJ},
              "required": [OUTPUT_KEYS[n] for n in _price_keys]}
_validate_row = {"type": "object",
                 "properties": {"case_id": _STR, "metric": _STR, "measured": _NUM,
                                "predicted": _NUM, "error_pct": _NUM,
                                "assumed": {"type": "object",
                                            "additionalProperties": _STR}},
                 "required": ["case_id", "metric", "measured", "predicted", "error_pct"]}

#: command name -> JSON Schema (draft 2020-12) of its ``--json`` output.
COMMAND_SCHEMAS: dict[str, dict] = {
    "train": _train,
    "infer": _infer,
    "roofline": _object({"model": _STR, "config": _OBJ, "plot": {"type": ["string", "null"]},
                         "operators": _rows(_roofline_row)}),
    "dram-study": _object({"model": _STR, "hardware": _STR, "stacks": _INT,
                           "technologies": {"type": "array"}, "rows": _rows(_dram_row)}),
    "sweep": _object({"rows": _INT, "valid_rows": _INT, "invalid_counts": _OBJ,
                      "seconds": _NUM, "configs_per_s": _NUM, "precision": _STR,
                      "out": {"type": ["string", "null"]}, "top": _rows(_OBJ)}),
    "sensitivity": _object({"model": _STR, "hardware": _STR, "config": _OBJ, "fits": _BOOL,
                            "outputs": _OBJ, "parameters": _rows(_OBJ)}),
    "bottleneck": _object({"model": _STR, "hardware": _STR, "config": _OBJ, "fits": _BOOL,
                           "step_time_s": _NUM, "summary": _STR, "categories": _OBJ,
                           "operators": _rows({"type": "object",
                                               "required": ["name", "time_s", "share",
                                                            "bound"]})}),
    "explain": _object({"name": _STR, "fits": _BOOL}),
    "search": _object({"model": _STR, "hardware": _STR, "objective": _STR, "method": _STR,
                       "candidates": _INT, "fitting": _INT, "top": _rows(_search_row),
                       "rejected": _rows(_OBJ), "why": _rows(_OBJ), "explanation": _STR,
                       "timings_s": _OBJ}),
    "codesign": _object({"reference": _STR, "model": _STR, "num_gpus": _INT,
                         "global_batch": _INT, "rows": _rows(_codesign_row),
                         "cost_model": _OBJ}),
    "validate": _object({"rows": _rows(_validate_row), "summary": _OBJ,
                         "skipped": _rows(_OBJ)}),
    "calibrate": _object({"output": _STR, "generations": _OBJ, "not_fitted": _OBJ}),
    "dse": _object({"model": _STR, "workload": {"enum": ["train", "serve"]}, "num_gpus": _INT,
                    "design": _OBJ, "link": _STR, "points": _rows(_dse_row)},
                   {"price": _OBJ}),
    "dissect": _object({"model": _STR, "from": _STR, "to": _STR, "num_gpus": _INT,
                        "workload": {"enum": ["train", "serve"]},
                        "factors": {"type": "array", "items": _STR}, "speedup": _NUM,
                        "step_time_from_s": _NUM, "step_time_to_s": _NUM,
                        "shapley_log": _OBJ, "shapley_speedup": _OBJ,
                        "integrated_gradients_log": _OBJ,
                        "integrated_gradients_speedup": _OBJ, "agreement_share": _OBJ,
                        "explanation": _STR, "layout_from": _OBJ, "layout_to": _OBJ,
                        "hybrids": _rows(_OBJ)},
                       {"throughput_from_tokens_per_s": _NUM,
                        "throughput_to_tokens_per_s": _NUM,
                        "cost": {"type": "object",
                                 "properties": {"from": _cost_side, "to": _cost_side,
                                                "cost_reduction": _NUM},
                                 "required": ["from", "to", "cost_reduction"]}}),
}
for _schema in COMMAND_SCHEMAS.values():
    _schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
del _schema
