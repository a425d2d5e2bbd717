"""Value checks shared by the hwspecs YAML readers (prices, technology): one rule each for
"a positive number", "a positive integer" and "a non-empty string", with one-line messages
naming the entry and key (``<where>.<key> must be ...``). ``fail`` turns a message into the
reader's error (a :class:`~hwspecs.spec.HardwareSpecError` naming its file)."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

#: turns a message into the exception to raise.
Fail = Callable[[str], Exception]

__all__ = ["Fail", "positive_int", "positive_number", "text"]


def positive_number(entry: Mapping[str, Any], key: str, where: str, fail: Fail) -> float:
    """``entry[key]`` as a finite float > 0 (bools refused).

    Raises:
        Exception: ``fail("<where>.<key> must be a positive number (got ...)")``.
    """
    v = entry.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0 \
            or not math.isfinite(v):
        raise fail(f"{where}.{key} must be a positive number (got {v!r})")
    return float(v)


def positive_int(entry: Mapping[str, Any], key: str, where: str, fail: Fail) -> int:
    """``entry[key]`` as an int > 0 (bools refused).

    Raises:
        Exception: ``fail("<where>.<key> must be a positive integer (got ...)")``.
    """
    v = entry.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise fail(f"{where}.{key} must be a positive integer (got {v!r})")
    return v


def text(entry: Mapping[str, Any], key: str, where: str, fail: Fail) -> str:
    """``entry[key]`` as a non-empty string, runs of whitespace folded to one space.

    Raises:
        Exception: ``fail("<where>.<key> must be a non-empty string (got ...)")``.
    """
    v = entry.get(key)
    if not isinstance(v, str) or not v.strip():
        raise fail(f"{where}.{key} must be a non-empty string (got {v!r})")
    return " ".join(v.split())
