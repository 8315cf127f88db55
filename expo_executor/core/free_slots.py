"""Which worker a task goes to: best fit over the workers' free slots, through indexes that keep
each decision from scanning every worker (the simulator runs 100,000 tasks on 1,000 workers).
Part of :class:`~expo_executor.core.scheduler.Scheduler`, whose table it reads and changes.
"""

from __future__ import annotations

import heapq

from expo_executor.core.shapes import Shape
from expo_executor.core.tasks import Pool, Task, TaskEntry, WorkerSlots


class FreeSlots:
    """The scheduler's free-slot index: workers with free CPUs, per shape, kind (Spot or
    not) and free CPU count, as heaps of ids with stale entries dropped when met."""

    _workers: dict[str, WorkerSlots]
    _free: dict[tuple[Shape | None, bool, int], list[str]]
    _with_free: dict[bool, int]
    _most_cpus: int
    _confirming: set[str]

    def _fit(self, entry: TaskEntry, allow_spot: bool = True) -> WorkerSlots | None:
        """Best fit: the worker of the task's shape with the fewest free CPUs that still holds
        the task."""
        on_demand_only = self._on_demand_only(entry) or not allow_spot
        shape = entry.task.shape
        if entry.task.key in self._confirming:
            return self._idle_other(entry, on_demand_only)
        if entry.task.cpus >= 1 and entry.task.mem_mb <= 0:  # memory cannot rule a worker out
            best = self._best(shape, False, entry.task.cpus)
            if not on_demand_only:
                spot = self._best(shape, True, entry.task.cpus)
                if spot is not None and (best is None or (spot.free_cpus, spot.worker_id)
                                         < (best.free_cpus, best.worker_id)):
                    best = spot
            return best
        fits = [w for w in self._workers.values()
                if self._has_room(w, entry.task, on_demand_only)]
        return min(fits, key=lambda w: (w.free_cpus, w.worker_id), default=None)

    def _idle_other(self, entry: TaskEntry, on_demand_only: bool) -> WorkerSlots | None:
        """A re-run's worker: of its shape, running nothing (so that neighbours cannot slow
        it), and not the one its first run timed out on."""
        fits = [w for w in self._workers.values()
                if not w.running and not w.held and w.worker_id != entry.first_timeout_on
                and self._has_room(w, entry.task, on_demand_only)]
        return min(fits, key=lambda w: w.worker_id, default=None)

    @staticmethod
    def _has_room(worker: WorkerSlots, task: Task, on_demand_only: bool) -> bool:
        """Whether ``worker`` is of the task's shape and has the free CPUs and memory to start
        it now (and is not Spot, for a task that must run on-demand)."""
        return worker.shape == task.shape and worker.free_cpus >= task.cpus \
            and (not worker.mem_mb or worker.free_mem_mb >= task.mem_mb) \
            and not (on_demand_only and worker.pool is Pool.SPOT)

    def _best(self, shape: Shape | None, spot: bool, cpus: int) -> WorkerSlots | None:
        """The (free CPUs, id)-smallest worker of one shape and kind with at least ``cpus``
        free."""
        for free in range(cpus, self._most_cpus + 1):
            heap = self._free.get((shape, spot, free))
            while heap:
                worker = self._workers.get(heap[0])
                if worker is not None and worker.free_cpus == free \
                        and (worker.pool is Pool.SPOT) == spot and worker.shape == shape:
                    return worker
                heapq.heappop(heap)  # stale: the worker left, or its free CPUs changed
        return None

    def _index(self, worker: WorkerSlots) -> None:
        if worker.free_cpus > 0:
            spot = worker.pool is Pool.SPOT
            self._with_free[spot] += 1
            heapq.heappush(self._free.setdefault((worker.shape, spot, worker.free_cpus), []),
                           worker.worker_id)

    def _unindex(self, worker: WorkerSlots) -> None:
        if worker.free_cpus > 0:  # its heap entry goes stale and is dropped when met
            self._with_free[worker.pool is Pool.SPOT] -= 1

    def _resize(self, worker: WorkerSlots, cpus: int, mem_mb: int) -> None:
        """Change a worker's free capacity, keeping the indexes right."""
        self._unindex(worker)
        worker.free_cpus += cpus
        worker.free_mem_mb += mem_mb
        self._index(worker)
