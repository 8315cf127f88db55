"""The worker agent's loop: one worker, its state, and when it does what (``expocloud-worker``,
``worker/agent.py``, runs it on each VM or local process standing in for one).

It pulls its assignments from one bucket object (its inbox), runs each job in its own session
with its deadline, kills what the coordinator cancels, and reports outcomes as create-only
result objects of its own, each holding one or more results (``Worker._report_due`` says
when). It listens on no port. When the
coordinator has been silent for longer than the grace period (no new inbox, no new pulse with
a tag for this worker) it kills its jobs and shuts down: a dead man's switch, so that a crashed
coordinator does not leave VMs billing. The coordinator rewrites an inbox only when it
changes; its pulse, one object for the whole fleet, says it is alive twice a heartbeat, and a
worker with no new inbox for that long reads it.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from pathlib import Path

from expo_executor.core.hardness import Frontier
from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import WORKER_KEY_ENV
from expo_executor.protocol.records import JobSpec, WorkerResult
from expo_executor.worker.coordinator_contact import CoordinatorContact
from expo_executor.worker.forked import Zygote, zygote_wanted
from expo_executor.worker.job_starts import JobStarts
from expo_executor.processes.private_files import private_dir
from expo_executor.processes.sessions import vm_mark
from expo_executor.worker.pulse_reader import PulseReader
from expo_executor.worker.result_reports import ResultReports
from expo_executor.worker.running_jobs import RunningJob, RunningJobs
from expo_executor.worker.wakeup import Wakeup

FAST_WINDOW = 10  # polls at the fast rate after each change, before slowing down
REAP_TICK = 0.1  # seconds between looks at running jobs (free: no request)
SUPPLIED_SLOWDOWN = 2  # a worker holding a next job for every slot reads this much slower
# A new worker's first assignment is in the inbox of the round that grants its key, or of a
# round after its READY status (the coordinator rounds every 0.25 s while its first VMs
# boot): read faster than that until it comes, so that it is found within 0.1 s
FIRST_ASSIGNMENT_POLL_S = 0.1
# A job's deadline times its command (worker/command_clock.py); its start-up and file staging
# (Snakemake's imports and DAG, inputs fetched, outputs stored) have this allowance of their
# own, so that a hung start-up still ends: as a failure that says so, never a timeout.
# EXPOCLOUD_STAGING_ALLOWANCE_S sets it for a worker (tests use a small one).
STAGING_ALLOWANCE_S = 1800.0
ALLOWANCE_ENV = "EXPOCLOUD_STAGING_ALLOWANCE_S"


def zygote_for(scratch: Path, worker_id: str) -> Zygote | None:
    """The worker's zygote (None where forking is not wanted), not started yet. Its own
    environment has no worker key and carries the VM's mark, which its jobs' /proc environ
    shows. A VM's agent starts it before it waits for its key, so that Snakemake's imports
    overlap that wait too (agent.py)."""
    if not zygote_wanted():
        return None
    env = {k: v for k, v in os.environ.items() if k != WORKER_KEY_ENV}
    name, _, value = vm_mark(scratch).partition("=")
    env[name] = value
    return Zygote(env, f"worker {worker_id}")


class Worker(CoordinatorContact, JobStarts, RunningJobs, ResultReports):
    """One worker agent; ``run`` returns the process exit code. Its parts, one module each:
    ``coordinator_contact`` (the inbox; the pulse: ``pulse_reader``), ``job_starts``,
    ``running_jobs``, ``result_reports``; the state they share is set up here."""

    def __init__(self, bucket: Bucket, worker_id: str, slots: int, key: bytes,
                 scratch: Path, poll: float = 0.2, grace: float = 60.0,
                 heartbeat: float = 10.0, slow_poll: float | None = None,
                 allowance: float = STAGING_ALLOWANCE_S, zygote: bool | Zygote = True,
                 report_delay: float | None = None, pulse: float | None = None) -> None:
        self.bucket = bucket
        self.worker_id = worker_id
        self.slots = slots
        self.key = key  # this worker's own (worker_keys): never the run key
        self.scratch = scratch
        self.poll = poll
        # Every inbox read is a billed storage operation: read often only while an answer is
        # likely (just after a change), slowly while the slots are busy or nothing comes.
        self.slow_poll = max(poll, slow_poll if slow_poll is not None else poll)
        self.last_change = time.monotonic()  # of the last new inbox or report sent
        self.last_inbox = 0.0  # when a new inbox was last read (monotonic clock)
        self.last_read = 0.0  # when the inbox was last read, new or not
        self.inbox_readable = True  # the last read of the inbox worked
        self.last_report = 0.0  # when a result was last handed to the bucket
        self.next_read = 0.0  # when the inbox is read next (monotonic clock)
        self.grace = grace
        self.heartbeat = heartbeat
        # the coordinator's heartbeat (its pulse interval): with no new inbox for this long,
        # the pulse is read, at most once an interval; None: the inbox alone is contact
        self.pulses = PulseReader(bucket, worker_id, key, pulse)
        self.running: dict[str, RunningJob] = {}
        self.seen: set[str] = set()  # job keys ever started here: never run one twice
        self.seq = -1
        self.last_contact = time.monotonic()
        self.last_status = 0.0
        self.stop_reason: str | None = None
        self.inbox_generation: int | None = None
        self.pending: dict[str, JobSpec] = {}  # held jobs as the inbox has them (sealed)
        self.cancel: set[str] = set()
        # held jobs given back unstarted (the inbox's release): job -> the request answered
        self.released: dict[str, int] = {}
        # results not in the bucket yet, each with when it was added (monotonic clock): held
        # back to go several in one object (_report_due), or not taken by the bucket (its
        # retries ran out; sent again every poll, never dropped, so that a storage outage
        # delays a report instead of losing it)
        self.unsent: dict[str, tuple[WorkerResult, float]] = {}
        # a solved result waits at most this long for others to share its object
        self.report_delay = heartbeat if report_delay is None else report_delay
        self.retry_at = 0.0  # after a failed report, the next try not before (monotonic)
        self.stopping = False  # the last reports are gathered, then sent in one object
        # job -> its spec, opened once (job_starts.py), until its result is written: the
        # secret values (its redact) its logs and report must not hold
        self.specs: dict[str, JobSpec] = {}
        self.allowance = allowance  # seconds of start-up and staging a job with a deadline gets
        # this worker's own timeouts that prune, one frontier per family (core.hardness)
        self.timeouts: dict[str, Frontier] = {}
        self.said_unstamped = False  # the fallback to timing whole jobs is said once
        # Snakemake jobs are forked from a process that imported Snakemake once; its own
        # environment carries the VM's mark, which its jobs' /proc environ shows
        self.zygote = zygote if isinstance(zygote, Zygote) else \
            zygote_for(scratch, worker_id) if zygote else None
        self.wakeup = Wakeup()

    def run(self) -> int:
        if self.zygote is not None:
            self.zygote.start()  # its imports overlap the wait for the first assignment
        self.wakeup.install()  # a job's end wakes the loop: its slot's next job starts at once
        try:
            return self._loop()
        finally:
            self.wakeup.close()
            if self.zygote is not None:
                self.zygote.close()

    def _loop(self) -> int:
        # jobs' logs, staged specs and directories: only this user reads them (0700)
        private_dir(self.scratch / "jobs")
        private_dir(self.scratch / "work")
        self._write_status(WorkerState.READY)
        while self.stop_reason is None:
            # Reading the inbox is a billed request, looking at our own processes is free:
            # jobs are reaped every tick, the inbox is read at the (adaptive) poll interval.
            if time.monotonic() >= self.next_read:
                self._read_inbox_now()
                self.next_read = time.monotonic() + self._inbox_interval()
            if self.pulses.due(time.monotonic(), self.last_contact):
                self._storage("read the pulse", self._read_pulse)
            self._reap()
            self._kill_cancelled()
            self._start_pending()
            if time.monotonic() >= self.retry_at and self._report_due():
                self._send_results()
            if time.monotonic() - self.last_contact > self.grace:
                self.stop_reason = f"coordinator silent for more than {self.grace:.0f} s"
            elif time.monotonic() - self.last_status >= self.heartbeat:
                self._write_status(WorkerState.READY)
            if self.stop_reason is None:
                starting = self._zygote_starting() if self.pending else None
                self.wakeup.sleep(self._sleep_time(), () if starting is None else (starting,))
        self.stopping = True
        if self.stop_reason == "preempted":
            self._kill_all(AttemptEnd.PREEMPTED, "the VM was preempted")
        else:
            self._kill_all(AttemptEnd.CANCELLED, f"worker stopping: {self.stop_reason}")
        self._send_results()  # the last reports, with the solved ones that waited
        self._write_status(WorkerState.PREEMPTED if self.stop_reason == "preempted"
                           else WorkerState.STOPPED)
        if self.unsent:
            print(f"worker {self.worker_id}: stopping with {len(self.unsent)} result(s) the "
                  "bucket did not take; the coordinator re-runs those jobs",
                  file=sys.stderr, flush=True)
        return 0 if self.stop_reason in ("terminated", "preempted") else 3

    def request_stop(self, reason: str) -> None:
        self.stop_reason = reason

    def crashed(self, exc: BaseException) -> None:
        """Our own machinery failed (a full disk while writing a job's spec, a bug): the jobs
        did nothing wrong. Every job held here, running or not started yet, is reported LOST,
        so the coordinator re-queues them (and lets this VM go) rather than failing them."""
        reason = f"worker {self.worker_id} crashed: {type(exc).__name__}: {exc}"
        print(f"{reason}; its jobs are reported lost, to run again elsewhere", file=sys.stderr,
              flush=True)
        not_started = sorted(set(self.pending) - set(self.running) - set(self.unsent))
        self.stopping = True
        self._kill_all(AttemptEnd.LOST, reason)
        for key in not_started:  # the one whose start failed among them
            self._write_result(key, AttemptEnd.LOST, None, time.time(), reason)
        self._send_results()  # with the solved results that waited for company
        self._write_status(WorkerState.STOPPED)

    def _storage(self, what: str, call: Callable[[], object]) -> bool:
        """One bucket call from the loop. The bucket layer has retried transient errors with
        backoff already; what still fails (an outage longer than those retries, a refusal) is
        said in one line and tried again next time, not a crash that kills the running jobs:
        the grace period bounds how long a worker goes on without its coordinator."""
        try:
            call()
            return True
        except Exception as exc:  # noqa: BLE001 - see above
            print(f"worker {self.worker_id}: cannot {what} (trying again later): "
                  f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            return False

    def _inbox_interval(self) -> float:
        """Fast only while an assignment is likely: the worker reported since its last new
        inbox (the coordinator answers a report with the next job, when there is one), or a
        slot is free with nothing held for it, and that change is recent; fastest before the
        worker's first job, which is on the run's way to its first result. Otherwise slow: the
        slots are busy, each with its next job held or nothing asked for, so only a
        cancellation could come (every read is a billed request, paid per worker)."""
        quiet = time.monotonic() - self.last_change > FAST_WINDOW * self.poll
        used = sum(r.spec.cpus for r in self.running.values())
        idle = used < self.slots and not self.pending
        asked = self.last_report > self.last_inbox
        if not self.seen and not self.pending and not quiet:  # waiting for its first job
            return min(self.poll, FIRST_ASSIGNMENT_POLL_S)
        if (asked or idle) and not quiet:
            return self.poll
        # every slot busy and holding its next job: only a cancel can come, and the held jobs
        # its own timeouts dominate it never starts (_dominated)
        held = sum(job.cpus for job in self.pending.values())
        supplied = used >= self.slots and held >= self.slots
        return self.slow_poll * SUPPLIED_SLOWDOWN if supplied else self.slow_poll

    def _sleep_time(self) -> float:
        now = time.monotonic()
        waits = [self.next_read - now]
        pulse_due = self.pulses.next_due(self.last_contact)
        if pulse_due is not None:
            waits.append(pulse_due - now)
        if self.running:
            waits.append(min(self.poll, REAP_TICK))  # notice a finished job at once
        for job in self.running.values():
            if job.deadline_s is not None:
                waits.append(job.started_mono + job.deadline_s - now)
        if self.unsent:  # due: tried again after a failed write; else waiting for company
            oldest = min(since for _, since in self.unsent.values())
            waits.append((self.retry_at if self._report_due() else
                          oldest + self.report_delay) - now)
        return max(0.01, min(waits))
