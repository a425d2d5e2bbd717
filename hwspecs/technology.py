"""Technology model: an accelerator derived from a process node, an HBM generation and link generations.

The data (every factor with its source) is ``hwspecs/data/technology.yaml``;
:func:`load_technology` reads it, :func:`derive_accelerator` turns a choice of
node x memory x link x network plus a die-area and power budget into a
:class:`~hwspecs.HardwareSpec` usable everywhere a built-in spec is.

The model (what it is)
----------------------
An accelerator is a *reference chip* (a shipped GPU with a hardware file and a
row in the ``references`` table: node, die area, TDP) re-implemented on another
node, die area and power budget, **with the same architecture**. Node factors
are cumulative products of the foundry's step claims, relative to the 12 nm
base: ``D(n)`` logic density, ``F(n)`` speed at iso-power, ``E(n)`` power at
iso-speed (= energy per operation).

* Dense peak, every dtype of the reference (FLOP/s)::

      s_area  = (A / A_ref) * (D(n) / D(n_ref)) * (F(n) / F(n_ref))
      s_power = (P / P_ref) * (E(n_ref) / E(n))
      peak_d  = peak_ref_d * min(s_area, s_power)

  ``s_area``: transistors (area x density) times clock; ``s_power``: the
  reference's whole-chip energy per FLOP at peak, ``e_ref = P_ref / peak_ref``
  (an upper bound: the TDP also pays for HBM, I/O and leakage), scaled by the
  node's energy factor, so that ``e(n) * peak <= P``.
* HBM (bytes/s, bytes)::

      hbm_bandwidth = stacks * pin_rate_Gb/s * bus_width_bits / 8 * 1e9
      hbm_capacity  = stacks * stack_capacity_GB * 2**30

  with the generation's top standard (or vendor) speed bin, so this is an
  upper bound: shipping GPUs clock their HBM lower (H100 SXM at 5.2 of 6.4
  Gb/s).
* Scale-up link: ``intra_node_bandwidth = link GB/s per GPU per direction *
  1e9`` as deployed (NVLink with its links-per-GPU count; PCIe one x16 link).
* Scale-out: ``inter_node_bandwidth = nics_per_gpu * nic_Gb/s * 1e9 / 8``
  (one NIC per GPU, the DGX convention).

What is NOT modelled
--------------------
* Architecture: FLOPs per transistor per clock are the reference's. A newer
  architecture (Hopper's 2x dense MMA per SM per clock over Ampere, H100
  whitepaper) is outside the model: deriving H100 from A100 under-predicts
  its peak by ~1.55x, B200 from H100 by ~1.6x (see ``tests/test_technology.py``).
  With the A100 architecture at each chip's own node, area and power, the
  real dense 16-bit peak is 1.76x (V100), 1.55x (H100), 2.02x (B200) and
  1.82x (MI300X) the derived one; for V100 the gap is the foundry's 16 -> 7 nm
  density and speed claims exceeding what GV100 -> GA100 realised, not
  architecture. Shipped chips without a hardware file (V100) are in the
  ``chips`` table (:class:`DatasheetChip`) for these checks.
* The foundry's speed gain (iso-power) and power saving (iso-speed) are
  alternatives for one design; using the speed gain in the area bound and the
  power saving in the power bound is optimistic where both bounds are close.
* The share of the die spent on tensor units, SRAM (its density is in the
  data, see :attr:`ProcessNode.sram_density`, but :class:`HardwareSpec` has no
  on-chip memory field), I/O and analog; yield, cost, reticle limits, thermal
  limits, DVFS, HBM power and the beachfront needed for more stacks.
* Latencies, ``gpus_per_node``, ``generation`` (which selects calibrated
  efficiencies) and the dtype set are the reference's.

Ranges: where a claim is a range (e.g. N3 +10-15% speed) the midpoint is used
and :attr:`ProcessNode.ranges` keeps the range.

Example:
    >>> from hwspecs.technology import derive_accelerator
    >>> hw = derive_accelerator(3, "hbm3e", "nvlink5", "ib-xdr",
    ...                         die_area_mm2=800, power_w=1000)
    >>> round(hw.peak("bf16") / 1e12)   # TFLOP/s, A100 architecture on 3 nm
    1196
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from . import checks
from .errors import HardwareSpecError
from .loader import parse_yaml, load_hardware
from .spec import FrozenMapping, HardwareSpec
from .units import GIB

__all__ = [
    "DatasheetChip",
    "HBMGeneration",
    "LinkGeneration",
    "NetworkGeneration",
    "PeakScale",
    "ProcessNode",
    "ReferenceChip",
    "Technology",
    "derive_accelerator",
    "load_technology",
    "peak_scale",
]

_FILE = "technology.yaml"


@dataclass(frozen=True)
class ProcessNode:
    """One process node; cumulative factors are relative to the 12 nm base (= 1).

    Attributes:
        name: node label, ``'12'``, ``'7'``, ``'5'``, ``'3'``, ``'2'`` or ``'1'`` (nm).
        foundry_process: the foundry process the numbers belong to.
        status: ``production``, ``announced`` or ``projection``.
        density: logic density relative to 12 nm (dimensionless).
        frequency: speed at iso-power relative to 12 nm.
        energy: power at iso-speed, i.e. energy per operation, relative to 12 nm.
        sram_density: high-density SRAM bits per area relative to 12 nm (inverse
            bit-cell area ratio); None where the bit cell is not published.
        ranges: ``{factor: (low, high)}`` for the step claims given as ranges.
        sources: citation per factor.
    """

    name: str
    foundry_process: str
    status: str
    density: float
    frequency: float
    energy: float
    sram_density: float | None
    ranges: Mapping[str, tuple[float, float]]
    sources: Mapping[str, str]


@dataclass(frozen=True)
class HBMGeneration:
    """One HBM generation. Bandwidth in bytes/s, capacity in bytes (GB read as GiB)."""

    name: str
    status: str
    pin_rate_gbps: float
    bus_width_bits: int
    stack_capacity_gb: float
    typical_stacks: int
    sources: Mapping[str, str]

    @property
    def stack_bandwidth(self) -> float:
        """Peak bandwidth of one stack, bytes/s: ``pin_rate * bus_width / 8 * 1e9``."""
        return self.pin_rate_gbps * self.bus_width_bits / 8.0 * 1e9

    @property
    def stack_capacity(self) -> float:
        """Capacity of one stack in bytes (marketed GB read as GiB, like the hardware files)."""
        return self.stack_capacity_gb * GIB


@dataclass(frozen=True)
class LinkGeneration:
    """A scale-up link generation: GB/s per GPU per direction as deployed."""

    name: str
    status: str
    gbps_per_direction: float
    links_per_gpu: int
    sources: Mapping[str, str]


@dataclass(frozen=True)
class NetworkGeneration:
    """A scale-out network generation: Gb/s per NIC port, NICs per GPU."""

    name: str
    status: str
    nic_gbit_per_s: float
    nics_per_gpu: int
    sources: Mapping[str, str]


@dataclass(frozen=True)
class ReferenceChip:
    """A shipped chip a derived accelerator scales from (its hardware file has the peaks)."""

    name: str
    node: str
    die_area_mm2: float
    power_w: float
    memory: str
    hbm_stacks: int
    link: str
    network: str
    sources: Mapping[str, str]
    hbm_stack_gb: float | None = None


@dataclass(frozen=True)
class DatasheetChip:
    """A shipped chip without a symcost hardware file, kept to check the model against
    (``chips`` section): its node, die area, power, memory and link choices, and its
    datasheet figures.

    Attributes:
        name: chip id (``v100-sxm2-32gb``).
        node, die_area_mm2, power_w, memory, hbm_stacks, hbm_stack_gb, link, network: as
            :class:`ReferenceChip` (``hbm_stack_gb`` None: the generation's).
        peak_tflops: dense datasheet peaks per dtype, TFLOP/s.
        hbm_bandwidth_gbps: datasheet HBM bandwidth, GB/s.
        hbm_capacity_gb: datasheet HBM capacity, GB.
        link_gbps_per_direction: datasheet scale-up bandwidth per GPU per direction, GB/s.
        sources: citation per field.
    """

    name: str
    node: str
    die_area_mm2: float
    power_w: float
    memory: str
    hbm_stacks: int
    hbm_stack_gb: float | None
    link: str
    network: str
    peak_tflops: Mapping[str, float]
    hbm_bandwidth_gbps: float
    hbm_capacity_gb: float
    link_gbps_per_direction: float
    sources: Mapping[str, str]


@dataclass(frozen=True)
class Technology:
    """The whole ``technology.yaml``, keyed by name."""

    nodes: Mapping[str, ProcessNode]
    hbm: Mapping[str, HBMGeneration]
    links: Mapping[str, LinkGeneration]
    networks: Mapping[str, NetworkGeneration]
    references: Mapping[str, ReferenceChip]
    chips: Mapping[str, DatasheetChip]


@dataclass(frozen=True)
class PeakScale:
    """The compute scaling of :func:`derive_accelerator` (dimensionless, x reference peak).

    Attributes:
        area_limited: ``s_area``, what the die area and node allow.
        power_limited: ``s_power``, what the power budget allows.
        scale: ``min(area_limited, power_limited)``.
        bound: ``'area'`` or ``'power'``, whichever is smaller (``'power'`` on a tie).
    """

    area_limited: float
    power_limited: float
    scale: float
    bound: str


# ------------------------------------------------------------------- loading


def _err(msg: str) -> HardwareSpecError:
    return HardwareSpecError(f"hwspecs: {_FILE}: {msg}")


def _num(entry: Mapping[str, Any], key: str, where: str) -> tuple[float, tuple[float, float] | None]:
    """A positive number or a ``[low, high]`` range (-> midpoint, range)."""
    v = entry.get(key)
    if isinstance(v, list) and len(v) == 2 and all(isinstance(x, (int, float)) for x in v):
        lo, hi = float(v[0]), float(v[1])
        if not 0 < lo <= hi:
            raise _err(f"{where}.{key}: range must be 0 < low <= high (got {v!r})")
        return (lo + hi) / 2.0, (lo, hi)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
        raise _err(f"{where}.{key} must be a positive number or [low, high] (got {v!r})")
    return float(v), None


def _int(entry: Mapping[str, Any], key: str, where: str) -> int:
    return checks.positive_int(entry, key, where, _err)


def _str(entry: Mapping[str, Any], key: str, where: str) -> str:
    return checks.text(entry, key, where, _err)


def _sources(entry: Mapping[str, Any], where: str) -> FrozenMapping[str]:
    src = entry.get("sources")
    if not isinstance(src, Mapping) or not src:
        raise _err(f"{where}.sources must be a non-empty mapping")
    return FrozenMapping({str(k): " ".join(_str(src, k, f"{where}.sources").split()) for k in src})


def _cited(sources: Mapping[str, str], keys: tuple[str, ...], where: str) -> None:
    for key in keys:
        if key not in sources:
            raise _err(f"{where}.sources has no citation for {key!r}")


def _section(doc: Mapping[str, Any], key: str) -> Mapping[str, Mapping[str, Any]]:
    sec = doc.get(key)
    if not isinstance(sec, Mapping) or not all(isinstance(v, Mapping) for v in sec.values()):
        raise _err(f"section {key!r} must be a mapping of mappings")
    return {str(k): v for k, v in sec.items()}


def _nodes(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, ProcessNode]:
    base_cell: float | None = None
    out: dict[str, ProcessNode] = {}
    for name, e in raw.items():  # file order: each node after its previous one
        where = f"nodes.{name}"
        prev = e.get("previous")
        sources = _sources(e, where)
        cell = e.get("sram_bitcell_um2")
        if cell is not None and (isinstance(cell, bool) or not isinstance(cell, (int, float)) or cell <= 0):
            raise _err(f"{where}.sram_bitcell_um2 must be a positive number or null (got {cell!r})")
        if prev is None:
            if cell is None:
                raise _err(f"{where}: the base node needs sram_bitcell_um2")
            base_cell = float(cell)
            density = frequency = energy = 1.0
            ranges: dict[str, tuple[float, float]] = {}
        else:
            if str(prev) not in out:
                raise _err(f"{where}.previous {prev!r} is not an earlier node")
            p = out[str(prev)]
            ranges = {}
            steps = {}
            for key in ("logic_density_x", "speed_iso_power_x", "power_iso_speed_x"):
                steps[key], rng = _num(e, key, where)
                if rng is not None:
                    ranges[key] = rng
                if key not in sources:
                    raise _err(f"{where}.sources has no citation for {key!r}")
            density = p.density * steps["logic_density_x"]
            frequency = p.frequency * steps["speed_iso_power_x"]
            energy = p.energy * steps["power_iso_speed_x"]
        if "sram_bitcell_um2" not in sources:
            raise _err(f"{where}.sources has no citation for 'sram_bitcell_um2'")
        assert base_cell is not None
        out[name] = ProcessNode(
            name=name, foundry_process=" ".join(_str(e, "foundry_process", where).split()),
            status=_str(e, "status", where), density=density, frequency=frequency, energy=energy,
            sram_density=None if cell is None else base_cell / float(cell),
            ranges=FrozenMapping(ranges), sources=sources)
    return out


def _document() -> Any:
    text = resources.files("hwspecs").joinpath("data", _FILE).read_text(encoding="utf-8")
    return parse_yaml(text, _FILE)


@functools.lru_cache(maxsize=1)
def load_technology() -> Technology:
    """Load and validate ``hwspecs/data/technology.yaml`` (parsed once, cached).

    Returns:
        :class:`Technology` with every node's cumulative factors computed.

    Raises:
        HardwareSpecError: a malformed entry or a number without a citation.
    """
    doc = _document()
    if not isinstance(doc, Mapping):
        raise _err("top level must be a mapping")
    nodes = _nodes(_section(doc, "nodes"))
    hbm: dict[str, HBMGeneration] = {}
    for name, e in _section(doc, "hbm").items():
        w = f"hbm.{name}"
        hbm[name] = HBMGeneration(
            name=name, status=_str(e, "status", w), pin_rate_gbps=_num(e, "pin_rate_gbps", w)[0],
            bus_width_bits=_int(e, "bus_width_bits", w),
            stack_capacity_gb=_num(e, "stack_capacity_gb", w)[0],
            typical_stacks=_int(e, "typical_stacks", w), sources=_sources(e, w))
        _cited(hbm[name].sources, ("pin_rate_gbps", "bus_width_bits", "stack_capacity_gb",
                                   "typical_stacks"), w)
    links: dict[str, LinkGeneration] = {}
    for name, e in _section(doc, "links").items():
        w = f"links.{name}"
        links[name] = LinkGeneration(
            name=name, status=_str(e, "status", w),
            gbps_per_direction=_num(e, "gbps_per_direction", w)[0],
            links_per_gpu=_int(e, "links_per_gpu", w), sources=_sources(e, w))
        _cited(links[name].sources, ("gbps_per_direction", "links_per_gpu"), w)
    networks: dict[str, NetworkGeneration] = {}
    for name, e in _section(doc, "networks").items():
        w = f"networks.{name}"
        networks[name] = NetworkGeneration(
            name=name, status=_str(e, "status", w), nic_gbit_per_s=_num(e, "nic_gbit_per_s", w)[0],
            nics_per_gpu=_int(e, "nics_per_gpu", w), sources=_sources(e, w))
        _cited(networks[name].sources, ("nic_gbit_per_s", "nics_per_gpu"), w)
    tables: dict[str, Mapping[str, Any]] = {"node": nodes, "memory": hbm, "link": links,
                                            "network": networks}
    refs: dict[str, ReferenceChip] = {}
    for name, e in _section(doc, "references").items():
        w = f"references.{name}"
        ref = ReferenceChip(
            name=name, node=str(e.get("node")), die_area_mm2=_num(e, "die_area_mm2", w)[0],
            power_w=_num(e, "power_w", w)[0], memory=_str(e, "memory", w),
            hbm_stacks=_int(e, "hbm_stacks", w), link=_str(e, "link", w),
            network=_str(e, "network", w), sources=_sources(e, w),
            hbm_stack_gb=_stack_gb(e, w))
        _check_chip(ref, tables, w)
        refs[name] = ref
    chips: dict[str, DatasheetChip] = {}
    for name, e in _section(doc, "chips").items() if "chips" in doc else ():
        w = f"chips.{name}"
        peaks = e.get("peak_tflops")
        if not isinstance(peaks, Mapping) or not peaks:
            raise _err(f"{w}.peak_tflops must be a non-empty mapping")
        chip = DatasheetChip(
            name=name, node=str(e.get("node")), die_area_mm2=_num(e, "die_area_mm2", w)[0],
            power_w=_num(e, "power_w", w)[0], memory=_str(e, "memory", w),
            hbm_stacks=_int(e, "hbm_stacks", w), hbm_stack_gb=_stack_gb(e, w),
            link=_str(e, "link", w), network=_str(e, "network", w),
            peak_tflops=FrozenMapping({str(d): _num(peaks, d, f"{w}.peak_tflops")[0]
                                       for d in peaks}),
            hbm_bandwidth_gbps=_num(e, "hbm_bandwidth_gbps", w)[0],
            hbm_capacity_gb=_num(e, "hbm_capacity_gb", w)[0],
            link_gbps_per_direction=_num(e, "link_gbps_per_direction", w)[0],
            sources=_sources(e, w))
        _check_chip(chip, tables, w)
        _cited(chip.sources, ("peak_tflops", "hbm_bandwidth_gbps", "hbm_capacity_gb",
                              "link_gbps_per_direction"), w)
        chips[name] = chip
    return Technology(nodes=FrozenMapping(nodes), hbm=FrozenMapping(hbm), links=FrozenMapping(links),
                      networks=FrozenMapping(networks), references=FrozenMapping(refs),
                      chips=FrozenMapping(chips))


def _stack_gb(e: Mapping[str, Any], where: str) -> float | None:
    """The optional ``hbm_stack_gb`` of a chip (None: the generation's stack capacity)."""
    return None if e.get("hbm_stack_gb") is None else _num(e, "hbm_stack_gb", where)[0]


def _check_chip(chip: ReferenceChip | DatasheetChip, tables: Mapping[str, Mapping[str, Any]],
                where: str) -> None:
    """Citations for the chip's own numbers, and its names present in the other tables."""
    _cited(chip.sources, ("node", "die_area_mm2", "power_w"), where)
    if chip.hbm_stack_gb is not None:
        _cited(chip.sources, ("hbm_stack_gb",), where)
    for key, table in tables.items():
        if getattr(chip, key) not in table:
            raise _err(f"{where}.{key} {getattr(chip, key)!r} is not in section {key!r}")


# --------------------------------------------------------------------- model


def _pick(table: Mapping[str, Any], key: object, what: str) -> Any:
    k = str(key).strip().lower()
    if what == "node" and k.endswith("nm"):
        k = k[:-2].strip()
    if k not in table:
        raise HardwareSpecError(f"unknown {what} {key!r}; known: {', '.join(table)}")
    return table[k]


def _positive(value: float, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 \
            or value == float("inf"):
        raise HardwareSpecError(f"{name} must be a positive finite number (got {value!r})")
    return float(value)


def peak_scale(node: int | str, *, die_area_mm2: float, power_w: float,
               reference: str = "a100-sxm4-80gb") -> PeakScale:
    """The compute scale of a design relative to its reference chip.

    ``s_area = (A/A_ref) * (D(n)/D(n_ref)) * (F(n)/F(n_ref))``,
    ``s_power = (P/P_ref) * (E(n_ref)/E(n))``, ``scale = min(s_area, s_power)``
    (see the module docstring).

    Args:
        node: process node in nm (``5``, ``'5'`` or ``'5nm'``).
        die_area_mm2: compute die area budget, mm^2.
        power_w: power budget, W.
        reference: id of a chip in the ``references`` table (and a hardware file).

    Returns:
        :class:`PeakScale`.

    Raises:
        HardwareSpecError: unknown node or reference, or a non-positive budget.
    """
    tech = load_technology()
    ref: ReferenceChip = _pick(tech.references, reference, "reference")
    n: ProcessNode = _pick(tech.nodes, node, "node")
    nr = tech.nodes[ref.node]
    area = _positive(die_area_mm2, "die_area_mm2")
    power = _positive(power_w, "power_w")
    s_area = (area / ref.die_area_mm2) * (n.density / nr.density) * (n.frequency / nr.frequency)
    s_power = (power / ref.power_w) * (nr.energy / n.energy)
    bound = "area" if s_area < s_power else "power"
    return PeakScale(area_limited=s_area, power_limited=s_power, scale=min(s_area, s_power),
                     bound=bound)


def derive_accelerator(node: int | str, memory: str, link: str, network: str, *,
                       die_area_mm2: float, power_w: float,
                       reference: str = "a100-sxm4-80gb",
                       hbm_stacks: int | None = None,
                       hbm_stack_gb: float | None = None) -> HardwareSpec:
    """An accelerator with the reference's architecture on ``node``, ``memory``, ``link``, ``network``.

    Formulas (SI units; the module docstring states the model and what is not modelled)::

        peak_d         = peak_ref_d * min(s_area, s_power)                    FLOP/s
        s_area         = (A/A_ref) * (D(n)/D(n_ref)) * (F(n)/F(n_ref))
        s_power        = (P/P_ref) * (E(n_ref)/E(n))      # e(n) * peak <= P
        hbm_bandwidth  = stacks * pin_rate_Gb/s * bus_bits / 8 * 1e9          B/s
        hbm_capacity   = stacks * stack_GB * 2**30                            B
        intra_node_bw  = link_GB/s_per_direction * 1e9                        B/s
        inter_node_bw  = nics_per_gpu * nic_Gb/s * 1e9 / 8                    B/s

    Args:
        node: process node in nm: 12, 7, 5, 3, 2 or 1 (``'5nm'`` also accepted).
        memory: HBM generation: ``hbm2``, ``hbm2e``, ``hbm3``, ``hbm3e``, ``hbm4``.
        link: scale-up link: ``nvlink3``/``4``/``5``, ``pcie4``/``5``/``6``.
        network: scale-out network: ``ib-hdr``, ``ib-ndr``, ``ib-xdr``.
        die_area_mm2: compute die area budget in mm^2 (> 0).
        power_w: chip power budget in W (> 0).
        reference: the chip whose architecture, dtype set, latencies, node size
            and generation are kept (an id in the ``references`` table).
        hbm_stacks: HBM stacks per package; the generation's typical count when None.
        hbm_stack_gb: capacity of one stack in GB (a taller stack of the same generation,
            e.g. 12-high 24 GB HBM3 on MI300X); the generation's when None.

    Returns:
        A validated :class:`HardwareSpec` named ``'<node>nm-<memory>-<link>-<network>'``
        with a citation for every field in ``sources``.

    Raises:
        HardwareSpecError: an unknown name, a non-positive budget, stack count or stack
            capacity.
    """
    tech = load_technology()
    ref: ReferenceChip = _pick(tech.references, reference, "reference")
    n: ProcessNode = _pick(tech.nodes, node, "node")
    mem: HBMGeneration = _pick(tech.hbm, memory, "memory generation")
    lk: LinkGeneration = _pick(tech.links, link, "link generation")
    net: NetworkGeneration = _pick(tech.networks, network, "network generation")
    stacks = mem.typical_stacks if hbm_stacks is None else hbm_stacks
    if isinstance(stacks, bool) or not isinstance(stacks, int) or stacks <= 0:
        raise HardwareSpecError(f"hbm_stacks must be a positive integer (got {hbm_stacks!r})")
    stack_gb = mem.stack_capacity_gb if hbm_stack_gb is None else _positive(hbm_stack_gb,
                                                                            "hbm_stack_gb")
    ps = peak_scale(n.name, die_area_mm2=die_area_mm2, power_w=power_w, reference=ref.name)
    base = load_hardware(ref.name)

    peaks = {d: v * ps.scale for d, v in base.peak_flops.items()}
    # the special function units scale with the SMs and clock, as the tensor cores do
    peak_exp = base.peak_exp * ps.scale if base.peak_exp else None
    # the sustained fraction of the peak is the architecture's: the measured rate scales too
    matmul = base.matmul_measured * ps.scale if base.matmul_measured else None
    matmul_fp8 = base.matmul_measured_fp8 * ps.scale if base.matmul_measured_fp8 else None
    hbm_bw = stacks * mem.stack_bandwidth
    hbm_cap = stacks * stack_gb * GIB
    intra_bw = lk.gbps_per_direction * 1e9
    inter_bw = net.nics_per_gpu * net.nic_gbit_per_s * 1e9 / 8.0

    node_src = "; ".join(f"{k}: {v}" for k, v in n.sources.items())
    ref_src = "; ".join(f"{k}: {v}" for k, v in ref.sources.items())
    sources = {
        "peak_flops": (f"DERIVED (hwspecs.technology, {ps.bound}-bound, x{ps.scale:.3f} of "
                       f"{ref.name}: s_area={ps.area_limited:.3f}, s_power={ps.power_limited:.3f}). "
                       f"Reference peaks: {base.sources.get('peak_flops', '')} Reference chip: "
                       f"{ref_src} Node {n.name} nm ({n.foundry_process}, {n.status}): {node_src}"),
        "hbm_capacity": f"DERIVED: {stacks} x {stack_gb:g} GB {mem.name} stacks. "
                        f"{mem.sources.get('stack_capacity_gb', '')}",
        "hbm_bandwidth": f"DERIVED: {stacks} x {mem.pin_rate_gbps:g} Gb/s x {mem.bus_width_bits} bits "
                         f"{mem.name} stacks. {mem.sources.get('pin_rate_gbps', '')}",
        "intra_node_bandwidth": f"{lk.name}: {lk.sources.get('gbps_per_direction', '')}",
        "inter_node_bandwidth": f"{net.name}: {net.sources.get('nic_gbit_per_s', '')}",
    }
    for f in ("intra_node_latency", "inter_node_latency", "gpus_per_node"):
        sources[f] = f"from the reference {ref.name}: {base.sources.get(f, '')}"
    if peak_exp:
        sources["peak_exp"] = (f"DERIVED (hwspecs.technology): x{ps.scale:.3f} of {ref.name}, as "
                               f"the peaks. Reference: {base.sources.get('peak_exp', '')}")
    if matmul:
        sources["matmul_measured"] = (f"DERIVED (hwspecs.technology): x{ps.scale:.3f} of "
                                      f"{ref.name}, as the peaks. Reference: "
                                      f"{base.sources.get('matmul_measured', '')}")
    if matmul_fp8:
        sources["matmul_measured_fp8"] = (f"DERIVED (hwspecs.technology): x{ps.scale:.3f} of "
                                          f"{ref.name}, as the peaks. Reference: "
                                          f"{base.sources.get('matmul_measured_fp8', '')}")
    name = f"{n.name}nm-{mem.name}-{lk.name}-{net.name}"
    description = (f"Derived accelerator ({ref.name} architecture) on the {n.name} nm node "
                   f"({n.foundry_process}), {die_area_mm2:g} mm^2, {power_w:g} W, "
                   f"{stacks}x {mem.name.upper()}, {lk.name}, {net.name}")
    return HardwareSpec(
        name=name, description=description, generation=base.generation, peak_flops=peaks,
        hbm_capacity=hbm_cap, hbm_bandwidth=hbm_bw, intra_node_bandwidth=intra_bw,
        intra_node_latency=base.intra_node_latency, inter_node_bandwidth=inter_bw,
        inter_node_latency=base.inter_node_latency, gpus_per_node=base.gpus_per_node,
        sources=sources, peak_exp=peak_exp, matmul_measured=matmul,
        matmul_measured_fp8=matmul_fp8)
