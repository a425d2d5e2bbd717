"""Tests of the inference model (``symcost.inference``, ``symcost.infer_api``, ``symcost infer``).

Hand-computed values (KV-cache bytes, weights, the largest batch, a GEMM's compute/memory
crossover), properties (halving weight bytes never slows decode; throughput identity), the
compiled model against SymPy, and the one-line errors for bad input.
"""

from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from hwspecs import load_hardware
from symcost import symbols as S
from symcost.calibrate import DEFAULT_FIT
from symcost.cli import app
from symcost.config import ConfigError, TrainingConfig, resolve
from symcost.functions import free_symbols_shared
from symcost.infer_api import (DTYPE_BYTES, InferenceConfig, InferenceConfigError,
                               evaluate_inference, inference_inputs, inference_model,
                               predict_inference, predict_inference_rows, resolve_inference,
                               solve_arrival_rate, trtllm_bench_max_num_tokens)
from symcost.inference import gemm_efficiency, inference_expressions
from symcost.models import get_model
from symcost.ops.gemm import gemm
from symcost.params import load_params

RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})
L70 = "llama-2-70b"
H100 = "h100-sxm5-80gb"


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SYMCOST_CACHE_DIR", str(tmp_path_factory.mktemp("symcost-cache")))
        yield


def _inputs(model=L70, hw=H100, **cfg):
    return inference_inputs(model, hw, InferenceConfig(**cfg))


def _eval(inputs, **override):
    vals = dict(inputs)
    vals.update(override)
    return {k: float(v) for k, v in evaluate_inference(vals, "float64").items()}


# ----------------------------------------------------------------------------- KV cache, memory
def test_kv_bytes_per_token_llama2_70b_hand_checked():
    # GQA, 8 KV heads of dim 128, 80 layers, bf16: 2 (K and V) * 80 * 8 * 128 * 2 bytes
    assert 2 * 80 * 8 * 128 * 2 == 327_680
    out = _eval(_inputs(dtype="bf16"))
    assert out["kv_bytes_per_token"] == 327_680
    # TP 2 splits the 8 KV heads (4 per rank); fp8 halves the bytes
    assert _eval(_inputs(tp=2, dtype="bf16"))["kv_bytes_per_token"] == 327_680 / 2
    assert _eval(_inputs(tp=2, dtype="fp8"))["kv_bytes_per_token"] == 327_680 / 4
    # TP 16 > 8 KV heads: each rank keeps one replicated head
    assert _eval(_inputs(tp=16, dtype="bf16"))["kv_bytes_per_token"] == 2 * 80 * 1 * 128 * 2
    # PP 2: each stage holds 40 layers
    assert _eval(_inputs(pp=2, dtype="bf16"))["kv_bytes_per_token"] == 327_680 / 2


def test_kv_cache_and_max_batch_closed_form():
    inp = _inputs(tp=2, dtype="fp8", batch=64, input_len=2048, output_len=128)
    out = _eval(inp)
    per_seq = out["kv_bytes_per_token"] * (2048 + 128)
    assert out["mem_kv_cache"] == pytest.approx(64 * per_seq, rel=1e-12)
    m = get_model(L70)
    hw = load_hardware(H100)
    p = load_params().for_generation("hopper")
    # weights by hand: 80 layers of fp8 linear weights split over 2 ranks, 16-bit norms,
    # vocabulary-parallel embedding and LM head, final norm
    h, d, f, V = 8192, 128, 28672, 32000
    linear = h * d * (64 + 2 * 8) + 64 * d * h + 3 * h * f
    weights = 80 * linear / 2 * 1 + 2 * (80 * 2 * h + 2 * V * h / 2 + h)
    assert out["mem_weights"] == pytest.approx(weights, rel=1e-12)
    assert m.num_params() == pytest.approx(80 * linear + 2 * 80 * h + 2 * V * h + h)
    usable = hw.hbm_capacity - p["mem_reserved"]
    budget = 0.9 * (usable - weights - out["mem_activations"])
    per_seq_total = per_seq + 4 * V / 2
    assert out["mem_kv_budget"] == pytest.approx(budget, rel=1e-12)
    assert out["max_batch"] == math.floor(budget / per_seq_total)


def test_batch_that_does_not_fit_and_nothing_fits_are_one_line_errors():
    r = predict_inference(L70, H100, tp=2, dtype="fp8", batch=1, input_len=2048,
                          output_len=128)
    too_many = r.max_batch + 1
    with pytest.raises(InferenceConfigError, match=r"^batch: .* do not fit .* at most") as exc:
        predict_inference(L70, H100, tp=2, dtype="fp8", batch=too_many, input_len=2048,
                          output_len=128)
    assert "\n" not in str(exc.value)
    with pytest.raises(InferenceConfigError, match=r"^memory: even batch 1 does not fit") as exc:
        predict_inference(L70, "a100-sxm4-80gb", dtype="bf16", batch=1)
    assert "\n" not in str(exc.value)
    # check_memory=False returns the result with fits False
    res = predict_inference(L70, H100, tp=2, dtype="fp8", batch=too_many, input_len=2048,
                            output_len=128, check_memory=False)
    assert not res.fits and res.max_batch == too_many - 1


# ----------------------------------------------------------------------------- bad input
def test_context_rule_is_the_training_rule():
    """One rule, one outcome: learned positions bound the context in inference as in
    training; RoPE models may run past max_position_embeddings in both."""
    gpt, h100 = get_model("gpt3-175b"), load_hardware(H100)
    with pytest.raises(InferenceConfigError,
                       match=r"^context: input_len \+ output_len = 2100 tokens exceeds the "
                             r"model's learned positions \(max_seq_len = 2048\)"):
        resolve_inference(gpt, h100, InferenceConfig(input_len=2000, output_len=100, tp=8))
    with pytest.raises(ConfigError, match=r"^seq_len: 2100 exceeds the model's learned"):
        resolve(gpt, h100, TrainingConfig(seq_len=2100, tp=8))
    llama = get_model(L70)
    assert llama.position != "learned"
    long = resolve_inference(llama, h100, InferenceConfig(input_len=4000, output_len=200))
    assert long.input_len + long.output_len > llama.max_seq_len
    assert resolve(llama, h100, TrainingConfig(seq_len=8192)).seq_len == 8192


@pytest.mark.parametrize("fields, pattern", [
    (dict(dtype="fp4"), r"^dtype: must be one of bf16, fp16, fp8, int8, int4 \(got 'fp4'\)"),
    (dict(kv_dtype="int4"), r"^kv_dtype: must be one of bf16, fp16, fp8, int8 \(got 'int4'\)"),
    (dict(tp=3), r"^tp: 3 does not divide the number of attention heads"),
    (dict(batch=0), r"^batch: must be a positive integer"),
    (dict(weight_dtype="bf16", act_dtype="fp8"), r"^weight_dtype: bf16 weights are wider"),
    (dict(weight_dtype="fp8", act_dtype="int8"), r"^weight_dtype: fp8 weights with int8"),
    (dict(kv_mem_frac=1.5), r"^kv_mem_frac: must be a number in \(0, 1\]"),
    (dict(num_gpus=3, tp=2), r"^num_gpus: 3 is not divisible by tp\*pp = 2"),
])
def test_bad_input_is_a_one_line_error(fields, pattern):
    with pytest.raises(InferenceConfigError, match=pattern) as exc:
        resolve_inference(get_model(L70), load_hardware(H100), InferenceConfig(**fields))
    assert "\n" not in str(exc.value)


def test_tp_must_split_or_replicate_kv_heads():
    m = get_model("llama-3-8b").replace(name="gqa-12-4", heads=12, kv_heads=4, hidden=1536,
                                        ffn_hidden=6144)
    hw = load_hardware(H100)
    for tp in (1, 2, 4, 12):  # 4 % tp == 0 (split) or tp % 4 == 0 (replicate)
        resolve_inference(m, hw, InferenceConfig(tp=tp))
    for tp in (3, 6):
        with pytest.raises(InferenceConfigError, match=r"kv_heads \(4\) must divide one another"):
            resolve_inference(m, hw, InferenceConfig(tp=tp))


def test_fp8_needs_gpu_support():
    with pytest.raises(InferenceConfigError, match=r"fp8 needs fp8 support on the GPU; "
                                                   r"a100-sxm4-80gb"):
        predict_inference("llama-3-8b", "a100-sxm4-80gb", dtype="fp8")


# ----------------------------------------------------------------------------- quantization
def test_dtype_bindings_and_compute_peaks():
    h100 = load_hardware(H100)
    a100 = load_hardware("a100-sxm4-80gb")
    fp8 = _inputs("llama-3-8b", H100, dtype="fp8")
    assert fp8["fp8"] == 1 and fp8["peak_flops_8"] == h100.peak("fp8")
    assert fp8["w_bytes"] == fp8["act_bytes"] == fp8["kv_bytes"] == 1 and fp8["w_dequant"] == 0
    int8 = _inputs("llama-3-8b", "a100-sxm4-80gb", dtype="int8")
    assert int8["fp8"] == 1 and int8["peak_flops_8"] == a100.peak("int8")
    w4 = _inputs("llama-3-8b", "a100-sxm4-80gb", dtype="int4")  # W4A16
    assert w4["fp8"] == 0 and w4["w_dequant"] == 1
    assert w4["w_bytes"] == DTYPE_BYTES["int4"] == 0.5 + 2 / 128
    assert w4["act_bytes"] == 2 and w4["kv_bytes"] == 2
    assert w4["hbm_cap"] == a100.hbm_capacity


def test_fp8_prefill_faster_and_int4_decode_faster_than_bf16():
    base = dict(batch=8, input_len=2048, output_len=128)
    bf16 = predict_inference("llama-3-8b", H100, dtype="bf16", **base)
    fp8 = predict_inference("llama-3-8b", H100, dtype="fp8", **base)
    w4 = predict_inference("llama-3-8b", H100, dtype="int4", **base)
    assert fp8.ttft < 0.7 * bf16.ttft  # compute-bound prefill at twice the peak
    assert w4.tpot < bf16.tpot  # memory-bound decode reads a quarter of the weight bytes
    assert w4.values["mem_weights"] < 0.4 * bf16.values["mem_weights"]
    # int4 prefill is compute-bound at the dequantizing GEMM rate: slower than bf16
    assert w4.ttft > bf16.ttft


# ----------------------------------------------------------------------------- roofline of decode
def test_decode_memory_bound_at_batch_1_and_compute_bound_for_large_batch():
    inp = _inputs(tp=2, dtype="fp8", input_len=1024, output_len=128)
    b1 = _eval(inp, batch=1)
    assert b1["decode_gemm_time_memory"] > 10 * b1["decode_gemm_time_compute"]
    b4k = _eval(inp, batch=4096)
    assert b4k["decode_gemm_time_compute"] > b4k["decode_gemm_time_memory"]


def test_gemm_crossover_hand_checked_near_ridge():
    """One decode GEMM (Llama-2-70B MLP down-projection, fp8, TP 1) on H100: compute time
    ``2mnk/(P*e)`` equals HBM time ``(a*m*(k+n) + w*n*k)/(B*eh)`` at the batch m* below, which
    sits at ``ridge * w / 2`` up to the activation traffic (the decode GEMV's intensity is
    ~2m/w FLOP/byte); below m* the GEMM is memory-bound, above compute-bound."""
    P, B = 1978.9e12, 3350e9
    e, eh = 0.6, 0.8
    n, k, w, a = 8192, 28672, 1.0, 1.0
    m_star = w * n * k / (2 * n * k * B * eh / (P * e) - a * (k + n))
    ridge = P * e / (B * eh)
    assert m_star == pytest.approx(ridge * w / 2, rel=0.06)
    m = sp.Symbol("m", positive=True)
    c = gemm(m, n, k, S.peak_flops_8, elem_bytes=S.act_bytes, b_bytes=S.w_bytes,
             eff=gemm_efficiency(), overlap=S.gemm_overlap)
    vals = {S.peak_flops_8: P, S.hbm_bw: B, S.eff_gemm: e, S.eff_hbm: eh, S.w_bytes: w,
            S.act_bytes: a, S.w_dequant: 0, S.eff_dequant: 1,
            S.matmul_ceiling: 1}  # P * e: the rate at the ceiling (tests/test_matmul_ceiling.py)
    t_c = sp.lambdify(m, (c.flops / (P * e)).subs(vals))
    t_m = sp.lambdify(m, (c.bytes / (B * eh)).subs(vals))
    t = sp.lambdify(m, c.time.subs(vals).subs(S.gemm_overlap, 1))
    t_serial = sp.lambdify(m, c.time.subs(vals).subs(S.gemm_overlap, 0))
    assert t_c(m_star) == pytest.approx(t_m(m_star), rel=1e-9)
    assert t(m_star / 2) == pytest.approx(t_m(m_star / 2))  # memory-bound below
    assert t(2 * m_star) == pytest.approx(t_c(2 * m_star))  # compute-bound above
    # no overlap: the two times add; the penalty is largest at the ridge (a factor 2)
    assert t_serial(m_star) == pytest.approx(2 * t(m_star))
    assert t_serial(3 * m_star) / t(3 * m_star) < t_serial(m_star) / t(m_star)
    # the same crossover in the full model: decode GEMMs of one layer flip near m*
    inp = _inputs(dtype="fp8", input_len=512, output_len=64, batch=1)
    grid = np.arange(100, 400, dtype=float)
    arrays = {kk: np.full(grid.shape, v) for kk, v in inp.items()}
    arrays.update(batch=grid, eff_gemm=np.full_like(grid, e), eff_hbm_infer=np.full_like(grid, eh))
    out = evaluate_inference(arrays, "float64")
    flip = grid[np.argmax(out["decode_gemm_time_compute"] >= out["decode_gemm_time_memory"])]
    assert flip == pytest.approx(m_star, rel=0.1)


def test_default_roofline_unchanged_by_the_overlap_keyword():
    m = sp.Symbol("m", positive=True)
    plain = gemm(m, 512, 256, S.peak_flops_16)
    assert plain.time == gemm(m, 512, 256, S.peak_flops_16, overlap=None).time
    assert sp.simplify(gemm(m, 512, 256, S.peak_flops_16, overlap=sp.Integer(1)).time
                       - plain.time) == 0


# ----------------------------------------------------------------------------- properties
_BASE = None


def _base_inputs():
    global _BASE
    if _BASE is None:
        _BASE = _inputs("llama-3-8b", H100, dtype="bf16", batch=1, input_len=512,
                        output_len=64)
    return _BASE


@settings(max_examples=25, deadline=None)
@given(batch=st.integers(1, 2048), s_in=st.integers(1, 8000), s_out=st.integers(1, 4000),
       w=st.sampled_from([2.0, 1.0, 0.5]), tp=st.sampled_from([1, 2, 4, 8]),
       bw=st.floats(1e12, 2e13), peak=st.floats(1e14, 5e15))
def test_halving_weight_bytes_never_slows_decode(batch, s_in, s_out, w, tp, bw, peak):
    inp = _base_inputs()
    common = dict(batch=batch, input_len=s_in, output_len=s_out, tp=tp, hbm_bw=bw,
                  peak_flops_16=peak, peak_flops_8=peak)
    full = _eval(inp, w_bytes=w, **common)
    half = _eval(inp, w_bytes=w / 2, **common)
    assert half["tpot"] <= full["tpot"] * (1 + 1e-12)
    assert half["ttft"] <= full["ttft"] * (1 + 1e-12)
    assert half["serve_iteration"] <= full["serve_iteration"] * (1 + 1e-12) or (
        half["serve_batch"] > full["serve_batch"])  # more memory -> more sequences in flight
    assert half["mem_weights"] < full["mem_weights"]


@settings(max_examples=20, deadline=None)
@given(batch=st.integers(1, 4096), s_in=st.integers(1, 6000), s_out=st.integers(1, 2000),
       dp=st.integers(1, 8), demand=st.sampled_from([0.0, 1.0]))
def test_throughput_identities(batch, s_in, s_out, dp, demand):
    out = _eval(_base_inputs(), batch=batch, input_len=s_in, output_len=s_out, dp=dp,
                kv_on_demand=demand)
    assert out["serve_batch"] <= min(batch, max(out["serve_max_batch"], 0)) + 1e-9
    assert out["throughput"] == pytest.approx(dp * out["serve_batch"] / out["serve_iteration"])
    assert out["e2e_latency"] == pytest.approx(out["ttft"] + (s_out - 1) * out["tpot"])
    assert out["serve_ttft"] == pytest.approx(1.5 * out["serve_iteration"])
    assert out["serve_max_batch"] >= out["max_batch"]  # on-demand never holds more
    assert all(math.isfinite(v) for v in out.values())


def test_tpot_grows_with_context_and_batch():
    inp = _base_inputs()
    a = _eval(inp, batch=16, input_len=512, output_len=64)
    b = _eval(inp, batch=16, input_len=4096, output_len=64)
    c = _eval(inp, batch=64, input_len=512, output_len=64)
    assert b["tpot"] > a["tpot"] and c["tpot"] > a["tpot"]
    # affine in the mean context (KV reads grow with it, Q/O traffic does not)
    d = _eval(inp, batch=16, input_len=2304, output_len=64)
    assert d["decode_attention"] - a["decode_attention"] == pytest.approx(
        (b["decode_attention"] - a["decode_attention"]) / 2, rel=1e-6)


def test_tp_and_pp_terms():
    one = _eval(_inputs(dtype="fp8", batch=8))
    two = _eval(_inputs(dtype="fp8", batch=8, tp=2))
    assert one["decode_tp_comm"] == 0 and two["decode_tp_comm"] > 0
    assert one["decode_pp_p2p"] == 0
    pp = _eval(_inputs(dtype="fp8", batch=8, pp=2, num_gpus=2))
    assert pp["decode_pp_p2p"] > 0
    assert pp["mem_weights"] < 0.55 * one["mem_weights"]
    assert two["tpot"] < one["tpot"]  # memory-bound decode: half the weights per GPU


def test_flash_attention_prefill_faster():
    fa = _eval(_inputs("llama-3-8b", H100, batch=4, input_len=4096, output_len=16))
    un = _eval(_inputs("llama-3-8b", H100, batch=4, input_len=4096, output_len=16,
                       flash_attention=False))
    assert fa["prefill_attention"] < un["prefill_attention"]
    assert fa["decode_attention"] < un["decode_attention"]


# ----------------------------------------------------------------------------- compiled == SymPy
def test_compiled_equals_sympy():
    inp = _inputs(tp=2, dtype="fp8", batch=48, input_len=3000, output_len=300, pp=2,
                  num_gpus=8)
    cm = inference_model("float64")
    out = cm(**inp)
    exprs = inference_expressions()
    subs = {S.lookup(k): sp.Float(v, 30) for k, v in inp.items()}
    for name in ("ttft", "tpot", "throughput", "max_batch", "serve_max_batch", "mem_total",
                 "prefill_chunks", "prefill_flops", "serve_iteration", "decode_attention"):
        ref = float(sp.sympify(exprs[name].xreplace(subs)).evalf(30))
        assert float(out[name]) == pytest.approx(ref, rel=1e-9), name


def test_float32_close_to_float64():
    inp = _inputs(tp=2, dtype="fp8", batch=48, input_len=3000, output_len=300)
    a = inference_model("float64")(**inp)
    b = inference_model("float32")(**inp)
    for name in ("ttft", "tpot", "throughput"):
        assert float(b[name]) == pytest.approx(float(a[name]), rel=1e-4)


# ----------------------------------------------------------------------------- serving at a rate
def test_arrival_rate_steady_state_obeys_littles_law():
    inp = _inputs("llama-3-8b", H100, dtype="fp8", batch=4096, input_len=512, output_len=256)
    sat = _eval(inp)
    low = solve_arrival_rate(inp, 0.2 * sat["throughput"] / 256)
    assert low["saturated"] == 0
    assert low["concurrency"] == pytest.approx(
        0.2 * sat["throughput"] / 256 * 256.5 * low["iteration_s"], rel=0.02)
    assert low["iteration_s"] < sat["serve_iteration"]
    high = solve_arrival_rate(inp, 2 * sat["throughput"] / 256)
    assert high["saturated"] == 1
    assert high["throughput_tokens_per_s"] == pytest.approx(sat["throughput"])


def test_trtllm_bench_settings():
    assert trtllm_bench_max_num_tokens(100, 128, 128) == (128, 2048)
    assert trtllm_bench_max_num_tokens(5000, 128, 128) == (4096, 8192)
    assert trtllm_bench_max_num_tokens(3000, 20000, 2000)[1] == 32768


# ----------------------------------------------------------------------------- measurements
def _rows():
    base = dict(workload="serve", model="Llama-3.1-8B", layers=32, hidden=4096, heads=32,
                kv_heads=8, ffn_hidden=14336, vocab=128256, hardware=H100, n_gpus=1, tp=1,
                pp=1, dtype="fp8", source="test", notes="")
    return pd.DataFrame([
        dict(base, case_id="TRT017-a", input_len=128, output_len=128,
             metric="output_throughput", value=20000.0),
        dict(base, case_id="TRT017-b", input_len=128, output_len=128, metric="tpot_p99_ms",
             value=10.0),
        dict(base, case_id="TRT017-c", input_len=128, output_len=128,
             metric="output_throughput", value=1000.0, hardware="tpu-v9"),
        dict(base, case_id="NAR21-x", workload="train", metric="iteration_time_s", value=1.0),
        dict(base, case_id="MINE-p", workload="prefill", input_len=4096, output_len=1,
             micro_batch=2, metric="ttft_ms", value=500.0, dtype="bf16"),
    ])


def test_predict_inference_rows_predicts_and_explains_skips():
    fr = predict_inference_rows(_rows())
    assert list(fr["case_id"]) == ["TRT017-a", "MINE-p"]
    prefill = predict_inference("llama-3.1-8b", H100, batch=2, input_len=4096, output_len=1)
    assert fr.iloc[1]["predicted"] == pytest.approx(1e3 * prefill.ttft, rel=1e-9)
    assert set(fr.columns) >= {"case_id", "metric", "measured", "predicted", "error_pct"}
    row = fr.iloc[0]
    assert row["error_pct"] == pytest.approx(100 * (row["predicted"] - 20000) / 20000)
    direct = predict_inference("llama-3.1-8b", H100, dtype="fp8", batch=4096, input_len=128,
                               output_len=128, kv_mem_frac=0.95,
                               max_num_tokens=trtllm_bench_max_num_tokens(
                                   row["serve_batch"], 128, 128)[1], check_memory=False)
    assert row["predicted"] == pytest.approx(direct.throughput, rel=1e-6)
    skipped = {s["case_id"]: s["reason"] for s in fr.attrs["skipped"]}
    assert set(skipped) == {"TRT017-b", "TRT017-c"}  # the train row is not ours to report
    assert "not modelled" in skipped["TRT017-b"] and "tpu-v9" in skipped["TRT017-c"]


# ----------------------------------------------------------------------------- CLI
def test_cli_infer_json_has_the_documented_keys():
    res = RUNNER.invoke(app, ["infer", "--model", L70, "--hardware", H100, "--tp", "2",
                              "--dtype", "fp8", "--batch", "64", "--input-len", "2048",
                              "--output-len", "128", "--json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.stdout)
    for key in ("ttft_s", "tpot_s", "throughput_tokens_per_s", "memory_per_gpu_bytes",
                "max_batch"):
        assert key in d
    assert {"memory_weights_bytes", "memory_kv_cache_bytes", "schema_version"} <= set(d)
    assert d["memory_kv_cache_bytes"] == 64 * 81920 * 2176
    assert 0 < d["tpot_s"] < d["ttft_s"] and d["max_batch"] >= 64


def test_cli_infer_table_and_errors():
    res = RUNNER.invoke(app, ["infer", "--model", "llama-3-8b", "--hardware", H100,
                              "--batch", "4"])
    assert res.exit_code == 0, res.output
    assert "TTFT" in res.stdout and "TPOT" in res.stdout and "KV cache" in res.stdout
    bad = RUNNER.invoke(app, ["infer", "--model", "gpt3-175b", "--hardware", H100,
                              "--tp", "8", "--input-len", "5000"])
    assert bad.exit_code == 2
    assert bad.stderr.count("\n") == 1 and bad.stderr.startswith("error: context:")
    # a batch that does not fit: reported like train (result, one warning line, exit 0)
    big = RUNNER.invoke(app, ["infer", "--model", L70, "--hardware", H100, "--tp", "2",
                              "--dtype", "fp8", "--batch", "100000"])
    assert big.exit_code == 0 and "TTFT" in big.stdout
    assert big.stderr.startswith("warning: memory: ") and big.stderr.count("\n") == 1


def test_result_formula_keeps_symbols():
    r = predict_inference("llama-3-8b", H100, batch=2)
    f = r.formula("tpot", keep=("hbm_bw",))
    assert f.free_symbols == {S.hbm_bw}
    assert float(f.subs(S.hbm_bw, r.inputs["hbm_bw"])) == pytest.approx(r.tpot)
    assert dataclasses.asdict(r.config)["weight_dtype"] == "bf16"


# ----------------------------------------------------------------------------- review fixes
def _one_row(**kw):
    base = dict(workload="serve", model="Llama-3.1-8B", hardware=H100, n_gpus=1, tp=1, pp=1,
                dtype="bf16", source="test", notes="", input_len=128, output_len=128,
                case_id="MINE-r", metric="output_throughput", value=20000.0)
    base.update(kw)
    return pd.DataFrame([base])


@pytest.mark.parametrize("field, value, reason", [
    ("value", 0.0, "value: must be a positive number"),
    ("value", -3.0, "value: must be a positive number"),
    ("value", float("nan"), "value: must be a positive number"),
    ("value", "fast", "value: 'fast' is not a number"),
    ("tp", 1.5, "tp: 1.5 must be a whole number"),
    ("input_len", "long", "input_len: 'long' is not a number"),
    ("hardware", float("nan"), "hardware: blank"),
    ("model", float("nan"), "model: blank"),
])
def test_bad_measurement_rows_are_skipped_with_the_field_named(field, value, reason):
    fr = predict_inference_rows(_one_row(**{field: value}))
    assert len(fr) == 0
    (skip,) = fr.attrs["skipped"]
    assert skip["case_id"] == "MINE-r" and skip["reason"].startswith(reason), skip


def test_blank_dtype_in_a_measurement_row_defaults_to_bf16():
    blank = predict_inference_rows(_one_row(dtype=float("nan")))
    bf16 = predict_inference_rows(_one_row(dtype="bf16"))
    assert blank.attrs["skipped"] == [] and len(blank) == 1
    assert blank.iloc[0]["predicted"] == bf16.iloc[0]["predicted"]


def test_mlperf_row_with_zero_samples_per_s_is_not_a_crash():
    row = _one_row(case_id="MLPI40-x-offline", metric="offline_tokens_per_s",
                   model="Llama-2-70B", tp=2, n_gpus=2, dtype="fp8", input_len=float("nan"),
                   output_len=float("nan"), notes="0 samples/s")
    fr = predict_inference_rows(row)
    assert len(fr) == 1 and fr.attrs["skipped"] == []
    assert math.isfinite(fr.iloc[0]["predicted"])


def test_single_float64_prediction_uses_numpy_and_resolves_once(monkeypatch):
    import symcost.infer_api as ia
    from symcost.lower import CompiledModel

    ref = {k: float(v) for k, v in evaluate_inference(
        _inputs("llama-3-8b", H100, batch=8), "float64").items()}
    calls = []
    real_resolve = ia.resolve_inference
    monkeypatch.setattr(ia, "resolve_inference",
                        lambda *a: calls.append(1) or real_resolve(*a))

    def no_jax(*a, **k):
        raise AssertionError("the jitted JAX function was called")

    monkeypatch.setattr(CompiledModel, "__call__", no_jax)
    r = predict_inference("llama-3-8b", H100, batch=8)
    assert len(calls) == 1
    for k, v in ref.items():
        assert r.values[k] == pytest.approx(v, rel=1e-12, abs=1e-300), k


def test_predict_inference_float64_does_not_import_jax():
    import os
    import subprocess
    import sys

    code = ("import sys; from symcost.infer_api import predict_inference; "
            "predict_inference('llama-3-8b', 'h100-sxm5-80gb', batch=8); "
            "assert 'jax' not in sys.modules, 'jax imported'")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=root + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]


def test_helpers_are_shared_with_the_training_side():
    import symcost.api as api
    import symcost.infer_api as ia
    import symcost.inference as inf
    import symcost.training as tr
    from symcost.ops import cost

    assert ia.as_model is api.as_model and ia.as_hardware is api.as_hardware
    assert inf.select is tr.select is cost.select
    assert inf.sum_time is tr.sum_time is cost.sum_time
    assert inf.total is cost.total
    assert not hasattr(inf, "_sum") and not hasattr(inf, "_time")


def test_arrival_rate_uses_the_ttft_iterations_constant(monkeypatch):
    import symcost.infer_api as ia

    inp = _inputs("llama-3-8b", H100, dtype="fp8", batch=4096, input_len=512, output_len=256)
    rate = 0.2 * _eval(inp)["throughput"] / 256
    monkeypatch.setattr(ia, "TTFT_ITERATIONS", sp.Rational(5, 2))
    low = solve_arrival_rate(inp, rate)
    assert low["saturated"] == 0
    assert low["ttft_s"] == pytest.approx(2.5 * low["iteration_s"], rel=1e-12)
    assert low["concurrency"] == pytest.approx(rate * (256 + 1.5) * low["iteration_s"],
                                               rel=0.02)


def test_docstrings_state_returns_and_the_raised_error():
    assert "Returns:" in trtllm_bench_max_num_tokens.__doc__
    raises = solve_arrival_rate.__doc__.split("Raises:")[1]
    assert "InferenceConfigError" in raises and "ValueError" not in raises
    with pytest.raises(InferenceConfigError, match="rate: must be positive"):
        solve_arrival_rate(_inputs("llama-3-8b", H100), 0.0)


def test_result_formula_accepts_field_names_and_rejects_unknown_names():
    from symcost.substitution import ExplainError

    r = predict_inference("llama-3-8b", H100, batch=2)
    f = r.formula("kv_bytes_per_token", keep=("layers", "kv_bytes"))
    assert f.free_symbols == {S.n_layers, S.kv_bytes}
    assert float(f.xreplace({S.n_layers: 32, S.kv_bytes: 2})) == r.values["kv_bytes_per_token"]
    with pytest.raises(ExplainError, match="keep: unknown name 'bogus'"):
        r.formula("tpot", keep=("bogus",))


def test_serving_never_reads_the_training_kernel_efficiencies():
    """The calibration fits ``eff_hbm`` and ``eff_attn`` on training runs
    (``calibrate.DEFAULT_FIT``); serving must read its own ``eff_hbm_infer`` and
    ``eff_attn_infer`` (``inference.INFERENCE_EFFICIENCIES``) in every output, or a training
    fit (Hopper's ``eff_hbm`` 0.8 -> 0.51) would slow memory-bound decode by half."""
    free = free_symbols_shared(inference_expressions().values())
    assert S.eff_hbm not in free and S.eff_attn not in free
    assert {S.eff_hbm_infer, S.eff_attn_infer, S.eff_gemm} <= free
    assert "eff_hbm" in DEFAULT_FIT and "eff_attn" in DEFAULT_FIT
