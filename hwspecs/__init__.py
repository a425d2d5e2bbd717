"""Hardware-spec database: per-GPU peak compute, memory and interconnect figures.

Built-in specs live in ``hwspecs/data/<id>.yaml`` in human units with a
datasheet citation for every number; :func:`load_hardware` validates them and
converts to SI base units. Nothing is read at import time.

Example:
    >>> from hwspecs import load_hardware
    >>> h100 = load_hardware("h100-sxm5-80gb")
    >>> round(h100.peak("bf16") / h100.hbm_bandwidth)   # ridge point, FLOP/byte
    295
"""

from .errors import HardwareSpecError
from .loader import list_hardware, load_hardware
from .spec import (ASYNC_MMA_GENERATIONS, DTYPES, GENERATIONS, MATMUL_CEILING_UNMEASURED,
                   HardwareSpec)
from .units import GIB, format_bytes

__all__ = [
    "ASYNC_MMA_GENERATIONS",
    "DTYPES",
    "GENERATIONS",
    "GIB",
    "HardwareSpec",
    "HardwareSpecError",
    "MATMUL_CEILING_UNMEASURED",
    "format_bytes",
    "list_hardware",
    "load_hardware",
]
