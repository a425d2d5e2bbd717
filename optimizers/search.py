"""Parallel-configuration search: exhaustive (vectorized) and SciPy differential evolution.

:func:`search` enumerates every valid configuration (:mod:`optimizers.space`), evaluates them
all in fixed-size chunks of one compiled float32 function (:mod:`optimizers.evaluate`), drops
those that do not fit in GPU memory (``mem_headroom < 0``), ranks the rest, re-checks the
leaders in float64 and returns the top ``k`` with their step-time breakdown and memory, and
the breakdown terms that separate the best from the runner-up.

:func:`search_scipy` answers the same question without enumerating: integer-coded
differential evolution (``scipy.optimize.differential_evolution`` with ``integrality``) over
the layout (GPU count, TP, PP, micro-batch, VPP), each individual taking its best mode
combination (recompute, SP, ZeRO, DP overlap, TP overlap: at most 96, evaluated together).

Objectives (lower score is better):

* ``step_time``: seconds per optimizer step.
* ``tokens_per_s``: training tokens per second (same order as step time for one GPU count).
* ``tokens_per_dollar``: tokens/s divided by the cluster's price per second
  (``num_gpus * price_per_gpu_hour / 3600``); needs ``price_per_gpu_hour``; differs from the
  others when several GPU counts are searched.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import numpy as np
import numpy.typing as npt
import pandas as pd

from hwspecs import HardwareSpec
from hwspecs.units import format_bytes
from symcost.api import as_hardware, as_model
from symcost.config import ConfigError, TrainingConfig
from symcost.evaluate import Progress, pick_chunk
from symcost.models import ModelSpec
from symcost.params import Params
from symcost.schema import OUTPUT_KEYS, rename_keys, stamp
from symcost.training import BREAKDOWN, MEMORY

from .evaluate import (base_inputs, candidate_inputs, evaluate_chunked,
                       evaluate_float64)
from .space import (FIELDS, BoolArray, Columns, Constraints, ConstraintSpec, Context,
                    FloatArray, IntArray, SearchError, Space, check_inputs, columns_frame,
                    divisors, enumerate_space, field_code, field_name, make_constraints,
                    make_context, positive_ints, raise_if_empty, row_config, stage_rules,
                    structural_ok, violations)

# SciPy is imported inside search_scipy (differential evolution) only: the exhaustive search
# does not need it, and importing it costs start-up time.

OBJECTIVES = ("step_time", "tokens_per_s", "tokens_per_dollar")
#: float64 re-check: every candidate within this relative score of the k-th is re-checked.
RECHECK_RTOL = 1e-4
#: float32 headroom slack (fraction of usable memory) for the re-check near the memory limit.
HEADROOM_SLACK = 1e-4


@dataclass
class SearchResult:
    """The outcome of a configuration search.

    Attributes:
        table: the top ``k`` configurations, best first: ``rank``, the fields of
            :data:`optimizers.space.FIELDS`, ``step_time`` (s), ``tokens_per_s``,
            ``tokens_per_s_per_gpu``, ``mfu``, ``hfu``, memory per GPU ``mem_*`` (bytes,
            ``mem_headroom`` >= 0), breakdown ``time_*`` (s), ``score`` and, with a price,
            ``usd_per_step`` and ``tokens_per_usd``. Values re-checked in float64.
        rejected: rule counts: ``stage``, ``rule``, ``removed``, ``remaining``, ``level``
            (the last row is the memory filter).
        why: breakdown and memory terms of the runner-up minus the best, largest first:
            ``term``, ``best``, ``runner_up``, ``difference`` (s or bytes).
        candidates: valid configurations evaluated.
        fitting: those that fit in memory.
        objective: the ranking objective.
        method: ``exhaustive`` or ``differential_evolution``.
        timings: wall time per phase in s (``enumerate``, ``evaluate``, ``recheck``, ``total``).
        model, hardware: the specs searched; global_batch, seq_len, dtype, flash_attention:
            what every candidate shares.
        recompute_modules: what the ``selective`` candidates recompute.
        shared: the settings every candidate took (fields of
            :data:`symcost.fields.SEARCH_SHARED_FIELDS`, canonical values; those given).
    """

    table: pd.DataFrame
    rejected: pd.DataFrame
    why: pd.DataFrame
    candidates: int
    fitting: int
    objective: str
    method: str
    timings: dict[str, float]
    model: ModelSpec
    hardware: HardwareSpec
    global_batch: int
    seq_len: int
    dtype: str
    flash_attention: bool
    price_per_gpu_hour: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    recompute_modules: str = "core_attn"
    shared: dict[str, Any] = field(default_factory=dict)

    @property
    def best(self) -> TrainingConfig:
        """The best configuration as a :class:`~symcost.config.TrainingConfig`."""
        return self.config(0)

    def config(self, i: int) -> TrainingConfig:
        """Row ``i`` of :attr:`table` as a :class:`~symcost.config.TrainingConfig`."""
        return row_config(self.table.iloc[i], self.global_batch, self.seq_len, self.dtype,
                          self.flash_attention, self.recompute_modules, self.shared)

    def explain(self) -> str:
        """One line: why the best beats the runner-up (the largest breakdown differences)."""
        if len(self.table) < 2:
            return "only one configuration fits"
        a, b = self.table.iloc[0], self.table.iloc[1]
        terms = self.why[self.why["term"].str.startswith("time_")].head(3)
        parts = [f"{str(t.term).removeprefix('time_')} {t.difference:+.3g} s"
                 for t in terms.itertuples() if t.difference != 0]
        gap = b["step_time"] - a["step_time"]
        return (f"best beats runner-up by {gap:.4g} s/step ({gap / b['step_time']:.2%}): "
                f"runner-up minus best: {', '.join(parts) if parts else 'no time difference'}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (the ``search --json`` object): the top rows with output columns
        keyed by :data:`symcost.schema.OUTPUT_KEYS` (``step_time_s``,
        ``memory_per_gpu_bytes``, ...), rejected counts, the runner-up terms (``term`` is a
        key too), explanation, timings and ``schema_version``; what every candidate shares
        under its field name (``recompute_modules`` and the :attr:`shared` settings)."""
        why = self.why.assign(term=[OUTPUT_KEYS.get(t, t) for t in self.why["term"]])
        return stamp({
            "model": self.model.name, "hardware": self.hardware.name,
            "global_batch": self.global_batch, "seq_len": self.seq_len, "dtype": self.dtype,
            "flash_attention": self.flash_attention,
            "recompute_modules": self.recompute_modules, **self.shared,
            "objective": self.objective, "method": self.method,
            "price_per_gpu_hour": self.price_per_gpu_hour,
            "candidates": self.candidates, "fitting": self.fitting,
            "top": _records(self.table.rename(columns=rename_keys(self.table.columns))),
            "rejected": _records(self.rejected), "why": _records(why),
            "explanation": self.explain(), "timings_s": self.timings,
        })


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of ``df`` as plain-Python dicts (NumPy scalars unwrapped)."""
    out = []
    for rec in df.to_dict(orient="records"):
        out.append({str(k): (v.item() if isinstance(v, np.generic) else v)
                    for k, v in rec.items()})
    return out


def _check_objective(objective: str | None, price: float | None) -> str:
    """The objective (the default for ``price`` when None), checked with the price.

    Raises:
        ConfigError: an unknown objective, a price that is not > 0, or ``tokens_per_dollar``
            without a price.
    """
    if objective is None:
        return "tokens_per_dollar" if price else "step_time"
    if objective not in OBJECTIVES:
        raise ConfigError(f"objective: {objective!r} is not one of {', '.join(OBJECTIVES)}")
    if price is not None and not price > 0:
        raise ConfigError(f"price_per_gpu_hour: must be > 0 (got {price})")
    if objective == "tokens_per_dollar" and not price:
        raise ConfigError("objective: tokens_per_dollar needs price_per_gpu_hour > 0")
    return objective


def score(step_time: FloatArray, num_gpus: npt.ArrayLike, global_batch: int, seq_len: int,
          objective: str, price: float | None) -> FloatArray:
    """Ranking score (lower is better) of ``objective``.

    Args:
        step_time: step times in s ``(n,)``.
        num_gpus: GPU count of each configuration ``(n,)`` (prices the cluster).
        global_batch: sequences per step; seq_len: tokens per sequence.
        objective: one of :data:`OBJECTIVES`.
        price: USD per GPU-hour (needed for ``tokens_per_dollar``).

    Returns:
        float64 ``(n,)``: seconds, or minus tokens/s, or minus tokens per USD.
    """
    tokens_per_s = global_batch * seq_len / step_time
    if objective == "step_time":
        return np.asarray(step_time, dtype=np.float64)
    if objective == "tokens_per_s":
        return -tokens_per_s
    assert price is not None  # _check_objective requires it for tokens_per_dollar
    return -tokens_per_s / (np.asarray(num_gpus) * price / 3600.0)


def _memory_rule_text(usable: float) -> str:
    """The memory filter as a rule: ``mem_headroom >= 0`` (:data:`symcost.rules.MEMORY_FITS`)."""
    return (f"memory per GPU must fit in usable HBM ({format_bytes(usable, 1)}) and offloaded "
            "bytes in host memory (where the hardware states it)")


def _memory_rule(rejected: pd.DataFrame, fits: BoolArray, usable: float) -> pd.DataFrame:
    """``rejected`` with the memory filter's row appended."""
    row = {"stage": "memory", "rule": _memory_rule_text(usable),
           "removed": int((~fits).sum()), "remaining": int(fits.sum()), "level": "configurations"}
    return pd.concat([rejected, pd.DataFrame([row])], ignore_index=True)


def _raise_no_fit(cols: Columns, head32: FloatArray, usable: float, ctx: Context, seq_len: int,
                  dtype: str, flash: bool, n: int, hw_name: str) -> NoReturn:
    """Raise the :class:`SearchError` of a search where no valid configuration fits, naming
    the memory rule and how much more the smallest footprint needs."""
    i = int(np.argmax(head32))
    cfg = row_config({k: v[i] for k, v in cols.items()}, ctx.global_batch, seq_len, dtype,
                     flash, ctx.recompute_modules, ctx.shared)
    raise SearchError(
        f"no valid configuration fits in memory on {hw_name}: all {n} valid configurations were "
        f"removed by rule '{_memory_rule_text(usable)}'; the smallest footprint "
        f"({_short(cfg)}) needs {format_bytes(-head32[i], 1)} more")


def _short(cfg: TrainingConfig) -> str:
    return (f"tp={cfg.tp} pp={cfg.pp} dp={cfg.dp} mb={cfg.micro_batch} vpp={cfg.vpp} "
            f"recompute={cfg.recompute} sp={int(cfg.sp)} zero={cfg.zero} "
            f"overlap={int(cfg.dp_overlap)} tp_overlap={int(cfg.tp_overlap)}")


def _finish(cols: Columns, base: Mapping[str, float], top: int,
            objective: str, price: float | None, global_batch: int, seq_len: int
            ) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Float64 re-check of the given candidate rows; returns (top table, why)."""
    f64 = evaluate_float64(candidate_inputs(base, cols))
    sc = score(f64["step_time"], cols["num_gpus"], global_batch, seq_len, objective, price)
    ok = f64["mem_headroom"] >= 0
    order = np.lexsort((np.arange(len(sc)), sc))
    order = order[ok[order]][:top]
    df = columns_frame({k: v[order] for k, v in cols.items()})
    df.insert(0, "rank", np.arange(1, len(order) + 1))
    vals = {k: v[order] for k, v in f64.items()}
    df["step_time"] = vals["step_time"]
    df["tokens_per_s"] = vals["tokens_per_s"]
    df["tokens_per_s_per_gpu"] = vals["tokens_per_s"] / df["num_gpus"].to_numpy()
    df["mfu"] = vals["mfu"]
    df["hfu"] = vals["hfu"]
    for k in (*MEMORY, "mem_total", "mem_host", "mem_usable", "mem_headroom", *BREAKDOWN):
        df[k] = vals[k]
    df["score"] = sc[order]
    if price:
        df["usd_per_step"] = vals["step_time"] * df["num_gpus"].to_numpy() * price / 3600.0
        df["tokens_per_usd"] = global_batch * seq_len / df["usd_per_step"]
    why = pd.DataFrame(columns=["term", "best", "runner_up", "difference"])
    if len(df) >= 2:
        terms = [*BREAKDOWN, *MEMORY, "mem_total"]
        why = pd.DataFrame({"term": terms, "best": [df[t].iloc[0] for t in terms],
                            "runner_up": [df[t].iloc[1] for t in terms]})
        why["difference"] = why["runner_up"] - why["best"]
        why = pd.concat([why.iloc[:len(BREAKDOWN)].sort_values("difference", key=np.abs,
                                                                 ascending=False),
                         why.iloc[len(BREAKDOWN):]], ignore_index=True)
    return df.reset_index(drop=True), why


def _recheck_rows(sc32: FloatArray, head32: FloatArray, usable: float, top: int
                  ) -> npt.NDArray[np.intp]:
    """Indices to re-check in float64: the leaders among (nearly) fitting candidates, with
    every near-tie of the k-th and the float32 memory-boundary cases among them."""
    near = head32 >= -HEADROOM_SLACK * usable
    idx = np.flatnonzero(near)
    if not len(idx):
        return idx
    k = min(top, len(idx))
    kth = np.partition(sc32[idx], k - 1)[k - 1]
    tol = RECHECK_RTOL * abs(kth)
    sel = idx[sc32[idx] <= kth + tol]
    # exact ties beyond this many rows are interchangeable; keep the re-check small
    limit = max(64, 4 * top)
    if len(sel) > limit:
        sel = sel[np.argsort(sc32[sel], kind="stable")[:limit]]
    # make sure at least `top` truly fitting rows are there
    fit = idx[head32[idx] >= 0]
    extra = fit[np.argsort(sc32[fit], kind="stable")[:top]]
    return np.unique(np.concatenate([sel, extra]))


def search(model: ModelSpec | str, hardware: HardwareSpec | str, num_gpus: int | Sequence[int],
           global_batch: int, *, seq_len: int | None = None, dtype: str = "bf16",
           flash_attention: bool = True, top: int = 10, objective: str | None = None,
           price_per_gpu_hour: float | None = None, fix: ConstraintSpec | None = None,
           minimum: ConstraintSpec | None = None, maximum: ConstraintSpec | None = None,
           max_tp: int | None = None, max_vpp: int | None = None, keep_duplicates: bool = False,
           params: Params | None = None, client: Any = None,
           recompute_modules: str = "core_attn",
           partition_rows: int | None = None,
           progress: Progress | None = None, **shared: Any) -> SearchResult:
    """Exhaustive search over every valid parallel configuration.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        num_gpus: GPU count, or several counts to choose from.
        global_batch: sequences per optimizer step.
        seq_len: tokens per sequence (the model's when None).
        dtype: GEMM dtype for every candidate.
        flash_attention: FlashAttention for every candidate.
        top: rows in the result table.
        objective: one of :data:`OBJECTIVES`; ``tokens_per_dollar`` when a price is given,
            else ``step_time``.
        price_per_gpu_hour: USD per GPU-hour (adds ``usd_per_step`` and ``tokens_per_usd``).
        fix, minimum, maximum, max_tp, max_vpp: user constraints
            (:func:`optimizers.space.make_constraints`), e.g. ``fix={"pp": 8}`` or
            ``fix=["pp=8"]``.
        keep_duplicates: keep configurations the cost model cannot distinguish.
        params: efficiency parameters (the shipped calibration when None).
        recompute_modules: what the candidates with ``recompute = selective`` recompute (the
            training field; e.g. ``"layernorm,mla_up_proj,moe_act"``); default ``core_attn``,
            which with FlashAttention makes selective dominated by no recomputation (pruned).
        client: a ``dask.distributed.Client``: a space of more than :data:`NUMPY_ROWS`
            candidates is evaluated in partitions on its workers (:func:`search_partition`,
            :func:`evaluate_distributed`) and merged in candidate order, so the ranking, the
            top ``k`` and every score equal the single-process search bit for bit (workers of
            the same CPU kind). Smaller spaces are evaluated here (milliseconds).
        partition_rows: candidates per partition with a ``client`` (rounded up to a whole
            number of compiled chunks; default: about four partitions per worker).

        progress: ``progress(candidates done, total)`` after each compiled chunk (spaces
            larger than :data:`NUMPY_ROWS` evaluated in this process).
        shared: other training fields every candidate takes, by name
            (:data:`symcost.fields.SEARCH_SHARED_FIELDS`): e.g. ``ep_overlap=True,
            ep_dedup=True`` for DeepEP-style dispatch, ``bf16_layers=2``,
            ``offload="optimizer"``. The rules read them: candidates a setting makes invalid
            (offload without ZeRO) are removed and counted in ``rejected``.

    Returns:
        :class:`SearchResult`.

    Raises:
        SearchError: no configuration is valid or fits in memory; the message names the rule
            that removed the last candidates.
        ConfigError: malformed inputs, constraints, objective or price (names the field and
            the rule).
    """
    t0 = time.perf_counter()
    objective = _check_objective(objective, price_per_gpu_hour)
    if int(top) < 1:
        raise ConfigError(f"top: must be >= 1 (got {top})")
    spec, hw = as_model(model), as_hardware(hardware)
    cons = make_constraints(fix, minimum, maximum, max_tp, max_vpp)
    space = enumerate_space(spec, hw, num_gpus, global_batch, seq_len=seq_len, dtype=dtype,
                            flash_attention=flash_attention, constraints=cons,
                            keep_duplicates=keep_duplicates,
                            recompute_modules=recompute_modules, **shared)
    t1 = time.perf_counter()
    raise_if_empty(space)
    modules = space.context.recompute_modules
    base = base_inputs(spec, hw, dtype, space.seq_len, global_batch, flash_attention, params,
                       modules, space.context.shared)
    inputs = candidate_inputs(base, space.columns)
    # a small space is evaluated exactly (float64, NumPy: no JAX import, no compile); a large
    # one by the compiled float32 function, its leaders re-checked in float64 (_rank_space)
    if len(space) <= NUMPY_ROWS:
        f32 = evaluate_float64(inputs, ("step_time", "mem_headroom"))
    elif client is not None:
        f32 = evaluate_distributed(client, base, space.columns, partition_rows)
    else:
        f32 = evaluate_chunked(inputs, progress=progress)
    t2 = time.perf_counter()
    sc32 = score(f32["step_time"], space.columns["num_gpus"], space.context.global_batch,
                 space.seq_len, objective, price_per_gpu_hour)
    table, why, fits = _rank_space(space, base, sc32, f32["mem_headroom"], int(top), objective,
                                   price_per_gpu_hour, hw.name)
    t3 = time.perf_counter()
    timings = {"enumerate": t1 - t0, "evaluate": t2 - t1, "recheck": t3 - t2, "total": t3 - t0}
    usable = float(base["hbm_cap"] - base["mem_reserved"])
    result = SearchResult(table, _memory_rule(space.rejected, fits, usable), why, len(space),
                          int(fits.sum()), objective, "exhaustive", timings, spec, hw,
                          space.context.global_batch, space.seq_len, dtype,
                          bool(flash_attention), price_per_gpu_hour,
                          recompute_modules=modules, shared=dict(space.context.shared))
    result.extra["space"] = space
    result.extra["scores"] = sc32
    result.extra["fits"] = fits
    result.extra["headroom"] = f32["mem_headroom"]   # per candidate (bytes): Pareto fronts
    return result


#: spaces of at most this many candidates are evaluated with NumPy in float64 (milliseconds for
#: ten thousand rows, and a fresh process never imports JAX); larger ones stream through the
#: jit-compiled float32 model.
NUMPY_ROWS = 2**16


# ----------------------------------------------------------------------------- on Dask
def search_partition(base: Mapping[str, float], columns: Columns, chunk: int
                     ) -> dict[str, FloatArray]:
    """Step time (s) and memory headroom (bytes) of a slice of candidates, evaluated where
    this runs (a Dask worker) by the compiled float32 function a local search uses
    (:func:`optimizers.evaluate.evaluate_chunked`, compiled once per worker process; JAX's
    persistent compilation cache is read when the environment points at it).

    Args:
        base: shared inputs (:func:`optimizers.evaluate.base_inputs`).
        columns: field -> int array of the slice (fields of :data:`optimizers.space.FIELDS`).
        chunk: rows per compiled call: the chunk of the whole space, so every candidate is
            computed at the same place of the same chunk size as in one process.

    Returns:
        ``{"step_time": (n,), "mem_headroom": (n,)}`` float64 arrays of float32 values.
    """
    return evaluate_chunked(candidate_inputs(base, columns), chunk=chunk)


def evaluate_distributed(client: Any, base: Mapping[str, float], columns: Columns,
                         partition_rows: int | None = None) -> dict[str, FloatArray]:
    """:func:`optimizers.evaluate.evaluate_chunked` of every candidate on a Dask cluster.

    The candidates are split into partitions of a whole number of compiled chunks (the chunk
    :func:`symcost.evaluate.pick_chunk` picks for the whole space), each evaluated by
    :func:`search_partition` on a worker, and concatenated in candidate order: every value
    equals the single-process evaluation bit for bit, so ranking and top-k merge exactly.

    Args:
        client: a ``dask.distributed.Client``.
        base: shared inputs; columns: every candidate (field -> int array).
        partition_rows: candidates per partition (rounded up to whole chunks); about four
            partitions per worker when None.

    Returns:
        ``{"step_time": (n,), "mem_headroom": (n,)}`` float64 arrays.
    """
    n = int(len(columns["tp"]))
    chunk = pick_chunk(n)
    if partition_rows is None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        partition_rows = -(-n // (4 * workers))
    size = max(chunk, -(-int(partition_rows) // chunk) * chunk)
    shared = dict(base)
    # the candidate slices travel as scattered data, not inside the task graph
    slices = client.scatter([{k: np.ascontiguousarray(v[st:st + size])
                              for k, v in columns.items()} for st in range(0, n, size)])
    futures = [client.submit(search_partition, shared, part, chunk, pure=False)
               for part in slices]
    parts: list[dict[str, FloatArray]] = client.gather(futures)
    return {k: np.concatenate([p[k] for p in parts]) for k in ("step_time", "mem_headroom")}


def _rank_space(space: Space, base: Mapping[str, float], sc32: FloatArray, head32: FloatArray,
                top: int, objective: str, price: float | None, hw_name: str
                ) -> tuple[pd.DataFrame, pd.DataFrame, BoolArray]:
    """The ``top`` table and the runner-up terms of an evaluated space: the float32 leaders
    (:func:`_recheck_rows`) re-checked in float64 (:func:`_finish`).

    Args:
        space: the candidates; base: their shared inputs.
        sc32, head32: float32 scores and memory headroom (bytes) of every candidate.
        top, objective, price: as for :func:`search`; hw_name: named in errors.

    Returns:
        ``(table, why, fits)`` with ``fits`` the float32 memory verdict of every candidate.

    Raises:
        SearchError: no candidate fits in memory.
    """
    cols, ctx = space.columns, space.context
    usable = float(base["hbm_cap"] - base["mem_reserved"])
    rows = _recheck_rows(sc32, head32, usable, top)
    if not len(rows):
        _raise_no_fit(cols, head32, usable, ctx, space.seq_len, space.dtype,
                      space.flash_attention, len(space), hw_name)
    table, why = _finish({k: v[rows] for k, v in cols.items()}, base, top, objective, price,
                         ctx.global_batch, space.seq_len)
    if table.empty:
        _raise_no_fit(cols, head32, usable, ctx, space.seq_len, space.dtype,
                      space.flash_attention, len(space), hw_name)
    return table, why, head32 >= 0


def rank_of(result: SearchResult, fields: Mapping[str, object]) -> dict[str, Any]:
    """Where configurations matching ``fields`` rank in an exhaustive search result.

    Args:
        result: from :func:`search` (holds every candidate's float32 score).
        fields: field -> value for the fields to match (others free); names as
            :func:`optimizers.space.field_name` and values as
            :func:`optimizers.space.field_code` accept them (``recompute="full"``).

    Returns:
        ``{"matches": n matching candidates, "fitting_matches": those that fit,
        "rank": 1-based rank of the best fitting match among all fitting candidates (None when
        no match fits), "score": its score, "index": its candidate index}``.

    Raises:
        ConfigError: an unknown field or a value outside its field's domain.
    """
    space: Space = result.extra["space"]
    cols, sc, fits = space.columns, result.extra["scores"], result.extra["fits"]
    mask = np.ones(len(space), dtype=bool)
    for k, v in fields.items():
        mask &= cols[field_name(k)] == field_code(k, v)
    good = mask & fits
    out: dict[str, Any] = {"matches": int(mask.sum()), "fitting_matches": int(good.sum()),
                           "rank": None, "score": None, "index": None}
    if good.any():
        i = int(np.flatnonzero(good)[np.argmin(sc[good])])
        out.update(rank=int((sc[fits] < sc[i]).sum()) + 1, score=float(sc[i]), index=i)
    return out


# ----------------------------------------------------------------------------- SciPy search
#: every mode combination (recompute, sp, zero, dp_overlap, tp_overlap codes), one per row:
#: 96 x 5.
MODE_GRID = np.stack(np.meshgrid((0, 1, 2), (0, 1), (0, 1, 2, 3), (0, 1), (0, 1),
                                 indexing="ij"), axis=-1).reshape(-1, 5)
#: the columns of :data:`MODE_GRID`.
MODE_NAMES = ("recompute", "sp", "zero", "dp_overlap", "tp_overlap")


@dataclass(frozen=True)
class LayoutCodec:
    """Encoding of a parallel layout as a differential-evolution vector.

    Integer variables (``integrality``): index of the GPU count, of TP among the divisors of
    the GPU counts passing the TP rules, of PP among the divisors not above the layer count,
    of CP among the divisors passing the CP rules (last, so older 5-vectors keep their
    meaning). EP is the user's fixed value (1 without one); the polish enumerates every EP.
    Continuous "random keys" in [0, 1): the micro-batch among the divisors of
    ``global_batch / dp`` and VPP among the interleaving-compatible values for that PP (both
    after the user's constraints), so every decoded point has a micro-batch and a VPP that
    could be valid. Each decoded layout is expanded to all 96 mode combinations.

    Attributes:
        bounds: ``(low, high)`` per variable.
        integrality: True for the integer variables.
        counts, tp_vals, pp_vals, cp_vals: the value lists indexed by the integer variables.
        ctx: rule context.
    """

    bounds: tuple[tuple[float, float], ...]
    integrality: tuple[bool, ...]
    counts: IntArray
    tp_vals: IntArray
    pp_vals: IntArray
    ctx: Context
    cp_vals: IntArray = field(default_factory=lambda: np.ones(1, dtype=np.int64))

    def _options(self, name: str, values: tuple[int, ...]) -> tuple[int, ...]:
        """``values`` that pass the user's constraints on ``name`` (the first when none)."""
        arr = np.asarray(values, dtype=np.int64)
        for _, keep in self.ctx.constraints.rules_for(name):
            arr = arr[np.asarray(keep(arr), dtype=np.bool_)]
        return tuple(arr.tolist()) or values[:1]

    def decode(self, x: npt.ArrayLike) -> Columns:
        """Vectors ``(6, S)`` (or ``(5, S)``: CP 1) -> candidate columns of ``S * 96`` rows
        (layout-major)."""
        x = np.atleast_2d(np.asarray(x, dtype=np.float64))
        s = x.shape[1]
        idx = [np.clip(np.rint(x[i]).astype(np.int64), 0, len(v) - 1)
               for i, v in enumerate((self.counts, self.tp_vals, self.pp_vals))]
        n, tp, pp = self.counts[idx[0]], self.tp_vals[idx[1]], self.pp_vals[idx[2]]
        cp = (self.cp_vals[np.clip(np.rint(x[5]).astype(np.int64), 0, len(self.cp_vals) - 1)]
              if x.shape[0] > 5 else np.ones(s, dtype=np.int64))
        tpp = tp * pp * cp
        dp = np.where(n % tpp == 0, n // tpp, 0)
        B, L = self.ctx.global_batch, self.ctx.layers
        mb = np.ones(s, dtype=np.int64)
        vpp = np.ones(s, dtype=np.int64)
        for j in range(s):
            mopts = self._options("micro_batch", divisors(B // int(dp[j]))
                                  if dp[j] > 0 and B % dp[j] == 0 else (1,))
            mb[j] = mopts[min(int(x[3, j] * len(mopts)), len(mopts) - 1)]
            vopts = self._options("vpp", _vpp_options(L, int(pp[j])))
            vpp[j] = vopts[min(int(x[4, j] * len(vopts)), len(vopts) - 1)]
        # expert parallelism is not a vector dimension: the user's fixed value (1 without
        # one); the polish enumerates every ep of the best layouts
        ep = np.full(s, int(self.ctx.constraints.fix.get("ep", 1)), dtype=np.int64)
        m = len(MODE_GRID)
        cols = {k: np.repeat(v, m) for k, v in (("num_gpus", n), ("tp", tp), ("cp", cp),
                                                  ("pp", pp), ("dp", dp), ("ep", ep),
                                                  ("micro_batch", mb), ("vpp", vpp))}
        for j, name in enumerate(MODE_NAMES):
            cols[name] = np.tile(MODE_GRID[:, j], s)
        return cols


@functools.lru_cache(maxsize=1024)
def _vpp_options(layers: int, pp: int) -> tuple[int, ...]:
    """VPP values a ``pp``-stage pipeline of ``layers`` layers can interleave with."""
    if pp <= 1:
        return (1,)
    return tuple(range(1, (layers + 2) // pp + 1))


def layout_codec(ctx: Context, gpu_counts: Sequence[int]) -> LayoutCodec:
    """The :class:`LayoutCodec` for GPU counts ``gpu_counts`` under ``ctx``."""
    counts = np.asarray(sorted(set(int(c) for c in gpu_counts)), dtype=np.int64)
    divs = np.unique(np.concatenate([np.asarray(divisors(int(n)), dtype=np.int64)
                                     for n in counts]))
    tp_vals = divs[_passes(ctx, "tp", {"tp": divs, "num_gpus": np.full_like(divs, counts.max())})]
    pp_vals = divs[divs <= ctx.layers]
    # CP rules that also read tp (a2a: tp*cp divides the heads) at tp = 1, the loosest
    cp_vals = divs[_passes(ctx, "cp", {"cp": divs, "tp": np.ones_like(divs)})]
    tp_vals = tp_vals if len(tp_vals) else divs[:1]
    pp_vals = pp_vals if len(pp_vals) else divs[:1]
    cp_vals = cp_vals if len(cp_vals) else divs[:1]
    bounds = ((0, len(counts) - 1 + 1e-9), (0, len(tp_vals) - 1 + 1e-9),
              (0, len(pp_vals) - 1 + 1e-9), (0.0, 1.0), (0.0, 1.0),
              (0, len(cp_vals) - 1 + 1e-9))
    return LayoutCodec(bounds, (True, True, True, False, False, True), counts, tp_vals,
                       pp_vals, ctx, cp_vals)


def search_scipy(model: ModelSpec | str, hardware: HardwareSpec | str,
                 num_gpus: int | Sequence[int], global_batch: int, *,
                 seq_len: int | None = None, dtype: str = "bf16", flash_attention: bool = True,
                 top: int = 10, objective: str | None = None,
                 price_per_gpu_hour: float | None = None, fix: ConstraintSpec | None = None,
                 minimum: ConstraintSpec | None = None, maximum: ConstraintSpec | None = None,
                 max_tp: int | None = None, max_vpp: int | None = None,
                 keep_duplicates: bool = False, params: Params | None = None,
                 seed: int | None = 0, popsize: int = 15, maxiter: int = 60,
                 polish_layouts: int = 3, strategy: str = "rand1bin",
                 recompute_modules: str = "core_attn", **shared: Any) -> SearchResult:
    """Differential-evolution search for spaces too large to enumerate.

    ``scipy.optimize.differential_evolution`` over a :class:`LayoutCodec` vector (GPU count,
    TP and PP as integers with ``integrality``; micro-batch and VPP as random keys). Each
    individual is scored by its best valid, fitting mode combination (recompute x SP x ZeRO x
    DP overlap, evaluated together); invalid points get a penalty growing with the number of
    broken rules (:func:`optimizers.space.violations`), points that do not fit one growing with
    the memory deficit. The whole population is one vectorized call of the compiled model.
    Then a discrete polish: every configuration of the ``polish_layouts`` best (GPU count,
    TP, PP) layouts is enumerated and evaluated (all micro-batches, VPPs and modes).

    Args:
        model, hardware, num_gpus, global_batch, seq_len, dtype, flash_attention, top,
            objective, price_per_gpu_hour, fix, minimum, maximum, max_tp, max_vpp,
            keep_duplicates, params, recompute_modules, shared: as for :func:`search`.
        seed: random seed (reproducible by default).
        popsize, maxiter: differential-evolution population multiplier and generations.
        strategy: differential-evolution strategy (``rand1bin`` explores more than the
            greedy ``best1bin``, which collapses onto one layout early).
        polish_layouts: layouts enumerated in full after the evolution (0: none).

    Returns:
        :class:`SearchResult` over the distinct valid configurations evaluated
        (``method='differential_evolution'``; ``rejected`` counts rule violations among the
        points evaluated).

    Raises:
        SearchError: no evaluated point was valid and fitting.
    """
    from scipy.optimize import differential_evolution   # lazy: see the module note

    t0 = time.perf_counter()
    objective = _check_objective(objective, price_per_gpu_hour)
    spec, hw = as_model(model), as_hardware(hardware)
    counts = positive_ints("num_gpus", num_gpus)
    seq = check_inputs(spec, hw, global_batch, seq_len, dtype)
    cons = make_constraints(fix, minimum, maximum, max_tp, max_vpp)
    ctx = make_context(spec, hw, int(global_batch), seq, dtype, flash_attention,
                       keep_duplicates, cons, recompute_modules, shared)
    codec = layout_codec(ctx, counts)
    base = base_inputs(spec, hw, dtype, seq, ctx.global_batch, flash_attention, params,
                       ctx.recompute_modules, ctx.shared)
    tally = _Tally(ctx, base, seq, objective, price_per_gpu_hour)

    def objective_fn(x: FloatArray) -> FloatArray:
        val = tally.score(codec.decode(x))
        best: FloatArray = val.reshape(-1, len(MODE_GRID)).min(axis=1)
        return best

    res = differential_evolution(objective_fn, list(codec.bounds),
                                 integrality=list(codec.integrality), vectorized=True,
                                 updating="deferred", seed=seed, popsize=popsize,
                                 maxiter=maxiter, tol=1e-6, polish=False, strategy=strategy)
    t1 = time.perf_counter()
    for sub in _polish_spaces(tally.seen, polish_layouts, spec, hw, ctx.global_batch, seq, dtype,
                              flash_attention, cons, keep_duplicates, ctx.recompute_modules,
                              ctx.shared):
        tally.score(sub.columns)
    t2 = time.perf_counter()
    table, why, rejected, n_fit = _scipy_table(tally, int(top), dtype, flash_attention, hw.name)
    t3 = time.perf_counter()
    return SearchResult(table, rejected, why, len(tally.seen), n_fit, objective,
                        "differential_evolution",
                        {"evolve": t1 - t0, "polish": t2 - t1, "recheck": t3 - t2,
                         "total": t3 - t0},
                        spec, hw, ctx.global_batch, seq, dtype, bool(flash_attention),
                        price_per_gpu_hour,
                        {"nfev": int(res.nfev), "nit": int(res.nit),
                         "points": tally.invalid + tally.valid},
                        recompute_modules=ctx.recompute_modules, shared=dict(ctx.shared))


#: a candidate as a tuple of its :data:`~optimizers.space.FIELDS` values.
ConfigKey = tuple[int, ...]


class _Tally:
    """The SciPy search's evaluations: scores points and remembers the valid ones.

    Attributes:
        ctx, base, seq, objective, price: the search's rules, shared inputs, sequence
            length, objective and price per GPU-hour.
        usable: usable HBM per GPU (bytes).
        seen: each valid configuration evaluated -> (float32 score, headroom in bytes), in
            the order first seen.
        invalid, valid: points evaluated that break >= 1 rule, and that break none.
    """

    def __init__(self, ctx: Context, base: Mapping[str, float], seq: int, objective: str,
                 price: float | None) -> None:
        self.ctx, self.base, self.seq = ctx, base, seq
        self.objective, self.price = objective, price
        self.usable = float(base["hbm_cap"] - base["mem_reserved"])
        self.seen: dict[ConfigKey, tuple[float, float]] = {}
        self.invalid = 0
        self.valid = 0

    def score(self, cols: Columns) -> FloatArray:
        """Objective of each point of a population (smaller is better): the score of a valid
        configuration that fits; ``1e8 * (1 + memory deficit)`` for one that does not fit;
        ``1e9 * (1 + broken rules)`` for an invalid one."""
        nv = violations(cols, self.ctx)
        self.invalid += int((nv > 0).sum())
        self.valid += int((nv == 0).sum())
        valid = nv == 0
        val = 1e9 * (1.0 + nv.astype(np.float64))
        if valid.any():
            sub = {k: v[valid] for k, v in cols.items()}
            f32 = evaluate_chunked(candidate_inputs(self.base, sub))
            sc = score(f32["step_time"], sub["num_gpus"], self.ctx.global_batch, self.seq,
                       self.objective, self.price)
            head = f32["mem_headroom"]
            for j, key in enumerate(zip(*(sub[k].tolist() for k in FIELDS))):
                self.seen.setdefault(key, (float(sc[j]), float(head[j])))
            val[valid] = np.where(head >= 0, sc,
                                  1e8 * (1.0 + np.minimum(-head / self.usable, 10.0)))
        return val


def _polish_spaces(seen: Mapping[ConfigKey, tuple[float, float]], polish_layouts: int,
                   model: ModelSpec, hw: HardwareSpec, B: int, seq: int, dtype: str,
                   flash_attention: bool, cons: Constraints, keep_duplicates: bool,
                   recompute_modules: str = "core_attn",
                   shared: Mapping[str, Any] | None = None) -> list[Space]:
    """The discrete polish after the evolution: the full spaces of the ``polish_layouts``
    best (GPU count, TP, PP) layouts seen (``shared``: the search's settings)."""
    if not seen or polish_layouts <= 0:
        return []
    keys = np.asarray(list(seen), dtype=np.int64)
    sc = np.array([v[0] if v[1] >= 0 else np.inf for v in seen.values()])
    col = {k: keys[:, FIELDS.index(k)] for k in ("num_gpus", "tp", "pp")}
    lay = pd.DataFrame({"n": col["num_gpus"], "tp": col["tp"], "pp": col["pp"], "sc": sc})
    best = lay.groupby(["n", "tp", "pp"])["sc"].min().sort_values()
    best = best[np.isfinite(best.to_numpy())].head(int(polish_layouts))
    out = []
    for (n, tp, pp), _ in best.items():
        fixed = dict(cons.fix, tp=int(tp), pp=int(pp))
        sub = enumerate_space(model, hw, int(n), B, seq_len=seq, dtype=dtype,
                              flash_attention=flash_attention,
                              constraints=Constraints(fixed, cons.minimum, cons.maximum),
                              keep_duplicates=keep_duplicates,
                              recompute_modules=recompute_modules, **(shared or {}))
        if len(sub):
            out.append(sub)
    return out


def _scipy_table(tally: _Tally, top: int, dtype: str, flash_attention: bool, hw_name: str
                 ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, int]:
    """``(table, why, rejected, fitting configurations)`` of a SciPy search: the ``top``
    configurations seen, re-checked in float64.

    Raises:
        SearchError: no valid configuration was seen, or none fits in memory.
    """
    seen, ctx, usable = tally.seen, tally.ctx, tally.usable
    valid_keys = list(seen)
    if not valid_keys:
        raise SearchError(f"differential evolution found no valid configuration in "
                          f"{tally.invalid + tally.valid} points; run the exhaustive search "
                          f"for the rule that removes every candidate")
    arr = np.asarray(valid_keys, dtype=np.int64)
    cols = {k: arr[:, i] for i, k in enumerate(FIELDS)}
    sc32 = np.array([seen[k][0] for k in valid_keys])
    head32 = np.array([seen[k][1] for k in valid_keys])
    fits = head32 >= 0
    if not fits.any():
        _raise_no_fit(cols, head32, usable, ctx, tally.seq, dtype, flash_attention,
                      len(valid_keys), hw_name)
    rows = _recheck_rows(sc32, head32, usable, top)
    table, why = _finish({k: v[rows] for k, v in cols.items()}, tally.base, top,
                         tally.objective, tally.price, ctx.global_batch, tally.seq)
    rejected = pd.DataFrame([
        {"stage": "differential_evolution", "rule": "points breaking >= 1 rule",
         "removed": tally.invalid, "remaining": tally.valid, "level": "points evaluated"},
        {"stage": "memory", "rule": _memory_rule_text(usable),
         "removed": int((~fits).sum()), "remaining": int(fits.sum()),
         "level": "distinct configurations"}])
    return table, why, rejected, int(fits.sum())


def _passes(ctx: Context, stage: str, cols: Columns) -> BoolArray:
    """Which rows of ``cols`` pass every rule of ``stage``."""
    mask = np.ones(len(next(iter(cols.values()))), dtype=np.bool_)
    for _, keep in stage_rules(stage, ctx):
        mask &= np.asarray(keep(cols), dtype=np.bool_)
    return mask


__all__ = ["OBJECTIVES", "SearchResult", "SearchError", "rank_of", "score", "search",
           "search_scipy", "structural_ok", "Constraints"]
