"""Technology commands: ``symcost dissect`` (the speed-up between two systems, attributed to
hardware factors) and ``symcost dse`` (design-space exploration over process node, memory
and network generations).

Shapley values over every hybrid of the two systems (each with its own best layout, or for
``--workload serve`` its best tensor- and expert-parallel degrees and batch at a latency
target) and, as a second method, integrated gradients of the model along the log-space path
between them (:mod:`optimizers.dissect`). ``--json`` prints one object; ``--plot`` writes a
waterfall chart of the multiplicative factors.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from hwspecs import HardwareSpecError
from hwspecs.prices import PriceModel, list_price, load_prices

from ..fields import INFERENCE_FIELDS
from .common import (AsJson, CliInputError, Model, ParamsFile, ProgressBar, check_output_path,
                     console, emit_json, field_option, load_inputs, split_list)

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

__all__ = ["register"]


def _price_model(rent: float | None, capex: float | None, years: float | None,
                 usd_per_kwh: float | None, pue: float | None, option: str
                 ) -> PriceModel | None:
    """A :class:`hwspecs.prices.PriceModel` from the price flags, or None when none is given.
    Amortization years, electricity price and PUE not given take the sourced defaults of
    ``hwspecs/data/prices.yaml`` (``tco``) when a capex or an electricity price is given."""
    if rent is None and capex is None and usd_per_kwh is None:
        return None
    tco = load_prices().tco
    try:
        return PriceModel(
            rent_usd_per_gpu_hour=rent or 0.0, capex_usd_per_gpu=capex or 0.0,
            amortization_years=tco["amortization_years"] if years is None else years,
            usd_per_kwh=(usd_per_kwh if usd_per_kwh is not None
                         else tco["usd_per_kwh"] if capex else 0.0),
            pue=(pue if pue is not None else tco["pue"] if (capex or usd_per_kwh) else 1.0),
            source="command line" + ("" if capex is None and usd_per_kwh is None else
                                     "; defaults not given: hwspecs/data/prices.yaml tco"))
    except HardwareSpecError as exc:
        raise CliInputError(f"{option}: {exc}") from None


PricePerGpuHour = Annotated[float | None, typer.Option(
    help="Rental price, USD per GPU-hour (adds gpu_hour_cost_usd, cost_per_token_usd, "
         "cost_per_million_tokens_usd, tokens_per_usd).", show_default=False)]


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
             "over tensor- and expert-parallel degrees and batch caps).")] = "train",
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
    from_price: Annotated[float | None, typer.Option(
        "--from-price-per-gpu-hour", help="Baseline rental price, USD per GPU-hour.",
        show_default=False)] = None,
    to_price: Annotated[float | None, typer.Option(
        "--to-price-per-gpu-hour", help="New system's rental price, USD per GPU-hour.",
        show_default=False)] = None,
    list_prices: Annotated[str | None, typer.Option(
        help="Take both prices from the on-demand quotes of hwspecs/data/prices.yaml of "
             "this provider (e.g. lambda-2025, aws-2023).", show_default=False)] = None,
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
    prices = _dissect_prices(from_price, to_price, list_prices, hw_from.name, hw_to.name)
    with ProgressBar("dissect", not as_json) as bar:
        if workload == "train":
            res = dissect(m, hw_from, hw_to, num_gpus, int(global_batch or 0),
                          dtype_from=dtype_from, dtype_to=dtype_to, seq_len=seq_len, params=p,
                          max_tp=max_tp, progress=bar)
        else:
            res = dissect_serving(m, hw_from, hw_to, num_gpus, input_len=input_len,
                                  output_len=output_len, tpot_target_s=tpot_target_ms / 1e3,
                                  dtype_from=dtype_from, dtype_to=dtype_to, params=p,
                                  progress=bar)
    if plot is not None:
        waterfall_chart(res, plot, f"{m.name}, {num_gpus} GPUs: {hw_from.name} "
                                   f"({dtype_from}) -> {hw_to.name} ({dtype_to or dtype_from})")
    costs = None if prices is None else res.costs(prices[0], prices[1], num_gpus)
    if as_json:
        emit_json({"model": m.name, "from": hw_from.name, "to": hw_to.name,
                   "num_gpus": num_gpus, "workload": workload, **res.to_dict(),
                   **({} if costs is None else {"cost": costs})})
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
    if costs is not None:
        f, o = costs["from"], costs["to"]
        con.print(f"cost per million tokens: {hw_from.name} ${f['cost_per_million_tokens_usd']:.4g} "
                  f"(${f['gpu_hour_cost_usd']:.4g}/GPU-h) -> {hw_to.name} "
                  f"${o['cost_per_million_tokens_usd']:.4g} (${o['gpu_hour_cost_usd']:.4g}/GPU-h): "
                  f"{costs['cost_reduction']:.2f}x cheaper per token", markup=False)


def _dissect_prices(from_price: float | None, to_price: float | None, provider: str | None,
                    hw_from: str, hw_to: str) -> tuple[PriceModel, PriceModel] | None:
    """The two price models of ``dissect`` (flags, or the quotes of ``provider``)."""
    if provider is not None:
        if from_price is not None or to_price is not None:
            raise CliInputError("--list-prices: give either --list-prices or the two "
                                "--*-price-per-gpu-hour flags")
        try:
            q = list_price(hw_from, provider), list_price(hw_to, provider)
        except HardwareSpecError as exc:
            raise CliInputError(f"--list-prices: {exc}") from None
        a, b = (PriceModel(rent_usd_per_gpu_hour=x.usd_per_gpu_hour,
                           source=f"{x.provider}: {x.instance} ({x.date})") for x in q)
        return a, b
    if (from_price is None) != (to_price is None):
        raise CliInputError("--from-price-per-gpu-hour: give both prices or neither")
    if from_price is None or to_price is None:
        return None
    pa = _price_model(from_price, None, None, None, None, "--from-price-per-gpu-hour")
    pb = _price_model(to_price, None, None, None, None, "--to-price-per-gpu-hour")
    assert pa is not None and pb is not None
    return pa, pb


def dse_cmd(
    model: Model,
    num_gpus: Annotated[int, field_option("num_gpus", show_default=False)],
    workload: Annotated[str, typer.Option(help="train or serve.")] = "train",
    global_batch: Annotated[int | None, field_option(
        "global_batch", help="Sequences per optimizer step (training; required there).")] = None,
    nodes: Annotated[str, typer.Option(help="Process nodes (nm), comma-separated.")] =
        "12,7,5,3,2,1",
    memories: Annotated[str, typer.Option(help="HBM generations, comma-separated.")] =
        "hbm2e,hbm3,hbm3e,hbm4",
    networks: Annotated[str, typer.Option(help="Scale-out networks, comma-separated.")] =
        "ib-hdr,ib-ndr,ib-xdr",
    link: Annotated[str, typer.Option(help="Scale-up link generation.")] = "nvlink5",
    die_area_mm2: Annotated[float, typer.Option(help="Compute die area budget, mm^2.")] = 814.0,
    power_w: Annotated[float, typer.Option(help="Chip power budget, W.")] = 700.0,
    reference: Annotated[str, typer.Option(
        help="Chip whose architecture every point keeps.")] = "h100-sxm5-80gb",
    dtype: Annotated[str, field_option("dtype")] = "bf16",
    input_len: Annotated[int, field_option("input_len", INFERENCE_FIELDS)] = 2048,
    output_len: Annotated[int, field_option("output_len", INFERENCE_FIELDS)] = 128,
    tpot_target_ms: Annotated[float, typer.Option(
        help="Serving: largest time per output token, ms.")] = 50.0,
    max_tp: Annotated[int | None, typer.Option(
        help="Training: largest TP degree searched.", show_default=False)] = None,
    price_per_gpu_hour: PricePerGpuHour = None,
    capex_per_gpu: Annotated[float | None, typer.Option(
        help="Ownership price: purchase price per GPU, USD (amortized; with the energy at "
             "--power-w).", show_default=False)] = None,
    amortization_years: Annotated[float | None, typer.Option(
        help="Years over which --capex-per-gpu is spread (default: prices.yaml tco).",
        show_default=False)] = None,
    usd_per_kwh: Annotated[float | None, typer.Option(
        help="Electricity price, USD per kWh (default with --capex-per-gpu: prices.yaml tco).",
        show_default=False)] = None,
    pue: Annotated[float | None, typer.Option(
        help="Facility power usage effectiveness (default with a capex or energy price: "
             "prices.yaml tco).", show_default=False)] = None,
    params: ParamsFile = None, as_json: AsJson = False,
    plot: Annotated[Path | None, typer.Option(
        help="Write heat maps of speed-up and dominant bound (PNG).", show_default=False)
    ] = None,
) -> None:
    """Explore process node x memory x network generations: the best layout at each point,
    its speed-up and where the bottleneck moves (compute, memory, communication)."""
    from optimizers.dse import dse_serving, dse_training

    from .plots import dse_heatmaps

    check_output_path(plot, "--plot", (".png",))
    if workload not in ("train", "serve"):
        raise CliInputError(f"--workload: must be train or serve (got {workload!r})")
    if workload == "train" and global_batch is None:
        raise CliInputError("--global-batch: required for --workload train")
    price = _price_model(price_per_gpu_hour, capex_per_gpu, amortization_years, usd_per_kwh,
                         pue, "--price-per-gpu-hour")
    m, _, p = load_inputs(model, reference, params)
    design = {"die_area_mm2": die_area_mm2, "power_w": power_w, "reference": reference}
    axes = dict(nodes=split_list(nodes), memories=split_list(memories),
                networks=split_list(networks), link=link, design=design, dtype=dtype, params=p)
    with ProgressBar("dse", not as_json) as bar:
        if workload == "train":
            df = dse_training(m, num_gpus, int(global_batch or 0), max_tp=max_tp,
                              progress=bar, price=price, **axes)
        else:
            df = dse_serving(m, num_gpus, input_len=input_len, output_len=output_len,
                             tpot_target_s=tpot_target_ms / 1e3, progress=bar,
                             price=price, **axes)
    if plot is not None:
        dse_heatmaps(df, plot, f"{m.name}, {num_gpus} GPUs ({workload}), {reference} design "
                               f"({die_area_mm2:g} mm^2, {power_w:g} W), {link}")
    if as_json:
        emit_json({"model": m.name, "workload": workload, "num_gpus": num_gpus,
                   "design": design, "link": link,
                   **({} if price is None else {"price": price.to_dict()}),
                   "points": df.to_dict(orient="records")})
        return
    from rich.table import Table

    t = Table(title=f"{m.name} on {num_gpus} GPUs ({workload}): speed-up over "
                    f"{df.iloc[0]['node']} nm / {df.iloc[0]['memory']} / "
                    f"{df.iloc[0]['network']}", title_justify="left")
    metric = "step_time_s" if workload == "train" else "throughput_tokens_per_s"
    cols = ["node", "memory", "network", metric, "speedup", "energy_per_token_j",
            *(["cost_per_million_tokens_usd"] if price is not None else []), "bound",
            "compute_share", "memory_share", "communication_share"]
    for c in cols:
        t.add_column(c.replace("_share", " %"), justify="left" if c in cols[:3] else "right")
    for r in df.to_dict(orient="records"):
        t.add_row(*(f"{100 * r[c]:.0f}" if c.endswith("_share") else
                    f"{r[c]:.4g}" if isinstance(r[c], float) else str(r[c]) for c in cols))
    console(200).print(t)


def register(app: typer.Typer) -> None:
    """Add the ``dissect`` and ``dse`` commands to ``app``."""
    app.command("dissect")(dissect_cmd)
    app.command("dse")(dse_cmd)
