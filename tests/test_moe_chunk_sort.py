"""The ``alltoall`` dispatcher's chunk sorts (:func:`symcost.training.moe_chunk_sort`): with
more than one local expert, the token rows an all-to-all delivered are regrouped by local
expert after the dispatch and back before the combine, forward and backward; the ``flex``
dispatcher (``ep_dedup``) and one expert per GPU skip them. Inside one node ``ep_dedup``
changes no communication, so the difference between the two is the sorts alone, checked
against the bytes by hand."""

from __future__ import annotations

import pytest

from symcost import predict_training

#: Qwen3-30B-A3B on 8 GB200 as Megatron-Bridge runs it: EP8, 16 of 128 experts per GPU
QWEN = dict(num_gpus=8, ep=8, micro_batch=4, global_batch=512, seq_len=4096, dtype="mxfp8",
            zero=1)


def _sort_time(inputs: dict[str, float], micro_batches: int, layers: int, tokens: int,
               top_k: int, hidden: int) -> float:
    """Two regroupings per MoE layer pass, each reading and writing the ``tokens*top_k``
    routed rows of ``hidden`` 16-bit elements, at ``eff_hbm`` of the HBM bandwidth."""
    nbytes = 2 * (2 * 2 * tokens * top_k * hidden)
    return micro_batches * layers * nbytes / (inputs["hbm_bw"] * inputs["eff_hbm"])


def test_qwen3_sorts_cost_their_bytes_forward_and_backward():
    """16 micro-batches x 48 MoE layers x 2 sorts x 2 x 2 bytes x (16,384 tokens x 8 copies)
    x 2,048 elements over the achieved HBM bandwidth, once forward and once backward; the
    all-to-all inside the node is the same either way."""
    alltoall = predict_training("qwen3-30b-a3b", "gb200", **QWEN)
    flex = predict_training("qwen3-30b-a3b", "gb200", ep_dedup=True, **QWEN)
    want = _sort_time(alltoall.inputs, 16, 48, 4 * 4096, 8, 2048)
    assert want > 0
    v0, v1 = alltoall.values, flex.values
    assert v0["time_forward"] - v1["time_forward"] == pytest.approx(want, rel=1e-9)
    assert v0["time_backward"] - v1["time_backward"] == pytest.approx(want, rel=1e-9)
    assert v0["time_ep_comm"] == v1["time_ep_comm"]
    assert alltoall.step_time - flex.step_time == pytest.approx(2 * want, rel=1e-9)


def test_one_expert_per_gpu_has_nothing_to_sort():
    """Mixtral-8x7B's 8 experts on 8 H100 at EP8: one expert per GPU, no sort, the two
    dispatchers agree; at EP4 (two per GPU, top-2, hidden 4,096) they differ by the sorts."""
    kw = dict(num_gpus=8, micro_batch=1, global_batch=8, seq_len=4096, dtype="fp8", zero=1)
    a = predict_training("mixtral-8x7b", "h100-sxm5-80gb", ep=8, **kw)
    b = predict_training("mixtral-8x7b", "h100-sxm5-80gb", ep=8, ep_dedup=True, **kw)
    assert a.step_time == b.step_time
    a4 = predict_training("mixtral-8x7b", "h100-sxm5-80gb", ep=4, **kw)
    b4 = predict_training("mixtral-8x7b", "h100-sxm5-80gb", ep=4, ep_dedup=True, **kw)
    want = _sort_time(a4.inputs, 1, 32, 4096, 2, 4096)
    assert (a4.values["time_forward"] - b4.values["time_forward"]
            == pytest.approx(want, rel=1e-9))


def test_dense_model_is_unchanged():
    """No MoE layer, no dispatcher: the flag moves nothing."""
    kw = dict(num_gpus=8, tp=8, sp=True, micro_batch=1, global_batch=8, seq_len=4096)
    a = predict_training("llama-3-70b", "h100-sxm5-80gb", **kw)
    b = predict_training("llama-3-70b", "h100-sxm5-80gb", ep_dedup=True, **kw)
    assert a.step_time == b.step_time
