"""A simulated run across regions (``expocloud simulate --regions``): each region its own
prices and its own chance of a stockout; a create call tries the regions cheapest first, as
the GCE engine's placement does (``engines.gce.placement``, which the simulation may not
import: the order here is its rule 2, by price, with rule 1's cool-down left out), and its VMs
are billed at the prices of the region that had capacity.

``RegionSet`` is a ``Prices`` (its first region's, for the figures that need one price), so a
simulation takes it wherever it takes a price table.
"""

from __future__ import annotations

from dataclasses import dataclass

from expo_executor.core.scheduler import Pool
from expo_executor.simulate.workload import Prices


@dataclass(frozen=True)
class SimRegion:
    """One region: its prices and the probability that a create call of a pool finds no
    capacity there."""

    name: str
    prices: Prices
    stockout: float = 0.0  # Spot
    stockout_on_demand: float = 0.0

    def stockout_of(self, pool: Pool) -> float:
        return self.stockout if pool is Pool.SPOT else self.stockout_on_demand


@dataclass(frozen=True)
class RegionSet:
    """The regions of a simulated run, in the order given."""

    regions: tuple[SimRegion, ...]

    def __post_init__(self) -> None:
        if not self.regions:
            raise ValueError("a RegionSet needs at least one region")

    def hourly(self, machine_type: str, spot: bool) -> float:
        return self.regions[0].prices.hourly(machine_type, spot)

    def label(self) -> str:
        return f"{self.regions[0].prices.label()}" + "".join(
            f", {r.name}" for r in self.regions[1:])

    def order(self, machine_type: str, pool: Pool) -> list[SimRegion]:
        """The regions a create call tries, the cheapest for ``machine_type`` first (ties in
        the order given)."""
        return sorted(self.regions, key=lambda r: r.prices.hourly(machine_type,
                                                                  pool is Pool.SPOT))
