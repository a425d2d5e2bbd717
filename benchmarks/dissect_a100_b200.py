"""The A100 -> B200 speed-up dissected, for training and for serving (issue 12's question).

Run: ``python benchmarks/dissect_a100_b200.py``. Prints, for GPT-3 175B training on 1,024
GPUs (bf16 on A100, fp8 on B200, each hybrid with its best layout) and for Llama-2-70B
serving on 8 GPUs at a 50 ms time per output token (bf16 -> fp8), the speed-up and its
Shapley and integrated-gradient factors (:func:`optimizers.dissect`). Print only.
"""

from __future__ import annotations

import time

from optimizers import dissect, dissect_serving
from optimizers.dissect import DissectResult


def show(title: str, r: DissectResult, seconds: float) -> None:
    print(f"{title}: speed-up {r.speedup:.2f}x ({seconds:.1f} s, {len(r.hybrids)} hybrids)")
    shap, ig = r.factor_speedups(), r.factor_speedups("integrated_gradients")
    for f in [*r.factors, "discrete_and_layout"]:
        s = f"{shap[f]:7.3f}x" if f in shap else " " * 8
        g = f"{ig[f]:7.3f}x" if f in ig else ""
        print(f"  {f:20s} Shapley {s}   integrated gradients {g}")
    print(f"  {r.explanation}")


def main() -> None:
    t = time.perf_counter()
    tr = dissect("gpt3-175b", "a100-sxm4-80gb", "b200", 1024, 1536, dtype_from="bf16",
                 dtype_to="fp8", max_tp=8)
    show("training, GPT-3 175B, 1,024 GPUs", tr, time.perf_counter() - t)
    t = time.perf_counter()
    sv = dissect_serving("llama-2-70b", "a100-sxm4-80gb", "b200", 8, input_len=2048,
                         output_len=128, tpot_target_s=0.05, dtype_from="bf16",
                         dtype_to="fp8")
    show("serving, Llama-2-70B, 8 GPUs, TPOT <= 50 ms", sv, time.perf_counter() - t)


if __name__ == "__main__":
    main()
