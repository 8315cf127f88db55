"""The jobs running on this worker: each looked at every tick (free: no request), killed past
its deadline or its start-up allowance (``worker/command_clock.py``), when cancelled, or when
the worker stops, and finished into a result with its logs saved when it failed.

A mixin of :class:`~expo_executor.worker.agent_loop.Worker`, whose ``__init__`` holds the
state it reads and sets: ``running``, ``cancel``, ``timeouts`` (this worker's own
timeouts that prune, one ``core.hardness.Frontier`` per family), ``allowance``,
``said_unstamped``, ``last_change``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from expo_executor.core.hardness import Frontier
from expo_executor.core.records import AttemptEnd
from expo_executor.protocol.records import JobSpec, SavedLog, StagedBytes
from expo_executor.worker.command_clock import Stamps, judge, read_stamps
from expo_executor.worker.failure_reason import DISK_FULL, disk_full, explain_failure, log_tail
from expo_executor.worker.forked import ForkedJob
from expo_executor.processes.sessions import kill_session
from expo_executor.worker.saved_logs import save_logs


# Attempts whose logs are saved to the bucket: the job's own failures, not a cancellation or
# a preemption (the job runs again, or was not wanted)
SAVE_LOGS_ON = (AttemptEnd.FAILED, AttemptEnd.TIMEOUT)


@dataclass
class RunningJob:
    """A job running on this worker: its opened spec (its CPUs, its own log files, its
    secrets: no field of it copied here), its process, its clocks, and where this worker runs
    it (which the spec cannot say: a staged job's limit and directory are the worker's)."""

    key: str
    spec: JobSpec  # opened (job_starts.py), as its front end built it
    proc: subprocess.Popen | ForkedJob  # ForkedJob: forked by the zygote, our child too
    started: float  # wall clock, for reports
    started_mono: float
    # the limit this worker enforces: the spec's deadline, or a staged job's own limit with
    # slack (it kills its command itself, job_starts.STAGED_SLACK_S)
    deadline_s: float | None
    log: Path
    verdict: Path | None = None  # a staged job's own account of how it ended
    # the directory made for it on this disk (a staged job's: its spec, verdict and files),
    # removed after it
    workdir: Path | None = None
    cwd: str | None = None  # where it runs: its log files' paths are relative to it
    stamps: Path | None = None  # where it stamps its command's start and end
    # (size and mtime of the stamps file when last parsed, what it said): see Worker._stamps
    stamps_read: tuple[tuple[int, int] | None, Stamps] | None = None


class RunningJobs:
    """Watching, killing and finishing running jobs (see the module)."""

    def _reap(self) -> None:
        now = time.monotonic()
        for job in list(self.running.values()):
            code = job.proc.poll()
            if code is not None:
                outcome = AttemptEnd.SOLVED if code == 0 else AttemptEnd.FAILED
                reason = None if code == 0 else f"exit code {code}"
                if job.verdict is not None:
                    outcome, code, reason = _read_verdict(job.verdict, outcome, code, reason)
                if outcome is AttemptEnd.FAILED:
                    reason = self._explain(reason, job)
                self._finish(job, outcome, code, reason)
            elif job.deadline_s is not None:
                self._enforce(job, now)

    def _enforce(self, job: RunningJob, now: float) -> None:
        """Kill a job past its deadline (a timeout: the command took too long) or past its
        start-up and staging allowance (a failure that says so: the machine or the storage
        was slow, which says nothing of the problem's hardness)."""
        overrun = judge(self._stamps(job), job.started_mono, now, job.deadline_s,
                        self.allowance)
        if overrun is None:
            return
        # the job ran until now; killing its session (up to a grace period for it to exit) is
        # our housekeeping, not its runtime
        killed_at = time.time()
        kill_session(job.proc.pid)
        job.proc.wait()
        self._finish(job, AttemptEnd.TIMEOUT if overrun.timeout else AttemptEnd.FAILED, None,
                     overrun.reason, killed_at)

    @staticmethod
    def _stamps(job: RunningJob) -> Stamps:
        """The job's stamps, parsed again only when its file changed: a running job's deadline
        is looked at every ``REAP_TICK``, its command's start and end are a few lines."""
        if job.stamps is None:
            return Stamps()
        try:
            info = job.stamps.stat()
            seen = (info.st_size, info.st_mtime_ns)
        except OSError:
            seen = None
        if job.stamps_read is None or job.stamps_read[0] != seen:
            job.stamps_read = (seen, read_stamps(job.stamps))
        return job.stamps_read[1]

    def _command_s(self, job: RunningJob) -> float | None:
        """Seconds its command ran, from its stamps; None when it left none (said once, for a
        job with a deadline: that deadline timed the whole job)."""
        stamps = self._stamps(job)
        if stamps.hooked:
            return round(stamps.command_s(time.monotonic()), 3)
        if job.deadline_s is not None:
            self._say_unstamped(job.key, stamps.why)
        return None

    def _say_unstamped(self, key: str, why: str | None) -> None:
        """Once per worker: deadlines fall back to timing whole jobs (start-up included)."""
        if self.said_unstamped:
            return
        self.said_unstamped = True
        print(f"worker {self.worker_id}: job {key} does not stamp its command "
              f"({why or 'no stamps yet'}); deadlines of such jobs count from their start, "
              "start-up and file staging included", file=sys.stderr, flush=True)

    def _kill_cancelled(self) -> None:
        for key in list(self.running):
            if key in self.cancel:
                job = self.running[key]
                kill_session(job.proc.pid)
                job.proc.wait()
                self._finish(job, AttemptEnd.CANCELLED, None, "cancelled by the coordinator")

    def _kill_all(self, outcome: AttemptEnd, reason: str) -> None:
        for job in list(self.running.values()):
            kill_session(job.proc.pid)
            job.proc.wait()
            self._finish(job, outcome, None, reason)

    def _finish(self, job: RunningJob, outcome: AttemptEnd, code: int | None, reason: str | None,
                ended: float | None = None) -> None:
        del self.running[job.key]
        prune = job.spec.prune
        if outcome is AttemptEnd.TIMEOUT and prune is not None:
            self.timeouts.setdefault(prune.family, Frontier()).add(prune.point, job.key)
        self.last_change = time.monotonic()  # a slot is free (read fast once reported)
        self._record_sessions()
        command_s = self._command_s(job)
        stamps = self._stamps(job)  # and the bytes it moved to and from the bucket
        saved = self._save_logs(job) if outcome in SAVE_LOGS_ON else ()
        self._write_result(job.key, outcome, code, job.started, reason, job.log, ended, saved,
                           command_s, staged=StagedBytes(stamps.down, stamps.up))
        # Its directory goes with it: a long-lived VM's disk must not fill with ended jobs
        # (later jobs would fail for it), and a staged job's spec holds its secrets unblanked.
        # Its outputs went to the bucket, its inputs were copies. Its log stays (0600, in a
        # 0700 directory), for whoever looks at this disk.
        remove_dir(job.workdir)
        if job.stamps is not None:
            job.stamps.unlink(missing_ok=True)

    def _save_logs(self, job: RunningJob) -> tuple[SavedLog, ...]:
        """The job's whole output and its log files, to the bucket before its directory (and,
        on GCE, the VM) goes; blanked of its secrets like its report."""
        def write(key: str, data: bytes) -> bool:
            return self._storage(f"save a log of {job.key}", lambda: self.bucket.write(key, data))

        return save_logs(job.key, self.worker_id, job.log, job.cwd, job.spec.logs,
                         list(job.spec.redact), write)

    def _explain(self, reason: str | None, job: RunningJob) -> str | None:
        """A failed job's reason with why, when its log or this disk says: "exit code 1" alone
        does not tell a full disk or a refused upload from a bug in the job. The log's secrets
        are blanked before the line is clipped (a clipped secret no longer matches)."""
        why = explain_failure(log_tail(job.log, job.spec.redact))
        if why is None and DISK_FULL not in (reason or ""):
            why = disk_full((job.log.parent, self.scratch / "work"))
        if why is None or why in (reason or ""):
            return reason
        return f"{reason}: {why}" if reason else why

    def _record_sessions(self) -> None:
        """The VM's own disk: which job sessions are alive, for the local engine's teardown.
        Best effort: a full disk must not crash the worker (its jobs could not be reported)."""
        text = "".join(f"{job.proc.pid}\n" for job in self.running.values())
        tmp = self.scratch / "sessions.tmp"
        try:
            tmp.write_text(text)
            os.replace(tmp, self.scratch / "sessions")
        except OSError as exc:
            print(f"worker {self.worker_id}: cannot record job sessions: {exc}",
                  file=sys.stderr, flush=True)


def _read_verdict(path: Path, outcome: AttemptEnd, code: int | None,
                  reason: str | None) -> tuple[AttemptEnd, int | None, str | None]:
    """A staged job's verdict: its command's exit code and whether its limit killed it."""
    try:
        verdict = json.loads(path.read_text())
        outcome, code = AttemptEnd(verdict["outcome"]), verdict["returncode"]
        reason = verdict["reason"]
    except (OSError, ValueError, KeyError, TypeError):
        return outcome, code, reason or "the staged job left no verdict"
    if reason is None and outcome is AttemptEnd.FAILED and code is not None:
        reason = f"exit code {code}"  # a command that failed on its own, as for any job
    return outcome, code, reason


def remove_dir(directory: Path | None) -> None:
    """Best effort: a directory that cannot be removed must not stop the worker."""
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)
