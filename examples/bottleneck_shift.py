"""Where the bottleneck moves when only logic scales: the seed study's technology question
(Kundu et al. 2024, arXiv:2407.14645) for a training and an inference workload.

Run: ``PYTHONPATH=. python examples/bottleneck_shift.py --out OUT_DIR [--quick]``.

Accelerators are derived at each process node, 12 nm -> 1 nm
(:func:`hwspecs.technology.derive_accelerator`: the H100 architecture on the H100's die area
and power budget), while memory and interconnect stay at the A100 generation (HBM2e, NVLink 3,
HDR InfiniBand). At each node :mod:`optimizers.dse` searches the best layout again and splits
the time into compute, memory and communication:

* training: GPT-3 175B on 4,096 GPUs, global batch 1,024 (a strong-scaling setting where
  little work per GPU is left to hide communication behind);
* inference: Llama-2-70B on 8 GPUs, 512 input and 128 output tokens, throughput at a relaxed
  time per output token of 500 ms (large decode batches, so the decode GEMMs start
  compute-bound).

Prints the speed-up, dominant bound and shares per node and writes
``bottleneck_shift.png`` (shares against node for both workloads). Expected: in training the
compute share falls from almost all of the step at 12 nm to below half at 1 nm while the
fixed network's share rises from nothing to about a quarter (the searched layouts overlap the
tensor-parallel collectives with their GEMMs, ``tp_overlap``); at 1 nm the layout's GEMMs
sit at the roofline's ridge against the fixed HBM2e, so whether they count as compute or
memory turns on a percent of efficiency (compute 29% / memory 27% or 2% / 54% in two
calibrations of 2026-11-27, the step within 0.6%; 42% / 13% after the recalibrations with the
fp8 matmul ceiling and gpt-oss's clamped activation of 2026-12-07, which raised Hopper's
``eff_hbm`` 0.46 -> 0.56). Inference moves from
compute to memory, as the faster logic outruns the fixed memory and network. ``--quick`` uses
three nodes (12, 5, 1 nm).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd

from optimizers.dse import CATEGORIES, dse_serving, dse_training

NODES = ("12", "7", "5", "3", "2", "1")
QUICK_NODES = ("12", "5", "1")
FIXED = dict(memories=("hbm2e",), networks=("ib-hdr",), link="nvlink3")
TRAIN = dict(model="gpt3-175b", num_gpus=4096, global_batch=1024, max_tp=8)
SERVE = dict(model="llama-2-70b", num_gpus=8, input_len=512, output_len=128,
             tpot_target_s=0.5)


def table(title: str, df: pd.DataFrame, metric: str) -> str:
    """One line per node: metric, speed-up, bound and the three shares."""
    lines = [title, f"  {'node':>5s} {metric:>24s} {'speed-up':>9s} {'bound':>14s} "
                    + " ".join(f"{c[:7]:>8s}" for c in CATEGORIES)]
    for r in df.to_dict(orient="records"):
        lines.append(f"  {r['node'] + ' nm':>5s} {r[metric]:24.4g} {r['speedup']:8.2f}x "
                     f"{r['bound']:>14s} "
                     + " ".join(f"{100 * r[c + '_share']:7.0f}%" for c in CATEGORIES))
    return "\n".join(lines)


def plot(train: pd.DataFrame, serve: pd.DataFrame, path: Path) -> None:
    """Shares of compute, memory and communication against node, one panel per workload."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), dpi=110)
    FigureCanvasAgg(fig)
    for ax, (title, df) in zip(fig.subplots(1, 2),
                               (("training: GPT-3 175B, 4,096 GPUs", train),
                                ("inference: Llama-2-70B, 8 GPUs, TPOT <= 500 ms", serve))):
        x = range(len(df))
        for c in CATEGORIES:
            ax.plot(x, 100 * df[f"{c}_share"], marker="o", label=c)
        ax.set_xticks(list(x), [f"{n} nm\n{b[:4]}" for n, b in zip(df["node"], df["bound"])])
        ax.set_ylabel("share of the step (%)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("H100 architecture, 814 mm^2, 700 W; HBM2e, NVLink 3, HDR InfiniBand fixed",
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


def run(out: Path, quick: bool = False) -> dict[str, Any]:
    """Both explorations; prints the tables and writes the PNG.

    Returns:
        ``{"train": DataFrame, "serve": DataFrame, "png": Path}``.
    """
    out.mkdir(parents=True, exist_ok=True)
    nodes = QUICK_NODES if quick else NODES
    train = dse_training(TRAIN["model"], TRAIN["num_gpus"], TRAIN["global_batch"], nodes=nodes,
                         max_tp=TRAIN["max_tp"], **FIXED)
    serve = dse_serving(SERVE["model"], SERVE["num_gpus"], input_len=SERVE["input_len"],
                        output_len=SERVE["output_len"], tpot_target_s=SERVE["tpot_target_s"],
                        nodes=nodes, **FIXED)
    print(table("training, GPT-3 175B on 4,096 GPUs (global batch 1,024):", train,
                "step_time_s"))
    print(table("inference, Llama-2-70B on 8 GPUs (TPOT <= 500 ms):", serve,
                "throughput_tokens_per_s"))
    png = out / "bottleneck_shift.png"
    plot(train, serve, png)
    return {"train": train, "serve": serve, "png": png}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("examples_out"), help="output directory")
    ap.add_argument("--quick", action="store_true", help="three nodes (for tests)")
    a = ap.parse_args()
    run(a.out, a.quick)


if __name__ == "__main__":
    main()
