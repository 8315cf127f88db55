"""``expocloud-worker``: the agent on each VM (or local process standing in for one).

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

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from expo_executor.core.hardness import Frontier
from expo_executor.core.held_jobs import runs_low, starts_now
from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket, PreconditionFailed, open_bucket
from expo_executor.protocol.keys import (DEPLOY_DIR_ENV, PULSE_KEY, WORKER_KEY_ENV, inbox_key,
                                         result_key, status_key)
from expo_executor.protocol.records import (Inbox, InboxJob, PrunePoint, Pulse, ResultBatch,
                                            SavedLog, WorkerResult, WorkerStatus)
from expo_executor.worker.console import guard_output
from expo_executor.worker.forked import ForkedJob, Zygote, job_chain, zygote_wanted
from expo_executor.worker.procs import kill_session, vm_mark
from expo_executor.worker.saved_logs import save_logs
from expo_executor.worker.command_clock import STAMPS_ENV, Stamps, judge, read_stamps
from expo_executor.worker.staged_job import GRACE_S, verdict_path
from expo_executor.worker.wakeup import Wakeup

LOG_TAIL_BYTES = 4000
FAST_WINDOW = 10  # polls at the fast rate after each change, before slowing down
REAP_TICK = 0.1  # seconds between looks at running jobs (free: no request)
SUPPLIED_SLOWDOWN = 2  # a worker holding a next job for every slot reads this much slower
# A job's deadline times its command (worker/command_clock.py); its start-up and file staging
# (Snakemake's imports and DAG, inputs fetched, outputs stored) have this allowance of their
# own, so that a hung start-up still ends: as a failure that says so, never a timeout.
# EXPOCLOUD_STAGING_ALLOWANCE_S sets it for a worker (tests use a small one).
STAGING_ALLOWANCE_S = 1800.0
ALLOWANCE_ENV = "EXPOCLOUD_STAGING_ALLOWANCE_S"
# A staged job kills its command at its limit itself (SIGTERM, then SIGKILL): this much later
# the worker steps in
STAGED_SLACK_S = 3 * GRACE_S
DISK_FULL = "No space left on device"  # strerror(ENOSPC), what every tool prints
REASON_DETAIL_CHARS = 400  # a reason is one line in jobs.jsonl, not a log
# Snakemake's storage plugin gave up on an output: the line naming it, then its cause
STORE_FAILED = re.compile(r"^Failed to (store output in|retrieve input from) storage \S+")
# Attempts whose logs are saved to the bucket: the job's own failures, not a cancellation or
# a preemption (the job runs again, or was not wanted)
SAVE_LOGS_ON = (AttemptEnd.FAILED, AttemptEnd.TIMEOUT)
# Results per object: a batch stops growing at this many bytes of results (half the message
# limit: the rest is the envelope's, and one result more)
BATCH_BYTES = messages.MAX_BYTES // 2


@dataclass
class _Running:
    key: str
    proc: subprocess.Popen | ForkedJob  # ForkedJob: forked by the zygote, our child too
    started: float  # wall clock, for reports
    started_mono: float
    deadline_s: float | None
    cpus: int
    log: Path
    verdict: Path | None = None  # a staged job's own account of how it ended
    workdir: Path | None = None  # the directory made for it on this disk, removed after it
    cwd: str | None = None  # where it runs: its log files' paths are relative to it
    logs: tuple[str, ...] = ()  # its own log files (a rule's log:)
    stamps: Path | None = None  # where it stamps its command's start and end
    # (size and mtime of the stamps file when last parsed, what it said): see Worker._stamps
    stamps_read: tuple[tuple[int, int] | None, Stamps] | None = None


class Worker:
    """One worker agent; ``run`` returns the process exit code."""

    def __init__(self, bucket: Bucket, worker_id: str, slots: int, key: bytes,
                 scratch: Path, poll: float = 0.2, grace: float = 60.0,
                 heartbeat: float = 10.0, slow_poll: float | None = None,
                 allowance: float = STAGING_ALLOWANCE_S, zygote: bool = True,
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
        self.pulse = pulse
        self.pulse_seq = -1  # of the last pulse accepted
        self.pulse_generation: int | None = None
        self.next_pulse_read = 0.0  # monotonic clock
        self.said_pulse = False  # a pulse ignored is said once
        self.running: dict[str, _Running] = {}
        self.seen: set[str] = set()  # job keys ever started here: never run one twice
        self.seq = -1
        self.last_contact = time.monotonic()
        self.last_status = 0.0
        self.stop_reason: str | None = None
        self.inbox_generation: int | None = None
        self.pending: dict[str, InboxJob] = {}
        self.cancel: set[str] = set()
        self.released: set[str] = set()  # held jobs given back unstarted (the inbox's release)
        # results not in the bucket yet, each with when it was added (monotonic clock): held
        # back to go several in one object (_report_due), or not taken by the bucket (its
        # retries ran out; sent again every poll, never dropped, so that a storage outage
        # delays a report instead of losing it)
        self.unsent: dict[str, tuple[WorkerResult, float]] = {}
        # a solved result waits at most this long for others to share its object
        self.report_delay = heartbeat if report_delay is None else report_delay
        self.retry_at = 0.0  # after a failed report, the next try not before (monotonic)
        self.stopping = False  # the last reports are gathered, then sent in one object
        self.secrets: dict[str, list[str]] = {}  # job -> secret values its report must not hold
        self.allowance = allowance  # seconds of start-up and staging a job with a deadline gets
        self.prunes: dict[str, PrunePoint] = {}  # running job -> where its timeout prunes
        # this worker's own timeouts that prune, one frontier per family (core.hardness)
        self.timeouts: dict[str, Frontier] = {}
        self.said_unstamped = False  # the fallback to timing whole jobs is said once
        # Snakemake jobs are forked from a process that imported Snakemake once; its own
        # environment carries the VM's mark, which its jobs' /proc environ shows
        self.zygote = Zygote(self._zygote_env(), f"worker {worker_id}") \
            if zygote and zygote_wanted() else None
        self.wakeup = Wakeup()

    def _zygote_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != WORKER_KEY_ENV}
        name, _, value = vm_mark(self.scratch).partition("=")
        env[name] = value
        return env

    # -- main loop ---------------------------------------------------------------------------
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
        (self.scratch / "jobs").mkdir(parents=True, exist_ok=True)
        (self.scratch / "work").mkdir(parents=True, exist_ok=True)
        self._write_status(WorkerState.READY)
        while self.stop_reason is None:
            # Reading the inbox is a billed request, looking at our own processes is free:
            # jobs are reaped every tick, the inbox is read at the (adaptive) poll interval.
            if time.monotonic() >= self.next_read:
                self._read_inbox_now()
                self.next_read = time.monotonic() + self._inbox_interval()
            if self._pulse_due():
                self.next_pulse_read = time.monotonic() + (self.pulse or 0.0)
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
        slot is free with nothing held for it, and that change is recent. Otherwise slow: the
        slots are busy, each with its next job held or nothing asked for, so only a
        cancellation could come (every read is a billed request, paid per worker)."""
        quiet = time.monotonic() - self.last_change > FAST_WINDOW * self.poll
        used = sum(r.cpus for r in self.running.values())
        idle = used < self.slots and not self.pending
        asked = self.last_report > self.last_inbox
        if (asked or idle) and not quiet:
            return self.poll
        # every slot busy and holding its next job: only a cancel can come, and the held jobs
        # its own timeouts dominate it never starts (_dominated)
        supplied = used >= self.slots and sum(j.cpus for j in self.pending.values()) >= self.slots
        return self.slow_poll * SUPPLIED_SLOWDOWN if supplied else self.slow_poll

    def _sleep_time(self) -> float:
        now = time.monotonic()
        waits = [self.next_read - now]
        if self.pulse is not None:
            waits.append(max(self.next_pulse_read, self.last_contact + self.pulse) - now)
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

    # -- inbox -------------------------------------------------------------------------------
    def _read_inbox(self) -> None:
        self.last_read = time.monotonic()
        blob = self.bucket.read(inbox_key(self.worker_id))
        if blob is None or blob.generation == self.inbox_generation:
            return
        self.inbox_generation = blob.generation
        try:
            inbox = Inbox.decode(blob.data, self.key)
        except messages.MessageError as exc:
            print(f"worker {self.worker_id}: ignoring inbox: {exc}", file=sys.stderr, flush=True)
            return
        if inbox.to not in ("", self.worker_id):
            print(f"worker {self.worker_id}: ignoring an inbox for {inbox.to!r}",
                  file=sys.stderr, flush=True)
            return
        if inbox.seq <= self.seq:
            return  # a replay of an older assignment
        self.seq = inbox.seq
        self.last_contact = self.last_inbox = time.monotonic()
        if inbox.jobs or inbox.cancel:
            self.last_change = self.last_contact
        self.pending = {k: v for k, v in inbox.jobs.items() if k not in self.seen}
        self.cancel = set(inbox.cancel)
        self._give_back({key for key in inbox.release if key not in self.seen})

    def _give_back(self, keys: set[str]) -> None:
        """Held jobs the coordinator asks back (another worker's free slot will run them):
        they left ``pending`` with this inbox, and the status says so at once when a new one
        is among them. One this worker started already is not given back: its result comes
        as any other's."""
        new = keys - self.released
        self.released = keys
        if new:
            self._write_status(WorkerState.READY)

    # -- pulse -------------------------------------------------------------------------------
    def _pulse_due(self) -> bool:
        """No contact (a new inbox or pulse) for the coordinator's heartbeat, and the pulse not
        read within one: each read is a billed request, paid per worker."""
        now = time.monotonic()
        return self.pulse is not None and now - self.last_contact >= self.pulse \
            and now >= self.next_pulse_read

    def _read_pulse(self) -> None:
        """A new pulse whose tag for this worker verifies with its own key counts as contact
        (the grace starts again); anything else is ignored, said once."""
        blob = self.bucket.read(PULSE_KEY)
        if blob is not None and blob.generation == self.pulse_generation:
            return  # the coordinator has not written one since: nothing new to judge
        why = "there is none" if blob is None else None
        if blob is not None:
            self.pulse_generation = blob.generation
            try:
                pulse = Pulse.decode(blob.data)
            except messages.MessageError as exc:
                why = str(exc)
            else:
                why = self._judge(pulse)
        if why is None:
            self.last_contact = time.monotonic()
        elif not self.said_pulse:
            self.said_pulse = True
            print(f"worker {self.worker_id}: ignoring the coordinator's pulse: {why}",
                  file=sys.stderr, flush=True)

    def _judge(self, pulse: Pulse) -> str | None:
        """Why ``pulse`` does not count as contact, or None (it does: it is accepted)."""
        if self.worker_id not in pulse.tags:
            return "no entry for this worker"
        if not pulse.proves(self.worker_id, self.key):
            return "its tag for this worker does not verify with this worker's key"
        if pulse.seq <= self.pulse_seq:
            return f"sequence number {pulse.seq} not newer than {self.pulse_seq}"
        self.pulse_seq = pulse.seq
        return None

    def _start_pending(self) -> None:
        """Start what the inbox holds, in its order (the coordinator's, which assigns the
        easiest first and prefetches the next job of each busy slot), while slots are free."""
        for key in list(self.pending):
            job = self.pending.get(key)
            if job is None or self._not_started(key, job):
                continue  # gone from a fresh inbox, or cancelled
            free = self.slots - sum(r.cpus for r in self.running.values())
            if not starts_now(job.cpus, free, bool(self.running)):
                break  # wait for a slot: the coordinator's rule (Scheduler._promote)
            if self._waits_for_zygote(key, job):
                break  # a fresh interpreter now would cost more than the wait (forked.py)
            if job.prune is not None and self._inbox_stale():
                self._read_inbox_now()  # a timeout elsewhere may have cancelled it meanwhile
                if key not in self.pending or self._not_started(key, job):
                    continue
            self.seen.add(key)
            if job.prune is not None:
                self.prunes[key] = job.prune
            self._start(key, job)
        self.pending = {k: v for k, v in self.pending.items() if k not in self.seen}

    def _not_started(self, key: str, job: InboxJob) -> bool:
        """A held job cancelled, or dominated by a timeout of this worker's own, is reported
        cancelled instead of started."""
        if key not in self.cancel and not self._dominated(job):
            return False
        self.seen.add(key)
        why = "cancelled before start" if key in self.cancel else \
            "not started: a timeout on this worker dominates it"
        self._write_result(key, AttemptEnd.CANCELLED, None, time.time(), why, ran=False)
        return True

    def _inbox_stale(self) -> bool:
        """The inbox was last read longer ago than the fast poll, and reading it works. A
        busy worker reads it only every slow poll: a cancel from the domino effect of a
        timeout on another worker can wait there that long, so a held job with a hardness
        point reads it once more before it starts (one billed read per such start)."""
        return self.inbox_readable and time.monotonic() - self.last_read > self.poll

    def _read_inbox_now(self) -> None:
        self.inbox_readable = self._storage("read the inbox", self._read_inbox)

    def _dominated(self, job: InboxJob) -> bool:
        """Whether a timeout of this worker's own is as easy as ``job`` (same family and
        scope, no coordinate harder: the coordinator's rule, ``core.hardness``): its domino
        effect will cancel the job, but its cancel could come after a prefetched job started."""
        prune = job.prune
        frontier = self.timeouts.get(prune.family) if prune is not None else None
        return frontier is not None and frontier.dominator(prune.point) is not None

    def _start(self, key: str, job: InboxJob) -> None:
        log = self.scratch / "jobs" / f"{key}.log"
        try:  # its command and environment are sealed: opened here and only here
            job = job.unsealed(self.key, key)
        except messages.MessageError as exc:
            self._write_result(key, AttemptEnd.FAILED, None, time.time(), str(exc))
            return
        if job.redact:
            self.secrets[key] = list(job.redact)
        cwd, workdir = job.cwd or None, None  # "" or None: no shared directory
        env = _job_env(job)
        argv, deadline, verdict = job.argv, job.deadline_s, None
        if job.stage is not None:  # a fully evaluated command whose files travel with it (CWL)
            argv, deadline, verdict = self._staged(key, job)
            env, cwd = {k: v for k, v in os.environ.items() if k != WORKER_KEY_ENV}, None
        elif cwd is None:
            # No shared file system: a directory of its own on this disk, removed once the job
            # has ended. Jobs sharing a VM in one directory race: each unpacks the workflow's
            # sources there (Snakemake's --deploy-sources), and one reads the tarball while
            # another is still writing it ("Checksum of retrieved sources ... does not match").
            workdir = self.scratch / "work" / key
            cwd = str(workdir)
        # The mark a powered-off "VM" finds its jobs by, should this worker die before it
        # records the job's session (procs.power_off).
        name, _, value = vm_mark(self.scratch).partition("=")
        env[name] = value
        env[DEPLOY_DIR_ENV] = str(self.scratch / "deploy")  # one per VM: envs built once
        stamps = self.scratch / "jobs" / f"{key}.stamps"
        env[STAMPS_ENV] = str(stamps)
        started = time.time()
        stamps.unlink(missing_ok=True)  # a restarted agent's leftovers are not this job's
        # This disk is the worker's own: a failure to write on it (as to write a staged job's
        # spec) is not the job's, and ends the worker (its jobs are lost: ``crashed``).
        if workdir is not None:
            workdir.mkdir(parents=True, exist_ok=True)
        chain = self._chain(argv, env)
        proc = self._fork(chain, cwd, env, log) if chain is not None else None
        if proc is None:
            with open(log, "wb") as out:
                try:
                    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
                except OSError as exc:  # its command cannot be run (not found, not executable)
                    self._write_result(key, AttemptEnd.FAILED, None, started,
                                       f"could not start the job: {exc}")
                    _remove(workdir)
                    return
        self.running[key] = _Running(key, proc, started, time.monotonic(),
                                     float(deadline) if deadline is not None else None,
                                     job.cpus, log, verdict, workdir, cwd, job.logs, stamps)
        self._record_sessions()  # no status write: the coordinator knows what it assigned

    def _waits_for_zygote(self, key: str, job: InboxJob) -> bool:
        """The zygote is starting and would run this job: it waits (forked.py)."""
        if self._zygote_starting() is None:
            return False
        try:
            job = job.unsealed(self.key, key)
        except messages.MessageError:
            return False  # _start reports it
        return job.stage is not None or self._chain(job.argv, _job_env(job)) is not None

    def _zygote_starting(self) -> int | None:
        """The zygote's readiness descriptor while jobs wait for it to start; else None."""
        return self.zygote.starting() if self.zygote is not None else None

    def _chain(self, argv: list[str], env: dict[str, str]) -> list[list[str]] | None:
        """The zygote's steps for a job's command; None: it is neither a Snakemake job's nor
        a staged job's (worker/forked.py), and a fresh process runs it."""
        return job_chain(argv, env["PATH"])

    def _fork(self, chain: list[list[str]], cwd: str | None, env: dict[str, str],
              log: Path) -> ForkedJob | None:
        """The job forked by the zygote (worker/zygote.py), which has imported Snakemake once;
        None: it starts a fresh interpreter as before (no zygote, or not ready yet)."""
        if self.zygote is None:
            return None
        return self.zygote.spawn(chain, cwd or os.getcwd(), env, log)

    def _staged(self, key: str, job: InboxJob) -> tuple[list[str], float | None, Path]:
        """Hand a staged job to ``staged_job`` in a directory of its own on this disk."""
        home = self.scratch / "jobs" / key
        home.mkdir(parents=True, exist_ok=True)
        spec = home.with_suffix(".json")
        stage = job.stage or {}
        spec.write_text(json.dumps({"argv": job.argv, "cwd": job.cwd, "env": job.env,
                                    "stage": stage, "bucket": self.bucket.url,
                                    "worker": self.worker_id}))
        limit = stage.get("timelimit")
        deadline = float(limit) + STAGED_SLACK_S if limit else None
        return [sys.executable, "-m", "expo_executor.worker.staged_job", str(spec)], deadline, \
            verdict_path(spec)

    # -- running jobs ------------------------------------------------------------------------
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
                    reason = self._explain(reason, job.log)
                self._finish(job, outcome, code, reason)
            elif job.deadline_s is not None:
                self._enforce(job, now)

    def _enforce(self, job: _Running, now: float) -> None:
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
    def _stamps(job: _Running) -> Stamps:
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

    def _command_s(self, job: _Running) -> float | None:
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

    def _finish(self, job: _Running, outcome: AttemptEnd, code: int | None, reason: str | None,
                ended: float | None = None) -> None:
        del self.running[job.key]
        prune = self.prunes.pop(job.key, None)
        if outcome is AttemptEnd.TIMEOUT and prune is not None:
            self.timeouts.setdefault(prune.family, Frontier()).add(prune.point, job.key)
        self.last_change = time.monotonic()  # a slot is free (read fast once reported)
        self._record_sessions()
        command_s = self._command_s(job)
        saved = self._save_logs(job) if outcome in SAVE_LOGS_ON else ()
        self._write_result(job.key, outcome, code, job.started, reason, job.log, ended, saved,
                           command_s)
        _remove(job.workdir)  # its outputs went to the bucket; its inputs were copies
        if job.stamps is not None:
            job.stamps.unlink(missing_ok=True)

    def _save_logs(self, job: _Running) -> tuple[SavedLog, ...]:
        """The job's whole output and its log files, to the bucket before its directory (and,
        on GCE, the VM) goes; blanked of its secrets like its report."""
        def write(key: str, data: bytes) -> bool:
            return self._storage(f"save a log of {job.key}", lambda: self.bucket.write(key, data))

        return save_logs(job.key, self.worker_id, job.log, job.cwd, job.logs,
                         self.secrets.get(job.key, []), write)

    def _explain(self, reason: str | None, log: Path) -> str | None:
        """A failed job's reason with why, when its log or this disk says: "exit code 1" alone
        does not tell a full disk or a refused upload from a bug in the job."""
        why = explain_failure(_tail(log))
        if why is None and DISK_FULL not in (reason or ""):
            why = _disk_full((log.parent, self.scratch / "work"))
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

    # -- reports -----------------------------------------------------------------------------
    def _write_result(self, key: str, outcome: AttemptEnd, code: int | None, started: float,
                      reason: str | None, log: Path | None = None,
                      ended: float | None = None, logs: tuple[SavedLog, ...] = (),
                      command_s: float | None = None, ran: bool = True) -> None:
        """A job's result joins ``unsent``: one that is not SOLVED goes at once (with every
        result waiting), a solved one when :meth:`_report_due` says so; while the worker
        stops, all go together at its end."""
        secrets = self.secrets.pop(key, [])  # a sealed job's own: blanked out of its report
        tail = _tail(log) if log and outcome is not AttemptEnd.SOLVED else ""
        result = WorkerResult(key, self.worker_id, outcome, code, started, ended or time.time(),
                              messages.redacted(reason, secrets),
                              messages.redacted(tail, secrets) or "", logs, command_s,
                              ran=ran)
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
        ops = _ops_after_write(self.bucket)
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
                              self.slots, state, _ops_after_write(self.bucket),
                              sorted(self.released))
        # signed like assignments: a bucket writer can delete a report but not forge one
        written = self._storage("write its status", lambda: self.bucket.write(
            status_key(self.worker_id), status.encode(self.key)))
        # a failed write is tried again after a slow poll, not at the next heartbeat (a long
        # wait on GCE: the coordinator would learn late that this worker is ready)
        self.last_status = time.monotonic() - (0.0 if written else
                                               max(0.0, self.heartbeat - self.slow_poll))


def _read_verdict(path: Path, outcome: AttemptEnd, code: int | None,
                  reason: str | None) -> tuple[AttemptEnd, int | None, str | None]:
    """A staged job's verdict: its command's exit code and whether its limit killed it."""
    try:
        verdict = json.loads(path.read_text())
        return AttemptEnd(verdict["outcome"]), verdict["returncode"], verdict["reason"]
    except (OSError, ValueError, KeyError, TypeError):
        return outcome, code, reason or "the staged job left no verdict"


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= REASON_DETAIL_CHARS else line[:REASON_DETAIL_CHARS - 3] + "..."


def explain_failure(tail: str) -> str | None:
    """The line of a failed job's log that says why, or None: a full disk, or an output the
    storage plugin could not store (with the cause it was given, e.g. 403 Forbidden)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if DISK_FULL in line:
            return _clip(line)
    for i in range(len(lines) - 1, -1, -1):
        if STORE_FAILED.match(lines[i]):
            cause = next((line for line in lines[i + 1:]
                          if not line.endswith(":") and not line.startswith("When running")),
                         None)
            return _clip(f"{lines[i]}: {cause}" if cause else lines[i])
    return None


def _disk_full(paths: tuple[Path, ...]) -> str | None:
    """Say so when one of this worker's directories has no space left: a job whose log could
    not even be written leaves nothing else to explain its failure."""
    for path in paths:
        try:
            free = os.statvfs(path).f_bavail
        except OSError:
            continue
        if free == 0:
            return f"{DISK_FULL} on the worker ({path} is full)"
    return None


def _ops_after_write(bucket: Bucket) -> dict[str, int]:
    ops = dict(getattr(bucket, "ops", {}))
    ops["A"] = ops.get("A", 0) + 1
    return ops


def _remove(directory: Path | None) -> None:
    """Best effort: a directory that cannot be removed must not stop the worker."""
    if directory is not None:
        shutil.rmtree(directory, ignore_errors=True)


def _tail(path: Path) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - LOG_TAIL_BYTES))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    guard_output()  # a closed stdout (the VM shutting down) must not cost the last report
    parser = argparse.ArgumentParser(prog="expocloud-worker", description=__doc__.splitlines()[0])
    parser.add_argument("--from-metadata", action="store_true",
                        help="on a VM: read every setting from the metadata server and ask the "
                        "coordinator for this worker's key through the bucket")
    parser.add_argument("--bucket", help="bucket URL of the run")
    parser.add_argument("--worker-id")
    parser.add_argument("--slots", type=int)
    parser.add_argument("--scratch", type=Path, required=True, help="this VM's local disk")
    parser.add_argument("--poll", type=float, default=0.2)
    parser.add_argument("--grace", type=float, default=60.0)
    parser.add_argument("--heartbeat", type=float, default=10.0)
    parser.add_argument("--report-delay", type=float, default=None,
                        help="seconds a solved result may wait to share its object with "
                        "others (default: the heartbeat)")
    parser.add_argument("--pulse", type=float, default=None,
                        help="the coordinator's heartbeat: with no new inbox for this long, "
                        "read its pulse (default: the inbox alone keeps the worker alive)")
    parser.add_argument("--boot-delay", type=float, default=0.0,
                        help="seconds to wait before reporting ready (emulates a VM booting)")
    parser.add_argument("--staging-allowance", type=float, default=_allowance(),
                        help="seconds of start-up and file staging a job with a deadline may "
                        f"take besides its command (default {STAGING_ALLOWANCE_S:g}, or "
                        f"{ALLOWANCE_ENV})")
    args = parser.parse_args(argv)
    if args.from_metadata:
        return _main_on_vm(args.scratch)
    missing = [f"--{n.replace('_', '-')}" for n in ("bucket", "worker_id", "slots")
               if getattr(args, n) is None]
    if missing:
        parser.error(f"{', '.join(missing)} required without --from-metadata")
    if args.pulse is not None and args.pulse <= 0:
        parser.error(f"--pulse {args.pulse:g}: give the coordinator's heartbeat in seconds (> 0)")
    key = os.environ.pop(WORKER_KEY_ENV, "")
    if not key:
        print(f"expocloud-worker: {WORKER_KEY_ENV} is not set; fix: start workers through the "
              "coordinator, which hands each one its key", file=sys.stderr)
        return 2
    worker = Worker(open_bucket(args.bucket), args.worker_id, args.slots,
                    bytes.fromhex(key), args.scratch, args.poll, args.grace, args.heartbeat,
                    allowance=args.staging_allowance, report_delay=args.report_delay,
                    pulse=args.pulse)
    _stop_on_signals(worker, on_vm=False)
    time.sleep(args.boot_delay)
    return _run(worker)


def _main_on_vm(scratch: Path) -> int:
    """A worker on a (real or fake) GCE VM: settings from metadata, preemption watched, and
    the VM deleted when the coordinator has gone silent (the dead man's switch)."""
    from expo_executor.engines.gce import guest

    boot = guest.Boot.from_metadata()
    if boot.storage_emulator_host:
        os.environ["STORAGE_EMULATOR_HOST"] = boot.storage_emulator_host
    bucket = open_bucket(boot.bucket)
    try:
        key = guest.worker_key(boot, bucket)
    except OSError as exc:  # no key (TimeoutError: no coordinator to work for; or the
        # metadata server gave no identity token): stop as when the coordinator falls silent
        why = f"worker {boot.name}: cannot get its key: {exc}"
        print(f"{why}; deleting this VM" if boot.self_delete else why, flush=True)
        if boot.self_delete:
            guest.delete_self(boot)
        return 3
    worker = Worker(bucket, boot.name, boot.slots, key, scratch,
                    boot.poll, boot.grace, boot.heartbeat, boot.slow_poll, _allowance(),
                    report_delay=boot.report_delay, pulse=boot.pulse)
    stop_watching = threading.Event()
    guest.watch_preemption(lambda: worker.request_stop("preempted"), stop_watching)
    _stop_on_signals(worker, on_vm=True)
    try:
        code = _run(worker)
    finally:
        stop_watching.set()
    if boot.self_delete and worker.stop_reason not in ("terminated", "preempted"):
        print(f"worker {boot.name}: {worker.stop_reason}; deleting this VM", flush=True)
        guest.delete_self(boot)
    return code


def _job_env(job: InboxJob) -> dict[str, str]:
    """A job's environment: the worker's, without its key, with the job's own on top."""
    env = {**os.environ, **{str(k): str(v) for k, v in job.env.items()}}
    env.pop(WORKER_KEY_ENV, None)  # jobs never see the worker's key
    # Jobs find the worker's own Python environment first (Snakemake's remote command says
    # plain "python -m snakemake": on a VM that must be the pinned environment).
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def _allowance() -> float:
    """The start-up and staging allowance: ``EXPOCLOUD_STAGING_ALLOWANCE_S`` or the default."""
    try:
        value = float(os.environ.get(ALLOWANCE_ENV, STAGING_ALLOWANCE_S))
    except ValueError:
        value = STAGING_ALLOWANCE_S
    return value if value > 0 else STAGING_ALLOWANCE_S


def _stop_on_signals(worker: Worker, on_vm: bool) -> None:
    def stop(*_: object) -> None:
        # On a VM, SIGTERM also comes with a preemption's soft power-off: ask the notice.
        if on_vm:
            from expo_executor.engines.gce.guest import preempted_now
            worker.request_stop("preempted" if preempted_now() else "terminated")
        else:
            worker.request_stop("terminated")

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def _run(worker: Worker) -> int:
    try:
        return worker.run()
    except Exception as exc:  # report the crash in our last breath, then die loudly
        worker.crashed(exc)
        raise


if __name__ == "__main__":
    sys.exit(main())

