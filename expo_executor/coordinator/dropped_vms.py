"""The bucket objects of VMs the run no longer has: read what matters, then delete them all.

A VM that ends (preempted, lost, deleted, never ready) leaves ``workers/<vm>/``: its status,
its key request and key, result objects, and its worker may write more before its VM is gone
(a last status, a result that ended while the coordinator dropped it). The coordinator lists
``workers/`` every round, so each such object would lengthen every later listing: with Spot
churn the listing would grow with every VM the run ever had, not with the fleet.

So every round, with the objects of that round's listing, each VM the coordinator no longer
keeps loses all of its objects. A result object is read first (never deleted unread): its
results came after their VM was dropped, when its jobs had gone back to the queue (or it held
none), so they are not used, and the log says so, one line each, rather than lose them
silently. This runs only when every result handed out has its record on disk (as
``Channel.delete_taken``), since a result object is what recovery reads after a crash.

A delete that fails (storage down past its retries, gcp/retry.py) is logged (once while deletes
keep failing) and never fails the round: the object shows in the next listing and is deleted
then.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Callable

from expo_executor.coordinator.channel import Channel
from expo_executor.protocol.keys import WORKERS_PREFIX, parse_result_key
from expo_executor.protocol.records import WorkerResult


def worker_of(key: str) -> str | None:
    """The worker whose prefix ``key`` is under (``workers/<worker>/...``); None otherwise."""
    worker, sep, _ = key.removeprefix(WORKERS_PREFIX).partition("/")
    return worker if key.startswith(WORKERS_PREFIX) and sep and worker else None


class DroppedVms:
    """Deletes the objects of the VMs a run dropped, reading their results first."""

    def __init__(self, channel: Channel, log: Callable[[str], None]) -> None:
        self.channel = channel
        self.log = log
        self.deleted = 0  # objects deleted so far
        self._failing = False  # the last sweep's deletes failed (and that was said)

    def sweep(self, kept: Iterable[str]) -> None:
        """Delete every object of the last listing under a VM not in ``kept`` (the VMs the
        coordinator has), its result objects read first; a VM whose result read failed keeps
        its objects until the next sweep."""
        kept = set(kept)
        dropped: dict[str, list[str]] = {}
        for key in self.channel.listing:
            worker = worker_of(key)
            if worker is not None and worker not in kept:
                dropped.setdefault(worker, []).append(key)
        results = {pair for keys in dropped.values() for key in keys
                   if (pair := parse_result_key(key)) is not None}
        if self.channel.read_objects(results) is not None:
            unread = {pair[1] for pair in results if not self.channel.was_read(pair)}
            dropped = {w: keys for w, keys in dropped.items() if w not in unread}
        for worker in sorted(dropped):
            for result in self.channel.forget(worker):
                self._say_late(result)
        keys = sorted(key for keys in dropped.values() for key in keys)
        deletes = self.channel.each(self.channel.bucket.delete, keys)
        failed = [key for key, (_, error) in zip(keys, deletes) if error is not None]
        self.deleted += len(keys) - len(failed)
        error = deletes.first_error()
        if error is not None and not self._failing:  # said once a streak, not every round
            self.log(f"expocloud: could not delete {len(failed)} objects of dropped VMs yet "
                     f"(first: {failed[0]}: {type(error).__name__}: {error}); tried again "
                     "every round")
        self._failing = error is not None

    def _say_late(self, result: WorkerResult) -> None:
        self.log(f"expocloud: worker {result.worker} reported job {result.key} "
                 f"({result.end.value}) after it was dropped: the job had gone back to the "
                 "queue, so this result is not used (read, then deleted)")
