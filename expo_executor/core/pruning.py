"""The domino effect and the confirmation of timeouts: a trusted timeout joins its family's
frontier and skips the queued tasks and cancels the running ones it dominates; with
``confirm_timeouts``, a family's first timeouts are re-run once on another worker before they
prune; where a trusted runtime model finds the declared order wrong, its tasks are left alone
(``_disputed``). Part of :class:`~expo_executor.core.scheduler.Scheduler`, whose table it reads and
changes.
"""

from __future__ import annotations

from collections.abc import Callable

from expo_executor.core.hardness import Frontier, FrontierPoint, HardnessPoint
from expo_executor.core.records import Outcome
from expo_executor.core.tasks import Cancel, Event, Finished, Skipped, Task, TaskEntry, \
    Unconfirmed, WorkerSlots


class Pruning:
    """The scheduler's part that prunes: frontiers, the domino effect, confirmation."""

    frontiers: dict[str, Frontier]
    confirm_timeouts: bool
    _trusted: set[str]
    _confirming: set[str]
    outcomes: dict[str, Outcome]
    _entries: dict[str, TaskEntry]
    _workers: dict[str, WorkerSlots]
    _queued: set[str]
    _open: dict[tuple[str, tuple[str, ...]], list[str]]
    unconfirmed: list[Event]
    _disputed: Callable[[Task], bool]  # the model's veto (model_hooks)

    def add_timeout(self, family: str, point: HardnessPoint, label: str) -> list[Event]:
        """A timeout measured outside this run (a crashed run's job that no task of this run
        stands for): it joins the frontier, and what it dominates is skipped or cancelled."""
        frontier = self.frontiers.setdefault(family, Frontier())
        if not frontier.add(point, label):
            return []
        return self._domino(family, frontier, point)

    def _to_confirm(self, entry: TaskEntry, family: str) -> bool:
        """Does this timeout need its re-run first? Only with confirmation on, only in a
        family not trusted yet, and only once per task."""
        return self.confirm_timeouts and family not in self._trusted \
            and entry.first_timeout_on is None

    def _prune(self, entry: TaskEntry, outcome: Outcome) -> list[Event]:
        """A trusted timeout: it joins its frontier and sets off the domino effect."""
        family, point = entry.task.family, entry.task.point
        assert family is not None and point is not None
        frontier = self.frontiers.setdefault(family, Frontier())
        frontier.add(point, entry.task.label)
        consequences = self._domino(family, frontier, point)
        return [Finished(entry.task.key, outcome, harder=len(consequences),
                         first_timeout_on=entry.first_timeout_on), *consequences]

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

    def _dominator(self, task: Task) -> FrontierPoint | None:
        if task.family is None or task.point is None or task.family not in self.frontiers \
                or self._disputed(task):
            return None
        return self.frontiers[task.family].dominator(task.point)

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
            if point is None or not newest.as_easy_as(point) or self._disputed(entry.task):
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
                self._cancel_place(entry, dominator)
                events.append(Cancel(key, entry.worker_id, dominator))
        self._open[(family, newest.scope)] = still_open
        return events
