"""Chunked evaluation of the compiled training model over many configurations.

The search evaluates hundreds of thousands of candidates through ONE jit-compiled function
derived from :func:`symcost.api.training_model` (``float32``): a ``jax.jit`` of its
``call_jax`` that keeps only the outputs the caller asks for (XLA then drops every other
output: ~3x faster to compile and ~4x faster to run than all outputs). Candidates stream in
fixed-size chunks (:data:`CHUNK_SMALL` or :data:`CHUNK_LARGE` rows, the last chunk padded),
and inputs shared by all candidates are passed as 0-d arrays, so neither a new search size nor
a new model or GPU recompiles anything.

The top candidates are re-checked in float64 by :func:`evaluate_float64`, which runs the
same generated source (``CompiledModel.source``) with numpy: exact same expressions, no
compilation (~1 ms for a hundred rows).

Chunked evaluation is :func:`symcost.evaluate.evaluate_model`, the evaluator every command
shares.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from hwspecs import HardwareSpec

from symcost import symbols as S
from symcost.api import as_hardware, as_model, training_inputs, training_model
from symcost.config import TrainingConfig, parallel_bindings, resolve
from symcost.evaluate import CHUNK_SIZES, Progress, evaluate_model, split_columns
from symcost.fields import TRAINING_FIELDS
from symcost.models import ModelSpec
from symcost.params import Params

#: chunk sizes (rows per compiled call): small for populations and re-checks, large for sweeps
#: (the fixed set of :data:`symcost.evaluate.CHUNK_SIZES`, shared with sweeps).
CHUNK_SMALL, CHUNK_LARGE = CHUNK_SIZES


def evaluate_chunked(inputs: Mapping[str, object],
                     outputs: Sequence[str] = ("step_time", "mem_headroom"),
                     precision: str = "float32", chunk: int | None = None,
                     progress: Progress | None = None) -> dict[str, np.ndarray]:
    """Evaluate selected training outputs for ``n`` configurations in fixed-size chunks
    (:func:`symcost.evaluate.evaluate_model`, the one evaluator).

    Args:
        inputs: symbol name -> scalar or 1-D array of length ``n`` for every input of
            :func:`symcost.api.training_model` (extra names are ignored). Base units.
        outputs: output names of :func:`symcost.training.training_expressions`.
        precision: ``float32`` (ranking) or ``float64``.
        chunk: rows per compiled call; :data:`CHUNK_SMALL` when ``n`` fits in it, else
            :data:`CHUNK_LARGE`. Each distinct chunk size compiles once per process.
        progress: ``progress(rows done, total)`` after each chunk
            (:data:`symcost.evaluate.Progress`).

    Returns:
        Output name -> float64 array ``(n,)``.

    Raises:
        KeyError: a missing input or unknown output.
        ValueError: inputs of different lengths.
    """
    out = evaluate_model(training_model(precision), inputs, tuple(outputs), chunk, progress)
    return {k: v.astype(np.float64) for k, v in out.items()}


def evaluate_float64(inputs: Mapping[str, object],
                     outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """Evaluate training outputs in float64 with numpy (no compilation; for a few rows).

    Uses :meth:`symcost.lower.CompiledModel.call_numpy`: the source generated for
    :func:`symcost.api.training_model` bound to NumPy, so the expressions are exactly those of
    the compiled model.

    Args:
        inputs: symbol name -> scalar or 1-D array (common length ``n``); extras ignored.
        outputs: names to return (all when None).

    Returns:
        Output name -> float64 array ``(n,)``.
    """
    cm = training_model("float64")
    cols, scalars, n = split_columns(inputs, cm.input_names)
    out = cm.call_numpy(**cols, **scalars)
    names = cm.outputs if outputs is None else tuple(outputs)
    return {k: np.broadcast_to(np.asarray(out[k], dtype=np.float64), (n,)).copy()
            for k in names}


def base_inputs(model: ModelSpec | str, hw: HardwareSpec | str, dtype: str, seq_len: int,
                global_batch: int, flash_attention: bool, params: Params | None = None,
                recompute_modules: str = "core_attn",
                shared: Mapping[str, Any] | None = None) -> dict[str, float]:
    """Inputs shared by every candidate (model, hardware, efficiency parameters, sequence
    length, batch and fixed flags; base units), via :func:`symcost.api.training_inputs`.

    Args:
        model, hw: specs, or a preset name / hardware id.
        dtype: GEMM dtype name; seq_len: tokens per sequence; global_batch: sequences per
            step; flash_attention: FlashAttention on.
        params: efficiency parameters (the shipped calibration when None).
        recompute_modules: what a candidate with ``recompute = selective`` recomputes (its
            ``rc_<module>`` flags; the candidates' ``recompute`` column decides whether they
            apply).
        shared: the other settings every candidate takes (canonical values of
            :data:`symcost.fields.SEARCH_SHARED_FIELDS`, checked by the space's rules, which
            read them with the candidates' columns; not validated here).

    Returns:
        Symbol name -> value (base units).

    Raises:
        ConfigError, ParamsError: invalid shared settings or no parameters for the GPU.
    """
    cfg = TrainingConfig(num_gpus=1, global_batch=int(global_batch), seq_len=int(seq_len),
                         dtype=dtype, flash_attention=bool(flash_attention),
                         recompute="none" if recompute_modules == "core_attn" else "selective",
                         recompute_modules=recompute_modules)
    out = training_inputs(model, hw, cfg, params)
    if shared:
        # a setting may be invalid for this one-GPU stand-in (offload without ZeRO), so it is
        # bound, not resolved: the candidates' own columns replace the stand-in's
        out.update(parallel_bindings(resolve(as_model(model), as_hardware(hw), cfg)
                                     .replace(**shared)))
    return out


def candidate_inputs(base: Mapping[str, float], columns: Mapping[str, np.ndarray]
                     ) -> dict[str, object]:
    """Model inputs for candidate columns (as built by :mod:`optimizers.space`).

    Args:
        base: shared inputs (:func:`base_inputs`).
        columns: field -> int array (fields of :data:`optimizers.space.FIELDS`).

    Returns:
        Symbol name -> scalar or array, ready for :func:`evaluate_chunked`.
    """
    out: dict[str, object] = dict(base)
    out.update({f.symbol: columns[name] for name, f in TRAINING_FIELDS.items()
                if name in columns and f.symbol is not None})
    return out
