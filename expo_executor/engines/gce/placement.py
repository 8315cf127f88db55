"""Which zone a create tries first when the run's zones span regions, and which regions are
cooled down. Pure: the zones, each region's weight and the clock in; an order out.

Why: Spot prices differ by region (europe-west1's e2 Spot vCPU is not us-central1's), and a
region out of Spot capacity, or whose quota is full, tends to stay so for a while, so asking
its other zones first only adds failed inserts. The order is:

1. regions not cooled down before those that are: a stockout, a zone's refusal or a full
   quota in a region cools the whole region down for ``cooldown_s`` (its zones are still
   tried, after every other region's: capacity may be back);
2. then the lowest weight first: USD per hour of work of the asked VM there, as the coordinator
   prices it (``cost.region_weight``: the region's price, the fitted preemption model's
   expected rework for Spot, and the egress of staged files from the bucket in another
   region); an unpriced region after the priced ones;
3. then the order the user gave (a region by its first zone; within a region, its zones).

With one region nothing changes: its zones in the order given. Which zones are skipped outright
(a stocked-out zone for its TTL, a zone that refuses what is asked) is the engine's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.engines.gce.references import region_of

# USD per hour of work of a VM of (pool, shape) in a region; None: not priced there
RegionWeight = Callable[[str, Pool, Shape | None], float | None]
Key = tuple[str, Pool, Shape | None]


@dataclass
class Placement:
    """The run's zones in preference order, its regions' weight and their cool-downs (not
    thread-safe: the engine holds its lock)."""

    zones: Sequence[str]
    weight: RegionWeight | None = None
    cooldown_s: float = 300.0
    _cooled: dict[Key, float] = field(default_factory=dict)  # -> clock() until which
    _weights: dict[Key, float | None] = field(default_factory=dict)

    @property
    def regions(self) -> list[str]:
        return list(dict.fromkeys(region_of(z) for z in self.zones))

    def cool(self, zone: str, pool: Pool, shape: Shape | None, now: float) -> None:
        """``zone`` stocked out, refused or met a full quota: its region goes after the
        others for ``pool`` and ``shape`` until ``now + cooldown_s``."""
        if len(self.regions) > 1:
            self._cooled[(region_of(zone), pool, shape)] = now + self.cooldown_s

    def cooled(self, region: str, pool: Pool, shape: Shape | None, now: float) -> bool:
        return self._cooled.get((region, pool, shape), 0.0) > now

    def order(self, zones: Sequence[str], pool: Pool, shape: Shape | None,
              now: float) -> list[str]:
        """``zones`` (a subset of the run's) in the order a create tries them."""
        first = {region: i for i, region in enumerate(self.regions)}
        position = {zone: i for i, zone in enumerate(self.zones)}

        def key(zone: str) -> tuple:
            region = region_of(zone)
            weight = self.weight_of(region, pool, shape)
            return (self.cooled(region, pool, shape, now), weight is None,
                    weight if weight is not None else 0.0, first.get(region, len(first)),
                    position.get(zone, len(position)))

        return sorted(zones, key=key)

    def weight_of(self, region: str, pool: Pool, shape: Shape | None) -> float | None:
        """The region's weight for the ask, computed once per run (prices are a snapshot)."""
        if self.weight is None or len(self.regions) < 2:
            return None
        key = (region, pool, shape)
        if key not in self._weights:
            self._weights[key] = self.weight(region, pool, shape)
        return self._weights[key]
