"""Tests of ``symcost.validate`` (measurement rows -> predictions), ``symcost validate`` and the
Markdown report."""

from __future__ import annotations

import dataclasses
import fnmatch
import json
import math
import re
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from symcost import get_model, load_params, predict_training
from symcost.cli import app
from symcost import validate as validate_mod
from symcost.validate import (INFERENCE_REASON, OTHER_METRICS, MeasurementsError,
                              builtin_measurements,
                              unmodelled_reason, flash_attention_rule, llm_foundry_flops_per_token,
                              load_measurements, metric_factor, nar21_flops, predict_rows,
                              prepare_rows, preset_for_name, validate_file)
from symcost.fields import RECOMPUTE_MODULE_SETS

SHARED = Path(__file__).resolve().parents[2] / "shared" / "validation" / \
    "published_measurements.csv"
RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})

COLUMNS = ["case_id", "workload", "model", "n_params_b", "layers", "hidden", "heads", "kv_heads",
           "ffn_hidden", "seq_len", "vocab", "global_batch", "micro_batch", "gpu", "hardware",
           "n_gpus", "tp", "pp", "vpp", "dp", "cp", "sp", "recompute", "zero_stage",
           "precision", "dtype", "input_len", "output_len", "metric", "value", "unit",
           "source", "notes", "gated_mlp", "experts", "top_k", "shared_experts",
           "moe_ffn_hidden", "ep", "flash_attention", "offload", "finetune", "lora_rank",
           "quant", "flops_convention"]

GPT3_ROW = dict(case_id="X-gpt3-itertime", workload="train", model="GPT-3 175B",
                n_params_b=175, layers=96, hidden=12288, heads=96, kv_heads=96,
                ffn_hidden=49152, seq_len=2048, vocab=51200, global_batch=1536, micro_batch=1,
                hardware="a100-sxm4-80gb", n_gpus=1024, tp=8, pp=16, dp=8, sp=0,
                recompute="full", zero_stage=0, dtype="fp16", metric="iteration_time_s",
                value=32, notes="Megatron-LM, unfused attention")


def write_csv(path: Path, rows: list[dict]) -> Path:
    pd.DataFrame([{c: r.get(c, "") for c in COLUMNS} for r in rows]).to_csv(path, index=False)
    return path


@pytest.fixture(scope="module")
def shared() -> pd.DataFrame:
    if not SHARED.exists():
        pytest.skip("shared/validation/published_measurements.csv not present")
    return load_measurements(SHARED)


# ------------------------------------------------------------------------ metric formulas
def test_nar21_flops_hand_checked_on_gpt3_175b():
    B, s, l, h, V = 1536, 2048, 96, 12288, 51200
    # expanded by hand: 96Bslh^2 + 96Bslh^2*s/(6h) + 96Bslh^2*V/(16lh)
    expanded = 96 * B * s * l * h**2 + 16 * B * s**2 * l * h + 6 * B * s * h * V
    assert float(nar21_flops(B, s, l, h, V)) == pytest.approx(expanded, rel=1e-12)
    assert expanded == 4_510_970_753_323_106_304  # integer arithmetic, exact
    # the Megatron README figure for this run: ~32 s per step -> ~138-140 TFLOP/s per GPU
    assert expanded / (32 * 1024) / 1e12 == pytest.approx(137.7, abs=0.1)


def test_llm_foundry_flops_per_token_conventions():
    N, L, h, s = 6.659e9, 32, 4096, 2048
    mfu = llm_foundry_flops_per_token(N, L, h, s)
    assert mfu == pytest.approx(6 * N + 12 * L * h * s)
    assert llm_foundry_flops_per_token(N, L, h, s, "full") == pytest.approx(
        8 * N + 16 * L * h * s)  # "4x fwd FLOPs when ckpt"
    assert llm_foundry_flops_per_token(N, L, h, s, "selective") == pytest.approx(
        mfu + 4 * L * h * s)


def test_mfu_convention_reproduces_published_mfu_and_hfu(shared):
    """MFU from the published tokens/s/GPU with our convention matches the published MFU to
    < 1% on every llm-foundry pair; fp8 rows use the fp8 peak; HFU and model TFLOP/s in the
    notes are reproduced too."""
    prepared, _ = prepare_rows(shared)
    by_run: dict[str, dict] = {}
    for r in prepared:
        if r.source == "MPT":
            by_run.setdefault(r.run, {})[r.metric] = r
    pairs = [v for v in by_run.values() if {"MFU", "tokens_per_s_per_gpu"} <= set(v)]
    assert len(pairs) > 100
    notes = shared.set_index("case_id")["notes"]
    for v in pairs:
        t, m = v["tokens_per_s_per_gpu"], v["MFU"]
        c_t, p_t = metric_factor(t)
        c_m, p_m = metric_factor(m)
        step = c_t / t.measured  # step time implied by the published tokens/s/GPU
        assert c_m * step**p_m == pytest.approx(m.measured, rel=0.01), m.case_id
        note = notes[m.case_id]
        hfu = float(re.search(r"HFU=([0-9.]+)%", note).group(1))
        tflops = float(re.search(r"model TFLOP/s/GPU=([0-9.]+)", note).group(1))
        for metric, expected in (("HFU", hfu), ("model_tflops_per_gpu", tflops)):
            row = dataclasses.replace(m, metric=metric)
            c, p = metric_factor(row)
            assert c * step**p == pytest.approx(expected, rel=0.01), (m.case_id, metric)


def test_metric_factors_are_consistent():
    prepared, skipped = prepare_rows(pd.DataFrame([GPT3_ROW]))
    assert not skipped
    base = prepared[0]
    n, B, s = 1024, 1536, 2048
    step = 30.0

    def value(metric):
        c, p = metric_factor(dataclasses.replace(base, metric=metric))
        return c * step**p

    assert value("iteration_time_s") == value("train_step_time_s") == step
    assert value("tokens_per_s") == pytest.approx(B * s / step)
    assert value("tokens_per_s_per_gpu") == pytest.approx(B * s / step / n)
    assert value("samples_per_s") == pytest.approx(B / step)
    F = float(nar21_flops(B, s, 96, 12288, 51200))
    assert value("achieved_tflops_per_gpu") == pytest.approx(F / step / n / 1e12)
    assert value("aggregate_pflops") == pytest.approx(F / step / 1e15)
    assert value("pct_of_peak") == pytest.approx(F / step / n / 312e12 * 100)
    # full recomputation: HFU counts the forward twice
    assert value("HFU") / value("MFU") == pytest.approx(4 / 3)


# ------------------------------------------------------------------------ row preparation
def test_model_names_map_to_presets():
    assert preset_for_name("GPT-1.7B (Megatron SC21)")[0].name == "gpt-1.7b"
    assert preset_for_name("GPT-3 175B")[0].name == "gpt3-175b"
    assert preset_for_name("GPT-174.6B")[0].name == "gpt3-175b"
    assert preset_for_name("MPT-7b")[0].name == "mpt-7b"
    exact, flags = preset_for_name("MPT-42b")
    assert exact is None and flags.name == "mpt-7b"
    exact, flags = preset_for_name("Mystery-1B")
    assert exact is None and flags.name == "gpt3-175b"
    # the longer family prefix first: gpt-oss is not GPT-3, Qwen3 is not Qwen2.5
    for name, family in (("GPT-OSS-240B", "gpt-oss-120b"), ("GPT-3 6.7B", "gpt3-175b"),
                         ("Qwen3-4B", "qwen3-30b-a3b"), ("Qwen2-72B", "qwen2.5-7b"),
                         ("Mixtral-8x30B", "mixtral-8x7b"), ("Mistral-Large-3", "mistral-7b"),
                         ("DeepSeek-V3.2", "deepseek-v3")):
        exact, flags = preset_for_name(name)
        assert exact is None and flags.name == family, name
    # later checkpoints of DeepSeek-V3's architecture are DeepSeek-V3
    for name in ("DeepSeek-R1", "deepseek-ai/DeepSeek-V3-0324", "DeepSeek-V3.1",
                 "DeepSeek-R1-0528"):
        assert preset_for_name(name)[0].name == "deepseek-v3", name


def test_a_family_preset_gives_an_unnamed_model_its_flags():
    """A row of a model without a preset takes its shape from the row and its architecture
    flags from its family's preset: a gpt-oss-like row is a gated, biased model, not GPT-3."""
    row = {"case_id": "X-1", "workload": "train", "model": "GPT-OSS-240B", "layers": 4,
           "hidden": 2880, "heads": 64, "kv_heads": 8, "ffn_hidden": 2880, "vocab": 1000,
           "seq_len": 4096, "hardware": "h100-sxm5-80gb", "n_gpus": 8, "tp": 1, "pp": 1,
           "global_batch": 8, "micro_batch": 1, "dtype": "bf16",
           "metric": "tokens_per_s_per_gpu", "value": 1000.0, "source": "USER"}
    (prep,), skipped = prepare_rows(pd.DataFrame([row]))
    assert not skipped
    assert (prep.model.mlp, prep.model.bias) == ("geglu", True)


def test_flash_attention_rule():
    assert flash_attention_rule("MPT", "FSDP; FlashAttention; ALiBi")[0] is True
    assert flash_attention_rule("NAR21", "end-to-end")[0] is False
    assert flash_attention_rule("MLM22", None)[0] is False
    assert flash_attention_rule("USER", "unfused attention")[0] is False
    assert flash_attention_rule("USER", None)[0] is True


def test_mpt_rows_use_learned_positions_and_biases(shared):
    """The llm-foundry benchmark models: parameter count equals the published n_params_b
    (which grows with seq_len; published to 3 decimals in billions) on every row."""
    prepared, _ = prepare_rows(shared)
    mpt = [r for r in prepared if r.source == "MPT"]
    assert mpt
    for r in mpt:
        assert r.model.position == "learned" and r.model.bias
        assert r.model.max_seq_len == r.config.seq_len
        assert r.model.num_params() == pytest.approx(r.n_params, abs=0.5e6), r.case_id
        assert r.config.flash_attention
    nar = [r for r in prepared if r.source in ("NAR21", "MLM22")]
    assert nar and all(not r.config.flash_attention and r.model.dropout for r in nar)


def test_defaults_for_blank_fields():
    row = {**GPT3_ROW, "micro_batch": "", "dp": "", "zero_stage": "", "sp": "", "vpp": ""}
    (r,), skipped = prepare_rows(pd.DataFrame([row]))
    assert not skipped
    # sp: on with tp 8 (GENERIC_FACTS: the row's source "X" has no entry)
    assert (r.config.micro_batch, r.config.dp, r.config.zero, r.config.sp, r.config.vpp) == (
        1, 8, 0, True, 1)
    assert {"micro_batch", "dp", "zero_stage", "sp", "vpp"} <= set(r.defaults)


def test_every_shared_row_is_prepared_or_skipped_with_a_reason(shared):
    prepared, skipped = prepare_rows(shared)
    ids = [r.case_id for r in prepared] + [s.case_id for s in skipped]
    assert sorted(ids) == sorted(shared["case_id"])
    assert all(s.reason for s in skipped)
    reasons = {s.case_id: s.reason for s in skipped}
    assert "tp and pp blank" in reasons["NAR21-S5.1-GPT3-175B-1024gpu"]
    workloads = shared.set_index("case_id")["workload"]
    for cid, reason in reasons.items():
        if workloads[cid] in ("serve", "prefill"):
            assert reason == INFERENCE_REASON
        elif workloads[cid] == "train":
            assert reason != INFERENCE_REASON
    # the Megatron and llm-foundry sources are predicted in full (one NAR21 row states no
    # layout); other sources include hardware, MoE and dtypes the model does not cover
    full = shared[shared.workload.eq("train") & shared.source_id.isin(["NAR21", "MLM22", "MPT"])]
    assert {r.case_id for r in prepared if r.source in ("NAR21", "MLM22", "MPT")} == set(
        full.case_id) - {"NAR21-S5.1-GPT3-175B-1024gpu"}


def test_tiny_csv_good_bad_unknown_metric(tmp_path):
    rows = [
        GPT3_ROW,
        {**GPT3_ROW, "case_id": "X-bad-tp", "tp": "eight"},
        {**GPT3_ROW, "case_id": "X-unknown-metric", "metric": "joules_per_token"},
        {**GPT3_ROW, "case_id": "X-unknown-hw", "hardware": "tpu-v9"},
        {**GPT3_ROW, "case_id": "X-no-layout", "tp": "", "pp": "", "dp": ""},
        {**GPT3_ROW, "case_id": "X-tp-heads", "tp": 7, "pp": 1, "dp": "", "n_gpus": 896},
        {**GPT3_ROW, "case_id": "X-serve", "workload": "serve", "metric": "output_throughput"},
        {**GPT3_ROW, "case_id": "X-gpt3-itertime"},  # duplicate
    ]
    path = write_csv(tmp_path / "m.csv", rows)
    rep = validate_file(path, params=load_params(), inference=False)
    assert list(rep.rows["case_id"]) == ["X-gpt3-itertime"]
    reasons = {s.case_id: s.reason for s in rep.skipped}
    assert reasons["X-bad-tp"] == "tp: 'eight' is not a number"
    assert reasons["X-unknown-metric"].startswith("unknown metric 'joules_per_token'")
    assert reasons["X-unknown-hw"].startswith("unknown hardware 'tpu-v9'")
    assert "a100-sxm4-80gb" in reasons["X-unknown-hw"]
    assert reasons["X-no-layout"] == "parallel config not stated (tp and pp blank)"
    assert "does not divide" in reasons["X-tp-heads"]
    assert reasons["X-serve"] == INFERENCE_REASON
    assert "duplicate" in [s.reason for s in rep.skipped if s.case_id == "X-gpt3-itertime"][0]
    assert len(rep.skipped) == len(rows) - 1
    r = rep.rows.iloc[0]
    assert r.error_pct == pytest.approx((r.predicted - 32) / 32 * 100)
    assert rep.summary["mape_pct"] == pytest.approx(abs(r.error_pct))


def test_inference_rows_go_through_the_inference_hook(tmp_path, monkeypatch):
    """Serve rows go to the inference model's row predictor (faked here: its own tests cover
    it) and are summarised apart from the training MAPE; rows it cannot predict keep its
    reason; the train row is unaffected."""
    import symcost.validate as validate_mod

    seen = {}

    def fake(df, params=None):
        seen["ids"] = list(df["case_id"])
        out = pd.DataFrame([{"case_id": "S-1", "source": "S", "metric": "output_throughput",
                             "measured": 100.0, "predicted": 110.0, "error_pct": 10.0}])
        out.attrs["skipped"] = [{"case_id": "S-2", "source": "S", "metric": "ttft_p99_ms",
                                 "reason": "tail percentiles are not modelled"}]
        return out

    # validate imports the inference row predictor by name
    monkeypatch.setattr(validate_mod, "predict_inference_rows", fake)
    serve = {**GPT3_ROW, "workload": "serve", "metric": "output_throughput", "value": 100}
    path = write_csv(tmp_path / "m.csv", [GPT3_ROW, {**serve, "case_id": "S-1"},
                                          {**serve, "case_id": "S-2", "metric": "ttft_p99_ms"}])
    rep = validate_file(path, intervals=False)
    assert seen["ids"] == ["S-1", "S-2"]
    wl = dict(zip(rep.rows["case_id"], rep.rows["workload"]))
    assert wl == {"X-gpt3-itertime": "train", "S-1": "serve"}
    assert rep.summary["inference_mape_pct"] == pytest.approx(10.0)
    assert rep.summary["mape_pct"] == pytest.approx(abs(rep.rows["error_pct"].iloc[0]))
    assert [(x.case_id, x.reason) for x in rep.skipped] == [
        ("S-2", "tail percentiles are not modelled")]
    off = validate_file(path, intervals=False, inference=False)
    assert {x.reason for x in off.skipped} == {INFERENCE_REASON} and len(off.rows) == 1


def test_vectorized_prediction_equals_predict_training():
    rows = [GPT3_ROW,
            {**GPT3_ROW, "case_id": "X-mpt", "model": "MPT-7b", "layers": 32, "hidden": 4096,
             "heads": 32, "kv_heads": 32, "ffn_hidden": 16384, "vocab": 50368, "seq_len": 4096,
             "global_batch": 256, "micro_batch": 4, "hardware": "h100-sxm5-80gb",
             "n_gpus": 16, "tp": 1, "pp": 1, "dp": 16, "zero_stage": 3,
             "recompute": "none", "dtype": "bf16", "notes": "FlashAttention", "n_params_b": "",
             "metric": "MFU", "value": 40}]
    prepared, skipped = prepare_rows(pd.DataFrame(rows))
    assert not skipped
    params = load_params()
    df = predict_rows(prepared, params, intervals=False)
    for r, step in zip(prepared, df["step_time"]):
        ref = predict_training(r.model, r.hardware, r.config, params)
        assert step == pytest.approx(ref.step_time, rel=1e-12)
    # MFU row: predicted value follows the llm-foundry convention from the predicted step
    r, pred = prepared[1], df["predicted"].iloc[1]
    per_tok = 6 * r.model.num_params() + 12 * 32 * 4096 * 4096
    expect = per_tok * 256 * 4096 / df["step_time"].iloc[1] / 16 / r.hardware.peak("bf16") * 100
    assert pred == pytest.approx(expect, rel=1e-9)


def test_load_measurements_errors(tmp_path):
    with pytest.raises(MeasurementsError, match="no such file"):
        load_measurements(tmp_path / "missing.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("case_id,model\nA,B\n")
    with pytest.raises(MeasurementsError, match="missing required column"):
        load_measurements(bad)


# ------------------------------------------------------------------------ CLI and report
def test_cli_validate_json(tmp_path):
    path = write_csv(tmp_path / "m.csv", [GPT3_ROW, {**GPT3_ROW, "case_id": "X-bad",
                                                      "n_gpus": "-4"}])
    res = RUNNER.invoke(app, ["validate", str(path), "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {"schema_version", "rows", "summary", "skipped"}
    assert {"case_id", "metric", "measured", "predicted", "error_pct"} <= set(out["rows"][0])
    # what validate assumed for the row's blank cells, with the value used; stated cells
    # (tp, pp, micro_batch, recompute) are not listed
    assumed = out["rows"][0]["assumed"]
    assert assumed["vpp"] == "1" and assumed["cp"] == "1"
    assert not {"tp", "pp", "micro_batch", "recompute"} & set(assumed)
    assert out["skipped"] == [{"case_id": "X-bad", "reason": "n_gpus: blank or not positive"}]
    assert out["summary"]["by_source_metric"][0]["metric"] == "iteration_time_s"
    assert math.isfinite(out["summary"]["mape_pct"])


def test_cli_validate_table_and_report(tmp_path):
    path = write_csv(tmp_path / "m.csv", [GPT3_ROW, {**GPT3_ROW, "case_id": "Y-tflops",
                                                      "metric": "achieved_tflops_per_gpu",
                                                      "value": 138}])
    res = RUNNER.invoke(app, ["validate", str(path), "--report", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "MAPE by source and metric" in res.stdout and "X-gpt3-itertime" in res.stdout
    md = (tmp_path / "out" / "report.md").read_text()
    png = (tmp_path / "out" / "scatter.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    for section in ("## Error by source and metric", "largest errors", "scatter.png",
                    "## Assumed", "## Rows not predicted"):
        assert section in md
    # both rows leave vpp blank: one line in the report and in the printed table
    assert "| vpp | 1 | 2 | X-gpt3-itertime, Y-tflops |" in md
    assert "Assumed" in res.stdout and "X-gpt3-itertime, Y-tflops" in res.stdout


def test_assumptions_group_the_rows_assumed_fields(tmp_path):
    # hand-known: two rows leave micro_batch blank, one states it; every row leaves vpp and
    # cp blank; the grouped table must agree with the per-row JSON (second implementation)
    rows = [{**GPT3_ROW, "case_id": "A", "micro_batch": ""},
            {**GPT3_ROW, "case_id": "B", "micro_batch": ""},
            {**GPT3_ROW, "case_id": "C"}]
    rep = validate_file(write_csv(tmp_path / "m.csv", rows))
    a = rep.assumptions()
    assert list(a.columns) == ["field", "value", "n_rows", "case_ids"]
    mb = a[a["field"] == "micro_batch"]
    assert mb["value"].tolist() == ["1"] and mb["case_ids"].tolist() == [["A", "B"]]
    assert a.loc[a["field"] == "vpp", "case_ids"].tolist() == [["A", "B", "C"]]
    assert list(a["field"]) == sorted(a["field"])
    per_row: dict[tuple[str, str], list[str]] = {}
    for r in rep.to_dict()["rows"]:
        for k, v in r["assumed"].items():
            per_row.setdefault((k, v), []).append(r["case_id"])
    assert {(f, v): ids for f, v, _, ids in a.itertuples(index=False)} == per_row
    assert (a["n_rows"] == a["case_ids"].map(len)).all()


def test_report_with_no_predicted_rows(tmp_path):
    path = write_csv(tmp_path / "m.csv", [{**GPT3_ROW, "hardware": "tpu-v9"}])
    res = RUNNER.invoke(app, ["validate", str(path), "--report", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    md = (tmp_path / "out" / "report.md").read_text()
    assert "rows predicted: 0" in md and "unknown hardware 'tpu-v9'" in md


def test_cli_validate_bad_file_is_one_line_error(tmp_path):
    res = RUNNER.invoke(app, ["validate", str(tmp_path / "nope.csv")])
    assert res.exit_code == 2
    assert res.output.strip().startswith("error: measurements:")


def test_default_params_gpt3_prediction_is_reasonable():
    """Sanity: the shipped calibration predicts the Megatron GPT-3 run within 15%."""
    (r,), _ = prepare_rows(pd.DataFrame([GPT3_ROW]))
    df = predict_rows([r], load_params(), intervals=False)
    assert abs(df["error_pct"].iloc[0]) < 15
    assert get_model("gpt3-175b").num_params() == r.model.num_params()
    assert np.isfinite(df["step_time"]).all()


# ------------------------------------------------------------------------ built-in measurements
REPO = Path(__file__).resolve().parents[1]


def test_builtin_measurements_are_package_data():
    path = builtin_measurements()
    assert path.is_file() and path.name == "published_measurements.csv"
    assert path.parent == Path(validate_mod.__file__).resolve().parent / "data" / "validation"
    readme = path.parent / "README.md"
    assert readme.is_file() and "published_measurements.csv" in readme.read_text()
    # a non-editable install ships what [tool.setuptools.package-data] matches, relative to
    # the package directory: both files must match a pattern of the "symcost" entry
    with open(REPO / "pyproject.toml", "rb") as fh:
        patterns = tomllib.load(fh)["tool"]["setuptools"]["package-data"]["symcost"]
    for f in (path, readme):
        rel = f.relative_to(REPO / "symcost").as_posix()
        assert any(fnmatch.fnmatch(rel, pat) and rel.count("/") == pat.count("/")
                   for pat in patterns), (rel, patterns)


@pytest.mark.skipif(not SHARED.exists(), reason="../shared/validation not present")
@pytest.mark.parametrize("name", ["published_measurements.csv", "README.md"])
def test_shipped_measurements_are_byte_identical_to_shared(name):
    """The package copy must not drift from ../shared/validation/ (copy it again if this
    fails: cp ../shared/validation/{published_measurements.csv,README.md}
    symcost/data/validation/)."""
    shipped = builtin_measurements().parent / name
    assert shipped.read_bytes() == (SHARED.parent / name).read_bytes()


def test_load_measurements_without_path_reads_the_builtin_set():
    df = load_measurements()
    assert len(df) > 1000 and df["case_id"].is_unique
    assert {"NAR21", "MPT", "MLM24"} <= set(df["source_id"])
    assert df.equals(load_measurements(builtin_measurements()))


def test_validate_file_without_path_scores_the_builtin_set(tmp_path, monkeypatch):
    tiny = write_csv(tmp_path / "builtin.csv", [GPT3_ROW])
    monkeypatch.setattr(validate_mod, "builtin_measurements", lambda: tiny)
    for rep in (validate_file(inference=False, intervals=False),
                validate_file(None, inference=False, intervals=False)):
        assert rep.path == str(tiny)
        assert list(rep.rows["case_id"]) == ["X-gpt3-itertime"]


# ------------------------------------------------------------------------ malformed files / rows
def test_header_only_csv_is_an_error_not_an_empty_table(tmp_path):
    path = tmp_path / "header.csv"
    path.write_text(",".join(COLUMNS) + "\n")
    with pytest.raises(MeasurementsError) as info:
        load_measurements(path)
    assert str(info.value) == f"measurements: {path}: no measurement rows"
    with pytest.raises(MeasurementsError, match="no measurement rows"):
        validate_file(path)
    res = RUNNER.invoke(app, ["validate", str(path)])
    assert res.exit_code == 2
    assert res.output.strip() == f"error: measurements: {path}: no measurement rows"


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"value": "fast"}, "value: 'fast' is not a number"),
        ({"value": "1e400"}, "value: '1e400' must be finite"),
        ({"value": "-32"}, "value: must be a positive number (got '-32')"),
        ({"value": "1e-320"}, "value: 9.99989e-321 iteration_time_s implies a step time of "
                              "1e-320 s, outside the plausible range [1e-06, 1e+06] s"),
        ({"metric": "achieved_tflops_per_gpu", "value": "1e308"},
         "value: 1e+308 achieved_tflops_per_gpu implies a step time of 4.41e-305 s, outside "
         "the plausible range [1e-06, 1e+06] s"),
        ({"metric": "MFU", "value": "150"}, "value: 150 % MFU exceeds 100 %"),
        ({"n_gpus": "-4"}, "n_gpus: blank or not positive"),
        ({"n_gpus": "1000"}, "n_gpus: 1000 is not divisible by tp*cp*pp = 128"),
        ({"zero_stage": "9"}, "zero_stage: must be one of 0, 1, 2, 3 (got 9)"),
        ({"tp": "8.5"}, "tp: '8.5' must be a whole number"),
        ({"layers": "1e30"}, "model 'GPT-3 175B': layers must be at most 16777216 (2**24, see "
                             "symcost.models.MAX_SIZE) (got ~1e30)"),
        ({"hardware": "tpu-v9"}, "unknown hardware 'tpu-v9' (known: "),
    ],
)
def test_malformed_row_is_skipped_with_a_one_line_reason(tmp_path, changes, reason):
    path = write_csv(tmp_path / "m.csv", [{**GPT3_ROW, **changes}])
    with np.errstate(all="raise"):  # no overflow on the way (error_pct of a subnormal value)
        rep = validate_file(path, inference=False, intervals=False)
    assert len(rep.rows) == 0
    (skip,) = rep.skipped
    assert skip.reason.startswith(reason) and "\n" not in skip.reason
    from symcost.calibrate import CalibrationError, calibrate

    with pytest.raises(CalibrationError, match=r"^calibrate: no predictable train rows in .*"
                                               r"\(1 skipped: " + re.escape(reason)):
        calibrate(path)


def test_missing_required_column_names_it(tmp_path):
    path = tmp_path / "m.csv"
    pd.DataFrame([{k: v for k, v in GPT3_ROW.items() if k != "metric"}]).to_csv(path,
                                                                                index=False)
    with pytest.raises(MeasurementsError) as info:
        validate_file(path)
    assert str(info.value) == (f"measurements: {path}: missing required column(s) metric "
                               "(the format needs case_id, workload, metric, value)")


def test_shipped_rows_are_within_the_plausibility_checks():
    """The checks on values reject no published row (they catch data-entry errors only)."""
    _, skipped = prepare_rows(load_measurements())
    assert not [s for s in skipped if s.reason.startswith("value:")]


# ------------------------------------------------------------------------ what the model is not
@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"notes": "hybrid Mamba-Transformer MoE"},
         "model: hybrid Mamba-Transformer 'GPT-3 175B' has no preset with its block pattern "
         "and Mamba-2 sizes (no column gives them)"),
        ({"ep": 8}, "ep: 8 > 1 needs a mixture-of-experts model (this model is dense)"),
        ({"experts": 128, "top_k": 8}, "model 'GPT-3 175B': moe_ffn_hidden must be positive "
                                       "for a mixture-of-experts model (got 0)"),
        # offload, nf4 and LoRA are modelled (symcost.finetune); other quantizations are not
        ({"quant": "int4"}, "quant: 'int4' base-weight quantization is not modelled (only nf4)"),
        ({"offload": "optimizer"}, "offload: ZeRO-Offload moves the optimizer partition of a "
                                   "ZeRO stage to host memory; use zero >= 1 (Ren et al. 2021, "
                                   "ZeRO-Offload, Sec. 4)"),
        ({"experts": "many"}, "experts: 'many' is not a number"),
        ({"gated_mlp": 2}, "gated_mlp: must be 0 or 1 (got 2)"),
        ({"flash_attention": 3}, "flash_attention: must be 0 or 1 (got 3)"),
        ({"flops_convention": "vendor"},
         "flops_convention: 'vendor' is not one of model, hardware, megatron_sc21"),
    ],
)
def test_rows_the_model_cannot_represent_are_skipped(tmp_path, changes, reason):
    """Rows the model cannot represent (or that contradict themselves) are skipped with the
    column and the rule, never predicted as something else."""
    prepared, skipped = prepare_rows(pd.DataFrame([{**GPT3_ROW, **changes}]))
    assert prepared == [] and [s.reason for s in skipped] == [reason]


def test_moe_columns_make_a_moe_model():
    """The MoE columns describe the model that ran: 64 experts, top-2, expert width 8192 on
    GPT-3's shape with EP 8 (tp 8 x pp 16 x dp 8 = 1024 GPUs: ep divides tp*cp*dp)."""
    row = {**GPT3_ROW, "experts": 64, "top_k": 2, "moe_ffn_hidden": 8192, "ep": 8,
           "sp": 1}
    (r,), _ = prepare_rows(pd.DataFrame([row]))
    assert (r.model.experts, r.model.top_k, r.model.moe_ffn_hidden) == (64, 2, 8192)
    assert r.config.ep == 8
    dense = 96 * (2 * 12288 * 8192 + 12288 * 64)      # two GELU matrices per expert + router
    assert r.model.num_params() - r.model.active_params() == 96 * 62 * 2 * 12288 * 8192
    assert r.model.active_params() > dense


def test_dense_rows_pass_unmodelled_reason():
    assert unmodelled_reason(GPT3_ROW) is None
    assert unmodelled_reason({**GPT3_ROW, "experts": 1, "top_k": 1, "ep": 1,
                              "offload": "none"}) is None


def test_runs_published_as_a_known_performance_regression_are_skipped():
    """A run its source flags as a known performance regression measures a software defect:
    skipped with a reason naming the notes, not predicted or calibrated on."""
    flagged = {**GPT3_ROW, "notes": "footnote: Performance regression in GPT-OSS 120B "
               "pre-training is a [known issue](https://example). It will be resolved"}
    assert "known performance regression" in unmodelled_reason(flagged)
    assert unmodelled_reason({**GPT3_ROW, "notes": "no regression test"}) is None
    prepared, skipped = prepare_rows(pd.DataFrame([GPT3_ROW, {**flagged, "case_id": "X-reg"}]))
    assert [r.case_id for r in prepared] == [GPT3_ROW["case_id"]]
    assert [s.case_id for s in skipped] == ["X-reg"]
    assert skipped[0].reason.startswith("notes: the source flags this run")


def test_shared_regression_rows_are_exactly_the_flagged_ones(shared):
    """The four MBRIDGE 26.06.01 gpt-oss-120b MXFP8 rows (GB200, GB300) carry the footnote;
    nothing else in the file is skipped for it."""
    _, skipped = prepare_rows(shared)
    flagged = sorted(s.case_id for s in skipped if "performance regression" in s.reason)
    assert len(flagged) == 4
    assert all(c.startswith("MBRIDGE-26.06.01-gpt-oss-120b-GB") for c in flagged)


def test_replicate_floor_by_hand():
    """Two rows with identical inputs published as 100 and 200 s: the best single
    prediction is 100 (errors 0 and 50%, against 0.5 + 0 = 100% at 200 and more between);
    a third row with other inputs adds 0, so the floor is 50/3 %."""
    rows = pd.DataFrame([
        {**GPT3_ROW, "case_id": "X-a", "value": 100},
        {**GPT3_ROW, "case_id": "X-b", "value": 200, "notes": "Megatron-LM, unfused, rerun"},
        {**GPT3_ROW, "case_id": "X-c", "value": 40, "micro_batch": 2},
    ])
    prepared, _ = prepare_rows(rows)
    floor = validate_mod.replicate_floor(prepared)
    assert floor.loc["X", "n"] == 3 and floor.loc["X", "n_replicated"] == 2
    assert floor.loc["X", "floor_mape_pct"] == pytest.approx(50 / 3, rel=1e-12)
    # the groups behind it: the replicated pair (spread 2, best 100, 50% error in all) and
    # the single row (spread 1, no error)
    groups = validate_mod.replicate_groups(prepared).set_index("n")
    assert groups.loc[2, "case_ids"] == ("X-a", "X-b") and groups.loc[1, "case_ids"] == ("X-c",)
    assert (groups.loc[2, "min_value"], groups.loc[2, "max_value"]) == (100, 200)
    assert groups.loc[2, "spread"] == 2.0 and groups.loc[2, "best"] == 100
    assert groups.loc[2, "abs_pct_sum"] == pytest.approx(50, rel=1e-12)
    assert groups.loc[1, "spread"] == 1.0 and groups.loc[1, "abs_pct_sum"] == 0
    # by brute force over candidate predictions: nothing does better than the median chosen
    grid = np.linspace(50, 250, 2001)
    best = min(abs(c - 100) / 100 + abs(c - 200) / 200 for c in grid)
    assert best * 100 / 3 == pytest.approx(50 / 3, rel=1e-9)


def test_stated_gated_mlp_and_flash_attention_columns_take_precedence():
    (plain,), _ = prepare_rows(pd.DataFrame([GPT3_ROW]))
    assert plain.model.mlp == "gelu" and plain.config.flash_attention is False  # notes: unfused
    (r,), _ = prepare_rows(pd.DataFrame([{**GPT3_ROW, "gated_mlp": 1, "flash_attention": 1}]))
    assert r.model.mlp == "swiglu" and r.config.flash_attention is True
    assert "flash_attention" not in r.defaults
    assert r.model.num_params() > plain.model.num_params()  # three MLP matrices, not two


@pytest.mark.parametrize("case_id, tp, sp, expected", [
    ("X-gpt3", 8, "", (True, True)),      # a source without an entry: GENERIC_FACTS
    ("X-gpt3", 8, 0, (False, False)),     # a stated sp = 0 wins (and TP overlap needs SP)
    ("X-gpt3", 1, "", (False, False)),    # no tensor parallelism, nothing to split
    ("NAR21-x", 8, "", (False, False)),   # Megatron-LM 2021: before sequence parallelism
    ("MLM22-x", 8, "", (False, False)),
    ("NEMO2407-x", 8, "", (True, True)),  # the recipes' sequence parallelism and TP overlap
])
def test_blank_sp_follows_the_sources_facts(case_id, tp, sp, expected):
    """A blank ``sp`` is sequence parallelism with TP > 1 (and TP communication overlapped
    with it) unless the row's source ran without it."""
    row = {**GPT3_ROW, "case_id": case_id, "tp": tp, "n_gpus": tp * 16 * 8, "sp": sp}
    (r,), _ = prepare_rows(pd.DataFrame([row]))
    assert (r.config.sp, r.config.tp_overlap) == expected
    assert ("sp" in r.defaults) == (sp == "")


def _implied_step(row) -> float:
    coef, power = metric_factor(row)
    return row.measured / coef if power > 0 else coef / row.measured


def test_flops_convention_model_counts_the_mfu_flops():
    """MLM24 publishes TFLOP/s = MFU x 989 TFLOP/s (model FLOPs): a ``model`` FLOP-rate row
    must imply the step time its MFU row implies (it used to take NAR21's count, which adds
    a recomputed forward: 29 % apart)."""
    h100 = dict(hardware="h100-sxm5-80gb", dtype="bf16", recompute="none",
                flops_convention="model", notes="")
    rows = pd.DataFrame([
        {**GPT3_ROW, **h100, "case_id": "A-mfu", "metric": "MFU", "value": 40},
        {**GPT3_ROW, **h100, "case_id": "A-tflops", "metric": "achieved_tflops_per_gpu",
         "value": 0.40 * 989.0},
        {**GPT3_ROW, **h100, "case_id": "A-pflops", "metric": "aggregate_pflops",
         "value": 0.40 * 989.0 * 1024 / 1000},
        {**GPT3_ROW, **h100, "case_id": "A-pct", "metric": "pct_of_peak", "value": 40},
        {**GPT3_ROW, **h100, "case_id": "A-sc21", "metric": "achieved_tflops_per_gpu",
         "value": 0.40 * 989.0, "flops_convention": "megatron_sc21"},
    ])
    prepared, skipped = prepare_rows(rows)
    assert not skipped
    t = {r.case_id: _implied_step(r) for r in prepared}
    for cid in ("A-tflops", "A-pflops", "A-pct"):
        assert t[cid] == pytest.approx(t["A-mfu"], rel=2e-3), cid
    assert t["A-sc21"] / t["A-mfu"] == pytest.approx(1.30, abs=0.03)


def test_every_metric_of_a_shared_run_implies_the_same_step_time(shared):
    """Within 2 % (the published values are rounded), for the sources whose FLOP counts this
    module reproduces. NEMO2407 and MBRIDGE count model FLOPs with NeMo's / Megatron-Bridge's
    own formulas (5-15 % apart from tokens/s; the README calls tokens/s the steadier metric)."""
    prepared, _ = prepare_rows(shared)
    runs: dict[str, list[tuple[str, float]]] = {}
    for r in prepared:
        if r.source in ("NAR21", "MLM22", "MLM24", "MPT"):
            runs.setdefault(r.run, []).append((r.case_id, _implied_step(r)))
    several = [v for v in runs.values() if len(v) > 1]
    assert len(several) > 200
    bad = [v for v in several if max(t for _, t in v) / min(t for _, t in v) > 1.02]
    assert not bad, bad[:3]
    assert {cid.split("-")[0] for v in several for cid, _ in v} == {"NAR21", "MLM22", "MLM24",
                                                                   "MPT"}
    # every mixture-of-experts row is predicted with its experts (never as a dense model)
    experts = shared.set_index("case_id")["experts"]
    moe = [r for r in prepared if pd.notna(experts[r.case_id])]
    assert len(moe) > 100
    assert all(r.model.experts == int(experts[r.case_id]) for r in moe)


# ------------------------------------------------------------------------ malformed files
HEADER = "case_id,workload,metric,value\n"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        # every row one field longer than the header: pandas used to take the first column
        # as an index and shift the others ("workload: '3' is not train ...")
        (HEADER + "A-1,train,iteration_time_s,3,9\n",
         "not a valid CSV (line 2 has more fields than the header's 4)"),
        # a duplicated column used to become "value.1" (the first one silently used)
        ("case_id,workload,metric,value,value\nA-1,train,iteration_time_s,3,4\n",
         "duplicate column(s) value"),
        ("case_id;workload;metric;value\nA-1;train;iteration_time_s;3\n",
         "missing required column(s) case_id, workload, metric, value (the format needs "
         "case_id, workload, metric, value; the file seems to separate fields with ';', not "
         "',')"),
        (HEADER + '"A-1,train\n', "not a valid CSV (Error tokenizing data. C error: EOF "
                                   "inside string starting at row 1)"),
        ("\n\n", "not a valid CSV (No columns to parse from file)"),
    ],
)
def test_malformed_file_is_a_one_line_error(tmp_path, body, message):
    path = tmp_path / "m.csv"
    path.write_text(body)
    with pytest.raises(MeasurementsError) as info:
        load_measurements(path)
    assert str(info.value) == f"measurements: {path}: {message}"


def test_file_encoding_and_sources(tmp_path):
    bom = tmp_path / "bom.csv"
    bom.write_bytes(b"\xef\xbb\xbf" + (HEADER + "A-1,train,iteration_time_s,3\n").encode())
    assert list(load_measurements(bom)["case_id"]) == ["A-1"]
    latin = tmp_path / "latin.csv"
    latin.write_bytes((HEADER + "A-\xe9,train,iteration_time_s,3\n").encode("latin-1"))
    with pytest.raises(MeasurementsError, match=r"latin\.csv: cannot read \('utf-8' codec"):
        load_measurements(latin)
    # a URL is not fetched (it used to go through pandas' URL reader)
    with pytest.raises(MeasurementsError, match=r"^measurements: http://127\.0\.0\.1:9/m\.csv: "
                                                 r"no such file$"):
        load_measurements("http://127.0.0.1:9/m.csv")
    with open(bom, encoding="utf-8-sig") as fh:  # an open file is accepted
        assert list(load_measurements(fh)["case_id"]) == ["A-1"]


def test_cli_validate_without_a_file_scores_the_builtin_set():
    """A user who installed the package has no ../shared: `symcost validate` alone scores the
    published measurements shipped as package data (the same rows as the shared file)."""
    from typer.testing import CliRunner

    from symcost.cli import app
    from symcost.validate import builtin_measurements, load_measurements

    res = CliRunner().invoke(app, ["validate", "--train-only", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    shipped = load_measurements(builtin_measurements())
    n_train = int(shipped.workload.isin(["train", "finetune"]).sum())  # --train-only keeps both
    assert len(d["rows"]) + sum(s["case_id"] in set(shipped.case_id) for s in d["skipped"]) \
        == len(shipped)
    assert 400 < len(d["rows"]) <= n_train


def test_published_layouts_are_predicted_to_fit(shared):
    """Every run with a published step time ran, so the memory model should say it fits. On
    2026-11-28 635 of 646 such runs do (98.3%; the others: 10 Megatron-Bridge runs, e.g.
    recipes that recompute or offload what their rows do not record; NAR21's DeepSpeed ZeRO-3
    530B on 640 GPUs). Tolerance: at least 90%, and of the NAR21 and MLM24 runs (tables of
    layouts that ran) all but one."""
    prepared, _ = prepare_rows(shared)
    step_rows = [r for r in prepared if r.metric not in OTHER_METRICS]
    df = predict_rows(step_rows, intervals=False).drop_duplicates("run")
    assert df["fits"].mean() >= 0.90
    assert (~df.loc[df["source"].isin(["NAR21", "MLM24"]), "fits"]).sum() <= 1


def test_bridge2511_fsdp_column_is_not_the_zero_stage(shared):
    """MBRIDGE2511 transcribes its table's ``FSDP`` column into ``zero_stage``: ``FSDP`` is
    ZeRO-3, ``0`` only "not FSDP", so those rows keep the recipes' distributed optimizer
    (ZeRO-1), as the same runs in MBRIDGE's 25.11 section do: the two tables' Llama-3-70B and
    Llama-3.1-405B H100 runs get one layout and one prediction (at ZeRO-0 both needed more
    than 80 GB: replicated fp32 Adam states). A stated 0 of another source stays 0."""
    pairs = [("MBRIDGE2511-H100-LLAMA3_70B-tpsg",
              "MBRIDGE-25.11-Llama-3-70B-H100-64g-FP8CS-gbs128-tpsg"),
             ("MBRIDGE2511-H100-LLAMA3.1_405B-tpsg",
              "MBRIDGE-25.11-Llama-3p1-405B-H100-1024g-FP8CS-gbs512-tpsg")]
    ids = [i for pair in pairs for i in pair] + ["MBRIDGE2511-H100-LLAMA3_8B-tpsg",
                                                 "ZHANG23-III-7B-A800-naive-tps"]
    rows = shared[shared["case_id"].isin(ids)]
    assert list(rows.loc[rows["case_id"] == ids[0], "zero_stage"]) == ["0"]
    prepared, skipped = prepare_rows(rows)
    assert not skipped
    got = {r.case_id: r for r in prepared}
    assert [got[i].config.zero for i in ids] == [1, 1, 1, 1, 3, 0]
    df = predict_rows([got[i] for i in ids[:4]], intervals=False).set_index("case_id")
    for a, b in pairs:
        assert df.loc[a, "predicted"] == pytest.approx(df.loc[b, "predicted"], rel=1e-12)
        assert df.loc[a, "fits"]


def test_bridge_layout_errata(shared):
    """``validate.BRIDGE_LAYOUT_ERRATA``: the 26.02.01 page prints Llama-3-70B on 64 GB300 in
    MXFP8 and NVFP4 with MBS 2 and no VP (NVFP4 also PP 1); the rows run the container's
    recipe layout, TP1 PP4 VP5 MBS1 (dp 16), and then fit (as printed, NVFP4 needs about 540
    GiB per GPU); its Llama-3.1-405B GB200 NVFP4 run VP 8, not the printed 4. The FP8 row of
    that page, the same runs on the 26.02 page and a row whose cells no longer read as printed
    are left as they are."""
    ids = ["MBRIDGE-26.02.01-Llama-3-70B-GB300-64g-MXFP8-gbs256-tpsg",
           "MBRIDGE-26.02.01-Llama-3-70B-GB300-64g-NVFP4-gbs256-tpsg",
           "MBRIDGE-26.02.01-Llama-3-70B-GB300-64g-FP8-gbs256-tpsg",
           "MBRIDGE-26.02-Llama-3-70B-GB300-64g-NVFP4-gbs256-tpsg"]
    rows = shared[shared["case_id"].isin(ids)].set_index("case_id").loc[ids].reset_index()
    assert list(rows["micro_batch"].iloc[:2]) == ["2", "2"]
    prepared, skipped = prepare_rows(rows)
    assert not skipped
    got = {r.case_id: r for r in prepared}
    layout = [(got[i].config.tp, got[i].config.pp, got[i].config.vpp, got[i].config.dp,
               got[i].config.micro_batch) for i in ids]
    assert layout == [(1, 4, 5, 16, 1), (1, 4, 5, 16, 1), (1, 1, 1, 64, 2), (1, 4, 5, 16, 1)]
    assert "BRIDGE_LAYOUT_ERRATA" in str(got[ids[1]].defaults["pp"])
    assert "BRIDGE_LAYOUT_ERRATA" in str(got[ids[0]].defaults["micro_batch"])
    assert not any("ERRATA" in str(v) for v in got[ids[3]].defaults.values())
    df = predict_rows([got[i] for i in ids[:2]], intervals=False)
    assert df["fits"].all()
    # a data file that prints the run's layout already is not touched
    fixed = rows.iloc[[1]].assign(pp="4", vpp="5", micro_batch="1", dp="16")
    assert validate_mod.layout_errata(fixed.iloc[0].to_dict(), "MBRIDGE") == {}
    assert validate_mod.layout_errata(rows.iloc[1].to_dict(), "MPT") == {}
    # Llama-3.1-405B on 256 GB200 in NVFP4: VP 8, as the recipe and the 26.02 and 26.04 pages
    row = shared[shared["case_id"] == "MBRIDGE-26.02.01-Llama-3p1-405B-GB200-256g-NVFP4-gbs1536-"
                 "tpsg"].iloc[0].to_dict()
    assert row["vpp"] == "4"
    assert validate_mod.layout_errata(row, "MBRIDGE") == {"vpp": ("4", "8")}


def test_bridge_layout_errata_against_the_pages_ga_and_memory(shared):
    """The second rule of ``validate.BRIDGE_LAYOUT_ERRATA``: the 25.09 GB200 Llama-3-70B FP8 row
    of the parenthesized TP2 PP4 VP5 GA16 configuration ran MBS 1 (8 x 2 x 16 would be 256, not
    its GBS 128), the 25.11 gpt-oss-120b H100 row MBS 1 and its B200 row EP64 (the recipe of tags
    v0.2.0 to v0.4.1). As printed the first two do not fit the GPU's memory and the B200 one
    needs about 46 GiB more, at the edge of its 178 usable; as run all fit. The first
    configuration of the 25.09 row (FSDP, TP1, MBS 2, GA 1: 64 x 2 x 1 = 128) is left alone."""
    ids = ["MBRIDGE-25.09-Llama-3-70B-GB200-64g-FP8altquan-gbs128-alt-tpsg",
           "MBRIDGE-25.11-gpt-oss-120b-H100-64g-BF16-gbs512-tpsg",
           "MBRIDGE-25.11-gpt-oss-120b-B200-64g-BF16-gbs512-tpsg",
           "MBRIDGE-25.09-Llama-3-70B-GB200-64g-FP8notstat-gbs128-tpsg"]
    rows = shared[shared["case_id"].isin(ids)].set_index("case_id").loc[ids].reset_index()
    # as printed: the page's GBS = DP x MBS x GA fails for the first two (GA from the notes)
    ga = rows["notes"].str.extract(r"\bga=(\d+)")[0].astype(int)
    dp = rows["n_gpus"].astype(int) // (rows["tp"].astype(int) * rows["pp"].astype(int))
    printed = dp * rows["micro_batch"].astype(int) * ga
    assert list(printed != rows["global_batch"].astype(int)) == [True, True, False, False]
    prepared, skipped = prepare_rows(rows)
    assert not skipped
    got = {r.case_id: r for r in prepared}
    layout = [(got[i].config.tp, got[i].config.pp, got[i].config.dp, got[i].config.ep,
               got[i].config.micro_batch) for i in ids]
    assert layout == [(2, 4, 8, 1, 1), (1, 4, 16, 8, 1), (1, 1, 64, 64, 4), (1, 1, 64, 1, 2)]
    assert "BRIDGE_LAYOUT_ERRATA" in str(got[ids[0]].defaults["micro_batch"])
    assert "BRIDGE_LAYOUT_ERRATA" in str(got[ids[2]].defaults["ep"])
    assert not any("ERRATA" in str(v) for v in got[ids[3]].defaults.values())
    # as run, the page's GBS holds for the Llama row: 8 x 1 x 16 = 128
    assert got[ids[0]].config.dp * got[ids[0]].config.micro_batch * int(ga[0]) == 128
    df = predict_rows([got[i] for i in ids[:3]], intervals=False)
    assert df["fits"].all()
    as_printed = [dataclasses.replace(got[ids[0]], config=dataclasses.replace(
                      got[ids[0]].config, micro_batch=2)),
                  dataclasses.replace(got[ids[1]], config=dataclasses.replace(
                      got[ids[1]].config, micro_batch=4))]
    assert not predict_rows(as_printed, intervals=False)["fits"].any()
    # the B200 run at the printed EP8 holds 8x the expert weights: about 46 GiB more per GPU,
    # at the edge of its 178 usable (its correction rests on the recipe)
    b200 = got[ids[2]]
    run = predict_training(b200.model, b200.hardware, b200.config)
    printed_ep = predict_training(b200.model, b200.hardware,
                                  dataclasses.replace(b200.config, ep=8))
    extra = printed_ep.values["mem_total"] - run.values["mem_total"]
    assert 40 * 2**30 < extra < 52 * 2**30


def test_bridge_activation_offload_from_the_recipes(shared):
    """Llama-3-70B's FP8 FSDP pretraining recipes offload 40 (GB200) and 20 (GB300) layers'
    activations (``validate.BRIDGE_ACTIVATION_OFFLOAD``), from container 25.09 on GB200, and
    Llama-3.1-405B's 25.09 FSDP recipe on 128 GB200 95; their MXFP8 runs, the SFT/LoRA runs of
    the same model cell, the 25.09 page's pipelined MXFP8 run printed under the same FP8 label
    (not FSDP) and the later 405B runs (not FSDP) offload none. With the offload the published
    layouts fit (without it they need 272-318 GiB per GPU), and the step is the same: over
    NVLink-C2C the copies hide behind the layers' compute."""
    ids = ["MBRIDGE-26.04-Llama-3-70B-GB200-64g-FP8-gbs256-tpsg",
           "MBRIDGE-25.11-Llama-3-70B-GB300-64g-FP8CS-gbs256-tpsg",
           "MBRIDGE-25.09-Llama-3-70B-GB200-64g-FP8notstat-gbs128-tpsg",
           "MBRIDGE-25.09-Llama-3p1-405B-GB200-128g-FP8notstat-gbs64-tpsg",
           "MBRIDGE-26.04-Llama-3-70B-GB200-64g-MXFP8-gbs256-tpsg",
           "MBRIDGE-26.06-Llama-3-70B-SFT-GB200-32g-FP8-gbs32-tpsg",
           "MBRIDGE-25.09-Llama-3-70B-GB200-64g-FP8altquan-gbs128-alt-tpsg",
           "MBRIDGE-26.04-Llama-3p1-405B-GB200-256g-FP8-gbs1536-tpsg"]
    prepared, skipped = prepare_rows(shared[shared["case_id"].isin(ids)])
    assert not skipped
    got = {r.case_id: r for r in prepared}
    assert [got[i].config.activation_offload_layers for i in ids] == [40, 20, 40, 95, 0, 0, 0,
                                                                       0]
    for i in ids[:4]:
        r = got[i]
        res = predict_training(r.model, r.hardware, r.config)
        plain = predict_training(r.model, r.hardware,
                                 dataclasses.replace(r.config, activation_offload_layers=0))
        assert res.fits and not plain.fits
        assert res.step_time == pytest.approx(plain.step_time, rel=1e-12)
        k = r.config.activation_offload_layers
        assert (plain.values["mem_activations"] - res.values["mem_activations"]
                == pytest.approx((k - 1) * res.values["mem_activations_layer"], rel=1e-9))


def test_bridge_recipe_latest_by_hand():
    """A recipe table entry covers its container and every later one until a later entry
    for the same model, hardware and dtype replaces it; ``ANY`` matches every hardware or
    dtype; other sources and rows naming no container get None."""
    any_ = validate_mod.ANY
    table = {(25, 11): {("M", any_, any_): "a"}, (26, 4): {("M", "gb200", "mxfp8"): "b"},
             (26, 6): {("M", "gb200", any_): ""}}

    def at(container, hw="gb200", dtype="mxfp8", source="MBRIDGE", model="M"):
        notes = f"container=NeMo {container}; other notes" if container else "no container"
        return validate_mod.bridge_recipe_latest(table, source, notes, model, hw, dtype)

    assert [at("25.09"), at("25.11"), at("26.02.01"), at("26.04"), at("26.04.01"),
            at("26.06"), at("26.08")] == [None, "a", "a", "b", "b", "", ""]
    assert at("26.04", hw="b200") == "a" and at("26.04", dtype="bf16") == "a"
    assert at("26.06", dtype="bf16") == ""
    assert at("26.04", source="MPT") is None and at(None) is None
    assert at("26.04", model="N") is None


def test_bridge_recompute_from_the_recipes(shared):
    """MBRIDGE pretraining rows recompute what their container's recipe recomputed
    (``validate.BRIDGE_RECOMPUTE``): DeepSeek-V3 on GB200 ``mla_up_proj`` in 26.02, the dense
    ``mlp`` in 26.04, ``mla_up_proj`` again from 26.06; nothing on GB300 from 26.06
    (``recompute_modules=[]``); gpt-oss-120b on B200 in BF16 ``layernorm,moe_act`` from 26.02
    but nothing in 25.11 (that tag's scripts set modules without the selective granularity)
    or on GB300; Megatron-Core's default ``core_attn`` in 25.09; Qwen3 nothing; Llama-3-8B on
    H100 in FP8 its first 5 layers in full from 25.11. With the recipe's recomputation
    DeepSeek-V3's 26.02 layout on 256 GB200 fits (without it it does not), and the step grows
    by the recomputed forward."""
    ids = {"MBRIDGE-26.02-DeepSeek-V3-671B-GB200-256g-MXFP8-gbs4096-tpsg": "mla_up_proj",
           "MBRIDGE-26.04-DeepSeek-V3-671B-GB200-256g-MXFP8-gbs4096-tpsg": "mlp",
           "MBRIDGE-26.06-DeepSeek-V3-671B-GB200-256g-MXFP8-gbs4096-tpsg": "mla_up_proj",
           "MBRIDGE-26.06-DeepSeek-V3-671B-GB300-256g-MXFP8-gbs4096-tpsg": None,
           "MBRIDGE-26.04.01-DeepSeek-V3-671B-B200-256g-MXFP8-gbs4096-tpsg": "mla_up_proj,mlp",
           "MBRIDGE-25.09-DeepSeek-V3-671B-GB200-256g-FP8notstat-gbs2048-tpsg": "core_attn",
           "MBRIDGE-25.11-gpt-oss-120b-B200-64g-BF16-gbs512-tpsg": None,
           "MBRIDGE-26.02-gpt-oss-120b-B200-64g-BF16-gbs1280-tpsg": "layernorm,moe_act",
           "MBRIDGE-26.02-gpt-oss-120b-GB300-64g-BF16-gbs1280-tpsg": None,
           "MBRIDGE-26.06-Qwen3-235B-A22B-GB200-256g-MXFP8-gbs8192-tpsg": None}
    prepared, skipped = prepare_rows(shared[shared["case_id"].isin(ids)])
    assert not skipped
    got = {r.case_id: r for r in prepared}
    assert set(got) == set(ids)
    assert {i: (r.config.recompute_modules if r.config.recompute == "selective" else None)
            for i, r in got.items()} == ids
    assert "BRIDGE_RECOMPUTE" in str(got[next(iter(ids))].defaults["recompute"])
    # every table value is a canonical recompute-module list (or "" for none)
    for runs in validate_mod.BRIDGE_RECOMPUTE.values():
        for modules in runs.values():
            assert modules == "" or modules in RECOMPUTE_MODULE_SETS
    # Llama-3-8B's H100 FP8 recipe recomputes the first 5 layers of its one stage in full
    # (validate.BRIDGE_RECOMPUTE_LAYERS); its 25.09 run, before that recipe, none
    ids8 = ["MBRIDGE-25.11-Llama-3-8B-H100-8g-FP8CS-gbs128-tpsg",
            "MBRIDGE-25.09-Llama-3-8B-H100-8g-FP8notstat-gbs128-tpsg"]
    p8 = {r.case_id: r.config for r in prepare_rows(shared[shared["case_id"].isin(ids8)])[0]}
    assert [(p8[i].recompute, p8[i].recompute_layers) for i in ids8] == [("full", 5),
                                                                         ("none", 0)]
    r = got["MBRIDGE-26.02-DeepSeek-V3-671B-GB200-256g-MXFP8-gbs4096-tpsg"]
    res = predict_training(r.model, r.hardware, r.config)
    plain = predict_training(r.model, r.hardware, dataclasses.replace(
        r.config, recompute="none", recompute_modules="core_attn"))
    assert res.fits and not plain.fits
    assert res.values["mem_activations"] < 0.85 * plain.values["mem_activations"]
    assert res.step_time > plain.step_time
