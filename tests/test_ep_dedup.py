"""Node-deduplicated MoE dispatch (``ep_dedup``: DeepEP, HybridEP): hand values of
:func:`symcost.ops.collectives.all_to_all_node_dedup`, its agreement with the plain
all-to-all where they must agree, and its effect on a training step."""

from __future__ import annotations

import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import predict_training
from symcost import symbols as S
from symcost.ops import collectives as coll

#: links without latency: 8 GPUs per node, 100 GB/s inside, 10 GB/s across, efficiencies 1
LINKS = {"gpus_per_node": 8, "intra_bw": 1e11, "inter_bw": 1e10, "eff_intra": 1.0,
         "eff_inter": 1.0, "intra_lat": 0.0, "inter_lat": 0.0}


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    return float(sp.sympify(expr).xreplace({S.lookup(k): v for k, v in values.items()}))


def test_dedup_by_hand():
    """64 ranks on 8 nodes, 22 routed copies of 1e6 bytes each per rank (22e6 bytes): a token
    reaches each of the 7 other nodes with probability 1 - (7/8)^22 = 0.94701, so the network
    carries 7 * 0.94701 * 1e6 = 6.629e6 bytes (the plain all-to-all 56/64 * 22e6 = 19.25e6),
    the intra-node link 7/64 * 22e6 + 56/64 * 7/8 * 22e6 = 19.25e6: time max(19.25e6/1e11,
    6.629e6/1e10) = 6.629e-4 s against the plain 1.925e-3 s (0.344 of it)."""
    nbytes, n = sp.Integer(22 * 10**6), sp.Integer(64)
    dedup = coll.all_to_all_node_dedup(nbytes, n, sp.Integer(1), sp.Integer(22))
    plain = coll.all_to_all(nbytes, n, sp.Integer(1))
    network = 7 * (1 - (7 / 8) ** 22) * 1e6
    assert _bind(dedup.time, LINKS) == pytest.approx(network / 1e10, rel=1e-12)
    assert _bind(plain.time, LINKS) == pytest.approx(56 / 64 * 22e6 / 1e10, rel=1e-12)
    assert _bind(dedup.bytes, LINKS) == _bind(plain.bytes, LINKS)  # same bytes sent per GPU
    # NVLink-bound when the network is fast: the forwarded copies set the time
    fast = {**LINKS, "inter_bw": 1e12}
    assert _bind(dedup.time, fast) == pytest.approx(19.25e6 / 1e11, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(n=st.sampled_from([2, 4, 8, 16, 64, 256]), stride=st.sampled_from([1, 2, 8]),
       copies=st.integers(1, 32))
def test_agrees_with_the_plain_all_to_all_where_it_must(n, stride, copies):
    """Inside one node the two are the same collective; across nodes, with one copy per token
    (nothing to deduplicate) the network carries exactly the plain all-to-all's bytes
    (checked on a fast intra-node link, where the network sets both times); more copies never
    put more on the network."""
    nbytes = sp.Integer(10**6 * copies)
    args = (nbytes, sp.Integer(n), sp.Integer(stride))
    fast_nvlink = {**LINKS, "intra_bw": 1e18}
    dedup = coll.all_to_all_node_dedup(*args, sp.Integer(copies)).time
    plain = coll.all_to_all(*args).time
    if n * stride <= 8:
        assert _bind(dedup, LINKS) == _bind(plain, LINKS)
    elif copies == 1:
        assert _bind(dedup, fast_nvlink) == pytest.approx(_bind(plain, fast_nvlink), rel=1e-12)
    else:
        assert _bind(dedup, fast_nvlink) <= _bind(plain, fast_nvlink) * (1 + 1e-12)


def test_dense_model_stays_finite():
    """No routed copies (a dense model, whose all-to-all is weighted by 0): no 0/0."""
    c = coll.all_to_all_node_dedup(sp.Integer(0), sp.Integer(64), sp.Integer(1), sp.Integer(0))
    assert _bind(c.time, LINKS) == 0.0


def test_nemotron_super_on_b200_all_to_all_shrinks():
    """Nemotron 3 Super on 64 B200 (EP64 over 8 nodes, top-22 of 512): deduplication cuts the
    exposed all-to-all; on 64 GB200 (one NVLink domain) it changes no communication. On both
    the ``flex`` dispatcher spares the ``alltoall`` one's chunk sorts (8 experts per GPU), the
    same memory-bound time on the two GPUs (8 TB/s each, one generation's ``eff_hbm``)."""
    kw = dict(num_gpus=64, ep=64, global_batch=512, micro_batch=1, dtype="mxfp8")
    a = predict_training("nemotron-3-super", "b200", **kw).values
    b = predict_training("nemotron-3-super", "b200", ep_dedup=True, **kw).values
    assert b["time_ep_comm"] < 0.5 * a["time_ep_comm"]
    g = predict_training("nemotron-3-super", "gb200", **kw).values
    h = predict_training("nemotron-3-super", "gb200", ep_dedup=True, **kw).values
    assert h["time_ep_comm"] == g["time_ep_comm"]
    sorts = g["time_forward"] - h["time_forward"]
    assert sorts > 0
    assert a["time_forward"] - b["time_forward"] == pytest.approx(sorts, rel=1e-9)
