"""Starting the held jobs of the inbox, in the coordinator's order, as slots free: the rule of
``core.held_jobs`` (the scheduler's own), never a job cancelled or dominated by a timeout of
this worker's own (``core.hardness``, the coordinator's rule), each in a session of its own,
forked by the zygote when it can be (``worker/forked.py``), else a fresh process.

A mixin of :class:`~expo_executor.worker.agent_loop.Worker`, whose ``__init__`` holds the
state it reads and sets: ``pending``, ``seen``, ``cancel``, ``running``, ``timeouts``,
``specs``, ``zygote``.

A job's spec travels sealed: :meth:`JobStarts._opened` opens it once, the first time the job's
command matters (to know whether it waits for the zygote, or to start it), and the worker keeps
the opened spec in ``specs`` until the job's result is written (its secrets blank its logs and
report).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from expo_executor.core.held_jobs import starts_now
from expo_executor.core.records import AttemptEnd
from expo_executor.protocol import messages
from expo_executor.protocol.keys import COMMAND_ONLY_ENV, DEPLOY_DIR_ENV, WORKER_KEY_ENV
from expo_executor.protocol.records import JobSpec
from expo_executor.worker.command_clock import STAMPS_ENV, whole_command
from expo_executor.worker.failure_reason import worker_fault
from expo_executor.worker.forked import ForkedJob, job_chain
from expo_executor.processes.private_files import private_dir, private_output, write_private
from expo_executor.processes.sessions import vm_mark
from expo_executor.worker.running_jobs import RunningJob, remove_dir
from expo_executor.worker.staged_job import GRACE_S, STAGED_SPEC, verdict_path


# A staged job kills its command at its limit itself (SIGTERM, then SIGKILL): this much later
# the worker steps in
STAGED_SLACK_S = 3 * GRACE_S


class JobStarts:
    """Starting held jobs (see the module)."""

    def _start_pending(self) -> None:
        """Start what the inbox holds, in its order (the coordinator's, which assigns the
        easiest first and prefetches the next job of each busy slot), while slots are free."""
        for key in list(self.pending):
            job = self.pending.get(key)
            if job is None or self._not_started(key, job):
                continue  # gone from a fresh inbox, or cancelled
            free = self.slots - sum(r.spec.cpus for r in self.running.values())
            if not starts_now(job.cpus, free, bool(self.running)):
                break  # wait for a slot: the coordinator's rule (Scheduler._promote)
            if self._waits_for_zygote(key, job):
                break  # a fresh interpreter now would cost more than the wait (forked.py)
            if job.prune is not None and self._inbox_stale():
                self._read_inbox_now()  # a timeout elsewhere may have cancelled it meanwhile
                if key not in self.pending or self._not_started(key, job):
                    continue
            self.seen.add(key)
            self._start(key, job)
        self.pending = {k: v for k, v in self.pending.items() if k not in self.seen}

    def _not_started(self, key: str, job: JobSpec) -> bool:
        """A held job cancelled, or dominated by a timeout of this worker's own, is reported
        cancelled instead of started."""
        if key not in self.cancel and not self._dominated(job):
            return False
        self.seen.add(key)
        why = "cancelled before start" if key in self.cancel else \
            "not started: a timeout on this worker dominates it"
        self._write_result(key, AttemptEnd.CANCELLED, None, time.time(), why, ran=False)
        return True

    def _dominated(self, job: JobSpec) -> bool:
        """Whether a timeout of this worker's own is as easy as ``job`` (same family and
        scope, no coordinate harder: the coordinator's rule, ``core.hardness``): its domino
        effect will cancel the job, but its cancel could come after a prefetched job started."""
        prune = job.prune
        frontier = self.timeouts.get(prune.family) if prune is not None else None
        return frontier is not None and frontier.dominator(prune.point) is not None

    def _opened(self, key: str, job: JobSpec) -> JobSpec:
        """The job's spec, its sealed command, environment and secrets opened with this
        worker's key: once, then kept in ``specs`` for the job's life (its ``RunningJob``
        holds it once started); raises MessageError when they do not open."""
        spec = self.specs.get(key)
        if spec is None:
            spec = self.specs[key] = job.opened(self.key, key)
        return spec

    def _start(self, key: str, held: JobSpec) -> None:
        log = self.scratch / "jobs" / f"{key}.log"
        try:
            job = self._opened(key, held)
        except messages.MessageError as exc:
            self._write_result(key, AttemptEnd.FAILED, None, time.time(), str(exc))
            return
        cwd, workdir = job.cwd or None, None  # "" or None: no shared directory
        env = job_env(job)
        argv, deadline, verdict = job.argv, job.deadline_s, None
        if job.stage is not None:  # a fully evaluated command whose files travel with it (CWL)
            argv, deadline, verdict, workdir = self._staged(key, job)
            env, cwd = {k: v for k, v in os.environ.items() if k != WORKER_KEY_ENV}, None
            if job.stage.get("direct"):  # its log files' paths are relative to its root
                cwd = str(workdir / "root")
        elif cwd is None:
            # No shared file system: a directory of its own on this disk, removed once the job
            # has ended. Jobs sharing a VM in one directory race: each unpacks the workflow's
            # sources there (Snakemake's --deploy-sources), and one reads the tarball while
            # another is still writing it ("Checksum of retrieved sources ... does not match").
            workdir = self.scratch / "work" / key
            cwd = str(workdir)
        # The mark a powered-off "VM" finds its jobs by, should this worker die before it
        # records the job's session (processes.sessions.power_off).
        name, _, value = vm_mark(self.scratch).partition("=")
        env[name] = value
        env[DEPLOY_DIR_ENV] = str(self.scratch / "deploy")  # one per VM: envs built once
        stamps = self.scratch / "jobs" / f"{key}.stamps"
        env[STAMPS_ENV] = str(stamps)
        started = time.time()
        stamps.unlink(missing_ok=True)  # a restarted agent's leftovers are not this job's
        if env.pop(COMMAND_ONLY_ENV, None) == "1":
            whole_command(str(stamps))
        # This disk is the worker's own: a failure to write on it (as to write a staged job's
        # spec) is not the job's, and ends the worker (its jobs are lost: ``crashed``). What a
        # job leaves here (its directory, its log: its secrets unblanked) only we may read.
        if workdir is not None:
            private_dir(workdir)
        chain = self._chain(argv, env)
        proc = self._fork(chain, cwd, env, log) if chain is not None else None
        if proc is None:
            with os.fdopen(private_output(log), "wb") as out:
                try:
                    proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)
                except OSError as exc:
                    if worker_fault(exc):  # this machine cannot fork: ours, not the job's
                        raise  # the worker fails and its jobs are lost (``crashed``)
                    # its command cannot be run (not found, not executable)
                    self._write_result(key, AttemptEnd.FAILED, None, started,
                                       f"could not start the job: {exc}")
                    remove_dir(workdir)
                    return
        self.running[key] = RunningJob(key, job, proc, started, time.monotonic(),
                                       float(deadline) if deadline is not None else None,
                                       log, verdict, workdir, cwd, stamps)
        self._record_sessions()  # no status write: the coordinator knows what it assigned

    def _waits_for_zygote(self, key: str, job: JobSpec) -> bool:
        """The zygote is starting and would run this job: it waits (forked.py)."""
        if self._zygote_starting() is None:
            return False
        try:
            spec = self._opened(key, job)
        except messages.MessageError:
            return False  # _start reports it
        if spec.stage is not None:
            # a direct job's staging needs no Snakemake: it starts now, in a fresh interpreter
            # when the zygote is not ready (the first job's start is its point)
            return not spec.stage.get("direct")
        return self._chain(spec.argv, job_env(spec)) is not None

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

    def _staged(self, key: str, job: JobSpec) -> tuple[list[str], float | None, Path, Path]:
        """Hand a staged job to ``staged_job`` in a directory of its own on this disk (0700,
        removed when the job ends: its spec holds the job's opened command and environment,
        secrets and all); the wrapper's command, its deadline, its verdict and its home. A
        direct job's home is on the work disk, where its own snakemake would have worked
        (``_start``): its files fill that disk, and a broken one fails the worker, as they
        would without it."""
        stage = job.stage or {}
        home = private_dir(self.scratch / ("work" if stage.get("direct") else "jobs") / key)
        spec = home / STAGED_SPEC
        if stage.get("direct"):  # a direct job's deadline: its command's, killed by staged_job
            stage = {**stage, "timelimit": job.deadline_s}
            (home / "root").mkdir(mode=0o700, exist_ok=True)  # where its line runs
        write_private(spec, json.dumps({"argv": job.argv, "cwd": job.cwd, "env": job.env,
                                        "stage": stage, "bucket": self.bucket.url,
                                        "worker": self.worker_id}).encode())
        limit = stage.get("timelimit")
        deadline = float(limit) + STAGED_SLACK_S if limit else None
        return [sys.executable, "-m", "expo_executor.worker.staged_job", str(spec)], deadline, \
            verdict_path(spec), home


def job_env(job: JobSpec) -> dict[str, str]:
    """A job's environment: the worker's, without its key, with the job's own on top."""
    env = {**os.environ, **{str(k): str(v) for k, v in job.env.items()}}
    env.pop(WORKER_KEY_ENV, None)  # jobs never see the worker's key
    # Jobs find the worker's own Python environment first (Snakemake's remote command says
    # plain "python -m snakemake": on a VM that must be the pinned environment).
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env
