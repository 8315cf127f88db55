"""Queued demand: the CPUs queued tasks want, per machine shape and demand pool (Spot, or
on-demand for a task that must not run on Spot), which the fleet grows for, and the head start
that stands in for them before the first task comes (``expect``).

A mixin of :class:`~expo_executor.core.scheduler.Scheduler`, whose ``__init__`` holds the
state it reads: ``_demand`` (kept as tasks are queued and leave the queue), ``_expected``,
``_entries`` and ``spot_attempts``. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

from expo_executor.core.shapes import Shape
from expo_executor.core.tasks import Pool, TaskEntry


class QueuedDemand:
    """The queue's demand (see the module)."""

    def expect(self, demand: Mapping[tuple[Shape | None, Pool], int]) -> None:
        """A head start: CPUs per (shape, pool) the front end's planned jobs will want, known
        before it submits any (Snakemake still selects its first jobs). They count as queued
        demand, so the first VMs boot meanwhile, until the first task comes."""
        if not self._entries:
            self._expected = {slot: cpus for slot, cpus in demand.items() if cpus > 0}

    def _queued_cpus(self, shape: Shape | None) -> int:
        demand = self._demand
        return demand.get((shape, Pool.SPOT), 0) + demand.get((shape, Pool.ON_DEMAND), 0)

    def queued_demand(self) -> dict[Pool, int]:
        """CPUs wanted by queued tasks, split by whether they may still run on Spot."""
        totals = {Pool.SPOT: 0, Pool.ON_DEMAND: 0}
        for (_shape, pool), cpus in (self._expected or self._demand).items():
            totals[pool] += cpus
        return totals

    def queued_by_shape(self) -> dict[Shape | None, dict[Pool, int]]:
        """``queued_demand`` per shape: each shape's pools grow for their own work only."""
        out: dict[Shape | None, dict[Pool, int]] = {}
        for (shape, pool), cpus in (self._expected or self._demand).items():
            out.setdefault(shape, {Pool.SPOT: 0, Pool.ON_DEMAND: 0})[pool] += cpus
        return out

    def demand_pool(self, key: str) -> Pool:
        """The pool a queued task's demand counts in: ON_DEMAND if it must not run on Spot."""
        return self._demand_pool(self._entries[key])

    def _demand_pool(self, entry: TaskEntry) -> Pool:
        """Fixed while a task waits: preemptions are only counted before it is re-queued."""
        return Pool.ON_DEMAND if self._on_demand_only(entry) else Pool.SPOT

    def _on_demand_only(self, entry: TaskEntry) -> bool:
        attempts = entry.task.spot_attempts
        return not entry.task.preemptible or entry.preemptions >= (
            self.spot_attempts if attempts is None else attempts)
