"""optimizers: parallel-configuration search and hardware co-design on the symcost model.

* :func:`enumerate_space`: every valid configuration (TP, PP, DP, micro-batch, VPP, recompute,
  SP, ZeRO, DP overlap) for a model, GPU, GPU count(s) and global batch, built with numpy,
  with each rejected class counted by rule (:mod:`optimizers.space`).
* :func:`search`: exhaustive search, all candidates through one compiled float32 function in
  fixed-size chunks, memory filter, ranking by step time, tokens/s or tokens per dollar, float64
  re-check of the leaders, breakdown and why the best beats the runner-up.
* :func:`search_scipy`: the same question by differential evolution with integrality.
* :func:`codesign`: GPU hardware (FLOP/s, HBM bandwidth and capacity, NVLink and network
  bandwidth) and parallel layout under cost budgets; Pareto front of step time against cost
  (:mod:`optimizers.cost_model` documents the cost coefficients and their sources).
* :func:`published_ranking`: where published training configurations rank in the search.
* :func:`dissect` / :func:`dissect_serving`: the speed-up between two systems attributed to
  hardware factors (Shapley values over hybrid systems and integrated gradients).
* :func:`dse_training` / :func:`dse_serving`: design-space exploration over process node,
  memory and network generations (:mod:`hwspecs.technology`).

Importing this package has no side effects (nothing is built or compiled until used).
"""

from .codesign import codesign
from .cost_model import CostModel
from .dissect import DissectError, DissectResult, dissect, dissect_serving
from .dse import DSEError, dse_serving, dse_training
from .published import published_configs, published_ranking
from .search import OBJECTIVES, SearchResult, rank_of, search, search_scipy
from .space import Constraints, SearchError, Space, enumerate_space, make_constraints

__all__ = [
    "OBJECTIVES", "Constraints", "CostModel", "DSEError", "DissectError", "DissectResult",
    "SearchError", "SearchResult", "Space", "codesign", "dissect", "dissect_serving",
    "dse_serving", "dse_training", "enumerate_space", "make_constraints", "published_configs",
    "published_ranking", "rank_of", "search", "search_scipy",
]
