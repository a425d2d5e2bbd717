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
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from . import symbols as S
from .config import DTYPES, RECOMPUTE_MODES, ConfigError, TrainingConfig

#: outputs a sweep returns unless told otherwise.
DEFAULT_OUTPUTS = ("step_time", "tokens_per_s", "mfu", "mem_total", "mem_headroom")
#: rows per compiled call, chosen from this fixed set (the same sizes as
#: :mod:`optimizers.evaluate`): the small one when the rows fit in it (a 2-row sweep or the
#: float64 re-check of ~110 rows), else the large one (fits the per-core L2 working set best on
#: the reference CPU). Each size compiles once per plan and precision, so a new sweep size
#: never recompiles.
CHUNK_SIZES = (2**12, 2**16)
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

#: other names accepted for sweep variables -> canonical name (symbol name, or ``num_gpus``).
ALIASES = {
    "layers": "n_layers", "heads": "n_heads", "kv_heads": "n_kv_heads",
    "zero": "zero_stage", "sp": "sp_on", "flash_attention": "flash_attn",
}
#: variables whose values are names or booleans on the command line.
_NAMED_VALUES = {
    "recompute": RECOMPUTE_MODES,
    "sp_on": {"true": 1, "false": 0, "on": 1, "off": 0, "yes": 1, "no": 0},
    "flash_attn": {"true": 1, "false": 0, "on": 1, "off": 0, "yes": 1, "no": 0},
    "dp_overlap": {"true": 1, "false": 0, "on": 1, "off": 0, "yes": 1, "no": 0},
    "fp8": {"true": 1, "false": 0, "on": 1, "off": 0, "yes": 1, "no": 0},
}
#: allowed values of the mode flags.
_DOMAINS = {"recompute": (0, 1, 2), "zero_stage": (0, 1, 2, 3), "sp_on": (0, 1),
            "flash_attn": (0, 1), "dp_overlap": (0, 1), "fp8": (0, 1), "gated_mlp": (0, 1),
            "has_bias": (0, 1), "tied_embed": (0, 1), "learned_pos": (0, 1),
            "has_dropout": (0, 1)}

#: masking reasons, in the order the rules are checked (ModelSpec, then config.resolve, then
#: memory); code 0 is valid, code i is ``REASONS[i - 1]``.
REASONS = (
    "hidden: not divisible by heads",
    "heads: not divisible by kv_heads",
    "seq_len: exceeds max_seq_len with learned positions",
    "num_gpus: not divisible by tp*pp",
    "num_gpus: tp*pp*dp != num_gpus",
    "global_batch: not divisible by micro_batch*dp",
    "tp: does not divide heads",
    "tp: does not divide ffn_hidden",
    "tp: tp and kv_heads must divide one another",
    "pp: exceeds the number of layers",
    "vpp: interleaving (vpp > 1) needs pp > 1",
    "vpp: layers not divisible by pp*vpp",
    "vpp: micro-batch count not a multiple of pp",
    "zero: ZeRO-2/3 cannot be combined with pp > 1",
    "dtype: fp8 not supported by the hardware",
    "memory: does not fit in HBM (mem_headroom < 0)",
)
_MEMORY_CODE = len(REASONS)


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
def canonical_name(name: str) -> str:
    """Canonical sweep-variable name (symbol name or ``num_gpus``) for ``name`` or an alias.

    Raises:
        SweepError: unknown variable (lists the known ones).
    """
    known = sweepable_names()
    n = ALIASES.get(name, name)
    if n not in known:
        raise SweepError(f"vary: unknown variable {name!r}; known: {', '.join(sorted(known))}"
                         f" (aliases: {', '.join(sorted(ALIASES))})")
    return n


@functools.lru_cache(maxsize=1)
def sweepable_names() -> frozenset[str]:
    """Every variable a sweep can vary: the training model's input symbols and ``num_gpus``."""
    return frozenset(s.name for s in training_inputs_symbols()) | {"num_gpus"}


@functools.lru_cache(maxsize=1)
def training_inputs_symbols() -> tuple:
    """The input symbols of the training model, in :func:`symcost.api.training_model` order
    (without lowering it)."""
    from .api import used_symbols
    from .training import training_expressions

    return used_symbols(training_expressions().values())


def _is_discrete(name: str) -> bool:
    return name == "num_gpus" or S.REGISTRY[name].discrete


def _convert_value(name: str, v) -> float:
    if isinstance(v, str):
        key = v.strip().lower()
        named = _NAMED_VALUES.get(name, {})
        if key in named:
            return float(named[key])
        try:
            return float(key)
        except ValueError:
            hint = f" (one of {', '.join(named)})" if named else ""
            raise SweepError(f"vary {name}: {v!r} is not a number{hint}") from None
    if isinstance(v, bool):
        return float(v)
    try:
        return float(v)
    except (TypeError, ValueError):
        raise SweepError(f"vary {name}: {v!r} is not a number") from None


def _check_values(name: str, arr: np.ndarray) -> np.ndarray:
    """Round discrete values and check finiteness, sign, the physical range of efficiency
    parameters (:data:`symcost.params.BOUNDS`) and mode domains."""
    from .params import BOUNDS

    if not np.all(np.isfinite(arr)):
        raise SweepError(f"vary {name}: values must be finite")
    if _is_discrete(name):
        arr = np.rint(arr)
    positive = name == "num_gpus" or bool(S.REGISTRY[name].symbol.is_positive)
    if np.any(arr <= 0) if positive else np.any(arr < 0):
        rule = "positive" if positive else "non-negative"
        raise SweepError(f"vary {name}: values must be {rule} (got {arr.min():g})")
    if name in BOUNDS:
        lo, hi = BOUNDS[name]
        out = arr[(arr < lo) | (arr > hi)]
        if out.size:
            raise SweepError(f"vary {name}: values must be in its physical range [{lo:g}, "
                             f"{hi:g}] (symcost.params.BOUNDS; got {out[0]:g})")
    if name in _DOMAINS and not np.all(np.isin(arr, _DOMAINS[name])):
        raise SweepError(f"vary {name}: values must be in {_DOMAINS[name]}")
    return arr


def grid_values(name: str, spec) -> np.ndarray:
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
        vals = _check_values(name, vals)
        _, idx = np.unique(vals, return_index=True)
        vals = vals[np.sort(idx)]
    else:
        vals = _check_values(name, np.array([_convert_value(name, v) for v in _as_list(name, spec)],
                                            dtype=np.float64))
    if vals.size == 0:
        raise SweepError(f"vary {name}: no values")
    return vals


def _as_list(name, spec):
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


def sample_values(name: str, spec, n: int, rng: np.random.Generator) -> np.ndarray:
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
    return spec[rng.integers(0, len(spec), n)]


def parse_vary(text: str):
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
    varied: tuple[str, ...]          # canonical names passed as per-row arrays
    fixed: tuple[str, ...]           # names passed as scalars
    dp_mode: str                     # 'value' | 'num_gpus' (dp = num_gpus/(tp*pp))
    check_num_gpus: bool             # dp and num_gpus both given: tp*pp*dp == num_gpus
    gb_mode: str                     # 'value' | 'derived' (global_batch = dp*micro_batch)
    hw_has_fp8: bool
    derived: tuple[str, ...] = ()    # derived columns that vary per row ('dp', 'global_batch')

    @property
    def evaluated(self) -> tuple[str, ...]:
        """Outputs the compiled chunk function returns: the requested ones and headroom."""
        return tuple(dict.fromkeys(self.outputs + ("mem_headroom",)))


def _base_values(model, hw, cfg: TrainingConfig, params) -> dict[str, float]:
    """Symbol values of the base configuration (and ``num_gpus``); fields left None are left
    out. Divisibility is not checked (sweep rows are masked instead); enums are.

    Raises:
        ConfigError: unknown recompute mode, ZeRO stage or dtype.
    """
    from .config import hardware_bindings, model_bindings

    if cfg.recompute not in RECOMPUTE_MODES:
        raise ConfigError(f"recompute: {cfg.recompute!r} is not one of "
                          f"{', '.join(RECOMPUTE_MODES)}")
    if isinstance(cfg.zero, bool) or cfg.zero not in (0, 1, 2, 3):
        raise ConfigError(f"zero: ZeRO stage must be 0, 1, 2 or 3 (got {cfg.zero!r})")
    if cfg.dtype not in DTYPES:
        raise ConfigError(f"dtype: {cfg.dtype!r} is not one of {', '.join(DTYPES)}")
    v = model_bindings(model)
    v.update(hardware_bindings(hw, cfg.dtype))
    v.update(params.for_generation(hw.generation))
    v.update({
        "tp": cfg.tp, "pp": cfg.pp, "vpp": cfg.vpp, "micro_batch": cfg.micro_batch,
        "sp_on": float(cfg.sp), "recompute": float(RECOMPUTE_MODES[cfg.recompute]),
        "zero_stage": float(cfg.zero), "flash_attn": float(cfg.flash_attention),
        "fp8": float(cfg.dtype == "fp8"), "dp_overlap": float(cfg.dp_overlap),
        "seq_len": cfg.seq_len if cfg.seq_len is not None else model.seq_len,
    })
    for f in ("dp", "num_gpus", "global_batch"):
        if getattr(cfg, f) is not None:
            v[f] = getattr(cfg, f)
    return {k: float(x) for k, x in v.items()}


def _make_plan(base: dict, varied: Sequence[str], outputs: Sequence[str], hw) -> _Plan:
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
    names = [s.name for s in training_inputs_symbols()] + ["num_gpus"]
    fixed = tuple(n for n in names if n not in varied and n in base)
    derived = []
    if dp_mode == "num_gpus" and {"tp", "pp", "num_gpus"} & set(varied):
        derived.append("dp")
    if gb_mode == "derived" and ("micro_batch" in varied or "dp" in varied or "dp" in derived):
        derived.append("global_batch")
    return _Plan(tuple(outputs), varied, fixed, dp_mode, have_dp and have_n, gb_mode,
                 "fp8" in hw.peak_flops, tuple(derived))


def _mod(xp, a, b):
    """True where the positive integer ``b`` does not divide ``a``. ``floor(a/b)*b`` is exact
    for integers below ``2**24`` in float32 (``2**53`` in float64): the rounded quotient of a
    non-multiple stays more than half an ulp away from an integer. (``fmod`` is a scalar
    libm call in XLA:CPU, ~10x slower.)"""
    return xp.floor(a / b) * b != a


def rule_codes(xp, v: Mapping, plan: _Plan, dp, gb):
    """Reason code of the first broken rule (0: none), per row; ``xp`` is numpy or jax.numpy.

    Mirrors :class:`~symcost.models.ModelSpec` validation and :func:`symcost.config.resolve`
    in their order (see :data:`REASONS`); inputs are integer-valued floats (remainders of
    floats are exact for integers below ``2**24`` in float32)."""
    tp, pp, vpp, mb = v["tp"], v["pp"], v["vpp"], v["micro_batch"]
    L, a, k, f = v["n_layers"], v["n_heads"], v["n_kv_heads"], v["ffn_hidden"]
    rules = [
        _mod(xp, v["hidden"], a),
        _mod(xp, a, k),
        (v["learned_pos"] > 0.5) & (v["seq_len"] > v["max_seq_len"]),
        _mod(xp, v["num_gpus"], tp * pp) if plan.dp_mode == "num_gpus" else False,
        (tp * pp * dp != v["num_gpus"]) if plan.check_num_gpus else False,
        _mod(xp, gb, mb * dp),
        _mod(xp, a, tp),
        _mod(xp, f, tp),
        _mod(xp, k, tp) & _mod(xp, tp, k),
        pp > L,
        (vpp > 1.5) & (pp < 1.5),
        (vpp > 1.5) & _mod(xp, L, pp * vpp),
        (vpp > 1.5) & _mod(xp, gb / (mb * dp), pp),
        (v["zero_stage"] > 1.5) & (pp > 1.5),
        (v["fp8"] > 0.5) & (not plan.hw_has_fp8),
    ]
    code = xp.zeros(xp.shape(dp), dtype=xp.int8)
    for i in range(len(rules) - 1, -1, -1):
        code = xp.where(rules[i], xp.int8(i + 1), code)
    return code


@functools.lru_cache(maxsize=32)
def _chunk_function(plan: _Plan, dtype: str):
    """The jit-compiled chunk evaluator of ``plan``: ``(varied arrays, fixed scalars) ->
    (*plan.evaluated, reason code, *plan.derived)``."""
    import jax
    import jax.numpy as jnp

    from .lower import lower
    from .training import training_expressions

    exprs = training_expressions()
    inputs = training_inputs_symbols()
    cm = lower({k: exprs[k] for k in plan.evaluated}, inputs, dtype)
    names = [s.name for s in inputs]
    i_head = plan.evaluated.index("mem_headroom")

    def run(varied, fixed):
        v = dict(zip(plan.varied, varied))
        v.update(zip(plan.fixed, fixed))
        tp, pp, mb = v["tp"], v["pp"], v["micro_batch"]
        dp = v["num_gpus"] / (tp * pp) if plan.dp_mode == "num_gpus" else v["dp"]
        gb = v["global_batch"] if plan.gb_mode == "value" else dp * mb
        like = jnp.zeros(jnp.shape(varied[0]), varied[0].dtype)
        dp, gb = dp + like, gb + like
        v["dp"], v["global_batch"] = dp, gb
        res = tuple(cm.call_jax(*(v[n] for n in names)))
        code = rule_codes(jnp, v, plan, dp, gb)
        code = jnp.where((code == 0) & (res[i_head] < 0), jnp.int8(_MEMORY_CODE), code)
        return res + (code,) + tuple(v[d] for d in plan.derived)

    return jax.jit(run)


# ----------------------------------------------------------------------------- the sweep
def sweep(model, hardware, config: TrainingConfig | None = None, params=None, *,
          vary: Mapping[str, object], samples: int | None = None,
          outputs: Sequence[str] = DEFAULT_OUTPUTS, precision: str = DEFAULT_PRECISION,
          rank_by: str = "step_time", recheck_top: int = 100, seed: int = 0,
          chunk_size: int | None = None, progress: bool = False, **config_fields):
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
        progress: show a rich progress bar (for more than 4 chunks).

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
    import pandas as pd

    from .api import _as_hardware, _as_model
    from .params import load_params
    from .training import training_expressions

    if precision not in PRECISIONS:
        raise SweepError(f"precision: must be one of {', '.join(PRECISIONS)} (got {precision!r})")
    if not vary:
        raise SweepError("vary: nothing to vary")
    if chunk_size is not None and (int(chunk_size) != chunk_size or chunk_size < 1):
        raise SweepError(f"chunk_size: must be a positive integer (got {chunk_size!r})")
    from .api import merge_config

    config = merge_config(config, **config_fields)
    all_outputs = tuple(training_expressions())
    outputs = all_outputs if tuple(outputs) == ("all",) else tuple(dict.fromkeys(outputs))
    bad = [o for o in outputs if o not in all_outputs]
    if bad:
        raise SweepError(f"outputs: unknown {', '.join(bad)}; known: {', '.join(all_outputs)}")
    if not outputs:
        raise SweepError("outputs: none requested")
    m, hw = _as_model(model), _as_hardware(hardware)
    params = params or load_params()
    base = _base_values(m, hw, config, params)

    specs = {}
    for raw, spec in vary.items():
        name = canonical_name(raw)
        if name in specs:
            raise SweepError(f"vary: {raw!r} given twice")
        specs[name] = spec
    plan = _make_plan(base, list(specs), outputs, hw)

    if samples is None:
        axes = {n: grid_values(n, s) for n, s in specs.items()}
        total = math.prod(a.size for a in axes.values())
        shape = tuple(a.size for a in axes.values())

        def chunk_inputs(start, n, _k):
            idx = np.unravel_index(np.arange(start, start + n), shape)
            return [axes[name][i] for name, i in zip(axes, idx)]
    else:
        if int(samples) != samples or samples < 1:
            raise SweepError(f"samples: must be a positive integer (got {samples!r})")
        total = int(samples)
        prepared = {}
        for n, s in specs.items():
            if isinstance(s, Range):
                _check_range(n, s)
                # check the bounds as values of the variable (rounding, domain, sign)
                _check_values(n, np.array([s.lo, s.hi], dtype=np.float64))
                prepared[n] = s
            else:
                prepared[n] = grid_values(n, s)

        def chunk_inputs(start, n, _k):
            return _sample_rows(prepared, seed, start, n)

    t0 = time.perf_counter()
    inputs, outs, codes, derived = _evaluate(
        plan, base, total, chunk_inputs, chunk_size or pick_chunk(total),
        "float64" if precision == "float64" else "float32", progress)
    mixed = precision == "mixed"
    headroom = outs["mem_headroom"]
    out_cols = {o: outs[o].astype(np.float64) if mixed else outs[o] for o in outputs}
    rechecked = np.zeros(total, dtype=bool)
    if mixed:
        rows = _recheck_rows(inputs, out_cols, codes, headroom, base, rank_by, recheck_top)
        if rows.size:
            sub = {n: inputs[n][rows] for n in plan.varied}
            _, sub_outs, sub_codes, _ = _evaluate(
                plan, base, rows.size,
                lambda s, n, _k: [sub[name][s:s + n] for name in plan.varied],
                chunk_size or pick_chunk(rows.size), "float64", False)
            for o in outputs:
                out_cols[o][rows] = sub_outs[o]
            codes[rows] = sub_codes
            rechecked[rows] = True
    broken = (codes > 0) & (codes < _MEMORY_CODE)
    if broken.any():
        for o in outputs:
            out_cols[o][broken] = np.nan
    valid = codes == 0
    data = dict(inputs)
    data.update({d: col.astype(np.float64) for d, col in derived.items()})
    # an output named like a varied column (num_gpus) repeats it: the input column stays
    data.update({o: c for o, c in out_cols.items() if o not in data})
    data["valid"] = valid
    data["reason"] = pd.Categorical.from_codes(codes.astype(np.int16),
                                               categories=("",) + REASONS)
    if mixed:
        data["rechecked"] = rechecked
    df = pd.DataFrame(data, copy=False)
    seconds = time.perf_counter() - t0
    counts = np.bincount(codes.astype(np.int64), minlength=len(REASONS) + 1)
    df.attrs.update({
        "invalid_counts": {REASONS[i - 1]: int(c) for i, c in enumerate(counts) if i and c},
        "seconds": seconds, "configs_per_s": total / seconds if seconds > 0 else float("inf"),
        "precision": precision, "rows": total, "valid_rows": int(valid.sum()),
        "varied": list(plan.varied), "outputs": list(outputs),
    })
    return df


def pick_chunk(rows: int) -> int:
    """Rows per compiled call for a sweep of ``rows`` rows: the smallest of
    :data:`CHUNK_SIZES` that holds them all, else the largest."""
    return next((c for c in CHUNK_SIZES if rows <= c), CHUNK_SIZES[-1])


def _sample_rows(prepared: Mapping, seed: int, start: int, n: int) -> list[np.ndarray]:
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


def _recheck_rows(inputs, outs, codes, headroom, base, rank_by, top):
    """Rows a ``mixed`` sweep re-evaluates in float64: near the memory boundary, and the
    ``top`` best valid rows by ``rank_by`` (when it is an output)."""
    def col(n):
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


def _evaluate(plan: _Plan, base: dict, total: int, chunk_inputs, chunk_size: int, dtype: str,
              progress: bool):
    """Stream ``total`` rows through the compiled chunk function.

    Args:
        chunk_inputs: ``(start, n, chunk_index) -> list of arrays`` (one per varied
            variable, ``n`` values each, float64).

    Returns:
        ``(inputs, outputs, codes, derived)``: float64 input columns by name, output columns
        (``plan.evaluated``, in ``dtype``) by name, reason codes (int8) and derived columns
        (``plan.derived``) by name.
    """
    import jax

    fn = _chunk_function(plan, dtype)
    np_dt = np.float64 if dtype == "float64" else np.float32
    chunk = chunk_size  # one of a few fixed shapes: a new sweep size never recompiles
    n_chunks = -(-total // chunk)
    inputs = {n: np.empty(total, np.float64) for n in plan.varied}
    names_out = plan.evaluated + ("_code",) + plan.derived
    cols = {o: np.empty(total, np_dt) for o in names_out}
    cols["_code"] = np.empty(total, np.int8)

    with jax.enable_x64(dtype == "float64"):
        import jax.numpy as jnp

        fixed = tuple(jnp.asarray(np.asarray(base[n], dtype=np_dt)) for n in plan.fixed)
        bar = _progress(progress and n_chunks > 4, total)
        pending = None
        try:
            for k in range(n_chunks + 1):
                if k < n_chunks:
                    start = k * chunk
                    n = min(chunk, total - start)
                    args = []
                    for name, arr in zip(plan.varied, chunk_inputs(start, n, k)):
                        col = inputs[name][start:start + n]
                        col[:] = arr
                        a = col if np_dt is np.float64 else col.astype(np_dt)
                        args.append(a if n == chunk else np.pad(a, (0, chunk - n), mode="edge"))
                    res = fn(tuple(args), fixed)   # dispatched asynchronously
                if pending is not None:            # collect the previous chunk meanwhile
                    p_start, p_n, p_res = pending
                    for o, r in zip(names_out, p_res):
                        cols[o][p_start:p_start + p_n] = np.asarray(r)[:p_n]
                    if bar is not None:
                        bar[0].update(bar[1], advance=p_n)
                pending = (start, n, res) if k < n_chunks else None
        finally:
            if bar is not None:
                bar[0].stop()
    codes = cols.pop("_code")
    derived = {d: cols.pop(d) for d in plan.derived}
    return inputs, cols, codes, derived


def _progress(show: bool, total: int):
    if not show:
        return None
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeRemainingColumn)

    bar = Progress(TextColumn("sweep"), BarColumn(), MofNCompleteColumn(),
                   TimeRemainingColumn(), transient=True)
    bar.start()
    return bar, bar.add_task("sweep", total=total)


def write_table(df, path) -> None:
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
