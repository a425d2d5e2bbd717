"""Tests of the per-GEMM roofline (``symcost.roofline``, ``symcost roofline``) and the DRAM
study (``symcost dram-study``)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from hwspecs import load_hardware
from symcost.cli import app
from symcost.cli.plots import plot_roofline
from symcost.infer_api import InferenceConfigError
from symcost.roofline import (HBM_TECHNOLOGIES, OPERATORS, PHASES, dram_study,
                              roofline_table)

RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})
GPUS = ["a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200"]


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYMCOST_CACHE_DIR", str(tmp_path_factory.mktemp("symcost-cache")))
        yield


@pytest.fixture(scope="module")
def table():
    return roofline_table("llama-2-70b", GPUS, batch=1, input_len=2048, output_len=128,
                          dtype="bf16")


def test_every_gpu_phase_and_operator_is_listed(table):
    assert len(table) == len(GPUS) * len(PHASES) * len(OPERATORS)
    assert list(dict.fromkeys(table["hardware"])) == GPUS


def test_ridge_is_peak_over_bandwidth(table):
    for name in GPUS:
        hw = load_hardware(name)
        sub = table[(table["hardware"] == name) & (table["op"] == "mlp_up")]
        assert (sub["ridge"] == hw.peak("bf16") / hw.hbm_bandwidth).all()
        assert (sub["bandwidth"] == hw.hbm_bandwidth).all()


def test_decode_qkv_gemv_hand_checked(table):
    # batch 1, bf16, TP 1: [1 x 8192] @ [8192 x (64 + 2*8)*128]
    n, k = (64 + 16) * 128, 8192
    r = table[(table["hardware"] == "h100-sxm5-80gb") & (table["phase"] == "decode")
              & (table["op"] == "qkv_proj")].iloc[0]
    assert r["flops"] == 2 * n * k
    assert r["bytes"] == 2 * (k + n) + 2 * n * k
    assert r["intensity"] == pytest.approx(2 * n * k / (2 * (k + n) + 2 * n * k))
    assert r["bound"] == "memory"
    assert r["attainable_flops"] == pytest.approx(r["intensity"] * 3350e9)


def test_decode_memory_bound_prefill_compute_bound(table):
    gemms = table["op"].isin(["qkv_proj", "out_proj", "mlp_up", "mlp_down"])
    assert (table[gemms & (table["phase"] == "decode")]["bound"] == "memory").all()
    assert (table[gemms & (table["phase"] == "prefill")]["bound"] == "compute").all()
    assert (table["attainable_flops"] <= table["peak_flops"] * (1 + 1e-12)).all()


def test_large_decode_batch_crosses_the_ridge():
    t = roofline_table("llama-2-70b", ["h100-sxm5-80gb"], batch=1024, input_len=512,
                       output_len=64, dtype="bf16")
    mlp = t[(t["phase"] == "decode") & (t["op"] == "mlp_up")].iloc[0]
    assert mlp["intensity"] > mlp["ridge"] and mlp["bound"] == "compute"
    attn = t[(t["phase"] == "decode") & (t["op"] == "attention")].iloc[0]
    assert attn["bound"] == "memory"  # KV reads: intensity ~ query heads per KV head


def test_fp8_on_a100_is_an_error():
    with pytest.raises(InferenceConfigError, match="a100-sxm4-80gb"):
        roofline_table("llama-2-70b", ["h100-sxm5-80gb", "a100-sxm4-80gb"], dtype="fp8")


def test_plot_writes_a_png(table, tmp_path):
    path = tmp_path / "roof.png"
    plot_roofline(table, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dram_study_monotone_in_bandwidth():
    d = dram_study("llama-3-8b", "h100-sxm5-80gb", stacks=5, batches=(1, 64), dtype="fp8",
                   input_len=1024, output_len=128)
    tech = d[~d["technology"].str.contains("datasheet")]
    assert list(dict.fromkeys(tech["technology"])) == [t["name"] for t in HBM_TECHNOLOGIES]
    for b in (1, 64):
        sub = tech[tech["batch"] == b].sort_values("bandwidth")
        assert np.all(np.diff(sub["tpot_s"]) < 0)  # more bandwidth, faster decode
        assert np.all(np.diff(sub["crossover_batch"]) <= 0)  # compute-bound sooner
        # the bandwidth above which decode is compute-bound does not depend on the DRAM
        assert np.allclose(sub["bw_compute_bound"], sub["bw_compute_bound"].iloc[0], rtol=1e-9)
        bound = sub["bandwidth"] >= sub["bw_compute_bound"]
        assert ((sub["decode_bound"] == "compute") == bound).all()
    hbm3 = tech[(tech["technology"] == "HBM3") & (tech["batch"] == 1)].iloc[0]
    assert hbm3["bandwidth"] == 5 * 819.2e9


def test_cli_roofline_json_and_plot(tmp_path):
    png = tmp_path / "r.png"
    res = RUNNER.invoke(app, ["roofline", "--model", "llama-2-70b", "--hardware", ",".join(GPUS),
                              "--batch", "8", "--plot", str(png), "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert len(d["operators"]) == len(GPUS) * len(PHASES) * len(OPERATORS)
    assert {"intensity_flops_per_byte", "ridge_flops_per_byte", "attainable_flops_per_s",
            "bound"} <= set(d["operators"][0])
    assert png.exists()
    res = RUNNER.invoke(app, ["roofline", "--model", "llama-2-70b", "--hardware",
                              "h100-sxm5-80gb"])
    assert res.exit_code == 0 and "ridge" in res.stdout
    assert "compute" in res.stdout and "memory" in res.stdout
    bad = RUNNER.invoke(app, ["roofline", "--model", "llama-2-70b", "--hardware", "nope"])
    assert bad.exit_code == 2 and bad.stderr.startswith("error: --hardware:")


def test_cli_dram_study_json():
    res = RUNNER.invoke(app, ["dram-study", "--model", "llama-3-8b", "--hardware",
                              "h100-sxm5-80gb", "--batches", "1,32", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert len(d["rows"]) == 2 * (len(HBM_TECHNOLOGIES) + 1)
    bad = RUNNER.invoke(app, ["dram-study", "--model", "llama-3-8b", "--batches", "x"])
    assert bad.exit_code == 2 and "--batches" in bad.stderr
