"""Every command with ``--json`` prints one JSON object that validates against its schema in
:mod:`symcost.schema`, and the same quantity has the same key and value in every command."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from symcost.cli import app
from symcost.schema import COMMAND_SCHEMAS, OUTPUT_KEYS, SCHEMA_VERSION

RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})
SHARED = Path(__file__).parents[2] / "shared/validation/published_measurements.csv"

MODEL = ["--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb"]
#: one small training configuration, given to every training command.
LAYOUT = dict(num_gpus=8, tp=2, pp=1, micro_batch=2, global_batch=16, seq_len=2048,
              recompute="selective", zero=1)
BASE = [*MODEL, *(a for k, v in LAYOUT.items() for a in (f"--{k.replace('_', '-')}", str(v)))]
INFER = ["--model", "llama-3-8b", "--hardware", "h100-sxm5-80gb", "--batch", "4",
         "--input-len", "256", "--output-len", "16"]
#: output names whose JSON key differs: none of them may appear as a key anywhere.
RAW_NAMES = {name for name, key in OUTPUT_KEYS.items() if name != key}


def run_json(*args: str) -> dict:
    res = RUNNER.invoke(app, list(args))
    assert res.exit_code == 0, (res.stdout, res.stderr)
    lines = res.stdout.strip().splitlines()
    assert len(lines) == 1, res.stdout  # exactly one JSON object on stdout, nothing else
    return json.loads(lines[0])


def keys_of(obj) -> set[str]:
    """Every dict key, at any depth."""
    if isinstance(obj, dict):
        return set(obj).union(*(keys_of(v) for v in obj.values()))
    if isinstance(obj, list):
        return set().union(*(keys_of(v) for v in obj))
    return set()


def check(command: str, d: dict) -> dict:
    jsonschema.Draft202012Validator.check_schema(COMMAND_SCHEMAS[command])
    jsonschema.validate(d, COMMAND_SCHEMAS[command], cls=jsonschema.Draft202012Validator)
    assert d["schema_version"] == SCHEMA_VERSION
    assert not keys_of(d) & RAW_NAMES, f"{command}: raw output names {keys_of(d) & RAW_NAMES}"
    return d


@pytest.fixture(scope="module")
def train() -> dict:
    return check("train", run_json("train", *BASE, "--json"))


@pytest.fixture(scope="module")
def measurements(tmp_path_factory) -> Path:
    if not SHARED.exists():
        pytest.skip(f"{SHARED} not present")
    with open(SHARED, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    train_rows = [r for r in rows if r.get("workload", "train") == "train"
                  and r.get("hardware", "").startswith("a100")][:5]
    if len(train_rows) < 5:
        pytest.skip("fewer than 5 A100 training rows in the shared measurements")
    path = tmp_path_factory.mktemp("m") / "m.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(train_rows)
    return path


def test_every_schema_is_draft_2020_12_and_versioned():
    import typer.main

    group = typer.main.get_command(app)
    with_json = {name for name in group.list_commands(None)
                 if any("--json" in p.opts for p in group.get_command(None, name).params)}
    assert set(COMMAND_SCHEMAS) == with_json        # every --json command has its schema
    assert {"train", "infer", "search", "sweep", "validate", "dissect"} <= with_json
    for name, schema in COMMAND_SCHEMAS.items():
        assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema", name
        jsonschema.Draft202012Validator.check_schema(schema)
        assert "schema_version" in schema["required"], name
    # the schema rejects the old keys of train --json
    bad = {"schema_version": SCHEMA_VERSION, "step_time": 1.0}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, COMMAND_SCHEMAS["train"])


def test_keys_carry_si_units():
    for name, key in OUTPUT_KEYS.items():
        if name.startswith(("time_", "prefill_", "decode_", "serve_")) and "flops" not in name \
                and "bytes" not in name and name not in ("serve_batch", "serve_max_batch",
                                                         "prefill_chunks"):
            assert key.endswith("_s"), (name, key)
        if name.startswith("mem_"):
            assert key.endswith("_bytes"), (name, key)
    assert len(set(OUTPUT_KEYS.values())) == len(OUTPUT_KEYS)  # one quantity, one key


def test_train(train):
    assert train["step_time_s"] > 0 and 0 < train["mfu"] < 1
    assert train["config"]["tp"] == 2 and train["fits"] is True


def test_search_matches_train(train):
    d = check("search", run_json("search", *MODEL, "--num-gpus", "8", "--global-batch", "16",
                                 "--seq-len", "2048", "--fix", "tp=2", "--fix", "pp=1",
                                 "--fix", "micro_batch=2", "--fix", "recompute=selective",
                                 "--fix", "zero=1", "--fix", "sp=0", "--fix", "vpp=1",
                                 "--fix", "dp_overlap=1", "--keep-duplicates", "--json",
                                 "--top", "3"))
    row = d["top"][0]
    assert (row["tp"], row["pp"], row["micro_batch"], row["zero"]) == (2, 1, 2, 1)
    for key in ("step_time_s", "mfu", "tokens_per_s", "memory_per_gpu_bytes",
                "memory_activations_bytes", "time_pp_bubble_s"):
        assert row[key] == pytest.approx(train[key], rel=1e-9), key


def test_sweep_matches_train(train, tmp_path):
    out = tmp_path / "rows.csv"
    d = check("sweep", run_json("sweep", *BASE, "--vary", "tp=1,2", "--vary",
                                "recompute=selective,full", "--precision", "float64",
                                "--outputs", "step_time,mfu,mem_total", "--out", str(out),
                                "--json"))
    assert d["rows"] == 4 and {r["recompute"] for r in d["top"]} == {"selective", "full"}
    row = next(r for r in d["top"] if r["tp"] == 2 and r["recompute"] == "selective")
    for key in ("step_time_s", "mfu", "memory_per_gpu_bytes"):
        assert row[key] == pytest.approx(train[key], rel=1e-9), key
    header = out.read_text().splitlines()[0].split(",")
    assert {"step_time_s", "mfu", "memory_per_gpu_bytes"} <= set(header)
    assert not set(header) & RAW_NAMES


def test_bottleneck_sensitivity_explain_match_train(train):
    b = check("bottleneck", run_json("bottleneck", *BASE, "--json"))
    assert b["step_time_s"] == pytest.approx(train["step_time_s"], rel=1e-9)
    assert b["fits"] is True
    e = check("explain", run_json("explain", "step_time", *BASE, "--json"))
    assert e["step_time_s"] == pytest.approx(train["step_time_s"], rel=1e-9)
    s = check("sensitivity", run_json("sensitivity", *BASE, "--outputs", "step_time,mem_total",
                                      "--discrete", "tp", "--json"))
    assert s["outputs"]["step_time_s"] == pytest.approx(train["step_time_s"], rel=1e-9)
    assert s["outputs"]["memory_per_gpu_bytes"] == pytest.approx(
        train["memory_per_gpu_bytes"], rel=1e-9)
    assert s["fits"] is True


def test_inference_commands():
    d = check("infer", run_json("infer", *INFER, "--json"))
    assert 0 < d["tpot_s"] < d["ttft_s"] and d["fits"] is True
    r = check("roofline", run_json("roofline", "--model", "llama-3-8b", "--hardware",
                                   "h100-sxm5-80gb", "--batch", "4", "--input-len", "256",
                                   "--json"))
    assert {op["phase"] for op in r["operators"]} == {"prefill", "decode"}
    s = check("dram-study", run_json("dram-study", "--model", "llama-3-8b", "--hardware",
                                     "h100-sxm5-80gb", "--batches", "4", "--input-len", "256",
                                     "--output-len", "16", "--dtype", "bf16", "--json"))
    assert all(row["tpot_s"] > 0 for row in s["rows"])


def test_codesign():
    d = check("codesign", run_json("codesign", *MODEL, "--num-gpus", "8", "--global-batch",
                                   "16", "--budget", "20000", "--popsize", "2", "--maxiter",
                                   "2", "--json"))
    ref = next(r for r in d["rows"] if r["design"] == "reference")
    assert ref["hbm_cap"] > 1e10 and ref["step_time_s"] > 0  # SI units: bytes, seconds


def test_validate_and_calibrate(measurements, tmp_path):
    v = check("validate", run_json("validate", str(measurements), "--json"))
    assert len(v["rows"]) + len(v["skipped"]) >= 5
    out = tmp_path / "p.yaml"
    c = check("calibrate", run_json("calibrate", str(measurements), "-o", str(out), "--fit",
                                    "eff_gemm", "--json"))
    assert c["output"] == str(out) and out.exists()
