"""Technology scaling study: accelerators derived at each process node (12 nm -> 1 nm) with a
fixed memory and link generation (``hwspecs.technology.derive_accelerator``), and what they buy
for GPT-3 175B training on 1,024 GPUs and Llama-2-70B decoding.

Every derived chip has the H100 architecture (the reference: its dtypes, calibrated
``hopper`` efficiencies, latencies) on the H100's die area and TDP (814 mm^2, 700 W), with 8
HBM3e stacks, NVLink 5 and one NDR InfiniBand NIC per GPU. Only the node changes, so the dense
peak follows ``min(s_area, s_power)`` of the node (see ``hwspecs/technology.py``); the memory
and links stay fixed, and the bound moves from compute to memory and communication.

Printed per node: the dense bf16 peak and which budget binds (area or power); for training the
best step time found by ``optimizers.search.search(model, hw, 1024, 1536, max_tp=8)``, its
layout, MFU and the dominant ``symcost.bottleneck`` category; for decoding the TPOT and the
dominant part of the decode step (compute or memory from the decode GEMMs' compute and HBM
times, plus attention and memory-bound ops as memory, tensor/pipeline communication as
communication). The real A100, H100 and B200 are printed for comparison. Print only.

Usage::

    PYTHONPATH=. python benchmarks/technology_scaling.py
"""

from __future__ import annotations

import time

NODES = ("12", "7", "5", "3", "2", "1")
DESIGN = dict(memory="hbm3e", link="nvlink5", network="ib-ndr", die_area_mm2=814.0,
              power_w=700.0, reference="h100-sxm5-80gb", hbm_stacks=8)
REAL = ("a100-sxm4-80gb", "h100-sxm5-80gb", "b200")
TRAIN = dict(model="gpt3-175b", num_gpus=1024, global_batch=1536, max_tp=8)
DECODE = dict(model="llama-2-70b", tp=8, batch=64, input_len=2048, output_len=128, dtype="bf16")


def _decode_bound(v: dict) -> tuple[str, dict]:
    gemm_bound = ("compute" if v["decode_gemm_time_compute"] >= v["decode_gemm_time_memory"]
                  else "memory")
    parts = {"compute": 0.0, "memory": 0.0, "communication": 0.0}
    parts[gemm_bound] += v["decode_gemm"] + v["decode_lm_head"]
    parts["memory"] += v["decode_attention"] + v["decode_memory_ops"]
    parts["communication"] += v["decode_tp_comm"] + v["decode_pp_p2p"]
    return max(parts, key=parts.get), parts


def main() -> None:
    from hwspecs import load_hardware
    from hwspecs.technology import derive_accelerator, peak_scale
    from optimizers.search import search
    from symcost.bottleneck import bottleneck
    from symcost.infer_api import predict_inference

    chips = []
    for node in NODES:
        kw = {k: v for k, v in DESIGN.items() if k not in ("memory", "link", "network")}
        hw = derive_accelerator(node, DESIGN["memory"], DESIGN["link"], DESIGN["network"], **kw)
        ps = peak_scale(node, die_area_mm2=DESIGN["die_area_mm2"], power_w=DESIGN["power_w"],
                        reference=DESIGN["reference"])
        chips.append((f"{node} nm", hw, ps.bound))
    chips += [(r, load_hardware(r), "real") for r in REAL]

    print("# Technology scaling: H100 architecture, 814 mm^2, 700 W, 8x HBM3e, NVLink 5, NDR\n")
    print(f"{'chip':16s} {'bf16 TF':>8s} {'bound':>6s} {'HBM TB/s':>8s} | "
          f"{'GPT-3 step s':>12s} {'layout':>22s} {'MFU':>5s} {'dominant':>14s} | "
          f"{'TPOT ms':>8s} {'decode bound':>13s}")
    for label, hw, bound in chips:
        t0 = time.perf_counter()
        res = search(TRAIN["model"], hw, TRAIN["num_gpus"], TRAIN["global_batch"],
                     max_tp=TRAIN["max_tp"])
        row = res.table.iloc[0]
        cfg = res.best
        b = bottleneck(TRAIN["model"], hw, cfg)
        dom = max(b.categories, key=b.categories.get)
        layout = f"tp{cfg.tp} pp{cfg.pp} dp{cfg.dp} mb{cfg.micro_batch}"
        r = predict_inference(DECODE["model"], hw, tp=DECODE["tp"], batch=DECODE["batch"],
                              input_len=DECODE["input_len"], output_len=DECODE["output_len"],
                              dtype=DECODE["dtype"], check_memory=False)
        dbound, _ = _decode_bound(r.values)
        dt = time.perf_counter() - t0
        print(f"{label:16s} {hw.peak('bf16') / 1e12:8.0f} {bound:>6s} "
              f"{hw.hbm_bandwidth / 1e12:8.2f} | {row['step_time']:12.2f} {layout:>22s} "
              f"{row['mfu']:5.2f} {dom:>8s} {100 * b.categories[dom]:4.0f}% | "
              f"{r.tpot * 1e3:8.2f} {dbound:>13s}   ({dt:.0f} s)", flush=True)
    print("\nGPT-3 175B: 1,024 GPUs, global batch 1,536, best layout with tp <= 8 (bf16). "
          "Llama-2-70B decode: tp=8, batch 64, 2,048 in -> 128 out, bf16.")


if __name__ == "__main__":
    main()
