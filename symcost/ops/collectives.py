"""Collective communication with an alpha-beta (latency-bandwidth) model.

A group of ``n`` GPUs whose ranks are ``stride`` apart lies inside one node when
``n * stride <= gpus_per_node`` and then uses the intra-node link (NVLink). Otherwise the ring
crosses nodes. Each node holds ``r = max(1, gpus_per_node / stride)`` ranks of the group, each
with its own NIC share (``inter_bw``); NCCL runs one ring channel per NIC, so the data leaving a
node is split over ``r`` NICs while every rank still moves the whole buffer over NVLink:
per-rank bandwidth ``min(intra_bw*eff_intra, r*inter_bw*eff_inter)``. A strided group (e.g. the
DP group of TP8 on 8-GPU nodes, ``r = 1``) gets one NIC share; an FSDP group spanning whole
nodes (``r = 8``) gets eight. Ring algorithms: all-reduce sends ``2(n-1)/n`` of the buffer in
``2(n-1)`` steps; reduce-scatter and all-gather ``(n-1)/n`` in ``n-1`` steps.

References:
    Thakur, Rabenseifner and Gropp 2005, "Optimization of collective communication operations
    in MPICH", IJHPCA 19(1) (ring algorithms, alpha-beta costs); NCCL tests' bus-bandwidth
    convention (``busbw = algbw * 2(n-1)/n`` for all-reduce).
"""

from __future__ import annotations

import sympy as sp

from .. import symbols as S
from ..functions import smax, smin
from .cost import Cost


def link_bandwidth(n: sp.Expr, stride: sp.Expr) -> sp.Expr:
    """Achieved per-rank bandwidth (bytes/s) of a ring over ``n`` ranks ``stride`` apart.

    Intra-node: ``intra_bw*eff_intra``. Across nodes: ``min(intra_bw*eff_intra,
    r*inter_bw*eff_inter)`` with ``r = max(1, gpus_per_node/stride)`` ranks (and NICs) of the
    group per node (NCCL multi-channel rings, one channel per NIC; Jeaugey, "Massively scale
    your deep learning training with NCCL 2.4", NVIDIA 2019; DGX rail-optimised topology).
    """
    intra = S.intra_bw * S.eff_intra
    nics = smax(1, S.gpus_per_node / stride)
    return sp.Piecewise((intra, n * stride <= S.gpus_per_node),
                        (smin(intra, nics * S.inter_bw * S.eff_inter), True))


def link_latency(n: sp.Expr, stride: sp.Expr) -> sp.Expr:
    """Per-step latency (s) of a group of ``n`` ranks ``stride`` apart."""
    return sp.Piecewise((S.intra_lat, n * stride <= S.gpus_per_node), (S.inter_lat, True))


def _ring(nbytes: sp.Expr, n: sp.Expr, stride: sp.Expr, passes: int) -> Cost:
    sent = passes * (n - 1) / n * nbytes
    t = sent / link_bandwidth(n, stride) + passes * (n - 1) * link_latency(n, stride)
    return Cost(sp.Integer(0), sent, t)


def all_reduce(nbytes: sp.Expr, n: sp.Expr, stride: sp.Expr = sp.Integer(1)) -> Cost:
    """Ring all-reduce of an ``nbytes`` buffer over ``n`` ranks ``stride`` apart.

    Returns:
        :class:`Cost`: FLOP 0, bytes sent per GPU ``2(n-1)/n*nbytes``, time
        ``2(n-1)/n*nbytes/bw + 2(n-1)*latency`` s (zero when ``n = 1``).
    """
    return _ring(nbytes, n, stride, 2)


def reduce_scatter(nbytes: sp.Expr, n: sp.Expr, stride: sp.Expr = sp.Integer(1)) -> Cost:
    """Ring reduce-scatter of an ``nbytes`` (unsharded) buffer: ``(n-1)/n*nbytes/bw +
    (n-1)*latency`` s."""
    return _ring(nbytes, n, stride, 1)


def all_gather(nbytes: sp.Expr, n: sp.Expr, stride: sp.Expr = sp.Integer(1)) -> Cost:
    """Ring all-gather producing an ``nbytes`` buffer: ``(n-1)/n*nbytes/bw + (n-1)*latency`` s."""
    return _ring(nbytes, n, stride, 1)


def p2p(nbytes: sp.Expr, intra_node: sp.Expr) -> Cost:
    """Point-to-point send of ``nbytes``; ``intra_node`` is a SymPy condition choosing the link.

    Returns:
        :class:`Cost`: ``nbytes/bw + latency`` s.
    """
    bw = sp.Piecewise((S.intra_bw * S.eff_intra, intra_node), (S.inter_bw * S.eff_inter, True))
    lat = sp.Piecewise((S.intra_lat, intra_node), (S.inter_lat, True))
    return Cost(sp.Integer(0), nbytes, nbytes / bw + lat)


def all_to_all(nbytes: sp.Expr, n: sp.Expr, stride: sp.Expr = sp.Integer(1)) -> Cost:
    """All-to-all of an ``nbytes`` buffer per rank over ``n`` ranks ``stride`` apart (each
    rank keeps ``1/n`` and sends ``1/n`` to every other rank, all sends concurrent).

    Inside one node the ``(n-1)/n`` that leaves moves over the intra-node link. Across nodes,
    with ``r = min(n, max(1, gpus_per_node/stride))`` ranks of the group per node, ``(r-1)/n``
    stays in the node (intra-node link) and ``(n-r)/n`` crosses the network on the rank's own
    NIC share; the two proceed in parallel. One latency per collective (pairwise exchanges
    issued together, NCCL ``ncclSend``/``ncclRecv`` groups); Thakur et al.'s sequential
    ``(n-1)`` latencies were tried on 2026-11-27 and not kept: calibration in-sample error
    7.99% -> 7.97%, and gpt-oss-120b's EP64 runs on NVL72, the largest error at large ``n``,
    did not move.

    Returns:
        :class:`Cost`: FLOP 0, bytes sent per GPU ``(n-1)/n*nbytes``, time s (zero bandwidth
        term when ``n = 1``).

    References:
        Thakur, Rabenseifner and Gropp 2005 (pairwise-exchange all-to-all, alpha-beta cost);
        Rajbhandari et al. 2022, "DeepSpeed-MoE", Sec. 5.2 (expert-parallel all-to-all volume).
    """
    intra_bw = S.intra_bw * S.eff_intra
    inter_bw = S.inter_bw * S.eff_inter
    sent = (n - 1) / n * nbytes
    r = smin(n, smax(1, S.gpus_per_node / stride))
    across = smax((r - 1) / n * nbytes / intra_bw, (n - r) / n * nbytes / inter_bw)
    inside = sent / intra_bw
    lat = link_latency(n, stride) * flag_many(n)
    t = sp.Piecewise((inside, n * stride <= S.gpus_per_node), (across, True)) + lat
    return Cost(sp.Integer(0), sent, t)


def all_to_all_node_dedup(nbytes: sp.Expr, n: sp.Expr, stride: sp.Expr,
                          copies: sp.Expr) -> Cost:
    """Expert-parallel dispatch (or combine) of ``nbytes`` per rank holding ``copies`` routed
    copies of each token spread uniformly over ``n`` ranks ``stride`` apart, sending each token
    once per destination node over the network and forwarding its copies inside that node over
    the intra-node link (DeepEP's normal kernels, Megatron-Core's flex dispatcher with DeepEP
    or HybridEP; DeepSeek-V3, arXiv:2412.19437, Sec. 3.2.2: IB to the node, then NVLink).

    With ``r`` ranks of the group per node (as :func:`all_to_all`) and ``N = n/r`` nodes, a
    token reaches each other node with probability ``1 - (1 - 1/N)^copies``, so a rank sends
    ``nbytes/copies * (N - 1) * (1 - (1 - 1/N)^copies)`` over the network instead of the
    ``(n - r)/n * nbytes`` of :func:`all_to_all` (for 22 of 512 experts over 8 nodes, 0.34 of
    it), while the intra-node link carries the rank's own node's share and forwards the copies
    that arrived for the node's other ranks, ``((r - 1)/n + (n - r)/n * (r - 1)/r) * nbytes``.
    Within one node it is :func:`all_to_all`.

    Returns:
        :class:`Cost`: FLOP 0, bytes sent per GPU (as :func:`all_to_all`), time s.

    References:
        DeepSeek-AI 2024, DeepSeek-V3 Technical Report, Sec. 3.2.2; deepseek-ai/DeepEP README
        (normal kernels: NVLink and RDMA forwarding); Megatron-Core MoE documentation
        (``--moe-token-dispatcher-type flex``, ``--moe-flex-dispatcher-backend``).
    """
    intra_bw = S.intra_bw * S.eff_intra
    inter_bw = S.inter_bw * S.eff_inter
    r = smin(n, smax(1, S.gpus_per_node / stride))
    nodes = n / r
    copies = smax(copies, 1)  # a dense model (no routed copies) stays finite
    network = nbytes / copies * (nodes - 1) * (1 - (1 - 1 / nodes) ** copies)
    forwarded = ((r - 1) / n + (n - r) / n * (r - 1) / r) * nbytes
    across = smax(forwarded / intra_bw, network / inter_bw)
    plain = all_to_all(nbytes, n, stride)
    lat = link_latency(n, stride) * flag_many(n)
    t = sp.Piecewise((plain.time, n * stride <= S.gpus_per_node), (across + lat, True))
    return Cost(sp.Integer(0), plain.bytes, t)


def flag_many(n: sp.Expr) -> sp.Expr:
    """1 when a group has more than one rank (a collective over one rank costs nothing)."""
    return sp.Piecewise((0, n < sp.Rational(3, 2)), (1, True))
