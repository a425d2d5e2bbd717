"""Calibrated efficiency parameters: one set per GPU generation, read from a YAML file.

The parameters are the ``efficiency`` symbols of :mod:`symcost.symbols` (achieved fractions
of peak, fixed overheads, reserved memory). The shipped defaults live in
``symcost/data/params.yaml``, whose ``provenance`` block records the data, date and command
that produced them. A user's calibration (``symcost calibrate``) is a file of the same form.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml

from . import symbols as S

#: physical range of each parameter: (low, high), inclusive. Link efficiencies stay at or
#: above half of line rate: nccl-tests bus bandwidth on NVLink and InfiniBand reaches 70-95%
#: of it (NVIDIA nccl-tests PERFORMANCE.md), so a fit that wants less is absorbing a
#: software inefficiency the model should show as error instead.
BOUNDS: dict[str, tuple[float, float]] = {
    "eff_gemm": (0.05, 1.0),
    "eff_attn": (0.05, 1.0),
    "eff_hbm": (0.05, 1.0),
    "eff_intra": (0.5, 1.0),
    "eff_inter": (0.5, 1.0),
    "t_layer_overhead": (0.0, 1e-2),
    "t_step_overhead": (0.0, 60.0),
    "mem_reserved": (0.0, 64e9),
    "mem_cache_frac": (0.0, 2.0),
    "mem_regrow_frac": (0.0, 1.0),
    "mem_offload_layers": (0.0, 40.0),
    "eff_hbm_infer": (0.05, 1.0),
    "eff_attn_infer": (0.05, 1.0),
    "eff_dequant": (0.05, 1.0),
    "gemm_overlap": (0.0, 1.0),
    "t_infer_step": (0.0, 1.0),
    "eff_host": (0.05, 1.0),
    "cpu_adam_rate": (1e7, 1e12),
    "t_sched_vllm": (0.0, 0.1),
    "t_sched_lightllm": (0.0, 0.1),
    "t_sched_tgi": (0.0, 0.1),
    "t_sched_trtllm": (0.0, 0.1),
    # dense GEMM half-efficiency tokens per micro-batch
    "gemm_m_half": (0.0, 65536.0),
    # [moe] grouped-GEMM half-efficiency tokens per expert; fixed time per MoE layer pass
    "moe_m_half": (0.0, 65536.0),
    # [moe] grouped-GEMM half-efficiency work per expert GEMM (FLOP)
    "moe_flop_half": (0.0, 1e12),
    "t_moe_layer": (0.0, 1e-2),
    # FlashAttention-2 relative to native attention kernels
    "fa2_ratio": (0.05, 1.0),
    # [hybrid] Mamba-2 scan, convolution and gated-norm kernels against their roofline
    "eff_ssm": (0.02, 1.0),
    # NVFP4 linear layers against the fp4 peak (0.5: no faster than fp8)
    "eff_fp4": (0.3, 1.0),
    # [finetune] fixed time of one NF4 dequantization call (QLoRA)
    "t_dequant_call": (0.0, 1e-2),
    # host time of one partition copy of a list-output all-gather (zero3_per_tensor)
    "t_gather_copy": (0.0, 1e-3),
}
PARAM_NAMES: tuple[str, ...] = tuple(s.name for s in S.by_kind("efficiency"))
assert set(PARAM_NAMES) == set(BOUNDS), "every efficiency symbol needs bounds"
#: a parameter added after parameter files were written takes, where a file lacks it, the
#: value of the parameter it refines, or a value that reproduces the model before it (so
#: files written before it keep working, unchanged): the caching-allocator
#: retention (``mem_cache_frac``, ``mem_regrow_frac``, ``mem_offload_layers``, fitted by
#: :func:`symcost.calibrate.fit_memory`) starts at 0;
#: [moe] the grouped-GEMM size penalties (``moe_m_half``, ``moe_flop_half``) and the fixed
#: MoE layer time start at 0 (the model before they existed); FlashAttention-2 runs at
#: native speed (``fa2_ratio`` 1); dense GEMMs have no size penalty (``gemm_m_half`` 0);
#: [hybrid] the Mamba-2 mixer's kernels run at their roofline (``eff_ssm`` 1); NVFP4 linear
#: layers run at the fp4 peak (``eff_fp4`` 1); [finetune] an NF4 dequantization costs only its
#: memory traffic (``t_dequant_call`` 0); a list-output all-gather costs only its ring
#: (``t_gather_copy`` 0).
FALLBACK: dict[str, str | float] = {"mem_cache_frac": 0.0,
                                    "mem_regrow_frac": 0.0, "mem_offload_layers": 0.0,
                                    "moe_m_half": 0.0, "moe_flop_half": 0.0,
                                    "t_moe_layer": 0.0, "fa2_ratio": 1.0,
                                    "gemm_m_half": 0.0, "eff_ssm": 1.0, "eff_fp4": 1.0,
                                    "t_dequant_call": 0.0, "t_gather_copy": 0.0}


#: parameters the model no longer has -> why; a file written while they existed still loads,
#: without them (their values, uncertainties and covariance rows and columns are dropped on
#: reading; the file itself is not rewritten).
RETIRED: dict[str, str] = {
    "eff_moe": "grouped expert GEMMs run at eff_gemm since 2026-11-26 "
               "(symcost.training.grouped_gemm_efficiency)",
}


#: a GPU generation split off after parameter files were written takes, where a file has no
#: values for it, those of the generation it was part of (Blackwell Ultra, B300/GB300, was
#: calibrated as Blackwell before 2026-11-24; Ampere GA10x, the RTX 3090, as Ampere before
#: 2026-11-26).
GENERATION_FALLBACK: dict[str, str] = {"blackwell_ultra": "blackwell",
                                       "ampere_ga10x": "ampere"}


class ParamsError(ValueError):
    """A malformed or out-of-range parameter file; the message names the field and the rule."""


@dataclass(frozen=True)
class Params:
    """Efficiency parameters per GPU generation.

    Attributes:
        generations: generation name -> {parameter name: value in base units}.
        provenance: free-form record of how the values were obtained (data, date, command).
        stderr: optional standard errors, same layout as ``generations``.
        covariance: optional per-generation covariance matrices (lists) over ``fitted``.
        fitted: optional per-generation tuple of the parameter names that were fitted.
    """

    generations: Mapping[str, Mapping[str, float]]
    provenance: Mapping[str, object] = field(default_factory=dict)
    stderr: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    covariance: Mapping[str, Sequence[Sequence[float]]] = field(default_factory=dict)
    fitted: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def values_generation(self, generation: str) -> str:
        """The generation whose values (and covariance) ``generation`` uses: itself, or where
        the file has none, the generation it was split from (:data:`GENERATION_FALLBACK`)."""
        if generation not in self.generations and \
                GENERATION_FALLBACK.get(generation) in self.generations:
            return GENERATION_FALLBACK[generation]
        return generation

    def has_generation(self, generation: str) -> bool:
        """True when :meth:`for_generation` has values for ``generation`` (its own, or those of
        the generation it was split from, :data:`GENERATION_FALLBACK`)."""
        return self.values_generation(generation) in self.generations

    def for_generation(self, generation: str) -> dict[str, float]:
        """Parameter values for ``generation`` (by symbol name).

        A generation of :data:`GENERATION_FALLBACK` missing from the file takes the values of
        the generation it was split from.

        Raises:
            ParamsError: no parameters for that generation (lists the known ones).
        """
        generation = self.values_generation(generation)
        try:
            return dict(self.generations[generation])
        except KeyError:
            raise ParamsError(f"params: no efficiency parameters for GPU generation "
                              f"{generation!r}; known: {', '.join(sorted(self.generations))}"
                              ) from None


def validate_values(where: str, values: Mapping[str, float]) -> dict[str, float]:
    """Check one generation's parameters: all present (a :data:`FALLBACK` parameter may be
    absent and takes its fallback's value), finite and within :data:`BOUNDS`.

    Raises:
        ParamsError: naming ``where``, the parameter and the rule.
    """
    out: dict[str, float] = {}
    values = {**{n: (f if isinstance(f, float) else values[f]) for n, f in FALLBACK.items()
                 if n not in values and (isinstance(f, float) or f in values)}, **values}
    missing = [n for n in PARAM_NAMES if n not in values]
    if missing:
        raise ParamsError(f"params: {where}: missing {', '.join(missing)}")
    unknown = set(values) - set(PARAM_NAMES)
    if unknown:
        raise ParamsError(f"params: {where}: unknown parameter(s) {', '.join(sorted(unknown))}")
    for name in PARAM_NAMES:
        v = values[name]
        try:
            v = float(v)
        except (TypeError, ValueError):
            raise ParamsError(f"params: {where}.{name} must be a number (got {v!r})") from None
        lo, hi = BOUNDS[name]
        if not math.isfinite(v) or not lo <= v <= hi:
            raise ParamsError(f"params: {where}.{name} must be finite and in [{lo}, {hi}] "
                              f"(got {v})")
        out[name] = v
    return out


def params_from_dict(data: Mapping[str, Any], where: str = "params") -> Params:
    """Build :class:`Params` from the parsed YAML layout (see ``symcost/data/params.yaml``).

    Raises:
        ParamsError: malformed layout or out-of-range values.
    """
    if not isinstance(data, Mapping) or "generations" not in data:
        raise ParamsError(f"{where}: expected a mapping with a 'generations' key")
    gens = data["generations"]
    if not isinstance(gens, Mapping) or not gens:
        raise ParamsError(f"{where}: 'generations' must be a non-empty mapping")
    gens, stderr, cov, fitted = _without_retired(
        gens, dict(data.get("stderr") or {}), dict(data.get("covariance") or {}),
        {k: tuple(v) for k, v in (data.get("fitted") or {}).items()})
    checked = {g: validate_values(f"{where}: {g}", v) for g, v in gens.items()}
    prov = dict(data.get("provenance") or {})
    if isinstance(prov.get("fitted_parameters"), list):
        prov["fitted_parameters"] = [n for n in prov["fitted_parameters"] if n not in RETIRED]
    return Params(checked, prov, stderr, cov, fitted)


def _without_retired(gens: Mapping[str, Any], stderr: dict[str, Any], cov: dict[str, Any],
                     fitted: dict[str, tuple[str, ...]]
                     ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any],
                                dict[str, tuple[str, ...]]]:
    """The file's sections with every :data:`RETIRED` parameter removed (values, standard
    errors, and its row and column of a generation's covariance, ordered as ``fitted``; the
    caller also drops it from ``provenance.fitted_parameters``)."""
    gens = {g: ({k: v for k, v in vals.items() if k not in RETIRED}
                if isinstance(vals, Mapping) else vals) for g, vals in gens.items()}
    stderr = {g: ({k: v for k, v in vals.items() if k not in RETIRED}
                  if isinstance(vals, Mapping) else vals) for g, vals in stderr.items()}
    for g, names in list(fitted.items()):
        keep = [i for i, n in enumerate(names) if n not in RETIRED]
        if len(keep) == len(names):
            continue
        fitted[g] = tuple(names[i] for i in keep)
        m = cov.get(g)
        if isinstance(m, list) and len(m) == len(names):
            cov[g] = [[m[i][j] for j in keep] for i in keep]
    return dict(gens), stderr, cov, fitted


def params_to_dict(params: Params) -> dict[str, Any]:
    """The YAML layout of ``params`` (inverse of :func:`params_from_dict`)."""
    out: dict[str, Any] = {"provenance": dict(params.provenance),
                 "generations": {g: {k: float(v) for k, v in vals.items()}
                                 for g, vals in params.generations.items()}}
    if params.stderr:
        out["stderr"] = {g: {k: float(v) for k, v in vals.items()}
                         for g, vals in params.stderr.items()}
    if params.covariance:
        out["covariance"] = {g: [[float(x) for x in row] for row in m]
                             for g, m in params.covariance.items()}
    if params.fitted:
        out["fitted"] = {g: list(v) for g, v in params.fitted.items()}
    return out


def load_params(path: str | os.PathLike[str] | None = None) -> Params:
    """Load efficiency parameters: the shipped defaults when ``path`` is None. A file written
    before a parameter existed loads: a :data:`FALLBACK` parameter takes its fallback, other
    missing parameters the shipped value of the same generation; one written while a
    :data:`RETIRED` parameter existed loads without it.

    Raises:
        ParamsError: unreadable file, malformed YAML or invalid values.
    """
    if path is None:
        return _default_params()
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except OSError as exc:
        raise ParamsError(f"params: cannot read {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ParamsError(f"params: {path}: invalid YAML ({exc})") from None
    return params_from_dict(_complete(data), str(path))


def _complete(data: Any) -> Any:
    """A user's parameter file written before a parameter existed: each generation's missing
    parameters (other than :data:`FALLBACK` ones) take the shipped calibration's value for that
    generation, so older files keep working unchanged (the file itself is not rewritten)."""
    if not isinstance(data, Mapping) or not isinstance(data.get("generations"), Mapping):
        return data
    shipped = _default_params().generations
    gens = {}
    for g, vals in data["generations"].items():
        if isinstance(vals, Mapping) and g in shipped:
            vals = {**{k: v for k, v in shipped[g].items()
                       if k not in vals and k not in FALLBACK}, **vals}
        gens[g] = vals
    return {**data, "generations": gens}


def save_params(params: Params, path: str | os.PathLike[str]) -> None:
    """Write ``params`` as YAML; refuses non-finite values (never writes NaN).

    Raises:
        ParamsError: a value is out of range or not finite.
    """
    for g, vals in params.generations.items():
        validate_values(g, vals)
    with open(path, "w", encoding="utf-8") as fh:
        yaml.safe_dump(params_to_dict(params), fh, sort_keys=False)


@functools.lru_cache(maxsize=1)
def _default_params() -> Params:
    text = resources.files("symcost").joinpath("data/params.yaml").read_text(encoding="utf-8")
    return params_from_dict(yaml.safe_load(text), "symcost/data/params.yaml")
