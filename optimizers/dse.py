"""Design-space exploration over technology: process node x memory generation x network.

Each point is an accelerator derived by :func:`hwspecs.technology.derive_accelerator` (the
reference chip's architecture on a given node, HBM generation, scale-up link and scale-out
network, under a die-area and power budget). For training, the best parallel layout of each
point is searched again (:func:`optimizers.search.search`), and the step is split into
compute, memory and communication time (:func:`symcost.bottleneck.bottleneck`); for serving,
the best tensor- and expert-parallel degrees and batch at a latency target are searched again
(:func:`optimizers.dissect.serving_value`) and the decode step is split the same way
(:func:`decode_bound`). The result shows where the bottleneck moves as the node shrinks
(compute -> memory -> interconnect), as the seed study does (Kundu et al. 2024,
arXiv:2407.14645, Sec. 5).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import product
from typing import Any

import pandas as pd

from hwspecs import HardwareSpec
from hwspecs.prices import PriceModel, cost_per_token
from hwspecs.technology import derive_accelerator
from symcost.api import as_model
from symcost.bottleneck import bottleneck
from symcost.evaluate import Progress
from symcost.infer_api import evaluate_inference
from symcost.params import Params, load_params
from symcost.schema import json_key

from .dissect import DissectError, serving_value
from .search import search
from .space import SearchError

#: the design every point keeps (the H100's die area and TDP and its architecture).
DEFAULT_DESIGN: dict[str, Any] = {"die_area_mm2": 814.0, "power_w": 700.0,
                                  "reference": "h100-sxm5-80gb"}
#: the technology axes explored by default.
DEFAULT_NODES = ("12", "7", "5", "3", "2", "1")
DEFAULT_MEMORIES = ("hbm2e", "hbm3", "hbm3e", "hbm4")
DEFAULT_NETWORKS = ("ib-hdr", "ib-ndr", "ib-xdr")
CATEGORIES = ("compute", "memory", "communication")


class DSEError(ValueError):
    """An invalid exploration; the message names the axis or the point."""


def decode_bound(values: Mapping[str, float]) -> dict[str, float]:
    """Seconds of one decode step per category, from the inference model's outputs: the
    decode GEMMs and LM head count as compute or memory by their roofline side
    (``decode_gemm_time_compute`` vs ``decode_gemm_time_memory``), attention over the KV cache
    and the elementwise ops as memory, tensor-, expert- and pipeline-parallel traffic as
    communication."""
    gemm = ("compute" if values["decode_gemm_time_compute"] >= values["decode_gemm_time_memory"]
            else "memory")
    parts = dict.fromkeys(CATEGORIES, 0.0)
    parts[gemm] += values["decode_gemm"] + values["decode_lm_head"]
    parts["memory"] += values["decode_attention"] + values["decode_memory_ops"]
    parts["communication"] += (values["decode_tp_comm"] + values["decode_ep_comm"]
                               + values["decode_pp_p2p"])
    return parts


def _designs(nodes: Sequence[str], memories: Sequence[str], networks: Sequence[str],
             link: str, design: Mapping[str, Any] | None, progress: Progress | None
             ) -> Iterator[tuple[str, str, str, HardwareSpec]]:
    """``(node, memory, network, derived accelerator)`` for every point of the grid;
    ``progress(points done, points)`` after each point.

    Raises:
        DSEError: an empty axis.
        HardwareSpecError: an unknown technology name.
    """
    pts = list(product([str(n) for n in nodes], memories, networks))
    if not pts:
        raise DSEError("nodes/memories/networks: every axis needs at least one value")
    d = {**DEFAULT_DESIGN, **(design or {})}
    for i, (node, mem, net) in enumerate(pts):
        yield node, mem, net, derive_accelerator(node, mem, link, net, **d)
        if progress is not None:
            progress(i + 1, len(pts))


def _power(design: Mapping[str, Any] | None) -> float:
    """The chip power budget of a design, W."""
    return float({**DEFAULT_DESIGN, **(design or {})}["power_w"])


def _costs(price: PriceModel | None, watts: float, num_gpus: int, tokens_per_s: float
           ) -> dict[str, float]:
    """The price columns of one point (none without a price): USD per GPU-hour at the design's
    power budget, USD per token and per million tokens, tokens per USD
    (:func:`hwspecs.prices.cost_per_token`)."""
    if price is None:
        return {}
    usd_h = price.usd_per_gpu_hour(watts)
    usd_tok = cost_per_token(usd_h, num_gpus, tokens_per_s)
    return {json_key("usd_per_gpu_hour"): usd_h, json_key("usd_per_token"): usd_tok,
            json_key("usd_per_million_tokens"): usd_tok * 1e6,
            json_key("tokens_per_usd"): 1.0 / usd_tok}


def dse_training(model: Any, num_gpus: int, global_batch: int, *,
                 nodes: Sequence[str] = DEFAULT_NODES,
                 memories: Sequence[str] = DEFAULT_MEMORIES,
                 networks: Sequence[str] = DEFAULT_NETWORKS, link: str = "nvlink5",
                 design: Mapping[str, Any] | None = None, dtype: str = "bf16",
                 params: Params | None = None, progress: Progress | None = None,
                 price: PriceModel | None = None, **search_options: Any) -> pd.DataFrame:
    """Best training step time at every (node, memory, network) point.

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name.
        num_gpus, global_batch: the job (fixed across points).
        nodes, memories, networks: the axes (names of ``hwspecs/data/technology.yaml``).
        link: scale-up link generation, fixed.
        design: ``die_area_mm2``, ``power_w``, ``reference`` (:data:`DEFAULT_DESIGN`).
        dtype: GEMM dtype.
        params: efficiency parameters (the reference generation's are used).
        progress: ``progress(points done, points)`` after each point.
        price: a :class:`~hwspecs.prices.PriceModel`; adds the cost columns
            ``gpu_hour_cost_usd`` (at the design's power budget), ``cost_per_token_usd``,
            ``cost_per_million_tokens_usd`` and ``tokens_per_usd``.
        search_options: passed to :func:`optimizers.search.search` (``max_tp``, ...).

    Returns:
        DataFrame, one row per point: ``node``, ``memory``, ``network``, ``step_time_s``,
        ``speedup`` (over the first point), ``energy_per_token_j`` (the chips at their power
        budget for the step, divided by the tokens of the step: an upper bound on the
        accelerators' share, without hosts, network or cooling), ``bound`` (largest
        category), the category shares ``compute_share``/``memory_share``/
        ``communication_share`` (of the step), and the layout
        (``tp``, ``pp``, ``dp``, ``micro_batch``).

    Raises:
        DSEError: an empty axis, or a point where no layout is valid and fits.
        HardwareSpecError: an unknown technology name.
    """
    m = as_model(model)
    params = params or load_params()
    rows = []
    watts = _power(design)
    for node, mem, net, hw in _designs(nodes, memories, networks, link, design, progress):
        try:
            res = search(m, hw, num_gpus, global_batch, dtype=dtype, top=1, params=params,
                         **search_options)
        except SearchError as exc:
            raise DSEError(f"{hw.name}: {exc}") from None
        cfg = res.best
        b = bottleneck(m, hw, cfg, params)
        shares = {c: float(b.categories.get(c, 0.0)) for c in CATEGORIES}
        step = float(res.table["step_time"].iloc[0])
        tokens_per_s = global_batch * res.seq_len / step
        rows.append({"node": node, "memory": mem, "network": net,
                     "step_time_s": step,
                     "energy_per_token_j": num_gpus * watts / tokens_per_s,
                     **_costs(price, watts, num_gpus, tokens_per_s),
                     "bound": max(shares, key=lambda c: shares[c]),
                     **{f"{c}_share": v for c, v in shares.items()},
                     "tp": cfg.tp, "pp": cfg.pp, "dp": cfg.dp,
                     "micro_batch": cfg.micro_batch})
    df = pd.DataFrame(rows)
    df.insert(4, "speedup", df["step_time_s"].iloc[0] / df["step_time_s"])
    return df


def dse_serving(model: Any, num_gpus: int, *, input_len: int, output_len: int,
                tpot_target_s: float, nodes: Sequence[str] = DEFAULT_NODES,
                memories: Sequence[str] = DEFAULT_MEMORIES,
                networks: Sequence[str] = DEFAULT_NETWORKS, link: str = "nvlink5",
                design: Mapping[str, Any] | None = None, dtype: str = "bf16",
                params: Params | None = None, progress: Progress | None = None,
                price: PriceModel | None = None) -> pd.DataFrame:
    """Best serving throughput at a latency target at every (node, memory, network) point.

    Args:
        model, num_gpus, nodes, memories, networks, link, design, dtype, params, progress,
            price: as :func:`dse_training` (cost per generated token).
        input_len, output_len: tokens per request.
        tpot_target_s: largest time per output token, s.

    Returns:
        DataFrame, one row per point: ``node``, ``memory``, ``network``,
        ``throughput_tokens_per_s``, ``speedup`` (over the first point),
        ``energy_per_token_j`` (the chips at their power budget per generated token),
        ``bound`` and the
        decode-step shares ``<category>_share`` (:func:`decode_bound`), ``tp``, ``ep`` and
        ``batch``.

    Raises:
        DSEError: an empty axis, or a point that cannot meet the target.
    """
    m = as_model(model)
    params = params or load_params()
    rows = []
    watts = _power(design)
    for node, mem, net, hw in _designs(nodes, memories, networks, link, design, progress):
        try:
            thr, cfg, inputs = serving_value(m, hw, num_gpus, dtype, input_len, output_len,
                                             tpot_target_s, params)
        except DissectError as exc:
            raise DSEError(str(exc)) from None
        out = evaluate_inference({k: float(v) for k, v in inputs.items()}, "float64")
        parts = decode_bound({k: float(v) for k, v in out.items()})
        total = sum(parts.values()) or 1.0
        shares = {c: parts[c] / total for c in CATEGORIES}
        rows.append({"node": node, "memory": mem, "network": net,
                     "throughput_tokens_per_s": thr,
                     "energy_per_token_j": num_gpus * watts / thr,
                     **_costs(price, watts, num_gpus, thr),
                     "bound": max(shares, key=lambda c: shares[c]),
                     **{f"{c}_share": v for c, v in shares.items()},
                     "tp": cfg.tp, "ep": cfg.ep, "batch": cfg.batch})
    df = pd.DataFrame(rows)
    df.insert(4, "speedup", df["throughput_tokens_per_s"] / df["throughput_tokens_per_s"].iloc[0])
    return df


__all__ = ["CATEGORIES", "DEFAULT_DESIGN", "DEFAULT_MEMORIES", "DEFAULT_NETWORKS",
           "DEFAULT_NODES", "DSEError", "decode_bound", "dse_serving", "dse_training"]
