"""Sweep throughput in one process against a local Dask cluster of worker processes.

Run: ``python benchmarks/distributed_sweep.py [ROWS] [WORKERS]`` (default 10**7 rows, 2
workers). Prints configurations/s of the same float64 random sweep run locally and on the
cluster, the overhead per partition, and whether the two results are identical bit for bit.
"""

from __future__ import annotations

import sys
import time

import pandas as pd

from symcost.config import TrainingConfig
from symcost.sweep import Range, sweep

MODEL, HARDWARE = "gpt3-175b", "a100-sxm4-80gb"
BASE = TrainingConfig(num_gpus=1024, tp=8, pp=16, global_batch=1536, recompute="full")
VARY = {"tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16], "micro_batch": [1, 2, 4],
        "hbm_bw": Range(1e12, 8e12, log=True), "inter_bw": Range(1.25e10, 1e11, log=True)}


def main() -> None:
    import distributed

    rows = int(float(sys.argv[1])) if len(sys.argv) > 1 else 10**7
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    kw = dict(vary=VARY, samples=rows, seed=1, precision="float64")
    sweep(MODEL, HARDWARE, BASE, vary=VARY, samples=10, precision="float64")   # compile
    t = time.perf_counter()
    local = sweep(MODEL, HARDWARE, BASE, **kw)
    t_local = time.perf_counter() - t
    print(f"1 process : {rows:,} rows in {t_local:.2f} s = {rows / t_local:,.0f} configs/s")
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        # warm the workers (JAX import and compilation happen once per worker process)
        sweep(MODEL, HARDWARE, BASE, vary=VARY, samples=10_000, precision="float64",
              client=client)
        parts = 4 * workers
        t = time.perf_counter()
        dist = sweep(MODEL, HARDWARE, BASE, client=client, **kw)
        t_dist = time.perf_counter() - t
    print(f"{workers} workers : {rows:,} rows in {t_dist:.2f} s = {rows / t_dist:,.0f} "
          f"configs/s ({parts} partitions; overhead vs ideal split "
          f"{(t_dist - t_local / workers) / parts * 1e3:.0f} ms per partition)")
    try:
        pd.testing.assert_frame_equal(local, dist, check_exact=True)
        print("results identical bit for bit (float64)")
    except AssertionError as exc:
        print(f"results DIFFER: {str(exc)[:200]}")


if __name__ == "__main__":
    main()
