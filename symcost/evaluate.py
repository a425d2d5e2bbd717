"""The one evaluator: a compiled function streamed over many rows in fixed-size chunks.

Every vectorized evaluation in symcost goes through :func:`evaluate_chunks` (predictions of
many configurations, sweeps, the configuration search, co-design, validation): it splits the
inputs into per-row columns and shared scalars, casts them to the precision, pads the last
chunk (edge values) to one of the :data:`CHUNK_SIZES`, dispatches each chunk asynchronously
while the previous one is copied out, and reports progress through a callback (the core never
draws a progress bar; the CLI does).

Chunk sizes come from a fixed set, so a new number of rows never recompiles: each (function,
chunk size, precision) compiles once per process, and with JAX's persistent compilation
cache (see :func:`symcost.lower.cache_dir`) once per machine.

Measured on the reference 2-core CPU (``benchmarks/throughput.py``): about 8e7 training
configurations/s in float32 with ``2**16``-row chunks (the per-core L2 working set).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from .lower import CompiledModel

# jax is imported inside the functions that use it, so that importing this module (and
# ``symcost --help``) does not load it.

#: rows per compiled call: the small size when the rows fit in it (a handful of
#: configurations, a float64 re-check, a SciPy population), else the large one.
CHUNK_SIZES: tuple[int, ...] = (2**12, 2**16)
#: precisions a compiled function is evaluated in.
PRECISIONS = ("float32", "float64")

#: ``rows(start, n) -> one float64 array of n values per column``.
RowSource = Callable[[int, int], Sequence[npt.NDArray[np.float64]]]
#: ``progress(rows_done, rows_total)``, called after each chunk.
Progress = Callable[[int, int], None]


def pick_chunk(rows: int) -> int:
    """Rows per compiled call for ``rows`` rows: the smallest of :data:`CHUNK_SIZES` that
    holds them all, else the largest."""
    return next((c for c in CHUNK_SIZES if rows <= c), CHUNK_SIZES[-1])


def split_columns(inputs: Mapping[str, Any], names: Sequence[str]
                  ) -> tuple[dict[str, npt.NDArray[np.float64]], dict[str, float], int]:
    """Inputs ``names`` as per-row float64 columns and shared scalars, and the row count.

    Raises:
        KeyError: a name missing from ``inputs``.
        ValueError: arrays of two or more dimensions, or 1-D arrays of different lengths.
    """
    missing = [n for n in names if n not in inputs]
    if missing:
        raise KeyError(f"missing model inputs: {', '.join(missing)}")
    cols: dict[str, npt.NDArray[np.float64]] = {}
    scalars: dict[str, float] = {}
    for n in names:
        a = np.asarray(inputs[n], dtype=np.float64)
        if a.ndim == 0:
            scalars[n] = float(a)
        elif a.ndim == 1:
            cols[n] = a
        else:
            raise ValueError(f"inputs must be scalars or 1-D arrays (got {a.ndim}-D {n})")
    lengths = {len(a) for a in cols.values()}
    if len(lengths) > 1:
        raise ValueError("inputs must be scalars or 1-D arrays of one common length "
                         f"(got lengths {sorted(lengths)})")
    return cols, scalars, (lengths.pop() if lengths else 1)


def evaluate_chunks(fn: Callable[..., Sequence[Any]], rows: RowSource, n_columns: int,
                    scalars: Sequence[float], total: int, n_outputs: int,
                    precision: str = "float32", chunk: int | None = None,
                    progress: Progress | None = None,
                    out_dtypes: Sequence[Any] | None = None) -> list[np.ndarray]:
    """Stream ``total`` rows through a jit-compiled ``fn(columns, scalars) -> outputs``.

    Args:
        fn: jitted function of two tuples: ``n_columns`` arrays of ``chunk`` values and the
            0-d ``scalars``; returns ``n_outputs`` arrays of ``chunk`` values.
        rows: ``rows(start, n)``: the columns of rows ``start .. start+n-1`` (float64).
        n_columns: number of per-row columns (may be 0: then one row is evaluated).
        scalars: values shared by every row.
        total: number of rows.
        n_outputs: number of outputs of ``fn``.
        precision: ``float32`` or ``float64`` (JAX x64 is enabled for float64 only).
        chunk: rows per call; :func:`pick_chunk` of ``total`` when None.
        progress: called with the rows done and the total after each chunk.
        out_dtypes: NumPy dtype of each output (the precision's float when None).

    Returns:
        One array per output: ``total`` rows (of the per-row shape ``fn`` returns, e.g. a
        Jacobian row).

    Raises:
        ValueError: unknown precision or a non-positive chunk.
    """
    import jax
    import jax.numpy as jnp

    if precision not in PRECISIONS:
        raise ValueError(f"precision: must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    size = pick_chunk(total) if chunk is None else int(chunk)
    if size < 1:
        raise ValueError(f"chunk: must be a positive integer (got {chunk!r})")
    np_dt = np.float64 if precision == "float64" else np.float32
    dts = list(out_dtypes) if out_dtypes is not None else [np_dt] * n_outputs
    out: list[np.ndarray] = []
    n_chunks = -(-total // size)
    with jax.enable_x64(precision == "float64"):
        fixed = tuple(jnp.asarray(np.asarray(v, dtype=np_dt)) for v in scalars)
        pending: tuple[int, int, Any] | None = None
        for k in range(n_chunks + 1):
            res = None
            if k < n_chunks:
                start = k * size
                n = min(size, total - start)
                args = []
                for a in rows(start, n):
                    a = np.asarray(a, dtype=np_dt)
                    args.append(a if n == size else np.pad(a, (0, size - n), mode="edge"))
                if n_columns == 0:
                    args = []
                res = fn(tuple(args), fixed)       # dispatched asynchronously
            if pending is not None:                # copy the previous chunk out meanwhile
                p_start, p_n, p_res = pending
                for i, r in enumerate(p_res):
                    r = np.asarray(r)
                    if r.ndim == 0:                # no per-row column: one broadcast value
                        r = np.broadcast_to(r, (size,))
                    if len(out) <= i:              # per-row values may be vectors (Jacobians)
                        out.append(np.empty((total,) + r.shape[1:], dtype=dts[i]))
                    out[i][p_start:p_start + p_n] = r[:p_n]
                if progress is not None:
                    progress(p_start + p_n, total)
            pending = (start, n, res) if k < n_chunks else None
    return out


def column_source(cols: Mapping[str, npt.NDArray[np.float64]], names: Sequence[str]
                  ) -> RowSource:
    """A :data:`RowSource` over in-memory columns, in ``names`` order."""
    def rows(start: int, n: int) -> list[npt.NDArray[np.float64]]:
        return [cols[k][start:start + n] for k in names]
    return rows


_MODEL_FUNCTIONS: dict[tuple[Any, ...], Callable[..., tuple[Any, ...]]] = {}


def model_function(cm: CompiledModel, outputs: tuple[str, ...], columns: tuple[str, ...],
                   scalars: tuple[str, ...]) -> Callable[..., tuple[Any, ...]]:
    """A jitted ``fn(columns, scalars) -> outputs`` of compiled model ``cm`` for
    :func:`evaluate_chunks`: the named inputs split into per-row ``columns`` and shared
    ``scalars``, and only ``outputs`` returned (XLA then drops the others: about 3x faster
    to compile and 4x faster to run than every output).

    Raises:
        KeyError: an unknown output.
    """
    import jax

    key = (cm.key, cm.dtype, outputs, columns, scalars)
    if key in _MODEL_FUNCTIONS:
        return _MODEL_FUNCTIONS[key]
    unknown = [o for o in outputs if o not in cm.outputs]
    if unknown:
        raise KeyError(f"unknown outputs: {', '.join(unknown)}")
    idx = tuple(cm.outputs.index(o) for o in outputs)
    order = cm.input_names

    def run(cols: tuple[Any, ...], sc: tuple[Any, ...]) -> tuple[Any, ...]:
        env = dict(zip(columns, cols))
        env.update(zip(scalars, sc))
        res = cm.call_jax(*(env[n] for n in order))
        return tuple(res[i] for i in idx)

    fn = _MODEL_FUNCTIONS[key] = jax.jit(run)
    return fn


def evaluate_model(cm: CompiledModel, inputs: Mapping[str, Any],
                   outputs: Sequence[str] | None = None, chunk: int | None = None,
                   progress: Progress | None = None) -> dict[str, np.ndarray]:
    """Evaluate compiled model ``cm`` on ``n`` rows through :func:`evaluate_chunks`.

    Args:
        cm: a :class:`~symcost.lower.CompiledModel` (its ``dtype`` is the precision).
        inputs: symbol name -> scalar or 1-D array of length ``n`` for every input of
            ``cm`` (extra names are ignored). Base units.
        outputs: output names (all when None).
        chunk: rows per compiled call (:func:`pick_chunk` of ``n`` when None).
        progress: called with the rows done and the total after each chunk.

    Returns:
        Output name -> array ``(n,)`` in ``cm.dtype``.

    Raises:
        KeyError: a missing input or unknown output.
        ValueError: inputs of different lengths or more than one dimension.
    """
    names = tuple(outputs) if outputs is not None else cm.outputs
    cols, sc, n = split_columns(inputs, cm.input_names)
    col_names = tuple(k for k in cm.input_names if k in cols)
    sc_names = tuple(k for k in cm.input_names if k in sc)
    fn = model_function(cm, names, col_names, sc_names)
    res = evaluate_chunks(fn, column_source(cols, col_names), len(col_names),
                          [sc[k] for k in sc_names], n, len(names), cm.dtype, chunk, progress)
    return dict(zip(names, res))


def evaluate_broadcast(cm: CompiledModel, inputs: Mapping[str, Any],
                       outputs: Sequence[str] | None = None) -> dict[str, np.ndarray]:
    """:func:`evaluate_model` on inputs of any broadcastable shapes: they are broadcast to
    one shape, flattened into rows, evaluated in bucketed chunks (no recompilation for a new
    shape) and reshaped.

    Raises:
        KeyError: a missing input or unknown output.
        ValueError: shapes that do not broadcast.
    """
    missing = [n for n in cm.input_names if n not in inputs]
    if missing:
        raise KeyError(f"missing model inputs: {', '.join(missing)}")
    arrays = {n: np.asarray(inputs[n], dtype=np.float64) for n in cm.input_names}
    shape = np.broadcast_shapes(*(a.shape for a in arrays.values()))
    flat = {n: (a if a.ndim == 0 else np.broadcast_to(a, shape).reshape(-1))
            for n, a in arrays.items()}
    if shape == ():
        flat = {n: a.reshape(1) for n, a in flat.items()}
    out = evaluate_model(cm, flat, outputs)
    return {k: v.reshape(shape) for k, v in out.items()}


__all__ = ["CHUNK_SIZES", "PRECISIONS", "Progress", "RowSource", "column_source",
           "evaluate_broadcast", "evaluate_chunks", "evaluate_model", "model_function", "pick_chunk",
           "split_columns"]
