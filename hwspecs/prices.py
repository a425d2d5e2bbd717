"""Price model: USD per GPU-hour from a rental price, or from capital expense, amortization and
power, and the sourced quotes of ``hwspecs/data/prices.yaml``.

The model (units in the names)::

    usd_per_gpu_hour = rent_usd_per_gpu_hour
                     + capex_usd_per_gpu / (amortization_years * HOURS_PER_YEAR)
                     + power_w / 1000 * pue * usd_per_kwh

    cost_per_token_usd = num_gpus * usd_per_gpu_hour / 3600 / tokens_per_s

Either part may be zero: a cloud rental is ``rent`` alone (the provider's price already
includes power); ownership is capex plus energy at the chip's power budget times the
facility's PUE. The energy term assumes the chip draws its power budget all the time (an
upper bound) and leaves out hosts, network and cooling beyond the PUE.

Example:
    >>> from hwspecs.prices import PriceModel, list_price
    >>> round(list_price("h100-sxm5-80gb").usd_per_gpu_hour, 2)    # Lambda, 2025
    2.99
    >>> PriceModel(capex_usd_per_gpu=30000, amortization_years=5, usd_per_kwh=0.08,
    ...            pue=1.2).usd_per_gpu_hour(700.0) > 0.68
    True
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from typing import Any

from . import checks
from .errors import HardwareSpecError
from .loader import parse_yaml
from .spec import FrozenMapping

__all__ = ["HOURS_PER_YEAR", "CapexQuote", "PriceModel", "PriceQuote", "Prices",
           "cost_per_token", "list_price", "load_prices"]

_FILE = "prices.yaml"
#: hours in a (Julian) year, 365.25 * 24.
HOURS_PER_YEAR = 8766.0
#: the provider whose quotes :func:`list_price` uses by default (one provider, one date).
DEFAULT_PROVIDER = "lambda-2025"


@dataclass(frozen=True)
class PriceQuote:
    """A cloud on-demand list price. ``usd_per_gpu_hour`` = instance price / GPUs."""

    hardware: str
    provider: str
    instance: str
    usd_per_instance_hour: float
    gpus: int
    date: str
    source: str

    @property
    def usd_per_gpu_hour(self) -> float:
        """USD per GPU-hour."""
        return self.usd_per_instance_hour / self.gpus


@dataclass(frozen=True)
class CapexQuote:
    """A published system purchase price. ``usd_per_gpu`` = system price / GPUs."""

    hardware: str
    system: str
    usd: float
    gpus: int
    date: str
    source: str

    @property
    def usd_per_gpu(self) -> float:
        """USD per GPU."""
        return self.usd / self.gpus


@dataclass(frozen=True)
class Prices:
    """The whole ``prices.yaml``: quotes per hardware id, capex per hardware id, TCO defaults
    (``amortization_years``, ``usd_per_kwh``, ``pue``) with their sources."""

    quotes: Mapping[str, tuple[PriceQuote, ...]]
    capex: Mapping[str, CapexQuote]
    tco: Mapping[str, float]
    tco_sources: Mapping[str, str]


@dataclass(frozen=True)
class PriceModel:
    """USD per GPU-hour: rent + amortized capital expense + energy (module docstring).

    Attributes:
        rent_usd_per_gpu_hour: rental price per GPU-hour, USD (>= 0).
        capex_usd_per_gpu: purchase price per GPU (its share of the system), USD (>= 0).
        amortization_years: years over which capex is spread (> 0).
        usd_per_kwh: electricity price, USD per kWh (>= 0).
        pue: power usage effectiveness of the facility (>= 1).
        source: where the numbers come from (free text, reported with the result).

    Raises:
        HardwareSpecError: a negative or non-finite component, ``amortization_years <= 0``,
            ``pue < 1``, or every component zero (no price at all).
    """

    rent_usd_per_gpu_hour: float = 0.0
    capex_usd_per_gpu: float = 0.0
    amortization_years: float = 6.0
    usd_per_kwh: float = 0.0
    pue: float = 1.0
    source: str = ""

    def __post_init__(self) -> None:
        for name in ("rent_usd_per_gpu_hour", "capex_usd_per_gpu", "usd_per_kwh"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise HardwareSpecError(f"price: {name} must be a finite number >= 0 (got {v!r})")
        if not (isinstance(self.amortization_years, (int, float))
                and math.isfinite(self.amortization_years) and self.amortization_years > 0):
            raise HardwareSpecError(f"price: amortization_years must be > 0 "
                                    f"(got {self.amortization_years!r})")
        if not (isinstance(self.pue, (int, float)) and math.isfinite(self.pue) and self.pue >= 1):
            raise HardwareSpecError(f"price: pue must be >= 1 (got {self.pue!r})")
        if self.rent_usd_per_gpu_hour == 0 and self.capex_usd_per_gpu == 0 \
                and self.usd_per_kwh == 0:
            raise HardwareSpecError("price: give a rent, a capex or an electricity price (all 0)")

    def usd_per_gpu_hour(self, power_w: float) -> float:
        """USD per GPU-hour of a GPU drawing ``power_w`` W (only the energy term uses it).

        Raises:
            HardwareSpecError: ``power_w`` negative or not finite.
        """
        if not (math.isfinite(power_w) and power_w >= 0):
            raise HardwareSpecError(f"price: power_w must be a finite number >= 0 (got {power_w!r})")
        return (self.rent_usd_per_gpu_hour
                + self.capex_usd_per_gpu / (self.amortization_years * HOURS_PER_YEAR)
                + power_w / 1000.0 * self.pue * self.usd_per_kwh)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready description (the inputs of the model)."""
        return {"rent_usd_per_gpu_hour": self.rent_usd_per_gpu_hour,
                "capex_usd_per_gpu": self.capex_usd_per_gpu,
                "amortization_years": self.amortization_years,
                "usd_per_kwh": self.usd_per_kwh, "pue": self.pue, "source": self.source}


def cost_per_token(usd_per_gpu_hour: float, num_gpus: int, tokens_per_s: float) -> float:
    """USD per token: ``num_gpus * usd_per_gpu_hour / 3600 / tokens_per_s``.

    Raises:
        HardwareSpecError: ``tokens_per_s`` not positive.
    """
    if not tokens_per_s > 0:
        raise HardwareSpecError(f"price: tokens_per_s must be > 0 (got {tokens_per_s!r})")
    return num_gpus * usd_per_gpu_hour / 3600.0 / tokens_per_s


# ------------------------------------------------------------------- loading


def _err(msg: str) -> HardwareSpecError:
    return HardwareSpecError(f"hwspecs: {_FILE}: {msg}")


def _positive(e: Mapping[str, Any], key: str, where: str) -> float:
    return checks.positive_number(e, key, where, _err)


def _count(e: Mapping[str, Any], key: str, where: str) -> int:
    return checks.positive_int(e, key, where, _err)


def _text(e: Mapping[str, Any], key: str, where: str) -> str:
    return checks.text(e, key, where, _err)


@functools.lru_cache(maxsize=1)
def load_prices() -> Prices:
    """Load and validate ``hwspecs/data/prices.yaml`` (parsed once, cached).

    Raises:
        HardwareSpecError: a malformed entry, or a number without its date or source.
    """
    text = resources.files("hwspecs").joinpath("data", _FILE).read_text(encoding="utf-8")
    doc = parse_yaml(text, _FILE)
    if not isinstance(doc, Mapping):
        raise _err("top level must be a mapping")
    quotes: dict[str, tuple[PriceQuote, ...]] = {}
    for hw, items in (doc.get("quotes") or {}).items():
        if not isinstance(items, list) or not items:
            raise _err(f"quotes.{hw} must be a non-empty list")
        qs = []
        for i, e in enumerate(items):
            w = f"quotes.{hw}[{i}]"
            if not isinstance(e, Mapping):
                raise _err(f"{w} must be a mapping")
            qs.append(PriceQuote(hardware=str(hw), provider=_text(e, "provider", w),
                                 instance=_text(e, "instance", w),
                                 usd_per_instance_hour=_positive(e, "usd_per_instance_hour", w),
                                 gpus=_count(e, "gpus", w), date=_text(e, "date", w),
                                 source=_text(e, "source", w)))
        quotes[str(hw)] = tuple(qs)
    capex: dict[str, CapexQuote] = {}
    for hw, e in (doc.get("capex") or {}).items():
        w = f"capex.{hw}"
        if not isinstance(e, Mapping):
            raise _err(f"{w} must be a mapping")
        capex[str(hw)] = CapexQuote(hardware=str(hw), system=_text(e, "system", w),
                                    usd=_positive(e, "usd", w), gpus=_count(e, "gpus", w),
                                    date=_text(e, "date", w), source=_text(e, "source", w))
    tco_doc = doc.get("tco")
    if not isinstance(tco_doc, Mapping) or not isinstance(tco_doc.get("sources"), Mapping):
        raise _err("tco must be a mapping with sources")
    tco = {k: _positive(tco_doc, k, "tco") for k in ("amortization_years", "usd_per_kwh", "pue")}
    srcs = {k: _text(tco_doc["sources"], k, "tco.sources") for k in tco}
    return Prices(quotes=FrozenMapping(quotes), capex=FrozenMapping(capex),
                  tco=FrozenMapping(tco), tco_sources=FrozenMapping(srcs))


def list_price(hardware: str, provider: str = DEFAULT_PROVIDER) -> PriceQuote:
    """The on-demand quote of ``hardware`` from ``provider`` (``prices.yaml``).

    Args:
        hardware: a hardware id (``a100-sxm4-80gb``, ``b200``, ...).
        provider: a provider/date label of the file (default :data:`DEFAULT_PROVIDER`).

    Raises:
        HardwareSpecError: no quote for that hardware and provider (names the ones there are).
    """
    prices = load_prices()
    for q in prices.quotes.get(hardware, ()):
        if q.provider == provider:
            return q
    have = [f"{hw} ({q.provider})" for hw, qs in prices.quotes.items() for q in qs]
    raise HardwareSpecError(f"price: no {provider!r} quote for {hardware!r}; quotes: "
                            f"{', '.join(have)}")
