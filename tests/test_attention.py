"""The attention core: the unfused kernel's K/V expansion for grouped-query attention."""

from __future__ import annotations

import pytest
import sympy as sp

from symcost import symbols as S
from symcost.ops.attention import attention_unfused, flops_attention, gqa_expand

B, SEQ, D = 2, 1024, 128          # sequences, tokens, head dimension
VALUES = {S.hbm_bw: 2e12, S.eff_hbm: 0.8, S.eff_gemm: 0.7, S.peak_flops_16: 312e12}


def _num(e) -> float:
    return float(sp.sympify(e).xreplace(VALUES))


def _unfused(heads, kv_heads):
    return attention_unfused(B, SEQ, heads, kv_heads, D, S.peak_flops_16, 0)


def test_multi_head_attention_has_no_expansion():
    c = gqa_expand(B, SEQ, 16, 16, D)
    assert _num(c.bytes) == 0 and _num(c.time) == 0 and _num(c.flops) == 0


def test_gqa_expansion_bytes_by_hand():
    # 8 query heads share 2 KV heads: read K and V of 2 heads, write K and V of 8 heads
    c = gqa_expand(B, SEQ, 8, 2, D)
    expected = 2 * B * SEQ * D * (2 * 2 + 2 * 8)          # bytes at 2 bytes per element
    assert _num(c.bytes) == expected
    assert _num(c.time) == pytest.approx(expected / (2e12 * 0.8), rel=1e-15)


def test_unfused_gqa_adds_only_the_copy():
    """Same FLOPs whatever the KV heads (the GEMMs run over every query head); the bytes
    differ by exactly the expansion copy."""
    mha, gqa = _unfused(8, 8), _unfused(8, 2)
    assert _num(gqa.flops) == _num(mha.flops)
    assert _num(mha.flops) == _num(flops_attention(B, SEQ, 8, D)) + 5 * B * 8 * SEQ**2
    assert _num(gqa.bytes) - _num(mha.bytes) == 2 * B * SEQ * D * 2 * (2 + 8)
    assert _num(gqa.time) > _num(mha.time)
