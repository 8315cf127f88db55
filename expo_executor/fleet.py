"""The fleet policy: how many VMs to create in each pool and which idle ones to delete. Pure.

Workers are a reusable pool pulling work, not a VM per job: a VM boots in a minute or more,
so a sweep of short jobs would otherwise spend its money booting. In the cloud there are two
pools: Spot (cheap, preemptible) for ordinary work, and on-demand for work that must not be
preempted again, for a reliable core of ``min_workers`` (Tordini et al.'s hybrid cluster), and
for the stragglers at the end of a sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .scheduler import Pool


@dataclass(frozen=True)
class FleetConfig:
    slots_per_worker: int
    max_workers: int
    idle_timeout: float  # seconds a worker may sit idle before it is deleted
    min_workers: int = 0  # kept (and created) while the run still has work


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


def spare_cpus(workers: list[WorkerView], config: FleetConfig) -> int:
    """Free slots now, counting a booting VM's slots as supply already."""
    return sum(config.slots_per_worker - (0 if w.booting else w.busy_cpus) for w in workers)


def plan(queued_cpus: int, workers: list[WorkerView], now: float, config: FleetConfig,
         work_left: bool = False) -> FleetPlan:
    """Grow to cover queued CPUs (counting booting VMs as supply); shrink idle VMs.

    An idle worker is one that got nothing in the last assignment round although it was ready:
    either nothing is queued or nothing queued fits it, and either way it costs money for nothing.
    While ``work_left``, the pool keeps ``min_workers`` (the longest-idle ones go first).
    """
    shortfall = queued_cpus - spare_cpus(workers, config)
    create = 0
    if shortfall > 0:
        create = math.ceil(shortfall / config.slots_per_worker)
    if work_left:
        create = max(create, config.min_workers - len(workers))
    create = max(0, min(create, config.max_workers - len(workers)))
    idle = sorted((w for w in workers
                   if not w.booting and w.busy_cpus == 0 and w.idle_since is not None
                   and now - w.idle_since >= config.idle_timeout),
                  key=lambda w: (w.idle_since, w.name))
    keep = config.min_workers - (len(workers) - len(idle)) if work_left else 0
    delete = tuple(w.name for w in idle[:len(idle) - max(0, keep)])
    return FleetPlan(create, delete)


@dataclass(frozen=True)
class Demand:
    """Queued CPUs: ``any_pool`` may run on Spot; ``reliable`` must not (preempted too often,
    or its rule is marked non-preemptible)."""

    any_pool: int
    reliable: int


def stragglers_fit(remaining_cpus: int, on_demand: list[WorkerView],
                   config: FleetConfig) -> bool:
    """The straggler rule: once all remaining work (queued, and running on Spot) fits in what
    the on-demand pool has free or may still create, send what is queued there, so that the
    tail of a sweep is not held hostage by repeated preemptions. Work that would have to wait
    for a busy on-demand slot stays on Spot."""
    available = spare_cpus(on_demand, config) \
        + max(0, config.max_workers - len(on_demand)) * config.slots_per_worker
    return config.max_workers > 0 and remaining_cpus <= available


def plan_pools(demand: Demand, spot: list[WorkerView], on_demand: list[WorkerView], now: float,
               spot_config: FleetConfig, on_demand_config: FleetConfig, work_left: bool,
               stragglers: bool = False) -> tuple[FleetPlan, FleetPlan]:
    """Plans for (Spot, on-demand). On-demand covers reliable demand (all of it in straggler
    mode); Spot covers the rest, after the on-demand pool's spare slots."""
    reliable = demand.reliable + (demand.any_pool if stragglers else 0)
    od_plan = plan(reliable, on_demand, now, on_demand_config, work_left)
    od_spare = spare_cpus(on_demand, on_demand_config) \
        + od_plan.create * on_demand_config.slots_per_worker - reliable
    any_pool = 0 if stragglers else max(0, demand.any_pool - max(0, od_spare))
    spot_plan = plan(any_pool, spot, now, spot_config, work_left=False)
    return spot_plan, od_plan


def pools(main_pool: Pool, slots: int, max_workers: int, max_on_demand: int,
          idle_timeout: float, on_demand_min: int = 0) -> dict[Pool, FleetConfig]:
    """A run's pools: the main one (local, Spot, or on-demand only), and an on-demand one
    whenever Spot is the main pool or on-demand VMs are allowed beside it."""
    fleets = {main_pool: FleetConfig(slots, max_workers, idle_timeout)}
    if max_on_demand > 0 or main_pool is Pool.SPOT:
        fleets[Pool.ON_DEMAND] = FleetConfig(slots, max_on_demand, idle_timeout,
                                             min_workers=on_demand_min)
    return fleets


@dataclass(frozen=True)
class FleetDecision:
    stragglers: bool  # the straggler rule is in force: nothing new goes on Spot
    plans: dict[Pool, FleetPlan]


def decide(queued: dict[Pool, int], views: dict[Pool, list[WorkerView]], running: int,
           running_on_spot: int, now: float, fleets: dict[Pool, FleetConfig], main_pool: Pool,
           straggler_rule: bool) -> FleetDecision:
    """One scaling round, for the coordinator and the simulator alike.

    ``queued``: queued CPUs per pool they may use (the scheduler's ``queued_demand``);
    ``views``: every pool's workers; ``running``: busy CPUs everywhere. One pool (the local
    engine, or on-demand only) plans alone; with two, the straggler rule may hand the tail to
    the on-demand pool.
    """
    work_left = sum(queued.values()) + running > 0
    if len(fleets) == 1:  # every task fits the one pool
        return FleetDecision(False, {main_pool: plan(sum(queued.values()), views[main_pool],
                                                     now, fleets[main_pool], work_left)})
    od = fleets[Pool.ON_DEMAND]
    remaining = sum(queued.values()) + running_on_spot
    stragglers = straggler_rule and work_left \
        and stragglers_fit(remaining, views[Pool.ON_DEMAND], od)
    spot_plan, od_plan = plan_pools(
        Demand(queued[Pool.SPOT], queued[Pool.ON_DEMAND]), views[Pool.SPOT],
        views[Pool.ON_DEMAND], now, fleets[Pool.SPOT], od, work_left, stragglers)
    return FleetDecision(stragglers, {Pool.SPOT: spot_plan, Pool.ON_DEMAND: od_plan})
