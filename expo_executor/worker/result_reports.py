"""What the worker tells its coordinator: its results, several in one create-only object when
they can wait (``_report_due``: prefetch's refill rule, ``core.held_jobs``, which the
coordinator decides with), never dropped when the bucket refuses them; and its status.

A mixin of :class:`~expo_executor.worker.agent_loop.Worker`, whose ``__init__`` holds the
state it reads and sets: ``unsent``, ``report_delay``, ``retry_at``, ``last_report``,
``stopping``, ``specs``, ``pending``, ``released``, ``last_status``.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from expo_executor.core.held_jobs import runs_low
from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket, PreconditionFailed
from expo_executor.protocol.keys import result_key, status_key
from expo_executor.protocol.records import (ResultBatch, SavedLog, StagedBytes, WorkerResult,
                                            WorkerStatus)
from expo_executor.worker.failure_reason import log_tail


# Results per object: a batch stops growing at this many bytes of results (half the message
# limit: the rest is the envelope's, and one result more)
BATCH_BYTES = messages.MAX_BYTES // 2


class ResultReports:
    """Sending results and status (see the module)."""

    def _write_result(self, key: str, outcome: AttemptEnd, code: int | None, started: float,
                      reason: str | None, log: Path | None = None,
                      ended: float | None = None, logs: tuple[SavedLog, ...] = (),
                      command_s: float | None = None, ran: bool = True,
                      staged: StagedBytes = StagedBytes()) -> None:
        """A job's result joins ``unsent``: one that is not SOLVED goes at once (with every
        result waiting), a solved one when :meth:`_report_due` says so; while the worker
        stops, all go together at its end."""
        spec = self.specs.pop(key, None)  # its secrets are blanked out of its report
        secrets = list(spec.redact) if spec is not None else []
        # blanked before it is cut: a secret the cut ran through would keep its end
        tail = log_tail(log, secrets) if log and outcome is not AttemptEnd.SOLVED else ""
        result = WorkerResult(key, self.worker_id, outcome, code, started, ended or time.time(),
                              messages.redacted(reason, secrets), tail, logs, command_s,
                              ran=ran, staged=staged)
        self.unsent[key] = (result, time.monotonic())
        # no status write: the coordinator's listing of the workers' prefix shows the result
        if outcome is not AttemptEnd.SOLVED and not self.stopping:
            self._send_results()

    def _report_due(self) -> bool:
        """Whether the results waiting go now, in one object: one is not SOLVED (a timeout
        prunes, a failure or cancel frees its job: the coordinator acts at once); the worker
        holds at most one job per slot not started yet, CPU for CPU (it runs low: the
        coordinator refills it now, on a report; with prefetch 0 or 1 this is after every job,
        with more, after several: ``core.held_jobs``, the rule of Scheduler._wants_refill); or the oldest has waited
        ``report_delay`` s (a worker with long jobs). Every write is a billed class A
        operation: at 1,000 workers with short jobs, one per job is most of the storage bill."""
        if not self.unsent:
            return False
        if any(result.end is not AttemptEnd.SOLVED for result, _ in self.unsent.values()):
            return True
        if runs_low(sum(job.cpus for job in self.pending.values()), self.slots):
            return True
        oldest = min(since for _, since in self.unsent.values())
        return time.monotonic() - oldest >= self.report_delay

    def _send_results(self) -> None:
        """Write every unsent result, oldest first, as few objects as the size limit allows;
        at the first failure keep them all (tried again a poll later), never drop one."""
        for _ in range(len(self.unsent) + 1):  # each round sends one result or more
            if not self.unsent:
                return
            batch = self._next_batch()
            if not self._storage(f"report the result of {batch.first}",
                                 lambda: self._write_batch(batch)):
                self.retry_at = time.monotonic() + self.poll
                return
            self.last_report = self.last_change = time.monotonic()  # an answer is likely now
            self.next_read = min(self.next_read, self.last_report + self.poll)

    def _next_batch(self) -> ResultBatch:
        """The oldest unsent results, up to ``BATCH_BYTES``, with this worker's storage
        operations so far (this write included) for the run's request budget."""
        ops = ops_after_write(self.bucket)
        results: list[WorkerResult] = []
        size = 0
        for result, _ in self.unsent.values():
            size += len(json.dumps(result.to_wire()))
            if results and size > BATCH_BYTES:
                break
            results.append(replace(result, ops=ops))
        return ResultBatch(self.worker_id, tuple(results))

    def _write_batch(self, batch: ResultBatch) -> None:
        """One object, named for the batch's first job and created only if there is none (a
        single writer: this worker); its results leave ``unsent`` once it is written."""
        try:
            self.bucket.write(result_key(batch.first, self.worker_id), batch.encode(self.key),
                              if_generation_match=0)
            sent = {result.key for result in batch.results}
        except PreconditionFailed:
            sent = self._reported_already(batch)
        for key in sent:
            self.unsent.pop(key, None)

    def _reported_already(self, batch: ResultBatch) -> set[str]:
        """The object of the batch's name exists: a write of ours whose answer was lost (its
        results are there: those are sent; the others go in the next object), or a restarted
        agent's report (the first report stands, as for any result)."""
        blob = self.bucket.read(result_key(batch.first, self.worker_id))
        if blob is None:
            return set()  # taken and deleted since: the next write creates it afresh
        try:
            there = {result.key for result in ResultBatch.decode(blob.data, self.key).results}
        except messages.MessageError:
            there = set()
        return ({result.key for result in batch.results} & there) or {batch.first}

    def _write_status(self, state: WorkerState) -> None:
        # ops: this worker's storage operations so far (this write included), for the run's
        # request budget
        status = WorkerStatus(self.worker_id, self.seq, time.time(), sorted(self.running),
                              self.slots, state, ops_after_write(self.bucket),
                              dict(sorted(self.released.items())))
        # signed like assignments: a bucket writer can delete a report but not forge one
        written = self._storage("write its status", lambda: self.bucket.write(
            status_key(self.worker_id), status.encode(self.key)))
        # a failed write is tried again after a slow poll, not at the next heartbeat (a long
        # wait on GCE: the coordinator would learn late that this worker is ready)
        self.last_status = time.monotonic() - (0.0 if written else
                                               max(0.0, self.heartbeat - self.slow_poll))


def ops_after_write(bucket: Bucket) -> dict[str, int]:
    ops = dict(getattr(bucket, "ops", {}))
    ops["A"] = ops.get("A", 0) + 1
    return ops
