"""A GCE run across regions: each region's prices of the run's machines (a VM is priced where it
ran: ``CoordinatorConfig.price``), the weights that order the regions for the engine
(``cost.region_weight``), and the egress of the staged files a VM reads from a bucket in
another region (``cost.egress``), for the VM records and the cost report.

A region without prices in the snapshot: with a budget the run cannot meter it, so it is an
error before any VM; without, its VMs are counted at the first region's prices, said once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.scheduler import Pool
from expo_executor.cost import preemption_fit, prices
from expo_executor.cost.prices import PriceTable
from expo_executor.cost.region_weight import RegionWeights
from expo_executor.engines.gce.settings import regions


def price_regions(settings: ExecutorSettings, config: CoordinatorConfig,
                  log: Callable[[str], None]) -> dict[str, PriceTable]:
    """Price the run's own machines in each of its regions (``config.region_hourly``); the
    tables by region (none for a run in one region, or not priced)."""
    names = regions(settings)
    if len(names) < 2 or not config.hourly:
        return {}
    spot, on_demand = config.machine_types[Pool.SPOT], config.machine_types[Pool.ON_DEMAND]
    tables = {}
    for region in names:
        try:
            table = prices.load(region)
            hourly = {Pool.SPOT: table.hourly(spot, spot=True),
                      Pool.ON_DEMAND: table.hourly(on_demand, spot=False)}
            config.region_on_demand_hourly[region] = {
                Pool.SPOT: table.hourly(spot, spot=False), Pool.ON_DEMAND: hourly[Pool.ON_DEMAND]}
        except ExpoError as exc:
            if settings.budget is not None:
                raise
            log(f"expocloud: {region} is not priced ({exc.problem}): its VMs are counted at "
                f"{names[0]}'s prices")
            continue
        config.region_hourly[region] = hourly
        tables[region] = table
    if config.shapes is not None:
        config.shapes.region_tables = tables
    others = [r for r in tables if r != names[0]]
    if others:  # every figure says which prices made it
        config.prices_label = f"{config.prices_label}, {', '.join(others)}"
    log("expocloud: prices by region: " + "; ".join(
        f"{r} Spot ${h[Pool.SPOT]:.4f}/h, on-demand ${h[Pool.ON_DEMAND]:.4f}/h"
        for r, h in config.region_hourly.items()))
    return tables


def bucket_location(bucket: Any, log: Callable[[str], None]) -> str:
    """The GCS bucket's location (US-CENTRAL1, US, EU...), one ``buckets.get``; empty when it
    cannot be read (``storage.buckets.get`` is not in every role that may write objects):
    egress is then not priced, said once."""
    client, name = getattr(bucket, "client", None), getattr(bucket, "bucket_name", None)
    if client is None or not name:
        return ""
    try:
        return str(client.get_bucket(name).location or "")
    except Exception as exc:  # noqa: BLE001 - a figure of the report, never the run's end
        log(f"expocloud: the location of gs://{name} is not readable ({type(exc).__name__}): "
            "egress of staged files to other regions is not priced")
        return ""


def region_weights(settings: ExecutorSettings, config: CoordinatorConfig,
                   tables: dict[str, PriceTable], state_root: Path) -> RegionWeights | None:
    """What orders the regions for the engine (None: one region, or none priced): their
    prices, the preemption models fitted in ``state_root`` and the bucket's egress."""
    if not tables:
        return None
    cap_h = parse_duration(settings.gce_max_run_duration,
                           "--expocloud-gce-max-run-duration") / 3600
    return RegionWeights(tables, dict(config.machine_types),
                         preemption_fit.load_models(state_root, cap_h=cap_h),
                         config.bucket_location, config.staged_bytes_per_vm)
