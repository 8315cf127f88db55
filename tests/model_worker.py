"""The real worker agent with its job processes on paper, for the protocol's model-based test
(tests/protocol_model.py, run by tests/unit/protocol/test_protocol.py).

:class:`PaperWorker` is ``expo_executor.worker.agent.Worker`` itself: its inbox reading and
what it makes of it (``coordinator_contact``: assignments, cancels, the held jobs it gives back
and the status that says so), its starts (``job_starts._start_pending``: the held jobs in the
coordinator's order as slots free, ``core.held_jobs``; none cancelled or dominated by its own
timeouts, ``core.hardness``), its running jobs' ends (``running_jobs``: reaping, the deadline
through ``command_clock.judge``, kills of cancelled jobs, the timeouts it remembers), its
reports (``result_reports``: batching, create-only result objects, its status) and its last
words (preempted, crashed). Only what touches the machine is replaced: a job "runs" as a
:class:`PaperJob` until the test ends it (no process; ``kill_session`` must be patched to a
no-op by the test), and its log files, saved logs and session records are not written. Its
loop (``agent_loop.Worker._loop``) is not run either: the test calls the loop's steps
(:meth:`PaperWorker.tick`), in the order the loop does, when it decides the worker acts;
its clocks are set so that no step depends on time (``poll``, the report delay and the
heartbeat are the test's to trigger).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.records import JobSpec, SavedLog, StagedBytes
from expo_executor.protocol.worker_keys import worker_key
from expo_executor.worker.agent import Worker
from expo_executor.worker.running_jobs import RunningJob

NEVER = 1e12  # seconds: a clock the test never lets run out by itself


class PaperJob:
    """A job's process on paper: running until :meth:`end` says how it exited."""

    pid = -1  # never a real session (the test patches kill_session)

    def __init__(self) -> None:
        self.code: int | None = None

    def end(self, code: int) -> None:
        self.code = code

    def poll(self) -> int | None:
        return self.code

    def wait(self) -> int:
        if self.code is None:
            self.code = -9  # killed
        return self.code


class PaperWorker(Worker):
    """The real worker, its jobs on paper; ``on_start(key, worker)`` and ``on_result(result)``
    tell the test what it did."""

    def __init__(self, bucket: Bucket, name: str, slots: int, run_key: bytes,
                 on_start: Callable[[str, str], None],
                 on_result: Callable[[str, str, AttemptEnd, str | None, bool], None]) -> None:
        super().__init__(bucket, name, slots, worker_key(run_key, name),
                         Path(os.devnull), poll=NEVER, grace=NEVER, heartbeat=NEVER,
                         zygote=False, report_delay=NEVER)
        self.said_unstamped = True  # paper jobs leave no stamps: nothing to say
        self.on_start = on_start
        self.on_result = on_result

    # -- what the loop does, one step at a time ---------------------------------------------
    def tick(self) -> None:
        """One pass of the loop after its inbox read: reap, kill, start, report when due."""
        self._reap()
        self._kill_cancelled()
        self._start_pending()
        if self._report_due():
            self._send_results()

    def time_out(self, key: str) -> None:
        """Job ``key`` passes its deadline: the loop's next reap kills it (a timeout)."""
        job = self.running[key]
        job.started_mono -= (job.deadline_s or 0.0) + 1.0
        if job.deadline_s is None:
            job.deadline_s = 1.0
        self._reap()

    def stop_preempted(self) -> None:
        """The end of the loop when a preemption notice stops it: its last breath."""
        self.request_stop("preempted")
        self.stopping = True
        self._kill_all(AttemptEnd.PREEMPTED, "the VM was preempted")
        self._send_results()
        self._write_status(WorkerState.PREEMPTED)

    # -- what touches the machine, replaced -------------------------------------------------
    def _start(self, key: str, held: JobSpec) -> None:
        spec = self._opened(key, held)
        self.on_start(key, self.worker_id)
        self.running[key] = RunningJob(key, spec, PaperJob(),  # type: ignore[arg-type]
                                       time.time(), time.monotonic(), spec.deadline_s,
                                       Path(os.devnull))

    def _write_result(self, key: str, outcome: AttemptEnd, code: int | None, started: float,
                      reason: str | None, log: Path | None = None,
                      ended: float | None = None, logs: tuple[SavedLog, ...] = (),
                      command_s: float | None = None, ran: bool = True,
                      staged: StagedBytes = StagedBytes()) -> None:
        self.on_result(key, self.worker_id, outcome, reason, ran)
        super()._write_result(key, outcome, code, started, reason, None, ended, logs,
                              command_s, ran, staged)

    def _save_logs(self, job: RunningJob) -> tuple[SavedLog, ...]:
        return ()

    def _explain(self, reason: str | None, log: Path) -> str | None:
        return reason

    def _record_sessions(self) -> None:
        pass
