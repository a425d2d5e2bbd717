"""The web explorer behind ``symcost ui``: a FastAPI app serving one static page
(``symcost/cli/static/``) and JSON/PNG endpoints that call the public Python API.

Why FastAPI + uvicorn: a small, well-kept ASGI stack (pydantic and starlette underneath) with
a test client, so the endpoints are tested without a browser and the page stays a plain HTML
file with a little vanilla JavaScript. Nothing here computes a number of its own: every value
comes from :func:`symcost.api.predict_training`, :func:`symcost.explain.explain`,
:func:`optimizers.search.search`, :func:`symcost.roofline.roofline_table` and
:func:`symcost.sensitivity.sensitivity`; charts are drawn by :mod:`symcost.cli.plots`, the
code ``symcost roofline --plot`` and ``symcost sensitivity --plot`` use.

State: every endpoint reads the same query string the page shows in its address bar
(:func:`parse_state`), so a URL reproduces a view and the page only forwards its own query:

* ``model``: a preset id (:func:`symcost.models.list_models`), or ``model_json``: the text of a
  Hugging Face ``config.json`` (or a ModelSpec JSON), read by :func:`symcost.models.get_model`
  exactly as ``--model config.json`` reads the file;
* ``hardware``: a hardware id (:func:`hwspecs.list_hardware`); ``hw.<key>=<number>`` edits a
  number of its YAML document in the YAML's own units (``hw.hbm_bandwidth_gbps=4000``,
  ``hw.peak_tflops.bf16=1200``), loaded by :func:`hwspecs.load_hardware` (the one place units
  are converted);
* one parameter per field of :data:`symcost.fields.TRAINING_FIELDS` (empty: the default);
* view parameters: ``view`` (``predict``, ``formula``, ``search``, ``roofline``,
  ``sensitivity``), ``formula`` and ``keep``; ``search_gpus``, ``search_top``,
  ``objective``, ``max_tp``; the roofline workload ``batch``, ``input_len``, ``output_len``
  (:data:`symcost.fields.INFERENCE_FIELDS`); ``output`` for the tornado.

Errors: a user error (the one-line :class:`~symcost.config.ConfigError`, ``ModelSpecError``,
``HardwareSpecError``, ``SearchError`` ... message naming the field and the rule) is answered
with status 400 and ``{"error": message}``; anything else is a bug (status 500).
"""

from __future__ import annotations

import functools
import hashlib
import json
import shlex
import tempfile
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from fastapi import FastAPI, Request
from fastapi.responses import FileResponse, JSONResponse, Response

from hwspecs import HardwareSpec, HardwareSpecError, list_hardware, load_hardware
from hwspecs.loader import parse_yaml
from optimizers.search import OBJECTIVES, search
from ..api import predict_training
from ..config import InferenceConfig, TrainingConfig
from ..explain import explain, formula_names
from ..fields import (INFERENCE_FIELDS, SEARCH_SHARED_FIELDS, TRAINING_FIELDS, ConfigError,
                      coerce)
from ..models import ModelSpec, get_model, list_models
from ..roofline import roofline_table
from ..schema import OUTPUT_KEYS, stamp
from ..sensitivity import DEFAULT_OUTPUTS, TORNADO_STEP, sensitivity
from ..training import BREAKDOWN, MEMORY
from .main import is_user_error, one_line
from .plots import plot_roofline, tornado_chart

STATIC = Path(__file__).with_name("static")
VIEWS = ("predict", "formula", "search", "roofline", "sensitivity")
#: the roofline workload fields the page shows (from the inference field table).
ROOFLINE_FIELDS = ("batch", "input_len", "output_len")
#: default preset and GPU of a fresh page.
DEFAULT_MODEL = "llama-3-8b"
DEFAULT_HARDWARE = "h100-sxm5-80gb"
#: most candidates drawn in the Pareto view (the front is always complete).
MAX_CLOUD = 2000
#: file name the CLI command uses for pasted model JSON / edited hardware.
MODEL_FILE = "config.json"
HARDWARE_FILE = "edited-hardware.yaml"


class UiInputError(ConfigError):
    """A malformed query parameter of the explorer (names the parameter and the rule)."""


# ----------------------------------------------------------------------------- state
def _one(q: Mapping[str, str], name: str, default: str | None = None) -> str | None:
    v = q.get(name)
    return default if v is None or v.strip() == "" else v.strip()


def _int(q: Mapping[str, str], name: str, default: int | None) -> int | None:
    v = _one(q, name)
    if v is None:
        return default
    try:
        return int(v)
    except ValueError:
        raise UiInputError(f"{name}: must be an integer (got {v!r})") from None


@functools.lru_cache(maxsize=64)
def _model_from_json(text: str) -> ModelSpec:
    """The model of a pasted ``config.json``: written to a file and read by
    :func:`symcost.models.get_model` (the CLI's ``--model config.json`` path)."""
    try:
        json.loads(text)
    except json.JSONDecodeError as exc:
        raise UiInputError(f"model_json: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    with tempfile.TemporaryDirectory(prefix=f"symcost-ui-{digest}-") as name:
        folder = Path(name)
        path = folder / MODEL_FILE
        path.write_text(text, encoding="utf-8")
        spec = get_model(path)
    return spec if spec.name != folder.name else spec.replace(name="pasted-config")


def hardware_document(hw_id: str) -> dict[str, Any]:
    """The parsed YAML document of built-in hardware ``hw_id`` (human units, key names carry
    them).

    Raises:
        HardwareSpecError: unknown id.
    """
    if hw_id not in list_hardware():
        raise HardwareSpecError(f"hardware: unknown {hw_id!r}; known: "
                                f"{', '.join(list_hardware())}")
    text = resources.files("hwspecs").joinpath("data", f"{hw_id}.yaml").read_text("utf-8")
    doc = parse_yaml(text, f"{hw_id}.yaml")
    assert isinstance(doc, dict)
    return doc


def editable_numbers(doc: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a hardware YAML document, by dotted key
    (``peak_tflops.bf16``, ``intra_node.latency_us``); ``sources`` is skipped."""
    out: dict[str, float] = {}
    for k, v in doc.items():
        if k == "sources":
            continue
        if isinstance(v, Mapping):
            out.update(editable_numbers(v, f"{prefix}{k}."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[f"{prefix}{k}"] = v
    return out


def edited_document(hw_id: str, edits: Mapping[str, str]) -> dict[str, Any]:
    """``hw_id``'s YAML document with ``edits`` (dotted key -> number text) applied.

    Raises:
        UiInputError: an unknown key or a value that is not a number.
    """
    doc = hardware_document(hw_id)
    known = editable_numbers(doc)
    for key, text in sorted(edits.items()):
        if key not in known:
            raise UiInputError(f"hw.{key}: not a number of {hw_id}.yaml; editable: "
                               f"{', '.join(known)}")
        try:
            num: float | int = float(text)
        except ValueError:
            raise UiInputError(f"hw.{key}: must be a number (got {text!r})") from None
        if isinstance(known[key], int) and float(num).is_integer():
            num = int(num)
        node = doc
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = num
    if edits:
        doc["description"] = f"{doc['description']} (edited: " + ", ".join(
            f"{k}={v}" for k, v in sorted(edits.items())) + ")"
    return doc


@functools.lru_cache(maxsize=64)
def _hardware(hw_id: str, edits: tuple[tuple[str, str], ...]) -> HardwareSpec:
    if not edits:
        hardware_document(hw_id)   # a built-in id, never a path on the server
        return load_hardware(hw_id)
    text = yaml.safe_dump(edited_document(hw_id, dict(edits)), sort_keys=False)
    with tempfile.TemporaryDirectory(prefix="symcost-ui-hw-") as folder:
        path = Path(folder) / HARDWARE_FILE
        path.write_text(text, encoding="utf-8")
        return load_hardware(path)


def parse_state(q: Mapping[str, str]) -> dict[str, Any]:
    """The explorer state of a query string: ``model`` (ModelSpec), ``hardware``
    (HardwareSpec), ``config`` (TrainingConfig, not yet validated: the API validates it),
    and the raw texts the CLI command needs.

    Raises:
        ModelSpecError, HardwareSpecError, UiInputError: unknown preset or id, bad JSON, a
            bad hardware edit.
    """
    model_json = _one(q, "model_json")
    model_id = _one(q, "model", DEFAULT_MODEL)
    assert model_id is not None
    if model_json is not None:
        model = _model_from_json(model_json)
    else:
        if model_id not in list_models():
            raise UiInputError(f"model: unknown preset {model_id!r}; known: "
                               f"{', '.join(list_models())}")
        model = get_model(model_id)
    hw_id = _one(q, "hardware", DEFAULT_HARDWARE)
    assert hw_id is not None
    edits = tuple(sorted((k[3:], v.strip()) for k, v in q.items()
                         if k.startswith("hw.") and v.strip() != ""))
    hw = _hardware(hw_id, edits)
    fields = {name: _one(q, name) for name in TRAINING_FIELDS}
    # text values: the core coerces and checks them (symcost.fields.coerce, one message)
    given: dict[str, Any] = {k: v for k, v in fields.items() if v is not None}
    return {"model": model, "hardware": hw, "config": TrainingConfig(**given),
            "given": given, "model_id": model_id, "model_json": model_json, "hw_id": hw_id,
            "hw_edits": dict(edits)}


# ----------------------------------------------------------------------------- CLI text
def _flag(name: str, value: Any, table: Mapping[str, Any] = TRAINING_FIELDS) -> list[str]:
    f = table[name]
    if f.kind == "bool":
        on = str(value).strip().lower() in ("1", "true", "on", "yes")
        return [f.flag if on else f"--no-{f.flag[2:]}"]
    return [f.flag, str(value)]


def cli_command(state: Mapping[str, Any], command: str = "train",
                extra: list[str] | None = None, fields: bool = True,
                head: list[str] | None = None) -> dict[str, Any]:
    """The ``symcost ...`` command that prints the same numbers, and the files it needs
    (``{"command": text, "files": {name: text}}``: the pasted config.json, the edited
    hardware YAML)."""
    files: dict[str, str] = {}
    if state["model_json"] is not None:
        model_arg = MODEL_FILE
        files[MODEL_FILE] = state["model_json"]
    else:
        model_arg = state["model_id"]
    if state["hw_edits"]:
        hw_arg = HARDWARE_FILE
        files[HARDWARE_FILE] = yaml.safe_dump(
            edited_document(state["hw_id"], state["hw_edits"]), sort_keys=False)
    else:
        hw_arg = state["hw_id"]
    argv = ["symcost", command, *(head or []), "--model", model_arg, "--hardware", hw_arg]
    if fields:
        for name, value in state["given"].items():
            argv += _flag(name, value)
    argv += extra or []
    return {"command": " ".join(shlex.quote(a) for a in argv), "files": files}


# ----------------------------------------------------------------------------- views
def predict_view(q: Mapping[str, str]) -> dict[str, Any]:
    """Step time, MFU, memory per GPU with the usable-HBM line and the breakdown
    (:meth:`symcost.api.TrainingResult.to_dict` plus the parts the page draws)."""
    st = parse_state(q)
    r = predict_training(st["model"], st["hardware"], st["config"])
    v = r.values
    return {
        "result": r.to_dict(),
        "model": {"name": r.model.name, "layers": r.model.layers, "hidden": r.model.hidden,
                  "heads": r.model.heads, "kv_heads": r.model.kv_heads,
                  "params_total": v["params_total"]},
        "hardware": {"name": r.hardware.name, "description": r.hardware.description},
        "breakdown": [{"term": k.removeprefix("time_"), "key": OUTPUT_KEYS[k], "s": v[k]}
                      for k in BREAKDOWN],
        "memory": [{"part": k.removeprefix("mem_"), "key": OUTPUT_KEYS[k], "bytes": v[k]}
                   for k in MEMORY],
        "memory_usable_bytes": v["mem_usable"], "memory_per_gpu_bytes": v["mem_total"],
        "fits": bool(r.fits),
        "cli": cli_command(st, "train"),
    }


def formula_view(q: Mapping[str, str]) -> dict[str, Any]:
    """:func:`symcost.explain.explain` of output/operator ``formula`` with ``keep`` free."""
    st = parse_state(q)
    name = _one(q, "formula", "step_time")
    assert name is not None
    keep = [k.strip() for k in (_one(q, "keep", "") or "").split(",") if k.strip()]
    f = explain(name, st["model"], st["hardware"], st["config"], keep=keep)
    extra = ["--keep", ",".join(keep)] if keep else []
    return {**f.to_dict(), "text": f.text(), "names": formula_names(),
            "cli": cli_command(st, "explain", extra, head=[name])}


def _search_args(q: Mapping[str, str], st: Mapping[str, Any]) -> dict[str, Any]:
    cfg: TrainingConfig = st["config"]
    model: ModelSpec = st["model"]
    hw: HardwareSpec = st["hardware"]
    gpus_text = _one(q, "search_gpus")
    if gpus_text is None:
        if cfg.num_gpus is not None:
            gpus_text = str(cfg.num_gpus)
        else:
            gpus_text = str(predict_training(model, hw, cfg).config.num_gpus)
    try:
        gpus = [int(g) for g in gpus_text.split(",") if g.strip()]
    except ValueError:
        raise UiInputError(f"search_gpus: expected N or N1,N2,... (got {gpus_text!r})") from None
    gb = cfg.global_batch
    if gb is None:
        gb = predict_training(model, hw, cfg).config.global_batch
    assert gb is not None   # resolve() fills it in
    objective = _one(q, "objective", "step_time")
    if objective not in OBJECTIVES:
        raise UiInputError(f"objective: must be one of {', '.join(OBJECTIVES)} "
                           f"(got {objective!r})")
    return {"num_gpus": gpus, "global_batch": int(gb), "seq_len": cfg.seq_len,
            "dtype": cfg.dtype, "flash_attention": cfg.flash_attention,
            "top": _int(q, "search_top", 10), "objective": objective,
            "max_tp": _int(q, "max_tp", hw.gpus_per_node),
            # the page's other training fields, where not their defaults, apply to every
            # candidate (text values coerced by the field table: one message for a bad one)
            "shared": {k: v for k in SEARCH_SHARED_FIELDS if k in st["given"]
                       for v in [coerce(TRAINING_FIELDS[k], st["given"][k])]
                       if v != TRAINING_FIELDS[k].default}}


def pareto_mask(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Points not dominated when both ``x`` and ``y`` are minimised (ties kept once)."""
    order = np.lexsort((y, x))
    keep = np.zeros(len(x), dtype=bool)
    best = np.inf
    for i in order:
        if y[i] < best:
            keep[i] = True
            best = y[i]
    return keep


def search_view(q: Mapping[str, str]) -> dict[str, Any]:
    """The top layouts of :func:`optimizers.search.search` and the Pareto front of step-time
    score against memory per GPU over every fitting candidate (float32 evaluation, as the
    search ranks them; the top rows are re-checked in float64 by the search)."""
    st = parse_state(q)
    a = _search_args(q, st)
    res = search(st["model"], st["hardware"], a["num_gpus"], a["global_batch"],
                 seq_len=a["seq_len"], dtype=a["dtype"], flash_attention=a["flash_attention"],
                 top=a["top"], objective=a["objective"], max_tp=a["max_tp"], **a["shared"])
    out = res.to_dict()
    usable = float(res.table["mem_usable"].iloc[0])
    fits = np.asarray(res.extra["fits"], dtype=bool)
    score = np.asarray(res.extra["scores"], dtype=np.float64)[fits]
    mem = usable - np.asarray(res.extra["headroom"], dtype=np.float64)[fits]
    front = pareto_mask(score, mem)
    cols = res.extra["space"].columns
    idx = np.flatnonzero(fits)
    rng = np.random.default_rng(0)
    cloud = rng.choice(len(score), size=min(len(score), MAX_CLOUD), replace=False)
    fr = np.flatnonzero(front)
    fr = fr[np.argsort(score[fr])]
    layout = ("num_gpus", "tp", "pp", "dp", "micro_batch", "vpp")
    out["pareto"] = {
        "x": "score", "y": "memory_per_gpu_bytes", "objective": res.objective,
        "memory_usable_bytes": usable,
        "front": [{"score": float(score[i]), "memory_per_gpu_bytes": float(mem[i]),
                   **{k: int(cols[k][idx[i]]) for k in layout}} for i in fr],
        "cloud": [[float(score[i]), float(mem[i])] for i in cloud],
    }
    gpus = ",".join(str(g) for g in a["num_gpus"])
    extra = ["--num-gpus", gpus, "--global-batch", str(a["global_batch"]), "--top",
             str(a["top"]), "--max-tp", str(a["max_tp"]), "--objective", a["objective"]]
    for name in ("seq_len", "dtype"):
        if name in st["given"]:
            extra += _flag(name, st["given"][name])
    if "flash_attention" in st["given"]:
        extra += _flag("flash_attention", st["given"]["flash_attention"])
    for name, value in a["shared"].items():
        extra += _flag(name, value)
    out["cli"] = cli_command(st, "search", extra, fields=False)
    return out


def _roofline_config(q: Mapping[str, str], st: Mapping[str, Any]) -> InferenceConfig:
    cfg: TrainingConfig = st["config"]
    fields: dict[str, Any] = {n: _one(q, n) for n in ROOFLINE_FIELDS}
    fields = {k: v for k, v in fields.items() if v is not None}
    tp = cfg.tp
    return InferenceConfig(tp=tp, num_gpus=tp, dtype=cfg.dtype, **fields)


def roofline_view(q: Mapping[str, str]) -> dict[str, Any]:
    """:func:`symcost.roofline.roofline_table` of one layer on the chosen GPU, for the
    workload ``batch``, ``input_len``, ``output_len`` at the layout's TP and dtype."""
    st = parse_state(q)
    icfg = _roofline_config(q, st)
    table = roofline_table(st["model"], [st["hardware"]], icfg)
    extra = ["--tp", str(icfg.tp), "--dtype", str(icfg.dtype)]
    for n in ROOFLINE_FIELDS:
        v = _one(q, n)
        if v is not None:
            extra += [INFERENCE_FIELDS[n].flag, v]
    return {"rows": stamp({"rows": table.to_dict(orient="records")})["rows"],
            "cli": cli_command(st, "roofline", extra, fields=False)}


def _sensitivity(q: Mapping[str, str]) -> tuple[Any, str, dict[str, Any]]:
    st = parse_state(q)
    output = _one(q, "output", "step_time")
    assert output is not None
    if output not in DEFAULT_OUTPUTS:
        raise UiInputError(f"output: must be one of {', '.join(DEFAULT_OUTPUTS)} "
                           f"(got {output!r})")
    return sensitivity(st["model"], st["hardware"], st["config"]), output, st


def sensitivity_view(q: Mapping[str, str]) -> dict[str, Any]:
    """Tornado data of :func:`symcost.sensitivity.sensitivity` for ``output``: per parameter
    the relative change of the output at its low and high side, largest first."""
    res, output, st = _sensitivity(q)
    bars = [{"name": p.name, "kind": p.kind, "method": p.method,
             "low": p.tornado[output][0], "high": p.tornado[output][1]}
            for p in res.parameters if output in p.tornado]
    bars.sort(key=lambda b: -max(abs(b["low"]), abs(b["high"])))
    extra = ["--plot-output", output, "--plot", "tornado.png"]
    return stamp({"output": output, "value": res.outputs[output], "step": TORNADO_STEP,
                  "bars": bars, "cli": cli_command(st, "sensitivity", extra)})


def _png(draw: Callable[[Path], None]) -> Response:
    """A PNG response of a :mod:`symcost.cli.plots` chart (they write files)."""
    with tempfile.TemporaryDirectory(prefix="symcost-ui-png-") as folder:
        path = Path(folder) / "chart.png"
        draw(path)
        return Response(path.read_bytes(), media_type="image/png")


# ----------------------------------------------------------------------------- app
def meta() -> dict[str, Any]:
    """What the page builds its forms from: presets, hardware ids, the training field table
    (name, kind, unit, default, doc, choices, flag), the roofline workload fields, formula
    names, search objectives, sensitivity outputs and the defaults."""
    defaults = TrainingConfig()

    def field_dict(f: Any, default: Any) -> dict[str, Any]:
        return {"name": f.name, "kind": f.kind, "unit": f.unit, "default": default,
                "doc": f.doc, "flag": f.flag,
                "choices": [str(c) for c in f.choices] if f.choices is not None else None}

    return {
        "models": list_models(), "hardware": list_hardware(),
        "default_model": DEFAULT_MODEL, "default_hardware": DEFAULT_HARDWARE,
        "fields": [field_dict(f, getattr(defaults, f.name)) for f in TRAINING_FIELDS.values()],
        "roofline_fields": [field_dict(INFERENCE_FIELDS[n], INFERENCE_FIELDS[n].default)
                            for n in ROOFLINE_FIELDS],
        "formulas": formula_names(), "objectives": list(OBJECTIVES),
        "sensitivity_outputs": list(DEFAULT_OUTPUTS), "views": list(VIEWS),
    }


def create_app() -> FastAPI:
    """The explorer's ASGI app (serve it with uvicorn, or test it with
    ``fastapi.testclient.TestClient``)."""
    app = FastAPI(title="symcost explorer", docs_url="/api/docs", redoc_url=None)

    def json_view(fn: Callable[[Mapping[str, str]], dict[str, Any]]) -> Callable[..., Any]:
        def endpoint(request: Request) -> Response:
            try:
                body = fn(dict(request.query_params))
            except Exception as exc:   # user errors become one line; bugs stay 500
                if not is_user_error(exc):
                    raise
                return JSONResponse({"error": one_line(exc)}, status_code=400)
            return Response(json.dumps(stamp(body), allow_nan=False),
                            media_type="application/json")
        return endpoint

    for view, fn in (("predict", predict_view), ("formula", formula_view),
                     ("search", search_view), ("roofline", roofline_view),
                     ("sensitivity", sensitivity_view)):
        app.add_api_route(f"/api/{view}", json_view(fn), methods=["GET"])

    @app.get("/api/meta")
    def api_meta() -> dict[str, Any]:
        return meta()

    @app.get("/api/hardware")
    def api_hardware(hardware: str = DEFAULT_HARDWARE) -> Response:
        try:
            doc = hardware_document(hardware)
        except HardwareSpecError as exc:
            return JSONResponse({"error": one_line(exc)}, status_code=400)
        return JSONResponse({"hardware": hardware, "numbers": editable_numbers(doc),
                             "description": doc.get("description", "")})

    def png_view(kind: str) -> Callable[..., Any]:
        def endpoint(request: Request) -> Response:
            q = dict(request.query_params)
            try:
                if kind == "roofline":
                    st = parse_state(q)
                    table = roofline_table(st["model"], [st["hardware"]],
                                           _roofline_config(q, st))
                    return _png(lambda path: plot_roofline(
                        table, path, title=f"{st['model'].name} on {st['hardware'].name}"))
                res, output, _ = _sensitivity(q)
                return _png(lambda path: tornado_chart(res, path, output))
            except Exception as exc:
                if not is_user_error(exc):
                    raise
                return JSONResponse({"error": one_line(exc)}, status_code=400)
        return endpoint

    app.add_api_route("/api/roofline.png", png_view("roofline"), methods=["GET"])
    app.add_api_route("/api/tornado.png", png_view("tornado"), methods=["GET"])

    @app.get("/")
    def index() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/app.js")
    def script() -> FileResponse:
        return FileResponse(STATIC / "app.js", media_type="text/javascript")

    return app


__all__ = ["UiInputError", "cli_command", "create_app", "editable_numbers", "meta",
           "pareto_mask", "parse_state"]
