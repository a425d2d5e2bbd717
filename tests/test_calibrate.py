"""Tests of ``symcost.calibrate``: parameter recovery, uncertainty, intervals, cross-validation,
parameter files and every bad-input error; and ``symcost calibrate``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from symcost.api import training_inputs
from symcost.calibrate import (DEFAULT_FIT, CalibrationError, bound_warnings, calibrate,
                               calibrate_rows, check_output_path, cross_validate,
                               identifiable_columns, start_params, transfer_missing,
                               write_params)
from symcost.config import TrainingConfig
from symcost.cli import app
from symcost.params import Params, ParamsError, load_params
from symcost.uncertainty import (JACOBIAN_CHUNK, interval_sd, log_step_time_gradient,
                                 log_step_time_jacobian, predict_interval, row_intervals)
from symcost.validate import (evaluate_rows, predict_rows, prepare_rows, stack_inputs,
                              summarize)

RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})
TRUE = {"eff_gemm": 0.55, "eff_attn": 0.28, "eff_hbm": 0.6, "eff_inter": 0.6}
#: the synthetic data identify four parameters (DEFAULT_FIT is a subset of them)
FIT = ("eff_gemm", "eff_attn", "eff_hbm", "eff_inter")
SIZES = [(12, 768, 12), (24, 2048, 16), (32, 4096, 32), (40, 5120, 40)]


def synthetic_rows() -> list[dict]:
    """48 A100 runs spanning model size, sequence length, node count and attention kernel, so
    each of the four default parameters matters for some rows. Sources SYN0..SYN2."""
    rows, i = [], 0
    for L, h, a in SIZES:
        for seq, mb in ((512, 8), (2048, 4), (8192, 1), (32768, 1)):
            for n, note in ((8, "FlashAttention"), (64, "FlashAttention"),
                            (8, "unfused attention")):
                # multi-node FSDP rows at micro-batch 1: their exposed communication
                # (8 NICs per node) makes eff_inter identifiable
                mb_row = mb if n == 8 else 1
                rows.append(dict(
                    case_id=f"SYN{(i // 3) % 3}-{i}", workload="train", model=f"MPT-syn{i}",
                    layers=L, hidden=h, heads=a, kv_heads=a, ffn_hidden=4 * h, seq_len=seq,
                    vocab=50368, global_batch=n * mb_row, micro_batch=mb_row,
                    hardware="a100-sxm4-80gb",
                    n_gpus=n, tp=1, pp=1, zero_stage=3,
                    recompute="none" if seq <= 8192 else "full", dtype="bf16",
                    metric="iteration_time_s", value=1.0, notes=note))
                i += 1
    return rows


def with_params(base: Params, values: dict, gen: str = "ampere") -> Params:
    gens = {g: dict(v) for g, v in base.generations.items()}
    gens[gen].update(values)
    return Params(gens, {"data": "test"})


@pytest.fixture(scope="module")
def base() -> Params:
    """Data-independent start: the shipped file's recorded start values (or the file)."""
    return start_params(load_params())


@pytest.fixture(scope="module")
def synthetic(base):
    """Rows whose 'measured' step times come from the model itself at TRUE, times 3%
    log-normal noise (seeded)."""
    prepared, skipped = prepare_rows(pd.DataFrame(synthetic_rows()))
    assert not skipped
    truth = with_params(base, TRUE)
    step = evaluate_rows(stack_inputs(prepared, truth))["step_time"]
    noise = np.exp(np.random.default_rng(0).normal(0.0, 0.03, len(step)))
    return [dataclasses.replace(r, measured=float(t)) for r, t in zip(prepared, step * noise)]


@pytest.fixture(scope="module")
def fitted(synthetic, base):
    return calibrate_rows(synthetic, base, FIT)


# ------------------------------------------------------------------------ fitting
def test_recovers_known_parameters(fitted):
    f = fitted.fits["ampere"]
    assert f.n_runs == 48 and not f.at_bound and not f.not_identifiable
    for p, v in TRUE.items():
        assert f.values[p] == pytest.approx(v, rel=0.08), p
        assert abs(f.values[p] - v) < 4 * f.stderr[p], p  # stderr is honest
    assert f.sigma == pytest.approx(0.03, rel=0.35)  # residual sd ~ the injected noise
    assert f.dof == 48 - 4


def test_calibration_never_worsens_in_sample_error(fitted, synthetic, base):
    f = fitted.fits["ampere"]
    assert f.cost_end <= f.cost_start
    before = summarize(predict_rows(synthetic, base, intervals=False))["mape_pct"]
    after = summarize(predict_rows(synthetic, fitted.params, intervals=False))["mape_pct"]
    assert after <= before
    assert after < 4.0  # the noise level


def test_runs_reporting_several_metrics_count_once(synthetic, base):
    doubled = synthetic + [dataclasses.replace(r, case_id=r.case_id + "-tps",
                                               metric="tokens_per_s",
                                               measured=r.config.global_batch
                                               * r.config.seq_len / r.measured)
                           for r in synthetic]
    res = calibrate_rows(doubled, base, FIT)
    f = res.fits["ampere"]
    assert f.n_runs == 48 and f.n_rows == 96


def test_jacobian_matches_finite_differences(synthetic, fitted):
    X = stack_inputs(synthetic[:10], fitted.params)
    ls, J = log_step_time_jacobian(X, FIT)
    base_t = evaluate_rows(X)["step_time"]
    assert np.allclose(ls, np.log(base_t), rtol=1e-12)
    for j, p in enumerate(FIT):
        h = 1e-6 * X[p]
        Xp = {**X, p: X[p] + h}
        fd = (np.log(evaluate_rows(Xp)["step_time"]) - np.log(base_t)) / h
        assert np.allclose(J[:, j], fd, rtol=1e-4, atol=1e-6), p
    # more rows than one compiled chunk: the rows of every chunk, in order, unchanged
    reps = JACOBIAN_CHUNK // len(ls) + 2
    ls_many, J_many = log_step_time_jacobian({k: np.tile(v, reps) for k, v in X.items()}, FIT)
    assert len(ls_many) == reps * len(ls) > JACOBIAN_CHUNK
    np.testing.assert_array_equal(ls_many, np.tile(ls, reps))
    np.testing.assert_array_equal(J_many, np.tile(J, (reps, 1)))


#: configurations of the one-configuration gradient check: data-parallel FSDP on one node,
#: multi-node pipeline+tensor parallel with unfused attention, and GQA on H100.
GRAD_CASES = [
    ("gpt-1.7b", "a100-sxm4-80gb", TrainingConfig(num_gpus=8, global_batch=64, zero=3)),
    ("gpt3-175b", "a100-sxm4-80gb", TrainingConfig(num_gpus=1024, tp=8, pp=16,
                                                   global_batch=1536, recompute="full",
                                                   flash_attention=False)),
    ("llama-2-70b", "h100-sxm5-80gb", TrainingConfig(num_gpus=256, tp=8, pp=4,
                                                     global_batch=512, micro_batch=1)),
]


@pytest.mark.parametrize("model, hw, cfg", GRAD_CASES)
def test_numpy_gradient_matches_the_jax_jacobian(model, hw, cfg):
    """predict_interval's gradient (NumPy central differences, no JAX) equals the exact JAX
    Jacobian to 1e-5 relative, for every efficiency parameter that enters the model."""
    X = training_inputs(model, hw, cfg)
    wrt = ("eff_gemm", "eff_attn", "eff_hbm", "eff_inter", "eff_intra", "t_step_overhead")
    log_t, g = log_step_time_gradient(X, wrt)
    ls, J = log_step_time_jacobian({k: np.array([v]) for k, v in X.items()}, wrt)
    assert log_t == pytest.approx(float(ls[0]), rel=1e-13)
    theta = np.array([X[p] for p in wrt])
    # elasticities d log t / d log theta: comparable across parameters of any unit
    e_np, e_jax = g * theta, J[0] * theta
    assert np.abs(e_jax).max() > 0.1
    np.testing.assert_allclose(e_np, e_jax, rtol=1e-5, atol=1e-5 * np.abs(e_jax).max())
    with pytest.raises(KeyError, match="not inputs"):
        log_step_time_gradient(X, ("eff_gemm", "bogus"))


def test_predict_interval_equals_the_vectorized_intervals(fitted):
    """Second implementation: the one-configuration interval (NumPy) equals row_intervals
    (JAX Jacobian) for the same configuration, with the fitted and the shipped parameters."""
    from types import SimpleNamespace

    from hwspecs import load_hardware

    for params in (fitted.params, load_params()):
        for model, hw_id, cfg in GRAD_CASES[:2]:
            out = predict_interval(model, hw_id, cfg, params=params, level=0.9)
            X = {k: np.array([v]) for k, v in training_inputs(model, hw_id, cfg, params).items()}
            lo, hi = row_intervals([SimpleNamespace(hardware=load_hardware(hw_id))], params, X,
                                   level=0.9)
            assert out["step_time_s"]["lo"] == pytest.approx(float(lo[0]), rel=1e-8)
            assert out["step_time_s"]["hi"] == pytest.approx(float(hi[0]), rel=1e-8)


# ------------------------------------------------------------------------ intervals
def test_delta_method_matches_sampling(synthetic, fitted):
    """Second implementation: the parameter part of the predictive variance equals the
    variance of log t over parameters sampled from the fitted covariance."""
    params = fitted.params
    rows = synthetic[:8]
    X = stack_inputs(rows, params)
    names = params.fitted["ampere"]
    cov = np.asarray(params.covariance["ampere"])
    _, sd, _ = interval_sd(rows, params, X)
    sigma = params.provenance["residual_sigma_log"]["ampere"]
    delta_var = sd**2 - sigma**2
    rng = np.random.default_rng(1)
    mean = np.array([params.generations["ampere"][p] for p in names])
    draws = rng.multivariate_normal(mean, cov, size=400)
    logs = []
    for d in draws:
        Xd = {**X, **{p: np.full(len(rows), v) for p, v in zip(names, d)}}
        logs.append(np.log(evaluate_rows(Xd)["step_time"]))
    mc_var = np.var(np.array(logs), axis=0)
    assert np.allclose(delta_var, mc_var, rtol=0.3, atol=1e-7)


def test_intervals_cover_and_order(synthetic, fitted):
    df = predict_rows(synthetic, fitted.params, intervals=True, level=0.9)
    assert (df["pred_lo"] < df["predicted"]).all() and (df["predicted"] < df["pred_hi"]).all()
    inside = ((df["measured"] >= df["pred_lo"]) & (df["measured"] <= df["pred_hi"])).mean()
    assert inside >= 0.8
    lo50, hi50 = row_intervals(synthetic, fitted.params, level=0.5)
    lo90, hi90 = row_intervals(synthetic, fitted.params, level=0.9)
    assert (lo90 < lo50).all() and (hi50 < hi90).all()


def test_predict_interval_api(fitted):
    out = predict_interval("gpt3-175b", "a100-sxm4-80gb", params=fitted.params, num_gpus=1024,
                           tp=8, pp=16, global_batch=1536, recompute="full",
                           flash_attention=False)
    t = out["step_time_s"]
    assert t["lo"] < t["value"] < t["hi"]
    for k in ("tokens_per_s", "tokens_per_s_per_gpu", "mfu"):
        v = out[k]
        assert v["lo"] < v["value"] < v["hi"]
        assert v["lo"] == pytest.approx(v["value"] * t["value"] / t["hi"])
    with pytest.raises(CalibrationError, match="never calibrated"):
        predict_interval("gpt3-175b", "h100-sxm5-80gb", params=fitted.params, num_gpus=8)


# ------------------------------------------------------------------------ cross-validation
def test_leave_one_source_out(synthetic, base):
    cv = cross_validate(synthetic, base, FIT)
    assert sorted(cv["source"].unique()) == ["SYN0", "SYN1", "SYN2"]
    assert len(cv) == len(synthetic) and (cv["fold_error"] == "").all()
    assert cv["error_pct"].abs().mean() < 6  # held-out rows from the same model + 3% noise
    assert (cv["transferred"] == "").all()


def test_generation_without_data_in_fold_is_transferred(synthetic, base):
    h100 = [dataclasses.replace(r, source="H100SRC", case_id="H-" + r.case_id, run="H" + r.run,
                                hardware=__import__("hwspecs").load_hardware("h100-sxm5-80gb"))
            for r in synthetic[:6]]
    cv = cross_validate(synthetic + h100, base, FIT)
    held = cv[cv["source"] == "H100SRC"]
    assert (held["transferred"] == "ampere").all()
    assert held["pred_lo"].notna().all()


def test_transfer_copies_only_fitted_parameters(fitted):
    params, moved = transfer_missing(fitted.params, ["ampere"], ["blackwell", "ampere"])
    assert moved == {"blackwell": "ampere"}
    b, a = params.generations["blackwell"], params.generations["ampere"]
    for p in FIT:
        assert b[p] == a[p]
    assert b["mem_reserved"] == fitted.params.generations["blackwell"]["mem_reserved"]
    assert params.provenance["transferred_from"]["blackwell"] == "ampere"
    assert params.fitted["blackwell"] == ()


# ------------------------------------------------------------------------ files
def test_params_round_trip(tmp_path, fitted):
    path = tmp_path / "p.yaml"
    write_params(fitted.params, path)
    back = load_params(path)
    assert back.generations == fitted.params.generations
    assert back.fitted == fitted.params.fitted
    assert back.stderr == fitted.params.stderr
    assert np.allclose(back.covariance["ampere"], fitted.params.covariance["ampere"])
    assert back.provenance["residual_sigma_log"] == fitted.params.provenance[
        "residual_sigma_log"]
    assert path.read_text().startswith("# Efficiency parameters")


def test_never_writes_nan_and_keeps_previous_file(tmp_path, fitted):
    path = tmp_path / "p.yaml"
    path.write_text("previous\n")
    gens = {g: dict(v) for g, v in fitted.params.generations.items()}
    gens["ampere"]["eff_gemm"] = float("nan")
    bad = Params(gens, fitted.params.provenance)
    with pytest.raises((CalibrationError, ParamsError)):
        write_params(bad, path)
    cov = dict(fitted.params.covariance)
    cov["ampere"] = [[float("nan")]]
    with pytest.raises(CalibrationError, match="non-finite"):
        write_params(Params(fitted.params.generations, fitted.params.provenance,
                            fitted.params.stderr, cov, fitted.params.fitted), path)
    assert path.read_text() == "previous\n"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".params-")]


# ------------------------------------------------------------------------ bad input
def test_too_few_rows(synthetic, base):
    with pytest.raises(CalibrationError, match="nothing could be fitted.*need more runs"):
        calibrate_rows(synthetic[:3], base, FIT)


def test_default_fit_is_a_documented_subset():
    from symcost.params import PARAM_NAMES

    assert set(DEFAULT_FIT) <= set(PARAM_NAMES) and len(DEFAULT_FIT) >= 2


def test_unknown_parameter_name(synthetic, base):
    with pytest.raises(CalibrationError, match="unknown parameter.*eff_magic"):
        calibrate_rows(synthetic, base, ("eff_gemm", "eff_magic"))


def test_unknown_hardware_only(tmp_path, base):
    rows = [dict(r, hardware="tpu-v9") for r in synthetic_rows()[:5]]
    path = tmp_path / "m.csv"
    pd.DataFrame(rows).to_csv(path, index=False)
    with pytest.raises(CalibrationError, match="no predictable train rows.*unknown hardware"):
        calibrate(path, base)


def test_unknown_transfer_generation(tmp_path, base):
    path = tmp_path / "m.csv"
    pd.DataFrame(synthetic_rows()[:5]).to_csv(path, index=False)
    with pytest.raises(CalibrationError, match="--transfer: unknown generation"):
        calibrate(path, base, transfer_to=("volta",))


def test_no_convergence(monkeypatch, synthetic, base):
    import scipy.optimize
    from scipy.optimize import OptimizeResult

    def fake(fun, x0, **kw):
        return OptimizeResult(x=np.asarray(x0), cost=1.0, status=0, nfev=200,
                              message="The maximum number of function evaluations is "
                                      "exceeded.")

    monkeypatch.setattr(scipy.optimize, "least_squares", fake)
    with pytest.raises(CalibrationError, match="did not converge"):
        calibrate_rows(synthetic, base, FIT)


def test_cli_calibrate_writes_and_bad_input_keeps_file(tmp_path, synthetic):
    df = pd.DataFrame(synthetic_rows())
    df["value"] = [r.measured for r in synthetic]
    data = tmp_path / "m.csv"
    df.to_csv(data, index=False)
    out = tmp_path / "params.yaml"
    res = RUNNER.invoke(app, ["calibrate", str(data), "-o", str(out), "--json",
                              "--fit", ",".join(FIT)])
    assert res.exit_code == 0, res.output
    summary = json.loads(res.stdout)
    assert set(summary["generations"]) == {"ampere"}
    p = load_params(out)
    assert p.provenance["data"] == str(data)
    assert p.provenance["command"].startswith("symcost calibrate")
    assert p.provenance["rows_used"] == {"ampere": 48}
    assert "in_sample_mape_pct" in p.provenance
    text = out.read_text()
    bad = tmp_path / "bad.csv"
    df.head(3).to_csv(bad, index=False)
    res = RUNNER.invoke(app, ["calibrate", str(bad), "-o", str(out)])
    assert res.exit_code == 2
    assert res.output.strip().startswith("error: calibrate:")
    assert out.read_text() == text
    res = RUNNER.invoke(app, ["validate", str(data), "--params", str(out), "--json"])
    assert res.exit_code == 0
    assert json.loads(res.stdout)["summary"]["coverage"]["n"] == 48


def test_bound_is_reported_in_words(tmp_path, synthetic):
    """Measurements 4x faster than the model can be at any efficiency push eff_gemm to its
    upper bound: the table marks it and the command says so once, in words."""
    df = pd.DataFrame(synthetic_rows())
    df["value"] = [r.measured / 4 for r in synthetic]
    data = tmp_path / "fast.csv"
    df.to_csv(data, index=False)
    out = tmp_path / "params.yaml"
    res = RUNNER.invoke(app, ["calibrate", str(data), "-o", str(out), "--fit", "eff_gemm"])
    assert res.exit_code == 0, res.output
    line = ("warning: ampere eff_gemm ended on its upper bound 1: the data want more than "
            "the physical range [0.05, 1] allows")
    assert res.stderr.splitlines() == [line]
    assert "on a bound" in res.stdout
    res = RUNNER.invoke(app, ["calibrate", str(data), "-o", str(out), "--fit", "eff_gemm",
                              "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["generations"]["ampere"]["at_bound"] == ["eff_gemm"]
    assert res.stderr.splitlines() == [line]
    # the written value is the bound itself, not a float a hair below it
    assert load_params(out).generations["ampere"]["eff_gemm"] == 1.0


def test_no_bound_warning_inside_the_range(fitted):
    assert not any(f.at_bound for f in fitted.fits.values())
    assert bound_warnings(fitted) == []
    low = dataclasses.replace(fitted.fits["ampere"], at_bound=("eff_inter",),
                              values={**fitted.fits["ampere"].values, "eff_inter": 0.5})
    res = dataclasses.replace(fitted, fits={"ampere": low})
    assert bound_warnings(res) == [
        "warning: ampere eff_inter ended on its lower bound 0.5: the data want less than the "
        "physical range [0.5, 1] allows"]


def test_shipped_params_are_a_calibration():
    p = load_params()
    for key in ("data", "date", "command"):
        assert p.provenance.get(key)
    for gen in ("ampere", "hopper"):
        if gen in (p.provenance.get("residual_sigma_log") or {}):
            assert p.fitted[gen], gen
            assert all(np.isfinite(v) for v in p.stderr[gen].values())
    assert Path(__file__).parent.joinpath("test_calibrate.py").exists()


def test_parameter_outside_the_training_model(synthetic, base):
    with pytest.raises(CalibrationError, match="t_infer_step does not enter the training"):
        calibrate_rows(synthetic, base, ("eff_gemm", "t_infer_step"))


def test_parameter_without_influence_is_reported_not_fitted(synthetic, base):
    rows = [r for r in synthetic if r.config.num_gpus == 8]
    f = calibrate_rows(rows, base, ("eff_gemm", "eff_inter")).fits["ampere"]
    assert f.not_identifiable == ("eff_inter",) and f.fitted == ("eff_gemm",)
    assert f.values["eff_inter"] == base.generations["ampere"]["eff_inter"]


def test_collinear_parameters_fit_only_one(synthetic, base):
    """Five runs of one configuration: every Jacobian row is the same, so eff_gemm and
    eff_attn cannot be told apart -> the weaker one is reported not identifiable and keeps
    its start value; the other is fitted with a finite standard error (no bogus covariance)."""
    one = next(r for r in synthetic if r.config.seq_len == 8192 and r.config.flash_attention)
    rows = [dataclasses.replace(one, case_id=f"C-{i}", run=f"C-{i}", measured=one.measured
                                * (1 + 0.01 * i)) for i in range(5)]
    f = calibrate_rows(rows, base, ("eff_gemm", "eff_attn")).fits["ampere"]
    assert len(f.not_identifiable) == 1 and len(f.fitted) == 1
    (stuck,), (fitted,) = f.not_identifiable, f.fitted
    assert f.values[stuck] == base.generations["ampere"][stuck]
    assert np.isfinite(f.stderr[fitted]) and stuck not in f.stderr
    with pytest.raises(CalibrationError, match="duplicate"):
        calibrate_rows(rows, base, ("eff_gemm", "eff_gemm"))


def test_weak_independent_parameter_survives_a_collinear_pair():
    """Hand case: columns a, a (e.g. eff_attn and fa2_ratio when every run uses FA2) and a
    weak column c moving two runs only (e.g. eff_host on a few offload runs). The pair is
    the rank deficiency, so the later of the two goes and c stays. (The previous rule
    dropped the weakest column first whatever caused the deficiency: it removed c, then b.)"""
    a = np.array([1.0, 0.8, 0.6, 0.9, 0.7])
    c = np.array([0.0, 0.0, 0.0, 0.02, 0.03])
    z = np.zeros(5)
    assert identifiable_columns(np.column_stack([a, a, c, z])).tolist() == \
        [True, False, True, False]
    # a and c + a/2 are independent, and c + a/2 - a/2 = c: the three take part and the
    # weakest (c) goes
    assert identifiable_columns(np.column_stack([a, c + a / 2, c])).tolist() == \
        [True, True, False]
    # fewer runs than parameters: only as many as the runs can tell apart stay
    assert identifiable_columns(np.eye(2, 3)).tolist() == [True, True, False]


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_identifiable_columns_keep_a_full_rank_basis(seed):
    """Random scaled Jacobians with planted dependencies (copies, sums, weak and zero
    columns): the kept columns have full rank, and each dropped column with influence lies in
    their span (adding it back loses rank) or is nearly parallel to a kept one, so no
    identifiable parameter is dropped."""
    rng = np.random.default_rng(seed)
    n, k = int(rng.integers(4, 12)), int(rng.integers(2, 6))
    cols = [rng.normal(size=n) * 10.0 ** rng.uniform(-3, 0) for _ in range(k)]
    for _ in range(int(rng.integers(1, 4))):
        i, j = rng.integers(0, len(cols), size=2)
        kind = rng.integers(0, 3)
        cols.append(cols[i] * rng.uniform(0.5, 2) if kind == 0 else
                    cols[i] + cols[j] if kind == 1 else np.zeros(n))
    order = rng.permutation(len(cols))
    m = np.column_stack([cols[o] for o in order])
    keep = identifiable_columns(m)
    kept = m[:, keep]
    tol = 1e-6 * np.abs(m).max()
    assert np.linalg.matrix_rank(kept, tol=tol) == kept.shape[1]
    unit = kept / np.linalg.norm(kept, axis=0)
    for j in np.flatnonzero(~keep):
        if np.abs(m[:, j]).max() > 1e-6:
            both = np.column_stack([kept, m[:, j]])
            parallel = np.abs(unit.T @ m[:, j]).max() / np.linalg.norm(m[:, j]) > 1 - 1e-4
            assert parallel or np.linalg.matrix_rank(both, tol=tol) == kept.shape[1], j


# ------------------------------------------------------------------------ inputs (issue 10)
def test_fit_and_transfer_accept_one_comma_separated_string(tmp_path, synthetic, base):
    # a bare string used to be split into characters ("unknown parameter(s) e, f, f, ...")
    with pytest.raises(CalibrationError) as info:
        calibrate_rows(synthetic, base, "eff_magic")
    assert str(info.value).startswith("calibrate: --fit: unknown parameter(s) eff_magic (known:")
    path = tmp_path / "m.csv"
    pd.DataFrame(synthetic_rows()[:5]).to_csv(path, index=False)
    with pytest.raises(CalibrationError) as info:
        calibrate(path, base, transfer_to="volta")
    assert str(info.value) == ("calibrate: --transfer: unknown generation(s) volta (known: "
                               "ampere, hopper, blackwell, blackwell_ultra, cdna3, ada, "
                               "ampere_ga10x)")
    res = calibrate_rows(synthetic, base, "eff_gemm, eff_attn")
    assert set(res.fits["ampere"].values) >= {"eff_gemm", "eff_attn"}
    assert set(res.fits["ampere"].fitted) | set(res.fits["ampere"].at_bound) == {
        "eff_gemm", "eff_attn"}


def test_calibrate_without_path_uses_the_builtin_measurements(tmp_path, monkeypatch, base):
    from symcost import calibrate as calibrate_module

    tiny = tmp_path / "builtin.csv"
    pd.DataFrame([dict(r, hardware="tpu-v9") for r in synthetic_rows()[:3]]).to_csv(
        tiny, index=False)
    # calibrate reads the built-in file through symcost.validate.builtin_measurements, which
    # it imports by name
    monkeypatch.setattr(calibrate_module, "builtin_measurements", lambda: tiny)
    with pytest.raises(CalibrationError, match=rf"^calibrate: no predictable train rows in "
                                               rf"{tiny} \(3 skipped: unknown hardware"):
        calibrate(start=base)


def test_calibrate_header_only_file(tmp_path, base):
    from symcost.validate import MeasurementsError

    path = tmp_path / "m.csv"
    path.write_text("case_id,workload,metric,value\n")
    with pytest.raises(MeasurementsError, match=rf"^measurements: {path}: no measurement rows$"):
        calibrate(path, base)


def test_written_file_has_ordinary_permissions(tmp_path, fitted):
    """The temporary file's 0600 used to survive the rename (issue 10, point 8)."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        new = tmp_path / "new.yaml"
        write_params(fitted.params, new)
        assert stat.S_IMODE(new.stat().st_mode) == 0o644
        kept = tmp_path / "kept.yaml"
        kept.write_text("previous\n")
        kept.chmod(0o640)
        write_params(fitted.params, kept)
        assert stat.S_IMODE(kept.stat().st_mode) == 0o640
        assert kept.read_text().startswith("# Efficiency parameters")
    finally:
        os.umask(old)


def test_unwritable_output_is_a_one_line_error_before_writing(tmp_path, fitted):
    missing = tmp_path / "no" / "such" / "p.yaml"
    with pytest.raises(CalibrationError) as info:
        check_output_path(missing)
    assert str(info.value) == f"output: {missing}: directory {missing.parent} does not exist"
    with pytest.raises(CalibrationError, match=r"^output: .* is a directory \(give a file name"):
        write_params(fitted.params, tmp_path)
    with pytest.raises(CalibrationError, match="does not exist"):
        write_params(fitted.params, missing)
    assert list(tmp_path.iterdir()) == []  # no temporary file left behind
    check_output_path(tmp_path / "ok.yaml")  # a new file in an existing directory is fine


def test_every_generation_has_a_transfer_source():
    """A generation without fitted data takes a related one's constants: every GPU
    generation of hwspecs has a transfer rule, so `calibrate --transfer` knows it."""
    from hwspecs.spec import GENERATIONS
    from symcost.calibrate import TRANSFER_FROM

    assert set(GENERATIONS) <= set(TRANSFER_FROM)
    assert all(set(src) <= set(GENERATIONS) for src in TRANSFER_FROM.values())


def test_a_generation_nothing_identifies_is_not_fitted_and_the_others_are(synthetic, base):
    """One generation whose rows no fitted parameter influences (single-node rows, fitting
    only eff_inter) is reported in not_fitted; the generation that has the data is still
    fitted (a calibration on the built-in measurements used to stop at such a generation)."""
    from hwspecs import load_hardware

    h100 = load_hardware("h100-sxm5-80gb")
    single = [dataclasses.replace(r, case_id=f"H-{r.case_id}", run=f"H-{r.run}",
                                  hardware=h100)
              for r in synthetic if r.config.num_gpus == 8][:12]
    res = calibrate_rows(synthetic + single, base, ("eff_inter",))
    assert "ampere" in res.fits
    assert res.not_fitted["hopper"].startswith("none of eff_inter influences")


def test_a_parameter_file_with_a_retired_parameter_loads_without_it(tmp_path):
    """A file written while eff_moe existed (value, standard error, fitted and covariance):
    it loads without eff_moe, and the covariance loses exactly its row and column."""
    import yaml

    from symcost.params import RETIRED, load_params

    assert "eff_moe" in RETIRED
    shipped = load_params()
    hop = dict(shipped.generations["hopper"])
    data = {"generations": {"hopper": {**hop, "eff_moe": 0.3}},
            "provenance": {"fitted_parameters": ["eff_gemm", "eff_moe", "eff_attn"]},
            "stderr": {"hopper": {"eff_gemm": 0.01, "eff_moe": 0.02}},
            "fitted": {"hopper": ["eff_gemm", "eff_moe", "eff_attn"]},
            "covariance": {"hopper": [[1.0, 2.0, 3.0], [2.0, 5.0, 6.0], [3.0, 6.0, 9.0]]}}
    path = tmp_path / "old.yaml"
    text = yaml.safe_dump(data)
    path.write_text(text)
    p = load_params(path)
    assert "eff_moe" not in p.generations["hopper"]
    assert p.generations["hopper"] == hop
    assert p.stderr["hopper"] == {"eff_gemm": 0.01}
    assert p.fitted["hopper"] == ("eff_gemm", "eff_attn")
    assert p.covariance["hopper"] == [[1.0, 3.0], [3.0, 9.0]]
    assert p.provenance["fitted_parameters"] == ["eff_gemm", "eff_attn"]
    assert path.read_text() == text


def test_a_parameter_file_from_before_new_parameters_still_loads(tmp_path):
    """A user's file without eff_host, cpu_adam_rate: they take the shipped value of the same
    generation; the file is untouched."""
    import yaml

    from symcost.params import load_params

    shipped = load_params()
    from importlib import resources

    data = yaml.safe_load(resources.files("symcost").joinpath("data/params.yaml").read_text(
        encoding="utf-8"))
    for vals in data["generations"].values():
        for k in ("eff_host", "cpu_adam_rate"):
            vals.pop(k)
        vals["eff_gemm"] = 0.5
    path = tmp_path / "old.yaml"
    text = yaml.safe_dump(data)
    path.write_text(text)
    p = load_params(path)
    assert p.generations["hopper"]["eff_gemm"] == 0.5
    assert p.generations["hopper"]["eff_host"] == shipped.generations["hopper"]["eff_host"]
    assert p.generations["ampere"]["cpu_adam_rate"] == shipped.generations["ampere"][
        "cpu_adam_rate"]
    assert path.read_text() == text
