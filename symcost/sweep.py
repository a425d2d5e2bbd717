"""Vectorized sweeps of the training model over grids or random samples of its symbols.

A sweep starts from a base configuration (model, hardware, efficiency parameters and a
:class:`~symcost.config.TrainingConfig`, exactly as ``symcost train`` takes them) and varies
any set of variables:

* hardware and efficiency symbols (``hbm_bw``, ``peak_flops_16``, ``eff_gemm``, ...),
* model shape (``n_layers``/``layers``, ``hidden``, ``n_heads``/``heads``,
  ``n_kv_heads``/``kv_heads``, ``ffn_hidden``, ``vocab``, ``seq_len``, ``max_seq_len``),
* parallel layout, batch and modes (``tp``, ``pp``, ``dp``, ``num_gpus``, ``vpp``,
  ``micro_batch``, ``global_batch``, ``sp``, ``recompute``, ``zero``, ``flash_attention``,
  ``dp_overlap``, ``fp8``).

Each row means: the base configuration with that row's values substituted, then
:func:`symcost.config.resolve`. Fields the base leaves ``None`` are derived per row the way
``resolve`` derives them: ``dp = num_gpus/(tp*pp)`` when ``num_gpus`` is given (so varying
``tp`` at a fixed ``num_gpus`` moves ``dp``), ``global_batch = dp*micro_batch`` when no
global batch is given. Varying ``dp`` itself drops a base ``num_gpus`` (the GPU count
follows ``tp*pp*dp``; otherwise every ``dp`` but one would be masked), and varying
``num_gpus`` drops a base ``dp``. Derived columns (``dp``, ``global_batch``) appear in the
result when they vary.

Rows that ``resolve`` (or :class:`~symcost.models.ModelSpec`) would reject, and rows that do
not fit in memory (``mem_headroom < 0``), are *masked*: ``valid`` is False and ``reason``
names the field and the first rule broken, in the order ``resolve`` checks them. Outputs of
rule-breaking rows are NaN (the formula has no meaning there); rows that only fail the memory
check keep their outputs (the time they would take if they fitted).

Evaluation streams fixed-size chunks (``2**12`` rows when the sweep fits in one, else ``2**16``;
see :data:`CHUNK_SIZES`; the last chunk padded) through one jit-compiled function per
(outputs, varied variables, precision, chunk size): a new sweep size never recompiles. Fixed
values are passed as scalars, so subexpressions that depend only on them are computed once
per chunk, not per row. The validity rules run inside the same compiled
function (``floor(a/b)*b == a``, exact for integers below ``2**24``).

Precision (measured by ``benchmarks/throughput.py`` on 1e6 random GPT-3-like configurations,
2-core AVX-512 CPU): float32 evaluates the compiled model about 2x faster than float64 per
CPU-second (1.45x once NumPy input/output is included); against float64 its largest relative
error was 4.6e-7 (step time, tokens/s, MFU) and 1.8e-7 (memory), no fit decision flipped and
the top-100 rows by step time were the same rows. So the default ``mixed`` evaluates every
row in float32 and re-evaluates in float64 the rows a reader acts on: rows whose memory
headroom is within :data:`RECHECK_HEADROOM_REL` of the usable memory (the fit decision could
flip) and the ``recheck_top`` best valid rows by ``rank_by``. Their outputs are replaced by
the float64 values and ``valid``/``reason`` re-derived; ``rechecked`` marks them.
``float64`` throughout is available for exact reproducibility of every row.
"""

from __future__ import annotations

import functools
import math
import os
import time
from collections.abc import Mapping, Sequence
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from hwspecs import HardwareSpec

from . import rules as R
from . import symbols as S
from .api import as_hardware, as_model, merge_config, training_inputs_symbols
from .config import (TrainingConfig, hardware_bindings, hardware_facts, set_field_bindings,
                     model_bindings)
from .evaluate import CHUNK_SIZES, Progress, evaluate_chunks, pick_chunk
from .fields import (MODEL_FIELDS, MODEL_PARALLEL, TRAINING_FIELDS, ConfigError, Field,
                     check_array, coerce, encode, gemm_dtype_flags, model_parallel_size,
                     text_value)
from .lower import lower
from .models import ModelSpec
from .params import BOUNDS, Params, load_params
from .training import training_expressions

# jax and pandas are imported inside the functions that use them, so that importing this
# module (and ``symcost --help``) loads neither.
if TYPE_CHECKING:
    import pandas as pd

#: ``(start, n, chunk index) -> one float64 array of n values per varied variable``.
ChunkInputs = Callable[[int, int, int], Sequence[np.ndarray]]

#: outputs a sweep returns unless told otherwise.
DEFAULT_OUTPUTS = ("step_time", "tokens_per_s", "mfu", "mem_total", "mem_headroom")
#: rows per compiled call: :data:`symcost.evaluate.CHUNK_SIZES` (the small one when the rows
#: fit in it, e.g. the float64 re-check of ~110 rows; else the large one, which fits the
#: per-core L2 working set best on the reference CPU). Each size compiles once per plan and
#: precision, so a new sweep size never recompiles.
DEFAULT_CHUNK = CHUNK_SIZES[-1]
#: rows per random-number stream of a sampled sweep: the rows drawn do not depend on the
#: chunk size.
SAMPLE_BLOCK = 2**12
#: ``mixed``: float32 for all rows, float64 re-check of the rows that are reported.
DEFAULT_PRECISION = "mixed"
PRECISIONS = ("mixed", "float32", "float64")
#: outputs for which a larger value is better (ranking of the ``mixed`` re-check).
LARGER_IS_BETTER = frozenset({"mfu", "hfu", "tokens_per_s", "mem_headroom"})
#: rows with ``|mem_headroom| <= RECHECK_HEADROOM_REL * mem_usable`` are re-checked in float64
#: under ``mixed`` precision (float32 relative error of mem_total is below 1e-6).
RECHECK_HEADROOM_REL = 1e-4

#: the rules a sweep row is checked against, in order: :data:`symcost.rules.TRAINING_RULES`,
#: then memory fit. Code 0 is valid, code ``i`` is ``SWEEP_RULES[i - 1]``.
SWEEP_RULES: tuple[R.Rule, ...] = R.TRAINING_RULES + R.OUTPUT_RULES
#: masking reasons (``"<field>: <rule>"``), by code - 1.
REASONS: tuple[str, ...] = tuple(r.text for r in SWEEP_RULES)
_MEMORY_CODE = len(REASONS)
#: symbols bound by a derived quantity rather than one variable: ``fp8`` follows ``dtype``.
_DERIVED_SYMBOLS = frozenset({S.fp8.name, S.fp4.name})


class SweepError(ValueError):
    """An invalid sweep specification; the message names the variable and the rule."""


@dataclass(frozen=True)
class Range:
    """A numeric range of a sweep variable.

    Attributes:
        lo, hi: bounds, inclusive, in the variable's base unit (``lo <= hi``).
        num: grid points (grid sweeps); None for an integer variable means every integer in
            ``[lo, hi]``. Ignored by random sweeps.
        log: log spacing (grid) or log-uniform sampling (random); needs ``lo > 0``.
    """

    lo: float
    hi: float
    num: int | None = None
    log: bool = False


# ----------------------------------------------------------------------------- specs
@functools.lru_cache(maxsize=1)
def variables() -> dict[str, str | None]:
    """Every variable a sweep can vary -> the model symbol it binds (None for ``num_gpus``
    and ``dtype``, which bind through derived values).

    Names are the field vocabulary (:mod:`symcost.fields`): configuration fields
    (``tp``, ``sp``, ``zero``, ``flash_attention``, ``dtype``, ...), model shape fields
    (``layers``, ``heads``, ``kv_heads``, ...), and, for quantities that are no field, the
    symbol name (``hbm_bw``, ``eff_gemm``, ``gated_mlp``, ...).
    """
    by_symbol = {f.symbol: f.name for f in (*TRAINING_FIELDS.values(), *MODEL_FIELDS.values())
                 if f.symbol is not None and f.sweepable}
    out: dict[str, str | None] = {}
    for sym in training_inputs_symbols():
        if sym.name in _DERIVED_SYMBOLS:
            continue
        out[by_symbol.get(sym.name, sym.name)] = sym.name
    out["num_gpus"] = None
    out["dtype"] = None
    return out


def field_of(name: str) -> Field | None:
    """The :class:`~symcost.fields.Field` of a sweep variable (None for symbol variables)."""
    return TRAINING_FIELDS.get(name) or MODEL_FIELDS.get(name)


def canonical_name(name: str) -> str:
    """Check that ``name`` is a sweep variable (see :func:`variables`) and return it.

    Raises:
        SweepError: unknown variable (lists the known ones).
    """
    known = variables()
    n = name.strip()
    if n not in known:
        raise SweepError(f"vary: unknown variable {name!r}; known: {', '.join(sorted(known))}")
    return n


def _is_discrete(name: str) -> bool:
    f = field_of(name)
    if f is not None:
        return f.kind != "float"
    return S.REGISTRY[name].discrete


def _convert_value(name: str, v: object) -> float:
    """One listed value of variable ``name`` as its encoded number."""
    f = field_of(name)
    try:
        if f is not None:
            return text_value(f, v) if isinstance(v, str) else encode(f, coerce(f, v))
        if isinstance(v, str):
            return float(v.strip())
        return float(v)  # type: ignore[arg-type]  # anything float() takes; else the error
    except ConfigError as exc:
        raise SweepError(f"vary {exc}") from None
    except (TypeError, ValueError):
        raise SweepError(f"vary {name}: {v!r} is not a number") from None


def _check_values(name: str, arr: np.ndarray, generated: bool = False) -> np.ndarray:
    """Check the values of one variable: a field's type, choices and range
    (:func:`symcost.fields.check_array`: ``tp=1.5`` is an error); a symbol's finiteness,
    sign and, for efficiency parameters, physical range (:data:`symcost.params.BOUNDS`).
    Values ``generated`` from a range are rounded first for integer variables."""
    if not np.all(np.isfinite(arr)):
        raise SweepError(f"vary {name}: values must be finite")
    if generated and _is_discrete(name):
        arr = np.rint(arr)
    f = field_of(name)
    if f is not None:
        try:
            return check_array(f, arr)
        except ConfigError as exc:
            raise SweepError(f"vary {exc}") from None
    info = S.REGISTRY[name]
    if info.discrete and not np.all(arr == np.rint(arr)):
        raise SweepError(f"vary {name}: values must be integers (got {arr[arr != np.rint(arr)][0]:g})")
    positive = bool(info.symbol.is_positive)
    if np.any(arr <= 0) if positive else np.any(arr < 0):
        rule = "positive" if positive else "non-negative"
        raise SweepError(f"vary {name}: values must be {rule} (got {arr.min():g})")
    if name in BOUNDS:
        lo, hi = BOUNDS[name]
        out = arr[(arr < lo) | (arr > hi)]
        if out.size:
            raise SweepError(f"vary {name}: values must be in its physical range [{lo:g}, "
                             f"{hi:g}] (symcost.params.BOUNDS; got {out[0]:g})")
    if info.discrete and info.symbol.is_nonnegative and not info.symbol.is_positive:
        if not np.all(np.isin(arr, (0.0, 1.0))):
            raise SweepError(f"vary {name}: values must be 0 or 1")
    return arr


def grid_values(name: str, spec: object) -> np.ndarray:
    """The grid values of one variable (float64, discrete ones rounded, duplicates kept out).

    Args:
        name: canonical variable name.
        spec: a sequence of values, or a :class:`Range`.

    Raises:
        SweepError: empty spec, a continuous range without ``num``, bad values.
    """
    if isinstance(spec, Range):
        _check_range(name, spec)
        if spec.num is None:
            if not _is_discrete(name):
                raise SweepError(f"vary {name}: a grid over a continuous range needs a number "
                                 f"of points (lo:hi:num)")
            vals = np.arange(math.ceil(spec.lo), math.floor(spec.hi) + 1, dtype=np.float64)
        elif spec.log:
            vals = np.geomspace(spec.lo, spec.hi, spec.num)
        else:
            vals = np.linspace(spec.lo, spec.hi, spec.num)
        vals = _check_values(name, vals, generated=True)
        _, idx = np.unique(vals, return_index=True)
        vals = vals[np.sort(idx)]
    else:
        vals = _check_values(name, np.array([_convert_value(name, v) for v in _as_list(name, spec)],
                                            dtype=np.float64))
    if vals.size == 0:
        raise SweepError(f"vary {name}: no values")
    return vals


def _as_list(name: str, spec: object) -> list[object]:
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence | np.ndarray):
        raise SweepError(f"vary {name}: expected a list of values or a Range (got {spec!r})")
    return list(spec)


def _check_range(name: str, r: Range) -> None:
    if not (math.isfinite(r.lo) and math.isfinite(r.hi)) or r.lo > r.hi:
        raise SweepError(f"vary {name}: range needs finite lo <= hi (got {r.lo}:{r.hi})")
    if r.log and r.lo <= 0:
        raise SweepError(f"vary {name}: a log range needs lo > 0 (got {r.lo})")
    if r.num is not None and (not isinstance(r.num, int) or r.num < 1):
        raise SweepError(f"vary {name}: number of points must be a positive integer")


def sample_values(name: str, spec: Range | np.ndarray, n: int, rng: np.random.Generator
                  ) -> np.ndarray:
    """``n`` random values of one variable: uniform choice from a list, or uniform /
    log-uniform over a :class:`Range` (integer variables: uniform over the integers of the
    range, log-uniform values rounded)."""
    if isinstance(spec, Range):
        u = rng.random(n)
        if spec.log:
            vals = np.exp(math.log(spec.lo) + (math.log(spec.hi) - math.log(spec.lo)) * u)
            return np.rint(vals) if _is_discrete(name) else vals
        if _is_discrete(name):
            lo, hi = math.ceil(spec.lo), math.floor(spec.hi)
            return np.minimum(np.floor(lo + (hi - lo + 1) * u), hi)
        return spec.lo + (spec.hi - spec.lo) * u
    out: np.ndarray = spec[rng.integers(0, len(spec), n)]
    return out


def parse_vary(text: str) -> tuple[str, list[str] | Range]:
    """Parse one command-line ``--vary`` item.

    Grammar: ``name=v1,v2,...`` (values; names allowed for ``recompute`` and booleans),
    ``name=lo:hi`` (every integer for integer variables in a grid; uniform in a random
    sweep), ``name=lo:hi:num`` (grid points), with an optional trailing ``:log``
    (``name=lo:hi:log``, ``name=lo:hi:num:log``).

    Returns:
        ``(canonical name, list of values or Range)``.

    Raises:
        SweepError: malformed item.
    """
    if "=" not in text:
        raise SweepError(f"--vary {text!r}: expected name=values (e.g. tp=1,2,4,8 or "
                         "hbm_bw=1e12:4e12:7)")
    raw, _, rhs = text.partition("=")
    name = canonical_name(raw.strip())
    rhs = rhs.strip()
    if ":" in rhs:
        parts = [p.strip() for p in rhs.split(":")]
        log = parts[-1].lower() == "log"
        if log:
            parts = parts[:-1]
        if len(parts) not in (2, 3):
            raise SweepError(f"--vary {text!r}: a range is lo:hi[:num][:log]")
        try:
            lo, hi = float(parts[0]), float(parts[1])
            num = int(parts[2]) if len(parts) == 3 else None
        except ValueError:
            raise SweepError(f"--vary {text!r}: range bounds must be numbers and num an "
                             "integer") from None
        r = Range(lo, hi, num, log)
        _check_range(name, r)
        return name, r
    vals = [v for v in rhs.split(",") if v.strip()]
    if not vals:
        raise SweepError(f"--vary {text!r}: no values")
    return name, vals


# ----------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class _Plan:
    """Static description of a sweep (hashable: it keys the compiled chunk function)."""

    outputs: tuple[str, ...]
    varied: tuple[str, ...]          # variable names passed as per-row arrays
    fixed: tuple[str, ...]           # names passed as scalars
    dp_mode: str                     # 'value' | 'num_gpus' (dp = num_gpus/(tp*pp))
    gb_mode: str                     # 'value' | 'derived' (global_batch = dp*micro_batch)
    hw_facts: tuple[tuple[str, float], ...]   # hardware values the rules read
    derived: tuple[str, ...] = ()    # derived columns that vary per row ('dp', 'global_batch')

    @property
    def evaluated(self) -> tuple[str, ...]:
        """Outputs the compiled chunk function returns: the requested ones and headroom."""
        return tuple(dict.fromkeys(self.outputs + ("mem_headroom",)))


def _base_values(model: ModelSpec, hw: HardwareSpec, cfg: TrainingConfig, params: Params
                 ) -> dict[str, float]:
    """Encoded values of every variable for the base configuration (variable names of
    :func:`variables`); configuration fields left None (``dp``, ``num_gpus``,
    ``global_batch``) are left out. Rules are not checked (sweep rows are masked instead);
    each field's type, choices and range are.

    Raises:
        ConfigError: a field value outside its type, choices or range.
    """
    names = variables()
    sym_to_var = {sym: var for var, sym in names.items() if sym is not None}
    v: dict[str, float] = {}
    for sym, x in {**model_bindings(model), **hardware_bindings(hw, cfg.dtype),
                   **params.for_generation(hw.generation)}.items():
        if sym in sym_to_var:
            v[sym_to_var[sym]] = float(x)
    for name, f in TRAINING_FIELDS.items():
        value = coerce(f, getattr(cfg, name))
        if value is not None:
            v[name] = encode(f, value)
    # the flags of the set-valued fields (lora_q ... lora_down, rc_core_attn ...) follow
    # lora_targets and recompute_modules
    for sym, x in set_field_bindings(cfg).items():
        if sym in sym_to_var:
            v[sym_to_var[sym]] = x
    if "seq_len" not in v:
        v["seq_len"] = float(model.seq_len)
    return v


def _make_plan(base: dict[str, float], varied: Sequence[str], outputs: Sequence[str],
               hw: HardwareSpec) -> _Plan:
    """Decide how ``dp`` and ``global_batch`` are obtained per row (as :func:`resolve` does)
    and which values are passed as scalars. ``base`` is updated in place: varying ``dp``
    drops a base ``num_gpus`` (the GPU count follows ``tp*pp*dp``), varying ``num_gpus``
    drops a base ``dp``; without either, ``dp = 1``."""
    varied = tuple(varied)
    if "dp" in varied and "num_gpus" in varied:
        raise SweepError("vary: dp and num_gpus cannot both vary (num_gpus = tp*pp*dp)")
    if "dp" in varied:
        base.pop("num_gpus", None)
    if "num_gpus" in varied:
        base.pop("dp", None)
    have_dp = "dp" in varied or "dp" in base
    have_n = "num_gpus" in varied or "num_gpus" in base
    if not have_dp and not have_n:
        base["dp"] = 1.0
        have_dp = True
    dp_mode = "value" if have_dp else "num_gpus"
    gb_mode = "value" if ("global_batch" in varied or "global_batch" in base) else "derived"
    fixed = tuple(n for n in variables() if n not in varied and n in base)
    derived = []
    if dp_mode == "num_gpus" and {*MODEL_PARALLEL, "num_gpus"} & set(varied):
        derived.append("dp")
    if gb_mode == "derived" and ("micro_batch" in varied or "dp" in varied or "dp" in derived):
        derived.append("global_batch")
    return _Plan(tuple(outputs), varied, fixed, dp_mode, gb_mode,
                 tuple(sorted(hardware_facts(hw).items())), tuple(derived))


def rule_values(v: Mapping[str, Any], plan: _Plan, like: Any) -> dict[str, Any]:
    """The values :data:`SWEEP_RULES` read, from the row values ``v`` (variable names, with
    ``dp``/``num_gpus``/``global_batch`` filled in): hardware facts and
    ``global_batch_given`` added."""
    out = dict(v)
    out.update(plan.hw_facts)
    out["global_batch_given"] = 1.0 if plan.gb_mode == "value" else 0.0
    return out


def model_arguments(v: Mapping[str, Any], xp: Any) -> dict[str, Any]:
    """Symbol name -> value for the compiled model, from the row values ``v``."""
    out = {sym: v[var] for var, sym in variables().items() if sym is not None}
    out.update(gemm_dtype_flags(v["dtype"]))
    return out


@functools.lru_cache(maxsize=32)
def _chunk_function(plan: _Plan, dtype: str) -> Callable[..., Any]:
    """The jit-compiled chunk evaluator of ``plan``: ``(varied arrays, fixed scalars) ->
    (*plan.evaluated, reason code, *plan.derived)``."""
    import jax
    import jax.numpy as jnp

    exprs = training_expressions()
    inputs = training_inputs_symbols()
    cm = lower({k: exprs[k] for k in plan.evaluated}, inputs, dtype)
    names = [s.name for s in inputs]
    i_head = plan.evaluated.index("mem_headroom")
    ftype = jnp.float64 if dtype == "float64" else jnp.float32

    def run(varied: Sequence[Any], fixed: Sequence[Any]) -> tuple[Any, ...]:
        v = dict(zip(plan.varied, varied))
        v.update(zip(plan.fixed, fixed))
        mb = v["micro_batch"]
        like = jnp.zeros(jnp.shape(varied[0]), varied[0].dtype)
        if plan.dp_mode == "num_gpus":
            v["dp"] = v["num_gpus"] / model_parallel_size(v) + like
        else:
            v["dp"] = v["dp"] + like
            if "num_gpus" not in v:
                v["num_gpus"] = model_parallel_size(v) * v["dp"]
        gb = v["global_batch"] if plan.gb_mode == "value" else v["dp"] * mb
        v["global_batch"] = gb + like
        args = model_arguments(v, jnp)
        for flag_name in (S.fp8.name, S.fp4.name):
            args[flag_name] = jnp.asarray(args[flag_name], ftype) + like
        res = tuple(cm.call_jax(*(args[n] for n in names)))
        vals = rule_values(v, plan, like)
        vals["mem_headroom"] = res[i_head]
        code = R.first_broken(SWEEP_RULES, vals, jnp, jnp.shape(like))
        return res + (code,) + tuple(v[d] for d in plan.derived)

    return cast(Callable[..., Any], jax.jit(run))


# ----------------------------------------------------------------------------- the sweep
def sweep(model: ModelSpec | str, hardware: HardwareSpec | str,
          config: TrainingConfig | None = None, params: Params | None = None, *,
          vary: Mapping[str, object], samples: int | None = None,
          outputs: Sequence[str] = DEFAULT_OUTPUTS, precision: str = DEFAULT_PRECISION,
          rank_by: str = "step_time", recheck_top: int = 100, seed: int = 0,
          chunk_size: int | None = None, progress: Progress | None = None,
          client: Any = None, partition_rows: int | None = None,
          **config_fields: Any) -> pd.DataFrame:
    """Evaluate the training model over a grid or a random sample of configurations.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        config: base layout (fields not varied keep their values); or pass its fields as
            keyword arguments.
        params: efficiency parameters (:class:`~symcost.params.Params`); shipped when None.
        vary: variable name (symbol name, alias such as ``layers``/``heads``/``zero``, or
            ``num_gpus``) -> a list of values or a :class:`Range`. Base units (FLOP/s,
            bytes, bytes/s, s); ``recompute`` accepts ``none``/``selective``/``full``;
            efficiency parameters must lie in their physical range
            (:data:`symcost.params.BOUNDS`, e.g. ``eff_gemm`` in [0.05, 1]).
        samples: None for the full Cartesian grid; an integer for that many random rows
            (lists sampled uniformly, ranges uniformly or log-uniformly).
        outputs: training outputs to return (:func:`~symcost.training.training_expressions`
            names), or ``("all",)``.
        precision: ``mixed`` (float32, float64 re-check of reported rows), ``float32`` or
            ``float64``.
        rank_by: output that orders rows for the ``mixed`` re-check (smaller is better for
            times and memory, larger for ``mfu``/``hfu``/``tokens_per_s``).
        recheck_top: how many best valid rows ``mixed`` re-evaluates in float64.
        seed: random seed: the same seed and specification give the same rows, whatever the
            chunk size (each block of :data:`SAMPLE_BLOCK` rows draws from its own stream,
            seeded by ``(seed, block index)``).
        chunk_size: rows per compiled call; None picks from :data:`CHUNK_SIZES` by the
            number of rows (also for the float64 re-check).
        progress: called with the rows done and the total after each chunk (the CLI draws
            its progress bar from it; the core draws nothing); None for no callback.
        client: a ``dask.distributed.Client``: the rows are evaluated in partitions on its
            workers (:func:`sweep_partition`) and gathered; the result is identical to a
            local sweep. None (default): this process.
        partition_rows: rows per Dask task (rounded up to a multiple of the chunk size);
            default about four partitions per worker.

    Returns:
        pandas DataFrame with one row per configuration: the varied variables (canonical
        names), derived ``dp``/``global_batch`` when they vary, the outputs (base units),
        ``valid`` (bool), ``reason`` (categorical; empty when valid) and ``rechecked``
        (float64 re-checked, ``mixed`` only). ``df.attrs`` holds ``invalid_counts``
        (reason -> rows), ``seconds``, ``configs_per_s``, ``precision``.

    Raises:
        SweepError: bad variable names or values (non-finite, wrong sign, outside a mode's
            domain or an efficiency parameter's physical range), unknown outputs, nothing to
            vary.
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: bad base inputs.
    """
    if precision not in PRECISIONS:
        raise SweepError(f"precision: must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    if not vary:
        raise SweepError("vary: nothing to vary")
    if chunk_size is not None and (int(chunk_size) != chunk_size or chunk_size < 1):
        raise SweepError(f"chunk_size: must be a positive integer (got {chunk_size!r})")
    config = merge_config(config, **config_fields)
    all_outputs = tuple(training_expressions())
    outputs = all_outputs if tuple(outputs) == ("all",) else tuple(dict.fromkeys(outputs))
    bad = [o for o in outputs if o not in all_outputs]
    if bad:
        raise SweepError(f"outputs: unknown {', '.join(bad)}; known: {', '.join(all_outputs)}")
    if not outputs:
        raise SweepError("outputs: none requested")
    m, hw = as_model(model), as_hardware(hardware)
    params = params or load_params()
    base = _base_values(m, hw, config, params)

    specs = _specs(vary)
    plan = _make_plan(base, list(specs), outputs, hw)
    total, chunk_inputs = _row_source(specs, samples, seed)
    check_memory(total, plan)

    t0 = time.perf_counter()
    chunk = chunk_size or pick_chunk(total)
    dtype = "float64" if precision == "float64" else "float32"
    if client is None:
        inputs, outs, codes, derived = _evaluate(plan, base, total, chunk_inputs, chunk,
                                                 dtype, progress)
    else:
        inputs, outs, codes, derived = _evaluate_distributed(
            client, plan, base, specs, samples, seed, total, chunk, dtype, partition_rows,
            progress)
    mixed = precision == "mixed"
    out_cols = {o: outs[o].astype(np.float64) if mixed else outs[o] for o in outputs}
    rechecked = np.zeros(total, dtype=bool)
    if mixed:
        _recheck(plan, base, inputs, out_cols, codes, outs["mem_headroom"], rechecked,
                 rank_by, recheck_top, chunk_size)
    broken = (codes > 0) & (codes < _MEMORY_CODE)
    if broken.any():
        for o in outputs:
            out_cols[o][broken] = np.nan
    df = _frame(inputs, derived, out_cols, codes, rechecked if mixed else None)
    seconds = time.perf_counter() - t0
    counts = np.bincount(codes.astype(np.int64), minlength=len(REASONS) + 1)
    df.attrs.update({
        "invalid_counts": {REASONS[i - 1]: int(c) for i, c in enumerate(counts) if i and c},
        "seconds": seconds, "configs_per_s": total / seconds if seconds > 0 else float("inf"),
        "precision": precision, "rows": total, "valid_rows": int((codes == 0).sum()),
        "varied": list(plan.varied), "outputs": list(outputs),
    })
    return df


_Columns = tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray,
                 dict[str, np.ndarray]]


def sweep_partition(plan: _Plan, base: dict[str, float], specs: Mapping[str, object],
                    samples: int | None, seed: int, start: int, n: int, chunk: int,
                    dtype: str) -> _Columns:
    """Rows ``start .. start+n-1`` of a sweep, evaluated where this runs (a Dask worker):
    the rows are regenerated from the specification (grid index or random blocks seeded by
    row), so a partition needs no data from the client; the same compiled chunk function as
    a local sweep evaluates them (compiled once per worker process).

    Returns:
        ``(inputs, outputs, codes, derived)`` of those rows, as :func:`_evaluate` returns.
    """
    _, rows = _row_source(specs, samples, seed)
    return _evaluate(plan, base, n, lambda s, m, k: rows(start + s, m, k), chunk, dtype,
                     None)


def _evaluate_distributed(client: Any, plan: _Plan, base: dict[str, float],
                          specs: Mapping[str, object], samples: int | None, seed: int,
                          total: int, chunk: int, dtype: str, partition_rows: int | None,
                          progress: Progress | None) -> _Columns:
    """:func:`_evaluate` on a Dask cluster: the rows are split into partitions (a multiple
    of ``chunk`` rows each, about four per worker unless ``partition_rows`` is given), each
    evaluated by :func:`sweep_partition` on a worker, and gathered in row order. Every row
    is computed by the same compiled function on the same chunk size as locally, so the
    result is identical bit for bit."""
    from distributed import as_completed

    if partition_rows is None:
        workers = max(1, len(client.scheduler_info().get("workers", {})))
        partition_rows = -(-total // (4 * workers))
    size = max(chunk, -(-int(partition_rows) // chunk) * chunk)
    starts = list(range(0, total, size))
    futures = [client.submit(sweep_partition, plan, base, specs, samples, seed, st,
                             min(size, total - st), chunk, dtype, pure=False)
               for st in starts]
    index = {f.key: i for i, f in enumerate(futures)}
    parts: list[Any] = [None] * len(futures)
    done = 0
    for fut in as_completed(futures):  # type: ignore[no-untyped-call]  # untyped in dask
        i = index[fut.key]
        parts[i] = fut.result()
        done += min(size, total - starts[i])
        if progress is not None:
            progress(done, total)
    inputs = {k: np.concatenate([p[0][k] for p in parts]) for k in plan.varied}
    outs = {k: np.concatenate([p[1][k] for p in parts]) for k in parts[0][1]}
    codes = np.concatenate([p[2] for p in parts])
    derived = {k: np.concatenate([p[3][k] for p in parts]) for k in plan.derived}
    return inputs, outs, codes, derived


def _specs(vary: Mapping[str, object]) -> dict[str, object]:
    """``vary`` keyed by checked variable names.

    Raises:
        SweepError: an unknown variable, or one given twice.
    """
    specs: dict[str, object] = {}
    for raw, spec in vary.items():
        name = canonical_name(raw)
        if name in specs:
            raise SweepError(f"vary: {raw!r} given twice")
        specs[name] = spec
    return specs


def _row_source(specs: Mapping[str, object], samples: int | None, seed: int
                ) -> tuple[int, ChunkInputs]:
    """``(total rows, chunk_inputs)``: the Cartesian grid of ``specs`` (``samples`` None) or
    ``samples`` random rows; ``chunk_inputs(start, n, k)`` gives their columns.

    Raises:
        SweepError: bad values or ranges, or a non-positive ``samples``.
    """
    if samples is None:
        axes = {n: grid_values(n, s) for n, s in specs.items()}
        total = math.prod(a.size for a in axes.values())
        shape = tuple(a.size for a in axes.values())

        def grid_rows(start: int, n: int, _k: int) -> list[np.ndarray]:
            idx = np.unravel_index(np.arange(start, start + n), shape)
            return [axes[name][i] for name, i in zip(axes, idx)]
        return total, grid_rows
    if isinstance(samples, bool) or int(samples) != samples or samples < 1:
        raise SweepError(f"samples: must be a positive integer (got {samples!r})")
    prepared: dict[str, Range | np.ndarray] = {}
    for n, s in specs.items():
        if isinstance(s, Range):
            _check_range(n, s)
            # check the bounds as values of the variable (rounding, domain, sign)
            _check_values(n, np.array([s.lo, s.hi], dtype=np.float64), generated=True)
            prepared[n] = s
        else:
            prepared[n] = grid_values(n, s)

    def sample_rows(start: int, n: int, _k: int) -> list[np.ndarray]:
        return _sample_rows(prepared, seed, start, n)
    return int(samples), sample_rows


def memory_needed(total: int, plan: _Plan) -> int:
    """Bytes a sweep of ``total`` rows holds in memory: float64 input, output and derived
    columns, codes and flags, and the DataFrame built from them (about twice the columns)."""
    columns = len(plan.varied) + len(plan.evaluated) + len(plan.derived)
    return int(total) * (2 * 8 * columns + 3)


def available_memory() -> int | None:
    """Physical memory of this machine in bytes (None where the OS does not say)."""
    try:
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_memory(total: int, plan: _Plan) -> None:
    """Refuse, before computing, a sweep whose result cannot fit in this machine's memory.

    Raises:
        SweepError: naming the rows, the memory they need and the memory there is.
    """
    need, have = memory_needed(total, plan), available_memory()
    if have is not None and need > 0.8 * have:
        raise SweepError(f"samples: {total:,} rows need about {need / 2**30:.1f} GiB in memory "
                         f"and this machine has {have / 2**30:.1f} GiB; sweep fewer rows or "
                         f"fewer outputs (or split the sweep)")


def _recheck(plan: _Plan, base: dict[str, float], inputs: dict[str, np.ndarray],
             out_cols: dict[str, np.ndarray], codes: np.ndarray, headroom: np.ndarray,
             rechecked: np.ndarray, rank_by: str, recheck_top: int,
             chunk_size: int | None) -> None:
    """The ``mixed`` precision re-check: re-evaluate in float64 the rows a reader acts on
    and replace their outputs and codes in place."""
    rows = _recheck_rows(inputs, out_cols, codes, headroom, base, rank_by, recheck_top)
    if not rows.size:
        return
    sub = {n: inputs[n][rows] for n in plan.varied}
    _, sub_outs, sub_codes, _ = _evaluate(
        plan, base, rows.size, lambda s, n, _k: [sub[name][s:s + n] for name in plan.varied],
        chunk_size or pick_chunk(rows.size), "float64", None)
    for o in out_cols:
        out_cols[o][rows] = sub_outs[o]
    codes[rows] = sub_codes
    rechecked[rows] = True


def _frame(inputs: Mapping[str, np.ndarray], derived: Mapping[str, np.ndarray],
           out_cols: Mapping[str, np.ndarray], codes: np.ndarray,
           rechecked: np.ndarray | None) -> pd.DataFrame:
    """The sweep's DataFrame: varied and derived columns, outputs, ``valid``, ``reason``
    (categorical) and ``rechecked`` (``mixed`` only)."""
    import pandas as pd

    data: dict[str, Any] = dict(inputs)
    data.update({d: col.astype(np.float64) for d, col in derived.items()})
    # an output named like a varied column (num_gpus) repeats it: the input column stays
    data.update({o: c for o, c in out_cols.items() if o not in data})
    data["valid"] = codes == 0
    data["reason"] = pd.Categorical.from_codes(codes.astype(np.int16),  # type: ignore[call-overload]
                                               categories=("",) + REASONS)
    if rechecked is not None:
        data["rechecked"] = rechecked
    return pd.DataFrame(data, copy=False)


def _sample_rows(prepared: Mapping[str, Range | np.ndarray], seed: int, start: int, n: int
                 ) -> list[np.ndarray]:
    """Rows ``start .. start+n-1`` of a random sweep, one array per variable: block ``j`` of
    :data:`SAMPLE_BLOCK` rows is drawn from the stream seeded ``(seed, j)``, so the rows do
    not depend on how they are chunked."""
    first, last = start // SAMPLE_BLOCK, (start + n - 1) // SAMPLE_BLOCK
    parts: list[list[np.ndarray]] = []
    for j in range(first, last + 1):
        rng = np.random.default_rng([seed, j])
        parts.append([sample_values(name, spec, SAMPLE_BLOCK, rng)
                      for name, spec in prepared.items()])
    off = start - first * SAMPLE_BLOCK
    return [np.concatenate([p[i] for p in parts])[off:off + n] for i in range(len(prepared))]


def _recheck_rows(inputs: Mapping[str, np.ndarray], outs: Mapping[str, np.ndarray],
                  codes: np.ndarray, headroom: np.ndarray, base: Mapping[str, float],
                  rank_by: str, top: int) -> np.ndarray:
    """Rows a ``mixed`` sweep re-evaluates in float64: near the memory boundary, and the
    ``top`` best valid rows by ``rank_by`` (when it is an output)."""
    def col(n: str) -> np.ndarray | float:
        return inputs[n] if n in inputs else base[n]

    scale = np.abs(col("hbm_cap") - col("mem_reserved"))
    rule_ok = (codes == 0) | (codes == _MEMORY_CODE)
    near = rule_ok & (np.abs(headroom) <= RECHECK_HEADROOM_REL * scale)
    rows = set(np.flatnonzero(near).tolist())
    if top > 0 and rank_by in outs:
        ok = np.flatnonzero(codes == 0)
        if ok.size:
            key = outs[rank_by][ok]
            key = -key if rank_by in LARGER_IS_BETTER else key
            # a margin over top: float32 ties at the cut are re-checked too
            k = min(ok.size, top + max(10, top // 10))
            best = np.argpartition(key, k - 1)[:k] if k < ok.size else np.arange(ok.size)
            rows.update(ok[best].tolist())
    return np.array(sorted(rows), dtype=np.int64)


def _evaluate(plan: _Plan, base: dict[str, float], total: int, chunk_inputs: ChunkInputs,
              chunk_size: int, dtype: str, progress: Progress | None
              ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], np.ndarray,
                         dict[str, np.ndarray]]:
    """Stream ``total`` rows through the compiled chunk function
    (:func:`symcost.evaluate.evaluate_chunks`).

    Args:
        chunk_inputs: ``(start, n, chunk_index) -> list of arrays`` (one per varied
            variable, ``n`` values each, float64).
        progress: called with the rows done after each chunk.

    Returns:
        ``(inputs, outputs, codes, derived)``: float64 input columns by name, output columns
        (``plan.evaluated``, in ``dtype``) by name, reason codes (int8) and derived columns
        (``plan.derived``) by name.
    """
    fn = _chunk_function(plan, dtype)
    np_dt = np.float64 if dtype == "float64" else np.float32
    inputs = {n: np.empty(total, np.float64) for n in plan.varied}

    def rows(start: int, n: int) -> list[np.ndarray]:
        out = []
        for name, arr in zip(plan.varied, chunk_inputs(start, n, start // chunk_size)):
            col = inputs[name][start:start + n]
            col[:] = arr
            out.append(col)
        return out

    names_out = plan.evaluated + ("_code",) + plan.derived
    dtypes = [np_dt] * len(plan.evaluated) + [np.int8] + [np_dt] * len(plan.derived)
    res = evaluate_chunks(fn, rows, len(plan.varied), [base[n] for n in plan.fixed], total,
                          len(names_out), dtype, chunk_size,
                          progress, dtypes)
    cols = dict(zip(names_out, res))
    codes = cols.pop("_code")
    derived = {d: cols.pop(d) for d in plan.derived}
    return inputs, cols, codes, derived


def write_table(df: pd.DataFrame, path: str | os.PathLike[str]) -> None:
    """Write a sweep DataFrame to ``.csv`` or ``.parquet`` (by extension).

    Raises:
        SweepError: another extension.
    """
    p = str(path)
    if p.endswith(".csv"):
        df.to_csv(p, index=False)
    elif p.endswith(".parquet"):
        df.to_parquet(p, index=False)
    else:
        raise SweepError(f"--out: {p!r} must end in .csv or .parquet")


__all__ = ["CHUNK_SIZES", "DEFAULT_OUTPUTS", "PRECISIONS", "REASONS", "Range", "SweepError",
           "parse_vary", "pick_chunk", "sweep", "write_table"]
