"""The run's status snapshot (:class:`~expo_executor.core.run_status.RunStatus`) from what the
coordinator holds: the scheduler's jobs, the VMs alive, the meter's spending per pool, and the
reporter's recent timeouts. Nothing here does I/O; :mod:`.progress` writes what it builds.

A job's start is when the coordinator saw it running: at its assignment if its worker had a
free slot, else (a prefetched job) at the first snapshot after the scheduler moved it to a slot.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.requests import JobRequest
from expo_executor.coordinator.vms import Vm
from expo_executor.core.budget import vm_cost
from expo_executor.core.run_status import (MAX_RUNNING, OutcomeMap, PoolStatus, RunningJob,
                                           outcome_map)

MAP_JOBS = 10_000  # a run of up to this many jobs has its map redrawn at every status
from expo_executor.core.scheduler import Pool, Scheduler
from expo_executor.core.shapes import Shape


class StartTimes:
    """When each running job started, as the coordinator saw it."""

    def __init__(self) -> None:
        self._since: dict[str, float] = {}

    def started(self, key: str, now: float) -> None:
        self._since.setdefault(key, now)

    def update(self, running: Iterable[str], now: float) -> Mapping[str, float]:
        """The start of every job in ``running``; jobs no longer running are forgotten."""
        keys = set(running)
        self._since = {key: self._since.get(key, now) for key in keys}
        return self._since


def running_keys(scheduler: Scheduler) -> list[tuple[str, str]]:
    """``(job, worker)`` for every job running, by worker."""
    return [(key, worker) for worker in scheduler.workers()
            for key in sorted(scheduler.running_on(worker))]


def running_jobs(running: list[tuple[str, str]], requests: Mapping[str, JobRequest],
                 since: Mapping[str, float]) -> tuple[RunningJob, ...]:
    """The first :data:`MAX_RUNNING` running jobs, longest running first (a job of an adopted
    run, not this run's request, is counted but not listed)."""
    jobs = [RunningJob(request.task.label, request.meta.rule or request.meta.job or "",
                       dict(request.meta.wildcards), worker, since[key], request.spec.deadline_s)
            for key, worker in running if (request := requests.get(key)) is not None]
    return tuple(sorted(jobs, key=lambda job: job.since)[:MAX_RUNNING])


def machine_type(config: CoordinatorConfig, pool: Pool, shape: Shape | None) -> str:
    """The machine a pool's VMs are (a local worker: this machine)."""
    if shape is not None:
        return shape.describe()
    if pool is Pool.LOCAL:
        return config.machine_types.get(pool, "this machine")
    return config.machine_types.get(pool, pool.value)


def pools(vms: Iterable[Vm], ended_usd: Mapping[tuple[Pool, Shape | None], float],
          config: CoordinatorConfig, now: float) -> tuple[PoolStatus, ...]:
    """Every pool (and machine) the run has had a VM in: its VMs alive by state, and its cost
    so far (VMs ended and alive; None when the run is not priced)."""
    priced = bool(config.hourly)
    tally: dict[tuple[Pool, Shape | None], list[float]] = {
        key: [0, 0, usd] for key, usd in ended_usd.items()}
    for vm in vms:
        entry = tally.setdefault((vm.pool, vm.shape), [0, 0, 0.0])
        entry[1 if vm.ready else 0] += 1
        entry[2] += vm_cost(config.price(vm.pool, vm.shape, vm.region), now - vm.created)
    return tuple(PoolStatus(pool.value, machine_type(config, pool, shape), int(booting),
                            int(ready), usd if priced else None)
                 for (pool, shape), (booting, ready, usd) in tally.items())


def job_map(scheduler: Scheduler, requests: Mapping[str, JobRequest]) -> OutcomeMap | None:
    """The outcome map of the run's jobs so far (``cancelling`` shows as running)."""
    def state(key: str) -> str:
        value = scheduler.state(key)
        return "running" if value == "cancelling" else value
    return outcome_map((request.meta.hardness, request.meta.wildcards, state(key))
                       for key, request in requests.items())


class JobMap:
    """The outcome map, redrawn at every status for a run of up to :data:`MAP_JOBS` jobs, and
    for a bigger one at most every ``interval`` s per :data:`MAP_JOBS` jobs: drawing it walks
    every job (about 0.46 s of CPU at 100,000 jobs), so a big run's map is a little older than
    its counts, and its coordinator spends well under 1% of a core on it."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._drawn: tuple[float, OutcomeMap | None] | None = None

    def get(self, scheduler: Scheduler, requests: Mapping[str, JobRequest], now: float,
            force: bool = False) -> OutcomeMap | None:
        every = self.interval * max(1, math.ceil(len(requests) / MAP_JOBS))
        if force or len(requests) <= MAP_JOBS or self._drawn is None \
                or now - self._drawn[0] >= every:
            self._drawn = (now, job_map(scheduler, requests))
        return self._drawn[1]
