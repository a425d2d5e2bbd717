"""The space of parallel training configurations, enumerated with numpy and filtered by rules.

For a model, a GPU system, a GPU count (or several) and a global batch, :func:`enumerate_space`
builds every valid :class:`~symcost.config.TrainingConfig` as integer column arrays, stage by
stage, so that no Python loop runs over candidates:

====================  ==========================================================================
stage                 domain (structural, not counted)
====================  ==========================================================================
``tp``                divisors of ``num_gpus``
``cp``                divisors of ``num_gpus / tp``
``pp``                divisors of ``num_gpus / (tp*cp)`` (uneven splits allowed: the largest
                      stage holds ``ceil(layers/pp)`` layers, see
                      :func:`symcost.training.layers_per_stage`)
``dp``                ``num_gpus / (tp*cp*pp)``
``ep``                divisors of ``tp*cp*dp`` (expert-parallel ranks folded over the
                      attention layers' TP, CP and DP ranks; only 1 for a dense model)
``micro_batch``       divisors of ``global_batch / dp``
``vpp``               ``{1}`` without pipelining, else ``1 .. (layers + 2) // pp``
``modes``             recompute x SP x ZeRO x DP-overlap
====================  ==========================================================================

At each stage the user constraints on its fields are applied first, then every validity rule
of :data:`symcost.rules.TRAINING_RULES` whose columns the stage completes (the same rule
objects :func:`symcost.config.resolve` raises with and sweeps mask with: ``tp`` dividing the
heads, ``pp <= layers``, ``global_batch`` divisible by ``micro_batch*dp``, the interleaved
schedule's conditions, ZeRO-2/3 without ``pp``, ...), each rejection counted; rules that read
no candidate column (sequence length, dtype) are checked once by :func:`check_inputs`.

Duplicates (configurations the cost model cannot tell apart from one that is kept, so
counting them would pad the space): SP with ``tp == 1`` (nothing to split); ZeRO stages 1-3
and ``dp_overlap = 0`` with ``dp == 1`` (one data-parallel rank: nothing to shard or
communicate; ZeRO-3 there only adds a gather buffer). Dominated and pruned with them:
selective recomputation of the attention core (``recompute_modules = core_attn``) with
FlashAttention, which re-runs the fused attention forward to drop only its log-sum-exp
(``a*s*b*4/t`` bytes per layer), so it is slower than ``none`` at the same memory up to
that. ``keep_duplicates=True`` keeps them all.

User constraints (``fix``, ``minimum``, ``maximum``, ``max_tp``, ``max_vpp``) are applied at
the start of their field's stage, before the model rules, so that when nothing survives the
rule that removed the last candidates is the most specific one. They speak the one field
vocabulary (:data:`symcost.fields.TRAINING_FIELDS`): the field's name, or its CLI flag's
spelling with ``-`` (``micro-batch=2``), and values as the field table parses them
(``recompute=selective``, ``sp=on``); see :func:`field_name` and :func:`field_code`.

Every other training field (:data:`symcost.fields.SEARCH_SHARED_FIELDS`: ``ep_dedup``,
``ep_overlap``, ``bf16_layers``, ``offload``, ``etp``, ``dp_replicate``, ...) is a setting
the candidates share when given (``enumerate_space(..., offload="optimizer")``): the rules
read it with the columns, so a candidate it makes invalid is removed at its stage and counted
(optimizer offload keeps ZeRO 1-3), and a rule it breaks alone raises (``bf16_layers`` above
the layer count).
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from hwspecs import HardwareSpec
from symcost import rules as R
from symcost.api import as_hardware, as_model
from symcost.config import (ConfigError, TrainingConfig, hardware_facts, model_facts,
                            positive_int, resolve)
from symcost.fields import (RECOMPUTE_MODES, SEARCH_ARGUMENTS, SEARCH_COLUMNS,
                            SEARCH_SHARED_FIELDS, TRAINING_FIELDS, coerce, encode)
from symcost.models import ModelSpec

#: an integer column of candidates (one value per candidate).
IntArray = npt.NDArray[np.int64]
#: a float column (scores, headroom, hardware values).
FloatArray = npt.NDArray[np.float64]
#: a mask over candidates.
BoolArray = npt.NDArray[np.bool_]
#: candidate columns: field of :data:`FIELDS` -> one value per candidate.
Columns = dict[str, IntArray]
#: ``keep(columns) -> bool array``: which candidates a rule keeps.
Keep = Callable[[Mapping[str, Any]], npt.ArrayLike]
#: a rule of the enumeration: ``(text naming the field and the rule, keep)``.
StageRule = tuple[str, Keep]
#: ``test(column) -> bool array``: a user constraint on one column.
ColumnTest = Callable[[IntArray], npt.ArrayLike]

#: user constraints on fields: ``{field: value}`` or ``["field=value", ...]``.
ConstraintSpec = Mapping[str, object] | Iterable[str]

#: configuration fields of a candidate, in column order
#: (:data:`symcost.fields.SEARCH_COLUMNS`).
FIELDS: tuple[str, ...] = SEARCH_COLUMNS
#: recompute mode names by code (the ``recompute`` symbol's value).
RECOMPUTE_NAMES: tuple[str, ...] = tuple(sorted(RECOMPUTE_MODES, key=RECOMPUTE_MODES.__getitem__))
#: what each stage's rejection counts count (the ``level`` column of :attr:`Space.rejected`).
_STAGE_LEVEL = {"tp": "(num_gpus, tp) pairs", "cp": "(num_gpus, tp, cp) layouts",
                "pp": "(num_gpus, tp, cp, pp) layouts", "dp": "(num_gpus, tp, cp, pp) layouts",
                "ep": "layouts x ep",
                "micro_batch": "layouts x micro-batch", "vpp": "layouts x micro-batch x vpp",
                "modes": "configurations", "memory": "configurations"}


class SearchError(ValueError):
    """No configuration survives; the message names the rule that removed the last ones."""


@dataclass(frozen=True)
class Constraints:
    """User constraints on candidate fields, as encoded values (the numbers the columns of
    :data:`FIELDS` hold: ``recompute`` 0/1/2, ``sp``/``dp_overlap`` 0/1);
    :func:`make_constraints` builds them from field names and values as users write them.

    Attributes:
        fix: field -> the only allowed value.
        minimum: field -> smallest allowed value (inclusive).
        maximum: field -> largest allowed value (inclusive).
    """

    fix: Mapping[str, int] = field(default_factory=dict)
    minimum: Mapping[str, int] = field(default_factory=dict)
    maximum: Mapping[str, int] = field(default_factory=dict)

    def rules_for(self, name: str) -> list[tuple[str, ColumnTest]]:
        """The (rule text, keep-predicate on a column) pairs constraining ``name``."""
        out: list[tuple[str, ColumnTest]] = []
        for kind, given, op in (("fix", self.fix, operator.eq), ("min", self.minimum, operator.ge),
                                ("max", self.maximum, operator.le)):
            if name in given:
                v = given[name]
                out.append((f"user: {kind} {name}={_show(name, v)}", _compare(op, v)))
        return out


def _compare(op: Callable[[IntArray, int], Any], value: int) -> ColumnTest:
    """``column op value`` as a column test."""
    return lambda x: op(x, value)


def _show(name: str, v: int) -> str:
    return RECOMPUTE_NAMES[v] if name == "recompute" and 0 <= v < 3 else str(v)


def field_name(name: str) -> str:
    """The candidate field a constraint names.

    Args:
        name: a field name of :data:`symcost.fields.TRAINING_FIELDS` that is a search
            dimension (:data:`FIELDS`), spelled as the field (``micro_batch``) or as its CLI
            flag without the dashes (``micro-batch``); surrounding spaces are ignored.

    Returns:
        The field name (``micro_batch``).

    Raises:
        ConfigError: any other name (no aliases such as ``mb`` or ``zero_stage``); the
            message lists the field names.
    """
    key = name.strip().replace("-", "_")
    if key not in FIELDS:
        raise ConfigError(f"constraint: unknown field {name!r}; known: {', '.join(FIELDS)}")
    return key


def field_code(name: str, value: object) -> int:
    """A constraint value as the integer the candidate column holds.

    Parsed by the field table (:func:`symcost.fields.coerce`, then
    :func:`symcost.fields.encode`): ``recompute=selective`` -> 1, ``sp=on`` -> 1,
    ``zero=3`` -> 3, ``tp=8`` -> 8.

    Args:
        name: a field name of :data:`FIELDS` (see :func:`field_name`).
        value: the value as a number, bool, name or text.

    Returns:
        The encoded value (enum code, 0/1 for flags, the count itself).

    Raises:
        ConfigError: a value outside the field's type, choices or range, worded as
            :func:`symcost.fields.coerce` words it (``"tp: must be a positive integer ..."``).
    """
    f = TRAINING_FIELDS[field_name(name)]
    return int(encode(f, coerce(f, value)))


def make_constraints(fix: ConstraintSpec | None = None,
                     minimum: ConstraintSpec | None = None,
                     maximum: ConstraintSpec | None = None,
                     max_tp: int | None = None, max_vpp: int | None = None) -> Constraints:
    """Normalise user constraints.

    Args:
        fix, minimum, maximum: mappings field -> value, or strings ``"field=value"`` (as the
            CLI's ``--fix pp=8``); field names as :func:`field_name` accepts them, values as
            :func:`field_code` parses them (``recompute=selective``, ``sp=on``).
        max_tp: shorthand for ``maximum={"tp": max_tp}`` (e.g. GPUs per node).
        max_vpp: shorthand for ``maximum={"vpp": max_vpp}``.

    Returns:
        :class:`Constraints` with integer values.

    Raises:
        ConfigError: an unknown field, a malformed ``field=value``, a value outside its
            field's type, choices or range, or the same field given twice with different
            values.
    """
    def norm(spec: ConstraintSpec | None) -> dict[str, int]:
        if spec is None:
            return {}
        items: Iterable[tuple[str, object]] = (
            spec.items() if isinstance(spec, Mapping) else (_split(s) for s in spec))
        out: dict[str, int] = {}
        for k, v in items:
            key = field_name(k)
            val = field_code(key, v)
            if key in out and out[key] != val:
                raise ConfigError(f"constraint: {key} given twice ({out[key]} and {val})")
            out[key] = val
        return out

    mx = norm(maximum)
    for key, extra in (("tp", max_tp), ("vpp", max_vpp)):
        if extra is not None:
            mx[key] = min(mx.get(key, extra), int(extra))
    return Constraints(norm(fix), norm(minimum), mx)


def _split(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise ConfigError(f"constraint: expected field=value (e.g. pp=8), got {text!r}")
    k, v = text.split("=", 1)
    return k, v


@dataclass(frozen=True)
class Context:
    """Everything the rules need besides the candidate columns.

    Attributes:
        layers, heads, kv_heads, ffn_hidden: model shape.
        global_batch: sequences per step.
        flash_attention: FlashAttention on (makes selective recomputation of the attention
            core dominated by none).
        keep_duplicates: keep configurations the model cannot distinguish.
        constraints: user constraints.
        recompute_modules: what a ``selective`` candidate recomputes (the training field;
            with FlashAttention only the default ``core_attn`` makes it dominated by none).
        fixed: the other values the rules of :data:`symcost.rules.TRAINING_RULES` read that
            every candidate shares (model facts, hardware facts, ``seq_len``, ``dtype``, the
            encoded ``shared`` settings), as :func:`make_context` fills them in.
        shared: the settings of :data:`~symcost.fields.SEARCH_SHARED_FIELDS` every candidate
            takes (canonical values, :func:`shared_settings`; only those given).
    """

    layers: int
    heads: int
    kv_heads: int
    ffn_hidden: int
    global_batch: int
    flash_attention: bool = True
    keep_duplicates: bool = False
    constraints: Constraints = field(default_factory=Constraints)
    fixed: Mapping[str, float] = field(default_factory=dict)
    recompute_modules: str = "core_attn"
    shared: Mapping[str, Any] = field(default_factory=dict)

    def values(self, columns: Mapping[str, Any]) -> dict[str, Any]:
        """The values the rules read: the shared ones and the candidate ``columns``."""
        out: dict[str, Any] = {"dp_replicate": 1.0}
        out.update(self.fixed)
        out.update(layers=self.layers, heads=self.heads, kv_heads=self.kv_heads,
                   ffn_hidden=self.ffn_hidden, global_batch=self.global_batch,
                   global_batch_given=1.0, flash_attention=float(self.flash_attention))
        out.update(columns)
        return out


def shared_settings(settings: Mapping[str, object] | None) -> dict[str, Any]:
    """Check and coerce the settings every candidate of a search shares.

    Args:
        settings: field of :data:`~symcost.fields.SEARCH_SHARED_FIELDS` -> value as users
            write it (``True``, ``"on"``, ``14``, ``"optimizer"``); None values (a field's
            unset default) are dropped.

    Returns:
        Field -> canonical value (:func:`symcost.fields.coerce`), in the order given.

    Raises:
        ConfigError: a searched field (``tp: searched over; ...``), a field the search takes
            as its own argument or an unknown name, or a value outside its field's domain.
    """
    out: dict[str, Any] = {}
    for name, value in (settings or {}).items():
        if name in FIELDS:
            raise ConfigError(f"{name}: searched over, not a shared setting; constrain it "
                              f"with fix, minimum or maximum (e.g. fix={{'{name}': ...}})")
        if name in SEARCH_ARGUMENTS:
            raise ConfigError(f"{name}: an argument of the search itself")
        if name not in SEARCH_SHARED_FIELDS:
            raise ConfigError(f"{name}: not a training field (shared settings: "
                              f"{', '.join(SEARCH_SHARED_FIELDS)})")
        if value is not None:
            out[name] = coerce(TRAINING_FIELDS[name], value)
    return out


def make_context(model: ModelSpec, hw: HardwareSpec, global_batch: int, seq_len: int,
                 dtype: str, flash_attention: bool = True, keep_duplicates: bool = False,
                 constraints: Constraints | None = None,
                 recompute_modules: str = "core_attn",
                 shared: Mapping[str, Any] | None = None) -> Context:
    """The rule :class:`Context` of a search over ``model`` on ``hw``.

    Args:
        model, hw: the specs (their facts feed the rules).
        global_batch: sequences per step; seq_len: tokens per sequence; dtype: GEMM dtype
            name (all checked already, see :func:`check_inputs`).
        flash_attention, keep_duplicates, constraints, recompute_modules: as for
            :func:`enumerate_space`.
        shared: settings of :data:`~symcost.fields.SEARCH_SHARED_FIELDS` (checked by
            :func:`shared_settings`).

    Raises:
        ConfigError: a bad ``shared`` setting.
    """
    settings = shared_settings(shared)
    fixed = {**model_facts(model), **hardware_facts(hw), "seq_len": float(seq_len),
             "dtype": encode(TRAINING_FIELDS["dtype"], dtype),
             **{k: encode(TRAINING_FIELDS[k], v) for k, v in settings.items()}}
    ctx = Context(model.layers, model.heads, model.kv_heads, model.ffn_hidden,
                  int(global_batch), bool(flash_attention), bool(keep_duplicates),
                  constraints or Constraints(), fixed,
                  coerce(TRAINING_FIELDS["recompute_modules"], recompute_modules), settings)
    # a rule on the settings that reads no candidate column holds for all or none of them
    R.check([r for r in R.TRAINING_RULES
             if set(r.reads) & set(settings) and not set(r.reads) & set(FIELDS)],
            ctx.values({}))
    return ctx


_STAGE_FIELDS = {"tp": ("num_gpus", "tp"), "cp": ("cp",), "pp": ("pp",), "dp": ("dp",),
                 "ep": ("ep",),
                 "micro_batch": ("micro_batch",), "vpp": ("vpp",),
                 "modes": ("recompute", "sp", "zero", "dp_overlap", "tp_overlap")}
STAGES: tuple[str, ...] = tuple(_STAGE_FIELDS)


@functools.lru_cache(maxsize=1)
def _table_rules_by_stage() -> dict[str, tuple[R.Rule, ...]]:
    """Each rule of :data:`symcost.rules.TRAINING_RULES` that reads a candidate column, at
    the first stage after which every column it reads is enumerated. (Rules reading no
    column, such as the sequence length or the dtype, are checked once for the whole space
    by :func:`check_inputs`.)"""
    columns = {f for fs in _STAGE_FIELDS.values() for f in fs}
    out: dict[str, list[R.Rule]] = {st: [] for st in STAGES}
    have: set[str] = set()
    placed: set[str] = set()
    for st in STAGES:
        have |= set(_STAGE_FIELDS[st])
        for rule in R.TRAINING_RULES:
            reads = set(rule.reads) & columns
            if reads and reads <= have and rule.code not in placed:
                out[st].append(rule)
                placed.add(rule.code)
    return {k: tuple(v) for k, v in out.items()}


def _keep(rule: R.Rule, ctx: Context) -> Keep:
    return lambda c: np.asarray(rule.ok(ctx.values(c), np), dtype=np.bool_)


def _duplicate_rules(ctx: Context) -> list[StageRule]:
    """Configurations the cost model cannot tell apart from one that is kept (see the module
    docstring): not validity rules, so they live here and not in :mod:`symcost.rules`."""
    if ctx.keep_duplicates:
        return []
    rules: list[StageRule] = [
        ("duplicate: sp with tp == 1", lambda c: (c["sp"] == 0) | (c["tp"] > 1)),
        # ZeRO shards over, and gradients are reduced over, the dp*cp ranks
        ("duplicate: ZeRO with dp*cp == 1",
         lambda c: (c["zero"] == 0) | (c["dp"] * c["cp"] > 1)),
        ("duplicate: dp_overlap off with dp*cp == 1",
         lambda c: (c["dp_overlap"] == 1) | (c["dp"] * c["cp"] > 1)),
        ("duplicate: tp_overlap with tp == 1", lambda c: (c["tp_overlap"] == 0) | (c["tp"] > 1)),
    ]
    if ctx.flash_attention and ctx.recompute_modules == "core_attn":
        rules.append(("dominated: selective recompute of core_attn with FlashAttention",
                      lambda c: c["recompute"] != RECOMPUTE_MODES["selective"]))
    return rules


def stage_rules(stage: str, ctx: Context) -> list[StageRule]:
    """All rules of ``stage`` in application order: user constraints, the validity rules of
    :data:`symcost.rules.TRAINING_RULES` that the stage's columns complete, then (stage
    ``modes``) the duplicate rules.

    Returns:
        List of ``(text, keep)`` where ``keep(columns) -> bool array``.
    """
    rules: list[StageRule] = []
    for name in _STAGE_FIELDS[stage]:
        rules += [(t, _on_column(p, name)) for t, p in ctx.constraints.rules_for(name)]
    rules += [(r.text, _keep(r, ctx)) for r in _table_rules_by_stage()[stage]]
    if stage == "modes":
        rules += _duplicate_rules(ctx)
    return rules


def _on_column(test: ColumnTest, name: str) -> Keep:
    """``test`` on column ``name`` as a rule on candidate columns."""
    return lambda c: test(c[name])


def structural_ok(c: Mapping[str, npt.ArrayLike], ctx: Context) -> BoolArray:
    """Each column within its field's domain (:data:`symcost.fields.TRAINING_FIELDS`:
    positive integers, mode codes). Used with :func:`violations` to check arbitrary points
    (e.g. SciPy search populations); the enumeration builds the domains in.

    Args:
        c: column arrays for every field in :data:`FIELDS` (same length ``n``).
        ctx: rule context (the domains do not depend on it today).

    Returns:
        bool array ``(n,)``.
    """
    n = len(np.asarray(next(iter(c.values()))))
    ok = np.ones(n, dtype=np.bool_)
    for name in FIELDS:
        f = TRAINING_FIELDS[name]
        codes = f.codes
        col = np.asarray(c[name])
        ok &= np.isin(col, codes) if codes is not None else (col >= 1)
    return ok


def violations(c: Mapping[str, npt.ArrayLike], ctx: Context) -> IntArray:
    """Number of rules (field domains, validity rules and user constraints) each point breaks.

    Args:
        c: column arrays for every field in :data:`FIELDS` (same length ``n``).
        ctx: rule context.

    Returns:
        int array ``(n,)``; 0 for a valid configuration.
    """
    cols = {k: np.asarray(v, dtype=np.int64) for k, v in c.items()}
    safe = dict(cols)
    for k in ("tp", "cp", "pp", "dp", "ep", "micro_batch", "vpp"):
        safe[k] = np.maximum(cols[k], 1)
    n: IntArray = (~structural_ok(cols, ctx)).astype(np.int64)
    for stage in STAGES:
        for _, keep in stage_rules(stage, ctx):
            n += ~np.asarray(keep(safe), dtype=np.bool_)
    return n


@functools.lru_cache(maxsize=4096)
def divisors(n: int) -> tuple[int, ...]:
    """Sorted divisors of a positive integer (cached: the search asks for the same few).

    Args:
        n: a positive integer.

    Returns:
        Every ``d`` with ``n % d == 0``, ascending (``divisors(12) == (1, 2, 3, 4, 6, 12)``).
    """
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return tuple(sorted(set(small + [n // d for d in small])))


def _divisor_array(n: int) -> IntArray:
    """:func:`divisors` of ``n`` as an int64 array (a domain of the enumeration)."""
    return np.array(divisors(int(n)), dtype=np.int64)


def _cross_ragged(cols: Columns, name: str, keys: npt.ArrayLike,
                  domain_of: Callable[[int], npt.ArrayLike]) -> Columns:
    """Expand each row ``i`` by the values ``domain_of(keys[i])`` (vectorized over rows; the
    domain function runs once per distinct key)."""
    keys = np.asarray(keys, dtype=np.int64)
    if len(keys) == 0:
        out = {k: v[:0] for k, v in cols.items()}
        out[name] = np.zeros(0, dtype=np.int64)
        return out
    uniq, inv = np.unique(keys, return_inverse=True)
    doms = [np.asarray(domain_of(int(u)), dtype=np.int64) for u in uniq]
    sizes = np.array([len(d) for d in doms], dtype=np.int64)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(doms)
    lens = sizes[inv]
    rows = np.repeat(np.arange(len(keys)), lens)
    within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    out = {k: v[rows] for k, v in cols.items()}
    out[name] = flat[starts[inv][rows] + within]
    return out


def _take(cols: Columns, mask: BoolArray) -> Columns:
    return {k: v[mask] for k, v in cols.items()}


#: the only non-mode fields the ``modes`` rules may read (they are evaluated once per
#: distinct (tp, pp, dp*cp) and the survivors broadcast to every row with that layout; the
#: template holds ``dp*cp`` as ``dp`` and ``cp = 1``).
_MODES_KEYS = ("tp", "pp", "dp")
_MODE_DOMAINS = (("recompute", (0, 1, 2)), ("sp", (0, 1)), ("zero", (0, 1, 2, 3)),
                 ("dp_overlap", (0, 1)), ("tp_overlap", (0, 1)))


def _modes_stage(cols: Columns, ctx: Context, log: list[dict[str, Any]]) -> Columns:
    """The ``modes`` stage: every (tp, pp, dp) layout crossed with the mode combinations
    that pass the stage's rules (ruled once per distinct layout, the removals counted with
    the layout's number of rows)."""
    n = len(cols["tp"])
    # one int64 key per (tp, pp, dp*cp): each is at most num_gpus < 2**21
    code = (cols["tp"] << 42) | (cols["pp"] << 21) | (cols["dp"] * cols["cp"])
    ucode, inv, counts = np.unique(code, return_inverse=True, return_counts=True)
    inv = inv.reshape(-1)
    mask21 = (1 << 21) - 1
    uniq = np.stack([ucode >> 42, (ucode >> 21) & mask21, ucode & mask21], axis=1)
    grids = np.meshgrid(*(np.asarray(d, dtype=np.int64) for _, d in _MODE_DOMAINS),
                        indexing="ij")
    combos = {name: g.reshape(-1) for (name, _), g in zip(_MODE_DOMAINS, grids)}
    n_c = len(combos["recompute"])
    owner = np.repeat(np.arange(len(uniq)), n_c)
    tmpl = {k: np.repeat(uniq[:, i], n_c) for i, k in enumerate(_MODES_KEYS)}
    tmpl["cp"] = np.ones_like(tmpl["tp"])
    tmpl.update({k: np.tile(v, len(uniq)) for k, v in combos.items()})
    weight = counts[owner]
    for text, keep in stage_rules("modes", ctx):
        mask = np.asarray(keep(tmpl), dtype=np.bool_)
        log.append({"stage": "modes", "rule": text, "removed": int(weight[~mask].sum()),
                    "remaining": int(weight[mask].sum()), "level": _STAGE_LEVEL["modes"]})
        tmpl, owner, weight = _take(tmpl, mask), owner[mask], weight[mask]
    # broadcast the surviving combos of each layout to its rows (owner is sorted)
    sizes = np.bincount(owner, minlength=len(uniq))
    starts = np.cumsum(sizes) - sizes
    lens = sizes[inv]
    rows = np.repeat(np.arange(n), lens)
    within = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    idx = starts[inv][rows] + within
    out = {k: v[rows] for k, v in cols.items()}
    out.update({k: tmpl[k][idx] for k, _ in _MODE_DOMAINS})
    return out


@dataclass
class Space:
    """Enumerated valid configurations.

    Attributes:
        columns: field -> int64 array (``recompute`` as code 0/1/2, ``sp``/``dp_overlap``
            0/1), all of length ``len(space)``; fields as in :data:`FIELDS`.
        rejected: DataFrame with one row per rule: ``stage``, ``rule``, ``removed`` (count,
            in units of ``level``), ``remaining`` (after the rule), ``level``.
        context: the rule context.
        seq_len: tokens per sequence; dtype: GEMM dtype; flash_attention: kernel flag.
    """

    columns: Columns
    rejected: pd.DataFrame
    context: Context
    seq_len: int
    dtype: str = "bf16"
    flash_attention: bool = True

    def __len__(self) -> int:
        return int(len(self.columns["tp"]))

    def frame(self) -> pd.DataFrame:
        """The candidates as a DataFrame (``recompute`` as names, ``sp``/``dp_overlap`` bool)."""
        return columns_frame(self.columns)

    def config(self, i: int) -> TrainingConfig:
        """Candidate ``i`` as a :class:`~symcost.config.TrainingConfig`."""
        return row_config({k: v[i] for k, v in self.columns.items()}, self.context.global_batch,
                          self.seq_len, self.dtype, self.flash_attention,
                          self.context.recompute_modules, self.context.shared)


def columns_frame(columns: Mapping[str, npt.ArrayLike]) -> pd.DataFrame:
    """Candidate columns -> DataFrame in :class:`~symcost.config.TrainingConfig` terms."""
    df = pd.DataFrame({k: np.asarray(columns[k]) for k in FIELDS})
    df["recompute"] = np.asarray(RECOMPUTE_NAMES, dtype=object)[df["recompute"].to_numpy()]
    df["sp"] = df["sp"].astype(bool)
    df["dp_overlap"] = df["dp_overlap"].astype(bool)
    df["tp_overlap"] = df["tp_overlap"].astype(bool)
    return df


def row_config(row: Mapping[str, Any] | pd.Series[Any], global_batch: int, seq_len: int,
               dtype: str, flash_attention: bool,
               recompute_modules: str = "core_attn",
               shared: Mapping[str, Any] | None = None) -> TrainingConfig:
    """One candidate (field -> value, codes or names; a dict or a DataFrame row) as a
    :class:`~symcost.config.TrainingConfig` (not validated); ``recompute_modules`` applies to
    a ``selective`` candidate, ``shared`` (settings of
    :data:`~symcost.fields.SEARCH_SHARED_FIELDS`, canonical values) to every one."""
    rc = row["recompute"]
    rc = rc if isinstance(rc, str) else RECOMPUTE_NAMES[int(rc)]
    modules = recompute_modules if rc == "selective" else "core_attn"
    return TrainingConfig(num_gpus=int(row["num_gpus"]), tp=int(row["tp"]), pp=int(row["pp"]),
                          cp=int(row.get("cp", 1)), dp=int(row["dp"]), ep=int(row.get("ep", 1)),
                          sp=bool(row["sp"]), vpp=int(row["vpp"]),
                          micro_batch=int(row["micro_batch"]), global_batch=int(global_batch),
                          seq_len=int(seq_len), recompute=rc, recompute_modules=modules,
                          zero=int(row["zero"]),
                          dtype=dtype, flash_attention=bool(flash_attention),
                          dp_overlap=bool(row["dp_overlap"]),
                          tp_overlap=bool(row.get("tp_overlap", 0)), **(shared or {}))


def positive_ints(name: str, value: int | Sequence[int]) -> list[int]:
    """One or several positive integers (e.g. GPU counts), sorted and without repeats.

    Args:
        name: the field the values are for (named in errors).
        value: an integer or a sequence of them.

    Returns:
        The distinct values, ascending.

    Raises:
        ConfigError: no value, or a value that is not a positive integer
            (:func:`symcost.config.positive_int`: ``1.5``, ``0``, ``True``).
    """
    vals: list[object] = [value] if np.isscalar(value) else list(cast(Sequence[int], value))
    if not vals:
        raise ConfigError(f"{name}: no value given")
    return sorted({positive_int(name, v) for v in vals})


def check_inputs(model: ModelSpec, hw: HardwareSpec, global_batch: int, seq_len: int | None,
                 dtype: str) -> int:
    """Validate what every configuration shares (sequence length, dtype, batch).

    Args:
        model, hw: the specs; global_batch: sequences per step; seq_len: tokens per sequence
            (None: the model's); dtype: GEMM dtype name.

    Returns:
        The sequence length (the model's when ``seq_len`` is None).

    Raises:
        ConfigError: as :func:`symcost.config.resolve` would for every configuration.
    """
    positive_ints("global_batch", global_batch)
    cfg = resolve(model, hw, TrainingConfig(num_gpus=1, global_batch=int(global_batch),
                                            seq_len=seq_len, dtype=dtype))
    assert cfg.seq_len is not None  # resolve fills it in
    return int(cfg.seq_len)


def enumerate_space(model: ModelSpec | str, hardware: HardwareSpec | str,
                    num_gpus: int | Sequence[int], global_batch: int, *,
                    seq_len: int | None = None, dtype: str = "bf16",
                    flash_attention: bool = True, constraints: Constraints | None = None,
                    keep_duplicates: bool = False,
                    recompute_modules: str = "core_attn", **shared: Any) -> Space:
    """Enumerate every valid parallel configuration (vectorized, stage by stage).

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        num_gpus: GPU count, or several counts (the space is their union).
        global_batch: sequences per optimizer step.
        seq_len: tokens per sequence (the model's when None).
        dtype: GEMM dtype (``bf16``, ``fp16``, ``fp8``), fixed for the space.
        flash_attention: FlashAttention on for every candidate.
        constraints: user constraints (:func:`make_constraints`).
        keep_duplicates: keep configurations the cost model cannot distinguish (see the
            module docstring).
        recompute_modules: what a ``selective`` candidate recomputes (the training field
            ``recompute_modules``; default ``core_attn``).
        shared: settings every candidate takes, by field name
            (:data:`~symcost.fields.SEARCH_SHARED_FIELDS`, e.g. ``ep_dedup=True``,
            ``offload="optimizer"``); the rules read them, so candidates a setting makes
            invalid are removed and counted.

    Returns:
        :class:`Space` (possibly empty; see :func:`raise_if_empty`).

    Raises:
        ConfigError: bad GPU count, batch, sequence length or dtype for this model/hardware,
            or a bad shared setting (:func:`shared_settings`, or a rule it alone breaks).
    """
    spec, hw = as_model(model), as_hardware(hardware)
    counts = positive_ints("num_gpus", num_gpus)
    if counts[-1] >= 2**21:
        raise ConfigError(f"num_gpus: at most {2**21 - 1} GPUs (got {counts[-1]})")
    seq = check_inputs(spec, hw, global_batch, seq_len, dtype)
    ctx = make_context(spec, hw, int(global_batch), seq, dtype, flash_attention,
                       keep_duplicates, constraints, recompute_modules, shared)
    B = ctx.global_batch
    log: list[dict[str, Any]] = []

    def apply(stage: str, cols: Columns) -> Columns:
        for text, keep in stage_rules(stage, ctx):
            mask = np.asarray(keep(cols), dtype=np.bool_)
            cols = _take(cols, mask)
            log.append({"stage": stage, "rule": text, "removed": int((~mask).sum()),
                        "remaining": int(mask.sum()), "level": _STAGE_LEVEL[stage]})
        return cols

    # tp: divisors of each GPU count
    cols = _cross_ragged({"num_gpus": np.asarray(counts, dtype=np.int64)}, "tp",
                         np.asarray(counts, dtype=np.int64), _divisor_array)
    cols = apply("tp", cols)
    # cp: divisors of num_gpus / tp
    cols = _cross_ragged(cols, "cp", cols["num_gpus"] // cols["tp"], _divisor_array)
    cols = apply("cp", cols)
    # pp: divisors of num_gpus / (tp*cp)
    cols = _cross_ragged(cols, "pp", cols["num_gpus"] // (cols["tp"] * cols["cp"]),
                         _divisor_array)
    cols = apply("pp", cols)
    cols["dp"] = cols["num_gpus"] // (cols["tp"] * cols["cp"] * cols["pp"])
    cols = apply("dp", cols)
    # ep: divisors of tp*cp*dp (MoE parallel folding; the rules keep 1 for a dense model)
    cols = _cross_ragged(cols, "ep", cols["tp"] * cols["cp"] * cols["dp"], _divisor_array)
    cols = apply("ep", cols)
    # micro-batch: divisors of global_batch / dp
    cols = _cross_ragged(cols, "micro_batch", np.maximum(B // cols["dp"], 1), _divisor_array)
    cols = apply("micro_batch", cols)
    # vpp: 1 without pipelining, else 1 .. (layers + 2) // pp (see rules.VPP_LAYERS)
    L = ctx.layers
    cols = _cross_ragged(cols, "vpp", cols["pp"],
                         lambda p: np.arange(1, ((L + 2) // p if p > 1 else 1) + 1,
                                             dtype=np.int64))
    cols = apply("vpp", cols)
    # modes: recompute x sp x zero x dp_overlap, ruled on one template per (tp, pp, dp)
    cols = _modes_stage(cols, ctx, log)
    cols = {k: np.ascontiguousarray(cols[k]) for k in FIELDS}
    return Space(cols, pd.DataFrame(log, columns=["stage", "rule", "removed", "remaining",
                                                  "level"]),
                 ctx, seq, dtype, bool(flash_attention))


def last_rule(rejected: pd.DataFrame) -> pd.Series[Any] | None:
    """The rule after which nothing remained (None when candidates remain).

    Args:
        rejected: a rejection log (:attr:`Space.rejected`).
    """
    empty = rejected[rejected["remaining"] == 0]
    if empty.empty:
        return None
    return empty.iloc[0]


def raise_if_empty(space: Space, what: str = "") -> None:
    """Raise :class:`SearchError` naming the rule that removed the last candidates.

    Raises:
        SearchError: when ``space`` is empty; the message gives the stage, the rule, how many
            it removed, and the other rules of that stage that removed candidates.
    """
    if len(space):
        return
    row = last_rule(space.rejected)
    if row is None:  # pragma: no cover - an empty space always has a rule with 0 remaining
        raise SearchError(f"no valid configuration{what}")
    stage = space.rejected[space.rejected["stage"] == row["stage"]]
    others = [f"{r.rule} ({r.removed})" for r in stage.itertuples()
              if r.removed and r.rule != row["rule"]]
    also = f"; earlier in that stage: {', '.join(others)}" if others else ""
    raise SearchError(f"no valid configuration{what}: the last {row['removed']} "
                      f"{row['level']} were removed at stage '{row['stage']}' by rule "
                      f"'{row['rule']}'{also}")
