"""Whether each of a run's pools may grow, as one record with pure transitions.

A pool stops growing for the rest of the run when a create call says so (GCE refuses what the
settings ask for; a full quota while the run has no VM that could free some), when its VMs keep
failing to come up (``fleet.boot_check``, or their startup powers them off), or when it has found
no capacity in any zone for ``capacity_timeout`` seconds while it had no ready VM. A stockout
short of that holds the pool back for ``CAPACITY_RETRY`` seconds; a full quota holds it until
one of the run's VMs ends. Work that no live or growable pool may run is stranded
(:func:`strand_check`): it fails with the reasons instead of waiting for VMs that will not come.

Pure: no I/O and no clock; the time comes in as an argument. The coordinator and the simulator
each keep a :class:`PoolHealth` and move it on with these functions, so both stop the same pools
at the same moments for the same reasons.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from expo_executor.core.fleet import (BootHistory, Booting, FleetConfig, boot_check, boot_failed,
                                      booted, stranded, unrunnable)
from expo_executor.core.scheduler import Pool

CAPACITY_RETRY = 30.0  # seconds before asking again after every zone was out of capacity
BOOT_TIMEOUT = 600.0  # seconds a new VM has to report ready (settings.boot_timeout sets it)
CAPACITY_TIMEOUT = 1800.0  # seconds of stockouts, with no VM in the pool, before it stops
STOPPED = math.inf  # a pool's no-growth time once it may not grow for the rest of the run


@dataclass(frozen=True)
class PoolHealth:
    """Every pool's growth state: no VM is created in a pool before its ``no_growth`` time
    (``STOPPED``: never again, for ``stopped_why``); ``boots`` counts its failed boots in a row;
    ``short_since`` is its first stockout since it last had a ready VM."""

    no_growth: Mapping[Pool, float] = field(default_factory=dict)
    stopped_why: Mapping[Pool, str] = field(default_factory=dict)
    boots: Mapping[Pool, BootHistory] = field(default_factory=dict)
    short_since: Mapping[Pool, float] = field(default_factory=dict)
    # a quota was full: no VM is created in these pools until one of the run's VMs ends
    quota_held: frozenset[Pool] = frozenset()

    @property
    def stopped(self) -> frozenset[Pool]:
        """The pools that may not grow for the rest of the run."""
        return frozenset(p for p, until in self.no_growth.items() if until == STOPPED)

    def may_grow(self, pool: Pool, now: float) -> bool:
        return now >= self.no_growth.get(pool, 0.0) and pool not in self.quota_held

    def held_until(self, pool: Pool, now: float) -> float | None:
        """When a pool held back by a stockout may grow again; None if it may grow now, or
        never again."""
        until = self.no_growth.get(pool, 0.0)
        return until if now < until < STOPPED else None


@dataclass(frozen=True)
class Transition:
    """A pool health after a transition, the pools it newly stopped (with why) and, for a boot
    check, the VMs to delete because they did not come up in time."""

    health: PoolHealth
    stopped: tuple[tuple[Pool, str], ...] = ()
    timed_out: tuple[str, ...] = ()


def stop(health: PoolHealth, pool: Pool, why: str) -> Transition:
    """No more VMs in ``pool`` for the rest of the run; the first reason stands."""
    if pool in health.stopped:
        return Transition(health)
    return Transition(replace(health, no_growth={**health.no_growth, pool: STOPPED},
                              stopped_why={**health.stopped_why, pool: why}), ((pool, why),))


def failed_create(health: PoolHealth, pool: Pool, now: float, stop_growth: bool,
                  why: str) -> Transition:
    """A create call in ``pool`` failed: for good (``stop_growth``, e.g. a quota), or for now
    (every zone out of capacity: ask again in ``CAPACITY_RETRY`` s, and the capacity clock
    starts at the first such stockout). A stopped pool stays stopped."""
    if stop_growth:
        return stop(health, pool, why)
    if pool in health.stopped:
        return Transition(health)
    return Transition(replace(
        health, no_growth={**health.no_growth, pool: now + CAPACITY_RETRY},
        short_since={pool: now, **health.short_since}))


def quota_full(health: PoolHealth, pool: Pool, alive: int, why: str) -> Transition:
    """A create call in ``pool`` met a full quota. With ``alive`` VMs of the run, the pool
    keeps what it has and grows again once one of them ends (which frees some quota: a
    preempted Spot VM too); with none, nothing of the run's will free it, so the pool stops."""
    if alive <= 0:
        return stop(health, pool, why)
    if pool in health.stopped:
        return Transition(health)
    return Transition(replace(health, quota_held=health.quota_held | {pool}))


def vm_ended(health: PoolHealth) -> PoolHealth:
    """One of the run's VMs ended: the quota it held is free, so pools held by a full quota
    may try again."""
    return replace(health, quota_held=frozenset()) if health.quota_held else health


def vm_ready(health: PoolHealth, pool: Pool) -> PoolHealth:
    """A VM of ``pool`` reported ready: its failed boots in a row start again from zero."""
    return replace(health, boots=booted(dict(health.boots), pool))


def boot_round(health: PoolHealth, booting: Sequence[Booting], now: float,
               boot_timeout: float) -> Transition:
    """The VMs not ready ``boot_timeout`` s after they were asked for (to delete; they are
    replaced while their pool may grow), and the pools whose failures stop them
    (``fleet.boot_check`` decides)."""
    decision = boot_check(list(booting), now, boot_timeout, dict(health.boots))
    after = Transition(replace(health, boots=decision.history), (), decision.timed_out)
    for pool in decision.stop:
        why = boot_failures_why(decision.history[pool].failures_in_a_row, boot_timeout)
        stopped = stop(after.health, pool, why)
        after = Transition(stopped.health, after.stopped + stopped.stopped, after.timed_out)
    return after


def startup_failed(health: PoolHealth, pool: Pool, boot_log: str) -> Transition:
    """A VM of ``pool`` powered off before it reported ready: its startup script failed (it
    halts the VM on any error). One more failed boot in a row, as an overdue VM is; the pool
    stops at the same limits, and the VM's last boot-log lines say why."""
    history, stops = boot_failed(dict(health.boots), pool)
    after = replace(health, boots=history)
    if not stops:
        return Transition(after)
    return stop(after, pool, startup_failures_why(history[pool].failures_in_a_row, boot_log))


def capacity_round(health: PoolHealth, ready_pools: frozenset[Pool], now: float,
                   capacity_timeout: float, machine_types: Mapping[Pool, str]) -> Transition:
    """Stop a pool that has found no capacity in any zone for ``capacity_timeout`` while it had
    no ready VM: waiting on would be a silent hang. The clock starts at its first stockout and
    starts again once one of its VMs is ready (then the run goes on)."""
    short = dict(health.short_since)
    after = Transition(health)
    for pool, since in list(short.items()):
        if pool in ready_pools:
            del short[pool]
        elif now - since >= capacity_timeout:
            del short[pool]
            machine = machine_types.get(pool, "its machine type")
            stopped = stop(after.health, pool, no_capacity_why(machine, capacity_timeout))
            after = Transition(stopped.health, after.stopped + stopped.stopped)
    return Transition(replace(after.health, short_since=short), after.stopped)


@dataclass(frozen=True)
class Stranding:
    """Queued work that can never run: the demand pools it was queued for (``dead``) and the
    sentence to fail it with. ``whole_run``: no VM is left and no pool may grow, so work
    submitted later cannot run either."""

    dead: frozenset[Pool]
    reason: str
    whole_run: bool


def strand_check(health: PoolHealth, queued: Mapping[Pool, int], alive: Mapping[Pool, int],
                 fleets: Mapping[Pool, FleetConfig]) -> Stranding | None:
    """Queued work that no VM alive may run, in pools that cannot grow (``fleet.unrunnable``),
    with the reasons the pools stopped; None when all queued work may still run."""
    stopped = health.stopped
    dead = unrunnable(dict(queued), dict(alive), set(stopped), dict(fleets))
    if not dead:
        return None
    why = "; ".join(f"{p.value}: {health.stopped_why[p]}" for p in sorted(
        stopped & fleets.keys(), key=lambda p: p.value) if p in health.stopped_why)
    why = why or "no pool may grow"
    if stranded(dict(queued), dict(alive), set(stopped), dict(fleets)):
        return Stranding(frozenset(dead), f"no VM is left and no more can be created ({why})",
                         True)
    # e.g. on-demand is gone while Spot VMs still run: non-preemptible work waits
    return Stranding(frozenset(dead),
                     f"no VM that may run it is left and no more can be created ({why})", False)


def boot_failures_why(failed: int, boot_timeout: float) -> str:
    return (f"{failed} VMs in a row never reported ready within {boot_timeout:g} s "
            "(--expocloud-boot-timeout); check the image (--expocloud-gce-image), its startup "
            "script, the service account (--expocloud-gce-service-account) and a VM's worker "
            "log (serial console: gcloud compute instances get-serial-port-output NAME)")


def startup_failures_why(failed: int, boot_log: str) -> str:
    last = f"; the last one's startup log ends: {boot_log}" if boot_log else \
        "; no startup log reached the bucket (can the worker's service account write it?)"
    return (f"{failed} VMs in a row powered off before they reported ready (their startup "
            "script failed)" + last + "; fix what it names")


def no_capacity_why(machine: str, capacity_timeout: float) -> str:
    return (f"no capacity for {machine} in any of its zones for {capacity_timeout:g} s "
            "(--expocloud-capacity-timeout); fix: add zones (--expocloud-gce-zones), choose "
            "another machine type, or wait longer (--expocloud-capacity-timeout never)")
