"""Accuracy on the Zhang et al. 2023 (ZHANG23) rows: tokens/s, peak memory, OOM, scaling.

Fits the efficiency parameters (the default set plus ``eff_host`` and ``cpu_adam_rate``) with
:func:`symcost.calibrate.calibrate_rows` on every step-time row of the measurements file and
reports, for the ZHANG23 rows:

* tokens/s MAPE in sample and leave-one-platform-out (the platform's rows are held out of the
  fit: A800, RTX 4090, RTX 3090; a held-out generation without data takes a related one's
  values, :func:`symcost.calibrate.transfer_missing`), and the same folds with the held-out
  server's host constants (:data:`HOST`) taken from the fit of all rows, which shows how much
  of the held-out error those constants carry;
* peak-memory MAPE per platform and overall, and fit-vs-OOM agreement: with the documented
  framework rules only (the memory parameters ``mem_cache_frac``, ``mem_regrow_frac`` and
  ``mem_offload_layers`` at 0), with them fitted in sample
  (:func:`symcost.calibrate.fit_memory`, one value of each for every GPU), and
  leave-one-platform-out (the platform's memory rows held out of the memory fit; both RTX
  3090 link variants are one platform);
* the predicted 1 -> 8 GPU scaling efficiencies and the RTX 3090 NVLink gain next to the
  paper's figures.

Usage::

    python benchmarks/zhang23_accuracy.py [measurements.csv] [--write-params out.yaml]
        [--memory-only]

``--memory-only`` skips the step-time fits (minutes) and prints the memory figures.
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from symcost.calibrate import (DEFAULT_FIT, MEMORY_FIT, calibrate_rows, fit_memory,
                               start_params, transfer_missing)
from symcost.params import Params, load_params, save_params
from symcost.validate import (fit_agreement, load_measurements, predict_other_rows,
                              predict_rows, prepare_other_rows, prepare_rows, split_by_params)

FIT = tuple(dict.fromkeys((*DEFAULT_FIT, "eff_host", "cpu_adam_rate")))
#: constants of a platform's host server and software stack rather than its GPU: host-staged
#: and offload transfer efficiency, DeepSpeed's CPU Adam rate, bitsandbytes' per-call
#: dequantization time (one server per platform in ZHANG23, so a held-out platform's values
#: are identified by no other row)
HOST = ("eff_host", "cpu_adam_rate", "t_dequant_call")
DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / \
    "published_measurements.csv"


def _memory_table(label: str, o: pd.DataFrame) -> None:
    """Print the peak-memory MAPE per platform and overall and the OOM agreement of ``o``."""
    mem = o[o.metric == "peak_memory_gib"]
    per = ", ".join(f"{hw} {np.abs(g.error_pct).mean():.1f}% ({len(g)})"
                    for hw, g in mem.groupby("hardware"))
    agree = fit_agreement(o)
    pct = f"{agree['agreement_pct']:.1f}%" if agree else "n/a"
    print(f"peak memory MAPE, {label}: {np.abs(mem.error_pct).mean():.1f}% over {len(mem)} rows "
          f"(signed {mem.error_pct.mean():+.1f}%); {per}; OOM agreement {pct}")


def memory_report(df: pd.DataFrame, params: Params) -> None:
    """Peak memory and OOM of the ZHANG23 rows: documented rules only, memory constants
    fitted in sample, and leave-one-platform-out."""
    other, _ = prepare_other_rows(df)
    other = [r for r in other if r.source == "ZHANG23"]
    zero = dataclasses.replace(params, generations={
        g: {**v, **{n: 0.0 for n in MEMORY_FIT}} for g, v in params.generations.items()})
    _memory_table(f"documented rules only ({' = '.join(MEMORY_FIT)} = 0)",
                  predict_other_rows(other, zero))
    fitted, values = fit_memory(other, zero)
    print(f"  fitted in sample: {values}")
    _memory_table("memory constants in sample", predict_other_rows(other, fitted))
    platform = {r.case_id: r.hardware.name for r in other}
    held = []
    for hw in sorted(set(platform.values())):
        train = [r for r in other if r.hardware.name != hw]
        test = [r for r in other if r.hardware.name == hw]
        fold, vals = fit_memory(train, zero)
        p = predict_other_rows(test, fold)
        held.append(p)
        m = p[p.metric == "peak_memory_gib"]
        print(f"  held out {hw}: peak memory MAPE {np.abs(m.error_pct).mean():.1f}% over "
              f"{len(m)} rows (fitted on the others: {vals})")
    _memory_table("leave-one-platform-out", pd.concat(held))


def main(argv: list[str]) -> None:
    out_path = argv[argv.index("--write-params") + 1] if "--write-params" in argv else None
    args = [a for a in argv if not a.startswith("--") and a != out_path]
    path = args[0] if args else str(DEFAULT_CSV)
    df = load_measurements(path)
    start = start_params(load_params())
    memory_report(df, load_params())
    if "--memory-only" in argv:
        return
    prepared, _ = prepare_rows(df)
    prepared, _ = split_by_params(prepared, start)
    zhang = [r for r in prepared if r.source == "ZHANG23"]
    print(f"{len(prepared)} step-time rows, {len(zhang)} ZHANG23; fitting {', '.join(FIT)}")

    res = calibrate_rows(prepared, start, FIT)
    for g, f in sorted(res.fits.items()):
        vals = {k: round(res.params.generations[g][k], 4) for k in FIT}
        print(f"  {g}: {vals}")
    if out_path:
        save_params(res.params, out_path)
    ins = predict_rows(zhang, res.params, intervals=False)
    tps = ins[ins.metric == "tokens_per_s"]
    print(f"tokens/s MAPE, in sample: {np.abs(tps.error_pct).mean():.1f}% over {len(tps)} rows")

    platform = {r.case_id: r.hardware.name for r in zhang}
    held, known = [], []
    for hw in sorted(set(platform.values())):
        train = [r for r in prepared if not (r.source == "ZHANG23" and r.hardware.name == hw)]
        test = [r for r in zhang if r.hardware.name == hw]
        fold = calibrate_rows(train, start, FIT)
        gens = sorted({r.hardware.generation for r in test})
        params, moved = transfer_missing(fold.params, list(fold.fits), gens)
        p = predict_rows(test, params, intervals=False)
        p = p[p.metric == "tokens_per_s"]
        held.append(p)
        # the same fold with the held-out server's host constants taken from the full fit
        host = dataclasses.replace(params, generations={**params.generations, **{
            g: {**params.generations[g], **{k: res.params.generations[g][k] for k in HOST}}
            for g in gens}})
        q = predict_rows(test, host, intervals=False)
        known.append(q[q.metric == "tokens_per_s"])
        note = f" (transferred from {moved})" if moved else ""
        print(f"  held out {hw}: tokens/s MAPE {np.abs(p.error_pct).mean():.1f}% "
              f"over {len(p)} rows{note}; {np.abs(known[-1].error_pct).mean():.1f}% with "
              f"its host constants known")
    allp = np.concatenate([h.error_pct.to_numpy() for h in held])
    allk = np.concatenate([h.error_pct.to_numpy() for h in known])
    print(f"tokens/s MAPE, leave-one-platform-out: {np.abs(allp).mean():.1f}%; "
          f"{np.abs(allk).mean():.1f}% with each held-out server's host constants "
          f"({', '.join(HOST)}) from the fit of all rows")

    other, _ = prepare_other_rows(df)
    other = [r for r in other if r.source == "ZHANG23"]
    o = predict_other_rows(other, res.params)
    for _, row in o[o.metric.str.startswith("scaling")].iterrows():
        print(f"  {row.case_id}: predicted {row.predicted:.1f}, paper {row.measured:.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])
