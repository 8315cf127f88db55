"""GCE prices for cost figures: a dated snapshot shipped with the package, refreshable.

Why a snapshot: cost figures are printed before and after runs, often without credentials, so
they cannot depend on a live price lookup. Every figure must therefore say which snapshot it
used (``PriceTable.label()``), and ``expocloud prices --refresh`` replaces the snapshot by
today's Cloud Billing Catalog prices in a per-user cache (``price_catalog``; the command is
``prices_command``).

Google prices Compute Engine per vCPU-hour and per GiB-hour, per machine family, region and
market (on-demand or Spot); a machine type costs its vCPUs and its memory at its family's rates.
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from expo_executor.core.errors import ExpoError
from expo_executor.cost import machines

log = logging.getLogger(__name__)

MACHINE_SETTING = "--expocloud-gce-machine-type"
GPU_SETTING = "resource 'gpu_type'"
ZONES_SETTING = "--expocloud-gce-zones"
CATALOG_SOURCE = "Cloud Billing Catalog API"
MARKETS = ("on_demand", "spot")
DEFAULT_REGION = "us-central1"
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")


@dataclass(frozen=True)
class Rate:
    """USD per vCPU-hour and per GiB-hour of one family, region and market."""

    vcpu_hour: float
    gb_hour: float


@dataclass(frozen=True)
class PriceTable:
    """One region's rates per family (and market), and where they come from.

    ``origin`` is "bundled" (the snapshot shipped with the package) or "refreshed" (the cache
    ``expocloud prices --refresh`` wrote); ``label()`` is what every printed cost figure carries.
    """

    snapshot: str
    source: str
    region: str
    rates: Mapping[str, Mapping[str, Rate]] = field(hash=False)
    origin: str = "bundled"
    gpus: Mapping[str, Mapping[str, float]] = field(default_factory=dict, hash=False)  # USD/h

    def gpu_hourly(self, gpu_type: str, spot: bool) -> float:
        """USD per hour of one GPU of ``gpu_type`` attached to a VM of this market."""
        market = "spot" if spot else "on_demand"
        price = self.gpus.get(gpu_type, {}).get(market)
        if price is None:
            priced = ", ".join(sorted(self.gpus)) or "none"
            raise ExpoError(GPU_SETTING, f"no {market.replace('_', '-')} price for {gpu_type} "
                            f"in {self.region} ({self.label()}; priced: {priced})",
                            "use a priced GPU type or region, or run without a budget "
                            "(the run is then not metered)")
        return price

    def shape_hourly(self, machine_type: str, gpu_type: str | None, gpu_count: int,
                     spot: bool) -> float:
        """USD per hour of a VM of ``machine_type`` with ``gpu_count`` GPUs of ``gpu_type``
        attached (those an a2 or g2 type comes with are in its own price already)."""
        total = self.hourly(machine_type, spot)
        if gpu_type and gpu_count and machines.attached_gpus(machine_type) is None:
            total += gpu_count * self.gpu_hourly(gpu_type, spot)
        return total

    def label(self) -> str:
        return f"prices: snapshot {self.snapshot} ({self.origin}), {self.region}"

    def hourly(self, machine_type: str, spot: bool) -> float:
        """USD per hour of one VM: billed vCPUs x vCPU rate + GiB x GiB rate, plus the GPUs an
        accelerator-optimized type (a2, g2) comes with."""
        market = "spot" if spot else "on_demand"
        shape = machines.shape(machine_type)
        vcpus = machines.billed_vcpus(machine_type)
        if shape is None or vcpus is None:
            raise ExpoError(MACHINE_SETTING, f"cannot read the machine type {machine_type!r}",
                            "give a predefined type such as e2-standard-4 "
                            "(`expocloud prices` lists them)")
        if machines.is_custom(machine_type):
            raise ExpoError(MACHINE_SETTING, f"{machine_type} is a custom type, billed at "
                            f"custom rates the price table does not hold ({self.label()})",
                            "use a predefined type for a cost figure (`expocloud prices`)")
        fam = machines.family(machine_type)
        rate = self.rates.get(fam, {}).get(market)
        if rate is None:
            priced = ", ".join(sorted(self.rates)) or "none"
            raise ExpoError(MACHINE_SETTING, f"no {market.replace('_', '-')} price for the {fam} "
                            f"family in {self.region} ({self.label()})",
                            f"use a priced family ({priced}) or another region, or run "
                            "`expocloud prices --refresh`")
        attached = machines.attached_gpus(machine_type)
        gpus = attached[1] * self.gpu_hourly(attached[0], spot) if attached else 0.0
        return vcpus * rate.vcpu_hour + shape.memory_mb / 1024 * rate.gb_hour + gpus

    def priced(self, machine_type: str) -> bool:
        """Whether both pools (on-demand and Spot) of this type have a price here."""
        try:
            self.hourly(machine_type, spot=False)
            self.hourly(machine_type, spot=True)
        except ExpoError:
            return False
        return True

    def candidates(self, min_vcpus: int = 1, max_vcpus: int = 32) -> list[str]:
        """Every predefined type of the priced families within the vCPU bounds."""
        return [t for fam in sorted(self.rates) for t in machines.predefined_types(fam)
                if min_vcpus <= machines.shape(t).vcpus <= max_vcpus  # type: ignore[union-attr]
                and self.priced(t)]


def region_of(zone: str) -> str:
    """The region of a zone: us-central1-a -> us-central1."""
    match = _ZONE.match(zone)
    if not match:
        raise ExpoError(ZONES_SETTING, f"{zone!r} is not a zone name",
                        "write zones like us-central1-a")
    return match.group(1)


def default_cache() -> Path:
    """Where ``--refresh`` writes: $XDG_CACHE_HOME/expocloud/prices.json, else ~/.cache/..."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "expocloud" / "prices.json"


def bundled_snapshot() -> dict[str, Any]:
    """The snapshot shipped with the package (``data/prices.json``)."""
    return json.loads(resources.files(__package__).joinpath("data/prices.json").read_text())


def _table(doc: Mapping[str, Any], region: str, origin: str) -> PriceTable:
    rates = {fam: {m: Rate(float(r[m]["vcpu_hour"]), float(r[m]["gb_hour"]))
                   for m in MARKETS if "vcpu_hour" in r.get(m, {}) and "gb_hour" in r.get(m, {})}
             for fam, regions in doc.get("families", {}).items()
             if (r := regions.get(region)) is not None}
    # a refresh brings no GPU prices yet
    gpus = doc.get("gpus") or bundled_snapshot().get("gpus", {})
    return PriceTable(str(doc["snapshot"]), str(doc.get("source", "")), region,
                      {fam: m for fam, m in rates.items() if m}, origin,
                      {gpu: {m: float(p) for m, p in regions[region].items() if m in MARKETS}
                       for gpu, regions in gpus.items() if region in regions})


def priced_regions(doc: Mapping[str, Any]) -> set[str]:
    """Every region a snapshot has prices for, in any family."""
    return {region for regions in doc.get("families", {}).values() for region in regions}


def load(region: str, cache: Path | None = None) -> PriceTable:
    """The refreshed cache's prices if it holds the region, else the bundled snapshot's."""
    path = cache or default_cache()
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            if region in priced_regions(doc):
                return _table(doc, region, "refreshed")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the price cache %s (%s); using the bundled snapshot", path, exc)
    doc = bundled_snapshot()
    if region not in priced_regions(doc):
        raise ExpoError(ZONES_SETTING, f"no prices for region {region} in the bundled snapshot "
                        f"{doc['snapshot']} (it has {', '.join(sorted(priced_regions(doc)))})",
                        f"run `expocloud prices --refresh --region {region}` with Google "
                        "credentials, or use zones of a priced region")
    return _table(doc, region, "bundled")
