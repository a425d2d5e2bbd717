"""Test-session setup: lowered-source and JAX caches go to a temporary directory, not ~/.cache;
shared fixtures.

The session also turns on JAX's persistent compilation cache there (as the CLI entry does), so
a function compiled by one xdist worker or CLI subprocess is loaded, not compiled again, by
the others (the training model's Jacobian alone takes ~9 s to compile on 2 cores)."""

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pandas as pd
import pytest

from symcost.cli import enable_compilation_cache
from symcost.sensitivity import elasticities
from symcost.validate import PreparedRow, load_measurements, prepare_rows

#: the published measurements beside the repository (``../shared/validation/``).
SHARED_MEASUREMENTS = (Path(__file__).resolve().parents[2] / "shared" / "validation"
                       / "published_measurements.csv")


#: the cache directory this process made, removed when the session ends
_MADE_CACHE_DIR: list[str] = []


def pytest_configure(config):
    if "SYMCOST_CACHE_DIR" not in os.environ:  # xdist workers inherit the controller's
        os.environ["SYMCOST_CACHE_DIR"] = tempfile.mkdtemp(prefix="symcost-test-cache-")
        _MADE_CACHE_DIR.append(os.environ["SYMCOST_CACHE_DIR"])
    enable_compilation_cache()


#: the slowest test files (summed test time on 2 cores, 2026-12-07, after the sensitivity
#: compile shrank: test_ui_api 75 s -> 16 s), run first: pytest-xdist's
#: ``--dist loadfile`` hands out files in collection order, so a slow file collected last
#: would run alone at the end while the other worker idles (a 2-core run: 33 s -> 19 s of
#: wall time beyond half the summed test time).
SLOW_FILES_FIRST = ("test_search.py", "test_explain.py", "test_dissect.py",
                    "test_distributed.py", "test_cli_bad_inputs.py", "test_validate.py",
                    "test_search_distributed.py", "test_rules.py", "test_json_schema.py",
                    "test_sweep.py", "test_cli_train.py", "test_examples.py", "test_types.py",
                    "test_lower_properties.py", "test_finetune.py", "test_inference.py",
                    "test_training.py", "test_ui_api.py", "test_pipeline_split.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(SLOW_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: file order kept


def pytest_unconfigure(config):
    for path in _MADE_CACHE_DIR:
        shutil.rmtree(path, ignore_errors=True)
        os.environ.pop("SYMCOST_CACHE_DIR", None)
    _MADE_CACHE_DIR.clear()


@pytest.fixture
def old_generation_values() -> dict[str, float]:
    """One generation's values as a parameter file written before the MoE terms, ``fa2_ratio``
    and ``gemm_m_half`` existed held them (for the fallback tests of :data:`FALLBACK`)."""
    return {"eff_gemm": 0.6, "eff_attn": 0.3, "eff_hbm": 0.8, "eff_intra": 0.7,
            "eff_inter": 0.9, "t_layer_overhead": 2e-5, "t_step_overhead": 0.1,
            "mem_reserved": 2e9, "eff_hbm_infer": 0.9, "eff_attn_infer": 0.75,
            "eff_dequant": 0.8, "gemm_overlap": 0.3, "t_infer_step": 0.003, "eff_host": 0.8,
            "cpu_adam_rate": 1e9, "t_sched_vllm": 0.0, "t_sched_lightllm": 0.0,
            "t_sched_tgi": 0.0, "t_sched_trtllm": 0.0}


@pytest.fixture(scope="session")
def bridge_row() -> Callable[..., dict]:
    """``bridge_row(container, model, gpu, hw, dtype)``: one Megatron-Bridge row (a
    ``tokens_per_s_per_gpu`` measurement of an 8-GPU EP8 layout, micro-batch 4, 512 sequences
    of 4,096 tokens) whose notes name NeMo ``container``, for the recipe-table tests of
    :mod:`symcost.validate`."""
    def row(container: str, model: str, gpu: str, hw: str, dtype: str) -> dict:
        return {"case_id": f"MBRIDGE-{container}-{model}-{gpu}-8g-x-tpsg", "workload": "train",
                "model": model, "gpu": gpu, "hardware": hw, "n_gpus": 8, "tp": 1, "pp": 1,
                "ep": 8, "micro_batch": 4, "global_batch": 512, "seq_len": 4096,
                "dtype": dtype, "metric": "tokens_per_s_per_gpu", "value": 1000.0,
                "notes": f"container=NeMo {container}; Megatron-Bridge performance recipes"}
    return row


@pytest.fixture(scope="session")
def shared_measurements() -> pd.DataFrame:
    """``../shared/validation/published_measurements.csv`` loaded once per session (the test
    is skipped when the shared folder is not beside the repository)."""
    if not SHARED_MEASUREMENTS.exists():
        pytest.skip("shared measurements not available")
    return load_measurements(SHARED_MEASUREMENTS)


@pytest.fixture(scope="session")
def shared_rows(shared_measurements: pd.DataFrame) -> Callable[[str], list[PreparedRow]]:
    """``shared_rows(prefix)``: the prepared rows (:func:`symcost.validate.prepare_rows`) of
    the shared measurements whose ``case_id`` starts with ``prefix``."""
    def rows(prefix: str) -> list[PreparedRow]:
        df = shared_measurements
        return prepare_rows(df[df.case_id.str.startswith(prefix)])[0]
    return rows


@pytest.fixture(scope="session")
def step_time_elasticity() -> Callable[[dict[str, float], str], tuple[float, float]]:
    """``step_time_elasticity(inputs, name)``: the step time's elasticity in the input ``name``
    (``d log t / d log x``) by autodiff (:func:`symcost.sensitivity.elasticities`) and by a
    central finite difference of the same compiled model (relative step 1e-4)."""
    def check(inputs: dict[str, float], name: str) -> tuple[float, float]:
        def value_and_elasticity(x: dict[str, float]) -> tuple[float, float]:
            el = elasticities(x, wrt=[name], outputs=["step_time"])["step_time"]
            return float(el["value"][0]), float(el[name][0])

        t0, e0 = value_and_elasticity(inputs)
        h = 1e-4
        tu, _ = value_and_elasticity(dict(inputs, **{name: inputs[name] * (1 + h)}))
        td, _ = value_and_elasticity(dict(inputs, **{name: inputs[name] * (1 - h)}))
        return e0, (tu - td) / (2 * h) / t0
    return check
