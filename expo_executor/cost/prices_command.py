"""``expocloud prices``: the region's price table (refreshed from Google first if asked), and the
snapshot it used.
"""

from __future__ import annotations

import argparse
from typing import Any

from expo_executor.core.errors import ExpoError
from expo_executor.cost import machines
from expo_executor.cost.price_catalog import catalog_client, refresh
from expo_executor.cost.prices import (CATALOG_SOURCE, DEFAULT_REGION, PriceTable, default_cache,
                                       load)


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
