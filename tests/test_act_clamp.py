"""gpt-oss's clamped activation (``ModelSpec.act_clamp``): Megatron-Core clamps the gate and
linear halves and concatenates them outside its fused activation kernel
(``fusions/fused_bias_geglu.py``, ``weighted_bias_quick_geglu_impl``), 8 more element reads
and writes per output element. Checked: the operator's bytes by hand, the preset and
``config.json`` flag, the validation rows' model, and the step's forward time by hand.
"""

from __future__ import annotations

import dataclasses

import pytest
import sympy as sp

from hwspecs import load_hardware
from symcost import symbols as S
from symcost.api import predict_training
from symcost.models import from_hf_config, get_model
from symcost.ops import elementwise as ew
from symcost.params import load_params
from symcost.validate import load_measurements, prepare_rows

GPT_OSS_CFG = {"model_type": "gpt_oss", "hidden_size": 2880, "num_hidden_layers": 36,
               "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64,
               "intermediate_size": 2880, "num_local_experts": 128, "num_experts_per_tok": 4,
               "vocab_size": 201088, "max_position_embeddings": 131072,
               "rms_norm_eps": 1e-5, "rope_theta": 150000, "hidden_act": "silu",
               "attention_bias": True, "swiglu_limit": 7.0}


@pytest.mark.parametrize("gated, clamp, per_element", [(1, 1, 11), (1, 0, 3), (0, 1, 2),
                                                       (0, 0, 2)])
def test_activation_bytes_by_hand(gated: int, clamp: int, per_element: int) -> None:
    """Gated: read 2f, write f; the clamps read and write f each, the concatenation reads and
    writes 2f: 3f + 8f. A two-matrix MLP has nothing to clamp."""
    c = ew.activation(sp.Integer(1000), sp.Integer(gated), sp.Integer(clamp))
    assert float(c.bytes.subs(S.BYTES_ACT, 2)) == 1000 * per_element * 2


def test_presets_and_config_json_carry_the_clamp() -> None:
    assert get_model("gpt-oss-120b").act_clamp and get_model("gpt-oss-20b").act_clamp
    assert not get_model("llama-3-8b").act_clamp and not get_model("deepseek-v3").act_clamp
    assert from_hf_config(GPT_OSS_CFG, name="oss").act_clamp
    plain = {k: v for k, v in GPT_OSS_CFG.items() if k != "swiglu_limit"}
    assert not from_hf_config(plain, name="oss").act_clamp


def test_validation_rows_take_the_clamp_from_the_preset() -> None:
    """The shared file has no column for it: a gpt-oss row keeps its preset's flag."""
    prepared, _ = prepare_rows(load_measurements())
    oss = [r for r in prepared if "gpt-oss" in r.case_id]
    assert oss and all(r.model.act_clamp for r in oss)
    assert not any(r.model.act_clamp for r in prepared if "Llama" in r.case_id)


def test_forward_time_grows_by_the_clamp_traffic() -> None:
    """gpt-oss-120b on 64 GB200, EP64, micro-batch 4 x 4,096 tokens, global batch 1,280 (5
    micro-batches): each GPU's experts get 16,384 x 4 = 65,536 routed tokens per micro-batch,
    the clamp adds 8 x 65,536 x 2,880 elements x 2 bytes per layer at ``eff_hbm`` of 8 TB/s,
    36 layers x 5 micro-batches forward."""
    kw = dict(num_gpus=64, ep=64, global_batch=1280, micro_batch=4, seq_len=4096)
    m = get_model("gpt-oss-120b")
    on = predict_training(m, "gb200", **kw)
    off = predict_training(dataclasses.replace(m, act_clamp=False), "gb200", **kw)
    eff_hbm = load_params().for_generation("blackwell")["eff_hbm"]
    bw = load_hardware("gb200").hbm_bandwidth
    by_hand = 36 * 5 * 8 * 65536 * 2880 * 2 / (bw * eff_hbm)
    assert on.values["time_forward"] - off.values["time_forward"] == pytest.approx(by_hand,
                                                                                  rel=1e-9)
    assert on.step_time > off.step_time
    assert on.values["flops_model"] == off.values["flops_model"]
