"""symcost: symbolic and compiled performance model for distributed LLM training and inference.

Operator costs are SymPy expressions over hardware, model and parallelism symbols
(:mod:`symcost.symbols`); they are lowered once to jit-compiled JAX functions
(:mod:`symcost.lower`) so a single prediction, a sweep, a gradient and a search share one
compiled model.

This module is the public API. Importing it has no side effects and is cheap: each name is
imported from its module on first use (PEP 562), so ``import symcost`` pulls in neither JAX
nor pandas.

Layers: a module imports only from the layers below it (``|`` separates modules of one
layer that do not import each other, ``:`` those that may). The core computes and returns
data; rendering (tables, colours, plots) lives in ``symcost.cli``, which nothing in the core
imports; ``optimizers`` sits above the core and uses its public names. No module imports a
project module inside a function (only jax, pandas, scipy and matplotlib are imported where
used, to keep ``import symcost`` and ``symcost --help`` light), and no private name is
imported across modules. Top to bottom::

    symcost.cli
    optimizers
    symcost.calibrate | symcost.sweep | symcost.sensitivity | symcost.explain | symcost.roofline
    symcost.validate | symcost.bottleneck | symcost.breakdown
    symcost.uncertainty | symcost.infer_api
    symcost.api
    symcost.evaluate | symcost.measurements
    symcost.lower | symcost.config
    symcost.training : symcost.inference : symcost.finetune
    symcost.ops | symcost.models | symcost.params | symcost.rules | symcost.substitution | hwspecs
    symcost.symbols : symcost.functions : symcost.fields : symcost.schema

From the bottom: the vocabulary (symbols, field table, JSON keys); operator costs, specs,
parameters, the rule table and formula substitution; the cost assembly (SymPy expressions of
training and inference); lowering and configuration; evaluation and measurement rows; the
public training API; inference and prediction intervals; validation and bottleneck
attribution; the analyses (calibration, sweeps, sensitivity, formulas, rooflines). The list
is the import-linter contract of ``pyproject.toml``, checked by ``tests/test_layers.py``
(``benchmarks/import_graph.py`` prints the graph).

Training: :func:`predict_training`, :func:`training_expressions`, :func:`training_model`,
:func:`evaluate_training`. Inference: :func:`predict_inference`, :func:`roofline_table`,
:func:`dram_study`. Exploration: :func:`symcost.sweep.sweep`,
:func:`symcost.sensitivity.sensitivity`, :func:`symcost.bottleneck.bottleneck`,
:func:`symcost.explain.explain`. Measurements: :func:`validate_file`,
:func:`symcost.calibrate.calibrate`, :func:`predict_interval`. Configuration search lives in the sibling package ``optimizers``.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    # training model
    "TrainingConfig": "config", "ConfigError": "config", "resolve": "config",
    "TrainingResult": "api", "predict_training": "api", "training_inputs": "api",
    "training_model": "api", "evaluate_training": "api", "used_symbols": "api",
    "training_expressions": "training",
    # lowering
    "CompiledModel": "lower", "LoweringError": "lower",
    # specs and parameters
    "ModelSpec": "models", "ModelSpecError": "models", "get_model": "models",
    "list_models": "models", "from_hf_config": "models",
    "Params": "params", "ParamsError": "params", "load_params": "params",
    "save_params": "params",
    # inference
    "InferenceConfig": "infer_api", "InferenceConfigError": "infer_api",
    "InferenceResult": "infer_api", "predict_inference": "infer_api",
    "inference_inputs": "infer_api", "inference_model": "infer_api",
    "evaluate_inference": "infer_api", "predict_inference_rows": "infer_api",
    "inference_expressions": "inference",
    "roofline_table": "roofline", "dram_study": "roofline",
    # sweeps, sensitivity, attribution, formulas
    "Range": "sweep", "SweepError": "sweep",
    "elasticities": "sensitivity", "SensitivityError": "sensitivity",
    "ExplainError": "substitution",
    # measurements
    "load_measurements": "validate", "validate_file": "validate",
    "MeasurementsError": "validate",
    "cross_validate": "calibrate", "predict_interval": "uncertainty",
    "CalibrationError": "calibrate",
}
#: submodules whose main function has the module's name: call ``symcost.sweep.sweep(...)``,
#: ``symcost.sensitivity.sensitivity(...)``, ... (a package attribute cannot be both the
#: submodule and its function).
_SUBMODULES = ("sweep", "sensitivity", "bottleneck", "explain", "calibrate", "lower", "symbols",
               "training", "inference", "ops")

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    try:
        module = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'symcost' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS) | set(_SUBMODULES))
