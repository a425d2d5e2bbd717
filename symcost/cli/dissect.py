"""``symcost dissect``: the speed-up between two systems, attributed to hardware factors.

Shapley values over every hybrid of the two systems (each with its own best layout, or for
``--workload serve`` its best tensor-parallel degree and batch at a latency target) and, as a
second method, integrated gradients of the model along the log-space path between them
(:mod:`optimizers.dissect`). ``--json`` prints one object; ``--plot`` writes a
waterfall chart of the multiplicative factors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from ..fields import INFERENCE_FIELDS
from .common import (AsJson, CliInputError, Model, ParamsFile, check_output_path, console,
                     emit_json, field_option, load_inputs)

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

__all__ = ["register"]


def dissect_cmd(
    model: Model,
    from_hw: Annotated[str, typer.Option("--from", help="Hardware id of the baseline system.",
                                         show_default=False)],
    to_hw: Annotated[str, typer.Option("--to", help="Hardware id of the new system.",
                                       show_default=False)],
    num_gpus: Annotated[int, field_option("num_gpus", show_default=False)],
    global_batch: Annotated[int | None, field_option(
        "global_batch", help="Sequences per optimizer step (training; required there).")] = None,
    workload: Annotated[str, typer.Option(
        help="train (step time of the best layout) or serve (throughput at --tpot-target-ms "
             "over tensor-parallel degrees and batch caps).")] = "train",
    input_len: Annotated[int, field_option("input_len", INFERENCE_FIELDS)] = 2048,
    output_len: Annotated[int, field_option("output_len", INFERENCE_FIELDS)] = 128,
    tpot_target_ms: Annotated[float, typer.Option(
        help="Serving: largest time per output token, ms.")] = 50.0,
    dtype_from: Annotated[str, typer.Option(
        "--from-dtype", help="GEMM dtype on the baseline (bf16, fp16, fp8).")] = "bf16",
    dtype_to: Annotated[str | None, typer.Option(
        "--to-dtype", help="GEMM dtype on the new system (default: --from-dtype).",
        show_default=False)] = None,
    seq_len: Annotated[int | None, field_option("seq_len")] = None,
    max_tp: Annotated[int | None, typer.Option(
        help="Largest TP degree searched (e.g. GPUs per node).", show_default=False)] = None,
    params: ParamsFile = None, as_json: AsJson = False,
    plot: Annotated[Path | None, typer.Option(
        help="Write a waterfall chart of the factors (PNG).", show_default=False)] = None,
) -> None:
    """Attribute a training or serving speed-up between two systems to compute, precision,
    HBM bandwidth and capacity, links and kernels (Shapley values and integrated
    gradients)."""
    from rich.table import Table

    from optimizers.dissect import dissect, dissect_serving

    from .plots import waterfall_chart

    check_output_path(plot, "--plot", (".png",))
    if workload not in ("train", "serve"):
        raise CliInputError(f"--workload: must be train or serve (got {workload!r})")
    if workload == "train" and global_batch is None:
        raise CliInputError("--global-batch: required for --workload train")
    if not (tpot_target_ms > 0 and tpot_target_ms < float("inf")):
        raise CliInputError(f"--tpot-target-ms: must be a positive number (got {tpot_target_ms})")
    m, hw_from, p = load_inputs(model, from_hw, params)
    _, hw_to, _ = load_inputs(model, to_hw, params)
    if workload == "train":
        res = dissect(m, hw_from, hw_to, num_gpus, int(global_batch or 0),
                      dtype_from=dtype_from, dtype_to=dtype_to, seq_len=seq_len, params=p,
                      max_tp=max_tp)
    else:
        res = dissect_serving(m, hw_from, hw_to, num_gpus, input_len=input_len,
                              output_len=output_len, tpot_target_s=tpot_target_ms / 1e3,
                              dtype_from=dtype_from, dtype_to=dtype_to, params=p)
    if plot is not None:
        waterfall_chart(res, plot, f"{m.name}, {num_gpus} GPUs: {hw_from.name} "
                                   f"({dtype_from}) -> {hw_to.name} ({dtype_to or dtype_from})")
    if as_json:
        emit_json({"model": m.name, "from": hw_from.name, "to": hw_to.name,
                   "num_gpus": num_gpus, "workload": workload, **res.to_dict()})
        return
    what = (f"step {res.step_time_from_s:.3g} s -> {res.step_time_to_s:.3g} s"
            if workload == "train" else f"throughput at tpot <= {tpot_target_ms:g} ms")
    t = Table(title=f"{m.name} on {num_gpus} GPUs ({workload}): {hw_from.name} -> "
                    f"{hw_to.name}, speed-up {res.speedup:.2f}x ({what})",
              title_justify="left")
    for col in ("factor", "Shapley", "share of ln", "integrated gradients", "share of ln"):
        t.add_column(col, justify="left" if col == "factor" else "right")
    ln_total = sum(res.shapley.values()) or 1.0
    for f in [*res.factors, "discrete_and_layout"]:
        s = res.shapley.get(f)
        g = res.integrated_gradients.get(f)
        t.add_row(f, "" if s is None else f"{res.factor_speedups()[f]:.3f}x",
                  "" if s is None else f"{s / ln_total:.0%}",
                  "" if g is None else f"{res.factor_speedups('integrated_gradients')[f]:.3f}x",
                  "" if g is None else f"{g / ln_total:.0%}")
    con = console()
    con.print(t)
    con.print(res.explanation, markup=False)


def register(app: typer.Typer) -> None:
    """Add the ``dissect`` command to ``app``."""
    app.command("dissect")(dissect_cmd)
