"""The web explorer's JSON endpoints (``symcost ui``) return the Python API's numbers.

Each endpoint is called through FastAPI's test client and compared with a direct call of the
public API (predict_training, explain, search, roofline_table, sensitivity); hardware edits
and a pasted config.json are checked against specs built another way (``dataclasses.replace``
on the loaded spec, :func:`symcost.models.from_hf_config`); the CLI command each view shows
is run and prints the same step time. Skipped when FastAPI is not installed (the ``ui`` extra).
"""

from __future__ import annotations

import dataclasses
import json
import warnings

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("httpx")

from hwspecs import load_hardware  # noqa: E402
from optimizers.search import search  # noqa: E402
from symcost.api import predict_training  # noqa: E402
from symcost.config import ConfigError  # noqa: E402
from symcost.explain import explain  # noqa: E402
from symcost.fields import TRAINING_FIELDS  # noqa: E402
from symcost.models import from_hf_config  # noqa: E402
from symcost.roofline import roofline_table  # noqa: E402
from symcost.schema import stamp  # noqa: E402
from symcost.sensitivity import sensitivity  # noqa: E402

MODEL, GPU = "llama-3-8b", "h100-sxm5-80gb"
#: a Llama-style Hugging Face config (hand-written, TinyLlama-1.1B's shape).
HF_CONFIG = {"model_type": "llama", "hidden_size": 2048, "num_hidden_layers": 22,
             "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 5632,
             "vocab_size": 32000, "max_position_embeddings": 2048, "rms_norm_eps": 1e-5,
             "hidden_act": "silu", "tie_word_embeddings": False}


@pytest.fixture(scope="module")
def client():
    with warnings.catch_warnings():
        # starlette's test client announces its move from httpx to httpx2 at import
        warnings.simplefilter("ignore")
        from fastapi.testclient import TestClient

        from symcost.cli.webapp import create_app
    return TestClient(create_app())


def get(client, path, status=200, **params):
    r = client.get(path, params={k: str(v) for k, v in params.items()})
    assert r.status_code == status, r.text
    return r.json()


def test_meta_lists_every_training_field(client):
    """The form is generated from the field table: a new field appears by itself."""
    meta = get(client, "/api/meta")
    assert [f["name"] for f in meta["fields"]] == list(TRAINING_FIELDS)
    tp = next(f for f in meta["fields"] if f["name"] == "tp")
    assert tp["flag"] == "--tp" and tp["default"] == 1
    assert MODEL in meta["models"] and GPU in meta["hardware"]


def test_predict_equals_the_api(client):
    cfg = {"num_gpus": 16, "tp": 2, "global_batch": 64, "recompute": "selective", "zero": 1}
    d = get(client, "/api/predict", model=MODEL, hardware=GPU, **cfg)
    r = predict_training(MODEL, GPU, **cfg)
    assert d["result"] == json.loads(json.dumps(stamp(r.to_dict())))
    assert d["result"]["step_time_s"] == r.step_time
    assert d["memory_usable_bytes"] == r.values["mem_usable"]
    assert d["fits"] == r.fits
    assert {b["term"]: b["s"] for b in d["breakdown"]} == r.breakdown
    assert d["cli"]["command"] == (f"symcost train --model {MODEL} --hardware {GPU} "
                                   "--num-gpus 16 --tp 2 --global-batch 64 "
                                   "--recompute selective --zero 1")


def test_invalid_layout_is_the_rule_error(client):
    d = get(client, "/api/predict", 400, model=MODEL, hardware=GPU, tp=3)
    with pytest.raises(ConfigError) as exc:
        predict_training(MODEL, GPU, tp=3)
    assert d == {"error": str(exc.value)}
    assert d["error"].startswith("tp: ")
    assert get(client, "/api/predict", 400, model="no-such-model")["error"].startswith("model:")
    assert "hw.bogus" in get(client, "/api/predict", 400, **{"hw.bogus": 1})["error"]
    # a path is never loaded from the server's disk
    assert get(client, "/api/predict", 400, hardware="/etc/passwd")["error"]


def test_hardware_edit_equals_a_replaced_spec(client):
    """``hw.hbm_bandwidth_gbps=5000`` (YAML units) is the spec with 5e12 bytes/s."""
    d = get(client, "/api/predict", model=MODEL, hardware=GPU, num_gpus=8,
            **{"hw.hbm_bandwidth_gbps": 5000, "hw.peak_tflops.bf16": 1500})
    base = load_hardware(GPU)
    hw = dataclasses.replace(base, hbm_bandwidth=5e12,
                             peak_flops={**base.peak_flops, "bf16": 1.5e15})
    r = predict_training(MODEL, hw, num_gpus=8)
    assert d["result"]["step_time_s"] == pytest.approx(r.step_time, rel=1e-12)
    assert d["result"]["step_time_s"] != predict_training(MODEL, GPU, num_gpus=8).step_time
    assert "edited-hardware.yaml" in d["cli"]["files"]


def test_pasted_config_json(client):
    text = json.dumps(HF_CONFIG)
    d = get(client, "/api/predict", model_json=text, hardware=GPU, num_gpus=8)
    r = predict_training(from_hf_config(HF_CONFIG), GPU, num_gpus=8)
    assert d["result"]["step_time_s"] == r.step_time
    assert d["cli"]["files"] == {"config.json": text}
    bad = get(client, "/api/predict", 400, model_json="{not json")
    assert bad["error"].startswith("model_json: not valid JSON")


def test_cli_command_prints_the_same_numbers(client, tmp_path, monkeypatch):
    """The command shown (with its files written) prints the step time the page shows."""
    import shlex

    from typer.testing import CliRunner

    from symcost.cli.main import app

    d = get(client, "/api/predict", model_json=json.dumps(HF_CONFIG), hardware=GPU, num_gpus=8,
            tp=2, sp="true", **{"hw.hbm_bandwidth_gbps": 4000})
    monkeypatch.chdir(tmp_path)
    for name, text in d["cli"]["files"].items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    argv = shlex.split(d["cli"]["command"])
    assert argv[:2] == ["symcost", "train"] and "--sp" in argv
    res = CliRunner().invoke(app, argv[1:] + ["--json", "--no-interval"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["step_time_s"] == d["result"]["step_time_s"]


def test_formula_equals_explain(client):
    d = get(client, "/api/formula", model=MODEL, hardware=GPU, num_gpus=8, tp=2,
            formula="mem_total", keep="tp")
    f = explain("mem_total", MODEL, GPU, num_gpus=8, tp=2, keep=["tp"])
    assert d["value"] == f.value and d["formula"] == f.to_dict()["formula"]
    assert d["text"] == f.text()
    assert d["cli"]["command"].startswith("symcost explain mem_total --model")
    assert get(client, "/api/formula", 400, formula="nope")["error"].startswith("name:")


def test_search_top_and_pareto(client):
    d = get(client, "/api/search", model=MODEL, hardware=GPU, num_gpus=32, global_batch=256,
            search_top=5)
    res = search(MODEL, GPU, [32], 256, top=5, max_tp=8)
    want = json.loads(json.dumps(stamp(res.to_dict())))
    assert d["top"] == want["top"]
    assert d["candidates"] == res.candidates and d["fitting"] == res.fitting
    front = d["pareto"]["front"]
    # the best score is on the front, and no front point dominates another
    assert front[0]["score"] == pytest.approx(float(np.min(res.extra["scores"][res.extra["fits"]])))
    for a in front:
        for b in front:
            assert not (a["score"] < b["score"] and a["memory_per_gpu_bytes"]
                        < b["memory_per_gpu_bytes"]) or a is b
    assert all(p["memory_per_gpu_bytes"] <= d["pareto"]["memory_usable_bytes"] for p in front)


def test_search_takes_the_pages_other_training_fields(client):
    """A field set on the page (optimizer offload) applies to every candidate, as
    ``search(..., offload=...)`` and ``symcost search --offload`` take it; fields left at
    their defaults are not passed."""
    d = get(client, "/api/search", model=MODEL, hardware=GPU, num_gpus=32, global_batch=256,
            search_top=3, offload="optimizer", ep_dedup="off")
    res = search(MODEL, GPU, [32], 256, top=3, max_tp=8, offload="optimizer")
    want = json.loads(json.dumps(stamp(res.to_dict())))
    assert d["top"] == want["top"] and d["offload"] == "optimizer" and "ep_dedup" not in d
    assert all(r["zero"] >= 1 for r in d["top"])
    assert "--offload optimizer" in d["cli"]["command"]
    assert "--ep-dedup" not in d["cli"]["command"]


def test_pareto_mask_by_hand():
    from symcost.cli.webapp import pareto_mask

    x = np.array([1.0, 2.0, 3.0, 1.5, 3.0])
    y = np.array([5.0, 2.0, 1.0, 6.0, 0.5])
    assert pareto_mask(x, y).tolist() == [True, True, False, False, True]


def test_roofline_equals_the_table(client):
    d = get(client, "/api/roofline", model=MODEL, hardware=GPU, tp=2, batch=8, input_len=512)
    t = roofline_table(MODEL, [GPU], tp=2, num_gpus=2, batch=8, input_len=512)
    assert [r["time_s"] for r in d["rows"]] == t["time_s"].tolist()
    assert [r["bound"] for r in d["rows"]] == t["bound"].tolist()
    png = client.get("/api/roofline.png", params={"model": MODEL, "tp": "2"})
    assert png.status_code == 200 and png.content[:4] == b"\x89PNG"


def test_sensitivity_tornado_equals_the_api(client):
    d = get(client, "/api/sensitivity", model=MODEL, hardware=GPU, num_gpus=8, tp=2,
            output="mfu")
    res = sensitivity(MODEL, GPU, num_gpus=8, tp=2)
    want = {p.name: list(p.tornado["mfu"]) for p in res.parameters}
    assert {b["name"]: [b["low"], b["high"]] for b in d["bars"]} == want
    assert d["value"] == res.outputs["mfu"]
    assert get(client, "/api/sensitivity", 400, output="nope")["error"].startswith("output:")


def test_symcost_ui_command_serves_the_page(tmp_path):
    """The README's one command starts the server (``--no-browser``) and it answers."""
    import os
    import socket
    import subprocess
    import sys
    import time
    import urllib.request
    from pathlib import Path

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, SYMCOST_CACHE_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path / "ui.log"
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "symcost.cli", "ui", "--port",
                                 str(port), "--no-browser"], env=env,
                                stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/hardware?"
                                            f"hardware={GPU}", timeout=5) as r:
                    numbers = json.loads(r.read())["numbers"]
                break
            except OSError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "symcost ui did not start"
                time.sleep(0.2)
        assert numbers["hbm_bandwidth_gbps"] == 3350   # hwspecs/data/h100-sxm5-80gb.yaml
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5) as r:
            assert b"symcost explorer" in r.read()
    finally:
        proc.terminate()
        proc.wait(10)
