"""Prefetch's held tasks, as the scheduler moves them: held on busy workers, and taken back.

Prefetch places a task on a busy worker before it knows which slot frees first. A slot that
frees elsewhere, or a worker that comes up, would then start the queue's next tasks before the
held ones: harder tasks first, whose runs a held task's timeout would have skipped (or an idle
worker beside a queue of held tasks). So a free slot that would start a task harder than a held
one of its family, or that the queue leaves idle, asks for a held task back and stays free for
it until the worker answers. Part of :class:`~expo_executor.core.scheduler.Scheduler`, whose
table it reads and changes.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator, Mapping

from expo_executor.core.records import Outcome
from expo_executor.core.shapes import Shape
from expo_executor.core.tasks import Assignment, Pool, Release, TaskEntry, WorkerSlots


class HeldTasks:
    """The scheduler's part that holds tasks on busy workers (:meth:`_hold`) and asks
    them back (:meth:`_keep`, :meth:`released`, :meth:`take_releases`)."""

    _entries: dict[str, TaskEntry]
    _workers: dict[str, WorkerSlots]
    _queue: list[tuple[tuple, str]]
    _queued: set[str]
    _confirming: set[str]
    releases: list[Release]
    _requests: Iterator[int]
    prefetch: int
    outcomes: dict[str, Outcome]

    def _held_elsewhere(self) -> list[TaskEntry]:
        """Every held task that may move (not being cancelled), easiest first."""
        entries = [self._entries[key] for worker in self._workers.values()
                   for key in worker.held]
        return sorted((e for e in entries if e.cancelling is None), key=TaskEntry.order)

    def _reclaimable(self, held: list[TaskEntry], worker: WorkerSlots, entry: TaskEntry,
                     kept: dict[str, WorkerSlots],
                     spot_ok: Callable[[TaskEntry], bool]) -> TaskEntry | None:
        """The easiest held task on another worker that ``worker`` can run now and whose
        timeout would prune ``entry`` (same family, as easy or easier)."""
        point, family = entry.task.point, entry.task.family
        if point is None or family is None:
            return None
        for other in held:
            other_point = other.task.point
            if other.task.family == family and other_point is not None \
                    and other_point.as_easy_as(point) \
                    and self._can_take(worker, other, kept, spot_ok):
                return other
        return None

    def _reclaim_for_idle(self, held: list[TaskEntry], kept: dict[str, WorkerSlots],
                          spot_ok: Callable[[TaskEntry], bool]) -> None:
        """Free slots the queue left idle ask for held tasks, easiest first."""
        free = [w for w in self._workers.values() if w.free_cpus > 0]
        for entry in held:
            worker = next((w for w in free if self._can_take(w, entry, kept, spot_ok)), None)
            if worker is not None:
                self._keep(worker, entry, kept)

    def _can_take(self, worker: WorkerSlots, entry: TaskEntry, kept: dict[str, WorkerSlots],
                  spot_ok: Callable[[TaskEntry], bool]) -> bool:
        """Whether ``worker``, not the task's holder, has the free room to start a held task
        not kept for another slot this round (on Spot only if the task may run there now)."""
        return entry.worker_id != worker.worker_id and entry.task.key not in kept \
            and self._has_room(worker, entry.task, on_demand_only=not spot_ok(entry))

    def _keep(self, worker: WorkerSlots, entry: TaskEntry, kept: dict[str, WorkerSlots]) -> None:
        """Keep ``worker``'s room for a held task this round, and ask for it back once."""
        kept[entry.task.key] = worker
        self._resize(worker, -entry.task.cpus, -entry.task.mem_mb if worker.mem_mb else 0)
        if not entry.releasing:
            self._ask_back(entry, next(self._requests))
            self.releases.append(Release(entry.task.key, entry.worker_id or "",
                                         entry.releasing))

    def released(self, key: str, worker_id: str, request: int) -> bool:
        """``worker_id`` gave a held task back unstarted, answering :class:`Release`
        ``request``: it is queued again, in its own place, for the next free slot. False: no
        such request stands (the task ended or moved on, or the answer is to an older
        request), and nothing changes."""
        entry = self._entries.get(key)
        if entry is None or key in self.outcomes or not entry.releasing \
                or entry.releasing != request or entry.worker_id != worker_id:
            return False
        self._unplace(entry)
        self._push(entry)
        return True

    def take_releases(self) -> list[Release]:
        """The held tasks ``assign`` asks back: the coordinator tells their workers."""
        releases, self.releases = self.releases, []
        return releases

    def _hold(self, allow_spot: bool, spot_held: frozenset[Shape | None],
              coming: Mapping[Shape | None, int], keeping: set[str]) -> list[Assignment]:
        """Once every free slot is filled: the next tasks, easiest first, to busy workers that
        have prefetch left (of the task's shape; the fewest held first), each at most its fair
        share of the queue this round (so that the queue's last tasks are spread over the
        fleet, not held by the first workers to refill). A task being confirmed waits for an
        idle worker instead.

        Only the queue beyond the ``coming`` CPUs of its shape is held: a task held by a busy
        worker waits for a slot there, while a worker about to be ready would start it at once
        (two jobs on two new VMs ran one after the other on one) and would start the harder
        tasks behind it first (a timeout then dominates them too late to skip them).
        ``keeping``: workers whose free room waits for a held task (:meth:`_keep`): a task
        held there would start at once, before it."""
        holders: dict[Shape | None, list[WorkerSlots]] = {}
        for worker in self._workers.values():
            if worker.held_free > 0 and self._wants_refill(worker) \
                    and worker.worker_id not in keeping:
                holders.setdefault(worker.shape, []).append(worker)
        share = max(1, -(-len(self._queued) // max(1, len(self._workers))))
        taken: dict[str, int] = {}
        assignments: list[Assignment] = []
        deferred: list[tuple[tuple, str]] = []
        while self._queue and any(holders.values()):
            order, key = heapq.heappop(self._queue)
            if self._stale(order, key):
                continue
            entry = self._entries[key]
            task = entry.task
            spot_ok = allow_spot and task.shape not in spot_held and not self._on_demand_only(entry)
            fits = [w for w in holders.get(task.shape, ())
                    if w.held_free >= task.cpus and w.cpus >= task.cpus
                    and (spot_ok or w.pool is not Pool.SPOT)
                    and (not w.mem_mb or w.free_mem_mb >= task.mem_mb)]
            if self._parks(order, key):
                continue
            if key in self._confirming or not fits:
                deferred.append((order, key))
                continue
            if self._queued_cpus(task.shape) - task.cpus < coming.get(task.shape, 0):
                # no more holds of this shape this round (a smaller task might still pass;
                # not worth scanning the rest of the queue for it)
                holders.pop(task.shape, None)
                deferred.append((order, key))
                continue
            worker = min(fits, key=lambda w: (len(w.held), w.worker_id))
            self._dequeue(key)
            self._hold_on(entry, worker)
            self._started(entry)
            taken[worker.worker_id] = taken.get(worker.worker_id, 0) + 1
            if worker.held_free <= 0 or taken[worker.worker_id] >= share:
                holders[task.shape].remove(worker)
            assignments.append(Assignment(key, worker.worker_id))
        for item in deferred:
            heapq.heappush(self._queue, item)
        return assignments
