"""Progress callbacks of the long commands (issue 14): monotone, ending at the total, and
absent from the results (a callback changes nothing that is computed)."""

from __future__ import annotations

from symcost.calibrate import calibrate_rows, cross_validate, start_params
from symcost.params import load_params
from symcost.validate import load_measurements, prepare_rows, validate_frame


def _recorder() -> tuple[list[tuple[int, int]], object]:
    calls: list[tuple[int, int]] = []
    return calls, lambda done, total: calls.append((done, total))


def _check(calls: list[tuple[int, int]]) -> None:
    assert calls, "the callback was never called"
    totals = {t for _, t in calls}
    assert len(totals) == 1
    done = [d for d, _ in calls]
    assert done == sorted(done) and done[-1] == calls[-1][1]


def _rows():
    df = load_measurements()
    return df[df["case_id"].str.startswith(("MPT-", "NEMO2407"))].head(120)


def test_validate_progress_counts_rows_then_stages():
    df = _rows()
    calls, cb = _recorder()
    with_bar = validate_frame(df, load_params(), intervals=False, progress=cb)
    _check(calls)
    assert calls[-1][1] == len(df) + 3
    plain = validate_frame(df, load_params(), intervals=False)
    assert with_bar.rows["predicted"].tolist() == plain.rows["predicted"].tolist()


def test_calibration_and_cross_validation_report_generations_and_folds():
    prepared, _ = prepare_rows(_rows())
    start = start_params(load_params())
    calls, cb = _recorder()
    res = calibrate_rows(prepared, start, ("eff_gemm",), progress=cb)
    _check(calls)
    assert calls[-1][1] == len({r.hardware.generation for r in prepared})
    assert res.params.generations == calibrate_rows(prepared, start, ("eff_gemm",)
                                                    ).params.generations
    calls, cb = _recorder()
    cross_validate(prepared, start, ("eff_gemm",), progress=cb)
    _check(calls)
    assert calls[-1][1] == len({r.source for r in prepared})
