"""Throughput of the compiled training model: configurations per second.

Prints, for a random design space of GPT-3-175B-like training runs (12 variables varied:
GPU count, TP, PP, micro-batch, global batch, recompute mode, ZeRO stage, layers, sequence
length, HBM bandwidth, dense peak, inter-node bandwidth; the rest fixed):

1. the sweep engine (:mod:`symcost.sweep`: step time, tokens/s, MFU, memory total and
   headroom, and the validity rules, in one compiled function streamed in 2**16-row chunks)
   at 1e4, 1e5, 1e6 and 1e7 configurations, float32 and float64;
2. the same with all 24 outputs of ``training_model()``;
3. the same outputs as a plain Python loop over scalars (``sympy.lambdify`` with the
   ``math`` module and ``cse=True``) on a few thousand configurations, and the ratio;
4. float32 against float64 on 1e6 configurations: relative error, fit flips, top-100
   ranking overlap (the evidence behind the sweep's ``mixed`` precision);
5. vectorized sensitivities (:func:`symcost.sensitivity.elasticities`, 20 parameters x 3
   outputs) in float64 and float32;
6. an end-to-end ``sweep()`` of 1e6 random configurations (sampling, masks, DataFrame,
   float64 re-check).

Rates are also given per CPU-second of this process: on a machine shared with other jobs the
wall-clock rate understates what the two cores do (XLA:CPU splits each fused loop over the
cores; a busy core stalls every split).

Compile time is excluded from rates (it is printed separately). Rates are the best of a few
repetitions (the machine may be shared). Run::

    PYTHONPATH=. python benchmarks/throughput.py [--quick]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from symcost import sweep as SW
from symcost.api import training_inputs_symbols, training_model
from symcost.config import RECOMPUTE_MODES, TrainingConfig
from symcost.params import load_params

MODEL, HARDWARE = "gpt3-175b", "a100-sxm4-80gb"
BASE = TrainingConfig(num_gpus=1024, tp=8, pp=16, global_batch=1536, recompute="full")
SPACE = {
    "num_gpus": [64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
    "tp": [1, 2, 4, 8], "pp": [1, 2, 4, 8, 16, 32], "micro_batch": [1, 2, 4],
    "global_batch": [512, 1024, 1536, 2048, 4096], "recompute": [0, 1, 2],
    "zero": [0, 1], "layers": SW.Range(32, 128), "seq_len": [1024, 2048, 4096],
    "hbm_bw": SW.Range(1e12, 8e12, log=True), "peak_flops_16": SW.Range(3e14, 2.5e15, log=True),
    "inter_bw": SW.Range(1.25e10, 1e11, log=True),
}
SIZES = (10**4, 10**5, 10**6, 10**7)


def _space_columns(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: SW.sample_values(k, np.asarray(v, float) if isinstance(v, list) else v, n, rng)
            for k, v in SPACE.items()}


def _plan_and_base(outputs=SW.DEFAULT_OUTPUTS):
    from hwspecs import load_hardware

    from symcost.models import get_model

    hw = load_hardware(HARDWARE)
    base = SW._base_values(get_model(MODEL), hw, BASE, load_params())
    return SW._make_plan(base, list(SPACE), outputs, hw), base


def _best(fn, reps: int) -> float:
    best = math.inf
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def sweep_engine(sizes, dtype: str, cols: dict, reps: int) -> dict[int, tuple[float, float]]:
    """Configurations/s of the sweep's compiled chunk function at each size, two ways:

    * ``model``: chunks already in JAX arrays, outputs left in JAX arrays and dropped as
      they complete (the compiled model's own rate, as the target is stated);
    * ``streamed``: :func:`symcost.sweep._evaluate`, NumPy columns in and out (what a sweep
      pays: float64 input columns, float32 conversion, transfer, result copies).

    Returns ``{size: (model rate, streamed rate)}``; also prints rates per CPU-second of this
    process (a machine shared with other work shows it in the gap between the two).
    """
    import jax

    plan, base = _plan_and_base()
    fn = SW._chunk_function(plan, dtype)
    np_dt = np.float64 if dtype == "float64" else np.float32
    C = SW.DEFAULT_CHUNK
    t = time.perf_counter()
    SW._evaluate(plan, base, 10, lambda s, n, _k: [cols[v][s:s + n] for v in plan.varied],
                 C, dtype, None)
    print(f"  compile ({dtype}, sweep outputs): {time.perf_counter() - t:.2f} s")
    out = {}
    with jax.enable_x64(dtype == "float64"):
        import jax.numpy as jnp

        fixed = tuple(jnp.asarray(np.asarray(base[n], dtype=np_dt)) for n in plan.fixed)
        for n in sizes:
            n_chunks = -(-n // C)
            pad = n_chunks * C
            dev = [tuple(jnp.asarray(np.resize(cols[v][:n], pad)[k * C:(k + 1) * C]
                                     .astype(np_dt)) for v in plan.varied)
                   for k in range(n_chunks)]

            def model():
                # results are dropped as they complete (a streamed sweep reuses its output
                # buffers; keeping 1e7 rows of results alive would time page faults instead)
                prev = None
                for a in dev:
                    res = fn(a, fixed)
                    if prev is not None:
                        jax.block_until_ready(prev)
                    prev = res
                jax.block_until_ready(prev)

            r = reps if n <= 10**6 else 2  # 1e7: the first pass also page-faults ~1 GB
            cpu0 = time.process_time()
            secs = _best(model, r)
            cpu = (time.process_time() - cpu0) / r
            del dev
            cpu1 = time.process_time()
            secs_s = _best(lambda n=n: SW._evaluate(
                plan, base, n, lambda s, m, _k: [cols[v][s:s + m] for v in plan.varied],
                C, dtype, None), r)
            cpu_s = (time.process_time() - cpu1) / r
            out[n] = (n / secs, n / secs_s)
            print(f"  {dtype} {n:>10,d} configs: model {n / secs:10.4g} configs/s "
                  f"({n / cpu:.3g} per CPU-s); streamed {n / secs_s:10.4g} configs/s "
                  f"({n / cpu_s:.3g} per CPU-s)")
    return out


def all_outputs(n: int, dtype: str, cols: dict, reps: int) -> float:
    """Configurations/s of ``training_model(dtype)`` (24 outputs), streamed in chunks."""
    import jax

    plan, base = _plan_and_base()
    cm = training_model(dtype)
    np_dt = np.float64 if dtype == "float64" else np.float32
    chunk = SW.DEFAULT_CHUNK
    rows = {}
    # per-row inputs with dp derived the way the sweep derives it
    dp = cols["num_gpus"] / (cols["tp"] * cols["pp"])
    with jax.enable_x64(dtype == "float64"):
        import jax.numpy as jnp

        def args(s):
            row = dict(base)
            row.update({k: c[s:s + chunk] for k, c in cols.items()})
            row["dp"] = dp[s:s + chunk]
            sym = SW.model_arguments(row, np)        # variable names -> symbol names
            return [jnp.asarray(np.asarray(sym[name], np_dt)) for name in cm.input_names]

        jax.block_until_ready(cm._jitted(*args(0)))

        def run():
            for s in range(0, n, chunk):
                res = cm._jitted(*args(s))
                rows[s] = [np.asarray(r) for r in res]

        secs = _best(run, reps)
    return n / secs


def scalar_loop(n: int, cols: dict) -> tuple[float, np.ndarray]:
    """Configurations/s of the same outputs as a Python loop over scalars (math module)."""
    import sympy as sp

    from symcost.training import training_expressions

    plan, base = _plan_and_base()
    exprs = training_expressions()
    inputs = training_inputs_symbols()
    f = sp.lambdify(inputs, [exprs[o] for o in SW.DEFAULT_OUTPUTS],
                    modules=[{"CeilDiv": lambda a, b: math.ceil(a / b)}, "math"], cse=True)
    names = [s.name for s in inputs]
    rows = []
    for i in range(n):
        v = dict(base)
        v.update({k: float(c[i]) for k, c in cols.items()})
        v["dp"] = v["num_gpus"] / (v["tp"] * v["pp"])
        args = SW.model_arguments(v, np)
        rows.append([float(args[k]) for k in names])
    out = np.empty((n, len(SW.DEFAULT_OUTPUTS)))
    t = time.perf_counter()
    for i, r in enumerate(rows):
        out[i] = f(*r)
    return n / (time.perf_counter() - t), out


def precision_study(n: int, cols: dict) -> None:
    """float32 against float64 on the same rows."""
    plan, base = _plan_and_base()

    def get(s, m, _k):
        return [cols[v][s:s + m] for v in plan.varied]

    _, o32, c32, _ = SW._evaluate(plan, base, n, get, SW.DEFAULT_CHUNK, "float32", None)
    _, o64, c64, _ = SW._evaluate(plan, base, n, get, SW.DEFAULT_CHUNK, "float64", None)
    h32, h64 = o32["mem_headroom"], o64["mem_headroom"]
    rule_ok = (c64 == 0) | (c64 == len(SW.REASONS))
    print(f"  rows passing the rules: {rule_ok.sum():,} of {n:,}")
    for o in ("step_time", "tokens_per_s", "mfu", "mem_total"):
        a, b = o32[o][rule_ok].astype(np.float64), o64[o][rule_ok]
        rel = np.abs(a - b) / np.abs(b)
        print(f"  {o:13s} max rel. error float32 vs float64: {rel.max():.2e} "
              f"(median {np.median(rel):.1e})")
    flips = int(((h32[rule_ok] >= 0) != (h64[rule_ok] >= 0)).sum())
    near = int((np.abs(h64[rule_ok]) <= SW.RECHECK_HEADROOM_REL * 78e9).sum())
    print(f"  fit decision flips (headroom sign): {flips}; rows within the re-check band "
          f"(|headroom| <= {SW.RECHECK_HEADROOM_REL:g} x usable): {near}")
    ok = np.flatnonzero(c64 == 0)
    top32 = set(ok[np.argsort(o32["step_time"][ok], kind="stable")[:100]])
    top64 = set(ok[np.argsort(o64["step_time"][ok], kind="stable")[:100]])
    print(f"  top-100 by step time: {len(top32 & top64)} rows in common "
          "(float32 ranking vs float64)")


def sensitivities(n: int, dtype: str, outputs, reps: int) -> tuple[float, float]:
    """Configurations/s of vectorized elasticities (20 continuous parameters) of ``outputs``:
    ``(wall rate, rate per CPU-second)``."""
    from symcost import sensitivity as SE
    from symcost.api import training_inputs

    base = training_inputs(MODEL, HARDWARE, BASE)
    rng = np.random.default_rng(1)
    table = dict(base)
    for w in SE.continuous_parameters():
        table[w] = base[w] * rng.uniform(0.7, 1.3, n)
    table["tp"] = rng.choice([1.0, 2.0, 4.0, 8.0], n)
    table["pp"] = rng.choice([4.0, 8.0, 16.0], n)
    table["micro_batch"] = rng.choice([1.0, 2.0], n)
    t = time.perf_counter()
    SE.elasticities({k: (v[:16] if np.ndim(v) else v) for k, v in table.items()},
                    outputs=outputs, precision=dtype)
    print(f"  compile ({dtype}, elasticities of {', '.join(outputs)}): "
          f"{time.perf_counter() - t:.2f} s")
    cpu0 = time.process_time()
    secs = _best(lambda: SE.elasticities(table, outputs=outputs, precision=dtype), reps)
    cpu = (time.process_time() - cpu0) / reps
    print(f"  {dtype}: {n / secs:.4g} configs/s ({n / cpu:.3g} per CPU-s)")
    return n / secs, n / cpu


def end_to_end(n: int) -> float:
    # the sweep API takes field values (recompute by name); SPACE holds the engine's codes
    names = {v: k for k, v in RECOMPUTE_MODES.items()}
    vary = {k: ([names[c] for c in v] if k == "recompute" else v) for k, v in SPACE.items()}
    SW.sweep(MODEL, HARDWARE, BASE, vary=vary, samples=SW.CHUNK_SIZES[-1])  # compile both chunk sizes
    t = time.perf_counter()
    df = SW.sweep(MODEL, HARDWARE, BASE, vary=vary, samples=n)
    secs = time.perf_counter() - t
    print(f"  sweep() {n:,} random rows, mixed precision: {secs:.2f} s "
          f"({n / secs:.3g} configs/s incl. sampling, masks, DataFrame); valid rows "
          f"{df.attrs['valid_rows']:,}, re-checked in float64 {int(df['rechecked'].sum())}")
    return n / secs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="skip 1e7 and use fewer repetitions")
    args = ap.parse_args()
    sizes = SIZES[:-1] if args.quick else SIZES
    reps = 3 if args.quick else 8
    cols = _space_columns(max(sizes))

    print("1. sweep engine (step_time, tokens_per_s, mfu, mem_total, mem_headroom + rules)")
    r32 = sweep_engine(sizes, "float32", cols, reps)
    r64 = sweep_engine(sizes, "float64", cols, reps)
    print("2. all 24 outputs of training_model(), 1e6 configs")
    a32 = all_outputs(10**6, "float32", cols, reps)
    a64 = all_outputs(10**6, "float64", cols, reps)
    print(f"  float32: {a32:.4g} configs/s; float64: {a64:.4g} configs/s")
    print("3. plain Python loop over scalars (lambdify, math module, cse)")
    n_loop = 2000
    rate_loop, loop_vals = scalar_loop(n_loop, cols)
    print(f"  {n_loop} configs: {rate_loop:.4g} configs/s; extrapolated to 1e6: "
          f"{1e6 / rate_loop:.0f} s")
    print(f"  ratio at 1e6 (model): float32 / scalar loop = {r32[10**6][0] / rate_loop:,.0f}x;"
          f" float64 = {r64[10**6][0] / rate_loop:,.0f}x; streamed float32 = "
          f"{r32[10**6][1] / rate_loop:,.0f}x")
    print("4. float32 vs float64, 1e6 configs")
    precision_study(10**6, cols)
    print("5. vectorized sensitivities (20 parameters), 1e5 configs")
    sens = {}
    for outs in (("step_time",), ("step_time", "mfu", "mem_total")):
        for dt in ("float64", "float32"):
            sens[(outs, dt)] = sensitivities(10**5, dt, outs, reps)
    print("6. end to end")
    end_to_end(10**6)

    print("\nsummary (configs/s; model = compiled function on JAX arrays, streamed = NumPy "
          "columns in and out)")
    print(f"  {'size':>10s} {'f32 model':>12s} {'f64 model':>12s} {'f32 streamed':>13s} "
          f"{'f64 streamed':>13s}")
    for n in sizes:
        print(f"  {n:>10.0e} {r32[n][0]:12.4g} {r64[n][0]:12.4g} {r32[n][1]:13.4g} "
              f"{r64[n][1]:13.4g}")
    print(f"  scalar loop {rate_loop:.4g}; ratio float32 model @1e6 "
          f"{r32[10**6][0] / rate_loop:,.0f}x")
    print(f"  target float32 @1e6 >= 5e7: {'met' if r32[10**6][0] >= 5e7 else 'NOT met'}")
    for (outs, dt), (wall, cpu) in sens.items():
        print(f"  sensitivities of {'+'.join(outs)} ({dt}): {wall:.4g} configs/s "
              f"({cpu:.3g} per CPU-s); target >= 3e6: {'met' if wall >= 3e6 else 'NOT met'}")


if __name__ == "__main__":
    main()
