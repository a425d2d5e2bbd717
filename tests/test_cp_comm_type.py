"""Context-parallel exchange types (``cp_comm_type``): the ring (``p2p``), the K/V all-gather
of Llama 3 (``allgather``) and DeepSpeed-Ulysses' all-to-all (``a2a``)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symcost import ConfigError, predict_training
from symcost.config import TrainingConfig
from symcost.sweep import sweep
from symcost.training import BREAKDOWN

H100 = "h100-sxm5-80gb"          # 8 GPUs per node
# Llama-3-8B: 32 layers, 32 heads of 128, 8 KV heads
BASE = dict(num_gpus=8, tp=2, cp=4, global_batch=4, micro_batch=1, seq_len=8192, sp=True)


def run(**kw):
    return predict_training("llama-3-8b", H100, **{**BASE, **kw})


def test_allgather_and_a2a_by_hand():
    """``tp*cp = 8`` GPUs of one node, so every collective runs over NVLink. Per layer and
    micro-batch: n = 8192/4 = 2,048 local tokens, 4 KV heads and 16 query heads per TP rank.

    * allgather: the all-gather of the ``c`` K/V blocks (``kv = 2048*4*(128+128)*2`` bytes
      each) forward, again backward plus the reduce-scatter of their gradients: three ring
      collectives of ``(c-1)*kv`` bytes and ``c-1`` latency steps, all exposed.
    * a2a: forward the all-to-all of Q, K, V (``2048*(16*128 + 4*256)*2`` bytes) and of the
      output (``2048*16*128*2``), backward the same two: ``(c-1)/c`` of each over NVLink plus one
      latency per collective.
    """
    c, L, m = 4, 32, 4     # micro-batches: global 4 / (dp 1 * micro 1)
    kv = 2048 * 4 * 256 * 2
    qkv, out = 2048 * (16 * 128 + 4 * 256) * 2, 2048 * 16 * 128 * 2
    assert kv == 4_194_304 and qkv == 12_582_912 and out == 8_388_608
    ag = run(cp_comm_type="allgather")
    x = ag.inputs
    bw, lat = x["intra_bw"] * x["eff_intra"], x["intra_lat"]
    want = m * L * 3 * (c - 1) * (kv / bw + lat)
    assert ag.breakdown["cp_comm"] == pytest.approx(want, rel=1e-12)
    a2a = run(cp_comm_type="a2a")
    want = m * L * 2 * ((c - 1) / c * (qkv + out) / bw + 2 * lat)
    assert a2a.breakdown["cp_comm"] == pytest.approx(want, rel=1e-12)
    # the ring hides its exchange under the attention here
    assert run().breakdown["cp_comm"] == 0.0


def test_only_the_exchange_and_the_ring_merges_differ():
    """Memory and every other term are those of the ring but the exchange and the ring's
    per-step merges (:func:`symcost.training.cp_ring_merge_bytes`), by hand: per layer and
    micro-batch q = o = 2,048 tokens x 16 heads x 128 = 4,194,304 elements, kv = 2,048 x 4 KV
    heads x 256 = 2,097,152; (c-1) x 3/4 = 2.25 steps of 16-bit traffic, forward ``q + 4*o``,
    backward ``5*q + 2*o + 4*kv``, at ``eff_hbm`` of the HBM bandwidth; 32 layers x 4
    micro-batches."""
    q = o = 2048 * 16 * 128
    kv = 2048 * 4 * 256
    fwd, bwd = 2.25 * 2 * (q + 4 * o), 2.25 * 2 * (5 * q + 2 * o + 4 * kv)
    assert (fwd, bwd) == (94_371_840, 169_869_312)
    p2p = run()
    hbm = p2p.inputs["hbm_bw"] * p2p.inputs["eff_hbm"]
    for kind in ("allgather", "a2a"):
        r = run(cp_comm_type=kind)
        for k in BREAKDOWN:
            if k == "time_forward":
                assert p2p.values[k] - r.values[k] == pytest.approx(32 * 4 * fwd / hbm,
                                                                    rel=1e-9)
            elif k == "time_backward":
                assert p2p.values[k] - r.values[k] == pytest.approx(32 * 4 * bwd / hbm,
                                                                    rel=1e-9)
            elif k != "time_cp_comm":
                assert r.values[k] == pytest.approx(p2p.values[k], rel=1e-12), (kind, k)
        assert r.values["mem_total"] == p2p.values["mem_total"]
        merges = 32 * 4 * (fwd + bwd) / hbm
        assert r.step_time - p2p.step_time == pytest.approx(
            r.breakdown["cp_comm"] - p2p.breakdown["cp_comm"] - merges, rel=1e-9)
        assert r.breakdown["cp_comm"] > 0
    # without context parallelism there is no ring and nothing to merge
    one = run(cp=1, num_gpus=2)
    assert one.values["time_forward"] == pytest.approx(
        run(cp=1, num_gpus=2, cp_comm_type="a2a").values["time_forward"], rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(tp=st.sampled_from([1, 2]), cp=st.sampled_from([1, 2, 4]),
       seq=st.sampled_from([2048, 8192, 32768]), mb=st.sampled_from([1, 2]))
def test_ring_never_exposes_more_than_the_all_gather_inside_a_node(tp, cp, seq, mb):
    """Inside a node the ring moves the all-gather's volume (the backward's K/V and gradients
    equal the all-gather plus reduce-scatter) and hides part of it; with ``cp = 1`` the three
    are the same configuration."""
    kw = dict(num_gpus=tp * cp, tp=tp, cp=cp, seq_len=seq, micro_batch=mb, global_batch=mb,
              sp=tp > 1)
    p2p, ag, a2a = (run(cp_comm_type=k, **kw) for k in ("p2p", "allgather", "a2a"))
    assert p2p.breakdown["cp_comm"] <= ag.breakdown["cp_comm"] * (1 + 1e-12)
    if cp == 1:
        assert p2p.step_time == ag.step_time == a2a.step_time
        assert ag.breakdown["cp_comm"] == 0.0


def test_a2a_needs_whole_heads_per_rank():
    assert run(cp_comm_type="a2a", tp=4, cp=2, num_gpus=8).breakdown["cp_comm"] > 0  # 8 | 8
    with pytest.raises(ConfigError) as e:
        run(cp_comm_type="a2a", tp=8, cp=2, num_gpus=16)  # 16 does not divide 8 KV heads
    assert str(e.value) == (
        "cp_comm_type: a2a needs tp*cp = 16 to divide the attention heads (32) and the KV heads "
        "(8): each rank takes whole heads after the all-to-all (DeepSpeed-Ulysses; Transformer "
        "Engine asserts it)")
    with pytest.raises(ConfigError, match="^cp_comm_type: must be one of p2p, allgather, a2a"):
        run(cp_comm_type="ring")


def test_sweep_masks_the_a2a_rule_exactly_where_resolve_rejects():
    base = TrainingConfig(num_gpus=64, global_batch=64, seq_len=8192)
    df = sweep("llama-3-8b", H100, base, precision="float64",
               vary={"cp_comm_type": ["p2p", "allgather", "a2a"], "tp": [1, 2, 4, 8],
                     "cp": [1, 2, 4, 8]})
    names = {0: "p2p", 1: "allgather", 2: "a2a"}
    for row in df.to_dict("records"):
        cfg = base.replace(cp_comm_type=names[int(row["cp_comm_type"])], tp=int(row["tp"]),
                           cp=int(row["cp"]))
        try:
            r = predict_training("llama-3-8b", H100, cfg)
        except ConfigError as exc:
            assert not row["valid"] and row["reason"].split(":")[0] == str(exc).split(":")[0]
            continue
        assert row["step_time"] == pytest.approx(r.step_time, rel=1e-12)
        assert row["valid"] == r.fits
    assert df.attrs["invalid_counts"]["cp_comm_type: a2a needs tp*cp to divide heads and "
                                      "kv_heads"] == 6


def test_cli_sweep_names_the_exchange():
    """``symcost sweep --vary cp_comm_type=...``: rows name the type (as every swept enum field
    does) and carry the step time ``train`` gives for it."""
    import json

    from typer.testing import CliRunner

    from symcost.cli import app

    res = CliRunner(env={"SYMCOST_CACHE_DIR": "off"}).invoke(app, [
        "sweep", "--model", "llama-3-8b", "--hardware", H100, "--num-gpus", "8", "--tp", "2",
        "--cp", "4", "--sp", "--global-batch", "4", "--seq-len", "8192",
        "--vary", "cp_comm_type=p2p,allgather,a2a", "--precision", "float64", "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["top"]
    assert sorted(r["cp_comm_type"] for r in rows) == ["a2a", "allgather", "p2p"]
    for r in rows:
        assert r["step_time_s"] == pytest.approx(
            run(cp_comm_type=r["cp_comm_type"]).step_time, rel=1e-12)
