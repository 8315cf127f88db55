"""What both front ends do the same way, as a template method with one hook.

A front end (Snakemake's executor plugin, cwltool's executor) knows how to read its engine's
job; everything after that is shared here, as cwltool's ``JobExecutor.execute`` shares the
setup around ``run_jobs``: :func:`job_request` builds a job's one spec,
:meth:`FrontEnd.submit_jobs` describes a whole batch first (so a bad annotation stops the
batch before any of it runs), lets the front end register each job with its engine, then hands
the batch to the coordinator, which orders it by hardness.
:meth:`FrontEnd.misfit` checks a job's CPUs and memory against the workers (the rule is
``core.shapes.find_misfit``, which the per-rule machines use too), and
:meth:`FrontEnd.open_run` / :meth:`FrontEnd.close_run` keep ``run.json`` through ``RunFiles``.

It is a mixin, not a base class with an ``__init__``: Snakemake's ``RemoteExecutor`` and
cwltool's ``JobExecutor`` each own construction, and a mixin adds the shared steps without
taking that from them. The subclass sets ``coordinator`` (or overrides :meth:`started`),
``run_files``, ``slots`` and ``worker_mem_mb``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Iterable, Mapping, Sequence

from expo_executor.coordinator.requests import JobRequest
from expo_executor.core.scheduler import Task
from expo_executor.core.shapes import Misfit, find_misfit
from expo_executor.protocol.records import JobSpec, PrunePoint
from expo_executor.frontends.process_exit import skip_exit_collection
from expo_executor.runs.files import RunFiles


def job_request(task: Task, argv: list[str], cwd: str | None, env: dict[str, str],
                deadline_s: float | None, *, stage: dict | None = None,
                logs: Mapping[str, str] | None = None, redact: Sequence[str] = (),
                **more: Any) -> JobRequest:
    """The coordinator's request for one job, its :class:`JobSpec` (what its worker runs)
    built here, once, with the task's CPUs and prune point: it travels unchanged to the
    worker. ``logs``: the
    job's log files, {the path it writes: the name users know it by}; ``more``: the request's
    other fields (family, meta, identity, harvested)."""
    names = dict(logs or {})
    spec = JobSpec(argv, cwd, env, deadline_s, task.cpus, stage, tuple(names), tuple(redact),
                   PrunePoint.of(task.family, task.point))
    return JobRequest(task, spec, log_names=names, **more)


class FrontEnd(ABC):
    """The shared half of a front end; subclasses implement :meth:`describe`."""

    coordinator: Any  # a started coordinator.loop.Coordinator
    run_files: RunFiles
    slots: int  # CPU slots of every worker
    worker_mem_mb: int  # memory of every worker for its jobs; 0: not tracked

    @abstractmethod
    def describe(self, job: Any) -> Any:
        """The coordinator's ``JobRequest`` for one of the engine's jobs; raises the engine's
        own error (with the setting and the fix) when the job cannot run as described."""

    def submitted(self, job: Any, request: Any) -> None:
        """Called for each job once its whole batch is described, before the coordinator
        has it: the engine's own bookkeeping (Snakemake's ``report_job_submission``)."""

    def started(self) -> Any:
        """The coordinator; a front end that starts it lazily overrides this."""
        return self.coordinator

    def submit_jobs(self, jobs: Iterable[Any]) -> list[Any]:
        """Describe every job, then register and submit them together."""
        batch = [(job, self.describe(job)) for job in jobs]
        if not batch:
            return []
        for job, request in batch:
            self.submitted(job, request)
        requests = [request for _, request in batch]
        self.started().submit(requests)
        return requests

    def misfit(self, cpus: int, mem_mb: int) -> Misfit | None:
        """Whether a job of ``cpus`` and ``mem_mb`` fits this run's workers (None: it does)."""
        return find_misfit(cpus, mem_mb, self.slots, self.worker_mem_mb)

    def open_run(self, engine: str, settings: Any, **source: str) -> None:
        """The run's files begin; from now on this process ends without a last garbage
        collection of its (possibly 50,000-job) graph (process_exit.py)."""
        self.run_files.start(engine, settings, **source)
        skip_exit_collection()

    def close_run(self) -> None:
        self.run_files.end()
