"""Tests for the hardware-spec database (hwspecs)."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable

import pytest
import yaml

from hwspecs import (
    DTYPES,
    GENERATIONS,
    HardwareSpec,
    HardwareSpecError,
    list_hardware,
    load_hardware,
)
from symcost.params import GENERATION_FALLBACK, Params, load_params

REQUIRED_IDS = ("a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200")
#: hardware ids of the shared measurements (../shared/validation README) and of issues 11/13
NEW_IDS = ("h800-sxm5-80gb", "a800-sxm4-80gb", "b300", "gb200", "gb300", "rtx-4090", "rtx-3090",
           "rtx-6000-ada", "l40s")
SPEC_NUMERIC_FIELDS = (
    "hbm_capacity",
    "hbm_bandwidth",
    "intra_node_bandwidth",
    "intra_node_latency",
    "inter_node_bandwidth",
    "inter_node_latency",
)
SOURCE_GROUPS = (
    "peak_tflops",
    "hbm_capacity_gb",
    "hbm_bandwidth_gbps",
    "gpus_per_node",
    "intra_node",
    "network",
)


# ---------------------------------------------------------------- built-in data


def test_list_hardware_contains_required_ids_sorted() -> None:
    ids = list_hardware()
    for hw_id in REQUIRED_IDS:
        assert hw_id in ids
    assert ids == sorted(ids)
    assert len(ids) == len(set(ids))
    ids.append("mutated")  # a fresh list each call
    assert "mutated" not in list_hardware()


#: optional field groups of a hardware file, cited in ``sources`` only when the file has them
OPTIONAL_GROUPS = {"host_link", "host_memory_gb", "exp_tera_per_s", "matmul_tflops_measured",
                   "matmul_tflops_measured_fp8"}


@pytest.mark.parametrize("hw_id", list_hardware())
def test_builtin_loads_and_is_complete(hw_id: str) -> None:
    spec = load_hardware(hw_id)
    assert isinstance(spec, HardwareSpec)
    assert spec.name == hw_id
    assert spec.description
    assert spec.generation in GENERATIONS
    assert spec.peak_flops and set(spec.peak_flops) <= DTYPES
    assert all(v > 0 for v in spec.peak_flops.values())
    for fname in SPEC_NUMERIC_FIELDS:
        assert getattr(spec, fname) > 0, fname
    assert isinstance(spec.gpus_per_node, int) and spec.gpus_per_node > 0
    # every HardwareSpec number carries a citation
    expected_cited = {"peak_flops", "gpus_per_node", *SPEC_NUMERIC_FIELDS}
    if spec.host_link_bandwidth is not None:  # optional host_link group, cited when present
        expected_cited |= {"host_link_bandwidth", "peer_to_peer", "bridge_bandwidth"}
    if spec.host_memory is not None:  # optional host_memory_gb, cited when present
        expected_cited.add("host_memory")
    if spec.peak_exp is not None:  # optional exp_tera_per_s, cited when present
        expected_cited.add("peak_exp")
    if spec.matmul_measured is not None:  # optional matmul_tflops_measured, cited when present
        expected_cited.add("matmul_measured")
    if spec.matmul_measured_fp8 is not None:  # optional matmul_tflops_measured_fp8 likewise
        expected_cited.add("matmul_measured_fp8")
    assert set(spec.sources) == expected_cited
    assert all(len(text) > 40 for text in spec.sources.values())


#: documented departures from the usual tensor-core ratios, each stated in the file's sources
#: (hw id -> (fp8/bf16, fp4/fp8) expected ratios)
RATIO_EXCEPTIONS: dict[str, tuple[float, float]] = {
    "l40s": (733 / 362.05, 2.0),  # L40S datasheet prints FP8 733 and BF16 362.05 dense (2.02:1)
    "gb300": (2.0, 3.0),  # Blackwell Ultra: dense NVFP4 15 PFLOPS = 3x dense FP8 5 PFLOPS
    "b300": (2.0, 3.0),  # Blackwell Ultra: dense NVFP4 13.5 PFLOPS = 3x dense FP8 4.5 PFLOPS
}
#: GeForce parts run tensor FP16/BF16 with FP32 accumulate at half rate, so TF32 = BF16 / 2
#: still holds; their GDDR6X ridge points are low (RTX 3090: 71 TFLOPS / 936 GB/s = 76)
GDDR_PARTS = ("rtx-3090", "rtx-4090", "rtx-6000-ada", "l40s")


@pytest.mark.parametrize("hw_id", list_hardware())
def test_builtin_peaks_are_dense_and_consistent(hw_id: str) -> None:
    """Catch dense/sparse mix-ups: tensor-core ratios are fixed per generation."""
    spec = load_hardware(hw_id)
    p = spec.peak_flops
    r8, r4 = RATIO_EXCEPTIONS.get(hw_id, (2.0, 2.0))
    assert p["bf16"] == p["fp16"]
    assert p["tf32"] == pytest.approx(p["bf16"] / 2, rel=0.03)
    if "fp8" in p:
        assert p["fp8"] == pytest.approx(r8 * p["bf16"], rel=1e-3)
    if "fp4" in p:
        assert p["fp4"] == pytest.approx(r4 * p["fp8"], rel=1e-3)
    # dense BF16 ridge points of 2020-2025 HBM accelerators sit between ~100 and ~350
    # FLOP/byte; GDDR parts span ~75 (RTX 3090) to ~420 (L40S: 362 TFLOPS / 864 GB/s)
    lo, hi = (50, 450) if hw_id in GDDR_PARTS else (100, 350)
    assert lo < p["bf16"] / spec.hbm_bandwidth < hi


@pytest.mark.parametrize("hw_id", list_hardware())
def test_builtin_file_cites_every_group(hw_id: str) -> None:
    path = Path(__file__).resolve().parents[1] / "hwspecs" / "data" / f"{hw_id}.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert set(doc["sources"]) == set(SOURCE_GROUPS) | (
        OPTIONAL_GROUPS & set(doc))
    # latencies are not datasheet numbers: the citation must say so
    assert "TYPICAL VALUE" in doc["sources"]["intra_node"]
    assert "TYPICAL VALUE" in doc["sources"]["network"]


def test_a100_sxm4_80gb_conversions() -> None:
    spec = load_hardware("a100-sxm4-80gb")
    assert spec.generation == "ampere"
    assert spec.hbm_bandwidth == 2.039e12
    assert spec.hbm_capacity == 80 * 2**30
    assert spec.inter_node_bandwidth == 25e9  # 8 x 200 Gb/s HDR / 8 GPUs
    assert spec.intra_node_bandwidth == 300e9  # 600 GB/s bidirectional NVLink 3
    assert spec.gpus_per_node == 8
    assert spec.host_memory == 2048 * 2**30  # DGX A100 640GB: 2 TB of system memory
    assert spec.peak("bf16") == 312e12
    assert spec.peak("fp16") == 312e12
    assert spec.peak("tf32") == 156e12
    assert spec.peak("fp32") == 19.5e12
    assert spec.peak("int8") == 624e12
    assert spec.intra_node_latency == pytest.approx(1.9e-6)
    assert spec.inter_node_latency == pytest.approx(4.0e-6)


def test_a100_sxm4_40gb_conversions() -> None:
    spec = load_hardware("a100-sxm4-40gb")
    assert spec.hbm_bandwidth == 1.555e12
    assert spec.hbm_capacity == 40 * 2**30
    assert spec.inter_node_bandwidth == 25e9
    assert spec.peak("bf16") == 312e12


def test_h100_conversions_and_ridge_point() -> None:
    spec = load_hardware("h100-sxm5-80gb")
    assert spec.generation == "hopper"
    assert spec.peak("bf16") == 989.4e12
    assert spec.peak("fp8") == 1978.9e12
    assert spec.hbm_bandwidth == 3.35e12
    assert spec.hbm_capacity == 80 * 2**30
    assert spec.intra_node_bandwidth == 450e9  # 900 GB/s bidirectional NVLink 4
    assert spec.inter_node_bandwidth == 50e9  # 8 x 400 Gb/s NDR / 8 GPUs
    ridge = spec.peak("bf16") / spec.hbm_bandwidth
    assert ridge == pytest.approx(295, rel=0.01)
    assert "fp4" not in spec.peak_flops


def test_h200_conversions() -> None:
    spec = load_hardware("h200-sxm-141gb")
    h100 = load_hardware("h100-sxm5-80gb")
    assert spec.peak_flops == h100.peak_flops  # same GH100 compute
    assert spec.hbm_capacity == 141 * 2**30
    assert spec.hbm_bandwidth == 4.8e12
    assert spec.intra_node_bandwidth == 450e9
    assert spec.inter_node_bandwidth == 50e9


def test_b200_conversions() -> None:
    spec = load_hardware("b200")
    assert spec.generation == "blackwell"
    assert spec.peak("bf16") == 2.25e15
    assert spec.peak("fp8") == 4.5e15
    assert spec.peak("fp4") == 9e15
    assert spec.hbm_capacity == 180 * 2**30
    assert spec.hbm_bandwidth == 8e12
    assert spec.intra_node_bandwidth == 900e9  # 1.8 TB/s bidirectional NVLink 5
    assert spec.inter_node_bandwidth == 50e9
    assert spec.gpus_per_node == 8


def test_optional_builtins_conversions() -> None:
    a100_pcie = load_hardware("a100-pcie-80gb")
    assert a100_pcie.hbm_bandwidth == 1.935e12
    assert a100_pcie.gpus_per_node == 4
    assert a100_pcie.inter_node_bandwidth == 3.125e9  # 1 x 100 Gb/s EDR / 4 GPUs
    assert a100_pcie.intra_node_bandwidth == 32e9  # PCIe Gen4 x16 per direction
    mi300x = load_hardware("mi300x")
    assert mi300x.generation == "cdna3"
    assert mi300x.peak("bf16") == 1307.4e12
    assert mi300x.hbm_capacity == 192 * 2**30
    assert mi300x.hbm_bandwidth == 5.3e12
    assert mi300x.intra_node_bandwidth == 448e9
    assert mi300x.inter_node_bandwidth == 50e9


# ------------------------------------------------- issue 11 / 13 hardware (datasheet values)


@pytest.mark.parametrize("hw_id", NEW_IDS)
def test_new_hardware_loads_with_a_source_per_number(hw_id: str) -> None:
    spec = load_hardware(hw_id)
    assert spec.name == hw_id
    path = Path(__file__).resolve().parents[1] / "hwspecs" / "data" / f"{hw_id}.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    # every numeric group has a citation, and every peak dtype is named in the peak citation
    assert set(doc["sources"]) == set(SOURCE_GROUPS) | (
        OPTIONAL_GROUPS & set(doc))
    for dtype in doc["peak_tflops"]:
        assert dtype.upper() in doc["sources"]["peak_tflops"].upper(), dtype


def test_h800_and_a800_are_h100_and_a100_with_nvlink_cut() -> None:
    h800, h100 = load_hardware("h800-sxm5-80gb"), load_hardware("h100-sxm5-80gb")
    assert h800.generation == "hopper"
    assert h800.peak_flops == h100.peak_flops  # same GH100 compute
    assert h800.hbm_bandwidth == h100.hbm_bandwidth == 3.35e12
    # H800 datasheet: NVLink 400 GB/s bidirectional -> 200 GB/s per direction (H100: 450)
    assert h800.intra_node_bandwidth == 200e9
    # DeepSeek-V3 report Sec. 3.2.2: IB 50 GB/s per GPU (8x 400 Gb/s per node)
    assert h800.inter_node_bandwidth == 50e9
    a800, a100 = load_hardware("a800-sxm4-80gb"), load_hardware("a100-sxm4-80gb")
    assert a800.generation == "ampere"
    assert a800.peak_flops == a100.peak_flops  # same GA100 compute
    assert a800.peak("bf16") == 312e12  # A100 datasheet, 80GB SXM column: BF16 312 dense
    assert a800.hbm_capacity == 80 * 2**30 and a800.hbm_bandwidth == 2.039e12
    assert a800.intra_node_bandwidth == 200e9  # NVLink 400 GB/s bidirectional (A100: 600)


def test_blackwell_ultra_and_nvl72() -> None:
    b300 = load_hardware("b300")
    assert b300.generation == "blackwell_ultra" and b300.gpus_per_node == 8
    assert b300.peak("bf16") == 2.25e15  # HGX B300: FP16/BF16 36 PFLOPS sparse / 8 GPUs / 2
    assert b300.peak("fp8") == 4.5e15  # HGX B300: FP8 72 PFLOPS sparse / 8 / 2
    assert b300.hbm_capacity == 288 * 2**30  # Blackwell Ultra: 288 GB HBM3e per GPU
    assert b300.intra_node_bandwidth == 900e9  # NVLink 5: 1.8 TB/s bidirectional
    assert b300.inter_node_bandwidth == 100e9  # 8x ConnectX-8 800 Gb/s / 8 GPUs
    # dense NVFP4 3x dense FP8 (Blackwell Ultra), = DGX B300's 144 PFLOPS sparse / 8 x 0.75
    # (GB300 NVL72's dense/sparse FP4), = 0.9 x GB300's 15 as every other peak
    assert b300.peak("fp4") == 13.5e15 == 3 * b300.peak("fp8")
    assert b300.peak("fp4") == pytest.approx(144e15 / 8 * 1080 / 1440)
    assert "int8" not in b300.peak_flops  # not sourced
    gb200 = load_hardware("gb200")
    assert gb200.gpus_per_node == 72  # one NVLink domain of 72 GPUs (DGX GB200 user guide)
    assert gb200.peak("bf16") == 2.5e15  # GB200 NVL72: FP16/BF16 360 PFLOPS sparse / 72 / 2
    assert gb200.peak("fp4") == 10e15  # GB200 NVL72: FP4 1,440 PFLOPS sparse / 72 / 2
    assert gb200.hbm_capacity == 186 * 2**30  # MLPerf Inference v6.1 Crusoe: "186 GB"
    assert gb200.hbm_bandwidth == 8e12  # 576 TB/s per rack / 72
    assert gb200.intra_node_bandwidth == 900e9  # 1.8 TB/s bidirectional per GPU
    assert gb200.inter_node_bandwidth == 50e9  # one 400 Gb/s ConnectX-7 per GPU
    gb300 = load_hardware("gb300")
    assert gb300.gpus_per_node == 72
    assert gb300.peak("fp4") == 15e15  # NVIDIA Blackwell Ultra blog: 15 PFLOPS dense NVFP4
    assert gb300.peak("bf16") == 2.5e15
    assert gb300.hbm_capacity == 288 * 2**30
    assert gb300.inter_node_bandwidth == 100e9  # one 800 Gb/s ConnectX-8 per GPU


def test_consumer_and_pcie_parts() -> None:
    rtx4090 = load_hardware("rtx-4090")
    assert rtx4090.generation == "ada"
    # Ada whitepaper V2.01 appendix, RTX 4090: BF16 tensor with FP32 accumulate 165.2 dense
    assert rtx4090.peak("bf16") == 165.2e12
    assert rtx4090.peak("fp8") == 330.3e12  # FP8 with FP32 accumulate 330.3 dense
    assert rtx4090.hbm_capacity == 24 * 2**30 and rtx4090.hbm_bandwidth == 1.008e12
    # no P2P: ASSUMED effective half of PCIe 4.0 x16's 32 GB/s per direction
    assert rtx4090.intra_node_bandwidth == 16e9
    assert "peer-to-peer is disabled" in rtx4090.description.lower()
    assert "host memory" in rtx4090.description
    rtx3090 = load_hardware("rtx-3090")
    assert rtx3090.generation == "ampere_ga10x"
    assert rtx3090.peak("bf16") == 71e12  # GA102 whitepaper appendix A: 71 with FP32 accumulate
    assert rtx3090.hbm_bandwidth == 936e9
    assert rtx3090.intra_node_bandwidth == 32e9  # PCIe 4.0 x16; NVLink bridge pairs not modelled
    assert "not representable" in rtx3090.description
    l40s = load_hardware("l40s")
    assert l40s.generation == "ada"
    assert l40s.peak("bf16") == 362.05e12  # L40S datasheet: BF16 362.05 | 733*
    assert l40s.hbm_bandwidth == 864e9 and l40s.hbm_capacity == 48 * 2**30
    assert l40s.intra_node_bandwidth == 32e9  # PCIe Gen4 x16: 64 GB/s bidirectional
    rtx6000 = load_hardware("rtx-6000-ada")
    assert rtx6000.generation == "ada"
    assert rtx6000.hbm_bandwidth == 960e9 and rtx6000.peak("fp32") == 91.1e12
    assert rtx6000.peak("fp8") == 1457.0e12 / 2  # datasheet: 1,457.0 TFLOPS FP8 with sparsity


def test_every_generation_has_efficiency_parameters() -> None:
    from symcost.params import load_params

    params = load_params()
    for hw_id in list_hardware():
        assert load_hardware(hw_id).generation in params.generations, hw_id
    # ada is calibrated on its own rows (ZHANG23 RTX 4090); cdna3 has none: hopper's values,
    # transferred (not fitted)
    assert "ada" not in params.provenance["transferred_from"] and params.fitted.get("ada")
    assert params.provenance["transferred_from"]["cdna3"] == "hopper"
    assert not params.fitted.get("cdna3")
    fitted = params.provenance["fitted_parameters"]
    assert all(params.generations["cdna3"][k] == params.generations["hopper"][k] for k in fitted)


def test_peak_unsupported_dtype_names_it() -> None:
    spec = load_hardware("a100-sxm4-80gb")
    with pytest.raises(HardwareSpecError, match=r"'fp8'.*supported: bf16, fp16, fp32, int8, tf32"):
        spec.peak("fp8")
    with pytest.raises(HardwareSpecError, match="'bfloat16'"):
        spec.peak("bfloat16")


# ---------------------------------------------------------------------- lookup


def test_unknown_id_lists_known_ids() -> None:
    known = ", ".join(list_hardware())
    with pytest.raises(HardwareSpecError, match=re.escape(f"unknown hardware 'x100'; known: {known}")):
        load_hardware("x100")


@pytest.mark.parametrize("almost", ["h100", "H100-SXM5-80GB", "a100", "h100-sxm5-80gb ", "b20"])
def test_lookup_is_exact_id_only(almost: str) -> None:
    with pytest.raises(HardwareSpecError, match="unknown hardware"):
        load_hardware(almost)


def test_builtins_are_cached() -> None:
    assert load_hardware("h100-sxm5-80gb") is load_hardware("h100-sxm5-80gb")


def test_import_has_no_side_effects() -> None:
    code = (
        "import hwspecs.loader as l; "
        "assert l._load_builtin.cache_info().currsize == 0; "
        "assert l._builtin_ids.cache_info().currsize == 0"
    )
    subprocess.run(
        [sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1]
    )


def test_load_hardware_rejects_non_path_non_str() -> None:
    with pytest.raises(HardwareSpecError, match="expects a hardware id or a path"):
        load_hardware(42)  # type: ignore[arg-type]


# ----------------------------------------------------------------- user files


def _valid_doc() -> dict[str, Any]:
    return {
        "name": "my-gpu",
        "description": "hypothetical accelerator for tests",
        "generation": "hopper",
        "gpus_per_node": 8,
        "peak_tflops": {"bf16": 100, "fp32": 12.5},
        "hbm_capacity_gb": 40,
        "hbm_bandwidth_gbps": 1000,
        "intra_node": {"technology": "NVLink", "gbps_per_direction": 200, "latency_us": 2},
        "network": {
            "technology": "InfiniBand",
            "nics_per_node": 4,
            "nic_gbit_per_s": 200,
            "latency_us": 5,
        },
        "sources": {group: f"test datasheet for {group}" for group in SOURCE_GROUPS},
    }


def _write(tmp_path: Path, doc: Any, name: str = "my.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def test_user_file_loads_by_path_and_str(tmp_path: Path) -> None:
    path = _write(tmp_path, _valid_doc())
    spec = load_hardware(path)
    assert spec == load_hardware(str(path))
    assert spec.name == "my-gpu"
    assert spec.peak("bf16") == 100e12
    assert spec.peak("fp32") == 12.5e12
    assert spec.hbm_capacity == 40 * 2**30
    assert spec.hbm_bandwidth == 1e12
    assert spec.intra_node_bandwidth == 200e9
    assert spec.intra_node_latency == pytest.approx(2e-6)
    assert spec.inter_node_bandwidth == 12.5e9  # 4 x 200 Gb/s / 8 GPUs
    assert spec.inter_node_latency == pytest.approx(5e-6)
    assert spec.sources["intra_node_latency"] == "test datasheet for intra_node"
    assert spec.sources["inter_node_bandwidth"] == "test datasheet for network"


def test_user_file_is_not_cached(tmp_path: Path) -> None:
    doc = _valid_doc()
    path = _write(tmp_path, doc)
    assert load_hardware(path).hbm_capacity == 40 * 2**30
    doc["hbm_capacity_gb"] = 80
    _write(tmp_path, doc)
    assert load_hardware(path).hbm_capacity == 80 * 2**30


def test_user_file_shadowing_builtin_name_is_allowed_by_path(tmp_path: Path) -> None:
    doc = _valid_doc()
    doc["name"] = "h100-sxm5-80gb"
    spec = load_hardware(_write(tmp_path, doc))
    assert spec.hbm_bandwidth == 1e12
    assert load_hardware("h100-sxm5-80gb").hbm_bandwidth == 3.35e12


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return mutate


def _delete(path: tuple[str, ...]) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        target = doc
        for key in path[:-1]:
            target = target[key]
        del target[path[-1]]

    return mutate


INVALID_CASES = [
    # (id, mutation, regex the message must match)
    ("missing-top", _delete(("hbm_bandwidth_gbps",)), r"missing required field 'hbm_bandwidth_gbps'"),
    ("missing-nested", _delete(("network", "nic_gbit_per_s")), r"missing required field 'network\.nic_gbit_per_s'"),
    ("negative", _set(("hbm_bandwidth_gbps",), -1), r"field 'hbm_bandwidth_gbps' must be > 0 \(got -1\)"),
    ("zero", _set(("hbm_capacity_gb",), 0), r"field 'hbm_capacity_gb' must be > 0 \(got 0\)"),
    ("negative-peak", _set(("peak_tflops", "bf16"), -5), r"field 'peak_tflops\.bf16' must be > 0"),
    ("negative-nested", _set(("intra_node", "latency_us"), -2), r"field 'intra_node\.latency_us' must be > 0"),
    ("inf", _set(("hbm_capacity_gb",), float("inf")), r"field 'hbm_capacity_gb' must be finite"),
    ("string-number", _set(("hbm_capacity_gb",), "80"), r"field 'hbm_capacity_gb' must be a number"),
    ("bool-number", _set(("hbm_capacity_gb",), True), r"field 'hbm_capacity_gb' must be a number"),
    ("unknown-top", _set(("hbm_bandwith_gbps",), 5), r"unknown field 'hbm_bandwith_gbps'.*did you mean 'hbm_bandwidth_gbps'"),
    ("unknown-nested", _set(("network", "nic_gbps"), 5), r"unknown field 'network\.nic_gbps'"),
    ("unknown-dtype", _set(("peak_tflops", "fp9"), 5), r"field 'peak_tflops\.fp9' is not a known dtype"),
    ("empty-peaks", _set(("peak_tflops",), {}), r"field 'peak_tflops' must list at least one dtype"),
    ("peaks-not-mapping", _set(("peak_tflops",), [100]), r"field 'peak_tflops' must be a mapping"),
    ("generation", _set(("generation",), "volta"), r"field 'generation' must be one of .* \(got 'volta'\)"),
    ("gpus-float", _set(("gpus_per_node",), 8.5), r"field 'gpus_per_node' must be a positive integer \(got 8\.5\)"),
    ("gpus-zero", _set(("gpus_per_node",), 0), r"field 'gpus_per_node' must be a positive integer"),
    ("nics-float", _set(("network", "nics_per_node"), 2.5), r"field 'network\.nics_per_node' must be a positive integer"),
    ("empty-name", _set(("name",), ""), r"field 'name' must be a non-empty string"),
    ("missing-technology", _delete(("intra_node", "technology")), r"missing required field 'intra_node\.technology'"),
    ("missing-source", _delete(("sources", "network")), r"field 'sources' is missing a citation for 'network'"),
    ("empty-source", _set(("sources", "peak_tflops"), "  "), r"field 'sources\.peak_tflops' must be a non-empty string"),
    ("unknown-source", _set(("sources", "hbm_bandwidth"), "x"), r"field 'sources\.hbm_bandwidth' is not a numeric field group"),
    ("missing-sources", _delete(("sources",)), r"missing required field 'sources'"),
]


@pytest.mark.parametrize(
    ("mutate", "pattern"), [c[1:] for c in INVALID_CASES], ids=[c[0] for c in INVALID_CASES]
)
def test_invalid_user_file(tmp_path: Path, mutate: Callable[[dict[str, Any]], None], pattern: str) -> None:
    doc = copy.deepcopy(_valid_doc())
    mutate(doc)
    path = _write(tmp_path, doc)
    with pytest.raises(HardwareSpecError, match=pattern) as info:
        load_hardware(path)
    message = str(info.value)
    assert message.startswith(f"hwspecs: {path}: ")
    assert "\n" not in message


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        ("name: a\nname: b\n", r"invalid YAML: duplicate key 'name' at line 2"),
        ("name: [unclosed\n", r"invalid YAML: .* at line \d+"),
        ("- just\n- a list\n", r"top level must be a mapping"),
        ("", r"file is empty"),
    ],
    ids=["duplicate-key", "syntax", "list", "empty"],
)
def test_malformed_user_file(tmp_path: Path, text: str, pattern: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(HardwareSpecError, match=pattern) as info:
        load_hardware(path)
    assert "\n" not in str(info.value)


def test_missing_user_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(HardwareSpecError, match=r"nope\.yaml: cannot read hardware file"):
        load_hardware(path)
    with pytest.raises(HardwareSpecError, match=r"cannot read hardware file"):
        load_hardware(str(path))


# --------------------------------------------------------------- HardwareSpec


def test_spec_is_immutable_hashable_and_picklable() -> None:
    spec = load_hardware("h100-sxm5-80gb")
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.hbm_bandwidth = 1.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.peak_flops["bf16"] = 1.0  # type: ignore[index]
    assert {spec: 1}[spec] == 1
    clone = pickle.loads(pickle.dumps(spec))
    assert clone == spec and hash(clone) == hash(spec)


def test_spec_replace_revalidates() -> None:
    spec = load_hardware("h100-sxm5-80gb")
    faster = dataclasses.replace(spec, hbm_bandwidth=2 * spec.hbm_bandwidth)
    assert faster.hbm_bandwidth == 6.7e12
    with pytest.raises(HardwareSpecError, match=r"field 'hbm_bandwidth' must be > 0"):
        dataclasses.replace(spec, hbm_bandwidth=-1.0)
    with pytest.raises(HardwareSpecError, match=r"field 'gpus_per_node' must be a positive integer"):
        dataclasses.replace(spec, gpus_per_node=0)
    with pytest.raises(HardwareSpecError, match=r"unknown dtype 'fp9'"):
        dataclasses.replace(spec, peak_flops={"fp9": 1.0})
    with pytest.raises(HardwareSpecError, match=r"field 'generation'"):
        dataclasses.replace(spec, generation="volta")


def test_spec_direct_construction() -> None:
    spec = HardwareSpec(
        name="toy",
        description="",
        generation="ampere",
        peak_flops={"bf16": 1e14},
        hbm_capacity=1e10,
        hbm_bandwidth=1e12,
        intra_node_bandwidth=1e11,
        intra_node_latency=1e-6,
        inter_node_bandwidth=1e10,
        inter_node_latency=5e-6,
        gpus_per_node=4,
    )
    assert spec.peak("bf16") == 1e14
    assert dict(spec.sources) == {}


def test_blackwell_ultra_is_its_own_generation_with_a_fallback():
    """B300/GB300 are calibrated as ``blackwell_ultra``; the shipped file fits it on its own
    rows (GEMM efficiency above Blackwell's, the higher power limit); a parameter file written
    before the split (no ``blackwell_ultra``) gives them Blackwell's values and covariance."""
    assert load_hardware("gb300").generation == "blackwell_ultra"
    assert load_hardware("gb200").generation == "blackwell"
    shipped = load_params()
    assert shipped.generations["blackwell_ultra"]["eff_gemm"] != \
        shipped.generations["blackwell"]["eff_gemm"]
    old = Params(generations={g: v for g, v in shipped.generations.items()
                              if g != "blackwell_ultra"}, provenance={})
    assert GENERATION_FALLBACK["blackwell_ultra"] == "blackwell"
    assert old.has_generation("blackwell_ultra") and not old.has_generation("volta")
    assert old.for_generation("blackwell_ultra") == shipped.generations["blackwell"]
    assert old.values_generation("blackwell_ultra") == "blackwell"


def test_ampere_ga10x_is_its_own_generation_with_a_fallback():
    """The RTX 3090 (GA102) is calibrated as ``ampere_ga10x``, apart from the A100/A800
    (GA100): the shipped file fits its server's CPU Adam rate on its own rows, about a fifth of
    the A800 server's; a parameter file written before the split gives it Ampere's values."""
    assert load_hardware("rtx-3090").generation == "ampere_ga10x"
    assert load_hardware("a800-sxm4-80gb").generation == "ampere"
    assert load_hardware("a100-sxm4-80gb").generation == "ampere"
    shipped = load_params()
    ga10x, ga100 = shipped.generations["ampere_ga10x"], shipped.generations["ampere"]
    assert ga10x["cpu_adam_rate"] < 0.4 * ga100["cpu_adam_rate"]
    old = Params(generations={g: v for g, v in shipped.generations.items()
                              if g != "ampere_ga10x"}, provenance={})
    assert GENERATION_FALLBACK["ampere_ga10x"] == "ampere"
    assert old.for_generation("ampere_ga10x") == ga100
    assert old.values_generation("ampere_ga10x") == "ampere"
