"""``symcost infer``, ``symcost roofline`` and ``symcost dram-study``: inference from the command
line.

Examples::

    symcost infer --model llama-2-70b --hardware h100-sxm5-80gb --tp 2 --dtype fp8 \\
        --batch 64 --input-len 2048 --output-len 128
    symcost roofline --model llama-2-70b \\
        --hardware a100-sxm4-80gb,h100-sxm5-80gb,h200-sxm-141gb,b200 --batch 16 --plot roof.png
    symcost dram-study --model llama-2-70b --hardware b200 --dtype fp8

``infer`` prints TTFT, TPOT, end-to-end latency, throughput (continuous batching and static
batch) and memory per GPU; ``--json`` prints one JSON object
(:meth:`symcost.infer_api.InferenceResult.to_dict`: ``ttft_s``, ``tpot_s``,
``throughput_tokens_per_s``, ``memory_per_gpu_bytes``, ``memory_kv_cache_bytes``,
``max_batch``, ...). A batch that does not fit in memory is still reported, as in every
command (``"fits": false`` and one ``warning: memory: ...`` line on stderr; exit code 0). A
context above the model's maximum, an unknown dtype or a TP degree incompatible with the KV
heads exits with code 2 and one ``error:`` line (see :mod:`symcost.cli.main`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from hwspecs import HardwareSpecError, load_hardware

from ..config import InferenceConfig
from ..fields import INFERENCE_FIELDS
from ..schema import rename_keys
from .common import (Hardware, Model, ParamsFile, check_output_path, console, emit_json,
                     field_option, load_inputs, load_params_option, memory_warning)
from .format import fmt_time, format_bytes

# Function-local imports below only keep NumPy, pandas, JAX, rich and SymPy cost expressions out
# of ``symcost --help`` (see symcost.cli.common); none of them avoids an import cycle.

if TYPE_CHECKING:  # pragma: no cover - rich is imported when a table is drawn
    from rich.console import JustifyMethod

_DEFAULT = InferenceConfig()


def _opt(name: str, **kw: Any) -> Any:
    """The option of inference field ``name`` (:func:`symcost.cli.common.field_option`)."""
    return field_option(name, INFERENCE_FIELDS, **kw)

DEFAULT_ROOFLINE_HARDWARE = "a100-sxm4-80gb,h100-sxm5-80gb,h200-sxm-141gb,b200"


STAGE_HELP = {
    "gemm": "weight GEMMs (QKV, output, MLP)",
    "attention": "attention (FlashAttention / flash-decoding over the KV cache)",
    "memory_ops": "norms, residuals, activation, KV-cache writes",
    "tp_comm": "tensor-parallel all-reduces",
    "ep_comm": "expert-parallel all-to-all (wide EP)",
    "lm_head": "embedding, LM head, sampling, logits gather",
    "pp_p2p": "pipeline send to the next stage",
}


def summary_tables(result) -> list:
    """Rich tables for an :class:`~symcost.infer_api.InferenceResult`: latency and throughput,
    memory per GPU, and the prefill / decode stage-time breakdowns."""
    from rich.table import Table

    v, cfg = result.values, result.config
    title = (f"{result.model.name} on {cfg.num_gpus} x {result.hardware.name}: tp={cfg.tp} "
             f"pp={cfg.pp}{f' ep={cfg.ep}' if cfg.ep > 1 else ''} replicas={cfg.dp}, batch {cfg.batch}, {cfg.input_len} in -> "
             f"{cfg.output_len} out, weights {cfg.weight_dtype}, activations {cfg.act_dtype}, "
             f"KV {cfg.kv_dtype}")
    perf = Table(title=title, title_justify="left")
    perf.add_column("metric")
    perf.add_column("value", justify="right")
    perf.add_column("note")
    perf.add_row("TTFT", fmt_time(v["ttft"]),
                 f"prefill of {cfg.batch} prompts ({int(v['prefill_chunks'])} chunk(s))")
    perf.add_row("TPOT", fmt_time(v["tpot"]), "one decode step of the batch, mean context")
    perf.add_row("request latency", fmt_time(v["e2e_latency"]),
                 "TTFT + (output_len - 1) x TPOT (static batch)")
    perf.add_row("throughput", f"{v['throughput']:,.0f} tokens/s",
                 f"continuous batching, {v['serve_batch']:,.0f} sequences in flight per "
                 "replica, all GPUs")
    perf.add_row("throughput (static batch)",
                 f"{v['throughput_static']:,.0f} tokens/s",
                 "batch x output_len / request latency, all GPUs")
    perf.add_row("inter-token latency (serving)", fmt_time(v["serve_iteration"]),
                 "one continuous-batching iteration (prefill and decode share it)")
    perf.add_row("max batch", f"{result.max_batch:,}",
                 f"sequences of {cfg.input_len + cfg.output_len} tokens that fit")

    mem = Table(title="Memory per GPU", title_justify="left")
    mem.add_column("part")
    mem.add_column("size", justify="right")
    mem.add_column("note")
    mem.add_row("weights", format_bytes(v["mem_weights"]), f"{cfg.weight_dtype} linear weights")
    mem.add_row("KV cache", format_bytes(v["mem_kv_cache"]),
                f"{v['kv_bytes_per_token']:,.0f} bytes/token ({cfg.kv_dtype})")
    mem.add_row("activations", format_bytes(v["mem_activations"]),
                f"buffers for {cfg.max_num_tokens} tokens")
    mem.add_row("logits", format_bytes(v["mem_logits"]), "fp32, one row per sequence")
    mem.add_row("total", format_bytes(v["mem_total"]), "", style="bold")
    mem.add_row("usable HBM", format_bytes(v["mem_usable"]), "capacity - reserved")
    mem.add_row("KV budget", format_bytes(v["mem_kv_budget"]),
                f"{cfg.kv_mem_frac:.2f} of what weights and buffers leave")

    brk = Table(title="Stage time per step", title_justify="left")
    brk.add_column("term")
    brk.add_column("prefill chunk", justify="right")
    brk.add_column("decode step", justify="right")
    brk.add_column("what")
    prefill, decode = result.breakdown("prefill"), result.breakdown("decode")
    for k in prefill:
        brk.add_row(k, fmt_time(prefill[k]), fmt_time(decode[k]), STAGE_HELP.get(k, ""))
    bound = ("compute" if v["decode_gemm_time_compute"] >= v["decode_gemm_time_memory"]
             else "memory")
    brk.add_row("decode GEMMs", "", bound + "-bound", "at this batch")
    return [perf, mem, brk]


def infer(
    model: Model, hardware: Hardware,
    batch: Annotated[int, _opt("batch")] = _DEFAULT.batch,
    input_len: Annotated[int, _opt("input_len")] = _DEFAULT.input_len,
    output_len: Annotated[int, _opt("output_len")] = _DEFAULT.output_len,
    tp: Annotated[int, _opt("tp")] = _DEFAULT.tp,
    pp: Annotated[int, _opt("pp")] = _DEFAULT.pp,
    ep: Annotated[int, _opt("ep")] = _DEFAULT.ep,
    moe_imbalance: Annotated[float, _opt("moe_imbalance")] = _DEFAULT.moe_imbalance,
    num_gpus: Annotated[int | None, _opt("num_gpus")] = None,
    dtype: Annotated[str, _opt("dtype")] = _DEFAULT.dtype,
    weight_dtype: Annotated[str | None, _opt("weight_dtype")] = None,
    act_dtype: Annotated[str | None, _opt("act_dtype")] = None,
    kv_dtype: Annotated[str | None, _opt("kv_dtype")] = None,
    flash_attention: Annotated[bool, _opt("flash_attention")] = _DEFAULT.flash_attention,
    max_num_tokens: Annotated[int, _opt("max_num_tokens")] = _DEFAULT.max_num_tokens,
    kv_mem_frac: Annotated[float, _opt("kv_mem_frac")] = _DEFAULT.kv_mem_frac,
    kv_on_demand: Annotated[bool, _opt("kv_on_demand")] = _DEFAULT.kv_on_demand,
    framework: Annotated[str, _opt("framework")] = _DEFAULT.framework,
    params: ParamsFile = None,
    precision: Annotated[Literal["float64", "float32"], typer.Option(
        help="Evaluation precision.")] = "float64",
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print one JSON object instead of tables.")] = False,
    breakdown: Annotated[Literal["modules"] | None, typer.Option(
        help="Also break prefill and decode down by decoder module (RMSNorm, QKV projection, "
             "RoPE, QK^T, softmax, attention-V, output projection, MLP); JSON key "
             "module_breakdown_s.")] = None,
    plot: Annotated[Path | None, typer.Option(
        show_default=False, dir_okay=False,
        help="With --breakdown modules: write a stacked bar chart PNG.")] = None,
) -> None:
    """Predict TTFT, TPOT, throughput and memory of serving one model."""
    from ..breakdown import inference_modules
    from ..infer_api import predict_inference
    from .plots import module_breakdown_chart
    from .train import module_table

    check_output_path(plot, "--plot", (".png",))
    m, hw, p = load_inputs(model, hardware, params)
    cfg = InferenceConfig(batch=batch, input_len=input_len, output_len=output_len, tp=tp,
                          pp=pp, ep=ep, moe_imbalance=moe_imbalance, num_gpus=num_gpus,
                          dtype=dtype,
                          weight_dtype=weight_dtype,
                          act_dtype=act_dtype, kv_dtype=kv_dtype,
                          flash_attention=flash_attention, max_num_tokens=max_num_tokens,
                          kv_mem_frac=kv_mem_frac, kv_on_demand=kv_on_demand,
                          framework=framework)
    result = predict_inference(m, hw, cfg, params=p, precision=precision, check_memory=False)
    modules = inference_modules(m, hw, cfg, p) if breakdown else None
    if modules is not None and plot is not None:
        module_breakdown_chart(modules, plot, f"{m.name} on {hw.name}: serving by module")
    if as_json:
        extra = {"module_breakdown_s": modules} if modules is not None else {}
        emit_json({**result.to_dict(), **extra})
    else:
        con = console()
        for table in summary_tables(result):
            con.print(table)
        if modules is not None:
            con.print(module_table(modules, "Module breakdown (s per request batch)"))
            if plot is not None:
                con.print(f"module breakdown chart written to {plot}", markup=False)
    memory_warning(result.values["mem_total"], result.values["mem_usable"])


def _hardware_list(text: str) -> list[str]:
    items = [h.strip() for h in text.split(",") if h.strip()]
    if not items:
        raise HardwareSpecError("--hardware: give at least one hardware id (comma-separated)")
    return items


def roofline(
    model: Annotated[str, typer.Option(
        help="Model preset id or path to a Hugging Face config.json.", show_default=False)],
    hardware: Annotated[str, typer.Option(
        help="Comma-separated hardware ids.")] = DEFAULT_ROOFLINE_HARDWARE,
    batch: Annotated[int, typer.Option(help="Sequences (decode batch, prompts).")] = 16,
    input_len: Annotated[int, typer.Option(help="Prompt tokens.")] = 2048,
    output_len: Annotated[int, typer.Option(help="Generated tokens.")] = 128,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    dtype: Annotated[str, _opt("dtype", help="Default dtype (all GPUs must support it).")
                     ] = "bf16",
    weight_dtype: Annotated[str | None, _opt("weight_dtype")] = None,
    act_dtype: Annotated[str | None, _opt("act_dtype")] = None,
    kv_dtype: Annotated[str | None, _opt("kv_dtype")] = None,
    max_num_tokens: Annotated[int, typer.Option(
        help="Prefill chunk (tokens per forward step).")] = _DEFAULT.max_num_tokens,
    params: Annotated[Path | None, typer.Option(show_default=False, dir_okay=False,
                                                help="Efficiency-parameter YAML.")] = None,
    plot: Annotated[Path | None, typer.Option(
        help="Write a log-log roofline PNG here.", show_default=False)] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON records.")] = False,
) -> None:
    """Roofline of each GEMM of one layer in prefill and decode on each GPU."""
    from ..roofline import roofline_table
    from .plots import plot_roofline

    check_output_path(plot, "--plot", (".png",))
    p = load_params_option(params)

    hws = []
    for h in _hardware_list(hardware):
        try:
            hws.append(load_hardware(h))
        except HardwareSpecError as exc:
            raise HardwareSpecError(f"--hardware: {exc}") from None
    cfg = InferenceConfig(batch=batch, input_len=input_len, output_len=output_len, tp=tp,
                          num_gpus=tp, dtype=dtype, weight_dtype=weight_dtype,
                          act_dtype=act_dtype, kv_dtype=kv_dtype, max_num_tokens=max_num_tokens)
    table = roofline_table(model, hws, cfg, params=p)
    if plot is not None:
        plot_roofline(table, plot, title=f"{model}: batch {batch}, {input_len} in, tp={tp}, "
                                         f"{dtype}")
    if as_json:
        emit_json({"model": model, "config": {
            "batch": batch, "input_len": input_len, "output_len": output_len, "tp": tp,
            "dtype": dtype}, "plot": str(plot) if plot else None,
            "operators": table.rename(columns=rename_keys(table.columns)).to_dict("records")})
        return
    from rich.table import Table

    con = console()
    for hw in dict.fromkeys(table["hardware"]):
        sub = table[table["hardware"] == hw]
        t = Table(title=f"{hw}: HBM {sub['bandwidth'].iloc[0] / 1e12:.2f} TB/s; FLOP/B = "
                        "arithmetic intensity, ridge = peak/bandwidth, TFLOP/s = attainable "
                        "min(peak, FLOP/B x bandwidth), time = model time with efficiencies",
                  title_justify="left")
        cols: tuple[tuple[str, JustifyMethod], ...] = (
            ("phase", "left"), ("op", "left"), ("dtype", "left"), ("GFLOP", "right"),
            ("MB", "right"), ("FLOP/B", "right"), ("ridge", "right"), ("TFLOP/s", "right"),
            ("bound", "left"), ("time", "right"))
        for col, j in cols:
            t.add_column(col, justify=j, no_wrap=True)
        for _, r in sub.iterrows():
            t.add_row(r["phase"], r["op"], r["dtype"], f"{r['flops'] / 1e9:,.1f}",
                      f"{r['bytes'] / 1e6:,.1f}", f"{r['intensity']:,.1f}", f"{r['ridge']:,.0f}",
                      f"{r['attainable_flops'] / 1e12:,.1f}", r["bound"],
                      fmt_time(r["time_s"]),
                      style="bold" if r["bound"] == "compute" else None)
        con.print(t)
    if plot is not None:
        con.print(f"roofline plot written to {plot}")


def dram_study(
    model: Annotated[str, typer.Option(help="Model preset id.", show_default=False)],
    hardware: Annotated[str, typer.Option(
        help="Base GPU (compute, capacity, links); its HBM bandwidth is replaced.")] = "b200",
    stacks: Annotated[int, typer.Option(help="HBM stacks per GPU.")] = 8,
    batches: Annotated[str, typer.Option(help="Comma-separated decode batch sizes.")
                       ] = "1,8,32,128,512",
    input_len: Annotated[int, typer.Option(help="Prompt tokens.")] = 2048,
    output_len: Annotated[int, typer.Option(help="Generated tokens.")] = 128,
    tp: Annotated[int, typer.Option(help="Tensor-parallel degree.")] = 1,
    dtype: Annotated[str, _opt("dtype")] = "fp8",
    params: Annotated[Path | None, typer.Option(show_default=False, dir_okay=False,
                                                help="Efficiency-parameter YAML.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON records.")] = False,
) -> None:
    """Decode and prefill latency as HBM bandwidth scales (HBM2e, HBM3, HBM3e, HBM4)."""
    from ..infer_api import InferenceConfigError
    from ..roofline import HBM_TECHNOLOGIES
    from ..roofline import dram_study as study

    m, hw, p = load_inputs(model, hardware, params)
    try:
        bs = [int(b) for b in batches.split(",") if b.strip()]
    except ValueError:
        raise InferenceConfigError(f"--batches: {batches!r} is not a comma-separated list of "
                                   "integers") from None
    if stacks < 1:
        raise InferenceConfigError(f"--stacks: must be a positive integer (got {stacks})")
    cfg = InferenceConfig(input_len=input_len, output_len=output_len, tp=tp, num_gpus=tp,
                          dtype=dtype)
    table = study(m, hw, cfg, params=p, stacks=stacks, batches=bs)
    if as_json:
        emit_json({"model": m.name, "hardware": hw.name, "stacks": stacks,
                   "technologies": list(HBM_TECHNOLOGIES),
                   "rows": table.rename(columns=rename_keys(table.columns)).to_dict("records")})
        return
    from rich.table import Table

    t = Table(title=f"{m.name} on {hw.name} compute with {stacks} HBM stacks, tp={tp}, {dtype}, "
                    f"{input_len} in -> {output_len} out", title_justify="left")
    for col in ("technology", "TB/s", "batch", "TTFT", "TPOT", "tokens/s", "decode GEMMs",
                "compute-bound from batch", "compute-bound above TB/s"):
        t.add_column(col, justify="left" if col == "technology" else "right")
    for _, r in table.iterrows():
        t.add_row(r["technology"], f"{r['bandwidth'] / 1e12:.2f}", str(r["batch"]),
                  fmt_time(r["ttft_s"]), fmt_time(r["tpot_s"]),
                  f"{r['throughput_tokens_per_s']:,.0f}", r["decode_bound"],
                  f"{r['crossover_batch']:.0f}", f"{r['bw_compute_bound'] / 1e12:.2f}",
                  style=None if r["fits"] else "dim")
    con = console()
    con.print(t)
    con.print("dim rows: that batch does not fit in memory; sources: "
                                   + "; ".join(f"{x['name']}: {x['source']}"
                                               for x in HBM_TECHNOLOGIES))


def register(app: typer.Typer) -> None:
    """Add the ``infer``, ``roofline`` and ``dram-study`` commands to ``app``."""
    app.command("infer")(infer)
    app.command("roofline")(roofline)
    app.command("dram-study")(dram_study)
