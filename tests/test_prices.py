"""Price model (hwspecs.prices) and its use by dse and dissect: hand-computed costs."""

from __future__ import annotations

import json
import math
from pathlib import Path

import jsonschema
import pytest
import yaml
from typer.testing import CliRunner

from hwspecs import HardwareSpecError, list_hardware
from hwspecs.prices import (HOURS_PER_YEAR, PriceModel, cost_per_token, list_price,
                            load_prices)
from optimizers.dissect import dissect_serving
from optimizers.dse import dse_training
from symcost.cli import app
from symcost.schema import COMMAND_SCHEMAS

DATA = Path(__file__).resolve().parents[1] / "hwspecs" / "data" / "prices.yaml"


def test_price_model_by_hand() -> None:
    p = PriceModel(capex_usd_per_gpu=30000.0, amortization_years=5.0, usd_per_kwh=0.08, pue=1.2)
    # 30000 / (5 * 8766) + 0.7 kW * 1.2 * 0.08 = 0.684463 + 0.0672
    assert p.usd_per_gpu_hour(700.0) == pytest.approx(30000 / (5 * 8766) + 0.0672, rel=1e-12)
    assert HOURS_PER_YEAR == 365.25 * 24
    assert PriceModel(rent_usd_per_gpu_hour=2.0).usd_per_gpu_hour(1e6) == 2.0   # rent only
    # 1024 GPUs at $2/h making 1e6 tokens/s: 1024 * 2 / 3600 / 1e6 USD per token
    assert cost_per_token(2.0, 1024, 1e6) == pytest.approx(1024 * 2 / 3600 / 1e6, rel=1e-15)


@pytest.mark.parametrize("kwargs, match", [
    (dict(rent_usd_per_gpu_hour=-1.0), "rent_usd_per_gpu_hour"),
    (dict(rent_usd_per_gpu_hour=math.nan), "rent_usd_per_gpu_hour"),
    (dict(rent_usd_per_gpu_hour=1.0, pue=0.9), "pue"),
    (dict(capex_usd_per_gpu=1.0, amortization_years=0.0), "amortization_years"),
    (dict(), "all 0"),
])
def test_bad_price_models(kwargs: dict, match: str) -> None:
    with pytest.raises(HardwareSpecError, match=match):
        PriceModel(**kwargs)


def test_quotes_are_dated_sourced_and_per_gpu() -> None:
    prices = load_prices()
    assert list_price("h100-sxm5-80gb").usd_per_gpu_hour == pytest.approx(2.99)
    assert list_price("h100-sxm5-80gb", "aws-2023").usd_per_gpu_hour == pytest.approx(98.32 / 8)
    assert list_price("a100-sxm4-80gb").usd_per_gpu_hour == pytest.approx(1.79)
    assert list_price("b200").usd_per_gpu_hour == pytest.approx(4.99)
    assert prices.capex["a100-sxm4-40gb"].usd_per_gpu == pytest.approx(199000 / 8)
    hw = set(list_hardware())
    assert set(prices.quotes) <= hw and set(prices.capex) <= hw
    doc = yaml.safe_load(DATA.read_text(encoding="utf-8"))
    for hw_id, items in doc["quotes"].items():
        for q in items:
            assert q["date"] and len(q["source"]) > 40, hw_id
    assert set(doc["tco"]["sources"]) == {"amortization_years", "usd_per_kwh", "pue"}
    assert "prices" not in list_hardware()
    with pytest.raises(HardwareSpecError, match="no 'lambda-2025' quote for 'rtx-3090'"):
        list_price("rtx-3090")


def test_dse_cost_per_token_from_the_step_time() -> None:
    price = PriceModel(rent_usd_per_gpu_hour=3.0, capex_usd_per_gpu=20000.0,
                       amortization_years=4.0, usd_per_kwh=0.1, pue=1.5)
    df = dse_training("gpt-1.7b", 8, 32, nodes=("7", "5"), memories=("hbm3",),
                      networks=("ib-ndr",), max_tp=8, price=price)
    usd_h = 3.0 + 20000.0 / (4 * 8766) + 0.7 * 1.5 * 0.1          # 700 W design budget
    want = 8 * usd_h / 3600 * df["step_time_s"] / (32 * 2048)     # gpt-1.7b: 2,048 tokens
    assert df["gpu_hour_cost_usd"].to_numpy() == pytest.approx([usd_h, usd_h], rel=1e-12)
    assert df["cost_per_token_usd"].to_numpy() == pytest.approx(want.to_numpy(), rel=1e-12)
    assert (df["tokens_per_usd"] * df["cost_per_token_usd"]).to_numpy() == pytest.approx([1, 1])
    assert "cost_per_token_usd" not in dse_training(
        "gpt-1.7b", 8, 32, nodes=("7",), memories=("hbm3",), networks=("ib-ndr",), max_tp=8)


def test_dissect_cost_reduction_is_speedup_times_price_ratio() -> None:
    r = dissect_serving("llama-2-7b", "a100-sxm4-80gb", "h100-sxm5-80gb", 1, input_len=512,
                        output_len=64, tpot_target_s=0.03,
                        factors=("compute", "hbm_bandwidth"))
    c = r.costs(PriceModel(rent_usd_per_gpu_hour=1.79), PriceModel(rent_usd_per_gpu_hour=2.99), 1)
    assert c["cost_reduction"] == pytest.approx(r.speedup * 1.79 / 2.99, rel=1e-12)
    assert c["from"]["cost_per_token_usd"] == pytest.approx(1.79 / 3600 / r.tokens_per_s_from)


def test_cli_dissect_list_prices_json_and_errors() -> None:
    runner = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})
    args = ["dissect", "--model", "llama-2-7b", "--from", "a100-sxm4-80gb", "--to",
            "h100-sxm5-80gb", "--num-gpus", "1", "--workload", "serve", "--input-len", "512",
            "--output-len", "64", "--tpot-target-ms", "30"]
    res = runner.invoke(app, [*args, "--list-prices", "lambda-2025", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    jsonschema.validate(d, COMMAND_SCHEMAS["dissect"])
    assert d["cost"]["cost_reduction"] == pytest.approx(d["speedup"] * 1.79 / 2.99, rel=1e-9)
    assert d["cost"]["to"]["gpu_hour_cost_usd"] == pytest.approx(2.99)
    bad = runner.invoke(app, [*args, "--from-price-per-gpu-hour", "2"])
    assert bad.exit_code != 0 and "give both prices or neither" in bad.output
    bad = runner.invoke(app, [*args, "--list-prices", "nowhere"])
    assert bad.exit_code != 0 and "no 'nowhere' quote" in bad.output


def test_cli_dse_price_json() -> None:
    res = CliRunner(env={"SYMCOST_CACHE_DIR": "off"}).invoke(app, [
        "dse", "--model", "gpt-1.7b", "--num-gpus", "8", "--global-batch", "32", "--nodes", "7",
        "--memories", "hbm3", "--networks", "ib-ndr", "--max-tp", "8",
        "--price-per-gpu-hour", "2.5", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    jsonschema.validate(d, COMMAND_SCHEMAS["dse"])
    assert d["price"]["rent_usd_per_gpu_hour"] == 2.5
    assert d["points"][0]["gpu_hour_cost_usd"] == 2.5
    bad = CliRunner().invoke(app, ["dse", "--model", "gpt-1.7b", "--num-gpus", "8",
                                   "--global-batch", "32", "--price-per-gpu-hour", "-1"])
    assert bad.exit_code != 0 and "rent_usd_per_gpu_hour" in bad.output
