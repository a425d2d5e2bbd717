"""The attention core: the unfused kernel's K/V expansion for grouped-query attention, and the
causal tiles FlashAttention executes."""

from __future__ import annotations

import pytest
import sympy as sp

from symcost import symbols as S
from symcost.ops.attention import (attention_flash, attention_flash_backward, attention_unfused,
                                   causal_fraction, flops_attention, gqa_expand)

B, SEQ, D = 2, 1024, 128          # sequences, tokens, head dimension
#: A100 80GB: 312 TFLOPS dense 16-bit, 2.436e12 exponentials/s (128 FLOP per exponential)
VALUES = {S.hbm_bw: 2e12, S.eff_hbm: 0.8, S.eff_gemm: 0.7, S.peak_flops_16: 312e12,
          S.peak_exp: 2.436e12, S.peak_flops_fp32: 19.5e12,
          S.matmul_ceiling: 1.0}  # the kernels' own arithmetic (tests/test_matmul_ceiling.py)


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


@pytest.mark.parametrize("s, tiles", [(128, 1), (256, 2), (2048, 16), (4096, 32)])
def test_causal_fraction_counts_the_tiles_on_and_below_the_diagonal(s, tiles):
    """``n`` tiles of 128 per side: the ``n(n+1)/2`` on or below the diagonal run (counted
    here one by one), the others are skipped."""
    ran = sum(1 for i in range(tiles) for j in range(tiles) if j <= i)
    assert float(causal_fraction(sp.Integer(s))) == pytest.approx(ran / tiles**2, rel=1e-15)
    assert float(causal_fraction(sp.Integer(100))) == 1.0      # one partial tile: all of it


def test_flash_time_is_the_executed_tiles_at_eff_attn():
    """Compute-bound FlashAttention at 2,048 tokens: forward ``4*b*s^2*a*d*(1/2 + 64/s)`` FLOP
    at ``eff_attn`` of peak, backward 2.5x that."""
    vals = {**VALUES, S.eff_attn: 0.5}
    s, heads = 2048, 16
    fwd = attention_flash(B, s, heads, heads, D, S.peak_flops_16)
    executed = 4 * B * s**2 * heads * D * (0.5 + 64 / s)
    assert float(fwd.time.xreplace(vals)) == pytest.approx(executed / (312e12 * 0.5), rel=1e-12)
    bwd = attention_flash_backward(B, s, heads, heads, D, S.peak_flops_16)
    assert float(bwd.time.xreplace(vals)) == pytest.approx(2.5 * executed / (312e12 * 0.5),
                                                           rel=1e-12)
    assert float(fwd.flops) == 4 * B * s**2 * heads * D      # the FLOP convention: full matrix
