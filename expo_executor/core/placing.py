"""A task's place moves: the only code that changes a :class:`~.tasks.Place` (the one record of
where a task stands) and, with it, the indexes derived from it (a worker's ``running`` and
``held``, and its free capacity). Kept in one place so that the record and its indexes cannot
disagree: the scheduler once kept a task's worker and its being cancelled or asked back on the
task's row, its running or held on the worker's, and the coordinator a third copy, and a
release asked twice fell between them (issue 30). Part of
:class:`~expo_executor.core.scheduler.Scheduler`, whose table it changes.
"""

from __future__ import annotations

from expo_executor.core.hardness import FrontierPoint
from expo_executor.core.held_jobs import starts_now
from expo_executor.core.tasks import Place, Stage, TaskEntry, WorkerSlots


class Placing:
    """The scheduler's part that moves tasks' places (see the module)."""

    _entries: dict[str, TaskEntry]
    _workers: dict[str, WorkerSlots]

    def _run_on(self, entry: TaskEntry, worker: WorkerSlots) -> None:
        """Queued -> RUNNING on ``worker``'s free room (an assignment, or an adopted task)."""
        task = entry.task
        entry.place = Place(Stage.RUNNING, worker.worker_id)
        worker.running.add(task.key)
        self._resize(worker, -task.cpus, -task.mem_mb if worker.mem_mb else 0)

    def _hold_on(self, entry: TaskEntry, worker: WorkerSlots) -> None:
        """Queued -> HELD on busy ``worker``: its prefetch room and memory, not its CPUs."""
        task = entry.task
        entry.place = Place(Stage.HELD, worker.worker_id)
        worker.held.append(task.key)
        worker.held_free -= task.cpus
        self._resize(worker, 0, -task.mem_mb if worker.mem_mb else 0)

    def _promote(self, worker: WorkerSlots) -> None:
        """What the worker does as a slot frees: start its held tasks, in order, while the
        next one fits (or nothing runs): ``core.held_jobs.starts_now``, the worker's rule. A
        held task HELD is RUNNING then; one being cancelled or asked back keeps its stage
        (the worker's answer says whether it started it) but takes the CPUs it would."""
        while worker.held:
            entry = self._entries[worker.held[0]]
            if not starts_now(entry.task.cpus, worker.free_cpus, bool(worker.running)):
                return
            worker.held.pop(0)
            worker.held_free += entry.task.cpus
            worker.running.add(entry.task.key)
            self._resize(worker, -entry.task.cpus, 0)  # its memory was taken when held
            if entry.place.stage is Stage.HELD:
                entry.place.stage = Stage.RUNNING

    def _cancel_place(self, entry: TaskEntry, dominator: FrontierPoint) -> None:
        """Held, running or asked back -> CANCELLING (its worker is told to kill it). One
        asked back keeps its request: its worker may still answer it (it gave the task back
        unstarted), and its inbox lists the request until then (:meth:`place_on`)."""
        entry.place = Place(Stage.CANCELLING, entry.place.worker_id, dominator=dominator,
                            request=entry.place.request)

    def _ask_back(self, entry: TaskEntry, request: int) -> None:
        """HELD -> RELEASING (its worker is asked to give it back, by Release ``request``)."""
        entry.place = Place(Stage.RELEASING, entry.place.worker_id, request=request)

    def _unplace(self, entry: TaskEntry) -> None:
        """Off its worker (it ended, was given back, withdrawn or cancelled): back to QUEUED
        (the caller queues it again or decides it). A running one frees its room, and the
        worker's held tasks start in it."""
        worker = self._workers.get(entry.place.worker_id or "")
        key, task = entry.task.key, entry.task
        if worker is not None and key in worker.running:
            worker.running.discard(key)
            self._resize(worker, task.cpus, task.mem_mb if worker.mem_mb else 0)
            self._promote(worker)
        elif worker is not None and key in worker.held:
            worker.held.remove(key)
            worker.held_free += task.cpus
            self._resize(worker, 0, task.mem_mb if worker.mem_mb else 0)
        entry.place = Place()

    def place(self, key: str) -> Place:
        """Where ``key`` stands (a copy: it changes only by the scheduler's moves)."""
        place = self._entries[key].place
        return Place(place.stage, place.worker_id, place.dominator, place.request)

    def place_on(self, key: str, worker_id: str) -> Place:
        """Where ``key`` stands on ``worker_id``: a copy of its Place if it is placed there,
        else a QUEUED one (also for a key the scheduler never had). The coordinator's inbox
        lists read from this which of a worker's jobs are asked back (by which request) and
        which are being cancelled (``coordinator.places``)."""
        entry = self._entries.get(key)
        if entry is None or entry.place.worker_id != worker_id:
            return Place()
        return self.place(key)
