"""Tests of the configuration space, the exhaustive and SciPy searches, and ``symcost search``."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from optimizers.evaluate import (base_inputs, candidate_inputs, evaluate_chunked,
                                 evaluate_float64)
from optimizers.published import published_configs, published_ranking
from optimizers.search import rank_of, search, search_scipy
from optimizers.space import (FIELDS, RECOMPUTE_NAMES, SearchError, enumerate_space,
                              make_constraints, shared_settings, violations)
from symcost import ConfigError, get_model, predict_training
from symcost.config import TrainingConfig, resolve, search_settings
from symcost.fields import (SEARCH_ARGUMENTS, SEARCH_COLUMNS, SEARCH_SHARED_FIELDS,
                            TRAINING_FIELDS)
from symcost.models import ModelSpec

HW = "a100-sxm4-80gb"
RUNNER = CliRunner(env={"SYMCOST_CACHE_DIR": "off"})


@pytest.fixture(scope="module", autouse=True)
def _private_cache(tmp_path_factory):
    """Library calls in this module cache into a temporary directory, not ~/.cache."""
    mp = pytest.MonkeyPatch()
    mp.setenv("SYMCOST_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    yield
    mp.undo()


def small_model(layers=8, hidden=512, heads=8, kv_heads=8, ffn=2048, vocab=4096, seq=512,
                name="tiny") -> ModelSpec:
    return get_model("gpt-1.7b").replace(name=name, layers=layers, hidden=hidden, heads=heads,
                                         kv_heads=kv_heads, ffn_hidden=ffn, vocab=vocab,
                                         seq_len=seq, max_seq_len=max(seq, 2048))


def as_set(space) -> set[tuple]:
    return set(zip(*(space.columns[k].tolist() for k in FIELDS)))


# ----------------------------------------------------------------------------- space
def brute_force_space(model, hw, n, B, flash=True, **shared) -> set[tuple]:
    """Second implementation: Python loops over raw ranges, every candidate carrying the
    ``shared`` settings, validated by config.resolve, with the duplicate rules applied by
    hand."""
    from hwspecs import load_hardware

    hwspec = load_hardware(hw)
    out = set()
    for tp, cp, pp in itertools.product(range(1, n + 1), repeat=3):
        if n % (tp * cp * pp):
            continue
        dp = n // (tp * cp * pp)
        for ep, mb, vpp in itertools.product(range(1, n + 1), range(1, B + 1),
                                             range(1, model.layers + 3)):
            for rc, sp_, z, ov, tov in itertools.product(RECOMPUTE_NAMES, (0, 1), range(4),
                                                         (0, 1), (0, 1)):
                cfg = TrainingConfig(num_gpus=n, tp=tp, cp=cp, pp=pp, ep=ep, sp=bool(sp_),
                                     vpp=vpp, micro_batch=mb, global_batch=B, recompute=rc,
                                     zero=z, flash_attention=flash, dp_overlap=bool(ov),
                                     tp_overlap=bool(tov), **shared)
                try:
                    resolve(model, hwspec, cfg)
                except ConfigError:
                    continue
                if (sp_ and tp == 1) or (z and dp * cp == 1) or (not ov and dp * cp == 1) or \
                        (flash and rc == "selective") or (tov and tp == 1):
                    continue
                out.add((n, tp, cp, pp, dp, ep, mb, vpp, RECOMPUTE_NAMES.index(rc), sp_, z, ov,
                         tov))
    return out


@pytest.mark.parametrize("n,B,flash,experts", [(4, 4, True, 0), (4, 4, True, 4),
                                               (6, 3, False, 0)])
def test_space_equals_brute_force(n, B, flash, experts):
    model = small_model(layers=6, heads=6, kv_heads=2, hidden=384, ffn=1536)
    if experts:
        model = model.replace(experts=experts, top_k=2, moe_ffn_hidden=384)
    space = enumerate_space(model, HW, n, B, flash_attention=flash)
    assert as_set(space) == brute_force_space(model, HW, n, B, flash)
    assert len(as_set(space)) == len(space)           # no duplicate rows


def test_rejection_log_is_consistent():
    space = enumerate_space("gpt3-175b", HW, 4096, 2048)
    rej = space.rejected
    assert rej["remaining"].iloc[-1] == len(space)
    for _, g in rej.groupby("stage", sort=False):
        rem = g["remaining"].to_numpy()
        removed = g["removed"].to_numpy()
        assert np.all(rem[1:] == rem[:-1] - removed[1:])
    # GPT-3 on 4096 GPUs: tp in {1, 2, 4, 8, 16, 32} (power-of-two divisors of 96 and 4096)
    assert sorted(set(space.columns["tp"].tolist())) == [1, 2, 4, 8, 16, 32]
    assert not ((space.columns["zero"] >= 2) & (space.columns["pp"] > 1)).any()


def test_duplicates_are_indistinguishable():
    """The configurations dropped as duplicates give the same model outputs as a kept one."""
    m = "gpt-1.7b"
    base = dict(num_gpus=8, global_batch=64, micro_batch=2)
    pairs = [
        (dict(tp=1, pp=2, sp=True), dict(tp=1, pp=2, sp=False)),
        (dict(tp=8, dp_overlap=False), dict(tp=8, dp_overlap=True)),
        (dict(tp=8, zero=1), dict(tp=8, zero=0)),
    ]
    for dup, kept in pairs:
        a = predict_training(m, HW, **base, **dup)
        b = predict_training(m, HW, **base, **kept)
        assert a.step_time == pytest.approx(b.step_time, rel=1e-12)
        assert a.values["mem_total"] == pytest.approx(b.values["mem_total"], rel=1e-12)


def test_selective_core_attn_with_flash_attention_is_dominated():
    """Pruned as dominated, not as a duplicate: with FlashAttention, selective recomputation
    of the attention core re-runs the fused forward (slower by exactly that time) and drops
    only the fp32 log-sum-exp, ``4*a*s*b/t`` bytes per layer and micro-batch in flight."""
    m = "gpt-1.7b"   # 24 layers, 24 heads, seq 2048
    base = dict(num_gpus=2, global_batch=64, micro_batch=2, tp=2)  # no DP, no pipeline
    sel = predict_training(m, HW, **base, recompute="selective")
    none = predict_training(m, HW, **base, recompute="none")
    assert sel.step_time - none.step_time == pytest.approx(sel.breakdown["recompute"],
                                                           rel=1e-9)
    assert sel.breakdown["recompute"] > 0
    lse = 4 * 24 * 2048 * 2 / 2 * 24   # one micro-batch in flight, 24 layers
    assert none.values["mem_total"] - sel.values["mem_total"] == pytest.approx(lse, rel=1e-9)


def test_constraints_parse_and_apply():
    c = make_constraints(["pp=8", "recompute=full"], {"dp": 4}, None, max_tp=8)
    assert c.fix == {"pp": 8, "recompute": 2} and c.minimum == {"dp": 4}
    assert c.maximum == {"tp": 8}
    space = enumerate_space("gpt3-175b", HW, 1024, 1536, constraints=c)
    cols = space.columns
    assert len(space) > 0
    assert (cols["pp"] == 8).all() and (cols["recompute"] == 2).all()
    assert (cols["tp"] <= 8).all() and (cols["dp"] >= 4).all()
    for bad in (["pp8"], ["colour=red"], ["recompute=some"], ["tp=1.5"]):
        with pytest.raises(ConfigError):
            make_constraints(bad)
    with pytest.raises(ConfigError, match="given twice"):
        make_constraints(["pp=2", "pp=4"])


def test_constraint_names_are_the_field_names():
    """One vocabulary: the names of symcost.fields.TRAINING_FIELDS, with the CLI flag's ``-``
    accepted for ``_``, and values parsed by the field table."""
    c = make_constraints(["micro-batch=2", "dp-overlap=off", "sp=on", "recompute=selective"],
                         {"num-gpus": 8}, {"zero": "3", "vpp": 4})
    assert c.fix == {"micro_batch": 2, "dp_overlap": 0, "sp": 1, "recompute": 1}
    assert c.minimum == {"num_gpus": 8} and c.maximum == {"zero": 3, "vpp": 4}
    # the former aliases are unknown names; the error lists the field names
    for alias in ("mb", "micro_batch_size", "zero_stage", "gpus", "interleave", "overlap",
                  "virtual_pipeline", "MB", "Micro_Batch"):
        with pytest.raises(ConfigError, match=r"unknown field .*known: num_gpus, tp, cp, pp, "
                                              r"dp, ep, micro_batch, vpp, recompute, sp, zero, "
                                              r"dp_overlap, tp_overlap$"):
            make_constraints([f"{alias}=2"])
    # values: the field table's words and checks, the same message as the field table gives
    for text, message in (("sp=maybe", "sp: must be on/off"),
                          ("recompute=2", "recompute: must be one of none, selective, full"),
                          ("zero=4", "zero: must be one of 0, 1, 2, 3"),
                          ("tp=0", "tp: must be a positive integer"),
                          ("tp=1.5", "tp: must be a positive integer")):
        with pytest.raises(ConfigError, match=f"^{message}"):
            make_constraints([text])
    where = rank_of(search("gpt-7.5b", HW, 32, 512, top=1), {"micro-batch": 1, "sp": "off"})
    assert where["matches"] > 0


# ----------------------------------------------------------------------------- evaluation
def test_float64_numpy_matches_compiled_model():
    space = enumerate_space("gpt-7.5b", HW, 64, 256)
    rows = np.random.default_rng(0).choice(len(space), 20, replace=False)
    cols = {k: v[rows] for k, v in space.columns.items()}
    model = get_model("gpt-7.5b")
    from hwspecs import load_hardware

    base = base_inputs(model, load_hardware(HW), "bf16", 2048, 256, True)
    f64 = evaluate_float64(candidate_inputs(base, cols))
    f32 = evaluate_chunked(candidate_inputs(base, cols), ("step_time", "mem_headroom"))
    for j, i in enumerate(rows):
        r = predict_training(model, HW, space.config(int(i)))
        assert f64["step_time"][j] == pytest.approx(r.step_time, rel=1e-12)
        assert f64["mem_total"][j] == pytest.approx(r.values["mem_total"], rel=1e-12)
        assert f32["step_time"][j] == pytest.approx(r.step_time, rel=1e-5)


# ----------------------------------------------------------------------------- search
def test_search_best_beats_candidates_one_at_a_time():
    res = search("gpt-18.4b", HW, 256, 1024, top=5)
    best = predict_training("gpt-18.4b", HW, res.best)
    assert best.fits
    assert best.step_time == pytest.approx(res.table["step_time"].iloc[0], rel=1e-12)
    space = res.extra["space"]
    rng = np.random.default_rng(1)
    for i in rng.choice(len(space), 40, replace=False):
        r = predict_training("gpt-18.4b", HW, space.config(int(i)))
        if r.fits:
            assert r.step_time >= best.step_time * (1 - 1e-9)
    # table is sorted and the breakdown sums to the step time
    st_ = res.table["step_time"].to_numpy()
    assert np.all(np.diff(st_) >= 0)
    bd = res.table[[c for c in res.table.columns if c.startswith("time_")]].sum(axis=1)
    assert np.allclose(bd, st_, rtol=1e-12)
    # why: runner-up minus best
    w = res.why.set_index("term")
    assert w.loc["time_pp_bubble", "difference"] == pytest.approx(
        res.table["time_pp_bubble"].iloc[1] - res.table["time_pp_bubble"].iloc[0])
    assert "runner-up" in res.explain()


def test_rank_of_and_objectives():
    res = search("gpt-7.5b", HW, [32, 64], 512, price_per_gpu_hour=2.0, top=3)
    assert res.objective == "tokens_per_dollar"
    t = res.table
    assert np.all(np.diff(t["tokens_per_usd"].to_numpy()) <= 1e-9)
    assert t["usd_per_step"].iloc[0] == pytest.approx(
        t["step_time"].iloc[0] * t["num_gpus"].iloc[0] * 2.0 / 3600)
    b = res.best
    where = rank_of(res, {"num_gpus": b.num_gpus, "tp": b.tp, "cp": b.cp, "pp": b.pp,
                          "ep": b.ep,
                          "micro_batch": b.micro_batch, "vpp": b.vpp,
                          "recompute": b.recompute, "sp": int(b.sp), "zero": b.zero,
                          "dp_overlap": int(b.dp_overlap), "tp_overlap": int(b.tp_overlap)})
    assert where["rank"] == 1 and where["matches"] == 1
    fast = search("gpt-7.5b", HW, [32, 64], 512, objective="step_time", top=1)
    assert fast.table["num_gpus"].iloc[0] == 64
    with pytest.raises(ConfigError, match="price"):
        search("gpt-7.5b", HW, 32, 512, objective="tokens_per_dollar")
    with pytest.raises(ConfigError, match="objective"):
        search("gpt-7.5b", HW, 32, 512, objective="fastest")


@st.composite
def small_problem(draw):
    heads = draw(st.sampled_from([4, 6, 8, 12]))
    kv = draw(st.sampled_from([k for k in (1, 2, heads) if heads % k == 0]))
    hidden = heads * draw(st.sampled_from([64, 128]))
    layers = draw(st.integers(2, 12))
    n = draw(st.sampled_from([1, 2, 4, 6, 8, 12, 16]))
    B = n * draw(st.sampled_from([1, 2, 3, 4]))
    hw = draw(st.sampled_from(["a100-sxm4-40gb", "h100-sxm5-80gb"]))
    return small_model(layers, hidden, heads, kv, 4 * hidden, 2048, 512), n, B, hw


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problem())
def test_every_returned_configuration_is_valid_and_fits(problem):
    model, n, B, hw = problem
    res = search(model, hw, n, B, top=5)
    from hwspecs import load_hardware

    for i in range(len(res.table)):
        cfg = res.config(i)
        resolve(model, load_hardware(hw), cfg)            # raises when invalid
        assert predict_training(model, hw, cfg).fits
    space = res.extra["space"]
    assert (violations(space.columns, space.context) == 0).all()


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(small_problem(), st.integers(0, 3))
def test_scipy_search_agrees_with_exhaustive(problem, seed):
    model, n, B, hw = problem
    ex = search(model, hw, n, B, top=3)
    de = search_scipy(model, hw, n, B, top=3, seed=seed, popsize=10, maxiter=30)
    assert de.table["step_time"].iloc[0] == pytest.approx(ex.table["step_time"].iloc[0],
                                                          rel=1e-12)


def test_scipy_search_on_gpt3():
    ex = search("gpt3-175b", HW, 1024, 1536, top=1, max_tp=8)
    de = search_scipy("gpt3-175b", HW, 1024, 1536, top=1, max_tp=8)
    assert de.table["step_time"].iloc[0] == pytest.approx(ex.table["step_time"].iloc[0],
                                                          rel=1e-12)
    assert de.method == "differential_evolution" and de.candidates < ex.candidates * 2


# ----------------------------------------------------------------------------- shared settings
H100 = "h100-sxm5-80gb"     # 8 GPUs per node: ep 16 spans two nodes


def tiny_moe():
    """A fine-grained MoE small enough to search on 16 H100 (two nodes)."""
    return small_model(layers=4, hidden=1024, heads=8, kv_heads=8, ffn=4096, vocab=8192,
                       seq=1024, name="tiny-moe").replace(experts=32, top_k=4,
                                                          moe_ffn_hidden=512)


def test_search_field_groups_partition_the_training_fields():
    """Columns, the search's own arguments and the shared settings: every training field in
    exactly one group, so a new field is a search setting unless it is made a column."""
    groups = (SEARCH_COLUMNS, SEARCH_ARGUMENTS, SEARCH_SHARED_FIELDS)
    assert sorted(itertools.chain(*groups)) == sorted(TRAINING_FIELDS)
    assert sum(map(len, groups)) == len(TRAINING_FIELDS)
    assert FIELDS == SEARCH_COLUMNS


def test_search_settings_are_the_shared_fields_off_their_defaults():
    """``search_settings``: only shared settings, only where they differ from the defaults
    (columns such as ``tp`` and arguments such as ``dtype`` are the search's own)."""
    cfg = TrainingConfig(tp=4, dtype="fp8", ep_dedup=True, pp_overlap=False, offload="none",
                         bf16_layers=2)
    assert search_settings(cfg) == {"ep_dedup": True, "pp_overlap": False, "bf16_layers": 2}
    assert search_settings(TrainingConfig()) == {}


@pytest.mark.parametrize("experts,shared", [
    (0, {"offload": "optimizer"}),                   # keeps ZeRO 1-3 only
    (0, {"offload": "optimizer+params"}),            # keeps ZeRO-3 only
    (4, {"etp": 2, "ep_dedup": True}),               # ep*etp divides tp*cp*dp
    (0, {"dp_replicate": 2}),                        # divides dp*cp
    (4, {"moe_imbalance": 2.0}),                     # at most min(ep, experts/top_k)
    (0, {"cp_comm_type": "a2a"}),                    # tp*cp divides heads and kv_heads
    (0, {"activation_offload_layers": 2}),           # pp 1, no recompute
])
def test_space_with_settings_equals_brute_force(experts, shared):
    """The rules read the settings with the columns: the space is exactly the set of
    configurations ``resolve`` accepts with the settings (the same rule objects)."""
    model = small_model(layers=4, heads=6, kv_heads=2, hidden=384, ffn=1536)
    if experts:
        model = model.replace(experts=experts, top_k=2, moe_ffn_hidden=384)
    space = enumerate_space(model, HW, 4, 2, **shared)
    assert as_set(space) == brute_force_space(model, HW, 4, 2, **shared)
    assert len(as_set(space)) == len(space)
    plain = enumerate_space(model, HW, 4, 2)
    assert len(space) < len(plain)                  # every case above prunes something


def test_search_prices_every_candidate_with_the_settings():
    """Each returned row is the configuration with the settings, priced in float64 exactly as
    ``predict_training`` prices it; without them the same layouts price differently (the
    all-to-all over two nodes is node-deduplicated and overlapped)."""
    m, kw = tiny_moe(), dict(top=4, fix={"ep": 16})
    res = search(m, H100, 16, 64, ep_dedup=True, ep_overlap=True, **kw)
    assert res.shared == {"ep_dedup": True, "ep_overlap": True}
    for i in range(len(res.table)):
        cfg = res.config(i)
        assert cfg.ep_dedup and cfg.ep_overlap and cfg.ep == 16
        with_ = predict_training(m, H100, cfg)
        assert res.table["step_time"].iloc[i] == pytest.approx(with_.step_time, rel=1e-9)
        without = predict_training(m, H100, cfg.replace(ep_dedup=False, ep_overlap=False))
        assert without.step_time > with_.step_time * 1.001
    plain = search(m, H100, 16, 64, **kw)
    assert plain.shared == {} and not plain.best.ep_dedup
    assert res.table["step_time"].iloc[0] < plain.table["step_time"].iloc[0]


def test_scipy_search_takes_the_settings():
    m = tiny_moe()
    ex = search(m, H100, 16, 64, top=1, ep_dedup=True, fix={"ep": 16})
    de = search_scipy(m, H100, 16, 64, top=1, ep_dedup=True, fix={"ep": 16}, popsize=8,
                      maxiter=10)
    assert de.shared == {"ep_dedup": True} and de.best.ep_dedup
    assert de.table["step_time"].iloc[0] == pytest.approx(ex.table["step_time"].iloc[0],
                                                          rel=1e-12)


@pytest.mark.parametrize("kw,message", [
    ({"tp": 2}, "tp: searched over, not a shared setting; constrain it with fix"),
    ({"bogus": 1}, "bogus: not a training field"),
    ({"ep_dedup": "maybe"}, "ep_dedup: must be"),
    ({"bf16_layers": 7}, "bf16_layers: 7 exceeds the number of layers (6)"),
    ({"offload": "disk"}, "offload: must be one of"),
])
def test_bad_settings_name_the_field(kw, message):
    with pytest.raises(ConfigError) as e:
        search(small_model(layers=6, heads=6, kv_heads=2, hidden=384, ffn=1536), HW, 4, 4,
               top=1, **kw)
    assert str(e.value).startswith(message), str(e.value)


def test_shared_settings_coerce_as_the_field_table():
    assert shared_settings({"ep_dedup": "on", "bf16_layers": "2", "offload": "optimizer",
                            "intra_node_link": None}) == {
        "ep_dedup": True, "bf16_layers": 2, "offload": "optimizer"}
    with pytest.raises(ConfigError, match="^recompute_modules: an argument of the search"):
        shared_settings({"recompute_modules": "mlp"})


def test_cli_search_options_are_the_shared_fields():
    """``symcost search --ep-dedup --ep-overlap``: the JSON names the settings by their field
    names and its best row is what ``symcost train`` gives for it with the same flags."""
    from symcost.cli import app

    args = ["search", "--model", "qwen3-30b-a3b", "--hardware", H100, "--num-gpus", "16",
            "--global-batch", "64", "--seq-len", "1024", "--top", "1", "--fix", "ep=16",
            "--fix", "pp=1", "--ep-dedup", "--ep-overlap", "--json"]
    out = RUNNER.invoke(app, args)
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert d["ep_dedup"] is True and d["ep_overlap"] is True and "bf16_layers" not in d
    best = d["top"][0]
    train = ["train", "--model", "qwen3-30b-a3b", "--hardware", H100, "--num-gpus", "16",
             "--global-batch", "64", "--seq-len", "1024", "--ep-dedup", "--ep-overlap",
             "--json"] + [a for k in ("tp", "cp", "pp", "ep", "micro_batch", "vpp",
                                      "recompute", "zero")
                          for a in (f"--{k.replace('_', '-')}", str(best[k]))]
    train += [f"--{'' if best[k] else 'no-'}{k.replace('_', '-')}"
              for k in ("sp", "dp_overlap", "tp_overlap")]
    out = RUNNER.invoke(app, train)
    assert out.exit_code == 0, out.output
    t = json.loads(out.output)
    assert t["step_time_s"] == pytest.approx(best["step_time_s"], rel=1e-9)
    out = RUNNER.invoke(app, args[:-3] + ["--bf16-layers", "99"])
    assert out.exit_code == 2
    assert out.output.strip() == "error: --bf16-layers: 99 exceeds the number of layers (48)"


# ----------------------------------------------------------------------------- bad input
def test_gpu_count_no_configuration_can_use():
    model = small_model(layers=4, heads=4, kv_heads=4, hidden=256, ffn=1024)
    with pytest.raises(SearchError) as e:
        search(model, HW, 7, 8)
    msg = str(e.value)
    assert "no valid configuration" in msg
    assert "global_batch: not divisible by micro_batch*dp" in msg
    assert "stage 'micro_batch'" in msg


def test_model_that_fits_nowhere():
    with pytest.raises(SearchError, match="fits in memory") as e:
        search("gpt3-175b", "a100-sxm4-40gb", 4, 8)
    msg = str(e.value)
    assert "memory per GPU must fit" in msg and "GiB more" in msg
    # usable HBM in GiB (2**30 B), the unit the 40GB A100 is sold in: 40 GiB - reserved
    from symcost.params import load_params

    usable = 40 * 2**30 - load_params().for_generation("ampere")["mem_reserved"]
    assert "on a100-sxm4-40gb:" in msg and f"usable HBM ({usable / 2**30:.1f} GiB)" in msg


def test_contradictory_constraints():
    with pytest.raises(SearchError, match=r"user: max tp=4"):
        search("gpt3-175b", HW, 1024, 1536, fix={"tp": 8}, max_tp=4)
    with pytest.raises(SearchError, match=r"zero: ZeRO-2/3 cannot be combined with pp > 1"):
        search("gpt3-175b", HW, 1024, 1536, fix=["pp=8", "zero=3"])
    with pytest.raises(SearchError, match=r"tp: does not divide heads"):
        search("gpt3-175b", HW, 1024, 1536, fix={"tp": 64})


def test_bad_scalar_inputs():
    with pytest.raises(ConfigError, match="num_gpus"):
        search("gpt3-175b", HW, 0, 1536)
    with pytest.raises(ConfigError, match="seq_len"):
        search("gpt3-175b", HW, 8, 8, seq_len=4096)     # learned positions stop at 2048
    with pytest.raises(ConfigError, match="dtype"):
        search("gpt3-175b", HW, 8, 8, dtype="fp8")      # A100 has no fp8


# ----------------------------------------------------------------------------- published
_CSV_COLS = ["case_id", "workload", "model", "n_params_b", "layers", "hidden", "heads",
             "kv_heads", "ffn_hidden", "seq_len", "vocab", "global_batch", "micro_batch", "gpu",
             "hardware", "n_gpus", "tp", "pp", "vpp", "dp", "cp", "sp", "recompute",
             "zero_stage", "precision", "dtype", "input_len", "output_len", "metric", "value",
             "unit", "source", "notes"]


def _published_row(**kw) -> dict:
    m = get_model("gpt-7.5b")
    row = dict.fromkeys(_CSV_COLS, "")
    row.update(case_id="NAR21-1", workload="train", model="GPT-7.5B (Megatron SC21)",
               layers=m.layers, hidden=m.hidden, heads=m.heads, kv_heads=m.kv_heads,
               ffn_hidden=m.ffn_hidden, seq_len=2048, vocab=m.vocab, global_batch=512,
               hardware=HW, n_gpus=64, tp=2, pp=1, dp=32, cp=1, sp=0, recompute="full",
               dtype="bf16", metric="iteration_time_s", value=1.0, notes="")
    row.update(kw)
    return row


def test_published_ranking_on_a_synthetic_csv(tmp_path):
    row = _published_row()
    other = dict(row, case_id="NAR21-2", metric="achieved_tflops_per_gpu", value=100.0)
    path = tmp_path / "m.csv"
    pd.DataFrame([row, other], columns=_CSV_COLS).to_csv(path, index=False)
    df = published_ranking(path)
    assert len(df) == 1                                   # two metrics, one configuration
    r = df.iloc[0]
    assert r["model"] == "gpt-7.5b" and r["status"] == "ok"
    assert not r["flash_attention"]                       # Megatron-LM 2021: unfused
    res = search("gpt-7.5b", HW, 64, 512, flash_attention=False)
    where = rank_of(res, {"tp": 2, "pp": 1, "dp": 32, "sp": 0, "recompute": "full"})
    assert r["rank"] == where["rank"]
    best = res.extra["scores"][res.extra["fits"]].min()
    assert r["speedup"] == pytest.approx(where["score"] / best)
    assert r["speedup"] >= 1


def test_published_configs_read_rows_as_validate_does(tmp_path):
    """FlashAttention and the model come from symcost.validate's rules: negated notes turn
    it off (a substring match on "flashattention" turned it on), sources have defaults, a
    name that is no preset keeps the row's shape with its family's flags, and a row validate
    cannot predict says why."""
    from symcost.validate import flash_attention_rule

    rows = [
        _published_row(case_id="MPT-a", notes="FlashAttention (triton)"),
        _published_row(case_id="MPT-b", notes="unfused attention, no FlashAttention", n_gpus=32,
                       dp=16),
        _published_row(case_id="NAR21-c", n_gpus=128, dp=64),
        _published_row(case_id="NEW-d", model="my-gpt", n_gpus=16, dp=8),
        _published_row(case_id="NEW-e", notes="hybrid Mamba-Transformer MoE", n_gpus=8, dp=2),
    ]
    path = tmp_path / "m.csv"
    pd.DataFrame(rows, columns=_CSV_COLS).to_csv(path, index=False)
    confs = published_configs(path).set_index("case_id")
    for r in rows[:4]:
        src = r["case_id"].split("-")[0]
        assert confs.loc[r["case_id"], "flash_attention"] == flash_attention_rule(
            src, r["notes"])[0]
    assert confs["flash_attention"].drop("NEW-e").to_dict() == {
        "MPT-a": True, "MPT-b": False, "NAR21-c": False, "NEW-d": True}
    assert confs.loc["NAR21-c", "preset"] == "gpt-7.5b"
    mine = confs.loc["NEW-d"]
    assert pd.isna(mine["preset"]) and mine["spec"].name == "my-gpt"
    assert mine["spec"].hidden == get_model("gpt-7.5b").hidden
    assert "Mamba" in confs.loc["NEW-e", "status"]
    ranked = published_ranking(path).set_index("case_id")
    assert ranked.loc["NEW-d", "model"] == "my-gpt" and ranked.loc["NEW-d", "status"] == "ok"
    assert ranked.loc["NEW-e", "status"].startswith("not predictable: model")


def test_published_ranking_shares_the_rows_settings():
    """A Megatron-Bridge run whose recipe validate reads with settings (Nemotron 3 Super in
    NVFP4: HybridEP dispatch and 14 BF16 layers) is ranked in a search whose every candidate
    has them, with its EP and CP matched: the same rank as that search done by hand."""
    from symcost.validate import builtin_measurements, load_measurements, prepare_rows

    case = "MBRIDGE-26.08-Nemotron-3-Super-120B-A12B-GB300-64g-NVFP4-gbs512-tpsg"
    df = load_measurements(builtin_measurements())
    path = builtin_measurements()
    (prep,), _ = prepare_rows(df[df["case_id"] == case])
    confs = published_configs(path).set_index("case_id")
    assert confs.loc[case, "settings"] == {"bf16_layers": 14, "ep_dedup": True}
    assert prep.config.bf16_layers == 14 and prep.config.ep_dedup
    r = published_ranking(path, sources=(case,)).set_index("case_id").loc[case]
    c = prep.config
    res = search(prep.model, prep.hardware, c.num_gpus, c.global_batch, seq_len=c.seq_len,
                 dtype=c.dtype, top=1, recompute_modules=c.recompute_modules,
                 bf16_layers=14, ep_dedup=True)
    where = rank_of(res, {"tp": c.tp, "pp": c.pp, "dp": c.dp, "cp": c.cp, "ep": c.ep,
                          "sp": int(c.sp), "recompute": c.recompute,
                          "micro_batch": c.micro_batch})
    assert r["status"] == "ok" and r["rank"] == where["rank"]
    assert r["published_step_time"] == where["score"]
    assert "ep=64" in r["published"] and "ep_dedup=True" in r["published"]


# ----------------------------------------------------------------------------- CLI
def test_cli_search_table_and_json():
    from symcost.cli import app

    args = ["search", "--model", "gpt-7.5b", "--hardware", HW, "--num-gpus", "64",
            "--global-batch", "512", "--top", "3", "--max-tp", "8"]
    out = RUNNER.invoke(app, args)
    assert out.exit_code == 0, out.output
    assert "Why #1 beats #2" in out.output and "removed" in out.output
    out = RUNNER.invoke(app, args + ["--json"])
    assert out.exit_code == 0, out.output
    d = json.loads(out.output)
    assert len(d["top"]) == 3 and d["candidates"] > 0 and d["top"][0]["rank"] == 1
    assert d["rejected"][-1]["stage"] == "memory"


def test_cli_search_errors():
    from symcost.cli import app

    out = RUNNER.invoke(app, ["search", "--model", "gpt3-175b", "--hardware", HW,
                              "--num-gpus", "1024", "--global-batch", "1536", "--fix", "tp=8",
                              "--max-tp", "4"])
    assert out.exit_code == 2
    assert out.output.strip().startswith("error: no valid configuration")
    assert "user: max tp=4" in out.output
    out = RUNNER.invoke(app, ["search", "--model", "gpt3-175b", "--hardware", HW,
                              "--num-gpus", "8:x", "--global-batch", "1536"])
    assert out.exit_code == 2 and "--num-gpus" in out.output


# ----------------------------------------------------------------------------- start-up
def test_exhaustive_search_never_imports_scipy(tmp_path):
    """SciPy is only for search_scipy and codesign: importing optimizers loads neither SciPy
    nor JAX; a small exhaustive search is evaluated with NumPy (no JAX), a large one loads
    JAX (the compiled model), and neither loads SciPy."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    code = ("import sys, optimizers\n"
            "before = sorted(m for m in ('scipy', 'jax') if m in sys.modules)\n"
            "r = optimizers.search('gpt-7.5b', 'a100-sxm4-80gb', 32, 256, top=1)\n"
            "small = sorted(m for m in ('scipy', 'jax') if m in sys.modules)\n"
            "assert len(r.extra['space']) <= sys.modules['optimizers.search'].NUMPY_ROWS\n"
            "optimizers.search('gpt3-175b', 'a100-sxm4-80gb', list(range(8, 4097, 8)), 2048,"
            " top=1)\n"
            "large = sorted(m for m in ('scipy', 'jax') if m in sys.modules)\n"
            "print(before, small, large)\n")
    root = str(Path(__file__).resolve().parents[1])
    env = dict(os.environ, SYMCOST_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] [] ['jax']"
