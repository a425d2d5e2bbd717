"""Tests of the CLI skeleton (``symcost.cli``), ``symcost train`` and the lowering cache."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from symcost import ConfigError, ModelSpecError, predict_training
from symcost.cli import app, is_user_error, one_line
from symcost.config import DTYPES, RECOMPUTE_MODES
from symcost.functions import CeilDiv, smax
from symcost.training import BREAKDOWN

lower_mod = importlib.import_module("symcost.lower")

REPO = Path(__file__).resolve().parents[1]
GPT3 = ["train", "--model", "gpt3-175b", "--hardware", "a100-sxm4-80gb", "--num-gpus", "1024",
        "--tp", "8", "--pp", "16", "--micro-batch", "1", "--global-batch", "1536",
        "--recompute", "full"]
GPT3_CFG = dict(num_gpus=1024, tp=8, pp=16, micro_batch=1, global_batch=1536,
                recompute="full")
# caching off inside the test process: no JAX config change, no writes to ~/.cache
RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    """Library calls in this module cache into a temporary directory, not ~/.cache."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYMCOST_CACHE_DIR", str(tmp_path_factory.mktemp("symcost-cache")))
        yield


def run(*args: str):
    return RUNNER.invoke(app, list(args))


# ------------------------------------------------------------------------- symcost train --json

@pytest.fixture(scope="module")
def gpt3_json() -> dict:
    res = run(*GPT3, "--json")
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)  # exactly one JSON object, nothing else on stdout


def test_json_has_the_documented_keys(gpt3_json):
    for key in ("step_time_s", "tokens_per_s", "mfu", "hfu", "memory_per_gpu_bytes", "fits",
                "time_pp_bubble_s", "schema_version"):
        assert key in gpt3_json
    assert {k for k in gpt3_json if k.startswith("memory_")} == {
        "memory_weights_bytes", "memory_gradients_bytes", "memory_optimizer_bytes",
        "memory_activations_bytes", "memory_per_gpu_bytes", "memory_host_bytes",
        "memory_usable_bytes", "memory_headroom_bytes"}
    assert gpt3_json["memory_host_bytes"] == 0  # nothing offloaded
    assert gpt3_json["config"]["dp"] == 8  # derived: 1024 / (8*16)
    assert gpt3_json["fits"] is True


def test_json_matches_the_library(gpt3_json):
    ref = predict_training("gpt3-175b", "a100-sxm4-80gb", **GPT3_CFG)
    assert gpt3_json["step_time_s"] == pytest.approx(ref.step_time, rel=1e-9)
    assert gpt3_json["mfu"] == pytest.approx(ref.values["mfu"], rel=1e-9)
    out = dict(gpt3_json)
    intervals = {k: out.pop(k) for k in list(out) if k.endswith("_interval")}
    assert out == json.loads(json.dumps(ref.to_dict()))
    # 90% intervals from the calibration bracket the point value (issue 6)
    assert set(intervals) == {"step_time_s_interval", "tokens_per_s_interval", "mfu_interval"}
    for key, (lo, hi) in intervals.items():
        value = getattr(ref, "step_time") if key.startswith("step") else (
            ref.values[key.removesuffix("_interval")])
        assert lo < value < hi, key


def test_json_breakdown_and_memory_add_up(gpt3_json):
    breakdown = [v for k, v in gpt3_json.items() if k.startswith("time_") and k.endswith("_s")]
    assert len(breakdown) == len(BREAKDOWN)
    assert math.fsum(breakdown) == pytest.approx(gpt3_json["step_time_s"], rel=1e-9)
    mem = [gpt3_json[f"memory_{k}_bytes"]
           for k in ("weights", "gradients", "optimizer", "activations")]
    total = gpt3_json["memory_per_gpu_bytes"]
    assert math.fsum(mem) == pytest.approx(total, rel=1e-9)
    # tokens/s by hand: global batch * seq / step time
    assert gpt3_json["tokens_per_s"] == pytest.approx(
        1536 * 2048 / gpt3_json["step_time_s"], rel=1e-9)
    assert 0 < gpt3_json["mfu"] < gpt3_json["hfu"] < 1  # full recompute: HFU counts more


def test_table_mode(gpt3_json):
    res = run(*GPT3)
    assert res.exit_code == 0, res.output
    out = res.stdout
    for word in ("MFU", "HFU", "excludes recomputation", "includes recomputation",
                 "Korthikanti", "step time", "tokens/s", "usable HBM", "fits", "pp_bubble",
                 "weights", "activations", "100.0 %"):
        assert word in out, word
    assert "WARNING" not in out
    # memory in GiB, the unit hwspecs reads the marketed "80GB" in: usable HBM of the 80 GiB
    # A100 is 80 GiB minus the reserved bytes (not "83.90 GB")
    usable = gpt3_json["memory_usable_bytes"]
    assert 78 * 2**30 < usable < 80 * 2**30
    assert f"{usable / 2**30:.2f} GiB" in out
    assert f"{gpt3_json['memory_per_gpu_bytes'] / 2**30:.2f} GiB" in out
    assert " GB" not in out


def test_format_bytes_is_gib():
    from hwspecs import GIB, format_bytes

    assert GIB == 1024**3
    assert format_bytes(80 * 2**30) == "80.00 GiB"
    assert format_bytes(83_899_345_920) == "78.14 GiB"     # not 83.90
    assert format_bytes(-1.5 * 2**30, 1) == "-1.5 GiB"
    assert format_bytes(2**29, sign=True) == "+0.50 GiB"
    assert format_bytes(float("nan")) == "nan GiB"
    # the capacity read from the YAML prints back as its file value
    from hwspecs import load_hardware

    for hw in ("a100-sxm4-80gb", "h200-sxm-141gb"):
        spec = load_hardware(hw)
        assert format_bytes(spec.hbm_capacity, 0) == f"{hw.split('-')[-1][:-2]} GiB"


def test_not_fitting_is_reported_with_exit_0():
    args = ["train", "--model", "gpt3-175b", "--hardware", "a100-sxm4-80gb", "--num-gpus", "8",
            "--tp", "8", "--global-batch", "8"]
    res = run(*args)
    assert res.exit_code == 0, res.output
    assert "NO, short by" in res.stdout
    d = json.loads(run(*args, "--json").stdout)
    short = d["memory_per_gpu_bytes"] - d["memory_usable_bytes"]
    assert f"NO, short by {short / 2**30:.2f} GiB" in res.stdout.replace("\n", " ")
    warning = (f"warning: memory: {d['memory_per_gpu_bytes'] / 2**30:.2f} GiB per GPU exceeds "
               f"the usable {d['memory_usable_bytes'] / 2**30:.2f} GiB\n")
    assert res.stderr == warning
    res = run(*args, "--json")
    assert res.exit_code == 0
    assert json.loads(res.stdout)["fits"] is False
    assert res.stderr == warning


def test_options_reach_the_config():
    res = run("train", "--model", "llama2-7b", "--hardware", "h100-sxm5-80gb", "--tp", "2",
              "--dp", "4", "--sp", "--zero", "1", "--dtype", "fp8", "--no-flash-attention",
              "--no-dp-overlap", "--seq-len", "1024", "--micro-batch", "2",
              "--precision", "float32", "--json")
    assert res.exit_code == 0, res.output
    cfg = json.loads(res.stdout)["config"]
    assert cfg == {"num_gpus": 8, "tp": 2, "pp": 1, "cp": 1, "dp": 4, "ep": 1, "etp": 1,
                   "dp_replicate": 1, "sp": True, "vpp": 1, "micro_batch": 2,
                   "global_batch": 8, "seq_len": 1024, "doc_len": 0, "recompute": "none",
                   "recompute_modules": "core_attn", "recompute_layers": 0, "zero": 1,
                   "dtype": "fp8", "flash_attention": False, "dp_overlap": False,
                   "zero3_per_tensor": False, "tp_overlap": False, "pp_overlap": True,
                   "ep_overlap": False, "ep_dedup": False, "cuda_graph": False,
                   "fp8_attention": False, "bf16_layers": 0, "moe_imbalance": 1.0,
                   "moe_capacity_factor": 0.0, "train_framework": "megatron",
                   "attention_backend": "native", "cp_comm_type": "p2p",
                   "offload": "none", "activation_offload_layers": 0,
                   "intra_node_link": "default",
                   "finetune": "full", "lora_rank": 16, "lora_targets": "q,k,v,o,gate,up,down"}


def test_options_are_derived_from_the_field_table():
    """Every training field is a `train` option whose flag is the field name with `_` -> `-`,
    whose help lists the field's allowed values, and whose bad values get the field table's
    message, with the flag in place of the field name."""
    import typer.main

    from symcost.fields import TRAINING_FIELDS

    group = typer.main.get_command(app)
    for command in ("train", "sweep", "sensitivity", "bottleneck", "explain"):
        params = {p.name: p for p in group.get_command(None, command).params}
        for name, f in TRAINING_FIELDS.items():   # a new field is an option of every command
            p = params[name]
            assert f.flag in p.opts, (command, name, p.opts)
            if f.kind == "bool":
                assert p.secondary_opts == ["--no-" + f.flag[2:]]
            if f.kind == "enum":
                assert f.describe() in p.help
    assert set(TRAINING_FIELDS["recompute"].choices) == set(RECOMPUTE_MODES)
    assert set(TRAINING_FIELDS["dtype"].choices) == set(DTYPES)
    res = run(*GPT3, "--recompute", "sometimes")
    assert res.exit_code == 2
    assert res.stderr == ("error: --recompute: must be one of none, selective, full "
                          "(got 'sometimes')\n")


def test_params_file_is_used(tmp_path):
    import yaml

    from symcost.params import load_params, params_to_dict, save_params

    data = params_to_dict(load_params())
    for vals in data["generations"].values():
        vals["t_step_overhead"] = vals["t_step_overhead"] + 1.0  # one second more per step
    p = tmp_path / "params.yaml"
    p.write_text(yaml.safe_dump(data))
    save_params(load_params(p), p)
    base = run(*GPT3, "--json")
    slow = run(*GPT3, "--json", "--params", str(p))
    assert slow.exit_code == 0, slow.output
    assert (json.loads(slow.stdout)["step_time_s"] - json.loads(base.stdout)["step_time_s"]
            == pytest.approx(1.0, rel=1e-9))


# ------------------------------------------------------------------------- errors

BAD_CONFIG = "{not json"


@pytest.mark.parametrize("args, words", [
    (["--tp", "7", "--num-gpus", "112"], ["--tp:", "7", "heads", "96"]),
    (["--num-gpus", "1000", "--tp", "8", "--pp", "16"], ["--num-gpus:", "divisible"]),
    (["--hardware", "x100"], ["--hardware", "x100", "a100-sxm4-80gb", "h100-sxm5-80gb"]),
    (["--model", "nope"], ["--model", "nope", "gpt3-175b"]),
    (["--micro-batch", "2", "--global-batch", "1000"], ["--global-batch:", "1000", "divisible"]),
    (["--dtype", "fp8"], ["--dtype:", "fp8"]),
    (["--model", "{bad}"], ["--model", "invalid JSON"]),
    (["--params", "{missing}"], ["--params", "cannot read"]),
])
def test_bad_input_is_one_error_line_exit_2(tmp_path, args, words):
    bad = tmp_path / "bad" / "config.json"
    bad.parent.mkdir()
    bad.write_text(BAD_CONFIG)
    args = [a.format(bad=bad, missing=tmp_path / "nope.yaml") for a in args]
    base = dict(zip(GPT3[1::2], GPT3[2::2]))
    base.update(zip(args[::2], args[1::2]))
    res = run("train", *[x for kv in base.items() for x in kv])
    assert res.exit_code == 2, res.output
    err = res.stderr
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in res.output
    for w in words:
        assert w in err, (w, err)
    assert res.stdout == ""


def test_usage_errors_exit_2():
    assert run("train", "--model", "gpt3-175b").exit_code == 2  # --hardware missing
    assert run(*GPT3, "--recompute", "some").exit_code == 2
    assert run(*GPT3, "--zero", "4").exit_code == 2


def test_only_our_value_errors_are_user_errors():
    assert is_user_error(ConfigError("tp: x"))
    assert is_user_error(ModelSpecError("m"))
    from hwspecs import HardwareSpecError

    assert is_user_error(HardwareSpecError("h"))
    assert is_user_error(lower_mod.LoweringError("l"))
    assert not is_user_error(ValueError("a bug"))
    assert not is_user_error(KeyError("k"))
    assert one_line(ConfigError("a\n  b\n")) == "a; b"


# ------------------------------------------------------------------------- skeleton

def test_version_and_lists():
    res = run("--version")
    assert res.exit_code == 0 and res.stdout.startswith("symcost ")
    res = run("train", "--list-models")
    assert res.exit_code == 0 and "gpt3-175b" in res.stdout.split()
    res = run("train", "--list-hardware")
    assert res.exit_code == 0 and "a100-sxm4-80gb" in res.stdout.split()
    res = run("--help")
    assert res.exit_code == 0 and "train" in res.stdout


def test_every_listed_module_registers_a_command():
    from symcost import cli

    for name in cli.COMMAND_MODULES:
        assert callable(importlib.import_module(name).register)
    assert "train" in {c.name for c in app.registered_commands}


def test_end_to_end_subprocess_fills_source_cache_without_jax(tmp_path):
    """Real entry point, fresh process: JSON out (with its default prediction intervals),
    lowered source cached on disk; a single float64 prediction and its interval run the
    generated source on NumPy, so JAX is never imported."""
    env = dict(os.environ, SYMCOST_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    code = ("import sys; sys.argv = ['symcost', *sys.argv[1:]]\n"
            "from symcost.cli import app\n"
            "try:\n    app()\n"
            "finally:\n    print('JAX' if 'jax' in sys.modules else 'NOJAX', file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code, *GPT3, "--json"],
                          env=env,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    ref = predict_training("gpt3-175b", "a100-sxm4-80gb", **GPT3_CFG)
    assert out["step_time_s"] == pytest.approx(ref.step_time, rel=1e-9)
    lo, hi = out["step_time_s_interval"]
    assert lo < out["step_time_s"] < hi
    assert len(list((tmp_path / "lowered").glob("*.py"))) == 1
    assert proc.stderr.strip() == "NOJAX"


def test_console_entry_keeps_output_and_exit_codes(tmp_path):
    """`python -m symcost.cli` (the console script's main: no interpreter teardown) still
    flushes the whole JSON object and returns the command's exit code."""
    env = dict(os.environ, SYMCOST_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]))
    ok = subprocess.run([sys.executable, "-m", "symcost.cli", *GPT3, "--json"], env=env,
                        capture_output=True, text=True, timeout=300, check=False)
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["step_time_s"] > 0
    bad = subprocess.run([sys.executable, "-m", "symcost.cli", *GPT3, "--tp", "7"], env=env,
                         capture_output=True, text=True, timeout=300, check=False)
    assert bad.returncode == 2 and bad.stderr.startswith("error: --num-gpus: 1024 is not")


def test_compilation_cache_needs_a_usable_dir(tmp_path, monkeypatch):
    from symcost.cli import enable_compilation_cache

    monkeypatch.setenv("SYMCOST_CACHE_DIR", "off")
    assert enable_compilation_cache() is None
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("SYMCOST_CACHE_DIR", str(blocker))  # not a directory: silently off
    assert enable_compilation_cache() is None


# ------------------------------------------------------------------------- lowering cache

x, y, z = sp.symbols("x y z", positive=True)


def small_exprs(c=3):
    return {"a": x * y + c * CeilDiv(x, y),
            "b": sp.Piecewise((x / y, x < y), (z ** 2, True)),
            "c": smax(z, 1) + sp.Rational(1, c)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SYMCOST_CACHE_DIR", str(tmp_path / "cache"))
    lower_mod._generate_cached.cache_clear()
    yield tmp_path / "cache"
    lower_mod._generate_cached.cache_clear()


def test_cached_source_equals_fresh_source_and_is_reused(cache, monkeypatch):
    exprs, inputs = small_exprs(), (x, y, z)
    m = lower_mod.lower(exprs, inputs, "float64")
    key = lower_mod.expression_key(exprs, inputs)
    path = lower_mod.cached_source_path(key)
    assert path.parent.parent == cache and path.exists()
    assert lower_mod._read_cached_source(path, key) == lower_mod._generate(exprs, inputs)
    assert m.source == lower_mod._generate(exprs, inputs)
    # a new process would find it: generation is skipped
    lower_mod._generate_cached.cache_clear()

    def boom(*a):
        raise AssertionError("source regenerated despite the disk cache")

    monkeypatch.setattr(lower_mod, "_generate", boom)
    m2 = lower_mod.lower(small_exprs(), inputs, "float64")
    assert m2.source == m.source
    out = m2(x=4.0, y=3.0, z=2.0)
    assert out["a"] == pytest.approx(12 + 3 * 2)
    assert out["b"] == pytest.approx(4.0)
    assert out["c"] == pytest.approx(2.0 + 1 / 3)


def test_training_model_source_is_cached_exactly(cache):
    from symcost.api import used_symbols
    from symcost.training import training_expressions

    exprs = training_expressions()
    inputs = used_symbols(exprs.values())
    fresh = lower_mod._generate(exprs, inputs)
    assert lower_mod._generate_cached(tuple(exprs.items()), inputs) == fresh
    key = lower_mod.expression_key(exprs, inputs)
    assert lower_mod._read_cached_source(lower_mod.cached_source_path(key), key) == fresh


def test_key_changes_with_the_expressions():
    inputs = (x, y, z)
    k = lower_mod.expression_key(small_exprs(), inputs)
    assert lower_mod.expression_key(small_exprs(), inputs) == k  # rebuilt: same key
    assert lower_mod.expression_key(small_exprs(4), inputs) != k  # a constant deep inside
    changed = dict(small_exprs(), b=sp.Piecewise((x / y, x <= y), (z ** 2, True)))
    assert lower_mod.expression_key(changed, inputs) != k  # < became <=
    renamed = {("A" if n == "a" else n): e for n, e in small_exprs().items()}
    assert lower_mod.expression_key(renamed, inputs) != k  # output name
    assert lower_mod.expression_key(small_exprs(), (y, x, z)) != k  # input order
    xr = sp.Symbol("x", real=True)
    assert lower_mod.expression_key({"a": xr * y}, (xr, y)) != lower_mod.expression_key(
        {"a": x * y}, (x, y))  # same name, other assumptions


@settings(max_examples=25, deadline=None)
@given(st.integers(-50, 50), st.integers(-50, 50))
def test_key_separates_constants(a, b):
    ka = lower_mod.expression_key({"o": a * x + y}, (x, y))
    kb = lower_mod.expression_key({"o": b * x + y}, (x, y))
    assert (ka == kb) == (a == b)


def test_unwritable_cache_dir_is_ignored(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("SYMCOST_CACHE_DIR", str(blocker / "cache"))
    lower_mod._generate_cached.cache_clear()
    try:
        m = lower_mod.lower(small_exprs(5), (x, y, z), "float64")
    finally:
        lower_mod._generate_cached.cache_clear()
    assert m(x=1.0, y=2.0, z=3.0)["b"] == pytest.approx(0.5)
    assert blocker.read_text() == "not a directory"


def test_corrupt_cache_file_is_regenerated(cache):
    exprs, inputs = small_exprs(6), (x, y, z)
    key = lower_mod.expression_key(exprs, inputs)
    path = lower_mod.cached_source_path(key)
    path.parent.mkdir(parents=True)
    path.write_text(f"# symcost lowered source {key}\ndef _model(:\n")  # truncated
    m = lower_mod.lower(exprs, inputs, "float64")
    assert m.source == lower_mod._generate(exprs, inputs)
    assert lower_mod._read_cached_source(path, key) == m.source  # rewritten


def test_cache_dir_setting(monkeypatch, tmp_path):
    for off in ("off", "OFF", "none", "0"):
        monkeypatch.setenv("SYMCOST_CACHE_DIR", off)
        assert lower_mod.cache_dir() is None
        assert lower_mod.cached_source_path("k") is None
    monkeypatch.setenv("SYMCOST_CACHE_DIR", str(tmp_path))
    assert lower_mod.cache_dir() == tmp_path
    monkeypatch.delenv("SYMCOST_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert lower_mod.cache_dir() == tmp_path / "xdg" / "symcost"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert lower_mod.cache_dir() == Path.home() / ".cache" / "symcost"
