"""Sweeps: masking equals config.resolve row by row, values equal single predictions, grids,
sampling, chunking, output files, precision re-check and bad input."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from symcost.api import predict_training
from symcost.config import ConfigError, TrainingConfig, resolve
from symcost.models import ModelSpecError, get_model
import symcost.sweep as sweep_mod
from symcost.sweep import (CHUNK_SIZES, REASONS, Range, SweepError, grid_values, parse_vary,
                           pick_chunk, sweep, write_table)

GPT = dict(model="gpt-1.7b", hardware="a100-sxm4-40gb")
CHUNK = 256  # small fixed chunk: several chunks and a padded last one, one compile per plan
MODEL_FIELDS = ("layers", "heads", "hidden", "kv_heads", "ffn_hidden")
CONFIG_FIELDS = ("tp", "pp", "dp", "num_gpus", "micro_batch", "global_batch", "vpp", "zero")
# caching off inside the test process: the app callback then leaves JAX's config alone
RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})


def _resolve_row(model, base: TrainingConfig, row: dict, varied):
    """Independent check of one sweep row: ModelSpec + config.resolve (+ memory fit)."""
    mfields = {k: int(row[k]) for k in varied if k in MODEL_FIELDS}
    cfields = {k: int(row[k]) for k in varied if k in CONFIG_FIELDS}
    if "dp" in varied:
        cfields["num_gpus"] = None       # documented: varying dp moves the GPU count
    if "num_gpus" in varied:
        cfields["dp"] = None
    try:
        m = get_model(model).replace(**mfields)
    except ModelSpecError:
        return False, "model", None
    cfg = base.replace(**cfields)
    try:
        resolve(m, _hw(), cfg)
    except ConfigError as exc:
        return False, str(exc).split(":")[0], None
    r = predict_training(m, _hw(), cfg)
    return r.fits, ("" if r.fits else "memory"), r


def _hw():
    from hwspecs import load_hardware

    return load_hardware(GPT["hardware"])


@pytest.fixture(scope="module")
def grid():
    base = TrainingConfig(dp=2, tp=2, pp=2, recompute="none")
    vary = {"tp": [1, 2, 5, 8], "pp": [1, 2, 4, 25], "micro_batch": [1, 2, 4],
            "vpp": [1, 2], "zero": [0, 2], "layers": [24, 26], "global_batch": [16, 24]}
    df = sweep(GPT["model"], GPT["hardware"], base, vary=vary, precision="float64",
               chunk_size=CHUNK)
    return base, vary, df


def test_grid_is_the_cartesian_product(grid):
    _, vary, df = grid
    assert len(df) == math.prod(len(v) for v in vary.values())
    assert len(df.drop_duplicates(["tp", "pp", "micro_batch", "vpp", "zero",
                                   "layers", "global_batch"])) == len(df)
    assert {"valid", "reason", "step_time", "mem_headroom"} <= set(df.columns)


def test_sweep_masks_exactly_the_points_resolve_rejects(grid):
    base, vary, df = grid
    varied = ["tp", "pp", "micro_batch", "vpp", "zero", "layers", "global_batch"]
    mismatches = []
    for row in df.to_dict("records"):
        ok, field, ref = _resolve_row(GPT["model"], base, row, varied)
        reason = row["reason"]
        if ok != row["valid"] or (not ok and reason.split(":")[0] != field):
            mismatches.append((row, ok, field))
        if ref is not None and ok:
            assert math.isclose(row["step_time"], ref.step_time, rel_tol=1e-12)
            assert math.isclose(row["mem_total"], ref.values["mem_total"], rel_tol=1e-12)
    assert not mismatches, mismatches[:3]
    counts = df.attrs["invalid_counts"]
    assert sum(counts.values()) == (~df["valid"]).sum()
    assert df["valid"].sum() > 0 and len(counts) >= 7, counts
    assert REASONS[-1] in counts  # some rows do not fit in memory
    # rule-breaking rows carry no numbers; rows that only do not fit keep theirs
    broken = df[(~df["valid"]) & (df["reason"] != REASONS[-1])]
    assert broken["step_time"].isna().all()
    assert df[df["valid"]]["step_time"].notna().all()


def test_model_shape_and_num_gpus_rules():
    base = TrainingConfig(num_gpus=32, tp=1, pp=1, global_batch=64)
    vary = {"heads": [16, 24, 25], "kv_heads": [4, 8, 24], "num_gpus": [16, 24, 32],
            "tp": [1, 2, 8], "hidden": [2304, 2400]}
    df = sweep(GPT["model"], GPT["hardware"], base, vary=vary, precision="float64",
               chunk_size=CHUNK)
    varied = ["heads", "kv_heads", "num_gpus", "tp", "hidden"]
    for row in df.to_dict("records"):
        ok, field, _ = _resolve_row(GPT["model"], base, row, varied)
        assert ok == row["valid"], row
        if field == "model":
            assert row["reason"].split(":")[0] in ("hidden", "heads"), row
        elif not ok:
            assert row["reason"].split(":")[0] == field, row


def test_float32_sweep_matches_predictions_and_mixed_rechecks():
    base = TrainingConfig(num_gpus=64, tp=2, pp=2, global_batch=128)
    vary = {"tp": [1, 2, 4], "hbm_bw": Range(1e12, 3e12, 5), "eff_gemm": [0.5, 0.7]}
    df32 = sweep(GPT["model"], GPT["hardware"], base, vary=vary, precision="float32",
                 chunk_size=CHUNK)
    mixed = sweep(GPT["model"], GPT["hardware"], base, vary=vary, precision="mixed",
                  recheck_top=3, chunk_size=CHUNK)
    ok = df32[df32["valid"]]
    assert len(ok) > 10
    for row in ok.head(6).to_dict("records"):
        from symcost.api import training_inputs

        inputs = training_inputs(GPT["model"], GPT["hardware"], base.replace(tp=int(row["tp"]),
                                                                            dp=None))
        inputs.update(hbm_bw=row["hbm_bw"], eff_gemm=row["eff_gemm"])
        from symcost.api import training_model

        cm = training_model("float64")
        ref = cm.call_numpy(**{n: inputs[n] for n in cm.input_names})
        assert math.isclose(row["step_time"], float(ref["step_time"]), rel_tol=1e-5)
    assert mixed["rechecked"].sum() >= 3
    best = mixed[mixed["valid"]].nsmallest(3, "step_time")
    assert best["rechecked"].all()
    # the re-checked rows carry float64 values (not float32-rounded ones)
    assert (best["step_time"].to_numpy() != best["step_time"].to_numpy().astype(np.float32)
            ).any()
    assert (mixed["valid"] == df32["valid"]).all()


def test_random_samples_reproducible_and_in_range():
    base = TrainingConfig(num_gpus=64, tp=2, pp=2, global_batch=128)
    vary = {"hbm_bw": Range(1e12, 4e12, log=True), "micro_batch": Range(1, 4),
            "tp": [1, 2, 4, 8], "t_step_overhead": Range(0.0, 0.5)}
    a = sweep(GPT["model"], GPT["hardware"], base, vary=vary, samples=1000, seed=3,
              precision="float32", chunk_size=CHUNK)
    b = sweep(GPT["model"], GPT["hardware"], base, vary=vary, samples=1000, seed=3,
              precision="float32", chunk_size=CHUNK)
    c = sweep(GPT["model"], GPT["hardware"], base, vary=vary, samples=1000, seed=4,
              precision="float32", chunk_size=CHUNK)
    pd.testing.assert_frame_equal(a, b)
    assert not a["hbm_bw"].equals(c["hbm_bw"])
    assert len(a) == 1000
    assert a["hbm_bw"].between(1e12, 4e12).all()
    assert set(a["micro_batch"]) == {1, 2, 3, 4}
    assert set(a["tp"]) <= {1, 2, 4, 8}
    # log-uniform: about half of the samples below the geometric mean
    assert 0.4 < (a["hbm_bw"] < 2e12).mean() < 0.6


def test_grid_values_and_parse_vary():
    assert list(grid_values("tp", [1, "2", 4.0])) == [1, 2, 4]
    assert list(grid_values("pp", Range(1, 4))) == [1, 2, 3, 4]
    assert list(grid_values("micro_batch", Range(1, 8, 4, log=True))) == [1, 2, 4, 8]
    np.testing.assert_allclose(grid_values("hbm_bw", Range(1e12, 2e12, 3)),
                               [1e12, 1.5e12, 2e12])
    assert list(grid_values("recompute", ["none", "full"])) == [0, 2]
    assert parse_vary("layers=24,32") == ("layers", ["24", "32"])
    with pytest.raises(SweepError, match="unknown variable 'n_layers'"):
        parse_vary("n_layers=24")   # one name per quantity: the field's
    with pytest.raises(SweepError, match=r"tp: must be a positive integer .*got 1.5"):
        grid_values("tp", [1.5, 2])  # not rounded to a duplicate row
    assert list(grid_values("dtype", ["bf16", "fp8"])) == [0, 2]
    assert list(grid_values("sp", ["on", "off"])) == [1, 0]
    assert parse_vary("hbm_bw=1e12:4e12:7:log") == ("hbm_bw", Range(1e12, 4e12, 7, True))
    assert parse_vary("hbm_bw=1e12:4e12:log") == ("hbm_bw", Range(1e12, 4e12, None, True))
    assert parse_vary("pp=1:8") == ("pp", Range(1, 8))


@pytest.mark.parametrize("vary, samples, match", [
    ({"nope": [1]}, None, "unknown variable"),
    ({"tp": [0, 1]}, None, "positive"),
    ({"recompute": [3]}, None, "recompute: must be one of none, selective, full"),
    ({"recompute": ["sometimes"]}, None, "recompute: must be one of"),
    ({"hbm_bw": Range(1e12, 2e12)}, None, "needs a number of points"),
    ({"hbm_bw": Range(2e12, 1e12)}, 10, "lo <= hi"),
    ({"hbm_bw": Range(0, 1e12, log=True)}, 10, "log range"),
    ({"dp": [1, 2], "num_gpus": [8]}, None, "cannot both vary"),
    ({}, None, "nothing to vary"),
    ({"tp": [1]}, 0, "samples"),
    ({"eff_gemm": [0.5, 2]}, None, r"eff_gemm: values must be in its physical range "
                                   r"\[0.05, 1\] \(symcost.params.BOUNDS; got 2\)"),
    ({"eff_gemm": Range(0.5, 2, 4)}, None, r"eff_gemm: .*physical range \[0.05, 1\]"),
    ({"eff_inter": Range(0.2, 0.9)}, 10, r"eff_inter: .*physical range \[0.5, 1\].*got 0.2"),
    ({"mem_reserved": [1e12]}, None, r"mem_reserved: .*physical range \[0, 6.4e\+10\]"),
])
def test_bad_sweep_specifications(vary, samples, match):
    with pytest.raises(SweepError, match=match):
        sweep(GPT["model"], GPT["hardware"], vary=vary, samples=samples, chunk_size=CHUNK)


def test_bad_outputs_and_parse_errors():
    with pytest.raises(SweepError, match="outputs: unknown"):
        sweep(GPT["model"], GPT["hardware"], vary={"tp": [1]}, outputs=["speed"])
    with pytest.raises(SweepError, match="name=values"):
        parse_vary("tp")
    with pytest.raises(SweepError, match="lo:hi"):
        parse_vary("tp=1:2:3:4:5")
    with pytest.raises(ConfigError, match="recompute"):
        sweep(GPT["model"], GPT["hardware"], vary={"tp": [1]}, recompute="some")


def test_write_table_csv_parquet(tmp_path, grid):
    _, _, df = grid
    small = df.head(20)
    for ext in ("csv", "parquet"):
        p = tmp_path / f"s.{ext}"
        write_table(small, p)
        back = pd.read_csv(p) if ext == "csv" else pd.read_parquet(p)
        assert len(back) == 20
        np.testing.assert_allclose(back["tp"], small["tp"])
    with pytest.raises(SweepError, match="csv or .parquet"):
        write_table(small, tmp_path / "s.txt")


def test_cli_sweep_json_and_file(tmp_path):
    from symcost.cli import app

    import jax

    before = (jax.config.jax_compilation_cache_dir,
              jax.config.jax_persistent_cache_min_compile_time_secs)
    out = tmp_path / "rows.csv"
    res = RUNNER.invoke(app, [
        "sweep", "--model", GPT["model"], "--hardware", GPT["hardware"], "--num-gpus", "64",
        "--tp", "2", "--pp", "2", "--global-batch", "128", "--vary", "tp=1,2,4",
        "--vary", "hbm_bw=1e12:3e12:5", "--vary", "eff_gemm=0.5,0.7", "--precision",
        "float32", "--chunk-size", str(CHUNK), "--out", str(out), "--json", "--top", "2"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["rows"] == 30 and len(d["top"]) == 2
    assert len(pd.read_csv(out)) == 30
    # the app callback left JAX's global configuration alone (SYMCOST_CACHE_DIR=off)
    assert (jax.config.jax_compilation_cache_dir,
            jax.config.jax_persistent_cache_min_compile_time_secs) == before
    bad = RUNNER.invoke(app, ["sweep", "--model", GPT["model"], "--hardware",
                              GPT["hardware"], "--vary", "bogus=1"])
    assert bad.exit_code == 2
    assert "unknown variable" in bad.output
    bad = RUNNER.invoke(app, ["sweep", "--model", GPT["model"], "--hardware",
                              GPT["hardware"], "--vary", "eff_gemm=0.5,2"])
    assert bad.exit_code == 2
    assert bad.output.strip() == ("error: vary eff_gemm: values must be in its physical range "
                                  "[0.05, 1] (symcost.params.BOUNDS; got 2)")


def test_chunk_size_is_picked_from_the_fixed_set():
    assert CHUNK_SIZES == (4096, 65536)
    assert [pick_chunk(n) for n in (1, 2, 110, 4096, 4097, 65536, 10**6)] == [
        4096, 4096, 4096, 4096, 65536, 65536, 65536]


def test_small_sweep_uses_the_small_chunk(monkeypatch):
    """A 2-row mixed sweep (and its float64 re-check) runs 4,096-row chunks, not 65,536."""
    seen = []
    original = sweep_mod._chunk_function

    def spy(plan, dtype):
        fn = original(plan, dtype)

        def call(args, fixed):
            seen.append((dtype, args[0].shape[0]))
            return fn(args, fixed)
        return call

    monkeypatch.setattr(sweep_mod, "_chunk_function", spy)
    df = sweep(GPT["model"], GPT["hardware"], TrainingConfig(num_gpus=8, tp=2, global_batch=8),
               vary={"tp": [1, 2]})
    assert len(df) == 2 and df["rechecked"].all()
    assert seen == [("float32", 4096), ("float64", 4096)]


def test_random_rows_do_not_depend_on_the_chunk_size():
    base = TrainingConfig(num_gpus=64, tp=2, pp=2, global_batch=128)
    vary = {"hbm_bw": Range(1e12, 4e12, log=True), "tp": [1, 2, 4, 8]}
    a = sweep(GPT["model"], GPT["hardware"], base, vary=vary, samples=5000, seed=1,
              precision="float32", chunk_size=CHUNK)
    b = sweep(GPT["model"], GPT["hardware"], base, vary=vary, samples=5000, seed=1,
              precision="float32", chunk_size=4096)
    for col in ("hbm_bw", "tp", "valid"):
        np.testing.assert_array_equal(a[col], b[col])
    for col in ("step_time", "mem_total"):
        np.testing.assert_allclose(a[col], b[col], rtol=1e-6)
    # a shorter sample is a prefix of a longer one with the same seed
    c = sweep(GPT["model"], GPT["hardware"], base, vary=vary, samples=300, seed=1,
              precision="float32")
    np.testing.assert_array_equal(c["hbm_bw"], a["hbm_bw"][:300])
    np.testing.assert_array_equal(c["tp"], a["tp"][:300])


def test_sweep_too_large_for_memory_is_refused_before_computing(monkeypatch):
    """`sweep --samples 1e9` used to die with MemoryError after allocating: now a one-line
    error names the rows and the memory they need, before anything is evaluated."""
    import symcost.sweep as SW

    monkeypatch.setattr(SW, "available_memory", lambda: 24 * 2**30)
    with pytest.raises(SweepError, match=r"samples: 1,000,000,000 rows need about \d+\.\d GiB "
                                         r"in memory and this machine has 24\.0 GiB"):
        sweep(GPT["model"], GPT["hardware"], vary={"tp": [1, 2]}, samples=10**9)


def test_progress_is_a_callback_of_rows_done():
    """The core reports progress through a callback (no progress bar drawn by the core)."""
    calls = []
    sweep(GPT["model"], GPT["hardware"], vary={"tp": [1, 2]}, samples=10_000, chunk_size=4096,
          progress=lambda done, total: calls.append((done, total)))
    assert calls == [(4096, 10_000), (8192, 10_000), (10_000, 10_000)]


def test_cli_progress_bar_only_on_a_terminal(monkeypatch):
    import io

    from symcost.cli.common import ProgressBar

    with ProgressBar("sweep", enabled=False) as cb:
        assert cb is None
    monkeypatch.setattr("sys.stderr", io.StringIO())          # not a terminal
    with ProgressBar("sweep") as cb:
        assert cb is None
