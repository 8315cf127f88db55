"""The scheduling core: task table, easiest-first dispatch, the domino effect, re-queueing.

Pure and deterministic: no I/O, no clock, no threads. The coordinator feeds it events (a task
was submitted, a worker joined or vanished, a task ended) and carries out what it answers
(assignments to send, running tasks to kill, tasks to report as skipped). The same code runs
under Snakemake, under cwltool and inside a simulator.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum

from expo_executor.core.hardness import Frontier, FrontierPoint, HardnessPoint
from expo_executor.core.held_jobs import starts_now, wants_refill
from expo_executor.core.records import Outcome
from expo_executor.core.shapes import Shape


class Pool(str, Enum):
    """Where a worker's slots come from; local workers count as reliable."""

    LOCAL = "local"
    SPOT = "spot"
    ON_DEMAND = "on_demand"


@dataclass(frozen=True)
class Task:
    """What the scheduler needs to know about a job; the front end keeps everything else."""

    key: str
    label: str
    # frontier partition (rule, spec, deadline, engine and machine); None: never pruned
    family: str | None = None
    point: HardnessPoint | None = None
    cpus: int = 1
    mem_mb: int = 0
    priority: int = 0  # higher runs earlier, before hardness order
    preemptible: bool = True
    spot_attempts: int | None = None  # preemptions before on-demand only; None: the run's
    shape: Shape | None = None  # the machine it needs; None: the run's own workers


@dataclass(frozen=True)
class Assignment:
    key: str
    worker_id: str


@dataclass(frozen=True)
class Release:
    """A held task another worker's free slot should start (``Scheduler.assign``): its
    worker is asked to give it back. It answers that it never started it
    (``Scheduler.released``), or reports it as any job it started first."""

    key: str
    worker_id: str


@dataclass(frozen=True)
class Skipped:
    """A task that will not run (or was killed) because an easier one timed out."""

    key: str
    dominator: FrontierPoint
    killed: bool = False
    # skipped as it was submitted: a timeout it knew of already dominated it (no timeout of
    # this round set it off, and no worker ever had it)
    on_arrival: bool = False


@dataclass(frozen=True)
class Cancel:
    """A running task to kill: the coordinator tells its worker, then calls ``cancelled``."""

    key: str
    worker_id: str
    dominator: FrontierPoint


@dataclass(frozen=True)
class Finished:
    """A task ended; for a timeout, ``harder`` counts the tasks it skipped or cancelled.
    ``first_timeout_on``: the worker on which its first run timed out, when that timeout was
    re-run to confirm it (a solved re-run makes it a slow worker's event, not hardness)."""

    key: str
    outcome: Outcome
    harder: int = 0
    first_timeout_on: str | None = None


@dataclass(frozen=True)
class Confirming:
    """A family's timeout, not yet trusted: the task runs once more, on another worker with
    nothing else running, before its timeout prunes anything."""

    key: str
    worker_id: str


@dataclass(frozen=True)
class Requeued:
    """A task whose worker vanished goes back to the queue, ahead of fresh tasks."""

    key: str
    worker_id: str
    preemptions: int
    on_demand_only: bool


@dataclass(frozen=True)
class Unconfirmed:
    """A timeout that could not be re-run (no other worker of its shape): it prunes as
    without confirmation."""

    key: str
    worker_id: str


Event = Skipped | Cancel | Finished | Requeued | Confirming | Unconfirmed


@dataclass
class _Worker:
    worker_id: str
    cpus: int
    mem_mb: int
    pool: Pool
    shape: Shape | None = None
    free_cpus: int = 0
    free_mem_mb: int = 0
    running: set[str] = field(default_factory=set)
    # prefetched: assigned, not started; the worker starts them in this order as its slots
    # free (``Scheduler.prefetch``), and so does its mirror here (_promote)
    held: list[str] = field(default_factory=list)
    held_free: int = 0  # CPUs of prefetch left

    def held_cpus(self, prefetch: int) -> int:
        return self.cpus * prefetch - self.held_free


@dataclass
class _Entry:
    task: Task
    seq: int
    requeued: bool = False
    preemptions: int = 0
    worker_id: str | None = None
    cancelling: FrontierPoint | None = None
    first_timeout_on: str | None = None  # set while (and after) its timeout is re-run
    releasing: bool = False  # held, and its worker asked to give it back (Release)

    def order(self) -> tuple:
        hardness = self.task.point.sort_key() if self.task.point else (0.0, ())
        return (not self.requeued, -self.task.priority, hardness, self.seq)


class Scheduler:
    """Task table and dispatch policy. ``spot_attempts``: preemptions before on-demand only.
    ``confirm_timeouts``: a timeout of a family whose timeouts are not trusted yet runs once
    more on an idle other worker before it prunes (a confirmed one makes the family trusted).
    ``prefetch``: tasks per CPU a busy worker holds beyond what it runs, to start the moment a
    slot frees (on GCE a worker hears of a new assignment only at its next inbox read); a held
    task is cancelled like a running one, and re-queued with it. With ``prefetch`` 2 or more a
    worker is refilled only once it runs low (:meth:`_wants_refill`), then up to the full
    ``cpus * prefetch``: its worker batches its reports until then (worker/result_reports.py), so one
    result object and one inbox write serve several tasks."""

    def __init__(self, frontiers: dict[str, Frontier] | None = None, spot_attempts: int = 2,
                 confirm_timeouts: bool = False, prefetch: int = 0):
        self.frontiers: dict[str, Frontier] = dict(frontiers or {})
        self.spot_attempts = spot_attempts
        self.confirm_timeouts = confirm_timeouts
        self.prefetch = prefetch
        self._trusted: set[str] = set()  # families with a confirmed timeout
        self._confirming: set[str] = set()  # tasks waiting for (or in) their re-run
        self.outcomes: dict[str, Outcome] = {}
        self._entries: dict[str, _Entry] = {}
        self._queue: list[tuple[tuple, str]] = []  # heap of (order, key); stale keys skipped
        self._queued: set[str] = set()
        # queued CPUs per (shape, demand pool), kept as tasks move
        self._demand: dict[tuple[Shape | None, Pool], int] = {}
        self._workers: dict[str, _Worker] = {}
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
        self._kept: dict[str, int] = {}  # worker -> CPUs the last round kept for held tasks

    # -- events in ---------------------------------------------------------------------------
    def submit(self, task: Task) -> list[Event]:
        """Queue a task, or skip it at once when a known timeout already dominates it."""
        if task.key in self._entries:
            raise ValueError(f"task {task.key} submitted twice")
        entry = _Entry(task, next(self._seq))
        self._entries[task.key] = entry
        dominator = self._dominator(task)
        if dominator is not None:
            self.outcomes[task.key] = Outcome.SKIPPED
            return [Skipped(task.key, dominator, on_arrival=True)]
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
            worker = self._workers[worker_id] = _Worker(worker_id, 0, 0, Pool.ON_DEMAND)
        entry = _Entry(task, next(self._seq), worker_id=worker_id)
        self._entries[task.key] = entry
        worker.running.add(task.key)
        worker.free_cpus -= task.cpus  # back to 0 as its tasks end (_release)
        if task.family is not None and task.point is not None:
            self._open.setdefault((task.family, task.point.scope), []).append(task.key)
        dominator = self._dominator(task)
        if dominator is None:
            return []
        entry.cancelling = dominator
        return [Cancel(task.key, worker_id, dominator)]

    def add_timeout(self, family: str, point: HardnessPoint, label: str) -> list[Event]:
        """A timeout measured outside this run (a crashed run's job that no task of this run
        stands for): it joins the frontier, and what it dominates is skipped or cancelled."""
        frontier = self.frontiers.setdefault(family, Frontier())
        if not frontier.add(point, label):
            return []
        return self._domino(family, frontier, point)

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
        worker = _Worker(worker_id, cpus, mem_mb, pool, shape, cpus, mem_mb,
                         held_free=cpus * self.prefetch)
        self._workers[worker_id] = worker
        self._most_cpus = max(self._most_cpus, cpus)
        self._index(worker)

    def remove_worker(self, worker_id: str, preempted: bool = False) -> list[Event]:
        """A worker is gone: its unfinished tasks go back to the front of the queue."""
        worker = self._workers.pop(worker_id, None)
        if worker is None:
            return []
        self._unindex(worker)
        events: list[Event] = []
        for key in sorted(worker.running | set(worker.held), key=lambda k: self._entries[k].seq):
            entry = self._entries[key]
            entry.worker_id, entry.releasing = None, False
            if entry.cancelling is not None:  # it was being killed anyway
                self.outcomes[key] = Outcome.SKIPPED
                events.append(Skipped(key, entry.cancelling, killed=True))
                continue
            if preempted and worker.pool is Pool.SPOT:
                entry.preemptions += 1
            entry.requeued = True
            self._push(entry)
            events.append(Requeued(key, worker_id, entry.preemptions, self._on_demand_only(entry)))
        return events

    def finish(self, key: str, outcome: Outcome) -> list[Event]:
        """A running task ended. A timeout moves the frontier and sets off the domino effect."""
        entry = self._entries[key]
        if key in self.outcomes or entry.worker_id is None:
            return []  # a late or duplicate report: the first one stands
        worker_id = entry.worker_id
        self._release(entry)
        if entry.cancelling is not None and outcome is not Outcome.SOLVED:
            self.outcomes[key] = Outcome.SKIPPED  # killed by the domino effect on the way
            return [Skipped(key, entry.cancelling, killed=True)]
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
            return [Finished(key, outcome, first_timeout_on=first)]
        if first is not None:
            self._trusted.add(family)  # it timed out twice: its family's timeouts hold
        return self._prune(entry, outcome)

    def _to_confirm(self, entry: _Entry, family: str) -> bool:
        """Does this timeout need its re-run first? Only with confirmation on, only in a
        family not trusted yet, and only once per task."""
        return self.confirm_timeouts and family not in self._trusted \
            and entry.first_timeout_on is None

    def _prune(self, entry: _Entry, outcome: Outcome) -> list[Event]:
        """A trusted timeout: it joins its frontier and sets off the domino effect."""
        family, point = entry.task.family, entry.task.point
        assert family is not None and point is not None
        frontier = self.frontiers.setdefault(family, Frontier())
        frontier.add(point, entry.task.label)
        consequences = self._domino(family, frontier, point)
        return [Finished(entry.task.key, outcome, harder=len(consequences),
                         first_timeout_on=entry.first_timeout_on), *consequences]

    def cancelled(self, key: str, ran: bool = True) -> list[Event]:
        """The worker confirmed that it killed a task we cancelled (``ran``), or that it
        never started it (a held one)."""
        entry = self._entries[key]
        if key in self.outcomes or entry.cancelling is None:
            return []
        self._release(entry)
        self.outcomes[key] = Outcome.SKIPPED
        return [Skipped(key, entry.cancelling, killed=ran)]

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
            self._release(entry)
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
        def spot_ok(entry: _Entry) -> bool:  # may a held task move to a Spot worker now?
            return allow_spot and entry.task.shape not in spot_held \
                and not self._on_demand_only(entry)

        with_free = self._with_free
        assignments: list[Assignment] = []
        deferred: list[tuple[tuple, str]] = []
        unconfirmed = self._give_up_confirming()
        held: list[_Entry] | None = None  # built when first needed
        kept: dict[str, _Worker] = {}  # held task -> the worker whose room it keeps this round
        while self._queue and (with_free[False] or with_free[True]):
            order, key = heapq.heappop(self._queue)
            if key not in self._queued:
                continue  # stale heap entry
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
            entry.worker_id = worker.worker_id
            worker.running.add(key)
            self._resize(worker, -entry.task.cpus, -entry.task.mem_mb if worker.mem_mb else 0)
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
            self._kept[worker.worker_id] = self._kept.get(worker.worker_id, 0) + task.cpus
        self.unconfirmed.extend(unconfirmed)
        return assignments

    # -- taking held tasks back --------------------------------------------------------------
    # Prefetch places a task on a busy worker before it knows which slot frees first. A slot
    # that frees elsewhere, or a worker that comes up, would then start the queue's next
    # tasks before the held ones: harder tasks first, whose runs a held task's timeout would
    # have skipped (or an idle worker beside a queue of held tasks). So a free slot that
    # would start a task harder than a held one of its family, or that the queue leaves
    # idle, asks for a held task back and stays free for it until the worker answers.
    def _held_elsewhere(self) -> list[_Entry]:
        """Every held task that may move (not being cancelled), easiest first."""
        entries = [self._entries[key] for worker in self._workers.values()
                   for key in worker.held]
        return sorted((e for e in entries if e.cancelling is None), key=_Entry.order)

    def _reclaimable(self, held: list[_Entry], worker: _Worker, entry: _Entry,
                     kept: dict[str, _Worker],
                     spot_ok: Callable[[_Entry], bool]) -> _Entry | None:
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

    def _reclaim_for_idle(self, held: list[_Entry], kept: dict[str, _Worker],
                          spot_ok: Callable[[_Entry], bool]) -> None:
        """Free slots the queue left idle ask for held tasks, easiest first."""
        free = [w for w in self._workers.values() if w.free_cpus > 0]
        for entry in held:
            worker = next((w for w in free if self._can_take(w, entry, kept, spot_ok)), None)
            if worker is not None:
                self._keep(worker, entry, kept)

    def _can_take(self, worker: _Worker, entry: _Entry, kept: dict[str, _Worker],
                  spot_ok: Callable[[_Entry], bool]) -> bool:
        """Whether ``worker``, not the task's holder, has the free room to start a held task
        not kept for another slot this round (on Spot only if the task may run there now)."""
        return entry.worker_id != worker.worker_id and entry.task.key not in kept \
            and self._has_room(worker, entry.task, on_demand_only=not spot_ok(entry))

    def _keep(self, worker: _Worker, entry: _Entry, kept: dict[str, _Worker]) -> None:
        """Keep ``worker``'s room for a held task this round, and ask for it back once."""
        kept[entry.task.key] = worker
        self._resize(worker, -entry.task.cpus, -entry.task.mem_mb if worker.mem_mb else 0)
        if not entry.releasing:
            entry.releasing = True
            self.releases.append(Release(entry.task.key, entry.worker_id or ""))

    def released(self, key: str, worker_id: str) -> bool:
        """``worker_id`` gave a held task back unstarted (:class:`Release`): it is queued
        again, in its own place, for the next free slot. False: no such request stands (the
        task ended, or moved on), and nothing changes."""
        entry = self._entries.get(key)
        if entry is None or key in self.outcomes or not entry.releasing \
                or entry.worker_id != worker_id:
            return False
        self._release(entry)
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
        holders: dict[Shape | None, list[_Worker]] = {}
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
            if key not in self._queued:
                continue
            entry = self._entries[key]
            task = entry.task
            spot_ok = allow_spot and task.shape not in spot_held and not self._on_demand_only(entry)
            fits = [w for w in holders.get(task.shape, ())
                    if w.held_free >= task.cpus and w.cpus >= task.cpus
                    and (spot_ok or w.pool is not Pool.SPOT)
                    and (not w.mem_mb or w.free_mem_mb >= task.mem_mb)]
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
            entry.worker_id = worker.worker_id
            worker.held.append(key)
            worker.held_free -= task.cpus
            self._resize(worker, 0, -task.mem_mb if worker.mem_mb else 0)
            taken[worker.worker_id] = taken.get(worker.worker_id, 0) + 1
            if worker.held_free <= 0 or taken[worker.worker_id] >= share:
                holders[task.shape].remove(worker)
            assignments.append(Assignment(key, worker.worker_id))
        for item in deferred:
            heapq.heappush(self._queue, item)
        return assignments

    def _wants_refill(self, worker: _Worker) -> bool:
        """Refill on low (``core.held_jobs.wants_refill``, the rule its worker's reports
        follow)."""
        return wants_refill(self.prefetch, worker.held_cpus(self.prefetch), worker.cpus)

    def _promote(self, worker: _Worker) -> None:
        """What the worker does as a slot frees: start its held tasks, in order, while the
        next one fits (or nothing runs): ``core.held_jobs.starts_now``, the worker's rule."""
        while worker.held:
            entry = self._entries[worker.held[0]]
            if not starts_now(entry.task.cpus, worker.free_cpus, bool(worker.running)):
                return
            worker.held.pop(0)
            worker.held_free += entry.task.cpus
            worker.running.add(entry.task.key)
            self._resize(worker, -entry.task.cpus, 0)  # its memory was taken when held

    def take_unconfirmed(self) -> list[Event]:
        """Timeouts ``assign`` could not re-run (no other worker of their shape), with what
        their pruning set off: the coordinator reports them after its round's assignments."""
        events, self.unconfirmed = self.unconfirmed, []
        return events

    def _give_up_confirming(self) -> list[Event]:
        """A waiting re-run whose shape has no worker but the one it timed out on cannot
        run (a worker never runs a job twice): its first timeout prunes as if confirmed."""
        events: list[Event] = []
        for key in sorted(self._confirming, key=lambda k: self._entries[k].seq):
            entry = self._entries[key]
            if key not in self._queued:
                continue
            others = [w for w in self._workers.values()
                      if w.shape == entry.task.shape and w.worker_id != entry.first_timeout_on]
            if others or entry.first_timeout_on not in self._workers:
                continue  # another worker will be free, or a new one is coming
            self._dequeue(key)
            self._confirming.discard(key)
            self.outcomes[key] = Outcome.TIMEOUT
            events.append(Unconfirmed(key, entry.first_timeout_on or ""))
            events.extend(self._prune(entry, Outcome.TIMEOUT))
        return events

    # -- queries -----------------------------------------------------------------------------
    def state(self, key: str) -> str:
        """``queued``, ``running``, ``cancelling`` or the outcome's value."""
        if key in self.outcomes:
            return self.outcomes[key].value
        entry = self._entries[key]
        if entry.worker_id is None:
            return "queued"
        return "cancelling" if entry.cancelling else "running"

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

    def _queued_cpus(self, shape: Shape | None) -> int:
        demand = self._demand
        return demand.get((shape, Pool.SPOT), 0) + demand.get((shape, Pool.ON_DEMAND), 0)

    def queued_demand(self) -> dict[Pool, int]:
        """CPUs wanted by queued tasks, split by whether they may still run on Spot."""
        totals = {Pool.SPOT: 0, Pool.ON_DEMAND: 0}
        for (_shape, pool), cpus in self._demand.items():
            totals[pool] += cpus
        return totals

    def queued_by_shape(self) -> dict[Shape | None, dict[Pool, int]]:
        """``queued_demand`` per shape: each shape's pools grow for their own work only."""
        out: dict[Shape | None, dict[Pool, int]] = {}
        for (shape, pool), cpus in self._demand.items():
            out.setdefault(shape, {Pool.SPOT: 0, Pool.ON_DEMAND: 0})[pool] += cpus
        return out

    def demand_pool(self, key: str) -> Pool:
        """The pool a queued task's demand counts in: ON_DEMAND if it must not run on Spot."""
        return self._demand_pool(self._entries[key])

    def running_on(self, worker_id: str) -> set[str]:
        worker = self._workers.get(worker_id)
        return set(worker.running) if worker else set()

    def workers(self) -> dict[str, tuple[int, int]]:
        """worker id -> (cpus, free cpus); CPUs kept for a held task asked back are not free
        (the worker waits for it: it is not idle)."""
        return {w.worker_id: (w.cpus, w.free_cpus - self._kept.get(w.worker_id, 0))
                for w in self._workers.values()}

    def task(self, key: str) -> Task:
        return self._entries[key].task

    def preemptions(self, key: str) -> int:
        """Spot preemptions this task has suffered so far."""
        return self._entries[key].preemptions

    # -- internals ---------------------------------------------------------------------------
    def _push(self, entry: _Entry) -> None:
        self._queued.add(entry.task.key)
        slot = (entry.task.shape, self._demand_pool(entry))
        self._demand[slot] = self._demand.get(slot, 0) + entry.task.cpus
        heapq.heappush(self._queue, (entry.order(), entry.task.key))

    def _dequeue(self, key: str) -> None:
        if key in self._queued:
            self._queued.discard(key)
            entry = self._entries[key]
            self._demand[(entry.task.shape, self._demand_pool(entry))] -= entry.task.cpus

    def _demand_pool(self, entry: _Entry) -> Pool:
        """Fixed while a task waits: preemptions are only counted before it is re-queued."""
        return Pool.ON_DEMAND if self._on_demand_only(entry) else Pool.SPOT

    def _dominator(self, task: Task) -> FrontierPoint | None:
        if task.family is None or task.point is None or task.family not in self.frontiers:
            return None
        return self.frontiers[task.family].dominator(task.point)

    def _on_demand_only(self, entry: _Entry) -> bool:
        attempts = entry.task.spot_attempts
        return not entry.task.preemptible or entry.preemptions >= (
            self.spot_attempts if attempts is None else attempts)

    def _fit(self, entry: _Entry, allow_spot: bool = True) -> _Worker | None:
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

    def _idle_other(self, entry: _Entry, on_demand_only: bool) -> _Worker | None:
        """A re-run's worker: of its shape, running nothing (so that neighbours cannot slow
        it), and not the one its first run timed out on."""
        fits = [w for w in self._workers.values()
                if not w.running and not w.held and w.worker_id != entry.first_timeout_on
                and self._has_room(w, entry.task, on_demand_only)]
        return min(fits, key=lambda w: w.worker_id, default=None)

    @staticmethod
    def _has_room(worker: _Worker, task: Task, on_demand_only: bool) -> bool:
        """Whether ``worker`` is of the task's shape and has the free CPUs and memory to start
        it now (and is not Spot, for a task that must run on-demand)."""
        return worker.shape == task.shape and worker.free_cpus >= task.cpus \
            and (not worker.mem_mb or worker.free_mem_mb >= task.mem_mb) \
            and not (on_demand_only and worker.pool is Pool.SPOT)

    def _best(self, shape: Shape | None, spot: bool, cpus: int) -> _Worker | None:
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

    def _index(self, worker: _Worker) -> None:
        if worker.free_cpus > 0:
            spot = worker.pool is Pool.SPOT
            self._with_free[spot] += 1
            heapq.heappush(self._free.setdefault((worker.shape, spot, worker.free_cpus), []),
                           worker.worker_id)

    def _unindex(self, worker: _Worker) -> None:
        if worker.free_cpus > 0:  # its heap entry goes stale and is dropped when met
            self._with_free[worker.pool is Pool.SPOT] -= 1

    def _resize(self, worker: _Worker, cpus: int, mem_mb: int) -> None:
        """Change a worker's free capacity, keeping the indexes right."""
        self._unindex(worker)
        worker.free_cpus += cpus
        worker.free_mem_mb += mem_mb
        self._index(worker)

    def _release(self, entry: _Entry) -> None:
        worker = self._workers.get(entry.worker_id or "")
        key, task = entry.task.key, entry.task
        if worker is not None and key in worker.running:
            worker.running.discard(key)
            self._resize(worker, task.cpus, task.mem_mb if worker.mem_mb else 0)
            self._promote(worker)
        elif worker is not None and key in worker.held:
            worker.held.remove(key)
            worker.held_free += task.cpus
            self._resize(worker, 0, task.mem_mb if worker.mem_mb else 0)
        entry.worker_id, entry.releasing = None, False

    def _domino(self, family: str, frontier: Frontier, newest: HardnessPoint) -> list[Event]:
        """Skip queued tasks and cancel running ones that the new frontier dominates.

        Only the new timeout ``newest`` can catch anything new: every undecided task that an
        older frontier point dominates was skipped or is being cancelled already (at that
        point's timeout, or at its own submission). So only the undecided tasks of ``newest``'s
        partition are scanned, in submission order, and those it dominates get their (first)
        dominator, as a scan of every task would give.
        """
        events: list[Event] = []
        keys = self._open.get((family, newest.scope), [])
        still_open: list[str] = []
        for key in keys:
            if key in self.outcomes:
                continue
            still_open.append(key)
            entry = self._entries[key]
            point = entry.task.point
            if point is None or not newest.as_easy_as(point):
                continue
            dominator = frontier.dominator(point)
            if dominator is None:
                continue
            if key in self._queued:
                self._dequeue(key)
                self.outcomes[key] = Outcome.SKIPPED
                events.append(Skipped(key, dominator))
                still_open.pop()
            elif entry.worker_id is not None and entry.cancelling is None:
                entry.cancelling = dominator
                events.append(Cancel(key, entry.worker_id, dominator))
        self._open[(family, newest.scope)] = still_open
        return events
