"""symcost: symbolic and compiled performance model for distributed LLM training and inference.

Operator costs are SymPy expressions over hardware, model and parallelism symbols
(:mod:`symcost.symbols`); they are lowered once to jit-compiled JAX functions
(:mod:`symcost.lower`) so a single prediction, a sweep and a gradient share one compiled model.

Importing this package has no side effects: nothing is built, compiled or read until used.
"""

from .api import (TrainingResult, evaluate_training, predict_training, training_inputs,
                  training_model, used_symbols)
from .config import ConfigError, TrainingConfig, resolve
from .lower import CompiledModel, LoweringError, lower
from .models import ModelSpec, ModelSpecError, get_model, list_models
from .params import Params, ParamsError, load_params, save_params
from .training import training_expressions

__all__ = [
    "CompiledModel", "ConfigError", "LoweringError", "ModelSpec", "ModelSpecError", "Params",
    "ParamsError", "TrainingConfig", "TrainingResult", "evaluate_training", "get_model",
    "list_models", "load_params", "lower", "predict_training", "resolve", "save_params",
    "training_expressions", "training_inputs", "training_model", "used_symbols",
]
