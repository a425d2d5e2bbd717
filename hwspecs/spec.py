"""The :class:`HardwareSpec` value type (all quantities in SI base units)."""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from .errors import HardwareSpecError

__all__ = ["ASYNC_MMA_GENERATIONS", "DTYPES", "GENERATIONS", "HardwareSpec",
           "MATMUL_CEILING_UNMEASURED"]

#: Data types a peak throughput may be given for. ``int8`` is in integer
#: operations per second; the others are floating-point operations per second.
DTYPES: frozenset[str] = frozenset({"fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"})

#: Architecture generations. Selects calibrated efficiency constants elsewhere
#: in ``symcost``; ``cdna3`` is AMD's MI300 family, the rest are NVIDIA (``ampere``: the
#: GA100 data-center parts, A100 / A800 / A30; ``ampere_ga10x``: the GA10x parts, GeForce
#: RTX 30-series / RTX A6000 / A40, compute capability 8.6, with GDDR6X, a 6 MB L2 against
#: GA100's 40 MB and half-rate FP32-accumulate tensor math on GeForce, built into PCIe
#: workstation servers; ``ada``: Ada Lovelace, RTX 40-series / RTX 6000 Ada / L40S;
#: ``blackwell_ultra``: B300 / GB300, compute capability 10.3, with twice Blackwell's
#: special-function (softmax exponential) throughput and a higher power limit, so its
#: kernels reach different fractions of the same peaks).
GENERATIONS: frozenset[str] = frozenset({"ampere", "ampere_ga10x", "ada", "hopper",
                                         "blackwell", "blackwell_ultra", "cdna3"})

#: Generations with asynchronous warpgroup matrix multiplies (Hopper's ``wgmma`` with the
#: Tensor Memory Accelerator, Blackwell's ``tcgen05``), on which attention kernels overlap one
#: warpgroup's softmax with another's matmuls (FlashAttention-3, cuDNN fused attention).
#: Ampere and Ada issue synchronous ``mma.sync`` from each warp, so their FlashAttention is
#: FlashAttention-2, softmax between the matmuls. CDNA3 is counted with them as a judgement,
#: not a measurement: its MFMA instructions run beside the vector units, but symcost has no
#: MI300X training run to tell whether its attention kernels overlap the softmax. Sources:
#: NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022), "Hopper SM" (asynchronous
#: execution, TMA); Shah et al. 2024, FlashAttention-3 (arXiv:2407.08608), Sec. 2.2 and 3.1;
#: PTX ISA 8.x, ``wgmma.mma_async`` (sm_90a), ``tcgen05.mma`` (sm_100a).
ASYNC_MMA_GENERATIONS: frozenset[str] = frozenset({"hopper", "blackwell", "blackwell_ultra"})

#: Fraction of the bf16 peak a GPU's best matmul reaches (:attr:`HardwareSpec.matmul_ceiling`)
#: for a spec without a measurement (``matmul_tflops_measured``): 0.803, the median of the
#: NVIDIA entries of the source's BF16 table (A100 SXM 86.9%, GH200 83.8%, A100 PCIe 81.1%,
#: H100 SXM 80.3%, B300 78.6%, B200 77.6%, GB200 72.9%). Source: S. Bekman, "Machine Learning
#: Engineering", compute/accelerator/README.md, "Maximum Achievable Matmul FLOPS comparison
#: table" (github.com/stas00/ml-engineering at commit 744d01e, 2026-08-22; ``mamf-finder.py``,
#: mean of 100 iterations of the best shape found).
MATMUL_CEILING_UNMEASURED = 0.803

_V = TypeVar("_V")


class FrozenMapping(Mapping[str, _V]):
    """A read-only, hashable, picklable ``str``-keyed mapping.

    Used for :attr:`HardwareSpec.peak_flops` and :attr:`HardwareSpec.sources` so
    that a spec is truly immutable and can be hashed (e.g. used as a dict key or
    a static argument to a jitted function).
    """

    __slots__ = ("_data",)

    def __init__(self, data: Mapping[str, _V] | None = None) -> None:
        self._data: dict[str, _V] = dict(data or {})

    def __getitem__(self, key: str) -> _V:
        return self._data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._data)

    def __len__(self) -> int:
        return len(self._data)

    def __hash__(self) -> int:
        return hash(frozenset(self._data.items()))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self._data == dict(other.items())
        return NotImplemented

    def __repr__(self) -> str:
        return repr(self._data)

    def __getstate__(self) -> dict[str, _V]:
        return self._data

    def __setstate__(self, state: dict[str, _V]) -> None:
        self._data = dict(state)


def _fail(name: Any, msg: str) -> HardwareSpecError:
    return HardwareSpecError(f"hwspecs: HardwareSpec {name!r}: {msg}")


def _positive_float(name: Any, field_name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(name, f"field {field_name!r} must be a number (got {type(value).__name__} {value!r})")
    if not math.isfinite(value) or value <= 0:
        raise _fail(name, f"field {field_name!r} must be > 0 and finite (got {value!r})")
    return float(value)


@dataclass(frozen=True)
class HardwareSpec:
    """Per-GPU hardware parameters of one accelerator in one node type.

    All quantities are in SI base units. Instances are immutable and hashable;
    :func:`dataclasses.replace` re-runs validation, so it is safe for
    "what-if" variants (note that :attr:`sources` is carried over unchanged).

    Attributes:
        name: Canonical id, e.g. ``'h100-sxm5-80gb'``.
        description: Human-readable summary (GPU, node, interconnects).
        generation: Architecture generation, one of :data:`GENERATIONS`.
        peak_flops: Dense (no structured sparsity) peak throughput per dtype,
            in FLOP/s (``int8``: integer op/s). Keys are a subset of
            :data:`DTYPES` -- only the dtypes the GPU's tensor/matrix units
            support.
        hbm_capacity: Device memory capacity in bytes.
        hbm_bandwidth: Peak device memory bandwidth in bytes/s.
        intra_node_bandwidth: Scale-up (NVLink/Infinity Fabric/PCIe)
            bandwidth per GPU per direction, in bytes/s.
        intra_node_latency: Per-step (per-hop) latency of the scale-up link,
            in seconds.
        inter_node_bandwidth: This GPU's share of the node's scale-out network
            bandwidth, per direction, in bytes/s.
        inter_node_latency: Per-step (per-hop) latency of the scale-out
            network, in seconds.
        gpus_per_node: Number of GPUs in one node (scale-up domain).
        sources: Citation for each field, keyed by field name (e.g.
            ``sources['hbm_bandwidth']``). Empty for specs built in code.
        host_link_bandwidth: GPU-to-host link (PCIe x16, Grace NVLink-C2C)
            bandwidth per GPU per direction, in bytes/s; None when the spec
            does not state it (offload and host-staged collectives then use
            :attr:`intra_node_bandwidth`).
        peer_to_peer: False when GPUs of a node cannot address each other's
            memory over PCIe (GeForce cards): NCCL stages PCIe transfers
            through pinned host memory.
        bridge_bandwidth: NVLink-bridge bandwidth per GPU per direction
            between the two GPUs of a bridged pair, in bytes/s (None: no
            bridges).
        host_memory: The node's CPU (system) memory in bytes, shared by its
            :attr:`gpus_per_node` GPUs: where offloaded optimizer states,
            parameters and activations live (None: not stated, not checked).
        peak_exp: Peak rate of 32-bit exponentials of the special function
            units (``MUFU.EX2``: SMs x exponentials per SM per clock x clock),
            in 1/s; FlashAttention's softmax takes one per score element
            (None: not stated, never the bound).
        matmul_measured: The highest bf16 matmul throughput measured on this GPU
            (maximum achievable matmul FLOP/s: the best shape of a brute-force
            search, at the clocks the GPU sustains under that load), in FLOP/s;
            at most ``peak_flops['bf16']`` (None: not measured; see
            :attr:`matmul_ceiling`).
        matmul_measured_fp8: The same for fp8 (``float8_e4m3fn``) operands, in FLOP/s; at
            most ``peak_flops['fp8']`` (None: not measured; see :attr:`matmul_ceiling_fp8`).

    Raises:
        HardwareSpecError: On construction, if a number is not finite and
            > 0, ``gpus_per_node`` is not a positive integer, ``generation``
            is unknown, a ``peak_flops`` key is not in :data:`DTYPES`, or
            ``peak_flops`` is empty, or ``matmul_measured`` (``matmul_measured_fp8``) is
            given without a bf16 (fp8) peak or above it.
    """

    name: str
    description: str
    generation: str
    peak_flops: Mapping[str, float]
    hbm_capacity: float
    hbm_bandwidth: float
    intra_node_bandwidth: float
    intra_node_latency: float
    inter_node_bandwidth: float
    inter_node_latency: float
    gpus_per_node: int
    sources: Mapping[str, str] = field(default_factory=lambda: FrozenMapping({}))
    host_link_bandwidth: float | None = None
    peer_to_peer: bool = True
    bridge_bandwidth: float | None = None
    host_memory: float | None = None
    peak_exp: float | None = None
    matmul_measured: float | None = None
    matmul_measured_fp8: float | None = None

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name:
            raise _fail(name, f"field 'name' must be a non-empty string (got {name!r})")
        if not isinstance(self.description, str):
            raise _fail(name, f"field 'description' must be a string (got {self.description!r})")
        if self.generation not in GENERATIONS:
            raise _fail(
                name,
                f"field 'generation' must be one of {', '.join(sorted(GENERATIONS))} (got {self.generation!r})",
            )
        if not isinstance(self.peak_flops, Mapping) or not self.peak_flops:
            raise _fail(name, "field 'peak_flops' must be a non-empty mapping dtype -> FLOP/s")
        peaks: dict[str, float] = {}
        for dtype, value in self.peak_flops.items():
            if dtype not in DTYPES:
                raise _fail(
                    name,
                    f"field 'peak_flops' has unknown dtype {dtype!r} (known: {', '.join(sorted(DTYPES))})",
                )
            peaks[dtype] = _positive_float(name, f"peak_flops.{dtype}", value)
        object.__setattr__(self, "peak_flops", FrozenMapping(peaks))
        for fname in (
            "hbm_capacity",
            "hbm_bandwidth",
            "intra_node_bandwidth",
            "intra_node_latency",
            "inter_node_bandwidth",
            "inter_node_latency",
        ):
            object.__setattr__(self, fname, _positive_float(name, fname, getattr(self, fname)))
        for fname in ("host_link_bandwidth", "bridge_bandwidth", "host_memory", "peak_exp",
                      "matmul_measured", "matmul_measured_fp8"):
            if getattr(self, fname) is not None:
                object.__setattr__(self, fname, _positive_float(name, fname, getattr(self, fname)))
        for fname, dtype in (("matmul_measured", "bf16"), ("matmul_measured_fp8", "fp8")):
            measured = getattr(self, fname)
            if measured is None:
                continue
            if dtype not in peaks:
                raise _fail(name, f"field '{fname}' needs a {dtype} peak to compare with")
            if measured > peaks[dtype] * (1 + 1e-9):
                raise _fail(name, f"field '{fname}' ({measured:.4g} FLOP/s) "
                                  f"exceeds the {dtype} peak ({peaks[dtype]:.4g} FLOP/s)")
        if not isinstance(self.peer_to_peer, bool):
            raise _fail(name, f"field 'peer_to_peer' must be a bool (got {self.peer_to_peer!r})")
        g = self.gpus_per_node
        if isinstance(g, bool) or not isinstance(g, int) or g <= 0:
            raise _fail(name, f"field 'gpus_per_node' must be a positive integer (got {g!r})")
        if not isinstance(self.sources, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.sources.items()
        ):
            raise _fail(name, "field 'sources' must be a mapping of str field name -> str citation")
        object.__setattr__(self, "sources", FrozenMapping(self.sources))

    @property
    def async_mma(self) -> bool:
        """Whether this GPU's attention kernels can overlap softmax and matmuls (its generation
        is in :data:`ASYNC_MMA_GENERATIONS`)."""
        return self.generation in ASYNC_MMA_GENERATIONS

    @property
    def matmul_ceiling(self) -> float:
        """Fraction of the peak this GPU's tensor cores sustain at best (dimensionless, in
        (0, 1]): :attr:`matmul_measured` over the bf16 peak, or
        :data:`MATMUL_CEILING_UNMEASURED` without a measurement. The spec peaks assume the
        boost clock; under a saturating matmul a GPU holds a lower clock (power and thermal
        limits) and loses some tiles to scheduling, so the best measured rate is 73-87% of
        the peak on NVIDIA's data-center parts (source of :data:`MATMUL_CEILING_UNMEASURED`).
        symcost's calibrated compute efficiencies are fractions of this ceiling, so a GPU
        whose peak rose with a power limit its clocks cannot hold is not credited with it."""
        if self.matmul_measured is None:
            return MATMUL_CEILING_UNMEASURED
        return self.matmul_measured / self.peak_flops["bf16"]

    @property
    def matmul_ceiling_fp8(self) -> float:
        """Fraction of the fp8 peak this GPU's tensor cores sustain at best with fp8 operands
        (dimensionless, in (0, 1]): :attr:`matmul_measured_fp8` over the fp8 peak, or the bf16
        :attr:`matmul_ceiling` without an fp8 measurement (fp8 matmuls then reach the same
        fraction of their peak as bf16 ones). At twice the bf16 rate an fp8 matmul draws more
        power per second and holds a lower clock: in the source of
        :data:`MATMUL_CEILING_UNMEASURED` (its FP8 table) an H100 SXM reaches 70.9% of its fp8
        peak against 80.3% of its bf16 peak, a B200 76.3% against 77.6%."""
        if self.matmul_measured_fp8 is None:
            return self.matmul_ceiling
        return self.matmul_measured_fp8 / self.peak_flops["fp8"]

    def peak(self, dtype: str) -> float:
        """Dense peak throughput for ``dtype``.

        Args:
            dtype: One of the keys of :attr:`peak_flops`, e.g. ``'bf16'``.

        Returns:
            Peak throughput in FLOP/s (``int8``: integer op/s), without
            structured sparsity.

        Raises:
            HardwareSpecError: If this GPU has no peak for ``dtype``; the
                message names ``dtype`` and lists the supported dtypes.
        """
        try:
            return self.peak_flops[dtype]
        except (KeyError, TypeError):
            supported = ", ".join(sorted(self.peak_flops))
            raise HardwareSpecError(
                f"hardware {self.name!r} has no peak for dtype {dtype!r}; supported: {supported}"
            ) from None
