"""Pipeline-parallel point-to-point time: blocking under 1F1B, overlapped with the next chunk's
compute under the interleaved schedule (Megatron-Core ``overlap_p2p_comm``)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from symcost import predict_training
from symcost.cli import app
from symcost import symbols as S
from symcost.training import BREAKDOWN, pp_p2p_exposed

H100 = "h100-sxm5-80gb"          # 8 GPUs per node, one 400 Gb/s NIC per GPU
# Llama-3-8B (hidden 4096) on two nodes: TP2 x PP2 x DP4, so the pipeline crosses the network
BASE = dict(num_gpus=16, tp=2, pp=2, global_batch=32, micro_batch=1, seq_len=4096, sp=True)


def run(**kw):
    return predict_training("llama-3-8b", H100, **{**BASE, **kw})


def test_1f1b_blocks_on_every_send_by_hand():
    """m = 32/4 = 8 micro-batches, each sending its 4,096 x 4,096 activations at 2 bytes split
    over TP2 (16,777,216 bytes) forward and the gradients backward, on the GPU's 50 GB/s NIC
    share (``t*c*d*p = 16`` GPUs exceed one node's 8) plus the 4 us network latency."""
    r = run()
    x = r.inputs
    assert x["inter_bw"] * x["eff_inter"] == pytest.approx(50e9 * x["eff_inter"])
    send = 4096 * 4096 * 2 / 2 / (x["inter_bw"] * x["eff_inter"]) + x["inter_lat"]
    assert r.breakdown["pp_p2p"] == pytest.approx(8 * 2 * send, rel=1e-12)
    assert r.breakdown["pp_p2p"] > 0


def test_interleaved_schedule_hides_the_sends_behind_its_chunks():
    """With two chunks per stage each send (0.34 ms) is shorter than a chunk's forward
    (about 18 ms): nothing is exposed, and only the p2p and bubble terms change."""
    one, two = run(), run(vpp=2)
    assert two.breakdown["pp_p2p"] == 0.0
    for k in BREAKDOWN:
        if k not in ("time_pp_p2p", "time_pp_bubble"):
            assert two.values[k] == pytest.approx(one.values[k], rel=1e-12), k


def test_interleaved_exposes_what_exceeds_a_chunk_by_hand():
    """The function itself: a send longer than a chunk's forward exposes the difference, once
    per chunk and pass; a backward chunk long enough hides its send entirely."""
    x = run(vpp=4).inputs
    bind = {S.lookup(k): v for k, v in x.items()}
    send = 4096 * 4096 * 2 / 2 / (x["inter_bw"] * x["eff_inter"]) + x["inter_lat"]
    t_f, t_b = 4 * 0.5 * send, 4 * 3.0 * send       # forward chunk = send/2, backward = 3*send
    got = float(pp_p2p_exposed(t_f, t_b).xreplace(bind))
    assert got == pytest.approx(4 * (send - send / 2), rel=1e-12)
    x1 = {**x, "vpp": 1.0}
    got1 = float(pp_p2p_exposed(t_f, t_b).xreplace({S.lookup(k): v for k, v in x1.items()}))
    assert got1 == pytest.approx(2 * send, rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(v=st.sampled_from([2, 3, 4, 8]), f=st.floats(0, 5), b=st.floats(0, 10))
def test_overlap_never_exposes_more_than_blocking(v, f, b):
    """For any chunk compute (in units of one send), the interleaved schedule exposes between
    0 and the ``2*v`` blocking sends, and all of them only when the chunks take no time."""
    x = run(vpp=v).inputs
    bind = {S.lookup(k): val for k, val in x.items()}
    send = 4096 * 4096 * 2 / 2 / (x["inter_bw"] * x["eff_inter"]) + x["inter_lat"]
    got = float(pp_p2p_exposed(v * f * send, v * b * send).xreplace(bind))
    assert -1e-15 <= got <= 2 * v * send * (1 + 1e-12)
    if f == 0 and b == 0:
        assert got == pytest.approx(2 * v * send, rel=1e-12)


def test_one_node_pipeline_uses_nvlink():
    """TP2 x PP2 x DP2 on 8 GPUs: the sends go over NVLink."""
    r = run(num_gpus=8, global_batch=16)
    x = r.inputs
    send = 4096 * 4096 * 2 / 2 / (x["intra_bw"] * x["eff_intra"]) + x["intra_lat"]
    assert r.breakdown["pp_p2p"] == pytest.approx(8 * 2 * send, rel=1e-12)


def test_without_pp_overlap_the_interleaved_schedule_blocks_by_hand():
    """``pp_overlap`` off (Megatron-LM ``--no-overlap-p2p-communication``): VPP 2 blocks on all
    ``2*v`` sends of each of the 8 micro-batches; with VPP 1 the field changes nothing."""
    r = run(vpp=2, pp_overlap=False)
    x = r.inputs
    send = 4096 * 4096 * 2 / 2 / (x["inter_bw"] * x["eff_inter"]) + x["inter_lat"]
    assert r.breakdown["pp_p2p"] == pytest.approx(8 * 2 * 2 * send, rel=1e-12)
    assert run(vpp=1, pp_overlap=False).values == run(vpp=1).values


def test_cli_no_pp_overlap_matches_the_api():
    """``symcost train --vpp 2 --no-pp-overlap --json``: the exposed sends of the API call."""
    args = ["train", "--model", "llama-3-8b", "--hardware", H100, "--num-gpus", "16",
            "--tp", "2", "--pp", "2", "--vpp", "2", "--sp", "--global-batch", "32",
            "--seq-len", "4096", "--json"]
    runner = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})
    on, off = (runner.invoke(app, args + extra) for extra in ([], ["--no-pp-overlap"]))
    assert on.exit_code == 0 and off.exit_code == 0, off.output
    on_d, off_d = json.loads(on.stdout), json.loads(off.stdout)
    assert on_d["time_pp_p2p_s"] == 0.0 and on_d["config"]["pp_overlap"] is True
    assert off_d["config"]["pp_overlap"] is False
    assert off_d["time_pp_p2p_s"] == pytest.approx(
        run(vpp=2, pp_overlap=False).breakdown["pp_p2p"], rel=1e-9)
