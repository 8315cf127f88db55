"""The fleet's view of a simulated coordinator's VMs (``WorkerView`` each, and the busy CPUs,
shape by shape), kept up to date incrementally: only VMs whose load or state changed are looked
at again, which gives the views a run's coordinator recomputes for all of its VMs every round, at a fraction of
the cost for a simulation of 100,000 jobs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Callable

from expo_executor.core.fleet import WorkerView
from expo_executor.core.scaling import Load
from expo_executor.core.scheduler import Pool, Scheduler
from expo_executor.core.shapes import Shape
from expo_executor.simulate.cloud import SimVm


class FleetViews:
    """Every shape's pools' views and CPUs busy (everywhere, on Spot); ``wake(t)`` asks for a
    round at ``t`` (when a VM's idle timeout runs out)."""

    def __init__(self, scheduler: Scheduler, idle_timeout: float,
                 wake: Callable[[float], None]) -> None:
        self.views: dict[Shape | None, dict[Pool, dict[str, WorkerView]]] = {}
        self.scheduler = scheduler
        self.idle_timeout = idle_timeout
        self.wake = wake
        self.busy: dict[str, int] = {}
        self.running: dict[Shape | None, list[int]] = {}  # busy CPUs, of them on Spot
        self.dirty: set[str] = set()

    def touch(self, name: str) -> None:
        """VM ``name``'s load or state changed: look at it again before the next decision."""
        self.dirty.add(name)

    def add(self, vm: SimVm) -> None:
        """A VM asked for: booting, no load."""
        self._pool(vm)[vm.name] = WorkerView(vm.name, True, 0, None)

    def drop(self, vm: SimVm) -> None:
        """A VM the coordinator let go of."""
        self._pool(vm).pop(vm.name, None)
        self._count(vm, -self.busy.pop(vm.name, 0))

    def load(self, vms: Mapping[str, SimVm], now: float) -> dict[Shape | None, Load]:
        """Each shape's views brought up to date at ``now``, with the scheduler's queued
        demand of that shape (the run's own shape always)."""
        workers = self.scheduler.workers()
        for name, (cpus, free) in workers.items():  # a held job's room kept changes these too
            if cpus - free != self.busy.get(name, 0):
                self.dirty.add(name)
        for name in self.dirty:
            vm = vms.get(name)
            if vm is not None:  # else gone already
                self._refresh(vm, now, workers)
        self.dirty.clear()
        queued = self.scheduler.queued_by_shape()
        return {shape: Load(queued.get(shape, {Pool.SPOT: 0, Pool.ON_DEMAND: 0}),
                            {pool: list(by_name.values())
                             for pool, by_name in self.views.get(shape, {}).items()},
                            *self.running.get(shape, (0, 0)))
                for shape in {None, *queued, *self.views}}

    def _pool(self, vm: SimVm) -> dict[str, WorkerView]:
        return self.views.setdefault(vm.shape, {}).setdefault(vm.pool, {})

    def _count(self, vm: SimVm, change: int) -> None:
        counts = self.running.setdefault(vm.shape, [0, 0])
        counts[0] += change
        counts[1] += change if vm.pool is Pool.SPOT else 0

    def _refresh(self, vm: SimVm, now: float, workers: Mapping[str, tuple[int, int]]) -> None:
        """Busy: the CPUs not free, as the coordinator's (``Scheduler.workers``: a slot kept
        for a held job asked back is busy)."""
        cpus, free = workers.get(vm.name, (vm.slots, vm.slots))
        busy = cpus - free
        self._count(vm, busy - self.busy.get(vm.name, 0))
        self.busy[vm.name] = busy
        if busy:
            vm.idle_since = None
        elif vm.ready and vm.idle_since is None:
            vm.idle_since = now
        if vm.idle_since is not None and vm.idle_wake != vm.idle_since:
            vm.idle_wake = vm.idle_since  # a look when its idle timeout runs out
            self.wake(vm.idle_since + self.idle_timeout)
        self._pool(vm)[vm.name] = WorkerView(vm.name, not vm.ready, busy, vm.idle_since)
