"""NVIDIA's generation-over-generation claims against symcost's predictions, with attribution.

Run: ``PYTHONPATH=. python benchmarks/nvidia_claims.py [--only ID,...] [--json]``.

For each claim of ``symcost/data/nvidia_claims.yaml`` (document, URL, date, workload and
conditions of every claim) the claim's workload is dissected between the two systems
(:func:`optimizers.dissect` for training with the best layout of each hybrid,
:func:`optimizers.dissect_serving` for serving at the token-latency target) and the script
prints the predicted speed-up next to the claimed one and the Shapley factors of the
prediction (they multiply to it). A claim whose model is not a symcost preset (the MoE model
``gpt-moe-1.8t`` while MoE support is being added) is printed as "pending: MoE model not
available"; a workload no configuration can run is printed as "infeasible" with the reason;
any other failure is printed as "error: ..." and the script exits non-zero after the rest.
At the end, the A100 -> B200 speed-up predicted directly is set against the product of the
H100/A100 and B200/H100 claims (NVIDIA publishes no direct A100 -> B200 figure).

Caveats printed with each claim: the claims compare different GPU counts, networks, precisions
(Blackwell FP4, which symcost does not model: fp8 is used) and software releases; symcost
compares the same GPU count and the same software model (calibrated efficiencies per GPU
generation). Print only.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from importlib import resources
from typing import Any

import yaml

from optimizers import dissect, dissect_serving
from optimizers.dissect import DissectError, DissectResult
from symcost.models import ModelSpecError, get_model


def load_claims() -> list[dict[str, Any]]:
    """The claims of ``symcost/data/nvidia_claims.yaml``."""
    text = resources.files("symcost").joinpath("data", "nvidia_claims.yaml").read_text("utf-8")
    return list(yaml.safe_load(text)["claims"])


def predict(claim: dict[str, Any]) -> tuple[str, DissectResult | None, str]:
    """``(status, result, message)``: status ``ok``, ``pending`` or ``infeasible``."""
    w = claim["workload"]
    try:
        model = get_model(w["model"])
    except ModelSpecError as exc:
        moe = "moe" in str(w["model"]).lower()
        return "pending", None, ("pending: MoE model not available" if moe
                                 else f"pending: model not available ({exc})")
    try:
        if w["kind"] == "train":
            r = dissect(model, claim["from"], claim["to"], int(w["num_gpus"]),
                        int(w["global_batch"]), dtype_from=w["dtype_from"],
                        dtype_to=w["dtype_to"], max_tp=8)
        else:
            r = dissect_serving(model, claim["from"], claim["to"], int(w["num_gpus"]),
                                input_len=int(w["input_len"]), output_len=int(w["output_len"]),
                                tpot_target_s=float(w["tpot_target_ms"]) / 1e3,
                                dtype_from=w["dtype_from"], dtype_to=w["dtype_to"])
    except (DissectError, ValueError) as exc:
        return "infeasible", None, f"infeasible: {exc}"
    return "ok", r, ""


def show(claim: dict[str, Any], status: str, r: DissectResult | None, msg: str,
         seconds: float) -> None:
    w = claim["workload"]
    print(f"\n{claim['id']}: {claim['from']} -> {claim['to']}, {w['kind']} {w['model']} "
          f"on {w['num_gpus']} GPUs ({w['dtype_from']} -> {w['dtype_to']})")
    print(f"  claimed {claim['claimed_speedup']:g}x ({claim['basis']}); "
          f"{claim['source']['url']} ({claim['source']['date']})")
    if r is None:
        print(f"  {msg}")
        return
    ratio = r.speedup / float(claim["claimed_speedup"])
    print(f"  predicted {r.speedup:.2f}x = {ratio:.2f} of the claim ({seconds:.1f} s)")
    shap = r.factor_speedups()
    print("  Shapley factors: " + ", ".join(f"{f} {shap[f]:.2f}x" for f in r.factors))
    if claim.get("assumed"):
        print(f"  assumed here: {', '.join(str(a) for a in claim['assumed'])}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", help="comma-separated claim ids")
    ap.add_argument("--json", action="store_true", help="one JSON object instead of text")
    args = ap.parse_args()
    claims = load_claims()
    if args.only:
        keep = {c.strip() for c in args.only.split(",")}
        claims = [c for c in claims if c["id"] in keep]
    rows = []
    results: dict[str, DissectResult] = {}
    failed = 0
    for claim in claims:
        t = time.perf_counter()
        try:
            status, r, msg = predict(claim)
        except Exception as exc:  # noqa: BLE001 - report, continue, exit non-zero at the end
            status, r, msg = "error", None, f"error: {type(exc).__name__}: {exc}"
            failed += 1
        if not args.json:
            show(claim, status, r, msg, time.perf_counter() - t)
        if r is not None:
            results[claim["id"]] = r
        rows.append({"id": claim["id"], "status": status, "message": msg,
                     "claimed_speedup": claim["claimed_speedup"],
                     "predicted_speedup": None if r is None else r.speedup,
                     "shapley_speedup": None if r is None else r.factor_speedups()})
    # A100 -> B200: NVIDIA publishes no direct figure; chain H100/A100 and B200/H100 claims
    chain = {"train": ("h100-vs-a100-training-gpt3", "mlperf-training-v4.1-b200-vs-h100-gpt3"),
             "serve": ("h100-vs-a100-inference-megatron-530b",
                       "mlperf-inference-v4.1-b200-vs-h100-llama2-70b")}
    by_id = {c["id"]: c for c in load_claims()}
    direct = {"train": dissect("gpt3-175b", "a100-sxm4-80gb", "b200", 1024, 1536,
                               dtype_from="bf16", dtype_to="fp8", max_tp=8),
              "serve": dissect_serving("llama-2-70b", "a100-sxm4-80gb", "b200", 8,
                                       input_len=2048, output_len=128, tpot_target_s=0.05,
                                       dtype_from="bf16", dtype_to="fp8")}
    summary = {}
    for kind, ids in chain.items():
        claimed = math.prod(float(by_id[i]["claimed_speedup"]) for i in ids)
        summary[kind] = {"chained_claim": claimed, "claims": list(ids),
                         "predicted_a100_to_b200": direct[kind].speedup,
                         "shapley_speedup": direct[kind].factor_speedups()}
    if args.json:
        print(json.dumps({"claims": rows, "a100_to_b200": summary}, indent=1))
        raise SystemExit(1 if failed else 0)
    print("\nA100 -> B200 (symcost, direct) vs the product of NVIDIA's two one-generation claims:")
    for kind, s in summary.items():
        what = ("GPT-3 175B training, 1,024 GPUs, bf16 -> fp8" if kind == "train"
                else "Llama-2-70B serving, 8 GPUs, TPOT <= 50 ms, bf16 -> fp8")
        print(f"  {kind}: predicted {s['predicted_a100_to_b200']:.2f}x ({what}); claims "
              f"{' x '.join(s['claims'])} = {s['chained_claim']:g}x")
        print("    " + ", ".join(f"{f} {v:.2f}x" for f, v in s["shapley_speedup"].items()))
    if failed:
        raise SystemExit(f"{failed} claim(s) failed with an error (printed above)")


if __name__ == "__main__":
    main()
