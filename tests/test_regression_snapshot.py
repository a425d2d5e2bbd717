"""Predictions are unchanged by refactoring: replay the stored snapshot.

``tests/regression/snapshot.json.gz`` was written by ``tests/regression/make_snapshot.py``
before the configuration-model refactor (issue 10). Each stored draw is replayed through the
public API and compared in float64 with a relative tolerance of 1e-9; a draw that was
rejected must still be rejected, by a rule on the same field. Every predicted row of the
shared validation file must predict the same values, and the same rows must be skipped.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "regression"))
import make_snapshot  # noqa: E402

REL = 1e-9


@pytest.fixture(scope="module")
def snapshot() -> dict:
    with gzip.open(make_snapshot.SNAPSHOT, "rt") as fh:
        return json.load(fh)


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-300)


def _compare(stored: list[dict], run) -> list[str]:
    problems = []
    for i, rec in enumerate(stored):
        now = run(rec["draw"])
        if "error" in rec:
            if now.get("error") != rec["error"]:
                problems.append(f"draw {i}: was rejected on {rec['error']!r}, now {now}")
            continue
        if "values" not in now:
            problems.append(f"draw {i}: was valid, now rejected on {now['error']!r}")
            continue
        for k, v in rec["values"].items():
            if not _same(v, now["values"].get(k)):
                problems.append(f"draw {i} {k}: {v!r} -> {now['values'].get(k)!r}")
    return problems


def test_training_draws_unchanged(snapshot):
    problems = _compare(snapshot["training"], make_snapshot.run_training)
    assert not problems, "\n".join(problems[:20])


def test_inference_draws_unchanged(snapshot):
    problems = _compare(snapshot["inference"], make_snapshot.run_inference)
    assert not problems, "\n".join(problems[:20])


def test_draws_cover_valid_and_rejected(snapshot):
    # the snapshot tests something: both outcomes occur in quantity
    valid = sum("values" in r for r in snapshot["training"])
    assert 300 < valid < 900


@pytest.mark.skipif(not make_snapshot.VALIDATION.exists(), reason="../shared not present")
def test_validation_rows_unchanged(snapshot):
    now = make_snapshot.run_validation(make_snapshot.VALIDATION)
    old = snapshot["validation"]
    assert now["skipped"] == old["skipped"]
    assert set(now["rows"]) == set(old["rows"])
    bad = [f"{key} {c}: {v!r} -> {now['rows'][key][c]!r}"
           for key, cols in old["rows"].items() for c, v in cols.items()
           if not _same(v, now["rows"][key][c])]
    assert not bad, "\n".join(bad[:20])
