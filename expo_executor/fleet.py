"""The fleet policy: how many VMs to create and which idle ones to delete. Pure, no I/O.

Workers are a reusable pool pulling work, not a VM per job: a VM boots in a minute or more,
so a sweep of short jobs would otherwise spend its money booting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class FleetConfig:
    slots_per_worker: int
    max_workers: int
    idle_timeout: float  # seconds a worker may sit idle before it is deleted


@dataclass(frozen=True)
class WorkerView:
    name: str
    booting: bool
    busy_cpus: int
    idle_since: float | None  # None while it has work


@dataclass(frozen=True)
class FleetPlan:
    create: int
    delete: tuple[str, ...]


def plan(queued_cpus: int, workers: list[WorkerView], now: float, config: FleetConfig) -> FleetPlan:
    """Grow to cover queued CPUs (counting booting VMs as supply); shrink idle VMs.

    An idle worker is one that got nothing in the last assignment round although it was ready:
    either nothing is queued or nothing queued fits it, and either way it costs money for nothing.
    """
    spare = sum(config.slots_per_worker - w.busy_cpus for w in workers if not w.booting)
    spare += sum(config.slots_per_worker for w in workers if w.booting)
    shortfall = queued_cpus - spare
    create = 0
    if shortfall > 0:
        create = min(math.ceil(shortfall / config.slots_per_worker),
                     config.max_workers - len(workers))
    delete = tuple(
        w.name for w in workers
        if not w.booting and w.busy_cpus == 0 and w.idle_since is not None
        and now - w.idle_since >= config.idle_timeout
    )
    return FleetPlan(max(0, create), delete)
