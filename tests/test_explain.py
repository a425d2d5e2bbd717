"""Formula inspection (explain) and bottleneck attribution."""

from __future__ import annotations

import json
import math

import pytest
import sympy as sp
from typer.testing import CliRunner

from symcost import symbols as S
from symcost.api import predict_training, training_inputs
from symcost.bottleneck import (CATEGORIES, attribute, bottleneck, operator_expressions,
                                operator_times, split_roofline)
from symcost.config import TrainingConfig
from symcost.explain import ExplainError, Formula, explain, expression, formula_names

# caching off inside the test process: the app callback then leaves JAX's config alone
RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})

GPT3 = ("gpt3-175b", "a100-sxm4-80gb")
CFG = TrainingConfig(num_gpus=1024, tp=8, pp=16, global_batch=1536, recompute="full")


# ----------------------------------------------------------------------------- explain
def test_formula_without_keep_is_the_prediction():
    r = predict_training(*GPT3, CFG)
    for name in ("step_time", "mfu", "mem_total", "time_tp_comm"):
        f = explain(name, *GPT3, CFG)
        assert f.value == pytest.approx(r.values[name], rel=1e-12)
        assert not f.expr.free_symbols


@pytest.mark.parametrize("name, keep", [("step_time", ("tp", "hidden")),
                                        ("mem_total", ("tp", "micro_batch")),
                                        ("qkv_proj", ("hbm_bw", "eff_gemm")),
                                        ("tp_comm", ("intra_bw",))])
def test_kept_symbols_stay_free_and_substituting_back_gives_the_value(name, keep):
    f = explain(name, *GPT3, CFG, keep=keep)
    assert {s.name for s in f.expr.free_symbols} <= set(keep)
    assert f.expr.free_symbols  # something is left
    values = training_inputs(*GPT3, CFG)
    back = f.expr.xreplace({S.lookup(k): values[k] for k in keep})
    assert float(back) == pytest.approx(f.value, rel=2e-3)  # 4-digit rounded constants


def test_field_names_and_operator_formulas():
    f = explain("mem_total", *GPT3, CFG, keep=("layers",))
    assert f.expr.free_symbols == {S.n_layers}
    assert "n_layers" not in f.substituted and "hidden" in f.substituted
    values = training_inputs(*GPT3, CFG)
    total = sum(float(expression(op).xreplace({S.lookup(k): v for k, v in values.items()}))
                for op in operator_times())
    assert total == pytest.approx(predict_training(*GPT3, CFG).step_time, rel=1e-12)


def test_notebook_display_and_json():
    f = explain("qkv_proj", *GPT3, CFG, keep=("hbm_bw",))
    assert isinstance(f, Formula)
    tex = f._repr_latex_()
    assert tex.startswith("$") and "qkv\\_proj" in tex and "\\mathit{hbm\\_bw}" in tex
    assert "boldsymbol" not in tex
    md = f._repr_markdown_()
    assert "**qkv_proj**" in md and "$$" in md
    assert "hbm_bw" in f.text()
    json.dumps(f.to_dict())


def test_keep_reads_the_field_vocabulary():
    """--keep tp,layers,zero: field names stand for the symbols their Field binds; the
    symbols' own names give the same formula (the memory formula: it holds all three, and
    keeping symbols in it takes 0.1 s where the step time's takes 8 s)."""
    by_field = explain("mem_total", *GPT3, CFG.replace(zero=1), keep=("tp", "layers", "zero"))
    by_symbol = explain("mem_total", *GPT3, CFG.replace(zero=1),
                        keep=("tp", "n_layers", "zero_stage"))
    assert by_field.expr == by_symbol.expr
    assert by_field.expr.free_symbols == {S.tp, S.n_layers, S.zero_stage}


def test_every_field_with_a_symbol_is_a_keep_name():
    """The keep vocabulary is the field table: each field binding a symbol keeps that symbol
    (a second table of aliases would drift from it)."""
    from symcost.fields import INFERENCE_FIELDS, MODEL_FIELDS, TRAINING_FIELDS
    from symcost.substitution import field_symbols, keep_symbols

    tables = (TRAINING_FIELDS, MODEL_FIELDS, INFERENCE_FIELDS)
    expected = {n: f.symbol for t in tables for n, f in t.items() if f.symbol is not None}
    assert field_symbols() == expected
    assert {"layers": "n_layers", "heads": "n_heads", "kv_heads": "n_kv_heads",
            "zero": "zero_stage", "sp": "sp_on",
            "flash_attention": "flash_attn"}.items() <= expected.items()
    for name, sym in expected.items():
        assert keep_symbols([name]) == [S.REGISTRY[sym].symbol]


def test_explain_errors():
    with pytest.raises(ExplainError, match="unknown formula"):
        explain("speed", *GPT3, CFG)
    with pytest.raises(ExplainError, match="keep: unknown name 'bogus'.*fields: .*layers.*"
                                           "symbols: .*n_layers"):
        explain("step_time", *GPT3, CFG, keep=("bogus",))
    with pytest.raises(ExplainError, match="keep: field 'num_gpus' binds no symbol"):
        explain("step_time", *GPT3, CFG, keep=("num_gpus",))


def test_cli_explain_list_and_latex():
    from symcost.cli import app

    res = RUNNER.invoke(app, ["explain", "--list"])
    assert res.exit_code == 0
    assert "step_time" in res.output and "qkv_proj" in res.output
    assert set(formula_names()["operators"]) >= {"attention", "dp_comm", "pp_bubble"}
    res = RUNNER.invoke(app, [
        "explain", "tp_comm", "--keep", "intra_bw", "--latex", "--model", GPT3[0],
        "--hardware", GPT3[1], "--num-gpus", "1024", "--tp", "8", "--pp", "16",
        "--global-batch", "1536", "--recompute", "full"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("\\mathrm{tp\\_comm} =") and "intra" in res.output
    bad = RUNNER.invoke(app, ["explain", "speed", "--model", GPT3[0], "--hardware",
                              GPT3[1]])
    assert bad.exit_code == 2 and "unknown formula" in bad.output


def test_cli_explain_keeps_field_names():
    """``--keep tp,layers,zero``: the field vocabulary, as the configuration options use it."""
    from symcost.cli import app

    args = ["--model", GPT3[0], "--hardware", GPT3[1], "--num-gpus", "1024", "--tp", "8",
            "--pp", "16", "--global-batch", "1536", "--recompute", "full", "--zero", "1"]
    res = RUNNER.invoke(app, ["explain", "mem_total", "--keep", "tp,layers,zero", *args])
    assert res.exit_code == 0, res.output
    same = RUNNER.invoke(app, ["explain", "mem_total", "--keep", "tp,n_layers,zero_stage",
                               *args])
    assert same.exit_code == 0 and res.output == same.output
    assert "n_layers" in res.output and "zero_stage" in res.output


# ----------------------------------------------------------------------------- bottleneck
def test_split_roofline_rule():
    c, m = S.hidden / S.peak_flops_16, S.hidden / S.hbm_bw
    parts = split_roofline(3 * sp.Max(c, m, evaluate=False) + S.vocab / S.hbm_bw)
    vals = {S.hidden: 10.0, S.peak_flops_16: 1.0, S.hbm_bw: 2.0, S.vocab: 4.0}
    assert float(parts["compute"].xreplace(vals)) == 30.0
    assert float(parts["memory"].xreplace(vals)) == 2.0
    vals[S.peak_flops_16] = 4.0  # now memory side (5) > compute side (2.5)
    assert float(parts["compute"].xreplace(vals)) == 0.0
    assert float(parts["memory"].xreplace(vals)) == 15.0 + 2.0
    vals[S.peak_flops_16] = 2.0  # a tie (5 = 5) goes to compute
    assert float(parts["compute"].xreplace(vals)) == 15.0
    assert float(parts["memory"].xreplace(vals)) == 2.0


@pytest.mark.parametrize("model, hw, fields", [
    (*GPT3, dict(num_gpus=1024, tp=8, pp=16, global_batch=1536, recompute="full")),
    ("llama-2-70b", "h100-sxm5-80gb", dict(num_gpus=64, tp=8, global_batch=512, zero=3,
                                            recompute="selective")),
    ("gpt-1.7b", "a100-sxm4-80gb", dict(tp=1, pp=4, dp=2, vpp=2, global_batch=64,
                                        flash_attention=False, recompute="selective")),
    # activation copies over PCIe that the compute does not hide
    ("llama-3-70b", "b200", dict(num_gpus=64, global_batch=256, micro_batch=2, seq_len=8192,
                                 zero=3, dtype="fp8", activation_offload_layers=40)),
])
def test_operators_sum_to_step_time(model, hw, fields):
    b = bottleneck(model, hw, **fields)
    r = predict_training(model, hw, **fields)
    assert sum(o.time for o in b.operators) == pytest.approx(r.step_time, rel=1e-12)
    assert sum(b.categories.values()) == pytest.approx(1.0, rel=1e-12)
    assert set(b.categories) == set(CATEGORIES)
    assert b.limiter.time == max(o.time for o in b.operators)
    for o in b.operators:
        assert sum(o.parts.values()) == pytest.approx(o.time, rel=1e-12)
    json.dumps(b.to_dict())


def test_lm_head_stays_16_bit_under_fp8():
    # Megatron-Core's output layer is not a Transformer Engine module: fp8 speeds up the
    # linear layers, not the logits GEMM. Hand roofline: 3 GEMMs (forward, input and weight
    # gradients) of 2*n*h*V/t FLOP per micro-batch at the 16-bit peak.
    fields = dict(num_gpus=8, tp=2, global_batch=8, micro_batch=1, seq_len=4096)
    ops = {dt: {o.name: o.time for o in bottleneck("nemotron-4-15b", "h100-sxm5-80gb",
                                                   dtype=dt, **fields).operators}
           for dt in ("bf16", "fp8")}
    assert ops["fp8"]["lm_head"] == pytest.approx(ops["bf16"]["lm_head"], rel=1e-12)
    assert ops["fp8"]["mlp_up"] < 0.8 * ops["bf16"]["mlp_up"]
    v = training_inputs("nemotron-4-15b", "h100-sxm5-80gb",
                        TrainingConfig(dtype="fp8", **fields))
    flops = 3 * 2 * 4096 * v["hidden"] * v["vocab"] / 2
    m = 8 * 2 / 8  # micro-batches per GPU: global batch / (micro-batch * dp)
    assert ops["fp8"]["lm_head"] == pytest.approx(
        m * flops / (v["peak_flops_16"] * v["matmul_ceiling"] * v["eff_gemm"]), rel=0.02)


def _gemm_bound(values, n, cols, k):
    """Hand roofline of a GEMM [n,k]x[k,cols] with a shared weight (bf16)."""
    flops = 2 * n * cols * k
    nbytes = 2 * (n * k + k * cols + n * cols)
    t_c = flops / (values["peak_flops_16"] * values["matmul_ceiling"] * values["eff_gemm"])
    t_m = nbytes / (values["hbm_bw"] * values["eff_hbm"])
    return "compute" if t_c >= t_m else "memory"


@pytest.mark.parametrize("seq, mb, hbm_bw", [(2048, 1, None), (16, 1, 1e11), (8, 1, 5e10)])
def test_gemm_classification_matches_hand_roofline(seq, mb, hbm_bw):
    cfg = TrainingConfig(tp=2, dp=1, micro_batch=mb, global_batch=mb, seq_len=seq)
    values = training_inputs("gpt-1.7b", "a100-sxm4-80gb", cfg)
    if hbm_bw is not None:
        values["hbm_bw"] = hbm_bw
    b = {o.name: o for o in attribute(values).operators}
    h, t, n = values["hidden"], 2, seq * mb
    expected = {
        "qkv_proj": _gemm_bound(values, n, 3 * h / t, h),
        "out_proj": _gemm_bound(values, n, h, h / t),
        "mlp_up": _gemm_bound(values, n, values["ffn_hidden"] / t, h),
        "mlp_down": _gemm_bound(values, n, h, values["ffn_hidden"] / t),
    }
    got = {k: b[k].bound for k in expected}
    assert got == expected
    assert b["norms"].bound == "memory" and b["tp_comm"].bound == "communication"
    if seq == 8:
        assert "memory" in got.values()


def test_cli_bottleneck_json():
    from symcost.cli import app

    import jax

    before = jax.config.jax_compilation_cache_dir
    res = RUNNER.invoke(app, ["bottleneck", "--model", "gpt-1.7b", "--hardware",
                              "a100-sxm4-80gb", "--tp", "2", "--dp", "4", "--json"])
    # the app callback left JAX's global configuration alone (SYMCOST_CACHE_DIR=off)
    assert jax.config.jax_compilation_cache_dir == before
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["summary"].startswith("limited by")
    assert math.isclose(sum(o["time_s"] for o in d["operators"]), d["step_time_s"],
                        rel_tol=1e-12)
    assert operator_expressions()["qkv_proj"].keys() == {"compute", "memory"}
