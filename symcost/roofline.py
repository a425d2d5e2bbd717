"""Roofline of every GEMM of one transformer layer in prefill and in decode, on any list of GPUs,
and a DRAM-technology study (decode and prefill as HBM bandwidth scales).

For each operator the FLOPs and HBM bytes come from the same operator costs the inference model
uses (:func:`symcost.inference.layer_gemms`, :func:`~symcost.inference.attention_prefill`,
:func:`~symcost.inference.attention_decode`, the LM head), so the table explains the model's
times. Definitions (Williams, Waterman and Patterson 2009, "Roofline", CACM 52(4)):

* arithmetic intensity ``I = FLOP / bytes`` (FLOP/byte);
* ridge point ``I* = peak / bandwidth`` of the GPU for the operator's compute dtype;
* attainable rate ``min(peak, I * bandwidth)`` (FLOP/s); the operator is compute-bound when
  ``I >= I*`` and memory-bound otherwise. These use datasheet peaks (no efficiencies); the
  model time (``time_s``) uses the calibrated efficiencies.

Prefill operators are those of one forward step (one chunk of at most ``max_num_tokens``
tokens); decode operators those of one decode step of ``batch`` sequences at the mean context.
Attention is one fused operator (QK^T, softmax and AV: FlashAttention in prefill,
flash-decoding in decode); FLOPs are the executed ones (the causal half in prefill).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import sympy as sp

from hwspecs import HardwareSpec

from . import symbols as S
from .api import as_hardware, as_model, used_symbols
from .config import InferenceConfig, resolve_inference
from .functions import CeilDiv, replace_symbols
from .inference import (INFERENCE_EFFICIENCIES, attention_decode, attention_prefill,
                        layer_gemms, lm_head, mean_decode_context,
                        mean_decode_window_context)
from .ops.attention import causal_fraction
from .ops.cost import Cost
from .infer_api import evaluate_inference, inference_inputs
from .lower import CompiledModel, lower
from .models import ModelSpec
from .params import Params
from .training import gemm_peak

# pandas is imported inside the functions that use it, so that importing this module (and
# ``symcost --help``) does not load it.
if TYPE_CHECKING:
    import pandas as pd

#: operators of one layer (plus the LM head of the step), in table order.
OPERATORS = ("qkv_proj", "attention", "out_proj", "mlp_up", "mlp_down", "lm_head")
PHASES = ("prefill", "decode")

#: HBM generations: JEDEC/vendor per-stack figures (per-pin rate x interface width / 8).
#: Each entry: name, Gb/s per pin, interface bits per stack, GB/s per stack, source.
HBM_TECHNOLOGIES: tuple[dict[str, Any], ...] = (
    {"name": "HBM2e", "gbps_per_pin": 3.6, "bus_bits": 1024, "stack_gbs": 460.8,
     "source": "JEDEC JESD235C HBM2E (3.6 Gb/s bin): 3.6 Gb/s x 1024 bits = 460 GB/s per "
               "stack (JEDEC HBM3 announcement compares 'HBM2E ... 3.65Gb/s data rate and "
               "460GB/s', HotHardware 2022-01-28)"},
    {"name": "HBM3", "gbps_per_pin": 6.4, "bus_bits": 1024, "stack_gbs": 819.2,
     "source": "JEDEC JESD238 HBM3 (Jan 2022): 6.4 Gb/s per pin, 819 GB/s per device "
               "(JEDEC press release, reported by Phoronix 2022-01-28)"},
    {"name": "HBM3e", "gbps_per_pin": 9.6, "bus_bits": 1024, "stack_gbs": 1228.8,
     "source": "JESD238 HBM3 extended speed bins used by HBM3E parts: up to 9.6 Gb/s per pin, "
               "over 1.2 TB/s per stack (SK hynix / Micron HBM3E, 2024)"},
    {"name": "HBM4", "gbps_per_pin": 8.0, "bus_bits": 2048, "stack_gbs": 2048.0,
     "source": "JEDEC JESD270-4 HBM4 (Apr 2025): 2048-bit interface, 8 Gb/s per pin, 2 TB/s "
               "per stack (vendors sample 11 Gb/s, 2.8 TB/s: Micron 2025)"},
)


def _op_costs(phase: str) -> dict[str, Cost]:
    B, s_in = S.batch, S.input_len
    if phase == "prefill":
        tokens = B * s_in
        n_c = CeilDiv(tokens, S.max_num_tokens)
        rows = tokens / n_c
        ops = dict(layer_gemms(rows))
        attn = attention_prefill(B, s_in).scale(1 / n_c)
        # executed FLOPs: a causal FlashAttention kernel skips the tiles above the diagonal
        ops["attention"] = Cost(attn.flops * sp.Piecewise((causal_fraction(s_in),
                                                           S.flash_attn > sp.Rational(1, 2)),
                                                          (1, True)), attn.bytes, attn.time)
        ops["lm_head"] = lm_head(rows, B / n_c)["lm_head"]
    else:
        ops = dict(layer_gemms(B))
        ops["attention"] = attention_decode(B, mean_decode_context(),
                                            mean_decode_window_context())
        ops["lm_head"] = lm_head(B, B)["lm_head"]
    return ops


@functools.lru_cache(maxsize=1)
def roofline_expressions() -> dict[str, sp.Expr]:
    """FLOP, bytes, model time (s) and the compute peak (FLOP/s) of every operator, by phase.

    Returns:
        Mapping ``"<phase>.<op>.<flops|bytes|time|peak>"`` -> expression (one GPU), and
        ``hbm_bw`` (bytes/s).
    """
    out: dict[str, sp.Expr] = {}
    for phase in PHASES:
        for op, c in _op_costs(phase).items():
            peak = gemm_peak() if op not in ("attention", "lm_head") else S.peak_flops_16
            out[f"{phase}.{op}.flops"] = c.flops
            out[f"{phase}.{op}.bytes"] = c.bytes
            out[f"{phase}.{op}.time"] = c.time
            out[f"{phase}.{op}.peak"] = peak
    out["hbm_bw"] = S.hbm_bw
    memo: dict[sp.Basic, sp.Expr] = {}
    return {k: replace_symbols(sp.sympify(v), INFERENCE_EFFICIENCIES, memo)
            for k, v in out.items()}


@functools.lru_cache(maxsize=2)
def roofline_model(precision: str = "float64") -> CompiledModel:
    """:func:`roofline_expressions` lowered once (a :class:`~symcost.lower.CompiledModel`)."""
    exprs = roofline_expressions()
    return lower(exprs, used_symbols(exprs.values()), precision)


def roofline_table(model: ModelSpec | str, hardware: Sequence[HardwareSpec | str],
                   config: InferenceConfig | None = None, params: Params | None = None,
                   **config_fields: Any) -> pd.DataFrame:
    """Per-operator roofline of one layer in prefill and decode on each GPU of ``hardware``.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name.
        hardware: hardware ids / :class:`~hwspecs.HardwareSpec` (one row set per GPU).
        config: :class:`~symcost.infer_api.InferenceConfig` (batch, lengths, TP, dtypes);
            or its fields as keyword arguments.
        params: efficiency parameters (for ``time_s``); the shipped calibration when None.

    Returns:
        :class:`pandas.DataFrame`, one row per (hardware, phase, operator): ``flops`` (FLOP),
        ``bytes``, ``intensity`` (FLOP/byte), ``peak_flops`` (FLOP/s), ``bandwidth``
        (bytes/s), ``ridge`` (FLOP/byte), ``attainable_flops`` (FLOP/s), ``bound``
        (``compute``/``memory``), ``time_s`` (model time with efficiencies), ``dtype`` (the
        operator's compute dtype).

    Raises:
        InferenceConfigError, ModelSpecError, HardwareSpecError: invalid input (a dtype a GPU
            lacks, e.g. fp8 on A100, is an error naming that GPU).
    """
    import pandas as pd

    if config is None:
        config = InferenceConfig(**config_fields)
    elif config_fields:
        config = config.replace(**config_fields)
    m = as_model(model)
    hws = [as_hardware(h) for h in hardware]
    if not hws:
        raise ValueError("hardware: give at least one GPU")
    cm = roofline_model()
    stacked: dict[str, list[float]] = {n: [] for n in cm.input_names}
    cfgs = []
    for hw in hws:
        cfg = resolve_inference(m, hw, config)
        cfgs.append(cfg)
        values = inference_inputs(m, hw, cfg, params)
        for n in cm.input_names:
            stacked[n].append(values[n])
    out = cm(**{n: np.asarray(v, dtype=np.float64) for n, v in stacked.items()})
    rows = []
    for i, (hw, cfg) in enumerate(zip(hws, cfgs)):
        bw = float(out["hbm_bw"][i])
        for phase in PHASES:
            for op in OPERATORS:
                f = float(out[f"{phase}.{op}.flops"][i])
                b = float(out[f"{phase}.{op}.bytes"][i])
                peak = float(out[f"{phase}.{op}.peak"][i])
                inten = f / b if b else float("inf")
                ridge = peak / bw
                rows.append({
                    "hardware": hw.name, "phase": phase, "op": op,
                    "dtype": cfg.act_dtype if op not in ("attention", "lm_head") else "bf16",
                    "flops": f, "bytes": b, "intensity": inten, "peak_flops": peak,
                    "bandwidth": bw, "ridge": ridge,
                    "attainable_flops": min(peak, inten * bw),
                    "bound": "compute" if inten >= ridge else "memory",
                    "time_s": float(out[f"{phase}.{op}.time"][i]),
                })
    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------- DRAM study
def dram_study(model: ModelSpec | str, base_hardware: HardwareSpec | str,
               config: InferenceConfig | None = None, params: Params | None = None, *,
               stacks: int = 8, batches: Sequence[int] = (1, 8, 32, 128, 512),
               **config_fields: Any) -> pd.DataFrame:
    """Decode and prefill as HBM bandwidth scales through :data:`HBM_TECHNOLOGIES`.

    The GPU is ``base_hardware`` (compute, capacity, links and calibration unchanged) with its
    HBM bandwidth replaced by ``stacks x`` the per-stack bandwidth of each technology (8
    stacks by default, as on B200 and MI300X packages). For every technology and batch size
    it reports TTFT, TPOT, the decode GEMMs' compute and memory times (one step), whether
    decode is still memory-bound, and:

    * ``crossover_batch``: the smallest batch (on a grid of 1-4096) at which the decode GEMMs
      become compute-bound (their compute time reaches their HBM time);
    * ``bw_compute_bound``: the HBM bandwidth (bytes/s) above which decode at that batch stops
      being memory-bound: ``bw * t_memory / t_compute`` (the GEMMs' HBM time scales as 1/bw).

    Args:
        model, base_hardware: model and GPU (ids or specs).
        config: :class:`~symcost.infer_api.InferenceConfig` (TP, dtypes, lengths; its batch is
            replaced by each of ``batches``); or its fields as keyword arguments.
        params: efficiency parameters.
        stacks: HBM stacks per GPU (positive integer).
        batches: decode batch sizes to report.

    Returns:
        :class:`pandas.DataFrame`, one row per (technology, batch), plus the base GPU's own
        bandwidth as technology ``"<base> (datasheet)"``; columns ``technology``,
        ``stack_gbs``, ``stacks``, ``bandwidth`` (bytes/s), ``batch``, ``ttft_s``, ``tpot_s``,
        ``throughput_tokens_per_s``, ``decode_gemm_compute_s``, ``decode_gemm_memory_s``,
        ``decode_bound``, ``crossover_batch``, ``bw_compute_bound`` (bytes/s), ``fits``.

    Raises:
        ValueError: ``stacks`` not a positive integer; InferenceConfigError etc. for an
            invalid request.
    """
    import pandas as pd

    if config is None:
        config = InferenceConfig(**config_fields)
    elif config_fields:
        config = config.replace(**config_fields)
    m, hw = as_model(model), as_hardware(base_hardware)
    if int(stacks) != stacks or stacks < 1:
        raise ValueError(f"stacks: must be a positive integer (got {stacks!r})")
    techs: list[dict[str, Any]] = [
        {"name": f"{hw.name} (datasheet)", "bw": hw.hbm_bandwidth, "stack_gbs": None}]
    techs += [{"name": t["name"], "bw": t["stack_gbs"] * 1e9 * stacks,
               "stack_gbs": t["stack_gbs"]} for t in HBM_TECHNOLOGIES]
    grid = np.unique(np.round(np.geomspace(1, 4096, 97)))
    records = []
    for t in techs:
        spec = dataclasses.replace(hw, hbm_bandwidth=t["bw"])
        for b in batches:
            cfg = resolve_inference(m, spec, config.replace(batch=int(b)))
            values = inference_inputs(m, spec, cfg, params)
            out = evaluate_inference(values, "float64")
            arrays = {k: np.full(grid.shape, v) for k, v in values.items()}
            arrays[S.batch.name] = grid
            sweep = evaluate_inference(arrays, "float64")
            bound = sweep["decode_gemm_time_compute"] >= sweep["decode_gemm_time_memory"]
            cross = float(grid[np.argmax(bound)]) if bound.any() else float("nan")
            tc = float(out["decode_gemm_time_compute"])
            tm = float(out["decode_gemm_time_memory"])
            records.append({
                "technology": t["name"], "stack_gbs": t["stack_gbs"], "stacks": stacks,
                "bandwidth": t["bw"], "batch": int(b),
                "ttft_s": float(out["ttft"]), "tpot_s": float(out["tpot"]),
                "throughput_tokens_per_s": float(out["throughput"]),
                "decode_gemm_compute_s": tc, "decode_gemm_memory_s": tm,
                "decode_bound": "compute" if tc >= tm else "memory",
                "crossover_batch": cross,
                "bw_compute_bound": t["bw"] * tm / tc if tc > 0 else float("inf"),
                "fits": float(out["mem_headroom"]) >= 0,
            })
    return pd.DataFrame(records)
