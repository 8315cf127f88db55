"""The fleet policy: how many VMs to create in each pool and which idle ones to delete. Pure.

Workers are a reusable pool pulling work, not a VM per job: a VM boots in a minute or more,
so a sweep of short jobs would otherwise spend its money booting. In the cloud there are two
pools: Spot (cheap, preemptible) for ordinary work, and on-demand for work that must not be
preempted again, for a reliable core of ``min_workers`` (Tordini et al.'s hybrid cluster), and
for the stragglers at the end of a sweep.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape


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
           straggler_rule: bool, stopped: frozenset[Pool] = frozenset()) -> FleetDecision:
    """The fleet policy's part of a scaling round (``scaling.scale`` adds held pools and the
    budget to it, for the coordinator and the simulator alike).

    ``queued``: queued CPUs per pool they may use (the scheduler's ``queued_demand``);
    ``views``: every pool's workers; ``running``: busy CPUs everywhere. One pool (the local
    engine, or on-demand only) plans alone; with two, the straggler rule may hand the tail to
    the on-demand pool. ``stopped``: pools that may not grow any more (a quota, failing
    boots); a stopped Spot pool with no VM left hands all work to the on-demand pool, else
    the work queued for Spot would wait for VMs that will never come.
    """
    work_left = sum(queued.values()) + running > 0
    if len(fleets) == 1:  # every task fits the one pool
        return FleetDecision(False, {main_pool: plan(sum(queued.values()), views[main_pool],
                                                     now, fleets[main_pool], work_left)})
    od = fleets[Pool.ON_DEMAND]
    if Pool.ON_DEMAND in stopped:  # only the VMs it has: the straggler rule must not wait for more
        od = replace(od, max_workers=min(od.max_workers, len(views[Pool.ON_DEMAND])))
    remaining = sum(queued.values()) + running_on_spot
    spot_gone = Pool.SPOT in stopped and not views[Pool.SPOT]
    stragglers = work_left and (spot_gone or (
        straggler_rule and stragglers_fit(remaining, views[Pool.ON_DEMAND], od)))
    spot_plan, od_plan = plan_pools(
        Demand(queued[Pool.SPOT], queued[Pool.ON_DEMAND]), views[Pool.SPOT],
        views[Pool.ON_DEMAND], now, fleets[Pool.SPOT], od, work_left, stragglers)
    return FleetDecision(stragglers, {Pool.SPOT: spot_plan, Pool.ON_DEMAND: od_plan})


# -- boots that never finish ----------------------------------------------------------------------
BOOT_FAILURES_TO_STOP = 3  # consecutive boot failures that stop a pool no VM of which came up
BOOT_FAILURES_CAP = 3 * BOOT_FAILURES_TO_STOP  # ... and that stop even a pool that once worked


@dataclass(frozen=True)
class Booting:
    """A VM that has not reported ``ready`` yet: when it was asked for, and in which pool."""

    name: str
    pool: Pool
    created: float
    shape: Shape | None = None  # whose pool: None, the run's own


@dataclass(frozen=True)
class BootHistory:
    """A pool's boots so far: failures in a row (reset by a VM that came up) and whether any
    VM of the pool ever came up (which proves its image, startup script and account work)."""

    failures_in_a_row: int = 0
    ever_ready: bool = False


@dataclass(frozen=True)
class BootDecision:
    timed_out: tuple[str, ...]  # delete these: they are replaced like any missing capacity
    history: dict[Pool, BootHistory]
    stop: tuple[Pool, ...]  # pools whose growth these failures stop (newly)


def boot_check(booting: list[Booting], now: float, boot_timeout: float,
               history: dict[Pool, BootHistory]) -> BootDecision:
    """Which booting VMs are overdue, and which pools to stop growing because of them.

    A VM that is not ready ``boot_timeout`` s after it was asked for would otherwise count as
    capacity forever, and the run would wait for it. One overdue VM is bad luck: it is replaced.
    ``BOOT_FAILURES_TO_STOP`` in a row in a pool where none ever came up is a broken setup
    (image, startup script, service account): replacing them would only bill boots forever.
    A pool that worked once is stopped only after ``BOOT_FAILURES_CAP`` in a row, so that
    even then the run cannot loop on failing boots.
    """
    timed_out = sorted((b for b in booting if now - b.created >= boot_timeout),
                       key=lambda b: (b.created, b.name))
    history = dict(history)
    stop: list[Pool] = []
    for vm in timed_out:
        history, stops = boot_failed(history, vm.pool)
        if stops:
            stop.append(vm.pool)
    return BootDecision(tuple(b.name for b in timed_out), history, tuple(stop))


def boot_failed(history: dict[Pool, BootHistory],
                pool: Pool) -> tuple[dict[Pool, BootHistory], bool]:
    """The history after one more failed boot in ``pool`` (a VM overdue, or one whose startup
    powered it off before it was ready), and whether this failure stops the pool (the limits
    of :func:`boot_check`)."""
    before = history.get(pool, BootHistory())
    after = BootHistory(before.failures_in_a_row + 1, before.ever_ready)
    limit = BOOT_FAILURES_CAP if after.ever_ready else BOOT_FAILURES_TO_STOP
    return {**history, pool: after}, before.failures_in_a_row < limit <= after.failures_in_a_row


def booted(history: dict[Pool, BootHistory], pool: Pool) -> dict[Pool, BootHistory]:
    """The history after a VM of ``pool`` reported ready."""
    return {**history, pool: BootHistory(0, True)}


def unrunnable(queued: dict[Pool, int], alive: dict[Pool, int], stopped: set[Pool],
               fleets: dict[Pool, FleetConfig]) -> set[Pool]:
    """The demand pools (keys of ``queued``) whose queued work can never run: every pool that
    could run it has no VM alive and may not grow (stopped for good, or no room at all).

    Work queued for Spot may run on either pool, work that must not be preempted on on-demand
    only; a run with one pool (local, or on-demand only) runs everything there. Such work must
    fail with the reason instead of waiting forever.
    """
    def dead(pool: Pool) -> bool:
        return not alive.get(pool, 0) and (pool in stopped or fleets[pool].max_workers <= 0)

    if len(fleets) == 1:
        return {p for p, cpus in queued.items() if cpus} if dead(next(iter(fleets))) else set()
    serving = {Pool.SPOT: (Pool.SPOT, Pool.ON_DEMAND), Pool.ON_DEMAND: (Pool.ON_DEMAND,)}
    return {p for p, cpus in queued.items()
            if cpus and all(dead(s) for s in serving.get(p, tuple(fleets)))}


def stranded(queued: dict[Pool, int], alive: dict[Pool, int], stopped: set[Pool],
             fleets: dict[Pool, FleetConfig]) -> bool:
    """True when no queued work can ever run: no VM is alive in any pool and no pool may grow
    any more. New work would not run either: the coordinator fails it on arrival."""
    if not sum(queued.values()) or sum(alive.values()):
        return False
    return all(pool in stopped or config.max_workers <= 0 for pool, config in fleets.items())
