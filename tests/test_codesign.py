"""Tests of the hardware cost model and the co-design search (``symcost codesign``)."""

from __future__ import annotations

import importlib
import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from hwspecs import load_hardware
from optimizers.codesign import (COMPUTE_TIED, _hw_inputs, _pareto, _refine_hardware,
                                 _step_time_value_and_grad, codesign)
from optimizers.cost_model import HW_VARIABLES, CostModel, hardware_values
from optimizers.evaluate import base_inputs, candidate_inputs, evaluate_float64
from optimizers.space import SearchError, enumerate_space
from symcost import ConfigError, get_model

HW = "a100-sxm4-80gb"
#: the module (``optimizers.codesign`` the attribute is the function of the same name)
codesign_mod = importlib.import_module("optimizers.codesign")
RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("SYMCOST_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def test_cost_model_hand_computed():
    cm = CostModel()
    hw = hardware_values(load_hardware(HW))
    # 312 TFLOP/s, 2.039 TB/s, 80 GiB (85.9e9 B), 300 GB/s NVLink, 25 GB/s IB (a100-sxm4-80gb)
    expected = 4000 + 1.2 * 312 + 224 * 2.039 + 15 * 80 * 2**30 / 1e9 + 5.7 * 300 + 40 * 25
    assert float(cm.per_gpu(hw)) == pytest.approx(expected, rel=1e-12)
    assert sum(cm.breakdown(hw).values()) == pytest.approx(expected, rel=1e-12)
    assert set(cm.sources) >= {"c_flops", "c_hbm_cap", "c_hbm_bw", "c_intra", "c_inter", "base"}
    with pytest.raises(ConfigError, match="c_flops"):
        CostModel(c_flops=-1)


def test_pareto_flags():
    cost = np.array([1.0, 2.0, 2.0, 3.0, 4.0])
    step = np.array([5.0, 3.0, 4.0, 3.0, 1.0])
    assert _pareto(cost, step).tolist() == [True, True, False, False, True]


def test_step_time_gradient_matches_finite_differences():
    import jax

    model = get_model("gpt-7.5b")
    hw = load_hardware(HW)
    space = enumerate_space(model, hw, 64, 256)
    base = base_inputs(model, hw, "bf16", 2048, 256, True)
    ref = np.array([base[n] for n in HW_VARIABLES])
    tied = np.array([base[n] / base["peak_flops_16"] for n in COMPUTE_TIED])
    names, vg = _step_time_value_and_grad()
    rng = np.random.default_rng(0)
    for i in rng.choice(len(space), 4, replace=False):
        cfg = {k: v[i:i + 1] for k, v in space.columns.items()}
        inp = candidate_inputs(base, cfg)
        args = np.array([float(np.asarray(inp[n]).reshape(-1)[0]) for n in names])
        x = rng.uniform(-0.5, 0.5, len(ref))
        with jax.enable_x64(True):
            v, g = vg(x, args, ref, tied)
        # value agrees with the numpy float64 evaluation at the same hardware
        direct = evaluate_float64(candidate_inputs(_hw_inputs(base, ref, np.exp(x)), cfg),
                                  ("step_time",))["step_time"][0]
        assert float(v) == pytest.approx(direct, rel=1e-12)
        h = 1e-6
        for j in range(len(ref)):
            e = np.zeros(len(ref))
            e[j] = h
            fp = evaluate_float64(candidate_inputs(_hw_inputs(base, ref, np.exp(x + e)), cfg),
                                  ("step_time",))["step_time"][0]
            fm = evaluate_float64(candidate_inputs(_hw_inputs(base, ref, np.exp(x - e)), cfg),
                                  ("step_time",))["step_time"][0]
            fd = (fp - fm) / (2 * h)
            assert float(g[j]) == pytest.approx(fd, rel=1e-5, abs=1e-9 * float(v))


def test_codesign_rows_respect_budget_memory_and_validity():
    model = get_model("gpt-7.5b")
    budgets = [7000.0, 12000.0]
    df = codesign(model, HW, 64, 256, budgets=budgets, popsize=6, maxiter=10, rounds=2)
    ok = df[df["status"] == "ok"]
    assert set(ok["design"]) == {"reference", "codesign"}
    cm = CostModel()
    hw = load_hardware(HW)
    base = base_inputs(model, hw, "bf16", 2048, 256, True)
    ref = np.array([base[n] for n in HW_VARIABLES])
    for r in ok.to_dict(orient="records"):
        vals = {"peak_flops_16": r["peak_tflops"] * 1e12, "hbm_bw": r["hbm_tbps"] * 1e12,
                "hbm_cap": r["hbm_gib"] * 2**30, "intra_bw": r["intra_gbps"] * 1e9,
                "inter_bw": r["inter_gbps"] * 1e9}
        assert float(cm.per_gpu(vals)) == pytest.approx(r["cost_usd_per_gpu"], rel=1e-9)
        if r["design"] == "codesign":
            assert r["cost_usd_per_gpu"] <= r["budget_usd_per_gpu"] * (1 + 1e-9)
            mult = np.array([vals[n] for n in HW_VARIABLES]) / ref
            assert np.all(mult >= 0.25 - 1e-9) and np.all(mult <= 4 + 1e-9)
        cfg = {k: np.atleast_1d(r[k]) for k in ("num_gpus", "tp", "cp", "pp", "dp", "ep",
                                                "micro_batch", "vpp", "zero")}
        cfg.update(recompute=np.atleast_1d(["none", "selective", "full"].index(r["recompute"])),
                   sp=np.atleast_1d(int(r["sp"])), dp_overlap=np.atleast_1d(int(r["dp_overlap"])),
                   tp_overlap=np.atleast_1d(int(r["tp_overlap"])))
        out = evaluate_float64(candidate_inputs(
            _hw_inputs(base, ref, np.array([vals[n] for n in HW_VARIABLES]) / ref), cfg),
            ("step_time", "mem_headroom"))
        assert out["mem_headroom"][0] >= 0
        assert out["step_time"][0] == pytest.approx(r["step_time"], rel=1e-12)
    # a budget at or above the reference's cost is never slower than the reference
    ref_row = ok[ok["design"] == "reference"].iloc[0]
    # capacity in GiB, as hwspecs YAMLs state it: the 80GB A100 reads back as 80
    assert ref_row["hbm_gib"] == pytest.approx(80.0, rel=1e-12)
    assert ref_row["mem_gib"] * 2**30 <= hw.hbm_capacity
    rich = ok[(ok["design"] == "codesign")
              & (ok["budget_usd_per_gpu"] >= ref_row["cost_usd_per_gpu"])]
    assert len(rich) and (rich["step_time"] <= ref_row["step_time"] * (1 + 1e-9)).all()
    assert df["pareto"].any()


def test_refinement_rejects_a_non_finite_gradient(monkeypatch):
    """A NaN in the step-time gradient makes the refinement infeasible (None), instead of
    being replaced by 0 and steering SLSQP blindly; a finite gradient refines normally."""
    import jax.numpy as jnp

    model = get_model("gpt-7.5b")
    hw = load_hardware(HW)
    space = enumerate_space(model, hw, 64, 256)
    base = base_inputs(model, hw, "bf16", 2048, 256, True)
    ref = np.array([base[n] for n in HW_VARIABLES])
    cols = {k: v[:1] for k, v in space.columns.items()}
    lo, hi = np.full(len(ref), 0.25), np.full(len(ref), 4.0)
    args = (base, ref, cols, 20000.0, CostModel(), lo, hi, 1.0, np.zeros(len(ref)))
    good = _refine_hardware(*args)
    assert good is not None and np.isfinite(good[1])
    names, vg = _step_time_value_and_grad()

    def nan_grad(x, a, r, ratio8):
        v, g = vg(x, a, r, ratio8)
        return v, g.at[1].set(jnp.nan)

    monkeypatch.setattr(codesign_mod, "_step_time_value_and_grad", lambda: (names, nan_grad))
    assert _refine_hardware(*args) is None


def test_codesign_bad_input():
    model = get_model("gpt-7.5b")
    df = codesign(model, HW, 64, 256, budgets=[100.0], popsize=4, maxiter=2)
    bad = df[df["design"] == "codesign"].iloc[0]
    assert bad["status"].startswith("infeasible: the cheapest hardware")
    with pytest.raises(ConfigError, match="bounds: unknown"):
        codesign(model, HW, 64, 256, bounds={"sram": (1, 2)})
    with pytest.raises(ConfigError, match="bounds: hbm_bw"):
        codesign(model, HW, 64, 256, bounds={"hbm_bw": (2, 1)})
    with pytest.raises(SearchError, match="even with"):
        codesign("gpt3-175b", HW, 2, 8, bounds={"hbm_cap": (0.5, 1.0)})
    with pytest.raises(SearchError, match="no valid configuration"):
        codesign(model, HW, 64, 256, fix={"tp": 64})


def test_cli_codesign_json_and_plot(tmp_path):
    from symcost.cli import app

    png = tmp_path / "front.png"
    out = RUNNER.invoke(app, ["codesign", "--model", "gpt-7.5b", "--hardware", HW,
                              "--num-gpus", "64", "--global-batch", "256", "--budget", "9000",
                              "--popsize", "4", "--maxiter", "4", "--json", "--plot", str(png)])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["reference"] == HW and len(d["rows"]) == 2
    assert all(not (isinstance(v, float) and math.isnan(v)) for r in d["rows"] for v in r.values())
    assert "sources" in d["cost_model"]
    assert png.exists() and png.stat().st_size > 1000
    out = RUNNER.invoke(app, ["codesign", "--model", "gpt-7.5b", "--hardware", HW,
                              "--num-gpus", "64", "--global-batch", "256", "--bound", "x=1"])
    assert out.exit_code == 2 and out.output.startswith("error: --bound")
