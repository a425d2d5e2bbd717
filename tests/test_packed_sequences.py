"""Packed sequences (``doc_len``): attention per document, the GEMMs unchanged.

A sequence of ``s`` tokens holding documents of attention length ``L`` costs the attention of
``s/L`` sequences of ``L`` tokens (block-diagonal causal mask; FlashAttention varlen kernels);
checked against that second formulation symbolically, end to end, at the limits (``L = s`` is
unpacked), against the rule ``doc_len <= seq_len``, and in ``validate``'s defaults.
"""

from __future__ import annotations

import pandas as pd
import pytest
import sympy as sp

from hwspecs import load_hardware
from symcost import get_model, predict_training
from symcost import symbols as S
from symcost import training as T
from symcost.config import ConfigError, TrainingConfig, resolve
from symcost.validate import SOURCE_DEFAULTS, SQUAD_DOC_LEN, prepare_rows

#: symbols that are switches or layout; every other free symbol gets an arbitrary positive value
_FIXED = {"flash_attn": 1, "attention_backend": 0, "sliding_window": 0,
          "full_attention_step": 0, "cp": 1, "tp": 2, "n_heads": 32, "n_kv_heads": 8,
          "hidden": 4096}


def _bind(expr: sp.Expr, values: dict[str, float]) -> float:
    expr = sp.sympify(expr)
    vals = {S.lookup(k): v for k, v in {**_FIXED, **values}.items()}
    rest = sorted(expr.free_symbols - set(vals), key=str)
    vals.update({sym: 1.0 + 0.37 * i for i, sym in enumerate(rest)})
    return float(expr.xreplace(vals))


@pytest.mark.parametrize("doc_len", [128, 512, 1024])
def test_packed_attention_is_that_of_shorter_sequences(doc_len):
    """One micro-batch of 4096 tokens packed with documents of ``L`` tokens: forward and
    backward attention time and FLOP equal those of ``4096/L`` unpacked sequences of ``L``."""
    s = 4096
    packed = {"seq_len": s, "micro_batch": 1, "doc_len": doc_len}
    short = {"seq_len": doc_len, "micro_batch": s // doc_len, "doc_len": 0}
    fwd = T.attention_core_forward()
    bwd = T.layer_backward_compute()["attention"]
    for c in (fwd, bwd):
        assert _bind(c.time, packed) == pytest.approx(_bind(c.time, short), rel=1e-12)
        assert _bind(c.flops, packed) == pytest.approx(_bind(c.flops, short), rel=1e-12)
    # and cheaper than the unpacked sequence: the FLOP by the factor L/s exactly
    assert _bind(fwd.flops, packed) == pytest.approx(
        _bind(fwd.flops, {**packed, "doc_len": 0}) * doc_len / s, rel=1e-12)


def test_attention_length_limits():
    assert _bind(T.attention_length(), {"seq_len": 4096, "doc_len": 0}) == 4096
    assert _bind(T.attention_length(), {"seq_len": 4096, "doc_len": 200}) == 200
    assert _bind(T.attention_length(), {"seq_len": 4096, "doc_len": 4096}) == 4096


def test_packing_shortens_only_the_attention():
    """End to end on Llama-2-7B SFT (8 H100, fp8): a 4,096-token micro-batch packed with
    256-token documents takes exactly the step of micro-batches of 16 sequences of 256 tokens
    (same tokens through the GEMMs, same attention); doc_len = seq_len is the unpacked step;
    packing is faster; unfused attention (a full masked s x s matrix) ignores it. Model FLOPs
    count the attention within documents, as they count a sliding window's: the packed run's
    are the short-sequence run's exactly."""
    m, hw = get_model("llama2-7b"), "h100-sxm5-80gb"
    cfg = dict(num_gpus=8, global_batch=32, seq_len=4096, dtype="fp8")
    base = predict_training(m, hw, **cfg)
    packed = predict_training(m, hw, doc_len=256, **cfg)
    short = predict_training(m, hw, num_gpus=8, global_batch=32 * 16, micro_batch=16,
                             seq_len=256, dtype="fp8")
    assert packed.step_time == pytest.approx(short.step_time, rel=1e-12)
    for k, v in packed.values.items():
        if k.startswith("time_"):
            assert v == pytest.approx(short.values[k], rel=1e-12, abs=1e-15), k
    assert predict_training(m, hw, doc_len=4096, **cfg).step_time == pytest.approx(
        base.step_time, rel=1e-12)
    assert packed.step_time < 0.95 * base.step_time
    assert packed.values["flops_model"] == pytest.approx(short.values["flops_model"], rel=1e-12)
    assert packed.values["flops_hardware"] == pytest.approx(short.values["flops_hardware"],
                                                            rel=1e-12)
    B, L, s, a, d = 32, 32, 4096, 32, 128  # the attention FLOP the documents do not need
    assert base.values["flops_model"] - packed.values["flops_model"] == pytest.approx(
        3 * B * L * 4 * s * (s - 256) * a * d, rel=1e-9)
    off = dict(cfg, flash_attention=False, global_batch=8, micro_batch=1)
    assert predict_training(m, hw, doc_len=160, **off).step_time == pytest.approx(
        predict_training(m, hw, **off).step_time, rel=1e-12)


def test_doc_len_longer_than_the_sequence_is_an_error():
    m, hw = get_model("llama2-7b"), load_hardware("h100-sxm5-80gb")
    with pytest.raises(ConfigError, match=r"^doc_len: 5000 exceeds seq_len \(4096\)"):
        resolve(m, hw, TrainingConfig(num_gpus=8, global_batch=8, seq_len=4096, doc_len=5000))
    with pytest.raises(ConfigError, match="^doc_len: "):
        resolve(m, hw, TrainingConfig(num_gpus=8, global_batch=8, doc_len=-1))


ROW = dict(case_id="MBRIDGE-sft", workload="train", model="Llama-3-70B", seq_len=4096,
           global_batch=32, micro_batch=1, hardware="h100-sxm5-80gb", n_gpus=32, tp=4, pp=4,
           dtype="fp8", metric="tokens_per_s_per_gpu", value=1000,
           notes="fine-tuning method=SFT; container=NeMo 26.06")


def _prepare(rows: list[dict]):
    cols = sorted({c for r in rows for c in r})
    df = pd.DataFrame([{c: r.get(c, "") for c in cols} for r in rows])
    prepared, skipped = prepare_rows(df)
    assert not skipped, skipped
    return {r.case_id: r for r in prepared}


def test_validate_packs_the_fine_tuning_rows_of_a_packing_source():
    """MBRIDGE's SFT and LoRA rows take its finetune_doc_len (recorded as assumed), as does
    any row whose notes say SQuAD packed; MBRIDGE's pretraining rows, another source's
    unpacked fine-tuning rows and a stated doc_len do not."""
    doc = SOURCE_DEFAULTS["MBRIDGE"]["finetune_doc_len"]
    got = _prepare([ROW,
                    {**ROW, "case_id": "MBRIDGE-lora", "notes": "fine-tuning method=LoRA"},
                    {**ROW, "case_id": "MBRIDGE-pre", "notes": "container=NeMo 26.06"},
                    {**ROW, "case_id": "MBRIDGE-stated", "doc_len": 512},
                    {**ROW, "case_id": "ZHANG23-qlora", "finetune": "qlora",
                     "model": "Llama-2-7B", "n_gpus": 8, "tp": 1, "pp": 1, "global_batch": 8,
                     "dtype": "bf16", "notes": ""},
                    # another source's row whose notes say SQuAD packed (NeMo's tables)
                    {**ROW, "case_id": "NEMO2407-sft", "notes": "SQuAD packed to 4096"},
                    {**ROW, "case_id": "NEMO2407-pre", "notes": "container=NeMo 24.07"}])
    sft, lora, pre = got["MBRIDGE-sft"], got["MBRIDGE-lora"], got["MBRIDGE-pre"]
    assert sft.config.doc_len == doc and "doc_len" in sft.defaults
    assert lora.config.doc_len == doc
    assert pre.config.doc_len == 0 and "doc_len" not in pre.defaults
    stated = got["MBRIDGE-stated"]
    assert stated.config.doc_len == 512 and "doc_len" not in stated.defaults
    assert got["ZHANG23-qlora"].config.doc_len == 0
    assert got["NEMO2407-sft"].config.doc_len == SQUAD_DOC_LEN == doc
    assert "SQuAD packed" in got["NEMO2407-sft"].defaults["doc_len"]
    assert got["NEMO2407-pre"].config.doc_len == 0
