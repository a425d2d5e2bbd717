"""Public training API: predictions from specs, and vectorized evaluation of the compiled model."""

from __future__ import annotations

import functools
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import sympy as sp

from hwspecs import HardwareSpec, load_hardware

from . import symbols as S
from .config import (TrainingConfig, hardware_bindings, model_bindings, parallel_bindings,
                     resolve)
from .evaluate import evaluate_broadcast
from .functions import free_symbols_shared
from .lower import CompiledModel, lower
from .models import ModelSpec, get_model
from .params import Params, load_params
from .schema import keyed, stamp
from .substitution import formula_with
from .training import BREAKDOWN, MEMORY, training_expressions


def as_model(model: ModelSpec | str | os.PathLike[str]) -> ModelSpec:
    """``model`` as a :class:`~symcost.models.ModelSpec`: a spec is returned as is, a string
    is a preset id or alias, or a path to a Hugging Face ``config.json`` / model YAML.

    Raises:
        ModelSpecError: unknown preset or invalid file.
    """
    return model if isinstance(model, ModelSpec) else get_model(model)


def as_hardware(hw: HardwareSpec | str | os.PathLike[str]) -> HardwareSpec:
    """``hw`` as a :class:`~hwspecs.HardwareSpec`: a spec is returned as is, a string is a
    hardware id or a path to a hardware YAML.

    Raises:
        HardwareSpecError: unknown id or invalid file.
    """
    return hw if isinstance(hw, HardwareSpec) else load_hardware(hw)


@functools.lru_cache(maxsize=4)
def training_model(precision: str = "float64") -> CompiledModel:
    """The training expressions lowered once to a jit-compiled JAX function.

    Args:
        precision: ``float32`` or ``float64``.

    Returns:
        :class:`~symcost.lower.CompiledModel` over the symbols the training expressions use
        (in :data:`symcost.symbols.ALL_SYMBOLS` order), outputs as in
        :func:`symcost.training.training_expressions`.
    """
    return lower(training_expressions(), training_inputs_symbols(), precision)


@functools.lru_cache(maxsize=1)
def training_inputs_symbols() -> tuple[sp.Symbol, ...]:
    """The input symbols of the training model, in :func:`training_model` order
    (:data:`symcost.symbols.ALL_SYMBOLS` order), without lowering it."""
    return used_symbols(training_expressions().values())


def used_symbols(exprs: Iterable[sp.Expr]) -> tuple[sp.Symbol, ...]:
    """The symbols free in ``exprs``, in :data:`symcost.symbols.ALL_SYMBOLS` order."""
    free = free_symbols_shared(exprs)
    return tuple(s for s in S.ALL_SYMBOLS if s in free)


def training_inputs(model: ModelSpec | str | os.PathLike[str],
                    hardware: HardwareSpec | str | os.PathLike[str], config: TrainingConfig,
                    params: Params | None = None) -> dict[str, float]:
    """Bind every input symbol for one configuration (validated).

    Args:
        model: :class:`~symcost.models.ModelSpec` or preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or hardware id / YAML path.
        config: the parallel layout (validated and completed by
            :func:`symcost.config.resolve`).
        params: efficiency parameters; the shipped calibration when None.

    Returns:
        Mapping symbol name -> value in base units.

    Raises:
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input.
    """
    model, hw = as_model(model), as_hardware(hardware)
    return _bind(model, hw, resolve(model, hw, config), params)


def stack_training_inputs(configs: Iterable[tuple[ModelSpec | str | os.PathLike[str],
                                                  HardwareSpec | str | os.PathLike[str],
                                                  TrainingConfig]],
                          params: Params | None = None, names: Sequence[str] | None = None
                          ) -> dict[str, npt.NDArray[np.float64]]:
    """:func:`training_inputs` of many configurations, stacked into float64 columns.

    Args:
        configs: ``(model, hardware, config)`` triples, as :func:`training_inputs` takes them.
        params: efficiency parameters (each configuration takes its GPU generation's set);
            the shipped calibration when None.
        names: input names to stack (default: every input of the compiled training model).

    Returns:
        Mapping input name -> array of shape ``(number of configurations,)``, base units.

    Raises:
        ConfigError, ModelSpecError, HardwareSpecError: an invalid configuration.
        ParamsError: ``params`` has no entry for a configuration's GPU generation.
    """
    rows = list(configs)
    names = tuple(names or training_model("float64").input_names)
    out = {n: np.empty(len(rows), dtype=np.float64) for n in names}
    for i, (m, hw, cfg) in enumerate(rows):
        vals = training_inputs(m, hw, cfg, params)
        for n in names:
            out[n][i] = vals[n]
    return out


def merge_config(config: TrainingConfig | None, **config_fields: Any) -> TrainingConfig:
    """``config`` with ``config_fields`` applied (a new :class:`TrainingConfig` from the fields
    when ``config`` is None); not validated."""
    if config is None:
        return TrainingConfig(**config_fields)
    return config.replace(**config_fields) if config_fields else config


def prepare_training(model: ModelSpec | str | os.PathLike[str],
                     hardware: HardwareSpec | str | os.PathLike[str],
                     config: TrainingConfig | None = None, params: Params | None = None,
                     **config_fields: Any
                     ) -> tuple[ModelSpec, HardwareSpec, TrainingConfig, dict[str, float]]:
    """Specs, validated configuration and symbol bindings for one training configuration.

    Args:
        model, hardware, config, params, config_fields: as :func:`predict_training`.

    Returns:
        ``(ModelSpec, HardwareSpec, resolved TrainingConfig, {symbol name: value})`` in base
        units.

    Raises:
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input.
    """
    model, hw = as_model(model), as_hardware(hardware)
    cfg = resolve(model, hw, merge_config(config, **config_fields))
    return model, hw, cfg, _bind(model, hw, cfg, params)


def _bind(model: ModelSpec, hw: HardwareSpec, cfg: TrainingConfig,
          params: Params | None) -> dict[str, float]:
    """Symbol bindings of an already resolved configuration."""
    params = params or load_params()
    values = model_bindings(model)
    values.update(hardware_bindings(hw, cfg.dtype))
    values.update(params.for_generation(hw.generation))
    values.update(parallel_bindings(cfg))
    return values


@dataclass
class TrainingResult:
    """One training-step prediction.

    Attributes:
        values: every output of :func:`~symcost.training.training_expressions` (base units).
        model, hardware, config: what was evaluated (config with derived fields filled in).
        inputs: the symbol bindings used.
    """

    values: dict[str, float]
    model: ModelSpec
    hardware: HardwareSpec
    config: TrainingConfig
    inputs: dict[str, float] = field(repr=False)

    @property
    def step_time(self) -> float:
        """Seconds per optimizer step."""
        return self.values["step_time"]

    @property
    def fits(self) -> bool:
        """True when the memory per GPU fits in usable HBM and, where the hardware states its
        node's system memory, the offloaded bytes (``mem_host``) fit in the GPU's share of it."""
        return self.values["mem_headroom"] >= 0

    @property
    def breakdown(self) -> dict[str, float]:
        """Step-time terms in s (they sum to :attr:`step_time`)."""
        return {k.removeprefix("time_"): self.values[k] for k in BREAKDOWN}

    @property
    def memory(self) -> dict[str, float]:
        """Memory per GPU in bytes: weights, gradients, optimizer, activations, total."""
        out = {k.removeprefix("mem_"): self.values[k] for k in MEMORY}
        out["total"] = self.values["mem_total"]
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary keyed by :data:`symcost.schema.OUTPUT_KEYS`: ``step_time_s``,
        ``tokens_per_s``, ``tokens_per_s_per_gpu``, ``mfu``, ``hfu``, ``model_flops`` and
        ``hardware_flops`` (per step), ``params_total``, memory per GPU ``memory_*_bytes``
        (``memory_per_gpu_bytes`` is the HBM total, ``memory_host_bytes`` what offloading put in
        host memory), ``fits``, the breakdown ``time_*_s``, the
        configuration and ``schema_version`` (the ``train --json`` object)."""
        v = {**self.values, "tokens_per_s_per_gpu": self.values["tokens_per_s"]
             / self.values["num_gpus"]}
        return stamp({
            "model": self.model.name,
            "hardware": self.hardware.name,
            "config": {k: getattr(self.config, k) for k in TrainingConfig.__dataclass_fields__},
            **keyed(v, ("step_time", "tokens_per_s", "tokens_per_s_per_gpu", "mfu", "hfu",
                        "flops_model", "flops_hardware", "params_total", *MEMORY, "mem_total",
                        "mem_host", "mem_usable", "mem_headroom", *BREAKDOWN)),
            "fits": bool(self.fits),
        })

    def formula(self, name: str = "step_time", keep: tuple[str, ...] | None = None) -> sp.Expr:
        """The SymPy expression behind output ``name``; symbols not named in ``keep``
        (configuration fields such as ``layers``/``zero``, or symbol names; see
        :func:`symcost.substitution.keep_symbols`) are replaced, unrounded, by this
        configuration's values (all kept when ``keep`` is None).

        Raises:
            KeyError: unknown output ``name``.
            ExplainError: unknown name in ``keep``.
        """
        return formula_with(training_expressions()[name], self.inputs, keep)

    def _repr_latex_(self) -> str:
        return f"$\\mathrm{{step\\_time}} = {self.step_time:.4g}\\,\\mathrm{{s}}$"


def predict_training(model: ModelSpec | str | os.PathLike[str],
                     hardware: HardwareSpec | str | os.PathLike[str],
                     config: TrainingConfig | None = None, params: Params | None = None,
                     precision: str = "float64", **config_fields: Any) -> TrainingResult:
    """Predict one training step.

    Args:
        model: :class:`~symcost.models.ModelSpec` or a preset name / config.json path.
        hardware: :class:`~hwspecs.HardwareSpec` or a hardware id / YAML path.
        config: the parallel layout; or pass its fields as keyword arguments.
        params: efficiency parameters; the shipped calibration when None.
        precision: ``float64`` (default; evaluated by the generated source on NumPy, no jit
            compile needed for one configuration) or ``float32`` (the jit-compiled JAX
            function, as sweeps use).

    Returns:
        :class:`TrainingResult` (times in s, memory in bytes, MFU/HFU as fractions).

    Raises:
        ConfigError, ModelSpecError, HardwareSpecError, ParamsError: invalid input, with a
            message naming the field and the rule.

    Example:
        >>> r = predict_training("gpt3-175b", "a100-sxm4-80gb", num_gpus=1024, tp=8, pp=16,
        ...                      global_batch=1536, recompute="full")  # doctest: +SKIP
    """
    model, hw, cfg, inputs = prepare_training(model, hardware, config, params, **config_fields)
    cm = training_model(precision)
    args = {n: inputs[n] for n in cm.input_names}
    # one configuration: the generated source on NumPy answers without a jit compile
    out = cm.call_numpy(**args) if precision == "float64" else cm(**args)
    values = {k: float(v) for k, v in out.items()}
    return TrainingResult(values, model, hw, cfg, inputs)


def evaluate_training(inputs: Mapping[str, npt.ArrayLike],
                      precision: str = "float32") -> dict[str, npt.NDArray[Any]]:
    """Evaluate the compiled training model on broadcast arrays (no validation).

    Rows stream through :func:`symcost.evaluate.evaluate_broadcast` in bucketed chunks, so a
    new array length does not recompile.

    Args:
        inputs: symbol name -> array or scalar, for every symbol the training model uses
            (``training_model().input_names``); extra names are ignored.
        precision: ``float32`` or ``float64``.

    Returns:
        Output name -> array of the broadcast shape.

    Raises:
        KeyError: an input is missing.
    """
    return evaluate_broadcast(training_model(precision), inputs)
