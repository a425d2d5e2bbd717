"""The exhaustive search on a Dask cluster (two worker processes) equals the single-process
search bit for bit: every candidate's float32 score and memory headroom, the top table and
the rejected counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from optimizers.search import NUMPY_ROWS, search

distributed = pytest.importorskip("distributed")

#: 157,112 valid candidates (three chunks of 65,536 rows: two partitions of 2 and 1 chunks
#: with partition_rows below), more than NUMPY_ROWS so the compiled float32 path runs.
CASE = dict(model="gpt3-175b", hardware="h100-sxm5-80gb",
            num_gpus=list(range(512, 4097, 512)), global_batch=1536, top=8)


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address=":0", silence_logs=40)
    c = distributed.Client(cluster)
    yield c
    c.close()
    cluster.close()


def test_distributed_search_equals_local_bit_for_bit(client):
    local = search(**CASE)
    assert local.candidates > NUMPY_ROWS
    dist = search(**CASE, client=client, partition_rows=100_000)
    np.testing.assert_array_equal(dist.extra["scores"], local.extra["scores"])
    np.testing.assert_array_equal(dist.extra["headroom"], local.extra["headroom"])
    pd.testing.assert_frame_equal(dist.table, local.table, check_exact=True)
    pd.testing.assert_frame_equal(dist.rejected, local.rejected, check_exact=True)
    assert (dist.candidates, dist.fitting) == (local.candidates, local.fitting)
    # the best is the minimum score among fitting candidates
    fits = local.extra["fits"]
    assert local.table["score"].iloc[0] == pytest.approx(
        float(local.extra["scores"][fits].min()), rel=1e-6)


def test_cli_search_workers_flag_matches_local():
    import json

    from typer.testing import CliRunner

    from symcost.cli.main import app

    args = ["search", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus",
            "32", "--global-batch", "64", "--top", "3", "--json"]
    runner = CliRunner()
    both = runner.invoke(app, args + ["--workers", "1", "--scheduler", "tcp://x:1"])
    assert both.exit_code == 2 and "--workers" in both.stderr
    local = runner.invoke(app, args)
    assert local.exit_code == 0, local.output
    assert json.loads(local.stdout)["top"][0]["step_time_s"] > 0
