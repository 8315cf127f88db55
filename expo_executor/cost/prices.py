"""GCE prices for cost figures: a dated snapshot shipped with the package, refreshable.

Why a snapshot: cost figures are printed before and after runs, often without credentials, so
they cannot depend on a live price lookup. Every figure must therefore say which snapshot it
used (``PriceTable.label()``), and ``expocloud prices --refresh`` replaces the snapshot by
today's Cloud Billing Catalog prices in a per-user cache.

Google prices Compute Engine per vCPU-hour and per GiB-hour, per machine family, region and
market (on-demand or Spot); a machine type costs its vCPUs and its memory at its family's rates.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date
from importlib import resources
from pathlib import Path
from typing import Any

from expo_executor.core.errors import ExpoError
from expo_executor.cost import machines
from expo_executor.gcp.errors import is_transient
from expo_executor.gcp.retry import retry_call

log = logging.getLogger(__name__)

MACHINE_SETTING = "--expocloud-gce-machine-type"
GPU_SETTING = "resource 'gpu_type'"
ZONES_SETTING = "--expocloud-gce-zones"
REFRESH_SETTING = "--refresh"
COMPUTE_SERVICE = "services/6F81-5844-456A"  # Compute Engine's id in the Cloud Billing Catalog
CATALOG_SOURCE = "Cloud Billing Catalog API"
MARKETS = ("on_demand", "spot")
DEFAULT_REGION = "us-central1"
_ZONE = re.compile(r"^([a-z]+-[a-z]+[0-9]+)-[a-z]$")
_GIB_PER_GB = 1e9 / 2**30  # a price per GB (10^9 bytes) times this is the price per GiB


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


def _bundled() -> dict[str, Any]:
    return json.loads(resources.files(__package__).joinpath("data/prices.json").read_text())


def _table(doc: Mapping[str, Any], region: str, origin: str) -> PriceTable:
    rates = {fam: {m: Rate(float(r[m]["vcpu_hour"]), float(r[m]["gb_hour"]))
                   for m in MARKETS if "vcpu_hour" in r.get(m, {}) and "gb_hour" in r.get(m, {})}
             for fam, regions in doc.get("families", {}).items()
             if (r := regions.get(region)) is not None}
    gpus = doc.get("gpus") or _bundled().get("gpus", {})  # a refresh brings no GPU prices yet
    return PriceTable(str(doc["snapshot"]), str(doc.get("source", "")), region,
                      {fam: m for fam, m in rates.items() if m}, origin,
                      {gpu: {m: float(p) for m, p in regions[region].items() if m in MARKETS}
                       for gpu, regions in gpus.items() if region in regions})


def _regions(doc: Mapping[str, Any]) -> set[str]:
    return {region for regions in doc.get("families", {}).values() for region in regions}


def load(region: str, cache: Path | None = None) -> PriceTable:
    """The refreshed cache's prices if it holds the region, else the bundled snapshot's."""
    path = cache or default_cache()
    if path.exists():
        try:
            doc = json.loads(path.read_text())
            if region in _regions(doc):
                return _table(doc, region, "refreshed")
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the price cache %s (%s); using the bundled snapshot", path, exc)
    doc = _bundled()
    if region not in _regions(doc):
        raise ExpoError(ZONES_SETTING, f"no prices for region {region} in the bundled snapshot "
                        f"{doc['snapshot']} (it has {', '.join(sorted(_regions(doc)))})",
                        f"run `expocloud prices --refresh --region {region}` with Google "
                        "credentials, or use zones of a priced region")
    return _table(doc, region, "bundled")


# -- Cloud Billing Catalog SKUs -----------------------------------------------------------------
# A machine-hour SKU reads "[Spot ][Preemptible ]<FAMILY>[ AMD| Arm| Intel][ Predefined] Instance
# Core|Ram running in <place>"; c2's say "Compute optimized [Instance ]Core|Ram". Spot and the
# older preemptible VMs share one price and the "Preemptible" usage type; when both wordings
# are present the "Spot Preemptible" one is kept.
_MACHINE_SKU = re.compile(
    r"^(?P<spot>Spot )?(?:Preemptible )?"
    r"(?:(?P<family>[A-Z][0-9][A-Z]?)(?: AMD| Arm| ARM| Intel)?(?: Predefined)? Instance"
    r"|(?P<c2>Compute optimized)(?: Instance)?) (?P<part>Core|Ram) running in ")
_NOT_PLAIN = re.compile(r"custom|extended|sole tenancy|commitment|reserved|premium|gpu|"
                        r"licen[cs]|dws|flex|calendar", re.IGNORECASE)
_USAGE = {"OnDemand": "on_demand", "Preemptible": "spot"}
_UNITS = {("Core", "h"): 1.0, ("Ram", "GiBy.h"): 1.0, ("Ram", "GBy.h"): 1 / _GIB_PER_GB}


def _skip_reason(record: Mapping[str, Any]) -> str | None:
    category = record.get("category") or {}
    if category.get("resourceFamily") != "Compute":
        return f"resource family {category.get('resourceFamily') or '?'}"
    usage = category.get("usageType", "")
    if usage not in _USAGE:
        return "commitment" if usage.startswith("Commit") else f"usage type {usage or '?'}"
    if _NOT_PLAIN.search(record.get("description", "")):
        return "custom, sole-tenant, GPU, licence or reserved"
    return None


def _unit_price(record: Mapping[str, Any]) -> tuple[str, float] | None:
    """(usage unit, USD) of the current price's first tier, or None if not in USD."""
    infos = record.get("pricingInfo") or []
    if not infos:
        return None
    expression = infos[-1].get("pricingExpression") or {}  # the last entry is the current one
    tiers = expression.get("tieredRates") or []
    if not tiers:
        return None
    # A run pays the first tier from its first hour; later tiers are account-wide volume rates.
    tier = min(tiers, key=lambda t: float(t.get("startUsageAmount") or 0))
    price = tier.get("unitPrice") or {}
    if price.get("currencyCode", "USD") != "USD":
        return None
    usd = int(price.get("units") or 0) + int(price.get("nanos") or 0) / 1e9
    return str(expression.get("usageUnit", "")), usd


def _classify(record: Mapping[str, Any]) -> tuple[str, str, str, float, int] | str:
    """(family, market, "vcpu_hour" or "gb_hour", USD per unit, rank), or why it is skipped."""
    reason = _skip_reason(record)
    if reason is not None:
        return reason
    match = _MACHINE_SKU.match(record.get("description", ""))
    if match is None:
        return "unrecognised description"
    priced = _unit_price(record)
    if priced is None:
        return "no USD price"
    part, (unit, usd) = match.group("part"), priced
    factor = _UNITS.get((part, unit))
    if factor is None:
        return f"unit {unit!r}"
    return ((match.group("family") or "c2").lower(), _USAGE[record["category"]["usageType"]],
            "vcpu_hour" if part == "Core" else "gb_hour", usd * factor,
            1 if match.group("spot") else 0)


def parse_skus(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Compute Engine SKU records (camelCase REST JSON) -> per-family vCPU and GiB rates.

    Returns ``{"families": {family: {region: {market: {"vcpu_hour", "gb_hour"}}}},
    "used": n, "skipped": n}`` (``families`` has the snapshot's structure). Commitments,
    custom and extended-memory, sole-tenancy, GPU, licence and anything unrecognised are
    skipped and counted: a wrong price is worse than a missing one.
    """
    families: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    ranks: dict[tuple[str, str, str, str], int] = {}
    skipped: Counter[str] = Counter()
    used = 0
    for record in records:
        found = _classify(record)
        if isinstance(found, str):
            skipped[found] += 1
            continue
        fam, market, key, usd, rank = found
        regions = record.get("serviceRegions") or (record.get("geoTaxonomy") or {}).get(
            "regions") or []
        for region in regions:
            slot = (fam, region, market, key)
            if ranks.get(slot, -1) > rank:
                continue
            ranks[slot] = rank
            families.setdefault(fam, {}).setdefault(region, {}).setdefault(market, {})[key] = usd
        used += 1
    for reason, count in sorted(skipped.items()):
        log.info("skipped %d SKU(s): %s", count, reason)
    return {"families": families, "used": used, "skipped": sum(skipped.values())}


# -- refresh --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RefreshSummary:
    """What ``refresh`` wrote, for one line of output."""

    path: Path
    snapshot: str
    used: int
    skipped: int
    families: tuple[str, ...]
    regions: int

    def line(self) -> str:
        return (f"refreshed prices: snapshot {self.snapshot} from the {CATALOG_SOURCE}, "
                f"{len(self.families)} families ({', '.join(self.families)}) in {self.regions} "
                f"regions from {self.used} SKUs ({self.skipped} skipped), written to {self.path}")


def _default_client() -> Any:
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError
    from google.cloud import billing_v1

    try:
        credentials, _ = google.auth.default(
            scopes=["https://www.googleapis.com/auth/cloud-platform"])
    except DefaultCredentialsError:
        raise ExpoError(REFRESH_SETTING, "no Google Cloud credentials found, so the bundled "
                        f"snapshot {_bundled()['snapshot']} stays in use",
                        "run `gcloud auth application-default login`, then refresh again") \
            from None
    return billing_v1.CloudCatalogClient(credentials=credentials, transport="rest")


def catalog_client(endpoint: str) -> Any:
    """A REST catalog client for a local fake at ``endpoint``, with anonymous credentials."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import billing_v1

    return billing_v1.CloudCatalogClient(transport="rest",
                                         client_options={"api_endpoint": endpoint},
                                         credentials=AnonymousCredentials())


def _records(client: Any) -> list[dict[str, Any]]:
    from google.api_core.exceptions import GoogleAPICallError
    from google.auth.exceptions import GoogleAuthError
    from google.cloud import billing_v1

    def fetch() -> list[dict[str, Any]]:  # the whole listing again: a page token may expire
        pager = client.list_skus(request={"parent": COMPUTE_SERVICE, "page_size": 5000},
                                 retry=None)
        return [billing_v1.Sku.to_dict(sku, use_integers_for_enums=False,
                                       preserving_proto_field_name=False) for sku in pager]

    try:
        # rate limits, 5xx, dropped connections
        return retry_call(fetch, is_transient=is_transient, attempts=6, base=1.0, cap=30.0)
    except (GoogleAPICallError, GoogleAuthError, OSError) as exc:
        problem = " ".join(str(exc).split())
        raise ExpoError(REFRESH_SETTING, f"the {CATALOG_SOURCE} refused: {problem}; the "
                        "bundled snapshot stays in use",
                        "enable it (`gcloud services enable cloudbilling.googleapis.com`) and "
                        "check the credentials, then refresh again") from None


def refresh(cache: Path | None = None, client: Any | None = None) -> RefreshSummary:
    """Fetch today's Compute Engine prices and write them to the cache ``load`` prefers."""
    parsed = parse_skus(_records(client if client is not None else _default_client()))
    families = parsed["families"]
    if not families:
        raise ExpoError(REFRESH_SETTING, f"the {CATALOG_SOURCE} returned no Compute Engine "
                        "vCPU or memory price; the cache is left as it was",
                        "retry later; the bundled snapshot stays in use meanwhile")
    snapshot = date.today().isoformat()
    doc = {"snapshot": snapshot, "source": CATALOG_SOURCE, "used": parsed["used"],
           "skipped": parsed["skipped"], "families": families}
    path = cache or default_cache()
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, suffix=".tmp", delete=False) as tmp:
        json.dump(doc, tmp, indent=1, sort_keys=True)
    os.replace(tmp.name, path)  # readers never see half a file
    return RefreshSummary(path, snapshot, parsed["used"], parsed["skipped"],
                          tuple(sorted(families)), len(_regions(doc)))


# -- expocloud prices -----------------------------------------------------------------------------
def add_parser(sub: Any) -> None:
    """The ``expocloud prices`` subcommand."""
    cmd = sub.add_parser("prices", help="hourly prices of GCE machine types, and the price "
                         "snapshot cost figures use")
    cmd.add_argument("--region", default=DEFAULT_REGION,
                     help=f"GCE region (default {DEFAULT_REGION})")
    cmd.add_argument("--family", help="only this machine family, e.g. n2")
    cmd.add_argument("--refresh", action="store_true", help="fetch today's prices from the "
                     f"{CATALOG_SOURCE} into {default_cache()} (needs Google credentials)")
    cmd.add_argument("--endpoint", help="Cloud Billing API endpoint for --refresh (a local fake; "
                     "anonymous credentials)")


def render(table: PriceTable, family: str | None = None) -> str:
    """The price table of the candidates, and the label of the snapshot it used."""
    rows = [f"{'machine type':<18} {'vCPUs':>5} {'memory GB':>9} {'on-demand $/h':>13} "
            f"{'Spot $/h':>9} {'Spot/on-demand':>14}"]
    for name in table.candidates(1, 10**6):
        if family and machines.family(name) != family:
            continue
        shape = machines.shape(name)
        assert shape is not None
        on_demand, spot = table.hourly(name, spot=False), table.hourly(name, spot=True)
        rows.append(f"{name:<18} {shape.vcpus:>5} {shape.memory_mb / 1024:>9.2f} "
                    f"{on_demand:>13.4f} {spot:>9.4f} {spot / on_demand:>14.2f}")
    return "\n".join(rows + [table.label()])


def run(args: argparse.Namespace) -> int:
    """``expocloud prices``: refresh if asked, then print the region's table."""
    if args.endpoint and not args.refresh:
        raise ExpoError("--endpoint", "is only used with --refresh", "add --refresh")
    if args.refresh:
        client = catalog_client(args.endpoint) if args.endpoint else None
        print(refresh(client=client).line())
    table = load(args.region)
    if args.family and args.family not in table.rates:
        raise ExpoError("--family", f"no prices for {args.family!r} in {table.label()}",
                        f"use one of {', '.join(sorted(table.rates))}")
    print(render(table, args.family))
    return 0
