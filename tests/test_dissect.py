"""Speed-up attribution (optimizers.dissect): Shapley values and integrated gradients."""

from __future__ import annotations

import dataclasses
import json
import math

import jsonschema
import pytest
from typer.testing import CliRunner

from hwspecs import load_hardware
from optimizers.dissect import (FACTORS, DissectError, dissect, hybrid, integrated_gradients,
                                shapley_values)
from optimizers.search import search
from symcost.api import training_inputs
from symcost.cli import app
from symcost.config import TrainingConfig
from symcost.schema import COMMAND_SCHEMAS

MODEL = "gpt-1.7b"
A, B = "a100-sxm4-80gb", "h100-sxm5-80gb"
N, GB = 8, 32


def test_shapley_values_of_a_hand_computed_game():
    # v({})=0, v(a)=1, v(b)=2, v(ab)=4: phi_a = (1-0)/2 + (4-2)/2 = 1.5, phi_b = 2.5
    v = {frozenset(): 0.0, frozenset("a"): 1.0, frozenset("b"): 2.0, frozenset("ab"): 4.0}
    assert shapley_values(v, ["a", "b"]) == pytest.approx({"a": 1.5, "b": 2.5}, abs=1e-12)
    # three players, additive game: each gets its own value
    w = {frozenset(s): sum({"x": 1.0, "y": 2.0, "z": 3.0}[c] for c in s)
         for s in ["", "x", "y", "z", "xy", "xz", "yz", "xyz"]}
    assert shapley_values(w, ["x", "y", "z"]) == pytest.approx({"x": 1, "y": 2, "z": 3})


@pytest.fixture(scope="module")
def result():
    return dissect(MODEL, A, B, N, GB, dtype_from="bf16", dtype_to="fp8", max_tp=8)


def test_shapley_is_log_additive_and_matches_direct_searches(result):
    assert sum(result.shapley.values()) == pytest.approx(math.log(result.speedup), rel=1e-12)
    assert math.prod(result.factor_speedups().values()) == pytest.approx(result.speedup)
    # the endpoints are the best layouts of the two real systems (second implementation)
    t_a = search(MODEL, A, N, GB, dtype="bf16", top=1, max_tp=8).table["step_time"].iloc[0]
    t_b = search(MODEL, B, N, GB, dtype="fp8", top=1, max_tp=8).table["step_time"].iloc[0]
    assert result.step_time_from_s == pytest.approx(t_a, rel=1e-12)
    assert result.step_time_to_s == pytest.approx(t_b, rel=1e-12)
    assert result.speedup == pytest.approx(t_a / t_b, rel=1e-12)
    # a hybrid's value is the search on that hybrid
    spec, dt = hybrid(load_hardware(A), load_hardware(B), ["hbm_bandwidth", "compute"], "bf16",
                      "fp8")
    rec = next(r for r in result.hybrids if set(r["factors"]) == {"hbm_bandwidth", "compute"})
    direct = search(MODEL, spec, N, GB, dtype=dt, top=1, max_tp=8).table["step_time"].iloc[0]
    assert rec["step_time_s"] == pytest.approx(direct, rel=1e-12)


def test_attribution_does_not_depend_on_the_order_of_factors(result):
    other = dissect(MODEL, A, B, N, GB, dtype_from="bf16", dtype_to="fp8", max_tp=8,
                    factors=list(reversed(FACTORS)))
    for f in result.factors:
        assert other.shapley[f] == pytest.approx(result.shapley[f], abs=1e-12)


def test_integrated_gradients_are_complete(result):
    ig = result.integrated_gradients
    assert sum(ig.values()) == pytest.approx(math.log(result.speedup), rel=1e-12)
    assert abs(result.ig_completeness_error) < 1e-4


def test_one_smooth_factor_both_methods_agree():
    """Only HBM bandwidth differs and the layout is fixed: the model is smooth along the
    path, so Shapley (the whole log speed-up) and integrated gradients agree."""
    a = load_hardware(A)
    b = dataclasses.replace(a, name="a100-fast-hbm", hbm_bandwidth=2.5 * a.hbm_bandwidth)
    layout = TrainingConfig(num_gpus=N, tp=2, global_batch=GB, micro_batch=4, dtype="bf16")
    r = dissect(MODEL, a, b, N, GB, layout=layout)
    assert r.factors == ["hbm_bandwidth"]
    assert r.shapley["hbm_bandwidth"] == pytest.approx(math.log(r.speedup), rel=1e-12)
    assert r.integrated_gradients["hbm_bandwidth"] == pytest.approx(math.log(r.speedup),
                                                                    rel=1e-3)
    assert abs(r.integrated_gradients["discrete_and_layout"]) < 1e-3
    assert r.speedup > 1.0
    assert "agree" in r.explanation


def test_same_system_is_no_speedup():
    r = dissect(MODEL, A, A, N, GB)
    assert r.factors == [] and r.speedup == pytest.approx(1.0)


def test_integrated_gradients_of_one_parameter_equal_the_log_change():
    """With one moving parameter the path integral of d ln T / d ln x is the log change of T
    (fundamental theorem of calculus): a check of the quadrature and of the gradients against
    two direct evaluations of the model."""
    inp = training_inputs(MODEL, A, TrainingConfig(num_gpus=N, tp=2, global_batch=GB))
    lo = dict(inp, t_step_overhead=0.0)
    hi = dict(lo, eff_gemm=lo["eff_gemm"] * 0.5)
    attr, total = integrated_gradients(lo, hi, {"kernels": ("eff_gemm",)})
    assert attr["kernels"] == pytest.approx(total, rel=1e-4)


def test_unknown_factor_is_a_clear_error():
    with pytest.raises(DissectError, match="factors: unknown bogus"):
        dissect(MODEL, A, B, N, GB, factors=["bogus"])


def test_cli_json_validates_and_plot_is_written(tmp_path):
    png = tmp_path / "waterfall.png"
    res = CliRunner(env={"SYMCOST_CACHE_DIR": "off"}).invoke(app, [
        "dissect", "--model", MODEL, "--from", A, "--to", B, "--num-gpus", str(N),
        "--global-batch", str(GB), "--to-dtype", "fp8", "--max-tp", "8", "--json",
        "--plot", str(png)])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    jsonschema.validate(d, COMMAND_SCHEMAS["dissect"])
    assert d["schema_version"] >= 1 and png.stat().st_size > 10_000
    assert math.prod(d["shapley_speedup"].values()) == pytest.approx(d["speedup"], rel=1e-9)


# ----------------------------------------------------------------------------- serving
def test_serving_shapley_is_log_additive_and_matches_a_direct_grid():
    from optimizers.dissect import dissect_serving
    from symcost.infer_api import predict_inference

    r = dissect_serving("llama-2-7b", A, B, 2, input_len=512, output_len=64,
                        tpot_target_s=0.03, dtype_to="fp8")
    assert sum(r.shapley.values()) == pytest.approx(math.log(r.speedup), rel=1e-12)
    assert sum(r.integrated_gradients.values()) == pytest.approx(math.log(r.speedup))
    assert abs(r.ig_completeness_error) < 1e-2
    # second implementation of the baseline's value: predict_inference at the chosen layout,
    # at its neighbouring batches and over the powers of two (the grid before 2026-11-27) at
    # both tensor-parallel degrees; every integer batch cap is a candidate, so the chosen one
    # beats them all
    def value(tp: int, batch: int) -> float:
        v = predict_inference("llama-2-7b", A, tp=tp, num_gpus=2, batch=batch, input_len=512,
                              output_len=64, check_memory=False).values
        ok = (v["serve_iteration"] <= 0.03 and v["serve_max_batch"] >= 1
              and v["serve_batch"] >= batch)
        return float(v["throughput"]) if ok else 0.0

    rec = next(h for h in r.hybrids if not h["factors"])
    tp0, b0 = int(r.layout_from["tp"]), int(r.layout_from["batch"])
    assert rec["throughput_tokens_per_s"] == pytest.approx(value(tp0, b0), rel=1e-12)
    others = [value(tp, b) for tp in (1, 2)
              for b in {*(2**k for k in range(13)), *range(max(b0 - 3, 1), b0 + 4)}]
    assert max(others) == pytest.approx(rec["throughput_tokens_per_s"], rel=1e-12)


def test_serving_target_nothing_meets_is_a_clear_error():
    from optimizers.dissect import dissect_serving

    with pytest.raises(DissectError, match=r"within tpot 0.001 ms"):
        dissect_serving("llama-2-7b", A, B, 1, input_len=512, output_len=64,
                        tpot_target_s=1e-6)
