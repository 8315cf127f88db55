"""In-process rigs shared by tests of every tier: the run key, a scripted engine, and the
workers' side of the bucket written through the protocol's own records (``WorkerStatus``,
``WorkerResult``, ``Inbox``), so a rig's message is what a real worker or coordinator would
write, signed with the worker's own key. A test whose point is a malformed, forged or hostile
message builds that message itself.

The coordinator's round-by-round rig (tests/coordinator_rig.py) is built on these; the helpers
for tests that run real processes are in tests/helpers.py.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.core.scheduler import Pool
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import inbox_key, result_key, status_key
from expo_executor.protocol.records import Inbox, InboxJob, WorkerResult, WorkerStatus
from expo_executor.protocol.worker_keys import worker_key

KEY = b"k" * 32  # the run's key; each worker signs with worker_key(KEY, its name)


class ScriptedEngine:
    """VMs that exist on paper: created RUNNING, TERMINATED when the test says they died."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.deleted: list[str] = []

    def create(self, names: list[str], pool: Pool, slots: int) -> None:
        self.status.update({name: "RUNNING" for name in names})

    def delete(self, name: str) -> None:
        self.deleted.append(name)
        self.status.pop(name, None)

    def list(self) -> list[Instance]:
        return [Instance(name, Pool.LOCAL, 1, status) for name, status in self.status.items()]

    def failures(self) -> list[CreateFailed]:
        return []

    def preempted(self) -> set[str]:
        return set()

    def close(self) -> None:
        pass


def write_status(bucket: Bucket, worker: str, running: Iterable[str] = (), *, slots: int = 1,
                 released: Iterable[str] = (), seq_seen: int = 0,
                 state: WorkerState = WorkerState.READY, key: bytes = KEY) -> WorkerStatus:
    """``worker``'s status, as its heartbeat writes it: ``state``, running ``running``, having
    given ``released`` back; signed with ``worker``'s key under ``key``."""
    status = WorkerStatus(worker, seq_seen, time.time(), list(running), slots, state,
                          released=list(released))
    bucket.write(status_key(worker), status.encode(worker_key(key, worker)))
    return status


def attempt(job: str, worker: str, outcome: str, started: float, ended: float, *,
            reason: str | None = None, ran: bool = True) -> WorkerResult:
    """How ``job``'s attempt on ``worker`` ended; a solved one exited 0."""
    end = AttemptEnd(outcome)
    return WorkerResult(job, worker, end, 0 if end is AttemptEnd.SOLVED else None, started,
                        ended, reason, ran=ran)


def write_result(bucket: Bucket, result: WorkerResult, *, key: bytes = KEY) -> None:
    """``result`` under its job's result key, signed with its worker's key under ``key``
    (another run's key: a forged result), written once, as a worker writes it."""
    bucket.write(result_key(result.key, result.worker),
                 result.encode(worker_key(key, result.worker)), if_generation_match=0)


def write_inbox(bucket: Bucket, worker: str, seq: int, jobs: dict[str, InboxJob], *,
                key: bytes, cancel: Iterable[str] = (), release: Iterable[str] = ()) -> Inbox:
    """The coordinator's inbox for ``worker``, every job sealed and the whole signed with
    ``key``: the worker's own, the one it was started with (no default, so that a rig's worker
    and its inbox cannot silently disagree)."""
    inbox = Inbox(seq, worker, dict(jobs), list(cancel), list(release))
    bucket.write(inbox_key(worker), inbox.encode(key))
    return inbox
