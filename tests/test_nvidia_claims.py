"""NVIDIA's claims data (symcost/data/nvidia_claims.yaml) and benchmarks/nvidia_claims.py."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from types import ModuleType

import pytest

from hwspecs import list_hardware
from symcost.models import ModelSpecError

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "nvidia_claims.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("nvidia_claims", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_every_claim_is_sourced_and_runnable_in_principle() -> None:
    claims = _script().load_claims()
    assert len({c["id"] for c in claims}) == len(claims) >= 8
    hw = set(list_hardware())
    for c in claims:
        assert c["from"] in hw and c["to"] in hw, c["id"]
        assert c["claimed_speedup"] > 1 and c["basis"] and len(c["conditions"]) > 60
        src = c["source"]
        assert src["url"].startswith("https://") and src["document"] and src["date"][:2] == "20"
        w = c["workload"]
        need = (("num_gpus", "global_batch") if w["kind"] == "train"
                else ("num_gpus", "input_len", "output_len", "tpot_target_ms"))
        assert all(int(w[k]) > 0 for k in need), c["id"]
    # the claims the issue names are there
    ids = {c["id"] for c in claims}
    assert {"dgx-b200-vs-dgx-h100-training", "dgx-b200-vs-dgx-h100-inference",
            "gb200-nvl72-vs-h100-training", "gb200-nvl72-vs-h100-inference",
            "h100-vs-a100-training-gpt3"} <= ids


def test_unknown_moe_model_is_pending_not_a_crash(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = _script()

    def missing(name: str) -> None:
        raise ModelSpecError(f"unknown model {name!r}")

    monkeypatch.setattr(mod, "get_model", missing)
    claim = next(c for c in mod.load_claims() if c["id"] == "gb200-nvl72-vs-h100-inference")
    status, result, msg = mod.predict(claim)
    assert (status, result, msg) == ("pending", None, "pending: MoE model not available")


def test_dense_claim_is_predicted_with_attribution() -> None:
    mod = _script()
    claim = next(c for c in mod.load_claims()
                 if c["id"] == "mlperf-inference-v4.1-b200-vs-h100-llama2-70b")
    status, r, _ = mod.predict(claim)
    assert status == "ok" and r is not None and r.speedup > 1.0
    assert math.prod(r.factor_speedups().values()) == pytest.approx(r.speedup, rel=1e-6)
