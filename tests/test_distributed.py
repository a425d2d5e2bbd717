"""Sweeps on a Dask cluster give the single-process result, bit for bit."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from symcost.config import TrainingConfig
from symcost.sweep import Range, sweep

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=40)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def test_distributed_sweep_equals_local_bit_for_bit(client):
    base = TrainingConfig(num_gpus=64, tp=2, pp=2, global_batch=128)
    vary = {"tp": [1, 2, 4, 8], "hbm_bw": Range(1e12, 4e12, log=True),
            "micro_batch": [1, 2, 4], "recompute": ["none", "full"]}
    kw = dict(vary=vary, samples=20_000, seed=7, precision="float64", chunk_size=4096)
    local = sweep("gpt-1.7b", "a100-sxm4-40gb", base, **kw)
    seen = []
    dist = sweep("gpt-1.7b", "a100-sxm4-40gb", base, client=client, partition_rows=5000,
                 progress=lambda d, t: seen.append((d, t)), **kw)
    pd.testing.assert_frame_equal(local, dist, check_exact=True)
    assert seen[-1] == (20_000, 20_000) and len(seen) == 3   # 3 partitions of 8192 rows
    assert np.isfinite(dist.loc[dist["valid"], "step_time"]).all()


def test_distributed_grid_and_mixed_precision_equal_local(client):
    base = TrainingConfig(num_gpus=32, global_batch=64)
    vary = {"tp": [1, 2, 4], "pp": [1, 2, 4], "vpp": [1, 2], "zero": [0, 1, 2, 3],
            "eff_gemm": Range(0.4, 0.8, 50)}
    local = sweep("gpt-1.7b", "a100-sxm4-40gb", base, vary=vary, chunk_size=4096)
    dist = sweep("gpt-1.7b", "a100-sxm4-40gb", base, vary=vary, chunk_size=4096,
                 client=client)
    pd.testing.assert_frame_equal(local, dist, check_exact=True)
