"""What an HBM generation and an NVLink / network generation buy at a fixed logic node (the
seed study's memory and interconnect questions, Kundu et al. 2024, arXiv:2407.14645).

Run: ``PYTHONPATH=. python examples/memory_and_links.py --out OUT_DIR [--quick]``.

Every point is the H100 architecture on the 3 nm node at the H100's die area and power
(:func:`hwspecs.technology.derive_accelerator`), with one memory generation (HBM2e, HBM3,
HBM3e, HBM4 at each generation's typical stack count and top speed bin) and one link
generation:

* serving: Llama-2-70B on 8 GPUs, 2,048 input and 128 output tokens, throughput at a 50 ms
  time per output token, over HBM generation x scale-up link (NVLink 3, 4, 5);
* training: GPT-3 175B on 1,024 GPUs, global batch 1,536, over HBM generation x scale-out
  network (HDR, NDR, XDR InfiniBand) with NVLink 5.

Prints the speed-up over the oldest generation pair with the dominant bound, the energy and,
at the design's power budget and a rental price per GPU-hour (``--price-per-gpu-hour``,
default the lambda-2025 H100 quote of ``hwspecs/data/prices.yaml``), the cost per million
tokens; writes ``memory_and_links.png`` (speed-up against HBM generation, one line per link or
network generation). ``--quick`` uses two generations per axis.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import pandas as pd

from hwspecs.prices import PriceModel, list_price
from optimizers.dse import dse_serving, dse_training

MEMORIES = ("hbm2e", "hbm3", "hbm3e", "hbm4")
LINKS = ("nvlink3", "nvlink4", "nvlink5")
NETWORKS = ("ib-hdr", "ib-ndr", "ib-xdr")
NODE = "3"


def run(out: Path, quick: bool = False, price_per_gpu_hour: float | None = None
        ) -> dict[str, Any]:
    """Both explorations; prints the tables, writes the PNG.

    Returns:
        ``{"serve": DataFrame (column "link"), "train": DataFrame, "png": Path}``; speed-ups
        are over the first memory generation with the first link / network.
    """
    out.mkdir(parents=True, exist_ok=True)
    mems = ("hbm2e", "hbm3e") if quick else MEMORIES
    links = ("nvlink3", "nvlink5") if quick else LINKS
    nets = ("ib-hdr", "ib-xdr") if quick else NETWORKS
    rent = price_per_gpu_hour or list_price("h100-sxm5-80gb").usd_per_gpu_hour
    price = PriceModel(rent_usd_per_gpu_hour=rent, source="examples/memory_and_links.py")
    parts = []
    for link in links:
        df = dse_serving("llama-2-70b", 8, input_len=2048, output_len=128, tpot_target_s=0.05,
                         nodes=(NODE,), memories=mems, networks=("ib-ndr",), link=link,
                         price=price)
        df.insert(2, "link", link)
        parts.append(df)
    serve = pd.concat(parts, ignore_index=True)
    serve["speedup"] = serve["throughput_tokens_per_s"] / serve["throughput_tokens_per_s"].iloc[0]
    train = dse_training("gpt3-175b", 1024, 1536, nodes=(NODE,), memories=mems, networks=nets,
                         link="nvlink5", max_tp=8, price=price)
    # one ordering for the lines: network within memory -> memory within network
    train = train.sort_values(["network", "memory"], key=lambda s: s.map(
        {n: i for i, n in enumerate((*nets, *mems))}), ignore_index=True)
    train["speedup"] = train["step_time_s"].iloc[0] / train["step_time_s"]
    for title, df, axis, metric in (
            ("serving, Llama-2-70B on 8 GPUs, TPOT <= 50 ms (3 nm)", serve, "link",
             "throughput_tokens_per_s"),
            ("training, GPT-3 175B on 1,024 GPUs (3 nm, NVLink 5)", train, "network",
             "step_time_s")):
        print(f"{title}; price ${rent:g} per GPU-hour")
        print(f"  {axis:>8s} {'memory':>7s} {metric:>24s} {'speed-up':>9s} {'bound':>14s} "
              f"{'J/token':>9s} {'$/Mtoken':>9s}")
        for r in df.to_dict(orient="records"):
            print(f"  {r[axis]:>8s} {r['memory']:>7s} {r[metric]:24.4g} {r['speedup']:8.2f}x "
                  f"{r['bound']:>14s} {r['energy_per_token_j']:9.3g} "
                  f"{r['cost_per_million_tokens_usd']:9.3g}")
    png = out / "memory_and_links.png"
    plot(serve, train, mems, png)
    return {"serve": serve, "train": train, "png": png}


def plot(serve: pd.DataFrame, train: pd.DataFrame, mems: tuple[str, ...], path: Path) -> None:
    """Speed-up against HBM generation, one line per link (serving) or network (training)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 4), dpi=110)
    FigureCanvasAgg(fig)
    for ax, (title, df, axis) in zip(fig.subplots(1, 2), (
            ("serving: Llama-2-70B, 8 GPUs, TPOT <= 50 ms", serve, "link"),
            ("training: GPT-3 175B, 1,024 GPUs, NVLink 5", train, "network"))):
        for name, sub in df.groupby(axis, sort=False):
            sub = sub.set_index("memory").loc[list(mems)]
            ax.plot(range(len(mems)), sub["speedup"], marker="o", label=str(name))
            for i, b in enumerate(sub["bound"]):
                ax.annotate(b[0].upper(), (i, sub["speedup"].iloc[i]), fontsize=7,
                            xytext=(3, 3), textcoords="offset points")
        ax.set_xticks(range(len(mems)), list(mems))
        ax.set_ylabel("speed-up (C/M/N: dominant bound)")
        ax.set_title(title, fontsize=9)
        ax.legend(fontsize=8)
    fig.suptitle("H100 architecture on 3 nm, 814 mm^2, 700 W", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("examples_out"), help="output directory")
    ap.add_argument("--quick", action="store_true", help="two generations per axis (tests)")
    ap.add_argument("--price-per-gpu-hour", type=float, default=None,
                    help="rental price, USD per GPU-hour")
    a = ap.parse_args()
    run(a.out, a.quick, a.price_per_gpu_hour)


if __name__ == "__main__":
    main()
