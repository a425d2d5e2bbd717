"""Load and validate hardware-spec YAML files.

File format
-----------
One YAML mapping per file, in human units with the unit in the key name. The
loader (and only the loader) converts to SI base units::

    name: h100-sxm5-80gb            # id; for built-ins it must equal the file stem
    description: NVIDIA H100 SXM5 80GB in a DGX H100 node ...
    generation: hopper              # ampere | ampere_ga10x | ada | hopper | blackwell |
                                    # blackwell_ultra | cdna3
    gpus_per_node: 8                # positive integer
    peak_tflops:                    # DENSE (no 2:4 sparsity) TFLOP/s; int8 in TOPS
      bf16: 989.4                   # keys from fp32, tf32, bf16, fp16, fp8, int8, fp4
    hbm_capacity_gb: 80             # GB as marketed, read as GiB (2**30 bytes)
    hbm_bandwidth_gbps: 3350        # GB/s (gigaBYTES per second, 1e9 B/s)
    intra_node:                     # scale-up link (NVLink, Infinity Fabric, PCIe)
      technology: NVLink 4 via NVSwitch
      gbps_per_direction: 450       # GB/s per GPU per direction (unidirectional)
      latency_us: 1.9               # microseconds, per step/hop
    network:                        # scale-out (compute) fabric of one node
      technology: NDR InfiniBand (ConnectX-7)
      nics_per_node: 8
      nic_gbit_per_s: 400           # Gb/s (gigaBITS per second) per NIC
      latency_us: 4.0               # microseconds, per step/hop
    host_memory_gb: 2048            # optional: the node's CPU (system) memory, GB as
                                    # marketed, read as GiB; shared by its GPUs
    exp_tera_per_s: 3.865           # optional: 32-bit exponentials (special function
                                    # units, MUFU.EX2) per second, in 1e12/s
    matmul_tflops_measured: 794.5   # optional: the highest bf16 matmul rate measured on
                                    # the GPU (TFLOP/s), at most peak_tflops.bf16
    matmul_tflops_measured_fp8: 1402.6  # optional: the same with fp8 operands, at most
                                        # peak_tflops.fp8
    sources:                        # citation for every numeric field group
      peak_tflops: ...
      hbm_capacity_gb: ...
      hbm_bandwidth_gbps: ...
      gpus_per_node: ...
      intra_node: ...
      network: ...

Unit conversions
----------------
* ``peak_tflops`` x 1e12 -> FLOP/s (``int8``: op/s).
* ``hbm_capacity_gb`` x 2**30 -> bytes. NVIDIA's and AMD's marketed HBM sizes
  are binary: an "80GB" A100 or H100 reports 81,920 MiB (80 GiB ~= 85.9e9
  bytes) to ``nvidia-smi``, so the marketed figure is read as GiB. This is the
  only place capacities are converted; every built-in file and user file uses
  this convention.
* ``hbm_bandwidth_gbps`` and ``intra_node.gbps_per_direction`` x 1e9 -> bytes/s.
* Inter-node bandwidth per GPU = ``nics_per_node * nic_gbit_per_s * 1e9 / 8 /
  gpus_per_node`` bytes/s per direction (e.g. DGX A100: 8 x 200 Gb/s for 8
  GPUs -> 25e9 B/s per GPU).
* ``latency_us`` x 1e-6 -> seconds.
* ``host_memory_gb`` x 2**30 -> bytes (the node's system memory, read as GiB like HBM: DGX
  systems are sold with 2 TB of DIMMs, a binary size).
* ``exp_tera_per_s`` x 1e12 -> exponentials/s (``HardwareSpec.peak_exp``).
* ``matmul_tflops_measured`` x 1e12 -> FLOP/s (``HardwareSpec.matmul_measured``).
* ``matmul_tflops_measured_fp8`` x 1e12 -> FLOP/s (``HardwareSpec.matmul_measured_fp8``).

Validation rules (each violation raises :class:`HardwareSpecError` with a
one-line message naming the file, the field and the rule): the document is a
mapping without duplicate keys; no unknown keys at any level (typo protection);
every required field is present; every number is finite and > 0 (booleans and
strings are rejected); ``gpus_per_node`` and ``nics_per_node`` are positive
integers; ``generation`` is known; every ``peak_tflops`` key is a known dtype;
``matmul_tflops_measured`` needs a ``peak_tflops.bf16`` and does not exceed it,
``matmul_tflops_measured_fp8`` the same with ``peak_tflops.fp8``;
``sources`` has a non-empty citation string for every numeric field group and
no other keys.
"""

from __future__ import annotations

import difflib
import functools
import math
import os
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .errors import HardwareSpecError
from .spec import DTYPES, GENERATIONS, HardwareSpec
from .units import GIB

__all__ = ["list_hardware", "load_hardware", "parse_yaml"]

_DATA_PACKAGE = "hwspecs"
_DATA_DIR = "data"
_SUFFIXES = (".yaml", ".yml")
#: Data files in ``hwspecs/data`` that are not hardware specs (loaded elsewhere):
#: ``technology.yaml`` is read by :mod:`hwspecs.technology`, ``prices.yaml`` by
#: :mod:`hwspecs.prices`.
_NOT_HARDWARE = frozenset({"technology.yaml", "prices.yaml"})

_TOP_LEVEL_KEYS = (
    "name",
    "description",
    "generation",
    "gpus_per_node",
    "peak_tflops",
    "hbm_capacity_gb",
    "hbm_bandwidth_gbps",
    "intra_node",
    "network",
    "sources",
    "host_link",
    "host_memory_gb",
    "exp_tera_per_s",
    "matmul_tflops_measured",
    "matmul_tflops_measured_fp8",
)
_INTRA_NODE_KEYS = ("technology", "gbps_per_direction", "latency_us")
_NETWORK_KEYS = ("technology", "nics_per_node", "nic_gbit_per_s", "latency_us")
#: optional ``host_link`` group: the GPU-host link (PCIe, NVLink-C2C), whether GPUs reach each
#: other peer-to-peer over PCIe (default true), and NVLink bridges joining GPU pairs.
_HOST_LINK_KEYS = ("technology", "gbps_per_direction", "peer_to_peer",
                   "bridge_gbps_per_direction")
_HOST_LINK_REQUIRED = ("technology", "gbps_per_direction")
#: optional field groups: cited in ``sources`` only when present.
_OPTIONAL_GROUPS = ("host_link", "host_memory_gb", "exp_tera_per_s", "matmul_tflops_measured",
                    "matmul_tflops_measured_fp8")
#: Numeric field groups that need a citation in ``sources``, and the
#: HardwareSpec fields each one backs.
_SOURCE_GROUPS: dict[str, tuple[str, ...]] = {
    "peak_tflops": ("peak_flops",),
    "hbm_capacity_gb": ("hbm_capacity",),
    "hbm_bandwidth_gbps": ("hbm_bandwidth",),
    "gpus_per_node": ("gpus_per_node",),
    "intra_node": ("intra_node_bandwidth", "intra_node_latency"),
    "network": ("inter_node_bandwidth", "inter_node_latency"),
    "host_link": ("host_link_bandwidth", "peer_to_peer", "bridge_bandwidth"),
    "host_memory_gb": ("host_memory",),
    "exp_tera_per_s": ("peak_exp",),
    "matmul_tflops_measured": ("matmul_measured",),
    "matmul_tflops_measured_fp8": ("matmul_measured_fp8",),
}


# --------------------------------------------------------------------------- YAML


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate mapping keys instead of keeping the last."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> Any:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            is_duplicate = key in seen
            seen.add(key)
        except TypeError:  # unhashable key: the base constructor reports it
            continue
        if is_duplicate:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping
)


def parse_yaml(text: str, where: str) -> Any:
    """Parse the YAML document ``text`` (safe loader that refuses duplicate keys).

    Args:
        text: YAML source.
        where: file name or description, for the message.

    Raises:
        HardwareSpecError: ``"hwspecs: <where>: invalid YAML: <problem> at line L, column C"``.
    """
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - SafeLoader subclass
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise HardwareSpecError(f"hwspecs: {where}: invalid YAML: {problem}{at}") from None


# --------------------------------------------------------------------- validation


class _Checker:
    """Field-level validation helpers that produce one-line, file-naming errors."""

    def __init__(self, where: str) -> None:
        self.where = where

    def error(self, msg: str) -> HardwareSpecError:
        return HardwareSpecError(f"hwspecs: {self.where}: {msg}")

    def mapping(self, value: Any, field: str) -> Mapping[str, Any]:
        if not isinstance(value, Mapping):
            raise self.error(f"field {field!r} must be a mapping (got {type(value).__name__})")
        for key in value:
            if not isinstance(key, str):
                raise self.error(f"field {field!r} has a non-string key {key!r}")
        return value

    def keys(self, data: Mapping[str, Any], allowed: tuple[str, ...], prefix: str = "",
             optional: tuple[str, ...] = ()) -> None:
        for key in data:
            if key not in allowed:
                hint = difflib.get_close_matches(key, allowed, n=1)
                did_you_mean = f"; did you mean {hint[0]!r}?" if hint else ""
                raise self.error(
                    f"unknown field {prefix + key!r} (allowed: {', '.join(allowed)}){did_you_mean}"
                )
        for key in allowed:
            if key not in data and key not in optional:
                raise self.error(f"missing required field {prefix + key!r}")

    def string(self, value: Any, field: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(f"field {field!r} must be a non-empty string (got {value!r})")
        return value

    def positive(self, value: Any, field: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(f"field {field!r} must be a number (got {type(value).__name__} {value!r})")
        if not math.isfinite(value):
            raise self.error(f"field {field!r} must be finite (got {value!r})")
        if value <= 0:
            raise self.error(f"field {field!r} must be > 0 (got {value!r})")
        return float(value)

    def positive_int(self, value: Any, field: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.error(f"field {field!r} must be a positive integer (got {value!r})")
        return value


def _spec_from_document(doc: Any, where: str) -> HardwareSpec:
    """Validate a parsed YAML document and convert it to a :class:`HardwareSpec`."""
    c = _Checker(where)
    if doc is None:
        raise c.error("file is empty; expected a mapping of fields")
    if not isinstance(doc, Mapping):
        raise c.error(f"top level must be a mapping of fields (got {type(doc).__name__})")
    c.mapping(doc, "<top level>")
    c.keys(doc, _TOP_LEVEL_KEYS, optional=_OPTIONAL_GROUPS)

    name = c.string(doc["name"], "name")
    description = c.string(doc["description"], "description")
    generation = doc["generation"]
    if generation not in GENERATIONS:
        raise c.error(
            f"field 'generation' must be one of {', '.join(sorted(GENERATIONS))} (got {generation!r})"
        )
    gpus_per_node = c.positive_int(doc["gpus_per_node"], "gpus_per_node")

    peaks_in = c.mapping(doc["peak_tflops"], "peak_tflops")
    if not peaks_in:
        raise c.error("field 'peak_tflops' must list at least one dtype")
    peak_flops: dict[str, float] = {}
    for dtype, value in peaks_in.items():
        if dtype not in DTYPES:
            raise c.error(
                f"field 'peak_tflops.{dtype}' is not a known dtype (known: {', '.join(sorted(DTYPES))})"
            )
        peak_flops[dtype] = c.positive(value, f"peak_tflops.{dtype}") * 1e12

    hbm_capacity = c.positive(doc["hbm_capacity_gb"], "hbm_capacity_gb") * GIB
    hbm_bandwidth = c.positive(doc["hbm_bandwidth_gbps"], "hbm_bandwidth_gbps") * 1e9

    intra = c.mapping(doc["intra_node"], "intra_node")
    c.keys(intra, _INTRA_NODE_KEYS, prefix="intra_node.")
    c.string(intra["technology"], "intra_node.technology")
    intra_bw = c.positive(intra["gbps_per_direction"], "intra_node.gbps_per_direction") * 1e9
    intra_lat = c.positive(intra["latency_us"], "intra_node.latency_us") / 1e6

    net = c.mapping(doc["network"], "network")
    c.keys(net, _NETWORK_KEYS, prefix="network.")
    c.string(net["technology"], "network.technology")
    nics = c.positive_int(net["nics_per_node"], "network.nics_per_node")
    nic_gbit = c.positive(net["nic_gbit_per_s"], "network.nic_gbit_per_s")
    inter_bw = nics * nic_gbit * 1e9 / 8.0 / gpus_per_node
    inter_lat = c.positive(net["latency_us"], "network.latency_us") / 1e6

    host_bw: float | None = None
    bridge_bw: float | None = None
    p2p = True
    if "host_link" in doc:
        host = c.mapping(doc["host_link"], "host_link")
        for key in host:
            if key not in _HOST_LINK_KEYS:
                raise c.error(f"field 'host_link.{key}' is unknown (allowed: "
                              f"{', '.join(_HOST_LINK_KEYS)})")
        for key in _HOST_LINK_REQUIRED:
            if key not in host:
                raise c.error(f"field 'host_link.{key}' is missing")
        c.string(host["technology"], "host_link.technology")
        host_bw = c.positive(host["gbps_per_direction"], "host_link.gbps_per_direction") * 1e9
        if "bridge_gbps_per_direction" in host:
            bridge_bw = c.positive(host["bridge_gbps_per_direction"],
                                   "host_link.bridge_gbps_per_direction") * 1e9
        if "peer_to_peer" in host:
            if not isinstance(host["peer_to_peer"], bool):
                raise c.error("field 'host_link.peer_to_peer' must be true or false "
                              f"(got {host['peer_to_peer']!r})")
            p2p = host["peer_to_peer"]

    host_memory = (c.positive(doc["host_memory_gb"], "host_memory_gb") * GIB
                   if "host_memory_gb" in doc else None)

    peak_exp = (c.positive(doc["exp_tera_per_s"], "exp_tera_per_s") * 1e12
                if "exp_tera_per_s" in doc else None)
    matmul_measured = (c.positive(doc["matmul_tflops_measured"], "matmul_tflops_measured")
                       * 1e12 if "matmul_tflops_measured" in doc else None)
    matmul_measured_fp8 = (c.positive(doc["matmul_tflops_measured_fp8"],
                                      "matmul_tflops_measured_fp8") * 1e12
                           if "matmul_tflops_measured_fp8" in doc else None)

    srcs = c.mapping(doc["sources"], "sources")
    for key in srcs:
        if key not in _SOURCE_GROUPS:
            raise c.error(
                f"field 'sources.{key}' is not a numeric field group "
                f"(allowed: {', '.join(_SOURCE_GROUPS)})"
            )
    sources: dict[str, str] = {}
    for group, spec_fields in _SOURCE_GROUPS.items():
        if group in _OPTIONAL_GROUPS and group not in doc:
            if group in srcs:
                raise c.error(f"field 'sources.{group}' cites a group the file does not have")
            continue
        if group not in srcs:
            raise c.error(f"field 'sources' is missing a citation for {group!r}")
        citation = " ".join(c.string(srcs[group], f"sources.{group}").split())
        for spec_field in spec_fields:
            sources[spec_field] = citation

    return HardwareSpec(
        name=name,
        description=" ".join(description.split()),
        generation=generation,
        peak_flops=peak_flops,
        hbm_capacity=hbm_capacity,
        hbm_bandwidth=hbm_bandwidth,
        intra_node_bandwidth=intra_bw,
        intra_node_latency=intra_lat,
        inter_node_bandwidth=inter_bw,
        inter_node_latency=inter_lat,
        gpus_per_node=gpus_per_node,
        sources=sources,
        host_link_bandwidth=host_bw,
        peer_to_peer=p2p,
        bridge_bandwidth=bridge_bw,
        host_memory=host_memory,
        peak_exp=peak_exp,
        matmul_measured=matmul_measured,
        matmul_measured_fp8=matmul_measured_fp8,
    )


# ------------------------------------------------------------------------ loading


def _data_dir() -> Any:
    return resources.files(_DATA_PACKAGE).joinpath(_DATA_DIR)


@functools.lru_cache(maxsize=1)
def _builtin_ids() -> tuple[str, ...]:
    ids = []
    for entry in _data_dir().iterdir():
        if entry.name in _NOT_HARDWARE:
            continue
        if entry.is_file() and entry.name.endswith(".yaml"):
            ids.append(entry.name[: -len(".yaml")])
    return tuple(sorted(ids))


@functools.lru_cache(maxsize=None)
def _load_builtin(hw_id: str) -> HardwareSpec:
    filename = f"{hw_id}.yaml"
    text = _data_dir().joinpath(filename).read_text(encoding="utf-8")
    spec = _spec_from_document(parse_yaml(text, filename), filename)
    if spec.name != hw_id:
        raise HardwareSpecError(
            f"hwspecs: {filename}: field 'name' must equal the file id {hw_id!r} (got {spec.name!r})"
        )
    return spec


def _load_path(path: Path) -> HardwareSpec:
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise HardwareSpecError(f"hwspecs: {where}: cannot read hardware file ({reason})") from None
    except UnicodeDecodeError:
        raise HardwareSpecError(f"hwspecs: {where}: file is not valid UTF-8 text") from None
    return _spec_from_document(parse_yaml(text, where), where)


def _looks_like_path(s: str) -> bool:
    seps = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return any(sep in s for sep in seps) or s.lower().endswith(_SUFFIXES)


def list_hardware() -> list[str]:
    """List the ids of the built-in hardware specs.

    Returns:
        Sorted list of ids (e.g. ``'h100-sxm5-80gb'``), each loadable with
        :func:`load_hardware`. A new list each call.
    """
    return list(_builtin_ids())


def load_hardware(name_or_path: str | os.PathLike[str]) -> HardwareSpec:
    """Load a hardware spec by built-in id or from a user YAML file.

    A ``str`` that exactly equals a built-in id (see :func:`list_hardware`)
    loads that built-in; ids are never matched by substring or case-folding.
    An :class:`os.PathLike`, or a ``str`` containing a path separator or
    ending in ``.yaml``/``.yml``, is read as a file in the format described in
    this module's docstring. Built-ins are parsed once and cached; user files
    are re-read on every call.

    Args:
        name_or_path: A built-in id such as ``'a100-sxm4-80gb'``, or a path to
            a YAML file.

    Returns:
        The validated spec, with every quantity converted to SI base units
        (FLOP/s, bytes, bytes/s, seconds).

    Raises:
        HardwareSpecError: If the id is unknown (the message lists the known
            ids), the file cannot be read or parsed, or the content breaks a
            validation rule (the message names the file, the field and the
            rule).
    """
    if isinstance(name_or_path, os.PathLike):
        return _load_path(Path(os.fspath(name_or_path)))
    if not isinstance(name_or_path, str):
        raise HardwareSpecError(
            f"hwspecs: load_hardware() expects a hardware id or a path (got {type(name_or_path).__name__})"
        )
    known = _builtin_ids()
    if name_or_path in known:
        return _load_builtin(name_or_path)
    if _looks_like_path(name_or_path):
        return _load_path(Path(name_or_path))
    raise HardwareSpecError(f"unknown hardware {name_or_path!r}; known: {', '.join(known)}")
