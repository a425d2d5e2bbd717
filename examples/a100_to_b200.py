"""The seed study's headline question: which part of the A100 -> B200 speed-up comes from
tensor-core throughput, lower precision, HBM bandwidth, HBM capacity (and the layout it
allows), NVLink, the network and the kernels -- for training and for serving (Kundu et al.
2024, arXiv:2407.14645).

Run: ``PYTHONPATH=. python examples/a100_to_b200.py --out OUT_DIR [--quick]``.

Training: GPT-3 175B on 1,024 GPUs, global batch 1,536, A100 at bf16 and B200 at fp8, every
hybrid system with its own best layout (:func:`optimizers.dissect`). Serving: Llama-2-70B on 8
GPUs at a 50 ms time per output token, bf16 -> fp8 (:func:`optimizers.dissect_serving`).
Prints the speed-up, its Shapley and integrated-gradient factors (they multiply to the
speed-up), and the cost per million tokens at the on-demand prices of
``hwspecs/data/prices.yaml`` (lambda-2025); writes ``a100_b200_training.png`` and
``a100_b200_serving.png`` (waterfall charts). ``--quick`` runs small models (GPT 1.7B on 8
GPUs, Llama-2-7B on 1 GPU) for the tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from hwspecs.prices import PriceModel, list_price
from optimizers import dissect, dissect_serving
from optimizers.dissect import DissectResult
from symcost.cli.plots import waterfall_chart

FULL = {"train": dict(model="gpt3-175b", num_gpus=1024, global_batch=1536),
        "serve": dict(model="llama-2-70b", num_gpus=8, input_len=2048, output_len=128)}
QUICK = {"train": dict(model="gpt-1.7b", num_gpus=8, global_batch=32),
         "serve": dict(model="llama-2-7b", num_gpus=1, input_len=512, output_len=64)}
FROM, TO = "a100-sxm4-80gb", "b200"


def table(title: str, r: DissectResult) -> str:
    """The attribution as text: one row per factor, Shapley and integrated gradients."""
    shap, ig = r.factor_speedups(), r.factor_speedups("integrated_gradients")
    lines = [f"{title}: speed-up {r.speedup:.2f}x",
             f"  {'factor':20s} {'Shapley':>9s} {'int. grad.':>11s}"]
    for f in [*r.factors, "discrete_and_layout"]:
        s = f"{shap[f]:8.3f}x" if f in shap else ""
        lines.append(f"  {f:20s} {s:>9s} {ig[f]:10.3f}x")
    lines.append(f"  {r.explanation}")
    return "\n".join(lines)


def run(out: Path, quick: bool = False) -> dict[str, Any]:
    """Dissect training and serving, print the tables, write the PNGs.

    Returns:
        ``{"train": DissectResult, "serve": DissectResult, "costs": {...}, "png": [...]}``.
    """
    w = QUICK if quick else FULL
    out.mkdir(parents=True, exist_ok=True)
    tr = dissect(w["train"]["model"], FROM, TO, w["train"]["num_gpus"],
                 w["train"]["global_batch"], dtype_from="bf16", dtype_to="fp8", max_tp=8)
    sv = dissect_serving(w["serve"]["model"], FROM, TO, w["serve"]["num_gpus"],
                         input_len=w["serve"]["input_len"], output_len=w["serve"]["output_len"],
                         tpot_target_s=0.05, dtype_from="bf16", dtype_to="fp8")
    prices = [PriceModel(rent_usd_per_gpu_hour=list_price(h).usd_per_gpu_hour,
                         source=list_price(h).source) for h in (FROM, TO)]
    costs, pngs = {}, []
    for kind, r in (("train", tr), ("serve", sv)):
        what = (f"{w['train']['model']} training on {w['train']['num_gpus']} GPUs"
                if kind == "train" else
                f"{w['serve']['model']} serving on {w['serve']['num_gpus']} GPUs, TPOT <= 50 ms")
        print(table(f"{what}, {FROM} (bf16) -> {TO} (fp8)", r))
        c = r.costs(prices[0], prices[1], w[kind]["num_gpus"])
        costs[kind] = c
        print(f"  cost per million tokens (lambda-2025 on-demand): "
              f"${c['from']['cost_per_million_tokens_usd']:.3g} -> "
              f"${c['to']['cost_per_million_tokens_usd']:.3g} "
              f"({c['cost_reduction']:.2f}x cheaper)\n")
        png = out / f"a100_b200_{'training' if kind == 'train' else 'serving'}.png"
        waterfall_chart(r, png, f"{what}: {FROM} (bf16) -> {TO} (fp8)")
        pngs.append(png)
    return {"train": tr, "serve": sv, "costs": costs, "png": pngs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("examples_out"), help="output directory")
    ap.add_argument("--quick", action="store_true", help="small models (for tests)")
    a = ap.parse_args()
    run(a.out, a.quick)


if __name__ == "__main__":
    main()
