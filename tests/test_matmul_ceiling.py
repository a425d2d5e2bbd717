"""The measured matmul ceiling: compute times divide by ``peak * matmul_ceiling * efficiency``.

A GPU's spec peaks assume its boost clock; under a saturating matmul it sustains less (the
maximum achievable matmul FLOP/s, ``matmul_tflops_measured`` in the hardware files). Checked:
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
from symcost.config import TrainingConfig, hardware_bindings
from symcost.ops.gemm import gemm

#: the source table's BF16 rows (TFLOP/s measured, TFLOP/s peak) for the files that carry them
MEASURED = {"a100-sxm4-80gb": (271.2, 312), "a100-pcie-80gb": (252.9, 312),
            "h100-sxm5-80gb": (794.5, 989.4), "b200": (1745.0, 2250), "b300": (1769.0, 2250),
            "gb200": (1822.0, 2500), "mi300x": (668.4, 1307.4)}
CFG = dict(num_gpus=8, tp=8, micro_batch=1, global_batch=8, seq_len=4096)


@pytest.mark.parametrize("hw_id", sorted(MEASURED))
def test_measured_ceiling_is_the_measured_rate_over_the_bf16_peak(hw_id: str) -> None:
    measured, peak = MEASURED[hw_id]
    hw = load_hardware(hw_id)
    assert hw.matmul_measured == pytest.approx(measured * 1e12, rel=1e-12)
    assert hw.matmul_ceiling == pytest.approx(measured / peak, rel=1e-12)
    assert "matmul_measured" in hw.sources


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
    # the citation is the file's last entry: drop it, then drop the value and keep the citation
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
