"""Sensitivity: autodiff elasticities against independent finite differences, hand-derived
identities, 'not limiting' zeros, discrete neighbours, vectorized form, outputs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from symcost import sensitivity as SE
from symcost.api import training_inputs, training_model
from symcost.config import ConfigError, TrainingConfig, resolve
from symcost.models import get_model

# caching off inside the test process: the app callback then leaves JAX's config alone
RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})

MODEL, HW = "gpt-1.7b", "a100-sxm4-80gb"
BASE = TrainingConfig(num_gpus=64, tp=2, pp=2, global_batch=128, recompute="selective")


@pytest.fixture(scope="module")
def result():
    return SE.sensitivity(MODEL, HW, BASE)


def _fd(inputs: dict, name: str, output: str, h: float) -> float:
    """Central difference of ln y in ln x, float64, through the NumPy form of the model."""
    cm = training_model("float64")

    def y(f):
        v = dict(inputs)
        v[name] = v[name] * f
        return float(cm.call_numpy(**{n: v[n] for n in cm.input_names})[output])

    return (math.log(y(math.exp(h))) - math.log(y(math.exp(-h)))) / (2 * h)


def test_autodiff_matches_independent_finite_differences(result):
    inputs = training_inputs(MODEL, HW, BASE)
    checked = 0
    for p in result.parameters:
        if p.method != "autodiff":
            continue
        for o in result.outputs:
            fd1, fd2 = _fd(inputs, p.name, o, 1e-4), _fd(inputs, p.name, o, 1e-5)
            if abs(fd1 - fd2) > 1e-6 * max(1.0, abs(fd1)):
                continue  # a kink within the step: no smooth reference
            assert abs(p.elasticity[o] - fd2) <= 1e-5 * max(1.0, abs(fd2)), (p.name, o)
            checked += 1
    assert checked >= 40


def test_hand_derived_identities(result):
    y = result.outputs["step_time"]
    inputs = training_inputs(MODEL, HW, BASE)
    by = {p.name: p for p in result.parameters}
    # step_time = ... + t_step_overhead: elasticity = t_step_overhead / step_time
    assert by["t_step_overhead"].elasticity["step_time"] == pytest.approx(
        inputs["t_step_overhead"] / y, rel=1e-10)
    # mfu = flops_model / (step_time * n * peak): e_mfu(peak) = -1 - e_step(peak)
    e_step = by["peak_flops_16"].elasticity["step_time"]
    assert by["peak_flops_16"].elasticity["mfu"] == pytest.approx(-1 - e_step, abs=1e-10)
    # eff_gemm only divides peak in GEMMs: the same elasticity when no GEMM is memory-bound
    assert -1 < e_step < 0


def test_per_step_rates_differentiate_their_numerator(result):
    # rates X / step_time: the step time cancels out of output * step_time; the others keep it
    for o in ("mfu", "hfu", "tokens_per_s"):
        q = SE.per_step_numerator(o)
        assert q is not None and "t_step_overhead" not in {s.name for s in q.free_symbols}
    assert {s.name for s in SE.per_step_numerator("tokens_per_s").free_symbols} == {
        "global_batch", "seq_len"}
    for o in ("step_time", "mem_total", "time_forward"):
        assert SE.per_step_numerator(o) is None
    # tokens_per_s = global_batch * seq_len / step_time, by hand: e(x) = [x = seq_len] - e_T(x)
    # (one-row columns, the form sensitivity() evaluates, so the step time's compile is reused)
    inputs = training_inputs(MODEL, HW, BASE)
    ev = SE.elasticities({k: np.array([v], dtype=float) for k, v in inputs.items()},
                         outputs=("tokens_per_s", "mem_total"))
    t = result.outputs["step_time"]
    assert ev["tokens_per_s"]["value"][0] == pytest.approx(
        inputs["global_batch"] * inputs["seq_len"] / t, rel=1e-14)
    by = {p.name: p for p in result.parameters}
    for w in SE.continuous_parameters():
        hand = (w == "seq_len") - by[w].elasticity["step_time"]
        assert ev["tokens_per_s"][w][0] == pytest.approx(hand, abs=1e-12), w
    # a rate asked for without the step time still gets its value
    cm = training_model("float64")
    direct = cm.call_numpy(**{n: inputs[n] for n in cm.input_names})
    for o in ("tokens_per_s", "mem_total"):
        assert ev[o]["value"][0] == pytest.approx(float(direct[o]), rel=1e-12)


def test_not_limiting_and_not_in_formula(result):
    by = {p.name: p for p in result.parameters}
    # bf16 run: the fp8 peak sits in the inactive branch of gemm_peak
    assert by["peak_flops_8"].elasticity["step_time"] == 0.0
    assert by["peak_flops_8"].status["step_time"] == "not limiting"
    assert by["hbm_cap"].status["step_time"] == "not in formula"
    assert by["hbm_bw"].status["mem_total"] == "not in formula"
    assert by["hidden"].status["mem_total"] == "active"
    assert all(p.status["step_time"] in ("active", "not limiting", "not in formula", "kink",
                                         "zero value")
               for p in result.parameters if p.method == "autodiff")


def test_discrete_neighbours_are_the_next_valid_values(result):
    m = get_model(MODEL)
    from hwspecs import load_hardware

    hw = load_hardware(HW)
    cfg = resolve(m, hw, BASE)

    def valid(name, v):
        changes = {name: v}
        if name in ("tp", "pp"):
            changes["dp"] = None
        if name == "dp":
            changes["num_gpus"] = None
        try:
            resolve(m, hw, cfg.replace(**changes))
            return True
        except ConfigError:
            return False

    by = {p.name: p for p in result.parameters}
    for name in SE.DEFAULT_DISCRETE:
        p = by[name]
        assert p.method == "neighbour"
        v0 = getattr(cfg, name)
        for side, direction in ((p.down, -1), (p.up, 1)):
            if side is None:
                continue
            v = int(side["value"])
            assert valid(name, v)
            between = range(v0 + direction, v, direction)
            assert not any(valid(name, x) for x in between), (name, v, list(between))
            for o, e in side["elasticity"].items():
                y0, y1 = result.outputs[o], side["outputs"][o]
                assert e == pytest.approx(math.log(y1 / y0) / math.log(v / v0))
    # tp=2 on 64 GPUs with 24 heads: 1 below, 3 above (dp = 64/(3*2) is not an integer: 4)
    assert by["tp"].down["value"] == 1 and by["tp"].up["value"] == 4


def test_vectorized_elasticities_match_point_analysis(result):
    cfgs = [BASE, BASE.replace(tp=4, dp=None), BASE.replace(recompute="full", micro_batch=2)]
    rows = [training_inputs(MODEL, HW, c) for c in cfgs]
    table = {k: np.array([r[k] for r in rows], dtype=float) for k in rows[0]}
    ev = SE.elasticities(table)
    by = {p.name: p for p in result.parameters}
    for o in result.outputs:
        assert ev[o]["value"][0] == pytest.approx(result.outputs[o], rel=1e-12)
        for w in SE.continuous_parameters():
            assert ev[o][w][0] == pytest.approx(by[w].elasticity[o], rel=1e-12, abs=1e-15)
    # second configuration against its own finite differences
    e = ev["step_time"]["hbm_bw"][1]
    assert e == pytest.approx(_fd(rows[1], "hbm_bw", "step_time", 1e-5), abs=1e-6)
    assert all(np.isfinite(v).all() for o in ev.values() for v in o.values())


@pytest.mark.parametrize("fields", [
    dict(tp=1, pp=1, dp=1, global_batch=1),
    dict(tp=2, pp=1, dp=4, global_batch=8, zero=3, dp_overlap=False),
    dict(tp=8, pp=4, dp=2, vpp=2, global_batch=16, recompute="full"),
])
def test_elasticities_finite_at_edge_configurations(fields):
    r = training_inputs(MODEL, HW, TrainingConfig(**fields))
    ev = SE.elasticities({k: np.array([v], dtype=float) for k, v in r.items()})
    assert all(np.isfinite(v).all() for o in ev.values() for v in o.values())


def test_result_outputs_json_and_plot(result, tmp_path):
    from symcost.cli.plots import tornado_chart
    from symcost.cli.render import sensitivity_table

    d = result.to_dict()
    json.dumps(d)  # serializable, no NaN
    assert {p["name"] for p in d["parameters"]} >= {"hbm_bw", "tp", "eff_gemm"}
    path = tmp_path / "tornado.png"
    tornado_chart(result, path, "step_time")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with pytest.raises(SE.SensitivityError):
        tornado_chart(result, path, "hfu")
    from rich.console import Console

    con = Console(width=200)
    with con.capture() as cap:
        con.print(sensitivity_table(result))
    assert "not limiting" in cap.get()


def test_bad_requests():
    with pytest.raises(SE.SensitivityError, match="outputs"):
        SE.sensitivity(MODEL, HW, BASE, outputs=["speed"])
    with pytest.raises(SE.SensitivityError, match="discrete"):
        SE.sensitivity(MODEL, HW, BASE, discrete=["hbm_bw"])
    with pytest.raises(SE.SensitivityError, match="not differentiable"):
        SE.elasticities({}, wrt=["tp"])
    with pytest.raises(ConfigError):
        SE.sensitivity(MODEL, HW, BASE.replace(tp=5, dp=None))


def test_cli_sensitivity_json():
    from symcost.cli import app

    res = RUNNER.invoke(app, [
        "sensitivity", "--model", MODEL, "--hardware", HW, "--num-gpus", "64", "--tp", "2",
        "--pp", "2", "--global-batch", "128", "--recompute", "selective", "--json",
        "--discrete", "tp,layers"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    names = [p["name"] for p in d["parameters"]]
    assert "layers" in names and "hbm_bw" in names
    bad = RUNNER.invoke(app, ["sensitivity", "--model", MODEL, "--hardware", HW,
                              "--discrete", "bogus"])
    assert bad.exit_code == 2 and "discrete" in bad.output
