"""What the coordinator does with the scheduler's events: cancellations go into the VMs'
inboxes, outcomes become reports (handed to the front end, then recorded in ``jobs.jsonl``), a
timeout joins its family's frontier (kept for later runs), and a re-queued job is logged.

The log says each timeout once, with what it pruned, before any of the skips it caused is
reported: the skips are that line's summary (each one's detail is in ``jobs.jsonl``); jobs
skipped on arrival by an earlier run's timeout get one line per dominating timeout. The recent
timeouts are kept for the run's status (``core.run_status``).

The scheduler has taken an outcome in by the time it is reported, so the report must not be
lost to an I/O error after that: it goes to the front end in memory first, and the local
records are written through a :class:`~.persist.Persister`, which keeps and retries what fails.
"""

from __future__ import annotations

import collections
import dataclasses
import time
from typing import Callable

from expo_executor.coordinator import harvest, outcomes
from expo_executor.coordinator.desk import JobDesk
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.requests import JobReport, JobRequest
from expo_executor.coordinator.runtime_models import ModelBook
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.saved_logs import LogFetcher
from expo_executor.coordinator.state import StateDir
from expo_executor.coordinator.vms import VmFleet
from expo_executor.core.hardness import FrontierPoint
from expo_executor.core.run_status import (MAX_TIMEOUTS, ModelSkipNote, TimeoutNote,
                                           timeout_line)
from expo_executor.core.scheduler import (Cancel, Confirming, Event, Finished, ModelSkipped,
                                          Outcome, Requeued, Scheduler, Skipped, Unconfirmed)
from expo_executor.protocol.records import WorkerResult


class Reporter:
    """Acts on scheduler events for one run; ``requests`` is the run's every job, by key."""

    def __init__(self, requests: dict[str, JobRequest], scheduler: Scheduler, vms: VmFleet,
                 files: RunFiles, desk: JobDesk, state: StateDir, run_id: str,
                 log: Callable[[str], None], logs: LogFetcher | None = None,
                 persist: Persister | None = None) -> None:
        self.requests = requests
        self.scheduler = scheduler
        self.vms = vms
        self.files = files
        self.desk = desk
        self.state = state
        self.run_id = run_id
        self.log = log
        self.logs = logs
        self.persist = persist or Persister(log)
        # where a cancel for a worker not of this run goes (the coordinator's adopted runs)
        self.elsewhere: Callable[[Cancel], None] = lambda event: None
        # told of every report as it goes to the front end, with its job's label (notices)
        self.on_report: Callable[[JobReport, str], None] = lambda report, label: None
        # told of the USD of each result's staged files moved across regions (the meter)
        self.on_egress: Callable[[float], None] = lambda usd: None
        self.adopted_from: dict[str, str] = {}  # job -> the adopted run it ran in (adopt.py)
        self.timeouts: collections.deque[TimeoutNote] = collections.deque(maxlen=MAX_TIMEOUTS)
        self._arrivals: collections.Counter[str] = collections.Counter()  # dominator -> jobs
        # the run's runtime models (coordinator/runtime_models.py), when it has them
        self.models: ModelBook | None = None
        self.model_skips: collections.deque[ModelSkipNote] = \
            collections.deque(maxlen=MAX_TIMEOUTS)
        self._model_skipped = 0  # since the last say_model_skips

    def handle(self, events: list[Event], result: WorkerResult | None = None) -> None:
        """Act on ``events``; ``result``: the worker's result that caused them, if any."""
        self._summarize(events, result)
        for event in events:
            if isinstance(event, Cancel):
                vm = self.vms.get(event.worker_id)
                if vm is None:  # a worker of an adopted run's (adopt.py)
                    self.elsewhere(event)
                else:
                    vm.places.scheduler_cancels(event.key)
            elif isinstance(event, Skipped):
                mine = result if result and result.key == event.key else None
                self.report(outcomes.skipped(event, mine), mine, event.dominator)
            elif isinstance(event, Finished):
                self._finish(event, result)
            elif isinstance(event, ModelSkipped):
                self._model_skip(event)
            elif isinstance(event, Confirming):
                self.log(f"expocloud: {self.scheduler.task(event.key).label} timed out on "
                         f"{event.worker_id}; running it once more on another, idle worker "
                         "before its timeout prunes anything (--expocloud-confirm-timeouts)")
            elif isinstance(event, Unconfirmed):
                self.log(f"expocloud: {self.scheduler.task(event.key).label}: no other worker "
                         "to confirm its timeout on; it stands unconfirmed")
            elif isinstance(event, Requeued):
                where = " (on-demand only from now on)" if event.on_demand_only else ""
                self.log(f"expocloud: re-queued {self.scheduler.task(event.key).label} "
                         f"from lost worker {event.worker_id}{where}")

    def _summarize(self, events: list[Event], result: WorkerResult | None) -> None:
        """One log line per timeout, with the queued jobs it skipped and the running ones it
        cancelled (a timeout's ``harder`` consequences follow it in the list, as the scheduler
        returns them). Jobs skipped on arrival are counted for :meth:`say_arrivals`."""
        for index, event in enumerate(events):
            if isinstance(event, Finished) and event.outcome is Outcome.TIMEOUT:
                tail = events[index + 1:index + 1 + event.harder]
                mine = result if result and result.key == event.key else None
                self._timed_out(event.key, mine, sum(isinstance(e, Skipped) for e in tail),
                                sum(isinstance(e, Cancel) for e in tail))
        # skips at submission only: a held job its worker never started (also a skip neither
        # killed nor in this list's consequences) was counted in its timeout's line
        self._arrivals.update(event.dominator.label for event in events
                              if isinstance(event, Skipped) and event.on_arrival)

    def say_arrivals(self) -> None:
        """One line per earlier timeout for the jobs it skipped as they were taken in (called
        once the round's new jobs are all in)."""
        for label, count in self._arrivals.items():
            self.log(f"expocloud: skipped {count} job{'s' if count != 1 else ''} on arrival: "
                     f"as hard as or harder than {label}, which timed out in an earlier run")
        self._arrivals.clear()

    def _model_skip(self, event: ModelSkipped) -> None:
        request = self.requests[event.key]
        self.model_skips.append(ModelSkipNote(
            request.task.label, event.probability, event.rule.above,
            outcomes.finite(event.prediction.median_s),
            request.spec.deadline_s, time.time(), event.rule.setting))
        self._model_skipped += 1
        self.report(outcomes.model_skipped(event, request), None)

    def say_model_skips(self) -> None:
        """One line for the round's model skips (each one's detail is in ``jobs.jsonl`` and
        its sentence in the front end's error)."""
        if self._model_skipped:
            last = self.model_skips[-1]
            self.log(f"expocloud: model-skipped {self._model_skipped} job"
                     f"{'s' if self._model_skipped != 1 else ''}: each at or above its "
                     f"threshold of passing its deadline (the last: {last.label}, "
                     f"{last.setting} {last.skip_above:g})")
            self._model_skipped = 0

    def _timed_out(self, key: str, result: WorkerResult | None, pruned: int,
                   cancelled: int) -> None:
        request = self.requests[key]
        if result is None:  # an unconfirmed timeout, pruning later: it ran to its deadline
            ran = request.spec.deadline_s
        else:
            ran = result.timed_s
        hardness = request.meta.hardness
        note = TimeoutNote(
            request.task.label, ", ".join(
                f"{dim}={request.meta.wildcards.get(dim, value)}"
                for dim, value in zip(hardness.dims, hardness.vector)) if hardness else "",
            ran or 0.0, request.spec.deadline_s, pruned, cancelled, time.time())
        self.timeouts.append(note)
        self.log(timeout_line(note))

    def _finish(self, event: Finished, result: WorkerResult | None) -> None:
        request = self.requests[event.key]
        self.report(outcomes.finished(event, request, result), result)
        if event.outcome is Outcome.TIMEOUT and request.family is not None \
                and request.task.point is not None:
            family, point, label = request.family, request.task.point, request.task.label
            self.persist.write(
                f"the timeout of {label} to its frontier",
                lambda: self.state.add_timeout(family, point, label, self.run_id),
                {"frontier": family.key, "vector": list(point.vector), "label": label})

    def submitted(self, request: JobRequest) -> None:
        """Record the job in ``submitted.jsonl`` as it is taken in: should the coordinator
        die, a rerun can act on its result without this request (harvest.py)."""
        record = harvest.submission(request)
        self.persist.write(f"the submission of {request.task.key} in submitted.jsonl",
                           lambda: self.files.append_submitted(record), record)

    def assigned(self, key: str, worker: str) -> None:
        """Record in ``assigned.jsonl`` that ``worker`` was given job ``key``, before its inbox
        says so: a rerun takes a crashed run's result of a job only from a worker it was given
        to (a worker can sign any result, but only as itself)."""
        record = {"key": key, "worker": worker}
        self.persist.write(f"the assignment of {key} to {worker} in assigned.jsonl",
                           lambda: self.files.append_assigned(record), record)

    def harvested(self, request: JobRequest) -> None:
        """A job a crashed run solved after its coordinator died, its outputs there (the
        front end checked): reported solved without running, its record saying from where."""
        found = request.harvested
        assert found is not None
        report = JobReport(request.task.key, Outcome.SOLVED,
                           f"solved in {found.runtime_s:.1f} s on {found.worker} of run "
                           f"{found.run_id}, after its coordinator died (harvested: not run "
                           "again)", found.runtime_s, found.worker)
        self.desk.post(report)
        record = {**outcomes.job_record(report, request, None, None, None, 0, time.time(),
                                        self.files.dir),
                  "command_s": found.command_s, "harvested_from": found.run_id,
                  "harvested_key": found.key}
        self.persist.write(f"the record of {report.key} in jobs.jsonl",
                           lambda: self.files.append_job(record), record)

    def fail(self, key: str, message: str) -> None:
        """Fail a job that did not run (to its end), with the sentence saying why."""
        self.report(JobReport(key, Outcome.FAILED, message), None)

    def report(self, report: JobReport, result: WorkerResult | None,
               dominator: FrontierPoint | None = None) -> None:
        """Hand the report to the front end, then record the job's end in ``jobs.jsonl``; the
        logs its worker saved are in the run directory first, when they can be had. The
        request keeps only what the status reads of it (``JobRequest.ended``)."""
        request = self.requests[report.key]
        if self.logs is not None and result is not None and result.key == report.key:
            try:
                logs_dir = self.logs.fetch(result, request.meta, request.log_names)
            except OSError as exc:  # the run directory's disk: the report matters more
                self.log(f"expocloud: cannot copy the saved logs of {report.key}: {exc}")
                logs_dir = None
            if logs_dir is not None:
                report = dataclasses.replace(report, logs_dir=logs_dir)
        self.desk.post(report)
        self.on_report(report, request.task.label)
        if result is not None and result.staged.total:
            self.on_egress(self.vms.staged_egress_usd(result.worker, result.staged.total))
        pool = self.vms.pool_of.get(report.worker) if report.worker else None
        prediction = self.models.predictions.get(report.key) if self.models else None
        record = outcomes.job_record(report, request, result, dominator, pool,
                                     self.scheduler.preemptions(report.key), time.time(),
                                     self.files.dir, prediction)
        if report.key in self.adopted_from:  # its worker was the adopted run's, not ours
            record["adopted_from"] = self.adopted_from[report.key]
        self.persist.write(f"the record of {report.key} in jobs.jsonl",
                           lambda: self.files.append_job(record), record)
        self.requests[report.key] = request.ended()  # its command is no longer needed
