"""The rule table is the only place a validity rule is written: its three uses agree.

For random small models, GPU counts and batches, every point of a grid of layouts is judged
three ways and the verdicts must be identical:

1. :func:`symcost.config.resolve` on the one configuration (the scalar error, its field);
2. :func:`symcost.sweep.sweep`'s mask and reason for that row (the rules compiled in JAX);
3. membership of the layout in :func:`optimizers.space.enumerate_space` (rules applied
   stage by stage on NumPy columns).

Plus unit checks of the table itself: each rule's scalar message names its field, and the
rule objects the three uses hold are the same objects.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hwspecs import load_hardware
from optimizers import space as SPACE
from symcost import rules as R
from symcost import sweep as SW
from symcost.config import ConfigError, TrainingConfig, resolve
from symcost.fields import TRAINING_FIELDS, coerce
from symcost.models import get_model

GRID = {"tp": [1, 2, 3, 4, 6, 8], "cp": [1, 2], "pp": [1, 2, 3, 4], "ep": [1, 2, 4],
        "micro_batch": [1, 2, 3, 4], "vpp": [1, 2, 3], "zero": [0, 1, 2, 3]}


@st.composite
def problems(draw):
    heads = draw(st.sampled_from([4, 6, 8, 12]))
    kv = draw(st.sampled_from([d for d in (1, 2, 3, 4, 6, 8, 12) if heads % d == 0]))
    hidden = heads * draw(st.sampled_from([32, 64]))
    ffn = draw(st.sampled_from([2 * hidden, 3 * hidden, 4 * hidden + 8]))
    layers = draw(st.sampled_from([2, 3, 4, 6, 8]))
    n = draw(st.sampled_from([1, 2, 4, 6, 8, 12, 16, 24]))
    B = draw(st.sampled_from([2, 4, 6, 8, 12, 16, 24, 48]))
    hw = draw(st.sampled_from(["a100-sxm4-40gb", "h100-sxm5-80gb"]))
    experts = draw(st.sampled_from([0, 4, 6]))
    moe = dict(experts=experts, top_k=2, moe_ffn_hidden=hidden) if experts else {}
    model = get_model("gpt-1.7b").replace(name="tiny", layers=layers, hidden=hidden,
                                          heads=heads, kv_heads=kv, ffn_hidden=ffn,
                                          vocab=4096, seq_len=512, max_seq_len=2048, **moe)
    return model, n, B, hw


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(problems())
def test_resolve_sweep_and_space_agree(problem):
    model, n, B, hw_id = problem
    hw = load_hardware(hw_id)
    base = TrainingConfig(num_gpus=n, global_batch=B, recompute="none", sp=False)
    df = SW.sweep(model, hw, base, vary=GRID, precision="float64", chunk_size=4096)
    space = SPACE.enumerate_space(model, hw, n, B, keep_duplicates=True)
    members = set(zip(*(space.columns[k].tolist() for k in ("tp", "cp", "pp", "ep",
                                                              "micro_batch", "vpp", "zero",
                                                              "recompute", "sp",
                                                              "dp_overlap"))))
    memory = R.MEMORY_FITS.text
    for row in df.to_dict("records"):
        cfg = base.replace(**{k: int(row[k]) for k in GRID})
        try:
            resolve(model, hw, cfg)
            field = None
        except ConfigError as exc:
            field = str(exc).split(":")[0]
        rule_ok = row["valid"] or row["reason"] == memory
        assert rule_ok == (field is None), (row, field)
        if field is not None:
            assert row["reason"].split(":")[0] == field, (row, field)
        key = (int(row["tp"]), int(row["cp"]), int(row["pp"]), int(row["ep"]),
               int(row["micro_batch"]), int(row["vpp"]), int(row["zero"]), 0, 0, 1)
        assert (key in members) == rule_ok, (row, field)


def test_the_three_uses_hold_the_same_rule_objects():
    assert SW.SWEEP_RULES[:len(R.TRAINING_RULES)] == R.TRAINING_RULES
    assert all(a is b for a, b in zip(SW.SWEEP_RULES, R.TRAINING_RULES))
    staged = [r for rules in SPACE._table_rules_by_stage().values() for r in rules]
    assert all(any(r is t for t in R.TRAINING_RULES) for r in staged)
    # every rule reading a search column is applied at some stage
    columns = set(SPACE.FIELDS)
    assert {r.code for r in R.TRAINING_RULES if set(r.reads) & columns} == {
        r.code for r in staged}


def test_scalar_and_array_verdicts_agree_on_random_values():
    rng = np.random.default_rng(0)
    n = 2000
    v = {
        "num_gpus": rng.integers(1, 65, n).astype(float), "tp": rng.choice([1, 2, 3, 4, 8], n),
        "pp": rng.choice([1, 2, 3, 4], n), "micro_batch": rng.integers(1, 5, n).astype(float),
        "vpp": rng.choice([1, 2, 3], n), "zero": rng.integers(0, 4, n).astype(float),
        "global_batch": rng.integers(1, 65, n).astype(float), "layers": 12.0,
        "heads": 12.0, "kv_heads": 4.0, "hidden": 768.0, "ffn_hidden": 3072.0,
        "seq_len": rng.choice([1024, 4096], n), "max_seq_len": 2048.0,
        "learned_pos": rng.integers(0, 2, n).astype(float),
        "dtype": rng.integers(0, 5, n).astype(float), "hw_bf16": 1.0, "hw_fp16": 1.0,
        "hw_fp8": rng.integers(0, 2, n).astype(float), "hw_fp4": 0.0,
        "hw_mx": rng.integers(0, 2, n).astype(float),
        "global_batch_given": rng.integers(0, 2, n).astype(float),
        "cp": rng.choice([1, 2, 3], n), "ep": rng.choice([1, 2, 4], n),
        "experts": rng.choice([0.0, 8.0], n), "sp": rng.integers(0, 2, n).astype(float),
        "top_k": rng.choice([1.0, 2.0], n), "moe_imbalance": rng.choice([1.0, 1.5, 3.0, 5.0], n),
        "etp": rng.choice([1, 2, 3], n), "moe_ffn_hidden": rng.choice([0.0, 4.0, 6.0], n),
        "flash_attention": rng.integers(0, 2, n).astype(float),
        "dp_replicate": rng.choice([1, 2], n),
        "offload": rng.integers(0, 3, n).astype(float),
        "intra_node_link": rng.integers(0, 4, n).astype(float),
        "hw_bridge": rng.integers(0, 2, n).astype(float),
        "tp_overlap": rng.integers(0, 2, n).astype(float), "hw_node": rng.choice([4.0, 8.0], n),
        "recompute": rng.integers(0, 3, n).astype(float),
        "recompute_modules": rng.choice([1.0, 2.0, 3.0, 10.0], n),
        "train_framework": rng.integers(0, 2, n).astype(float),
    }
    v["dp"] = v["num_gpus"] / (v["tp"] * v["cp"] * v["pp"])
    codes = R.first_broken(R.TRAINING_RULES, v, np, (n,))
    for i in range(n):
        one = {k: (x[i] if np.ndim(x) else x) for k, x in v.items()}
        broken = R.broken(R.TRAINING_RULES, one)
        want = R.TRAINING_RULES.index(broken[0]) + 1 if broken else 0
        assert codes[i] == want


@pytest.mark.parametrize("rule", R.TRAINING_RULES + R.INFERENCE_RULES, ids=lambda r: r.code)
def test_every_rule_names_a_field(rule):
    known = set(TRAINING_FIELDS) | {"hidden", "heads", "context", "weight_dtype", "act_dtype",
                                    "kv_dtype", "model"}
    assert rule.field in known
    assert rule.text.startswith(rule.field + ": ")


def test_fields_are_checked_once_with_one_message():
    # the same bad value gets the same message from the API, the sweep and a constraint
    with pytest.raises(ConfigError) as api:
        resolve(get_model("gpt-1.7b"), load_hardware("a100-sxm4-40gb"),
                TrainingConfig(tp=1.5))
    with pytest.raises(SW.SweepError) as swp:
        SW.grid_values("tp", [1.5])
    with pytest.raises(ConfigError) as fld:
        coerce(TRAINING_FIELDS["tp"], "1.5")
    assert str(api.value) == str(fld.value).replace("'1.5'", "1.5")
    assert str(api.value) in str(swp.value)


def test_readme_documents_every_field_and_rule():
    from pathlib import Path

    from symcost.fields import INFERENCE_FIELDS

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    for name in (*TRAINING_FIELDS, *INFERENCE_FIELDS):
        assert f"`{name}`" in text, name
    for rule in R.TRAINING_RULES + R.INFERENCE_RULES + R.OUTPUT_RULES:
        assert f"`{rule.code}`" in text, rule.code
