"""The scheduling core: task table, easiest-first dispatch, the domino effect, re-queueing.

Pure and deterministic: no I/O, no clock, no threads. The coordinator feeds it events (a task
was submitted, a worker joined or vanished, a task ended) and carries out what it answers
(assignments to send, running tasks to kill, tasks to report as skipped). The same code runs
under Snakemake, under cwltool and inside a simulator.

This module keeps the task table, the queue and the events in; its parts, each one idea, are
mixed in: :mod:`.free_slots` (which worker a task fits), :mod:`.held_tasks` (prefetch's held
tasks, and taking them back), :mod:`.pruning` (the domino effect, confirming timeouts),
:mod:`.placing` (a task's place, the one record of where it stands, and its every move),
:mod:`.model_hooks` (a runtime model's order, skips and learning), :mod:`.queued_demand` (what the
queue wants per shape and pool, and the head start before it); the records it answers
with are :mod:`.tasks`'.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Mapping

from expo_executor.core.free_slots import FreeSlots
from expo_executor.core.hardness import Frontier
from expo_executor.core.held_jobs import wants_refill
from expo_executor.core.held_tasks import HeldTasks
from expo_executor.core.model_hooks import ModelHooks
from expo_executor.core.placing import Placing
from expo_executor.core.pruning import Pruning
from expo_executor.core.queued_demand import QueuedDemand
from expo_executor.core.records import Outcome
from expo_executor.core.runtime_model import RuntimeModel
from expo_executor.core.shapes import Shape
from expo_executor.core.tasks import (Assignment, Cancel, Confirming, Event, Finished,
                                      ModelSkipped, Place, Pool, Release, Requeued, SkipRule,
                                      Skipped, Stage, Task, TaskEntry, Unconfirmed, WorkerSlots)

# The scheduler's records live in .tasks; callers import them from here, with the scheduler.
__all__ = ["Assignment", "Cancel", "Confirming", "Event", "Finished", "ModelSkipped", "Outcome",
           "Place", "Pool", "Release", "Requeued", "Scheduler", "SkipRule", "Skipped", "Stage",
           "Task", "Unconfirmed"]


class Scheduler(FreeSlots, HeldTasks, Pruning, Placing, ModelHooks, QueuedDemand):
    """Task table and dispatch policy. ``spot_attempts``: preemptions before on-demand only.
    ``confirm_timeouts``: a timeout of a family whose timeouts are not trusted yet runs once
    more on an idle other worker before it prunes (a confirmed one makes the family trusted).
    ``prefetch``: tasks per CPU a busy worker holds beyond what it runs, to start the moment a
    slot frees (on GCE a worker hears of a new assignment only at its next inbox read); a held
    task is cancelled like a running one, and re-queued with it. With ``prefetch`` 2 or more a
    worker is refilled only once it runs low (:meth:`_wants_refill`), then up to the full
    ``cpus * prefetch``: its worker batches its reports until then (worker/result_reports.py), so one
    result object and one inbox write serve several tasks. ``models``: a runtime model per
    family, which orders its queue and learns from its finishes; ``skip_above``: skip a queued
    task the trusted model gives at least this probability of passing its deadline, unless
    the task carries its family's own threshold (``Task.skip``) (:mod:`.model_hooks`)."""

    def __init__(self, frontiers: dict[str, Frontier] | None = None, spot_attempts: int = 2,
                 confirm_timeouts: bool = False, prefetch: int = 0,
                 models: Mapping[str, RuntimeModel] | None = None,
                 skip_above: float | None = None, trust_after: int = 50):
        self.frontiers: dict[str, Frontier] = dict(frontiers or {})
        self.spot_attempts = spot_attempts
        self.confirm_timeouts = confirm_timeouts
        self.prefetch = prefetch
        self._trusted: set[str] = set()  # families with a confirmed timeout
        self._confirming: set[str] = set()  # tasks waiting for (or in) their re-run
        self.outcomes: dict[str, Outcome] = {}
        self._entries: dict[str, TaskEntry] = {}
        self._queue: list[tuple[tuple, str]] = []  # heap of (order, key); stale keys skipped
        self._queued: set[str] = set()
        # queued CPUs per (shape, demand pool), kept as tasks move
        self._demand: dict[tuple[Shape | None, Pool], int] = {}
        self._expected: dict[tuple[Shape | None, Pool], int] = {}  # see expect
        self._workers: dict[str, WorkerSlots] = {}
        self._seq = itertools.count()
        # Indexes that keep each decision from scanning every worker or task (the simulator
        # runs 100,000 tasks on 1,000 workers): workers with free CPUs, per shape, kind (Spot
        # or not) and free CPU count, as heaps of ids with stale entries dropped when met; and
        # the undecided tasks of each frontier partition (family, scope), for the domino effect.
        self._free: dict[tuple[Shape | None, bool, int], list[str]] = {}
        self._with_free = {True: 0, False: 0}  # Spot? -> workers with a free CPU
        self._most_cpus = 0
        self._open: dict[tuple[str, tuple[str, ...]], list[str]] = {}
        self.unconfirmed: list[Event] = []  # see take_unconfirmed
        self.releases: list[Release] = []  # see take_releases
        self._requests = itertools.count(1)  # Release.request: each one new
        # held task asked back -> the worker whose room the last round kept for it
        self._kept: dict[str, str] = {}
        self._init_models(models, skip_above, trust_after)

    # -- events in ---------------------------------------------------------------------------
    def submit(self, task: Task) -> list[Event]:
        """Queue a task, or skip it at once when a known timeout already dominates it."""
        if task.key in self._entries:
            raise ValueError(f"task {task.key} submitted twice")
        entry = TaskEntry(task, next(self._seq))
        self._entries[task.key] = entry
        self._expected.clear()  # the real queue takes over from the head start
        dominator = self._dominator(task)
        if dominator is not None:
            self.outcomes[task.key] = Outcome.SKIPPED
            return [Skipped(task.key, dominator, on_arrival=True)]
        skip = self._model_arrival(entry)
        if skip is not None:
            return [skip]
        if task.family is not None and task.point is not None:
            self._open.setdefault((task.family, task.point.scope), []).append(task.key)
        self._push(entry)
        return []

    def adopt(self, task: Task, worker_id: str) -> list[Event]:
        """A task already running on a worker this scheduler never places work on: a crashed
        run's, taken over by a rerun (coordinator/adopt.py). It counts as running there, so
        its outcome goes through :meth:`finish` (a timeout prunes, a confirmation re-runs it
        here), a newer timeout that dominates it cancels it, and :meth:`remove_worker`
        re-queues it should that worker die. One a known timeout dominates already is
        cancelled at once."""
        if task.key in self._entries:
            raise ValueError(f"task {task.key} submitted twice")
        worker = self._workers.get(worker_id)
        if worker is None:  # no CPUs of its own: never indexed as free, never placed on
            worker = self._workers[worker_id] = WorkerSlots(worker_id, 0, 0, Pool.ON_DEMAND)
        entry = TaskEntry(task, next(self._seq))
        self._entries[task.key] = entry
        self._run_on(entry, worker)  # its free CPUs below 0, back to 0 as its tasks end
        if task.family is not None and task.point is not None:
            self._open.setdefault((task.family, task.point.scope), []).append(task.key)
        dominator = self._dominator(task)
        if dominator is None:
            return []
        self._cancel_place(entry, dominator)
        return [Cancel(task.key, worker_id, dominator)]

    def set_prefetch(self, prefetch: int) -> None:
        """Hold ``prefetch`` tasks per CPU from now on (the coordinator sizes it to the jobs'
        length): a worker holding more than the new depth keeps what it holds and gets no
        more until it is below it."""
        if prefetch == self.prefetch:
            return
        for worker in self._workers.values():
            worker.held_free += worker.cpus * (prefetch - self.prefetch)
        self.prefetch = prefetch

    def add_worker(self, worker_id: str, cpus: int, mem_mb: int = 0,
                   pool: Pool = Pool.LOCAL, shape: Shape | None = None) -> None:
        """A worker is ready for work (mem_mb 0: memory is not tracked for it); it runs only
        tasks of its ``shape``.

        An idle worker may register again (its capacity is replaced); a busy one may not, since
        replacing it would orphan its running tasks: ``remove_worker`` it first.
        """
        known = self._workers.get(worker_id)
        if known is not None and (known.running or known.held):
            raise ValueError(f"worker {worker_id} added twice while it runs "
                             f"{len(known.running) + len(known.held)} task(s); remove_worker "
                             "it first")
        if known is not None:
            self._unindex(known)
        worker = WorkerSlots(worker_id, cpus, mem_mb, pool, shape, cpus, mem_mb,
                         held_free=cpus * self.prefetch)
        self._workers[worker_id] = worker
        self._most_cpus = max(self._most_cpus, cpus)
        self._index(worker)

    def remove_worker(self, worker_id: str, preempted: bool = False) -> list[Event]:
        """A worker is gone: its unfinished tasks go back to the front of the queue. Compute
        Engine ``preempted`` it (not a crash): on Spot, each task it ran counts a preemption;
        one it only held never started there, and is charged none."""
        worker = self._workers.pop(worker_id, None)
        if worker is None:
            return []
        self._unindex(worker)
        events: list[Event] = []
        for key in sorted(worker.running | set(worker.held), key=lambda k: self._entries[k].seq):
            entry = self._entries[key]
            dominator, entry.place = entry.cancelling, Place()  # its indexes left with it
            if dominator is not None:  # it was being killed anyway
                self.outcomes[key] = Outcome.SKIPPED
                events.append(Skipped(key, dominator, killed=True))
                continue
            if preempted and worker.pool is Pool.SPOT and key in worker.running:
                entry.preemptions += 1
            entry.requeued = True
            self._push(entry)
            events.append(Requeued(key, worker_id, entry.preemptions, self._on_demand_only(entry)))
        return events

    def finish(self, key: str, outcome: Outcome, runtime_s: float | None = None) -> list[Event]:
        """A running task ended. A timeout moves the frontier and sets off the domino effect;
        its family's runtime model learns from it (a solved task's ``runtime_s``, a timeout
        censored at its deadline) and may skip what it now rules out."""
        entry = self._entries[key]
        if key in self.outcomes or entry.worker_id is None:
            return []  # a late or duplicate report: the first one stands
        worker_id, dominator = entry.worker_id, entry.cancelling
        self._unplace(entry)
        if dominator is not None and outcome is not Outcome.SOLVED:
            self.outcomes[key] = Outcome.SKIPPED  # killed by the domino effect on the way
            return [Skipped(key, dominator, killed=True)]
        family = entry.task.family
        prunes = outcome is Outcome.TIMEOUT and family is not None \
            and entry.task.point is not None
        if prunes and self._to_confirm(entry, family):
            entry.first_timeout_on, entry.requeued = worker_id, True
            self._confirming.add(key)
            self._push(entry)
            return [Confirming(key, worker_id or "")]
        self._confirming.discard(key)
        self.outcomes[key] = outcome
        first = entry.first_timeout_on
        if not prunes:
            return [Finished(key, outcome, first_timeout_on=first),
                    *self._feed(entry, outcome, runtime_s)]
        if first is not None:
            self._trusted.add(family)  # it timed out twice: its family's timeouts hold
        return self._prune(entry, outcome) + self._feed(entry, outcome, runtime_s)

    def cancelled(self, key: str, ran: bool = True) -> list[Event]:
        """The worker confirmed that it killed a task we cancelled (``ran``), or that it
        never started it (a held one)."""
        entry = self._entries[key]
        dominator = entry.cancelling
        if key in self.outcomes or dominator is None:
            return []
        self._unplace(entry)
        self.outcomes[key] = Outcome.SKIPPED
        return [Skipped(key, dominator, killed=ran)]

    def withdraw(self, key: str) -> str | None:
        """Forget a task the front end cancelled; returns the worker still running it, if any."""
        entry = self._entries.get(key)
        if entry is None or key in self.outcomes:
            return None
        self._dequeue(key)
        self._confirming.discard(key)
        self.outcomes[key] = Outcome.FAILED
        worker_id = entry.worker_id
        if worker_id is not None:
            self._unplace(entry)
        return worker_id

    # -- decisions out -----------------------------------------------------------------------
    def assign(self, allow_spot: bool = True,
               spot_held: frozenset[Shape | None] = frozenset(),
               coming: Mapping[Shape | None, int] | None = None) -> list[Assignment]:
        """Fill free worker slots, easiest first; a task that fits nowhere waits its turn.

        ``allow_spot=False`` (the straggler rule at the end of a sweep) places nothing on Spot;
        ``spot_held``: the shapes whose tasks it places on Spot no more (their straggler rule).
        ``coming``: CPUs per shape of workers not ready yet (booting, or still to be created),
        which prefetch leaves queued for them (:meth:`_hold`).
        With prefetch, a free slot may ask for a held task back instead (:meth:`_keep`;
        :meth:`take_releases` has the requests).
        """
        def spot_ok(entry: TaskEntry) -> bool:  # may a held task move to a Spot worker now?
            return allow_spot and entry.task.shape not in spot_held \
                and not self._on_demand_only(entry)

        with_free = self._with_free
        assignments: list[Assignment] = []
        deferred: list[tuple[tuple, str]] = []
        unconfirmed = self._give_up_confirming()
        self._unpark()
        held: list[TaskEntry] | None = None  # built when first needed
        kept: dict[str, WorkerSlots] = {}  # held task -> the worker whose room it keeps this round
        while self._queue and (with_free[False] or with_free[True]):
            order, key = heapq.heappop(self._queue)
            if self._stale(order, key):
                continue
            if self._parks(order, key):
                continue
            entry = self._entries[key]
            worker = self._fit(entry, allow_spot and entry.task.shape not in spot_held)
            if worker is None:
                deferred.append((order, key))
                continue
            if held is None and self.prefetch and entry.task.point is not None:
                held = self._held_elsewhere()
            easier = self._reclaimable(held or [], worker, entry, kept, spot_ok)
            if easier is not None:  # it would start before an easier one its timeout prunes
                self._keep(worker, easier, kept)
                deferred.append((order, key))
                continue
            self._dequeue(key)
            self._run_on(entry, worker)
            self._started(entry)
            assignments.append(Assignment(key, worker.worker_id))
        for item in deferred:
            heapq.heappush(self._queue, item)
        if self.prefetch and (with_free[False] or with_free[True]):
            self._reclaim_for_idle(self._held_elsewhere() if held is None else held, kept,
                                   spot_ok)
        if self.prefetch:
            assignments += self._hold(allow_spot, spot_held, coming or {},
                                      {w.worker_id for w in kept.values()})
        self._kept = {}
        for key, worker in kept.items():
            task = self._entries[key].task
            self._resize(worker, task.cpus, task.mem_mb if worker.mem_mb else 0)
            self._kept[key] = worker.worker_id
        self.unconfirmed.extend(unconfirmed)
        return assignments

    # -- prefetch: what the worker does with what it holds ------------------------------------
    def _wants_refill(self, worker: WorkerSlots) -> bool:
        """Refill on low (``core.held_jobs.wants_refill``, the rule its worker's reports
        follow)."""
        return wants_refill(self.prefetch, worker.held_cpus(self.prefetch), worker.cpus)

    # -- queries -----------------------------------------------------------------------------
    def state(self, key: str) -> str:
        """``queued``, ``running`` (held, asked back or running: on a worker that may start
        it), ``cancelling`` or the outcome's value; from the task's :class:`Place`."""
        if key in self.outcomes:
            return self.outcomes[key].value
        stage = self._entries[key].place.stage
        if stage is Stage.QUEUED or stage is Stage.CANCELLING:
            return stage.value
        return "running"

    def counts(self) -> dict[str, int]:
        """Tasks per state, for the progress line and the fleet."""
        counts = {"queued": len(self._queued), "running": 0}
        counts.update({o.value: 0 for o in Outcome})
        for worker in self._workers.values():
            counts["running"] += len(worker.running)
            counts["queued"] += len(worker.held)  # waiting, on the worker that starts them
        for outcome in self.outcomes.values():
            counts[outcome.value] += 1
        return counts

    def running_on(self, worker_id: str) -> set[str]:
        worker = self._workers.get(worker_id)
        return set(worker.running) if worker else set()

    def workers(self) -> dict[str, tuple[int, int]]:
        """worker id -> (cpus, free cpus); CPUs kept for a held task still asked back are not
        free (the worker waits for it: it is not idle). Once it is given back (or ended, or
        withdrawn) nothing is waited for, whether or not a round assigns again (at the
        budget's drain none does)."""
        kept: dict[str, int] = {}
        for key, worker_id in self._kept.items():
            entry = self._entries[key]
            if entry.releasing and key not in self.outcomes:
                kept[worker_id] = kept.get(worker_id, 0) + entry.task.cpus
        return {w.worker_id: (w.cpus, w.free_cpus - kept.get(w.worker_id, 0))
                for w in self._workers.values()}

    def task(self, key: str) -> Task:
        return self._entries[key].task

    def preemptions(self, key: str) -> int:
        """Spot preemptions this task has suffered so far."""
        return self._entries[key].preemptions

    # -- internals ---------------------------------------------------------------------------
    def _push(self, entry: TaskEntry) -> None:
        self._queued.add(entry.task.key)
        slot = (entry.task.shape, self._demand_pool(entry))
        self._demand[slot] = self._demand.get(slot, 0) + entry.task.cpus
        heapq.heappush(self._queue, (entry.order(), entry.task.key))

    def _stale(self, order: tuple, key: str) -> bool:
        """A heap entry no longer for its task: decided, placed, or re-ranked since (a newer
        entry with its current order stands for it)."""
        return key not in self._queued or order != self._entries[key].order()

    def _dequeue(self, key: str) -> None:
        if key in self._queued:
            self._queued.discard(key)
            entry = self._entries[key]
            self._demand[(entry.task.shape, self._demand_pool(entry))] -= entry.task.cpus
