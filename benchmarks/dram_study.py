"""DRAM technology study: decode and prefill latency as HBM bandwidth scales through HBM2e,
HBM3, HBM3e and HBM4 (per-stack figures and sources in ``symcost.roofline.HBM_TECHNOLOGIES``),
at fixed compute, and where decode stops being memory-bound.

For each scenario the GPU keeps its compute, capacity, interconnect and calibrated constants;
only the HBM bandwidth changes (``stacks x`` the technology's per-stack bandwidth). Printed per
technology and decode batch: TTFT, TPOT, throughput, whether the decode GEMMs are memory- or
compute-bound, the batch at which they become compute-bound, and the bandwidth above which
decode at that batch is compute-bound (``bw * t_memory / t_compute``).

Usage::

    PYTHONPATH=. python benchmarks/dram_study.py
"""

from __future__ import annotations

import time

SCENARIOS = (
    # (model, base GPU, stacks, tp, dtype, input_len, output_len)
    ("llama-2-70b", "b200", 8, 1, "fp8", 2048, 128),
    ("llama-3.1-8b", "h100-sxm5-80gb", 5, 1, "fp8", 1024, 256),
)
BATCHES = (1, 8, 32, 128, 512)


def main() -> None:
    from symcost.roofline import HBM_TECHNOLOGIES, dram_study

    print("# DRAM technology study\n")
    for t in HBM_TECHNOLOGIES:
        print(f"  {t['name']:6s} {t['gbps_per_pin']:4.1f} Gb/s x {t['bus_bits']} bits = "
              f"{t['stack_gbs']:7.1f} GB/s per stack  [{t['source']}]")
    for model, gpu, stacks, tp, dtype, s_in, s_out in SCENARIOS:
        t0 = time.perf_counter()
        d = dram_study(model, gpu, stacks=stacks, batches=BATCHES, tp=tp, dtype=dtype,
                       input_len=s_in, output_len=s_out)
        dt = time.perf_counter() - t0
        print(f"\n## {model} on {gpu} compute, {stacks} stacks, tp={tp}, {dtype}, "
              f"{s_in} in -> {s_out} out  ({dt:.1f} s)")
        print(f"{'technology':24s} {'TB/s':>6s} {'batch':>5s} {'TTFT s':>8s} {'TPOT ms':>8s} "
              f"{'tok/s':>9s} {'decode':>8s} {'x-over batch':>12s} {'compute-bound above':>20s}")
        for _, r in d.iterrows():
            print(f"{r['technology']:24s} {r['bandwidth'] / 1e12:6.2f} {r['batch']:5d} "
                  f"{r['ttft_s']:8.3f} {r['tpot_s'] * 1e3:8.2f} "
                  f"{r['throughput_tokens_per_s']:9.0f} {r['decode_bound']:>8s} "
                  f"{r['crossover_batch']:12.0f} {r['bw_compute_bound'] / 1e12:15.2f} TB/s"
                  + ("" if r["fits"] else "  (batch does not fit)"))
        print("Decode at batch b stops being memory-bound once HBM bandwidth exceeds:")
        first = d[d["technology"] == d["technology"].iloc[0]]
        for _, r in first.iterrows():
            print(f"  batch {r['batch']:4d}: {r['bw_compute_bound'] / 1e12:7.2f} TB/s")
        base = d[d["batch"] == 1]
        tpots = dict(zip(base["technology"], base["tpot_s"]))
        names = [t["name"] for t in HBM_TECHNOLOGIES]
        print("Batch-1 TPOT speed-up over HBM2e: " + ", ".join(
            f"{n} {tpots['HBM2e'] / tpots[n]:.2f}x" for n in names[1:]))
        ttfts = dict(zip(base["technology"], base["ttft_s"]))
        print("Batch-1 TTFT speed-up over HBM2e (prefill is compute-bound): " + ", ".join(
            f"{n} {ttfts['HBM2e'] / ttfts[n]:.2f}x" for n in names[1:]))


if __name__ == "__main__":
    main()
