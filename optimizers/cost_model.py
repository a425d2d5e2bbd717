"""Per-GPU hardware cost model for co-design: a linear build cost of the continuous hardware
parameters, with the public estimates each coefficient comes from.

    cost per GPU (USD) = base + c_flops * peak_flops_16 + c_hbm_cap * hbm_cap
                       + c_hbm_bw * hbm_bw + c_intra * intra_bw + c_inter * inter_bw

(base units: FLOP/s, bytes, bytes/s). The coefficients are ILLUSTRATIVE build-cost estimates
derived from public analyst figures, not vendor prices (a GPU's selling price is several times
its build cost); they are meant to rank designs against each other, and a user with better
numbers passes their own :class:`CostModel`. How each was obtained (see :data:`SOURCES`):

* ``c_flops`` = 1.2e-12 USD per FLOP/s ($1.2 per dense 16-bit TFLOP/s): H100 SXM build cost
  ~$3,320 (Raymond James estimate, via Epoch AI's ``training-cost-trends`` notebook
  ``h100_manufacturing_cost.ipynb``) minus HBM (~41% of it, Silicon Analysts' B200/H100 cost
  breakdown) minus CoWoS packaging (~$750, same source) leaves ~$1,200 for the logic die,
  test and board, for 989 dense bf16 TFLOP/s.
* ``c_hbm_cap`` = 15e-9 USD per byte ($15/GB): HBM3 at "around $15 per GB" (szyunze.com H100
  cost article) and HBM3e at $15-18/GB (stacklynlabs.com, 2026).
* ``c_hbm_bw`` = 2.24e-10 USD per byte/s ($224 per TB/s): the CoWoS-S interposer/packaging of
  an H100 (~$750, Silicon Analysts) spread over its 3.35 TB/s; assumes packaging scales
  with the number of HBM stacks, hence with bandwidth.
* ``c_intra`` = 5.7e-9 USD per byte/s ($5.7 per GB/s per direction): SemiAnalysis' DGX H100
  bill of materials as reworked by Epoch AI gives ~$5,875 per GPU for GPU plus NVSwitch
  baseboard vs ~$3,320 for the GPU alone; the ~$2,555 difference buys 450 GB/s of NVLink 4.
* ``c_inter`` = 4e-8 USD per byte/s ($40 per GB/s per direction): a 1,024-GPU InfiniBand NDR
  fat tree needs ~$0.55-0.75M of switches plus ~$1.2-1.6M of optics (yobitel.com NDR
  knowledge-base sizing rule), ~$2,000 per GPU for 400 Gb/s = 50 GB/s.
* ``base`` = 4,000 USD: the non-GPU part of a DGX H100 (CPUs, DRAM, NICs, storage, chassis,
  power) per GPU, $32,010 per 8-GPU server in SemiAnalysis' bill of materials (via Epoch AI).

With these, an A100-SXM4-80GB node slot costs ~$8.7k and an H100-SXM5-80GB ~$11.6k, the same
order as Epoch AI's ~$8.3k per H100 for the server alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from hwspecs import HardwareSpec
from symcost.config import ConfigError

#: the hardware symbols the cost model prices, in this order.
HW_VARIABLES: tuple[str, ...] = ("peak_flops_16", "hbm_bw", "hbm_cap", "intra_bw", "inter_bw")

SOURCES: dict[str, str] = {
    "c_flops": "H100 build cost ~$3,320 (Raymond James via Epoch AI training-cost-trends, "
               "h100_manufacturing_cost.ipynb) minus HBM (~41%) and CoWoS (~$750) per Silicon "
               "Analysts' B200 cost breakdown -> ~$1,200 per 989 dense bf16 TFLOP/s",
    "c_hbm_cap": "HBM ~$15/GB (szyunze.com 'How profitable is NVIDIA H100'; stacklynlabs.com "
                 "HBM3e $15-18/GB)",
    "c_hbm_bw": "H100 CoWoS-S packaging ~$750 (Silicon Analysts) / 3.35 TB/s",
    "c_intra": "GPU + NVSwitch baseboard ~$5,875 vs GPU ~$3,320 per GPU (SemiAnalysis DGX H100 "
               "BOM via Epoch AI) / 450 GB/s NVLink 4",
    "c_inter": "1,024-GPU NDR fat tree: $0.55-0.75M switches + $1.2-1.6M optics (yobitel.com "
               "InfiniBand NDR sizing) -> ~$2,000 per GPU / 50 GB/s",
    "base": "non-GPU DGX H100 components $32,010 per 8 GPUs (SemiAnalysis BOM via Epoch AI)",
}


@dataclass(frozen=True)
class CostModel:
    """Linear per-GPU cost (USD) of the continuous hardware parameters (base units).

    Attributes:
        base: fixed USD per GPU.
        c_flops: USD per FLOP/s of dense 16-bit peak.
        c_hbm_cap: USD per byte of HBM.
        c_hbm_bw: USD per byte/s of HBM bandwidth.
        c_intra: USD per byte/s (per direction) of intra-node bandwidth.
        c_inter: USD per byte/s (per direction) of inter-node bandwidth.
        sources: where each coefficient comes from.
    """

    base: float = 4000.0
    c_flops: float = 1.2e-12
    c_hbm_cap: float = 15e-9
    c_hbm_bw: float = 2.24e-10
    c_intra: float = 5.7e-9
    c_inter: float = 4e-8
    sources: Mapping[str, str] = field(default_factory=lambda: dict(SOURCES))

    def __post_init__(self) -> None:
        for name in ("base", "c_flops", "c_hbm_cap", "c_hbm_bw", "c_intra", "c_inter"):
            v = getattr(self, name)
            if not np.isfinite(v) or v < 0:
                raise ConfigError(f"cost model: {name} must be finite and >= 0 (got {v})")

    @property
    def coefficients(self) -> npt.NDArray[np.float64]:
        """USD per base unit of each of :data:`HW_VARIABLES`, shape ``(5,)``."""
        return np.array([self.c_flops, self.c_hbm_bw, self.c_hbm_cap, self.c_intra,
                         self.c_inter])

    def per_gpu(self, hw: Mapping[str, npt.ArrayLike]) -> npt.NDArray[np.float64]:
        """Cost per GPU in USD.

        Args:
            hw: :data:`HW_VARIABLES` -> value(s) in base units (arrays broadcast).

        Returns:
            USD per GPU (broadcast shape).
        """
        total = self.base
        for name, c in zip(HW_VARIABLES, self.coefficients):
            total = total + c * np.asarray(hw[name], dtype=np.float64)
        return np.asarray(total)

    def breakdown(self, hw: Mapping[str, float]) -> dict[str, float]:
        """USD per GPU by component (``base`` and each of :data:`HW_VARIABLES`)."""
        out = {"base": self.base}
        out.update({n: float(c * hw[n]) for n, c in zip(HW_VARIABLES, self.coefficients)})
        return out


def hardware_values(hw: HardwareSpec) -> dict[str, float]:
    """The priced parameters of a :class:`~hwspecs.HardwareSpec` (base units; 16-bit peak is
    bf16, else fp16).

    Returns:
        :data:`HW_VARIABLES` -> value (FLOP/s, bytes/s, bytes, bytes/s, bytes/s).
    """
    return {"peak_flops_16": hw.peak("bf16") if "bf16" in hw.peak_flops else hw.peak("fp16"),
            "hbm_bw": hw.hbm_bandwidth, "hbm_cap": hw.hbm_capacity,
            "intra_bw": hw.intra_node_bandwidth, "inter_bw": hw.inter_node_bandwidth}
