"""Where a run's jobs stand on one worker, as its coordinator tells it: one record per job
(:class:`Place`), whose every move is one method of :class:`Places`; what the worker's inbox
lists (its jobs, cancels and releases) and which results the coordinator waits for are derived
from them and from the scheduler's record of each task (``core.tasks.Place``), never kept
beside them.

A job's place on a worker is: assigned (in the inbox's jobs: queued there, held or running, as
the worker decides), asked back (in its releases: held, no answer yet), being cancelled (in
its cancels; also in its jobs while the worker may not have read them), or a stray copy to kill
(a re-queued copy whose first result came from another worker: only in its cancels). The
scheduler decides those moves (``core.scheduler``); this record is how they reach the worker.

What the scheduler knows is read from it (``Scheduler.place_on`` for this worker, wired by
``VmFleet.track``): a job with a place here is in the releases while the scheduler's Place of
it here holds a request (an answer counts only if it names that request), and in the cancels
while it is CANCELLING here. What the scheduler does not model stays here, named for it:

- ``Place.job``: the payload, each listed job's ``JobSpec`` (the scheduler knows a task, not
  what its worker runs); and when it leaves the list: a finished or withdrawn job is listed
  until the next write, as every write is billed; and that the job has a place here at all
  (its result is read until the worker reports it, whatever the scheduler decided);
- ``Place.cancel``, a cancel of the coordinator's own: a stray copy to kill (not the
  scheduler's task on this worker), an adopted crashed run's job (``coordinator.adopt``: no
  scheduler task until claimed), and a cancel the scheduler asked for after the job's result
  was read here (a cancelled result waits for the round before the scheduler hears of it), kept
  listed as the scheduler decides the task;
- an adopted worker's releases: the old coordinator's requests (its last inbox), which this
  scheduler never made (``Places(release=...)``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass

from expo_executor.core.scheduler import Place as TaskPlace, Stage
from expo_executor.protocol.records import JobSpec

PlaceOn = Callable[[str], TaskPlace]
"""The scheduler's Place of a job on this worker (a QUEUED one: not placed here)."""


def _unplaced(key: str) -> TaskPlace:
    return TaskPlace()


@dataclass
class Place:
    """One job on one worker, as far as the scheduler does not know it (see the module): its
    inbox entry (``job``; None: no longer listed there) and a cancel of the coordinator's own
    (``cancel``). Whether it is asked back or cancelled by the scheduler is the scheduler's
    (:class:`Places`' ``placed``)."""

    job: JobSpec | None = None
    cancel: bool = False


class Places:
    """The places of one worker's jobs, in the order they were assigned (the inbox lists its
    jobs in that order), and ``dirty``: they changed since its inbox was last written.
    ``placed``: the scheduler's Place of a job here (see the module; set by
    ``VmFleet.track``); ``release``: an adopted worker's, the old coordinator's requests."""

    def __init__(self, jobs: Mapping[str, JobSpec] | None = None, cancel: Iterable[str] = (),
                 release: Mapping[str, int] | None = None) -> None:
        self._places: dict[str, Place] = {key: Place(job) for key, job in (jobs or {}).items()}
        for key in cancel:
            self._places.setdefault(key, Place()).cancel = True
        # asked back already by the dead coordinator (an adopted worker's last inbox)
        self._adopted: dict[str, int] = dict(release or {})
        for key in self._adopted:
            self._places.setdefault(key, Place())
        self.placed: PlaceOn = _unplaced
        self.dirty = True

    # -- moves -----------------------------------------------------------------------------------
    def assign(self, key: str, job: JobSpec) -> None:
        """The scheduler put ``key`` on this worker: into its inbox's jobs."""
        self._places.setdefault(key, Place()).job = job
        self.dirty = True

    def ask_back(self, key: str) -> bool:
        """The scheduler asks a held job back (``core.scheduler.Release``): out of the jobs;
        its release is listed from the scheduler's record. False when it is not listed here
        (nothing changes)."""
        place = self._places.get(key)
        if place is None or place.job is None:
            return False
        place.job = None
        self.dirty = True
        return True

    def cancel(self, key: str) -> None:
        """Ask the worker to kill ``key``, a cancel of the coordinator's own (an adopted
        run's job)."""
        self._places.setdefault(key, Place()).cancel = True
        self.dirty = True

    def scheduler_cancels(self, key: str) -> None:
        """The scheduler cancels ``key`` here (``core.scheduler.Cancel``, the domino effect):
        listed from its Place while the job has a place here; one whose result was read
        here already gets a cancel of its own (see the module)."""
        if key not in self._places:
            self._places[key] = Place(cancel=True)
        self.dirty = True

    def given_back(self, answers: Mapping[str, int]) -> list[tuple[str, int]]:
        """The worker says it gave jobs back unstarted, answering the requests of
        ``answers`` (job -> request): those whose request stands (the scheduler's, asked
        here) leave its cancels and every list (returned with it, sorted); the caller tells
        the scheduler, which queues them again. An answer to another request (an older one,
        replayed by a heartbeat) is no answer to this one."""
        back = sorted((k, n) for k, n in answers.items()
                      if k in self._places and n and self._asked(k) == n)
        for key, _request in back:
            self._adopted.pop(key, None)
            place = self._places[key]
            place.cancel = False
            if place.job is None:
                del self._places[key]
            self.dirty = True
        return back

    def ended(self, key: str, here: bool) -> None:
        """An attempt of ``key`` ended, on this worker (``here``: it leaves every list, and
        the next write, whatever causes it, says so: every write is billed) or on another
        (a copy listed here is killed: the first result stands)."""
        place = self._places.get(key)
        if place is None:
            return
        if here:
            del self._places[key]
            self._adopted.pop(key, None)
        elif place.job is not None:
            place.job, place.cancel = None, True
            self.dirty = True

    def withdraw(self, key: str) -> None:
        """The run took ``key`` back (the budget): out of the jobs, with the next write."""
        place = self._places.get(key)
        if place is not None:
            place.job = None
            self._drop_if_empty(key)

    def forget(self, key: str) -> None:
        """An adopted worker's result of ``key``: nothing more to say of it."""
        self._places.pop(key, None)
        self._adopted.pop(key, None)
        self.dirty = True

    def _asked(self, key: str) -> int:
        return self._adopted.get(key) or self.placed(key).request

    def _cancelling(self, key: str) -> bool:
        return self.placed(key).stage is Stage.CANCELLING

    def _drop_if_empty(self, key: str) -> None:
        place = self._places[key]
        if place.job is None and not place.cancel and not self._asked(key) \
                and not self._cancelling(key):
            del self._places[key]

    # -- views -----------------------------------------------------------------------------------
    def jobs(self) -> dict[str, JobSpec]:
        """The inbox's jobs: every job listed here, in assignment order."""
        return {key: p.job for key, p in self._places.items() if p.job is not None}

    def cancels(self) -> list[str]:
        """The inbox's cancels: its own, and the scheduler's (see the module)."""
        return sorted(key for key, p in self._places.items()
                      if p.cancel or self._cancelling(key))

    def releases(self) -> dict[str, int]:
        """The inbox's releases: job -> its request's number, the scheduler's (see the module)
        for each job with a place here."""
        asked = {key: self._asked(key) for key in sorted(self._places)}
        return {key: request for key, request in asked.items() if request}

    def asked_to_cancel(self, key: str) -> bool:
        place = self._places.get(key)
        return place is not None and (place.cancel or self._cancelling(key))

    def has_jobs(self) -> bool:
        """Any job listed here (the worker has work, or will)."""
        return any(p.job is not None for p in self._places.values())

    def __iter__(self) -> Iterator[str]:
        """Every job with a place here: those whose results the coordinator reads."""
        return iter(list(self._places))

    def __len__(self) -> int:
        return len(self._places)

    def __contains__(self, key: object) -> bool:
        return key in self._places
