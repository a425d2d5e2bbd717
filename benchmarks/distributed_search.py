"""Exhaustive search in one process against a local Dask cluster of worker processes.

Run: ``python benchmarks/distributed_search.py [WORKERS]`` (default 2 workers). Searches
GPT-3 175B on H100 over 512-8192 GPUs (steps of 256: 395,560 valid candidates),
prints candidates/s of the evaluation locally and on the cluster (JAX compiled and warm in
every process first), the overhead per partition, and whether the two results are identical
(every candidate's score and headroom, the top table).
"""

from __future__ import annotations

import sys
import time

import numpy as np
import pandas as pd

from optimizers.search import search

CASE = dict(model="gpt3-175b", hardware="h100-sxm5-80gb",
            num_gpus=list(range(512, 8193, 256)), global_batch=1536, top=10)


def main() -> None:
    import distributed

    workers = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    search(**CASE)                                   # compile and warm up
    local = search(**CASE)
    n = local.candidates
    t_local = local.timings["evaluate"]
    print(f"1 process : {n:,} candidates evaluated in {t_local:.2f} s = "
          f"{n / t_local:,.0f} candidates/s (search total {local.timings['total']:.2f} s)")
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        search(**CASE, client=client)                # JAX import and compile per worker
        t = time.perf_counter()
        dist = search(**CASE, client=client)
        wall = time.perf_counter() - t
    t_dist = dist.timings["evaluate"]
    parts = 4 * workers
    print(f"{workers} workers : {n:,} candidates evaluated in {t_dist:.2f} s = "
          f"{n / t_dist:,.0f} candidates/s (search total {wall:.2f} s; {parts} partitions; "
          f"overhead vs ideal split {(t_dist - t_local / workers) / parts * 1e3:.0f} ms per "
          "partition)")
    same = (np.array_equal(local.extra["scores"], dist.extra["scores"])
            and np.array_equal(local.extra["headroom"], dist.extra["headroom"]))
    try:
        pd.testing.assert_frame_equal(local.table, dist.table, check_exact=True)
    except AssertionError:
        same = False
    print("results identical bit for bit" if same else "results DIFFER")


if __name__ == "__main__":
    main()
