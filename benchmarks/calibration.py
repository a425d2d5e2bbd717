"""Calibration accuracy and honesty on the shared published measurements (issue 6).

Prints, for the default fitted set (:data:`symcost.calibrate.DEFAULT_FIT`):

1. in-sample MAPE per source before (start values) and after calibration, with the fitted
   parameters and their standard errors;
2. leave-one-source-out MAPE per source (fit on the other sources, predict the held-out one),
   split by whether the held-out generation had data in the fold or was transferred from a
   related generation (:func:`symcost.calibrate.transfer_missing`);
3. the coverage of the 90% prediction intervals on held-out rows (and in-sample);
4. signed error by row class (sequence length, node count, dtype, ZeRO stage) in-sample, to
   expose systematic model error rather than hide it in a parameter.

Targets: leave-one-source-out MAPE <= 10% on train rows; 90% intervals cover >= 80% of
held-out rows.

The start is the shipped file's recorded ``start_values`` (data-independent, see
:func:`symcost.calibrate.start_params`), so no fold starts from values fitted to its held-out
rows.

Usage::

    PYTHONPATH=. python benchmarks/calibration.py [PATH.csv]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pandas as pd

DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / \
    "published_measurements.csv"


def _inside(df: pd.DataFrame) -> pd.Series:
    return (df["measured"] >= df["pred_lo"]) & (df["measured"] <= df["pred_hi"])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else str(DEFAULT_CSV)

    from symcost.calibrate import DEFAULT_FIT, calibrate_rows, cross_validate, start_params
    from symcost.params import load_params
    from symcost.validate import (load_measurements, predict_rows, prepare_rows,
                                  split_by_params, summarize)

    start = start_params(load_params())
    prepared, skipped = prepare_rows(load_measurements(path))
    prepared, _ = split_by_params(prepared, start)
    print(f"measurements: {path}: {len(prepared)} train rows predicted, {len(skipped)} not")
    print(f"fitted per generation: {', '.join(DEFAULT_FIT)}; start: "
          f"{start.provenance.get('data')}")

    t0 = time.perf_counter()
    res = calibrate_rows(prepared, start, DEFAULT_FIT)
    t_fit = time.perf_counter() - t0
    before = predict_rows(prepared, start, intervals=False)
    after = predict_rows(prepared, res.params, intervals=True)
    sb, sa = summarize(before), summarize(after)
    print(f"\n== in-sample (fit {t_fit:.1f} s incl. compile)")
    for g, f in res.fits.items():
        vals = ", ".join(
            f"{p}={f.values[p]:.4g}" + (f"+-{f.stderr[p]:.2g}" if p in f.stderr else
                                        " (on a bound)" if p in f.at_bound else " (fixed)")
            for p in DEFAULT_FIT)
        print(f"  {g}: {f.n_runs} runs / {f.n_rows} rows, residual sd(log) {f.sigma:.3f}: "
              f"{vals}")
    print(f"  {'source':8} {'n':>4} {'MAPE before %':>14} {'MAPE after %':>13}")
    b = {x["source"]: x for x in sb["by_source"]}
    for x in sa["by_source"]:
        print(f"  {x['source']:8} {x['n']:4d} {b[x['source']]['mape_pct']:14.2f} "
              f"{x['mape_pct']:13.2f}")
    print(f"  {'ALL':8} {sa['n_predicted']:4d} {sb['mape_pct']:14.2f} {sa['mape_pct']:13.2f}")
    print(f"  90% interval coverage in-sample: {100 * _inside(after).mean():.1f}%")

    t0 = time.perf_counter()
    cv = cross_validate(prepared, start, DEFAULT_FIT, level=0.9)
    t_cv = time.perf_counter() - t0
    print(f"\n== leave-one-source-out ({t_cv:.1f} s)")
    print(f"  {'source':8} {'generation':10} {'from':8} {'n':>4} {'MAPE %':>8} "
          f"{'mean err %':>11} {'90% cover':>10}")
    for (src, gen, tr), g in cv.groupby(["source", "generation", "transferred"], sort=True):
        print(f"  {src:8} {gen:10} {tr or '-':8} {len(g):4d} {g['error_pct'].abs().mean():8.2f} "
              f"{g['error_pct'].mean():+11.2f} {100 * _inside(g).mean():9.1f}%")
    for src, g in cv.groupby("source", sort=True):
        print(f"  {src:8} {'(all)':10} {'':8} {len(g):4d} {g['error_pct'].abs().mean():8.2f} "
              f"{g['error_pct'].mean():+11.2f} {100 * _inside(g).mean():9.1f}%")
    loso = cv["error_pct"].abs().mean()
    cover = _inside(cv).mean()
    own = cv[cv["transferred"] == ""]
    print(f"  ALL rows: MAPE {loso:.2f}%, 90% coverage {100 * cover:.1f}%; rows whose "
          f"generation had data in the fold: MAPE {own['error_pct'].abs().mean():.2f}%, "
          f"coverage {100 * _inside(own).mean():.1f}% (n={len(own)})")
    per_source = cv.groupby("source")["error_pct"].apply(lambda e: e.abs().mean())
    print(f"  target LOSO MAPE <= 10% per source: "
          f"{'MET' if (per_source <= 10).all() else 'NOT MET'} "
          f"({', '.join(f'{k} {v:.1f}%' for k, v in per_source.items())}); "
          f"target coverage >= 80%: {'MET' if cover >= 0.8 else 'NOT MET'} "
          f"({100 * cover:.1f}%)")

    # systematic error by class of row (in-sample, calibrated)
    info = pd.DataFrame([{
        "case_id": r.case_id, "seq": r.config.seq_len, "multi_node":
            r.config.num_gpus > r.hardware.gpus_per_node, "dtype": r.config.dtype,
        "zero": r.config.zero, "params_b": r.model.num_params() / 1e9}
        for r in prepared])
    a = after.merge(info, on="case_id")
    a["seq_bucket"] = pd.cut(a["seq"], [0, 2048, 8192, 1 << 20],
                             labels=["<=2k", "4k-8k", ">=16k"])
    a["size"] = pd.cut(a["params_b"], [0, 2, 20, 1e5], labels=["<2B", "2-20B", ">20B"])
    print("\n== in-sample signed error by row class (mean / MAPE %, n)")
    for keys in (["generation", "seq_bucket"], ["generation", "multi_node", "zero"],
                 ["generation", "dtype"], ["generation", "size"], ["source", "zero"]):
        for k, g in a.groupby(keys, observed=True):
            k = k if isinstance(k, tuple) else (k,)
            label = ", ".join(f"{a}={b}" for a, b in zip(keys, k))
            print(f"  {label:60} {g['error_pct'].mean():+7.1f} "
                  f"{g['error_pct'].abs().mean():6.1f} {len(g):4d}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
