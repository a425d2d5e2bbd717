"""The measured matmul ceiling: compute times divide by ``peak * matmul_ceiling * efficiency``.

A GPU's spec peaks assume its boost clock; under a saturating matmul it sustains less (the
maximum achievable matmul FLOP/s, ``matmul_tflops_measured`` in the hardware files; with fp8
operands ``matmul_tflops_measured_fp8``, which training's fp8 GEMMs run against). Checked:
the loader's numbers and rules, a hand-computed GEMM time, the step time's elasticity in the
ceiling against a central finite difference, MFU still against the spec peak, and derived
(technology) accelerators keeping the reference's fraction.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import sympy as sp

from hwspecs import (MATMUL_CEILING_UNMEASURED, HardwareSpec, HardwareSpecError,
                     list_hardware, load_hardware)
from hwspecs.technology import derive_accelerator
from symcost import symbols as S
from symcost.api import predict_training, training_inputs
from symcost.config import TrainingConfig, hardware_bindings, inference_hardware_bindings
from symcost.ops.gemm import gemm
from symcost.training import gemm_peak

#: the source table's BF16 rows (TFLOP/s measured, TFLOP/s peak) for the files that carry them
MEASURED = {"a100-sxm4-80gb": (271.2, 312), "a100-pcie-80gb": (252.9, 312),
            "h100-sxm5-80gb": (794.5, 989.4), "b200": (1745.0, 2250), "b300": (1769.0, 2250),
            "gb200": (1822.0, 2500), "mi300x": (668.4, 1307.4)}
#: the same table's FP8 (float8_e4m3fn) rows (TFLOP/s measured, TFLOP/s dense fp8 peak of the
#: file); H800 carries the H100 SXM's row (the same SMs, clocks and power limit)
MEASURED_FP8 = {"h100-sxm5-80gb": (1402.6, 1978.9), "h800-sxm5-80gb": (1402.6, 1978.9),
                "h200-sxm-141gb": (1453.4, 1978.9), "b200": (3432.5, 4500),
                "b300": (3353.3, 4500), "gb200": (3615.6, 5000)}
CFG = dict(num_gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=4096)
FP8_CFG = dict(num_gpus=8, tp=1, micro_batch=1, global_batch=64, seq_len=8192)


@pytest.mark.parametrize("hw_id, suffix", [(h, "") for h in sorted(MEASURED)]
                         + [(h, "_fp8") for h in sorted(MEASURED_FP8)])
def test_measured_ceiling_is_the_measured_rate_over_its_dtype_peak(hw_id: str,
                                                                   suffix: str) -> None:
    """``matmul_measured`` over the bf16 peak, ``matmul_measured_fp8`` over the fp8 peak; the
    model binds ``matmul_ceiling`` and ``matmul_ceiling_fp8`` to them."""
    measured, peak = (MEASURED_FP8 if suffix else MEASURED)[hw_id]
    hw = load_hardware(hw_id)
    assert getattr(hw, "matmul_measured" + suffix) == pytest.approx(measured * 1e12, rel=1e-12)
    assert getattr(hw, "matmul_ceiling" + suffix) == pytest.approx(measured / peak, rel=1e-12)
    assert "matmul_measured" + suffix in hw.sources
    assert hardware_bindings(hw)["matmul_ceiling" + suffix] == pytest.approx(measured / peak,
                                                                             rel=1e-12)
    # every measured part holds a lower fraction of its fp8 peak (H100: 70.9% against 80.3%)
    assert hw.matmul_ceiling_fp8 < hw.matmul_ceiling or hw.matmul_measured_fp8 is None


def test_every_builtin_ceiling_is_a_fraction_and_unmeasured_files_take_the_default() -> None:
    for hw_id in list_hardware():
        hw = load_hardware(hw_id)
        assert 0.5 < hw.matmul_ceiling <= 1.0, hw_id
        if hw.matmul_measured is None:
            assert hw.matmul_ceiling == MATMUL_CEILING_UNMEASURED, hw_id
    # GB300 has no measurement: the median of the table's NVIDIA rows
    assert load_hardware("gb300").matmul_ceiling == 0.803
    assert hardware_bindings(load_hardware("b200"))["matmul_ceiling"] == pytest.approx(
        1745.0 / 2250)


def test_a_measurement_above_the_peak_or_without_a_bf16_peak_is_refused() -> None:
    h100 = load_hardware("h100-sxm5-80gb")
    with pytest.raises(HardwareSpecError, match="'matmul_measured'.*exceeds the bf16 peak"):
        dataclasses.replace(h100, matmul_measured=1000e12)
    with pytest.raises(HardwareSpecError, match="'matmul_measured' needs a bf16 peak"):
        dataclasses.replace(h100, peak_flops={"fp16": 989.4e12}, matmul_measured=800e12)
    with pytest.raises(HardwareSpecError, match="'matmul_measured' must be > 0"):
        dataclasses.replace(h100, matmul_measured=-1.0)


def test_a_yaml_file_needs_a_citation_for_its_measurement(tmp_path: Path) -> None:
    text = (Path(__file__).parents[1] / "hwspecs" / "data" / "h100-sxm5-80gb.yaml").read_text()
    # without the fp8 measurement (value and citation, the file's last entry), the bf16
    # citation is the last entry: drop it, then drop the value and keep the citation
    text = "\n".join(line for line in text[:text.index("  matmul_tflops_measured_fp8: >-")]
                      .splitlines() if not line.startswith("matmul_tflops_measured_fp8:")) + "\n"
    cited_at = text.index("  matmul_tflops_measured: >-")
    assert "\n  " not in text[cited_at + 1:].replace("\n    ", "")  # nothing cited after it
    uncited = text[:cited_at]
    path = tmp_path / "h100-uncited.yaml"
    path.write_text(uncited.replace("name: h100-sxm5-80gb", "name: h100-uncited"))
    with pytest.raises(HardwareSpecError, match="missing a citation for 'matmul_tflops_measured'"):
        load_hardware(path)
    unmeasured = text.replace("matmul_tflops_measured: 794.5", "")
    path = tmp_path / "h100-unmeasured.yaml"
    path.write_text(unmeasured.replace("name: h100-sxm5-80gb", "name: h100-unmeasured"))
    with pytest.raises(HardwareSpecError, match="'sources.matmul_tflops_measured' cites a group"):
        load_hardware(path)
    over = text.replace("matmul_tflops_measured: 794.5", "matmul_tflops_measured: 1200")
    path = tmp_path / "h100-over.yaml"
    path.write_text(over.replace("name: h100-sxm5-80gb", "name: h100-over"))
    with pytest.raises(HardwareSpecError, match="exceeds the bf16 peak"):
        load_hardware(path)


def test_gemm_time_divides_by_the_ceiling() -> None:
    """A compute-bound 8192^3 GEMM on B200 at eff_gemm 0.5: 2*8192^3 FLOP / (2250e12 *
    1745/2250 * 0.5) = 1.2601 ms, i.e. at half of the measured 1,745 TFLOP/s."""
    n = 8192
    cost = gemm(n, n, n, S.peak_flops_16)
    vals = {**hardware_bindings(load_hardware("b200")), "eff_gemm": 0.5, "eff_hbm": 0.8,
            "BYTES_ACT": 2.0}
    t = float(cost.time.xreplace({s: sp.Float(vals[s.name]) for s in cost.time.free_symbols}))
    assert t == pytest.approx(2 * n**3 / (1745e12 * 0.5), rel=1e-12)
    assert t == pytest.approx(1.2601e-3, rel=1e-4)


def test_step_time_elasticity_in_the_ceiling_matches_finite_differences(
        step_time_elasticity) -> None:
    """Autodiff through the lowered model: d log(step) / d log(ceiling) is minus the share of
    the step that is compute-bound, between -1 and 0; a central difference agrees."""
    inputs = training_inputs("llama3-8b", "h100-sxm5-80gb", TrainingConfig(**CFG))
    e0, fd = step_time_elasticity(inputs, "matmul_ceiling")
    assert e0 == pytest.approx(fd, rel=1e-3)
    assert -1.0 < e0 < -0.3


def test_mfu_stays_against_the_spec_peak() -> None:
    """Raising the measured rate to the peak speeds the step up, and MFU * step time (model
    FLOP over the spec peak) does not move."""
    h100 = load_hardware("h100-sxm5-80gb")
    full = dataclasses.replace(h100, matmul_measured=h100.peak("bf16"))
    a = predict_training("llama3-8b", h100, **CFG)
    b = predict_training("llama3-8b", full, **CFG)
    assert b.step_time < a.step_time
    assert a.values["mfu"] * a.step_time == pytest.approx(b.values["mfu"] * b.step_time,
                                                          rel=1e-12)


def test_a_derived_accelerator_keeps_the_reference_fraction() -> None:
    ref = load_hardware("h100-sxm5-80gb")
    der = derive_accelerator(3, "hbm3e", "nvlink5", "ib-xdr", die_area_mm2=814, power_w=700,
                             reference="h100-sxm5-80gb")
    assert isinstance(der, HardwareSpec)
    assert der.peak("bf16") != ref.peak("bf16")
    assert der.matmul_ceiling == pytest.approx(ref.matmul_ceiling, rel=1e-12)
    assert "DERIVED" in der.sources["matmul_measured"]


# ------------------------------------------------------------------ the fp8 ceiling (2026-12-07)

def test_an_unmeasured_fp8_ceiling_is_the_bf16_fraction() -> None:
    for hw_id in list_hardware():
        hw = load_hardware(hw_id)
        if hw.matmul_measured_fp8 is None:
            assert hw_id not in MEASURED_FP8
            assert hw.matmul_ceiling_fp8 == hw.matmul_ceiling, hw_id
    assert load_hardware("gb300").matmul_ceiling_fp8 == 0.803


def test_an_fp8_measurement_above_the_peak_or_without_an_fp8_peak_is_refused(
        tmp_path: Path) -> None:
    h100 = load_hardware("h100-sxm5-80gb")
    with pytest.raises(HardwareSpecError, match="'matmul_measured_fp8'.*exceeds the fp8 peak"):
        dataclasses.replace(h100, matmul_measured_fp8=2000e12)
    a100 = load_hardware("a100-sxm4-80gb")  # no fp8 peak
    with pytest.raises(HardwareSpecError, match="'matmul_measured_fp8' needs a fp8 peak"):
        dataclasses.replace(a100, matmul_measured_fp8=300e12)
    with pytest.raises(HardwareSpecError, match="'matmul_measured_fp8' must be > 0"):
        dataclasses.replace(h100, matmul_measured_fp8=0.0)
    text = (Path(__file__).parents[1] / "hwspecs" / "data" / "h100-sxm5-80gb.yaml").read_text()
    cited_at = text.index("  matmul_tflops_measured_fp8: >-")
    path = tmp_path / "h100-uncited.yaml"
    path.write_text(text[:cited_at].replace("name: h100-sxm5-80gb", "name: h100-uncited"))
    with pytest.raises(HardwareSpecError,
                       match="missing a citation for 'matmul_tflops_measured_fp8'"):
        load_hardware(path)


def test_fp8_gemm_time_divides_by_the_fp8_ceiling() -> None:
    """A compute-bound 8192^3 GEMM on H100 at eff_gemm 0.5 through the training model's GEMM
    rate (``training.gemm_peak``): in fp8 2*8192^3 FLOP / (1978.9e12 * 1402.6/1978.9 * 0.5)
    = 1.5679 ms, at half of the measured 1,402.6 TFLOP/s; in bf16 at half of 794.5."""
    n = 8192
    cost = gemm(n, n, n, gemm_peak())
    vals = {**hardware_bindings(load_hardware("h100-sxm5-80gb")), "eff_gemm": 0.5,
            "eff_hbm": 0.8, "eff_fp4": 1.0, "BYTES_ACT": 2.0, "fp4": 0.0}

    def time(fp8: float) -> float:
        v = {**vals, "fp8": fp8}
        return float(cost.time.xreplace({s: sp.Float(v[s.name]) for s in cost.time.free_symbols}))

    assert time(1.0) == pytest.approx(2 * n**3 / (1402.6e12 * 0.5), rel=1e-12)
    assert time(1.0) == pytest.approx(1.5679e-3, rel=1e-4)
    assert time(0.0) == pytest.approx(2 * n**3 / (794.5e12 * 0.5), rel=1e-12)


def test_only_fp8_runs_depend_on_the_fp8_measurement() -> None:
    """Raising H100's fp8 measurement to its bf16 fraction of the fp8 peak (a ratio of 1, the
    rule of an unmeasured GPU) speeds an fp8 run up and leaves a bf16 run, and serving's fp8
    GEMMs (bound at the bf16 fraction), unchanged; MFU * step time (model FLOP over the fp8 spec
    peak) does not move."""
    h100 = load_hardware("h100-sxm5-80gb")
    flat = dataclasses.replace(h100, matmul_measured_fp8=h100.peak("fp8") * h100.matmul_ceiling)
    assert flat.matmul_ceiling_fp8 == pytest.approx(h100.matmul_ceiling, rel=1e-12)
    a = predict_training("llama3-8b", h100, dtype="fp8", **FP8_CFG)
    b = predict_training("llama3-8b", flat, dtype="fp8", **FP8_CFG)
    assert b.step_time < a.step_time
    assert a.values["mfu"] * a.step_time == pytest.approx(b.values["mfu"] * b.step_time,
                                                          rel=1e-12)
    c = predict_training("llama3-8b", h100, dtype="bf16", **FP8_CFG)
    d = predict_training("llama3-8b", flat, dtype="bf16", **FP8_CFG)
    assert c.step_time == d.step_time
    served = inference_hardware_bindings(h100, "fp8")
    assert served["matmul_ceiling_fp8"] == served["matmul_ceiling"] == h100.matmul_ceiling


def test_a_derived_accelerator_keeps_the_reference_fp8_fraction() -> None:
    ref = load_hardware("h100-sxm5-80gb")
    der = derive_accelerator(3, "hbm3e", "nvlink5", "ib-xdr", die_area_mm2=814, power_w=700,
                             reference="h100-sxm5-80gb")
    assert der.matmul_ceiling_fp8 == pytest.approx(ref.matmul_ceiling_fp8, rel=1e-12)
    assert "DERIVED" in der.sources["matmul_measured_fp8"]
