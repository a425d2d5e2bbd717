"""``bf16_layers``: layers whose linear layers stay BF16 under fp8, MXFP8 or NVFP4
(Megatron-Core ``--first-last-layers-bf16``). Second implementation: every layer in BF16 is
the bf16 run; a share of them moves every per-layer output by exactly that share; the rule."""

from __future__ import annotations

import pytest

from symcost import predict_training
from symcost.fields import ConfigError

KW = dict(num_gpus=8, tp=1, global_batch=64, micro_batch=1)
OUTPUTS = ("step_time", "time_forward", "time_backward", "time_layer_forward",
           "time_layer_backward", "mem_activations", "mem_activations_layer", "mem_total")


@pytest.mark.parametrize("dtype", ["fp8", "mxfp8"])
def test_all_layers_in_bf16_is_the_bf16_run(dtype):
    """Llama-3-8B (32 layers) on 8 H100/B200 with every layer kept in BF16 predicts exactly what
    the bf16 run does: the logits GEMM is 16-bit in both, and nothing else is low-precision."""
    hw = "h100-sxm5-80gb" if dtype == "fp8" else "b200"
    low = predict_training("llama3-8b", hw, dtype=dtype, bf16_layers=32, **KW).values
    bf16 = predict_training("llama3-8b", hw, dtype="bf16", **KW).values
    for key in OUTPUTS:
        assert low[key] == pytest.approx(bf16[key], rel=1e-12), key


@pytest.mark.parametrize("k", [1, 8, 14])
def test_a_share_of_bf16_layers_moves_outputs_by_that_share(k):
    """``k`` of 32 layers in BF16 moves every per-layer output (and the step time and memory,
    whose other terms do not depend on it) by exactly ``k/32`` of the way to the bf16 run."""
    c = predict_training("llama3-8b", "h100-sxm5-80gb", dtype="fp8", **KW).values
    a = predict_training("llama3-8b", "h100-sxm5-80gb", dtype="fp8", bf16_layers=32,
                         **KW).values
    d = predict_training("llama3-8b", "h100-sxm5-80gb", dtype="fp8", bf16_layers=k,
                         **KW).values
    for key in OUTPUTS:
        assert d[key] - c[key] == pytest.approx(k / 32 * (a[key] - c[key]), rel=1e-9), key


def test_bf16_layers_are_free_in_bf16_and_bounded_by_the_layers():
    base = predict_training("llama3-8b", "h100-sxm5-80gb", dtype="bf16", **KW).values
    same = predict_training("llama3-8b", "h100-sxm5-80gb", dtype="bf16", bf16_layers=8,
                            **KW).values
    assert same["step_time"] == base["step_time"]
    with pytest.raises(ConfigError, match="^bf16_layers: 33 exceeds the number of layers "
                                          "\\(32\\)"):
        predict_training("llama3-8b", "h100-sxm5-80gb", dtype="fp8", bf16_layers=33, **KW)
