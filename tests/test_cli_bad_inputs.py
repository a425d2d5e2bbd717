"""Bad command-line input: one line ``error: <field>: <rule>`` on stderr, exit code 2, no
traceback, nothing computed first and nothing the user wrote overwritten; and the outcomes
that must be the same in every command (memory fit, warnings, help at 80 columns)."""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import stat
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from symcost.cli import app
from symcost.cli.common import CliInputError, check_output_path

RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})
SHARED = Path(__file__).parents[2] / "shared/validation/published_measurements.csv"
SMALL = ["--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus", "8", "--tp", "2",
         "--global-batch", "16"]
#: a training configuration that needs ~56 GiB on a 40 GB A100.
NOT_FITTING = ["--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus", "1",
               "--micro-batch", "8", "--global-batch", "8"]
FIT_WARNING = re.compile(r"^warning: memory: (\d+\.\d\d) GiB per GPU exceeds the usable "
                         r"(\d+\.\d\d) GiB\n$")


def run(*args: str):
    return RUNNER.invoke(app, list(args))


def assert_user_error(res, field: str) -> str:
    """One ``error: <field>: ...`` line on stderr, exit code 2, nothing on stdout."""
    assert res.exit_code == 2, (res.stdout, res.stderr, res.exception)
    assert res.stderr.count("\n") == 1, res.stderr
    assert res.stderr.startswith(f"error: {field}: "), res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""
    return res.stderr


@pytest.fixture
def no_compute(monkeypatch):
    """Any of the expensive entry points raises if called: errors must come first."""
    def boom(*a, **k):
        raise AssertionError("computed before checking the input")

    for mod, name in (("symcost.sweep", "sweep"), ("symcost.sensitivity", "sensitivity"),
                      ("optimizers.codesign", "codesign"), ("symcost.roofline", "roofline_table"),
                      ("symcost.calibrate", "calibrate"), ("symcost.validate", "validate_frame")):
        monkeypatch.setattr(importlib.import_module(mod), name, boom)


@pytest.fixture
def measurements(tmp_path) -> Path:
    if not SHARED.exists():
        pytest.skip(f"{SHARED} not present")
    with open(SHARED, newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    path = tmp_path / "m.csv"
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows([r for r in rows if r["hardware"].startswith("a100")][:5])
    return path


# ----------------------------------------------------------------------------- output paths
def test_check_output_path_rules(tmp_path):
    check_output_path(None, "--out")
    check_output_path(tmp_path / "a.csv", "--out", (".csv",))
    check_output_path(tmp_path / "new_dir", "--report", directory=True)
    with pytest.raises(CliInputError, match=r"^--out: directory .* does not exist$"):
        check_output_path(tmp_path / "missing" / "a.csv", "--out", (".csv",))
    with pytest.raises(CliInputError, match=r"^--out: .* is a directory"):
        check_output_path(tmp_path, "--out")
    with pytest.raises(CliInputError, match=r"^--out: .* must end in \.csv or \.parquet$"):
        check_output_path(tmp_path / "a.txt", "--out", (".csv", ".parquet"))
    (tmp_path / "f").write_text("mine")
    with pytest.raises(CliInputError, match=r"^--report: .* is an existing file"):
        check_output_path(tmp_path / "f", "--report", directory=True)
    with pytest.raises(CliInputError, match=r"^--report: directory .* does not exist$"):
        check_output_path(tmp_path / "a" / "b", "--report", directory=True)
    if os.geteuid() != 0:  # root writes anywhere
        ro = tmp_path / "ro"
        ro.mkdir(mode=0o500)
        with pytest.raises(CliInputError, match="not writable"):
            check_output_path(ro / "a.csv", "--out")


def test_sweep_out_in_missing_directory(tmp_path, no_compute):
    res = run("sweep", *SMALL, "--vary", "tp=1,2", "--out", str(tmp_path / "no" / "rows.csv"))
    assert "does not exist" in assert_user_error(res, "--out")
    res = run("sweep", *SMALL, "--vary", "tp=1,2", "--out", str(tmp_path / "rows.txt"))
    assert ".csv or .parquet" in assert_user_error(res, "--out")
    res = run("sweep", *SMALL, "--vary", "tp=1,2", "--out", str(tmp_path))
    assert "is a directory" in assert_user_error(res, "--out")


@pytest.mark.parametrize("command,extra", [
    ("sensitivity", SMALL),
    ("codesign", ["--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus", "8",
                  "--global-batch", "16"]),
    ("roofline", ["--model", "llama-3-8b", "--hardware", "h100-sxm5-80gb"]),
])
def test_plot_in_missing_directory(tmp_path, no_compute, command, extra):
    res = run(command, *extra, "--plot", str(tmp_path / "missing" / "chart.png"))
    assert "does not exist" in assert_user_error(res, "--plot")
    res = run(command, *extra, "--plot", str(tmp_path / "chart.jpg"))
    assert ".png" in assert_user_error(res, "--plot")
    res = run(command, *extra, "--plot", str(tmp_path))
    assert "is a directory" in assert_user_error(res, "--plot")


def test_calibrate_output_checked_first(tmp_path, no_compute, measurements):
    res = run("calibrate", str(measurements), "-o", str(tmp_path / "missing" / "p.yaml"))
    assert "does not exist" in assert_user_error(res, "-o/--output")
    out_dir = tmp_path / "params.yaml"
    out_dir.mkdir()
    res = run("calibrate", str(measurements), "-o", str(out_dir))
    assert "is a directory" in assert_user_error(res, "-o/--output")
    assert out_dir.is_dir() and not any(out_dir.iterdir())


def test_validate_report_existing_file_untouched(tmp_path, no_compute, measurements):
    mine = tmp_path / "notes.md"
    mine.write_text("my notes\n")
    res = run("validate", str(measurements), "--report", str(mine))
    assert "existing file" in assert_user_error(res, "--report")
    assert mine.read_text() == "my notes\n"
    res = run("validate", str(measurements), "--report", str(tmp_path / "a" / "b"))
    assert "does not exist" in assert_user_error(res, "--report")


# ----------------------------------------------------------------------------- numbers
@pytest.mark.parametrize("price", ["-1", "0", "nan", "inf", "1e308", "2e6"])
def test_search_price_must_be_finite_positive_and_bounded(price):
    res = run("search", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus",
              "8", "--global-batch", "16", "--price-per-gpu-hour", price)
    msg = assert_user_error(res, "--price-per-gpu-hour")
    assert ("finite number > 0" in msg) if float(price) <= 0 or float(price) != float(price) \
        or price == "inf" else ("at most 1e+06" in msg)


@pytest.mark.parametrize("budget", ["inf", "nan", "-5", "0"])
def test_codesign_budget_must_be_finite_and_positive(budget, no_compute):
    res = run("codesign", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus",
              "8", "--global-batch", "16", "--budget", "9000", "--budget", budget)
    assert "finite number > 0" in assert_user_error(res, "--budget")


# ----------------------------------------------------------------------------- files
def test_validate_header_only_csv(tmp_path, no_compute):
    path = tmp_path / "empty.csv"
    if SHARED.exists():
        path.write_text(SHARED.read_text(encoding="utf-8").splitlines()[0] + "\n")
    else:
        path.write_text("case_id,workload,model,hardware,n_gpus,metric,value\n")
    res = run("validate", str(path))
    assert "no measurement rows" in assert_user_error(res, "measurements")
    res = run("calibrate", str(path), "-o", str(tmp_path / "p.yaml"))
    assert "no measurement rows" in assert_user_error(res, "measurements")
    assert not (tmp_path / "p.yaml").exists()


def test_calibrate_writes_yaml_with_the_default_mode(tmp_path, measurements):
    old = os.umask(0o022)
    try:
        out = tmp_path / "params.yaml"
        res = run("calibrate", str(measurements), "-o", str(out), "--fit", "eff_gemm")
        assert res.exit_code == 0, (res.stdout, res.stderr)
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
    finally:
        os.umask(old)


# ----------------------------------------------------------------------------- memory fit
def _fit_warning(res) -> tuple[float, float]:
    assert res.exit_code == 0, (res.stdout, res.stderr)
    m = FIT_WARNING.match(res.stderr)
    assert m, res.stderr
    needed, usable = float(m.group(1)), float(m.group(2))
    assert needed > usable
    return needed, usable


@pytest.mark.parametrize("command", ["train", "bottleneck", "explain", "sensitivity"])
def test_training_commands_report_a_config_that_does_not_fit_the_same_way(command):
    args = [command, *(["step_time"] if command == "explain" else []), *NOT_FITTING]
    if command == "sensitivity":
        args += ["--outputs", "step_time", "--discrete", "tp"]
    table = run(*args)
    needed, usable = _fit_warning(table)
    assert table.stdout.strip()  # the result is still printed
    res = run(*args, "--json")
    assert _fit_warning(res) == (needed, usable)
    d = json.loads(res.stdout)
    assert d["fits"] is False
    assert needed == pytest.approx(56.47, abs=0.01) and usable == pytest.approx(38.14, abs=0.01)


def test_infer_reports_a_batch_that_does_not_fit_like_train():
    args = ["infer", "--model", "llama-3-8b", "--hardware", "a100-sxm4-40gb", "--batch", "512",
            "--input-len", "4096", "--output-len", "64"]
    table = run(*args)
    _fit_warning(table)
    assert "TTFT" in table.stdout
    res = run(*args, "--json")
    needed, usable = _fit_warning(res)
    d = json.loads(res.stdout)
    assert d["fits"] is False
    assert needed == pytest.approx(d["memory_per_gpu_bytes"] / 2**30, abs=0.005)
    assert usable == pytest.approx(d["memory_usable_bytes"] / 2**30, abs=0.005)


def test_fitting_config_has_no_warning():
    res = run("train", *SMALL)
    assert res.exit_code == 0 and res.stderr == ""


def test_no_uppercase_warning_anywhere():
    src = Path(__file__).resolve().parents[1] / "symcost"
    for path in src.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "WARNING:" not in text, path


# ----------------------------------------------------------------------------- readability
def test_help_at_80_columns_shows_every_option_whole():
    runner = CliRunner(env={"SYMCOST_CACHE_DIR": "off", "COLUMNS": "80"})
    group = typer.main.get_command(app)
    assert len(group.commands) >= 12
    for name, command in group.commands.items():
        res = runner.invoke(app, [name, "--help"], terminal_width=80)
        assert res.exit_code == 0, name
        for param in command.params:
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("-"):
                    assert re.search(re.escape(opt) + r"(?![\w-])", res.stdout), (name, opt)
        assert "…" not in res.stdout, name


def test_sweep_table_is_readable():
    res = run("sweep", *SMALL, "--vary", "recompute=none,full", "--precision", "float64")
    assert res.exit_code == 0, res.stderr
    out = res.stdout
    assert " none " in out and " full " in out          # recompute by name, not 0/2
    assert re.search(r"\d+\.\d\d GiB", out)              # memory in GiB
    assert re.search(r"\d+\.\d{3} (ms|s) ", out)          # times with their unit
    assert not re.search(r"\d\.\d+e\+\d\d", out)          # no raw byte counts


# --------------------------------------------------------------------- every command, one rule
BASE7 = ["--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--tp", "7",
         "--num-gpus", "7", "--global-batch", "7"]


@pytest.mark.parametrize("args, flag", [
    (["train", *BASE7], "--tp"),
    (["explain", "step_time", *BASE7], "--tp"),
    (["sensitivity", *BASE7], "--tp"),
    (["bottleneck", *BASE7], "--tp"),
    (["infer", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--tp", "7"], "--tp"),
    (["search", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus", "8",
      "--global-batch", "8", "--seq-len", "4096"], "--seq-len"),
    (["codesign", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--num-gpus", "8",
      "--global-batch", "8", "--budget", "-1"], "--budget"),
    (["roofline", "--model", "gpt-1.7b", "--hardware", "x100"], "--hardware"),
    (["dram-study", "--model", "gpt-1.7b", "--dtype", "fp4"], "--dtype"),
    (["validate", "no-such-file.csv"], "measurements"),
    (["calibrate", "no-such-file.csv", "-o", "out.yaml"], "measurements"),
    (["train", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--seq-len",
      "100000000"], "--seq-len"),
    (["train", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--pp", "2",
      "--num-gpus", "2"], "--global-batch"),
    (["sweep", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--vary", "tp=1.5,2"],
     "vary tp"),
    (["sweep", "--model", "gpt-1.7b", "--hardware", "a100-sxm4-40gb", "--vary", "tp=1,2",
      "--samples", "100000000000"], "samples"),
])
def test_every_command_reports_a_broken_rule_in_one_line(args, flag, tmp_path, monkeypatch):
    """Each command: the rule's one-line message, named by the command's flag for the field
    (or the field / input name where the command has no such flag), exit code 2."""
    monkeypatch.chdir(tmp_path)
    res = run(*args)
    assert_user_error(res, flag)


def test_sweep_masks_a_broken_base_configuration_with_the_rule():
    """A sweep reports rule-breaking rows as masked, with the same rule text (not an error)."""
    res = run("sweep", *BASE7, "--vary", "hbm_bw=1e12,2e12", "--json")
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    assert d["invalid_counts"] == {"tp: does not divide heads": 2}
