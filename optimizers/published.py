"""Real-world check: where published training configurations rank in the search.

For each published training run with a full parallel layout (``tp``, ``pp``, ``dp`` given) in
a measurements CSV (format: ``shared/validation/README.md``), :func:`published_ranking` runs
the exhaustive search for the same model, hardware, GPU count, global batch, sequence length
and dtype, and reports the rank of the published configuration and how much faster the model
says the best one is. Fields the source leaves blank (micro-batch, VPP, ZeRO stage; DP overlap
is never published) are free: the published configuration is matched by the fields it states
and its best completion is ranked. FlashAttention is on when the row's notes mention it
(e.g. llm-foundry), off otherwise (Megatron-LM 2021-2022 predates it).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import numpy as np
import pandas as pd

from symcost.config import ConfigError

from .space import SearchError

#: default location of the published measurements (override with SYMCOST_VALIDATION_CSV).
DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / \
    "published_measurements.csv"
_SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")
_CONFIG_COLS = ("model", "hardware", "n_gpus", "global_batch", "seq_len", "dtype", "tp", "pp",
                "dp", "vpp", "sp", "cp", "micro_batch", "recompute", "zero_stage", *_SHAPE)


def _csv_path(path) -> Path:
    if path is not None:
        return Path(path)
    return Path(os.environ.get("SYMCOST_VALIDATION_CSV", DEFAULT_CSV))


@functools.lru_cache(maxsize=1)
def _presets_by_shape() -> dict[tuple, str]:
    from symcost.models import get_model, list_models

    out: dict[tuple, str] = {}
    for name in list_models():
        m = get_model(name)
        out.setdefault(tuple(int(getattr(m, k)) for k in
                             ("layers", "hidden", "heads", "kv_heads", "ffn_hidden", "vocab")),
                       name)
    return out


def published_configs(path=None) -> pd.DataFrame:
    """Distinct published training configurations with a full parallel layout.

    Args:
        path: CSV in the ``published_measurements.csv`` format (default: the shared one, or
            ``$SYMCOST_VALIDATION_CSV``).

    Returns:
        One row per distinct configuration: the configuration columns, ``case_id`` (first
        case of the group), ``metrics`` (``metric=value`` of every row of the group),
        ``flash_attention`` and ``preset`` (matching model preset or None).

    Raises:
        FileNotFoundError: no such CSV.
    """
    df = pd.read_csv(_csv_path(path))
    df = df[(df["workload"] == "train")].dropna(subset=["tp", "pp", "dp", "n_gpus",
                                                        "global_batch"])
    df = df.copy()
    notes = df["notes"].map(lambda x: x if isinstance(x, str) else "")
    df["flash_attention"] = notes.str.contains("flashattention", case=False)
    keys = [c for c in _CONFIG_COLS if c in df.columns] + ["flash_attention"]
    grouped = df.fillna({"vpp": -1, "micro_batch": -1, "zero_stage": -1, "sp": 0, "cp": 1})
    rows = []
    for key, g in grouped.groupby(keys, sort=False, dropna=False):
        rec = dict(zip(keys, key))
        rec["case_id"] = g["case_id"].iloc[0]
        rec["metrics"] = "; ".join(f"{m}={v:g}" for m, v in zip(g["metric"], g["value"]))
        rec["preset"] = _presets_by_shape().get(tuple(int(rec[k]) for k in _SHAPE))
        rows.append(rec)
    out = pd.DataFrame(rows)
    for c in ("vpp", "micro_batch", "zero_stage"):
        out[c] = out[c].where(out[c] >= 0, np.nan)
    return out


def published_ranking(path=None, *, params=None, sources: tuple[str, ...] | None = None
                      ) -> pd.DataFrame:
    """Rank each published configuration in the exhaustive search of its own problem.

    Args:
        path: measurements CSV (see :func:`published_configs`).
        params: efficiency parameters (the shipped calibration when None).
        sources: keep only cases whose ``case_id`` starts with one of these prefixes
            (e.g. ``("NAR21", "MLM22")``); all when None.

    Returns:
        DataFrame, one row per configuration: ``case_id``, ``model`` (preset), ``hardware``,
        ``n_gpus``, ``global_batch``, ``seq_len``, ``published`` (the fields matched),
        ``free`` (fields left free), ``candidates``, ``fitting``, ``rank`` (1 = the model's
        best; NaN when the published layout is invalid or does not fit per the model),
        ``published_step_time`` and ``best_step_time`` (s, float32 ranking values),
        ``speedup`` (published / best), ``speedup_same_sp`` (against the best with the
        published sequence-parallel setting: SP postdates the 2021 Megatron runs),
        ``best`` (the best configuration), ``status``
        (``ok`` or why it was not ranked) and ``metrics`` (what the source measured).
    """
    from .search import search

    confs = published_configs(path)
    if sources:
        confs = confs[confs["case_id"].str.startswith(tuple(sources))]
    out = []
    for r in confs.itertuples(index=False):
        rec = {"case_id": r.case_id, "model": r.preset, "hardware": r.hardware,
               "n_gpus": int(r.n_gpus), "global_batch": int(r.global_batch),
               "seq_len": int(r.seq_len), "metrics": r.metrics}
        fields = {"tp": int(r.tp), "pp": int(r.pp), "dp": int(r.dp), "sp": int(r.sp),
                  "recompute": str(r.recompute)}
        free = ["dp_overlap"]
        for name, col in (("vpp", "vpp"), ("micro_batch", "micro_batch"), ("zero", "zero_stage")):
            val = getattr(r, col)
            if pd.isna(val):
                free.append(name)
            else:
                fields[name] = int(val)
        rec["published"] = " ".join(f"{k}={v}" for k, v in fields.items())
        rec["free"] = ",".join(free)
        if r.preset is None:
            out.append(rec | {"status": "no model preset with this shape"})
            continue
        if int(r.cp) != 1:
            out.append(rec | {"status": "context parallelism is not modelled"})
            continue
        try:
            res = search(r.preset, r.hardware, int(r.n_gpus), int(r.global_batch),
                         seq_len=int(r.seq_len), dtype=str(r.dtype),
                         flash_attention=bool(r.flash_attention), top=1, params=params)
        except (SearchError, ConfigError) as e:
            out.append(rec | {"status": f"search failed: {e}"})
            continue
        from .search import rank_of

        where = rank_of(res, fields)
        best = res.table.iloc[0]
        sc = res.extra["scores"]
        fits = res.extra["fits"]
        same_sp = fits & (res.extra["space"].columns["sp"] == fields["sp"])
        rec.update(candidates=res.candidates, fitting=res.fitting,
                   best_step_time=float(sc[fits].min()), best=_describe(best),
                   best_step_time_same_sp=float(sc[same_sp].min()) if same_sp.any() else None)
        if where["matches"] == 0:
            rec["status"] = "published layout is not a valid configuration here"
        elif where["rank"] is None:
            rec["status"] = "published layout does not fit in memory (per the model)"
        else:
            rec.update(rank=where["rank"], published_step_time=where["score"],
                       status="ok")
            rec["speedup"] = rec["published_step_time"] / rec["best_step_time"]
            if rec["best_step_time_same_sp"]:
                rec["speedup_same_sp"] = (rec["published_step_time"]
                                          / rec["best_step_time_same_sp"])
        out.append(rec)
    cols = ["case_id", "model", "hardware", "n_gpus", "global_batch", "seq_len", "published",
            "free", "candidates", "fitting", "rank", "published_step_time", "best_step_time",
            "speedup", "speedup_same_sp", "best", "status", "metrics"]
    df = pd.DataFrame(out).reindex(columns=cols)
    for c in ("candidates", "fitting", "rank"):
        df[c] = df[c].astype("Int64")
    return df


def _describe(row) -> str:
    return (f"tp={row['tp']} pp={row['pp']} dp={row['dp']} mb={row['micro_batch']} "
            f"vpp={row['vpp']} recompute={row['recompute']} sp={int(row['sp'])} "
            f"zero={row['zero']} overlap={int(row['dp_overlap'])}")
