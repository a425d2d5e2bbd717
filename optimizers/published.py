"""Real-world check: where published training configurations rank in the search.

For each published training run with a full parallel layout (``tp``, ``pp``, ``dp`` given) in
a measurements CSV (format: ``shared/validation/README.md``), :func:`published_ranking` runs
the exhaustive search for the same model, hardware, GPU count, global batch, sequence length
and dtype, and reports the rank of the published configuration and how much faster the model
says the best one is. Fields the source leaves blank (micro-batch, VPP, ZeRO stage; DP overlap
is never published) are free: the published configuration is matched by the fields it states
and its best completion is ranked. The search prices every candidate with the settings
``symcost validate`` gives the row (``ep_overlap``, ``ep_dedup``, ``bf16_layers``, the
recomputed modules, ...: :data:`symcost.fields.SEARCH_SHARED_FIELDS`), so the published
configuration ranks at the step time ``validate`` predicts for it.

Each row is read exactly as ``symcost validate`` reads it (:func:`symcost.validate.prepare_rows`):
the same model (preset by name via :func:`symcost.validate.preset_for_name`, the row's shape,
per-source architecture defaults), the same FlashAttention decision
(:func:`symcost.validate.flash_attention_rule`: negations such as "unfused" or "no
FlashAttention" in the notes, then per-source defaults, e.g. off for Megatron-LM 2021-2022)
and the same rejection reasons (e.g. hybrid Mamba-Transformer models are not modelled).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from symcost.config import ConfigError, search_settings
from symcost.models import ModelSpec
from symcost.params import Params
from symcost.validate import load_measurements, prepare_rows, preset_for_name

from .search import rank_of, search
from .space import SearchError

#: default location of the published measurements (override with SYMCOST_VALIDATION_CSV).
DEFAULT_CSV = Path(__file__).resolve().parents[2] / "shared" / "validation" / \
    "published_measurements.csv"
#: columns that must be stated for a configuration to count as published in full.
_FULL_LAYOUT = ("tp", "pp", "dp", "n_gpus", "global_batch")
#: fields a source may leave blank (free in the ranking): config field -> CSV column.
_OPTIONAL = (("vpp", "vpp"), ("micro_batch", "micro_batch"), ("zero", "zero_stage"))
_CONFIG_COLS = ("model", "hardware", "n_gpus", "global_batch", "seq_len", "dtype", "tp", "pp",
                "dp", "vpp", "sp", "cp", "micro_batch", "recompute", "zero_stage", "notes")


def _csv_path(path: str | os.PathLike[str] | None) -> Path:
    if path is not None:
        return Path(path)
    return Path(os.environ.get("SYMCOST_VALIDATION_CSV", DEFAULT_CSV))


def _num(v: Any) -> Any:
    """A CSV cell as a number (int when whole), or the cell itself when it is not one."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return v
    return int(f) if f.is_integer() else f


def _metrics(rows: Iterable[tuple[str, Any]]) -> str:
    """``metric=value; ...`` of a configuration's measurements."""
    return "; ".join(f"{m}={_num(v):g}" if isinstance(_num(v), (int, float)) else f"{m}={v}"
                     for m, v in rows)


def _model_key(m: ModelSpec) -> tuple[Any, ...]:
    """The model's identity without its ``source`` (which names the CSV row)."""
    return tuple(getattr(m, f.name) for f in dataclasses.fields(m) if f.name != "source")


def published_configs(path: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """Distinct published training configurations with a full parallel layout.

    Args:
        path: CSV in the ``published_measurements.csv`` format (default: the shared one, or
            ``$SYMCOST_VALIDATION_CSV``).

    Returns:
        One row per distinct configuration: ``case_id`` (first case of the group), ``model``
        (the row's model name), ``preset`` (the preset that name maps to, or None),
        ``spec`` (the :class:`~symcost.models.ModelSpec` ``symcost validate`` builds for it),
        ``hardware``, ``n_gpus``, ``global_batch``, ``seq_len``, ``dtype``, ``tp``, ``pp``,
        ``dp``, ``cp``, ``ep``, ``sp``, ``recompute``, ``vpp``/``micro_batch``/``zero_stage``
        (NaN when the source leaves them blank), ``flash_attention`` and ``flash_reason``,
        ``recompute_modules`` and ``settings`` (field -> value of the row's other settings
        that differ from the defaults, as ``validate`` reads them), ``metrics``
        (``metric=value`` of every row of the group) and ``status`` (``""``, or why
        ``symcost validate`` cannot predict the run; its other columns are then as written).

    Raises:
        MeasurementsError: unreadable file or a required column missing.
    """
    df = load_measurements(_csv_path(path))
    train = df["workload"].fillna("").str.strip().str.lower() == "train"
    full = df[[c for c in _FULL_LAYOUT if c in df.columns]].notna().all(axis=1)
    df = df[train & full]
    prepared, skipped = prepare_rows(df)
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for r in prepared:
        c = r.config
        hw = r.hardware
        free = {col: None if col in r.defaults else float(getattr(c, fld))
                for fld, col in _OPTIONAL}
        settings = search_settings(c)
        key = (_model_key(r.model), hw.name, c.num_gpus, c.global_batch, c.seq_len,
               c.dtype, c.tp, c.pp, c.dp, c.cp, c.ep, c.sp, c.recompute, c.flash_attention,
               c.recompute_modules, tuple(settings.items()), *free.values())
        if key in groups:
            groups[key]["_metrics"].append((r.metric, r.measured))
            continue
        exact, _ = preset_for_name(r.model.name)
        groups[key] = {
            "case_id": r.case_id, "model": r.model.name,
            "preset": exact.name if exact is not None else None, "spec": r.model,
            "hardware": hw.name, "n_gpus": c.num_gpus,
            "global_batch": c.global_batch, "seq_len": c.seq_len, "dtype": c.dtype,
            "tp": c.tp, "pp": c.pp, "dp": c.dp, "cp": c.cp, "ep": c.ep, "sp": int(c.sp),
            "recompute": c.recompute,
            **{col: np.nan if v is None else v for col, v in free.items()},
            "flash_attention": bool(c.flash_attention),
            "flash_reason": str(r.defaults.get("flash_attention", "")),
            "recompute_modules": c.recompute_modules, "settings": settings,
            "_metrics": [(r.metric, r.measured)], "status": ""}
    raw = df.set_index("case_id", drop=False)
    for sk in skipped:   # one record per distinct raw configuration and reason
        row = raw.loc[sk.case_id]
        if isinstance(row, pd.DataFrame):      # duplicate case ids: the first row is used
            row = row.iloc[0]
        key = ("skipped", sk.reason, *(str(row.get(c)) for c in _CONFIG_COLS))
        if key in groups:
            groups[key]["_metrics"].append((row["metric"], row["value"]))
            continue
        groups[key] = {"case_id": sk.case_id, "model": row.get("model"), "preset": None,
                       "spec": None, "hardware": row.get("hardware"),
                       "n_gpus": _num(row["n_gpus"]),
                       "global_batch": _num(row["global_batch"]),
                       "_metrics": [(row["metric"], row["value"])], "status": sk.reason}
    out = pd.DataFrame(list(groups.values()))
    if out.empty:
        return out
    out["metrics"] = out.pop("_metrics").map(_metrics)
    return out


def published_ranking(path: str | os.PathLike[str] | None = None, *,
                      params: Params | None = None, sources: tuple[str, ...] | None = None
                      ) -> pd.DataFrame:
    """Rank each published configuration in the exhaustive search of its own problem.

    Args:
        path: measurements CSV (see :func:`published_configs`).
        params: efficiency parameters (the shipped calibration when None).
        sources: keep only cases whose ``case_id`` starts with one of these prefixes
            (e.g. ``("NAR21", "MLM22")``); all when None.

    Returns:
        DataFrame, one row per configuration: ``case_id``, ``model`` (the preset the name maps
        to, else the row's model name), ``hardware``, ``n_gpus``, ``global_batch``,
        ``seq_len``, ``flash_attention``, ``published`` (the fields matched, then the
        settings every candidate shares), ``free``
        (fields left free), ``candidates``, ``fitting``, ``rank`` (1 = the model's best; NaN
        when the published layout is invalid or does not fit per the model),
        ``published_step_time`` and ``best_step_time`` (s, float32 ranking values),
        ``speedup`` (published / best), ``speedup_same_sp`` (against the best with the
        published sequence-parallel setting: SP postdates the 2021 Megatron runs),
        ``best`` (the best configuration), ``status`` (``ok`` or why it was not ranked) and
        ``metrics`` (what the source measured).

    Raises:
        MeasurementsError: unreadable file or a required column missing.
    """
    confs = published_configs(path)
    if sources and not confs.empty:
        confs = confs[confs["case_id"].str.startswith(tuple(sources))]
    out = []
    for r in confs.to_dict(orient="records"):
        preset = r.get("preset")
        rec = {"case_id": r["case_id"], "model": r["model"] if pd.isna(preset) else preset,
               "hardware": r["hardware"], "n_gpus": r["n_gpus"],
               "global_batch": r["global_batch"], "seq_len": r.get("seq_len"),
               "flash_attention": r.get("flash_attention"), "metrics": r["metrics"]}
        if r["status"]:
            out.append(rec | {"status": f"not predictable: {r['status']}"})
            continue
        fields = {"tp": int(r["tp"]), "pp": int(r["pp"]), "dp": int(r["dp"]),
                  "cp": int(r["cp"]), "ep": int(r["ep"]), "sp": int(r["sp"]),
                  "recompute": str(r["recompute"])}
        settings = r["settings"] if isinstance(r.get("settings"), dict) else {}
        free = ["dp_overlap", "tp_overlap"]
        for name, col in _OPTIONAL:
            if pd.isna(r[col]):
                free.append(name)
            else:
                fields[name] = int(r[col])
        rec["published"] = " ".join(f"{k}={v}" for k, v in {**fields, **settings}.items())
        rec["free"] = ",".join(free)
        try:
            res = search(r["spec"], r["hardware"], int(r["n_gpus"]), int(r["global_batch"]),
                         seq_len=int(r["seq_len"]), dtype=str(r["dtype"]),
                         flash_attention=bool(r["flash_attention"]), top=1, params=params,
                         recompute_modules=str(r["recompute_modules"]), **settings)
        except (SearchError, ConfigError) as e:
            out.append(rec | {"status": f"search failed: {e}"})
            continue
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
    cols = ["case_id", "model", "hardware", "n_gpus", "global_batch", "seq_len",
            "flash_attention", "published", "free", "candidates", "fitting", "rank",
            "published_step_time", "best_step_time", "speedup", "speedup_same_sp", "best",
            "status", "metrics"]
    df = pd.DataFrame(out).reindex(columns=cols)
    for c in ("candidates", "fitting", "rank"):
        df[c] = df[c].astype("Int64")
    return df


def _describe(row: pd.Series[Any]) -> str:
    """A top-table row as ``tp=.. pp=.. ...``."""
    return (f"tp={row['tp']} pp={row['pp']} dp={row['dp']} mb={row['micro_batch']} "
            f"vpp={row['vpp']} recompute={row['recompute']} sp={int(row['sp'])} "
            f"zero={row['zero']} overlap={int(row['dp_overlap'])}")
