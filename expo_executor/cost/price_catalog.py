"""Today's prices from Google: the Cloud Billing Catalog's Compute Engine SKUs, parsed into the
snapshot format ``prices`` reads, and ``refresh``, which writes them to the per-user cache
``prices.load`` prefers (``expocloud prices --refresh``). The Google SDK is imported lazily.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

from expo_executor.core.errors import ExpoError
from expo_executor.cost.prices import (CATALOG_SOURCE, bundled_snapshot, default_cache,
                                       priced_regions)
from expo_executor.gcp.errors import is_transient
from expo_executor.gcp.retry import retry_call

log = logging.getLogger(__name__)

REFRESH_SETTING = "--refresh"
COMPUTE_SERVICE = "services/6F81-5844-456A"  # Compute Engine's id in the Cloud Billing Catalog
_GIB_PER_GB = 1e9 / 2**30  # a price per GB (10^9 bytes) times this is the price per GiB


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
                        f"snapshot {bundled_snapshot()['snapshot']} stays in use",
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
                          tuple(sorted(families)), len(priced_regions(doc)))
