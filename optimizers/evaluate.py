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

(The chunk sizes are :data:`symcost.sweep.CHUNK_SIZES`; when ``symcost/sweep.py`` grows a public
chunked evaluator this module should delegate to it.)
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

import numpy as np

from symcost.sweep import CHUNK_SIZES, pick_chunk

#: chunk sizes (rows per compiled call): small for populations and re-checks, large for sweeps
#: (the fixed set of :data:`symcost.sweep.CHUNK_SIZES`, shared with sweeps).
CHUNK_SMALL, CHUNK_LARGE = CHUNK_SIZES


@functools.lru_cache(maxsize=32)
def _selected(precision: str, outputs: tuple[str, ...]):
    import jax

    from symcost.api import training_model

    cm = training_model(precision)
    unknown = [o for o in outputs if o not in cm.outputs]
    if unknown:
        raise KeyError(f"unknown training outputs: {', '.join(unknown)}")
    idx = tuple(cm.outputs.index(o) for o in outputs)
    fn = cm.call_jax

    def select(*args):
        out = fn(*args)
        return tuple(out[i] for i in idx)

    return cm, jax.jit(select)


def _columns(inputs: Mapping[str, object], names: Sequence[str]) -> tuple[dict, int]:
    missing = [n for n in names if n not in inputs]
    if missing:
        raise KeyError(f"missing model inputs: {', '.join(missing)}")
    arrays = {n: np.asarray(inputs[n], dtype=np.float64) for n in names}
    lengths = {a.shape[0] for a in arrays.values() if a.ndim == 1}
    bad = [n for n, a in arrays.items() if a.ndim > 1]
    if bad or len(lengths) > 1:
        two_d = f", 2-D: {', '.join(bad)}" if bad else ""
        raise ValueError("inputs must be scalars or 1-D arrays of one common length "
                         f"(got lengths {sorted(lengths)}{two_d})")
    return arrays, (lengths.pop() if lengths else 1)


def evaluate_chunked(inputs: Mapping[str, object],
                     outputs: Sequence[str] = ("step_time", "mem_headroom"),
                     precision: str = "float32", chunk: int | None = None
                     ) -> dict[str, np.ndarray]:
    """Evaluate selected training outputs for ``n`` configurations in fixed-size chunks.

    Args:
        inputs: symbol name -> scalar or 1-D array of length ``n`` for every input of
            :func:`symcost.api.training_model` (extra names are ignored). Base units.
        outputs: output names of :func:`symcost.training.training_expressions`.
        precision: ``float32`` (ranking) or ``float64``.
        chunk: rows per compiled call; :data:`CHUNK_SMALL` when ``n`` fits in it, else
            :data:`CHUNK_LARGE`. Each distinct chunk size compiles once per process.

    Returns:
        Output name -> float64 array ``(n,)``.

    Raises:
        KeyError: a missing input or unknown output.
        ValueError: inputs of different lengths.
    """
    import jax
    import jax.numpy as jnp

    cm, fn = _selected(precision, tuple(outputs))
    arrays, n = _columns(inputs, cm.input_names)
    size = chunk or pick_chunk(n)
    dt = np.float64 if precision == "float64" else np.float32
    result = {o: np.empty(n, dtype=np.float64) for o in outputs}
    with jax.enable_x64(precision == "float64"):
        const = {k: jnp.asarray(a.astype(dt)) for k, a in arrays.items() if a.ndim == 0}
        for start in range(0, n, size):
            stop = min(start + size, n)
            args = []
            for k in cm.input_names:
                if k in const:
                    args.append(const[k])
                    continue
                block = np.empty(size, dtype=dt)
                block[:stop - start] = arrays[k][start:stop]
                block[stop - start:] = arrays[k][stop - 1]   # pad with the last row
                args.append(block)
            vals = fn(*args)
            for o, v in zip(outputs, vals):
                result[o][start:stop] = np.asarray(v)[:stop - start]
    return result


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
    from symcost.api import training_model

    cm = training_model("float64")
    arrays, n = _columns(inputs, cm.input_names)
    out = cm.call_numpy(**{k: arrays[k] for k in cm.input_names})
    names = cm.outputs if outputs is None else tuple(outputs)
    return {k: np.broadcast_to(np.asarray(out[k], dtype=np.float64), (n,)).copy()
            for k in names}


def base_inputs(model, hw, dtype: str, seq_len: int, global_batch: int,
                flash_attention: bool, params=None) -> dict[str, float]:
    """Inputs shared by every candidate (model, hardware, efficiency parameters, sequence
    length, batch and fixed flags; base units), via :func:`symcost.api.training_inputs`.

    Raises:
        ConfigError, ParamsError: invalid shared settings or no parameters for the GPU.
    """
    from symcost.api import training_inputs
    from symcost.config import TrainingConfig

    cfg = TrainingConfig(num_gpus=1, global_batch=int(global_batch), seq_len=int(seq_len),
                         dtype=dtype, flash_attention=bool(flash_attention))
    return training_inputs(model, hw, cfg, params)


def candidate_inputs(base: Mapping[str, float], columns: Mapping[str, np.ndarray]
                     ) -> dict[str, object]:
    """Model inputs for candidate columns (as built by :mod:`optimizers.space`).

    Args:
        base: shared inputs (:func:`base_inputs`).
        columns: field -> int array (fields of :data:`optimizers.space.FIELDS`).

    Returns:
        Symbol name -> scalar or array, ready for :func:`evaluate_chunked`.
    """
    from symcost import symbols as S

    out: dict[str, object] = dict(base)
    out.update({S.tp.name: columns["tp"], S.pp.name: columns["pp"], S.dp.name: columns["dp"],
                S.sp_on.name: columns["sp"], S.vpp.name: columns["vpp"],
                S.micro_batch.name: columns["micro_batch"],
                S.recompute.name: columns["recompute"], S.zero_stage.name: columns["zero"],
                S.dp_overlap.name: columns["dp_overlap"]})
    return out
