"""Where a run's jobs stand on one worker, as its coordinator tells it: one record per job
(:class:`Place`), whose every move is one method of :class:`Places`; what the worker's inbox
lists (its jobs, cancels and releases) and which results the coordinator waits for are derived
from them, never kept beside them.

A job's place on a worker is: assigned (in the inbox's jobs: queued there, held or running, as
the worker decides), asked back (in its releases: held, no answer yet), being cancelled (in
its cancels; also in its jobs while the worker may not have read them), or a stray copy to kill
(a re-queued copy whose first result came from another worker: only in its cancels). The
scheduler decides those moves (``core.scheduler``); this record is how they reach the worker.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from expo_executor.protocol.records import JobSpec


@dataclass
class Place:
    """One job on one worker: its inbox entry (``job``; None: no longer listed there), whether
    the worker is asked to kill it (``cancel``) or to give it back unstarted (``release``: the
    request's number, ``core.scheduler.Release.request``; 0: not asked)."""

    job: JobSpec | None = None
    cancel: bool = False
    release: int = 0

    def empty(self) -> bool:
        return self.job is None and not self.cancel and not self.release


class Places:
    """The places of one worker's jobs, in the order they were assigned (the inbox lists its
    jobs in that order), and ``dirty``: they changed since its inbox was last written."""

    def __init__(self, jobs: Mapping[str, JobSpec] | None = None, cancel: Iterable[str] = (),
                 release: Mapping[str, int] | None = None) -> None:
        self._places: dict[str, Place] = {key: Place(job) for key, job in (jobs or {}).items()}
        for key in cancel:
            self._places.setdefault(key, Place()).cancel = True
        for key, request in (release or {}).items():  # asked back already (an adopted
            self._places.setdefault(key, Place()).release = request  # worker's last inbox)
        self.dirty = True

    # -- moves -----------------------------------------------------------------------------------
    def assign(self, key: str, job: JobSpec) -> None:
        """The scheduler put ``key`` on this worker: into its inbox's jobs."""
        self._places.setdefault(key, Place()).job = job
        self.dirty = True

    def ask_back(self, key: str, request: int) -> bool:
        """Ask a held job back (``core.scheduler.Release`` number ``request``): out of the
        jobs, into the releases. False when it is not listed here (nothing changes)."""
        place = self._places.get(key)
        if place is None or place.job is None:
            return False
        place.job, place.release = None, request
        self.dirty = True
        return True

    def cancel(self, key: str) -> None:
        """Ask the worker to kill ``key`` (the domino effect, or an adopted run's job)."""
        self._places.setdefault(key, Place()).cancel = True
        self.dirty = True

    def given_back(self, answers: Mapping[str, int]) -> list[tuple[str, int]]:
        """The worker says it gave jobs back unstarted, answering the requests of
        ``answers`` (job -> request): those whose request stands leave its releases and
        cancels (returned with it, sorted); the scheduler queues them again. An answer to
        another request (an older one, replayed by a heartbeat) is no answer to this one."""
        back = sorted((k, n) for k, n in answers.items()
                      if k in self._places and n and self._places[k].release == n)
        for key, _request in back:
            place = self._places[key]
            place.release, place.cancel = 0, False
            self._drop_if_empty(key)
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
        self.dirty = True

    def _drop_if_empty(self, key: str) -> None:
        if self._places[key].empty():
            del self._places[key]

    # -- views -----------------------------------------------------------------------------------
    def jobs(self) -> dict[str, JobSpec]:
        """The inbox's jobs: every job listed here, in assignment order."""
        return {key: p.job for key, p in self._places.items() if p.job is not None}

    def cancels(self) -> list[str]:
        return sorted(key for key, p in self._places.items() if p.cancel)

    def releases(self) -> dict[str, int]:
        """The inbox's releases: job -> its request's number."""
        return {key: p.release for key, p in sorted(self._places.items()) if p.release}

    def asked_to_cancel(self, key: str) -> bool:
        place = self._places.get(key)
        return place is not None and place.cancel

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
