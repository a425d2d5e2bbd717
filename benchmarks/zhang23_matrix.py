"""The benchmark matrix of Zhang et al. 2023 (arXiv:2311.03687v2, Table III), predicted.

Every (platform, model size, technique) cell: Llama-2 7B/13B/70B pre-training at micro-batch
1 and 350-token sequences with DeepSpeed-style data parallelism over the 8 GPUs of one node,
on 8x A800-80GB (NVLink), 8x RTX 4090 (PCIe, no peer-to-peer), 8x RTX 3090 with NVLink
bridges and with NVLink disabled. Techniques are the paper's combinations of activation
recomputation (R), FlashAttention (F), ZeRO-2/3 (Z2, Z3), CPU offload (O) and 4-bit
quantization (Q: QLoRA, NF4 base with rank-64 adapters on every projection).

For each cell it predicts tokens/s (whole node), peak memory per GPU (GiB), whether it fits,
and the scaling efficiency from 1 to 8 GPUs (same micro-batch per GPU). A configuration a
rule forbids (e.g. parameter offload without ZeRO-3) is listed with its reason.

Usage::

    python benchmarks/zhang23_matrix.py [out.csv] [--params params.yaml]

Prints the table and writes the CSV (default ``zhang23_matrix.csv`` in the working directory).
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from symcost.api import evaluate_training, stack_training_inputs
from symcost.config import ConfigError, TrainingConfig, resolve
from symcost.models import get_model
from symcost.params import load_params
from hwspecs import load_hardware

PLATFORMS = (("A800", "a800-sxm4-80gb", "nvlink"), ("RTX4090", "rtx-4090", "pcie"),
             ("RTX3090-NVLink", "rtx-3090", "nvlink-bridge"), ("RTX3090-PCIe", "rtx-3090", "pcie"))
MODELS = (("7B", "llama-2-7b"), ("13B", "llama-2-13b"), ("70B", "llama-2-70b"))
SEQ = 350
GPUS = 8


@dataclass(frozen=True)
class Technique:
    """One column of the paper's Table III."""

    name: str
    recompute: str = "none"
    flash: bool = False
    zero: int = 0
    offload: str = "none"
    finetune: str = "full"


def techniques() -> list[Technique]:
    """The paper's combinations: {-, R, F, R+F} x {none, Z2, Z2+O, Z3, Z3+O, Q}."""
    out = []
    for rec in ("none", "full"):
        for flash in (False, True):
            prefix = "_".join(x for x, on in (("f", flash), ("r", rec == "full")) if on)
            for tag, zero, off, ft in (("naive", 0, "none", "full"), ("z2", 2, "none", "full"),
                                       ("z2_o", 2, "optimizer", "full"),
                                       ("z3", 3, "none", "full"),
                                       ("z3_o", 3, "optimizer+params", "full"),
                                       ("q", 0, "none", "qlora")):
                name = f"{prefix}_{tag}" if prefix else tag
                out.append(Technique(name, rec, flash, zero, off, ft))
    return out


def main(argv: list[str]) -> None:
    params_path = argv[argv.index("--params") + 1] if "--params" in argv else None
    rest = [a for a in argv if not a.startswith("--") and a != params_path]
    out_csv = rest[0] if rest else "zhang23_matrix.csv"
    params = load_params(params_path)
    t0 = time.perf_counter()
    cells, configs, singles, reasons = [], [], [], []
    for plat, hw_id, link in PLATFORMS:
        hw = load_hardware(hw_id)
        for size, model_id in MODELS:
            model = get_model(model_id)
            for tech in techniques():
                kw = dict(micro_batch=1, seq_len=SEQ, recompute=tech.recompute,
                          flash_attention=tech.flash, zero=tech.zero, offload=tech.offload,
                          finetune=tech.finetune, lora_rank=64, intra_node_link=link)
                cell = {"platform": plat, "hardware": hw_id, "intra_node_link": link,
                        "model": size, "technique": tech.name}
                try:
                    cfg = resolve(model, hw, TrainingConfig(num_gpus=GPUS, **kw))
                    one = resolve(model, hw, TrainingConfig(num_gpus=1, **kw))
                except ConfigError as exc:
                    reasons.append({**cell, "invalid": str(exc)})
                    continue
                cells.append(cell)
                configs.append((model, hw, cfg))
                singles.append((model, hw, one))
    out8 = evaluate_training(stack_training_inputs(configs, params), precision="float64")
    out1 = evaluate_training(stack_training_inputs(singles, params), precision="float64")
    tokens = GPUS * SEQ
    df = pd.DataFrame(cells)
    df["tokens_per_s"] = tokens / out8["step_time"]
    df["peak_mem_gib"] = out8["mem_total"] / 2**30
    df["fits"] = out8["mem_headroom"] >= 0
    df["scaling_eff_pct"] = np.asarray(out1["step_time"]) / out8["step_time"] * 100.0
    df["fits_1gpu"] = out1["mem_headroom"] >= 0
    df = pd.concat([df, pd.DataFrame(reasons)], ignore_index=True)
    dt = time.perf_counter() - t0
    df.to_csv(out_csv, index=False)
    pd.set_option("display.width", 200)
    pd.set_option("display.max_rows", 500)
    show = df[df["invalid"].isna()] if "invalid" in df else df
    print(show.drop(columns=["hardware", "invalid"], errors="ignore").to_string(
        index=False, float_format=lambda x: f"{x:.1f}"))
    print(f"{len(show)} cells predicted ({len(reasons)} invalid combinations listed in the "
          f"CSV) in {dt:.1f} s; written to {out_csv}")


if __name__ == "__main__":
    main(sys.argv[1:])
