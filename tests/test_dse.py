"""Design-space exploration over process node x memory x network (optimizers.dse)."""

from __future__ import annotations

import json

import jsonschema
import pytest
from typer.testing import CliRunner

from hwspecs import HardwareSpecError
from hwspecs.technology import derive_accelerator
from optimizers.dissect import serving_value
from optimizers.dse import CATEGORIES, DSEError, dse_serving, dse_training
from optimizers.search import search
from symcost.cli import app
from symcost.params import load_params
from symcost.schema import COMMAND_SCHEMAS

DESIGN = {"die_area_mm2": 814.0, "power_w": 700.0, "reference": "h100-sxm5-80gb"}


def test_training_points_are_searches_on_derived_chips():
    df = dse_training("gpt-1.7b", 8, 32, nodes=("12", "7", "3"), memories=("hbm3",),
                      networks=("ib-ndr",), max_tp=8)
    assert list(df["node"]) == ["12", "7", "3"] and df["speedup"].iloc[0] == 1.0
    # a newer node at the same area and power is never slower (monotone peak)
    assert df["step_time_s"].is_monotonic_decreasing
    shares = df[[f"{c}_share" for c in CATEGORIES]].sum(axis=1)
    assert ((shares > 0.5) & (shares <= 1.0 + 1e-9)).all()
    # second implementation: the step time is the search on the derived accelerator
    hw = derive_accelerator("7", "hbm3", "nvlink5", "ib-ndr", **DESIGN)
    t = search("gpt-1.7b", hw, 8, 32, top=1, max_tp=8).table["step_time"].iloc[0]
    assert df["step_time_s"].iloc[1] == pytest.approx(t, rel=1e-12)


def test_serving_points_and_memory_generations():
    df = dse_serving("llama-2-7b", 1, input_len=512, output_len=64, tpot_target_s=0.03,
                     nodes=("7",), memories=("hbm2e", "hbm3e"), networks=("ib-ndr",))
    assert df["speedup"].iloc[1] > 1.0           # faster HBM serves more at the same target
    assert set(df["bound"]) <= set(CATEGORIES)
    hw = derive_accelerator("7", "hbm3e", "nvlink5", "ib-ndr", **DESIGN)
    thr, _, _ = serving_value("llama-2-7b", hw, 1, "bf16", 512, 64, 0.03, load_params())
    assert df["throughput_tokens_per_s"].iloc[1] == pytest.approx(thr, rel=1e-12)


def test_bad_axes_are_clear_errors():
    with pytest.raises(DSEError, match="every axis needs at least one value"):
        dse_training("gpt-1.7b", 8, 32, nodes=())
    with pytest.raises(HardwareSpecError, match="node"):
        dse_training("gpt-1.7b", 8, 32, nodes=("4",), memories=("hbm3",), networks=("ib-ndr",))


def test_cli_dse_json_and_heatmap(tmp_path):
    png = tmp_path / "dse.png"
    res = CliRunner(env={"SYMCOST_CACHE_DIR": "off"}).invoke(app, [
        "dse", "--model", "gpt-1.7b", "--num-gpus", "8", "--global-batch", "32",
        "--nodes", "7,5", "--memories", "hbm3,hbm3e", "--networks", "ib-ndr", "--max-tp", "8",
        "--json", "--plot", str(png)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    jsonschema.validate(d, COMMAND_SCHEMAS["dse"])
    assert len(d["points"]) == 4 and png.stat().st_size > 10_000


def test_energy_per_token_and_progress():
    """Energy per token is the chips' power budget over their token rate: checked by hand
    from the step time; progress reports every point."""
    calls = []
    df = dse_training("gpt-1.7b", 8, 32, nodes=("7", "5"), memories=("hbm3",),
                      networks=("ib-ndr",), max_tp=8,
                      progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 2), (2, 2)]
    seq = 2048                                     # gpt-1.7b's training sequence
    want = 8 * DESIGN["power_w"] * df["step_time_s"] / (32 * seq)
    assert df["energy_per_token_j"].to_numpy() == pytest.approx(want.to_numpy(), rel=1e-12)
    assert df["energy_per_token_j"].iloc[1] < df["energy_per_token_j"].iloc[0]
