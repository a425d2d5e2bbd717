"""``symcost search`` and ``symcost codesign``: configuration search and hardware co-design.

Examples::

    symcost search --model gpt3-175b --hardware a100-sxm4-80gb --num-gpus 4096 \\
        --global-batch 2048 --top 10 --max-tp 8 --fix pp=8
    symcost search ... --num-gpus 512:4096:512 --price-per-gpu-hour 2.0   # tokens per dollar
    symcost codesign --model gpt3-175b --hardware a100-sxm4-80gb --num-gpus 1024 \\
        --global-batch 1536 --plot pareto.png

``search`` prints the top configurations (step time, tokens/s, MFU, memory per GPU), why the
best beats the runner-up, and how many candidates each rule removed; ``codesign`` prints the
Pareto front of step time against cost per GPU. ``--json`` prints exactly one JSON object.
No valid configuration exits with code 2 and one ``error:`` line naming the rule that removed
the last candidates (see :mod:`symcost.cli`).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Literal

import typer

from ..config import ConfigError, TrainingConfig, search_settings
from ..fields import SEARCH_SHARED_FIELDS
from ..schema import rename_keys
from .common import (CliInputError, Model, ParamsFile, ProgressBar, check_output_path, console,
                     dask_client, emit_json, field_option, load_inputs, training_field_options)
from .format import GIB, fmt_time, format_bytes

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

#: largest ``--price-per-gpu-hour`` accepted (USD); keeps cost products far from overflow.
MAX_PRICE_PER_GPU_HOUR = 1e6

_HW_HELP = "Hardware id (see train --list-hardware) or a hardware YAML path."


def check_positive(value: float | None, option: str, maximum: float | None = None) -> None:
    """Reject a value that is not a finite number > 0 (or above ``maximum``).

    Raises:
        CliInputError: ``<option>: must be a finite number > 0 ...``.
    """
    if value is None:
        return
    if not (math.isfinite(value) and value > 0):
        raise CliInputError(f"{option}: must be a finite number > 0 (got {value})")
    if maximum is not None and value > maximum:
        raise CliInputError(f"{option}: must be at most {maximum:g} (got {value:g})")


def parse_gpu_counts(text: str) -> list[int]:
    """``"4096"``, ``"1024,2048"`` or ``"start:stop:step"`` (inclusive) -> GPU counts.

    Raises:
        ConfigError: malformed text or a non-positive count.
    """
    try:
        if ":" in text:
            parts = [int(p) for p in text.split(":")]
            if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] <= 0):
                raise ValueError
            start, stop = parts[0], parts[1]
            step = parts[2] if len(parts) == 3 else 1
            counts = list(range(start, stop + 1, step))
        else:
            counts = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"--num-gpus: expected N, N1,N2,... or start:stop[:step] "
                          f"(got {text!r})") from None
    if not counts or min(counts) <= 0:
        raise ConfigError(f"--num-gpus: counts must be positive integers (got {text!r})")
    return counts


def search_tables(result, show_rejected: bool = True) -> list:
    """Rich renderables for a :class:`~optimizers.search.SearchResult`: the ranked table, the
    runner-up comparison and the rejection counts."""
    from rich.table import Table

    t = result.table
    space = result.extra.get("space")
    counts = set(space.columns["num_gpus"].tolist()) if space is not None else set(t["num_gpus"])
    multi = len(counts) > 1
    modules = ("" if result.recompute_modules == "core_attn"
               else f", selective recomputes {result.recompute_modules}")
    modules += "".join(f", {k} {('on' if v else 'off') if isinstance(v, bool) else v}"
                       for k, v in result.shared.items())
    title = (f"{result.model.name} on {result.hardware.name}, global batch "
             f"{result.global_batch}, seq {result.seq_len}, {result.dtype}"
             f"{'' if result.flash_attention else ', no FlashAttention'}{modules}: top "
             f"{len(t)} of "
             f"{result.fitting:,} fitting ({result.candidates:,} valid) by {result.objective}")
    tab = Table(title=title, title_justify="left")
    cols = ["#"] + (["GPUs"] if multi else []) + ["tp", "cp", "pp", "dp", "ep", "mb", "vpp",
                                                  "recompute", "sp", "ZeRO", "ovl", "tp-ovl",
                                                  "step time",
                                                  "tokens/s", "MFU", "mem/GPU", "headroom"]
    if result.price_per_gpu_hour:
        cols += ["$/step", "tokens/$"]
    for c in cols:
        tab.add_column(c, justify="left" if c in ("recompute",) else "right")
    for r in t.itertuples(index=False):
        row = [str(r.rank)] + ([str(r.num_gpus)] if multi else []) + [
            str(r.tp), str(r.cp), str(r.pp), str(r.dp), str(r.ep), str(r.micro_batch),
            str(r.vpp), r.recompute,
            "on" if r.sp else "off", str(r.zero), "on" if r.dp_overlap else "off",
            "on" if r.tp_overlap else "off",
            fmt_time(r.step_time), f"{r.tokens_per_s:,.0f}", f"{100 * r.mfu:.1f} %",
            format_bytes(r.mem_total, 1), format_bytes(r.mem_headroom, 1)]
        if result.price_per_gpu_hour:
            row += [f"{r.usd_per_step:,.2f}", f"{r.tokens_per_usd:,.0f}"]
        tab.add_row(*row)
    out = [tab]
    if len(t) >= 2:
        why = Table(title="Why #1 beats #2 (terms that differ)", title_justify="left")
        for c in ("term", "#1", "#2", "#2 - #1"):
            why.add_column(c, justify="left" if c == "term" else "right")
        for w in result.why.itertuples(index=False):
            if w.difference == 0:
                continue
            if w.term.startswith("time_"):
                why.add_row(w.term.removeprefix("time_"), fmt_time(w.best),
                            fmt_time(w.runner_up), f"{w.difference:+.4f} s")
            else:
                why.add_row(w.term, format_bytes(w.best), format_bytes(w.runner_up),
                            format_bytes(w.difference, sign=True))
        out.append(why)
        out.append(result.explain())
    if show_rejected:
        rej = Table(title="Candidates removed, by rule (applied in this order)",
                    title_justify="left")
        for c in ("stage", "rule", "removed", "remaining", "counted as"):
            rej.add_column(c, justify="right" if c in ("removed", "remaining") else "left")
        for r in result.rejected.itertuples(index=False):
            rej.add_row(r.stage, r.rule, f"{r.removed:,}", f"{r.remaining:,}", r.level)
        out.append(rej)
    return out


@training_field_options(SEARCH_SHARED_FIELDS)
def search_cmd(
    model: Model,
    hardware: Annotated[str, typer.Option(help=_HW_HELP, show_default=False)],
    num_gpus: Annotated[str, typer.Option(
        help="GPU count, or several: N1,N2,... or start:stop[:step] (inclusive).",
        show_default=False)],
    global_batch: Annotated[int, field_option("global_batch", show_default=False)],
    seq_len: Annotated[int | None, field_option("seq_len")] = None,
    dtype: Annotated[str, field_option("dtype")] = "bf16",
    flash_attention: Annotated[bool, field_option("flash_attention")] = True,
    recompute_modules: Annotated[str, field_option("recompute_modules")] = "core_attn",
    top: Annotated[int, typer.Option(min=1, help="Configurations to show.")] = 10,
    objective: Annotated[Literal["step_time", "tokens_per_s", "tokens_per_dollar"] | None,
                         typer.Option(help="Ranking (default: tokens_per_dollar with a price, "
                                           "else step_time).", show_default=False)] = None,
    price_per_gpu_hour: Annotated[float | None, typer.Option(
        help="USD per GPU-hour: adds $/step and tokens/$.", show_default=False)] = None,
    max_tp: Annotated[int | None, typer.Option(
        help="Largest TP degree (e.g. GPUs per node).", show_default=False)] = None,
    max_vpp: Annotated[int | None, typer.Option(
        help="Largest number of virtual pipeline stages.", show_default=False)] = None,
    fix: Annotated[list[str] | None, typer.Option(
        help="Fix a field, e.g. --fix pp=8 --fix recompute=full (repeatable).",
        show_default=False)] = None,
    min_: Annotated[list[str] | None, typer.Option(
        "--min", help="Lower bound, e.g. --min dp=4 (repeatable).", show_default=False)] = None,
    max_: Annotated[list[str] | None, typer.Option(
        "--max", help="Upper bound, e.g. --max micro_batch=4 (repeatable).",
        show_default=False)] = None,
    method: Annotated[Literal["exhaustive", "scipy"], typer.Option(
        help="Enumerate everything, or differential evolution for huge spaces.")
    ] = "exhaustive",
    keep_duplicates: Annotated[bool, typer.Option(
        help="Keep configurations the model cannot tell apart (e.g. SP with tp=1).")] = False,
    params: ParamsFile = None,
    workers: Annotated[int | None, typer.Option(
        help="Evaluate the candidates on a local Dask cluster of this many worker processes "
             "(exhaustive method).", show_default=False, min=1)] = None,
    scheduler: Annotated[str | None, typer.Option(
        help="Evaluate the candidates on an existing Dask cluster (e.g. tcp://host:8786).",
        show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
    *, config: TrainingConfig,
) -> None:
    """Find the fastest (or cheapest per token) parallel configuration.

    The other training options (``--ep-dedup``, ``--offload``, ``--bf16-layers``, ...) apply
    to every candidate."""
    from optimizers.search import search, search_scipy

    check_positive(price_per_gpu_hour, "--price-per-gpu-hour", MAX_PRICE_PER_GPU_HOUR)
    if workers is not None and scheduler is not None:
        raise CliInputError("--workers: give --workers or --scheduler, not both")
    if method != "exhaustive" and (workers is not None or scheduler is not None):
        raise CliInputError("--workers: only the exhaustive method runs on Dask")
    m, hw, p = load_inputs(model, hardware, params)
    kw = dict(seq_len=seq_len, dtype=dtype, flash_attention=flash_attention, top=top,
              objective=objective, price_per_gpu_hour=price_per_gpu_hour, fix=fix,
              minimum=min_, maximum=max_, max_tp=max_tp, max_vpp=max_vpp,
              keep_duplicates=keep_duplicates, params=p, recompute_modules=recompute_modules,
              **search_settings(config))
    if method == "exhaustive":
        with dask_client(workers, scheduler) as client, \
                ProgressBar("search", not as_json) as bar:
            result = search(m, hw, parse_gpu_counts(num_gpus), global_batch, client=client,
                            progress=bar, **kw)
    else:
        result = search_scipy(m, hw, parse_gpu_counts(num_gpus), global_batch, **kw)
    if as_json:
        emit_json(result.to_dict())
        return
    con = console(140)
    for r in search_tables(result):
        con.print(r)
    tm = result.timings
    con.print(f"{result.candidates:,} valid candidates, {result.fitting:,} fit in memory; "
                  f"searched in {tm['total']:.3f} s ({result.method})")


def parse_bounds(items: list[str] | None) -> dict[str, tuple[float, float]]:
    """``["hbm_bw=0.5:2", ...]`` -> ``{"hbm_bw": (0.5, 2.0)}`` (multiples of the reference).

    Raises:
        ConfigError: malformed item.
    """
    out = {}
    for it in items or []:
        try:
            k, v = it.split("=", 1)
            lo, hi = (float(x) for x in v.split(":"))
        except ValueError:
            raise ConfigError(f"--bound: expected name=low:high, e.g. hbm_bw=0.5:2 "
                              f"(got {it!r})") from None
        out[k.strip()] = (lo, hi)
    return out


def codesign_table(df):
    """Rich table of a :func:`optimizers.codesign.codesign` result (``*`` marks the Pareto
    front, ``ref`` the reference GPU)."""
    from rich.table import Table

    tab = Table(title=f"Co-design around {df.attrs.get('reference', '?')}: step time vs cost "
                      f"per GPU (* = Pareto front, ref = reference GPU)", title_justify="left")
    cols = ["", "budget $", "cost $", "step", "MFU", "TFLOP/s", "HBM TB/s", "HBM GiB",
            "NVL GB/s", "net GB/s", "tp", "cp", "pp", "dp", "ep", "mb", "vpp", "recomp", "sp",
            "ZeRO"]
    for c in cols:
        tab.add_column(c, justify="left" if c in ("", "recomp") else "right", no_wrap=True)
    for r in df.to_dict(orient="records"):
        if r.get("status") != "ok":
            tab.add_row("", f"{r['budget_usd_per_gpu']:,.0f}", "-", "infeasible",
                        *([""] * (len(cols) - 4)))
            continue
        budget = r["budget_usd_per_gpu"]
        mark = ("*" if r["pareto"] else "") + ("ref" if r["design"] == "reference" else "")
        tab.add_row(mark, "-" if budget != budget else f"{budget:,.0f}",
                    f"{r['cost_usd_per_gpu']:,.0f}", fmt_time(r["step_time"]),
                    f"{100 * r['mfu']:.1f} %", f"{r['peak_tflops']:,.0f}",
                    f"{r['hbm_tbps']:.2f}", f"{r['hbm_gib']:.0f}", f"{r['intra_gbps']:,.0f}",
                    f"{r['inter_gbps']:,.1f}",
                    *(str(int(r[k])) for k in ("tp", "cp", "pp", "dp", "ep", "micro_batch",
                                               "vpp")),
                    r["recompute"], "on" if r["sp"] else "off", str(int(r["zero"])))
    return tab


def codesign_cmd(
    model: Model,
    hardware: Annotated[str, typer.Option(
        help="Reference hardware (bounds are multiples of its parameters).",
        show_default=False)],
    num_gpus: Annotated[int, typer.Option(min=1, help="GPUs in the cluster.",
                                          show_default=False)],
    global_batch: Annotated[int, field_option("global_batch", show_default=False)],
    seq_len: Annotated[int | None, field_option("seq_len")] = None,
    dtype: Annotated[str, field_option("dtype")] = "bf16",
    budget: Annotated[list[float] | None, typer.Option(
        help="Budget in USD per GPU (repeatable; default: spread over the bounds).",
        show_default=False)] = None,
    n_budgets: Annotated[int, typer.Option(min=1, help="Default number of budgets.")] = 6,
    bound: Annotated[list[str] | None, typer.Option(
        help="Bounds as multiples of the reference, e.g. --bound hbm_bw=0.5:2 (peak_flops_16, "
             "hbm_bw, hbm_cap, intra_bw, inter_bw; default 0.25:4).", show_default=False)
    ] = None,
    max_tp: Annotated[int | None, typer.Option(help="Largest TP degree.",
                                               show_default=False)] = None,
    fix: Annotated[list[str] | None, typer.Option(
        help="Fix a configuration field, e.g. --fix pp=8 (repeatable).", show_default=False)
    ] = None,
    seed: Annotated[int, typer.Option(help="Random seed of differential evolution.")] = 0,
    maxiter: Annotated[int, typer.Option(min=1, help="Generations.")] = 40,
    popsize: Annotated[int, typer.Option(min=2, help="Population multiplier.")] = 12,
    params: ParamsFile = None,
    plot: Annotated[Path | None, typer.Option(help="Write the Pareto front as a PNG.",
                                              show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON object.")] = False,
) -> None:
    """Co-design GPU hardware (FLOP/s, HBM, links) and parallel layout under cost budgets."""
    from optimizers.codesign import DISPLAY_UNITS, codesign
    from optimizers.cost_model import CostModel

    from .plots import plot_pareto

    for b in budget or ():
        check_positive(b, "--budget")
    check_output_path(plot, "--plot", (".png",))
    m, hw, p = load_inputs(model, hardware, params)
    with ProgressBar("codesign", not as_json) as bar:
        df = codesign(m, hw, num_gpus, global_batch, budgets=budget, n_budgets=n_budgets,
                      bounds=parse_bounds(bound), seq_len=seq_len, dtype=dtype, fix=fix,
                      max_tp=max_tp, seed=seed, maxiter=maxiter, popsize=popsize, params=p,
                      progress=bar)
    if plot is not None:
        plot_pareto(df, plot)
    if as_json:
        cm = CostModel()
        rows = df.rename(columns=rename_keys(df.columns))
        for name, (col, scale) in DISPLAY_UNITS.items():  # back to SI, under the symbol name
            rows[name] = rows.pop(col) * scale
        rows["memory_per_gpu_bytes"] = rows.pop("mem_gib") * GIB
        emit_json({"reference": hw.name, "model": m.name, "num_gpus": num_gpus,
                   "global_batch": global_batch, "rows": rows.to_dict(orient="records"),
                   "cost_model": {"base": cm.base, "c_flops": cm.c_flops,
                                  "c_hbm_cap": cm.c_hbm_cap, "c_hbm_bw": cm.c_hbm_bw,
                                  "c_intra": cm.c_intra, "c_inter": cm.c_inter,
                                  "sources": dict(cm.sources)},
                   "seconds": df.attrs.get("seconds")})
        return
    con = console(150)
    con.print(codesign_table(df))
    for r in df[df["status"] != "ok"].to_dict(orient="records"):
        con.print(f"budget {r['budget_usd_per_gpu']:,.0f} USD/GPU: {r['status']}")
    con.print(f"{df.attrs.get('candidates', 0):,} configurations per design; "
                  f"{df.attrs.get('seconds', 0):.1f} s. Costs: illustrative build-cost model "
                  f"(optimizers/cost_model.py lists the sources)."
                  + (f" Plot: {plot}" if plot else ""))


def register(app: typer.Typer) -> None:
    """Add ``search`` and ``codesign`` to ``app``."""
    app.command("search")(search_cmd)
    app.command("codesign")(codesign_cmd)
