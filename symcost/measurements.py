"""Rows of a published-measurements file: cell accessors, row errors and parsed rows.

The data-handling layer shared by :mod:`symcost.validate` (``train`` rows),
:mod:`symcost.infer_api` (``serve``/``prefill`` rows), :mod:`symcost.uncertainty` and
:mod:`symcost.calibrate`. It reads cells; it predicts nothing. The format (one measured figure
per row; columns, metrics and sources) is defined by the ``README.md`` shipped next to the
built-in file (:func:`symcost.validate.builtin_measurements`).

A cell is *blank* when it is missing, None, NaN or only whitespace ("the source does not
say"); :func:`cell`, :func:`cell_float` and :func:`cell_int` return None for it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from hwspecs import HardwareSpec

from .config import TrainingConfig
from .models import ModelSpec


class RowError(ValueError):
    """One row cannot be predicted; the message is the reason shown to the user (it names
    the column)."""


@dataclass(frozen=True)
class SkippedRow:
    """A row that was not predicted, with the reason (one line)."""

    case_id: str
    reason: str
    source: str = ""
    metric: str = ""


@dataclass(frozen=True)
class PreparedRow:
    """One predictable ``train`` measurement.

    Attributes:
        case_id, source, metric: identifiers (``source`` is the ``case_id`` prefix).
        measured: the published value in the metric's unit.
        model, hardware, config: what to evaluate (``config`` resolved: every field set).
        n_params: published parameter count (``n_params_b * 1e9``) or None.
        run: key shared by the rows that measure the same run (other metrics of it).
        defaults: the documented defaults this row used (field -> value), for the report.
        flops_convention: the row's ``flops_convention`` column (``model``, ``hardware``,
            ``megatron_sc21`` or ``""`` when blank), used by
            :func:`symcost.validate.metric_factor`.
        flops_counter: the Megatron FLOP counter of the row's FLOP-rate metrics
            (:func:`symcost.validate.flops_counter_of`; ``""``: the PaLM/llm-foundry count).
    """

    case_id: str
    source: str
    metric: str
    measured: float
    model: ModelSpec
    hardware: HardwareSpec
    config: TrainingConfig
    n_params: float | None
    run: str
    defaults: Mapping[str, object] = field(default_factory=dict)
    flops_convention: str = ""
    flops_counter: str = ""


def source_of(case_id: str) -> str:
    """Source id of a case: the ``case_id`` prefix before the first ``-`` (format rule)."""
    return str(case_id).split("-", 1)[0] if case_id else ""


def is_blank(value: object) -> bool:
    """True for a blank cell: None, NaN, or a string of only whitespace."""
    return value is None or (isinstance(value, float) and math.isnan(value)) or (
        isinstance(value, str) and not value.strip())


#: one row: column name -> cell (text as read from a CSV, or any value from Python).
Row = Mapping[Any, Any]


def cell(row: Row, name: str) -> Any:
    """The cell of column ``name`` as given (text stripped): None when blank or absent."""
    v = row.get(name)
    if is_blank(v):
        return None
    return v.strip() if isinstance(v, str) else v


def cell_float(row: Row, name: str) -> float | None:
    """The cell of column ``name`` as a finite number (None when blank).

    Raises:
        RowError: ``"<name>: '<cell>' is not a number"`` or ``"... must be finite"``.
    """
    v = cell(row, name)
    if v is None:
        return None
    try:
        f = float(v)
    except (TypeError, ValueError):
        raise RowError(f"{name}: {v!r} is not a number") from None
    if not math.isfinite(f):
        raise RowError(f"{name}: {v!r} must be finite")
    return f


def cell_int(row: Row, name: str) -> int | None:
    """The cell of column ``name`` as a whole number (None when blank).

    Raises:
        RowError: not a number, not finite, or ``"<name>: '<cell>' must be a whole number"``.
    """
    f = cell_float(row, name)
    if f is None:
        return None
    if f != int(f):
        raise RowError(f"{name}: {row.get(name)!r} must be a whole number")
    return int(f)


__all__ = ["PreparedRow", "Row", "RowError", "SkippedRow", "cell", "cell_float", "cell_int",
           "is_blank", "source_of"]
