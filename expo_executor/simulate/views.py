"""The fleet's view of a simulated coordinator's VMs (``WorkerView`` each, and the busy CPUs),
kept up to date incrementally: only VMs whose load or state changed are looked at again, which
gives the views a run's coordinator recomputes for all of its VMs every round, at a fraction of
the cost for a simulation of 100,000 jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Callable

from expo_executor.core.fleet import WorkerView
from expo_executor.core.scaling import Load
from expo_executor.core.scheduler import Pool, Scheduler
from expo_executor.simulate.cloud import SimVm
from expo_executor.simulate.workload import SimJob


class FleetViews:
    """Every pool's views and the CPUs busy; ``wake(t)`` asks for a round at ``t`` (when a VM's
    idle timeout runs out)."""

    def __init__(self, pools: Iterable[Pool], jobs: Mapping[str, SimJob], scheduler: Scheduler,
                 idle_timeout: float, wake: Callable[[float], None]) -> None:
        self.views: dict[Pool, dict[str, WorkerView]] = {pool: {} for pool in pools}
        self.jobs = jobs
        self.scheduler = scheduler
        self.idle_timeout = idle_timeout
        self.wake = wake
        self.busy: dict[str, int] = {}
        self.running = self.running_on_spot = 0
        self.dirty: set[str] = set()

    def touch(self, name: str) -> None:
        """VM ``name``'s load or state changed: look at it again before the next decision."""
        self.dirty.add(name)

    def add(self, vm: SimVm) -> None:
        """A VM asked for: booting, no load."""
        self.views[vm.pool][vm.name] = WorkerView(vm.name, True, 0, None)

    def drop(self, vm: SimVm) -> None:
        """A VM the coordinator let go of."""
        self.views[vm.pool].pop(vm.name, None)
        busy = self.busy.pop(vm.name, 0)
        self.running -= busy
        self.running_on_spot -= busy if vm.pool is Pool.SPOT else 0

    def load(self, vms: Mapping[str, SimVm], now: float) -> Load:
        """The views brought up to date at ``now``, with the scheduler's queued demand."""
        for name in self.dirty:
            vm = vms.get(name)
            if vm is not None:  # else gone already
                self._refresh(vm, now)
        self.dirty.clear()
        return Load(self.scheduler.queued_demand(),
                    {pool: list(by_name.values()) for pool, by_name in self.views.items()},
                    self.running, self.running_on_spot)

    def _refresh(self, vm: SimVm, now: float) -> None:
        busy = sum(self.jobs[key].cpus for key in self.scheduler.running_on(vm.name))
        change = busy - self.busy.get(vm.name, 0)
        self.busy[vm.name] = busy
        self.running += change
        self.running_on_spot += change if vm.pool is Pool.SPOT else 0
        if busy:
            vm.idle_since = None
        elif vm.ready and vm.idle_since is None:
            vm.idle_since = now
        if vm.idle_since is not None and vm.idle_wake != vm.idle_since:
            vm.idle_wake = vm.idle_since  # a look when its idle timeout runs out
            self.wake(vm.idle_since + self.idle_timeout)
        self.views[vm.pool][vm.name] = WorkerView(vm.name, not vm.ready, busy, vm.idle_since)
