"""The coordinator: drives the pure scheduler and fleet with what the bucket and engine say.

Front ends (Snakemake, cwltool) hand it ``JobRequest``s and collect ``JobReport``s; a loop thread
does the rest, one round (:meth:`Coordinator.tick`) every poll: take in new jobs, read worker
statuses and results, check the pools' health and the budget, assign, write inboxes, scale the
fleet, fail stranded work, report progress. All scheduler state is touched by the loop thread
only; the front ends talk to it through two locked hand-over points (``submit``, and
``take_report`` / ``wait_reports``).

This module owns the thread and the order of a round; the round's steps are mixed in, one idea
each: :mod:`.observe` (statuses and results taken in), :mod:`.vm_life` (what the engine says,
boots, creates and deletes), :mod:`.decisions` (the meter, assignments, scaling, stranding, as
``core.one_round`` decides them, which the simulator calls too) and :mod:`.adopted_runs` (a
crashed run's workers taken over); its collaborators: :mod:`.desk` (the hand-over between
threads), :mod:`.channel` (the bucket: statuses, results, inboxes), :mod:`.dropped_vms` (the
objects of the VMs that ended), :mod:`.vms` (the VMs
tracked and their records) and :mod:`.places` (where each job stands on each worker),
:mod:`.pools` (pool health), :mod:`.meter` (the budget), :mod:`.reports` (scheduler events:
reports, job records, cancels), :mod:`.progress` and :mod:`.snapshot` (the live status and the
run page).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Callable

from expo_executor.coordinator.adopt import Adoption
from expo_executor.coordinator.adopted_runs import AdoptedRuns
from expo_executor.coordinator.channel import Channel
from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.decisions import Decisions
from expo_executor.coordinator.desk import JobDesk
from expo_executor.coordinator.dropped_vms import DroppedVms
from expo_executor.coordinator.meter import Meter
from expo_executor.coordinator.notices import Notices
from expo_executor.coordinator.observe import Observe
from expo_executor.coordinator.outage import GIVE_UP_AFTER, Outage
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.prefetch_depth import PrefetchDepth
from expo_executor.coordinator.pools import PoolWatch
from expo_executor.coordinator.progress import Progress
from expo_executor.coordinator.reports import Reporter
from expo_executor.coordinator.runtime_models import ModelBook, ModelFactory
from expo_executor.coordinator.requests import Harvested, JobReport, JobRequest
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.run_state import HeldRun
from expo_executor.coordinator.saved_logs import LogFetcher
from expo_executor.coordinator import snapshot
from expo_executor.coordinator.snapshot import JobMap, StartTimes, running_jobs, running_keys
from expo_executor.coordinator.state import StateDir
from expo_executor.coordinator.vm_life import VmLife
from expo_executor.coordinator.vms import VmFleet
from expo_executor.core.fleet import pools
from expo_executor.core.notices import RunEnd
from expo_executor.core.pool_health import CAPACITY_TIMEOUT
from expo_executor.core.records import VmEnd
from expo_executor.core.remaining import Remaining
from expo_executor.core.run_status import RunStatus
from expo_executor.core.scaling import FleetSetup
from expo_executor.core.scheduler import Outcome, Scheduler
from expo_executor.core.shapes import Shape
from expo_executor.cost.cost_report import CostReport, summarize
from expo_executor.engines.base import Engine
from expo_executor.notify.sender import Notifier
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.bucket_purge import Purged, purge
from expo_executor.protocol.records import WorkerResult

# What front ends, launch and settings import from here.
__all__ = ["CAPACITY_TIMEOUT", "GIVE_UP_AFTER",
           "Coordinator", "CoordinatorConfig", "JobReport", "JobRequest"]

ADOPTED_GONE_TIMEOUT = 120.0  # s the end of a run waits for an adopted run's VMs to go


class Coordinator(Observe, VmLife, Decisions, AdoptedRuns):
    """Runs one run: a scheduler, a fleet on one engine, and the bucket between them."""

    def __init__(self, config: CoordinatorConfig, engine: Engine, bucket: Bucket, run_key: bytes,
                 run_dir: Path, state: StateDir, log: Callable[[str], None],
                 scheduler: Scheduler | None = None, notifier: Notifier | None = None,
                 model_factory: ModelFactory | None = None) -> None:
        self.config = config
        self.engine = engine
        self.bucket = bucket
        self.run_dir = run_dir
        self.state = state
        self.log = log
        self.scheduler = scheduler or Scheduler()
        self.fleets = pools(config.pool, config.slots_per_worker, config.max_workers,
                            config.max_on_demand, config.idle_timeout, config.on_demand_min)
        self.setup = FleetSetup(self.fleets, config.pool, config.straggler_rule)
        # every shape's pools (None: the run's own); a per-rule machine's join on its first job
        self.setups: dict[Shape | None, FleetSetup] = {None: self.setup}
        self.files = RunFiles(run_dir)
        # the run's local records (jobs.jsonl, vms.jsonl, frontiers), written with retries
        self.persist = Persister(log)
        self.vms = VmFleet(config, self.files, self.persist, self.scheduler.place_on)
        self.run_key = run_key  # every worker's key derives from it (worker_keys)
        # a GCE engine answers its workers' key requests through the channel (key_channel.py)
        self.channel = Channel(bucket, run_key, log, getattr(engine, "key_grantor", None))
        self.dropped = DroppedVms(self.channel, log)  # the objects of VMs the run dropped
        # what the user is told unasked (--expocloud-notify): sent off this thread
        self.notices = Notices(config.run_id, notifier, config.stall_after)
        self.pools = PoolWatch(config, log)
        self.pools.on_stop = self.notices.pool_stopped
        self.meter = Meter(config.hourly, config.budget, self.fleets, log,
                           config.price if config.shapes is not None or config.region_hourly
                           else None)
        self.progress = Progress(self.files, config.status_interval, log)
        self.starts = StartTimes()  # when each running job started, for the status
        self._finished = False  # stopped: the last status says so
        self.job_map = JobMap(config.status_interval)
        self.prefetch_depth = PrefetchDepth(config.prefetch_hold_s) \
            if config.prefetch_hold_s is not None else None
        self._stragglers = False  # the straggler rule is in force: nothing new goes on Spot
        self._spot_held: frozenset[Shape | None] = frozenset()  # ... per shape
        # why a shape's queued work can never run (no VM, no growth), per shape
        self._stranded: dict[Shape | None, str] = {}
        self._cancels: list[WorkerResult] = []  # cancelled results, for the round to take in
        self._started = time.time()
        self._requests: dict[str, JobRequest] = {}  # every job of the run, by key
        self.desk = JobDesk()
        self.reporter = Reporter(self._requests, self.scheduler, self.vms, self.files, self.desk,
                                 state, config.run_id, log, LogFetcher(bucket, self.files, log),
                                 self.persist)
        self.outage = Outage(log, config.give_up_after)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        # the run's host-side state (run_state.py): ended once every VM is deleted
        self.held_run: HeldRun | None = None
        # what crashed runs solved after their coordinator died, by stable identity
        # (recover.py): the front end sets JobRequest.harvested from it
        self.harvested: dict[str, Harvested] = {}
        # crashed runs whose live workers and jobs in flight this run took over (adopt.py)
        self.adopted: list[Adoption] = []
        self._hook_reporter(model_factory)

    def _hook_reporter(self, model_factory: ModelFactory | None) -> None:
        """Who hears of the reporter's events: a cancel for an adopted run's worker, each
        report (the notices), each result's staged files moved across regions (the meter),
        and the runtime models (built here from ``model_factory``; None: no model)."""
        self.models = self._models(model_factory)
        self.reporter.elsewhere = self._cancel_adopted
        self.reporter.on_report = self.notices.reported
        self.reporter.on_egress = self.meter.egress

    def _models(self, factory: ModelFactory | None) -> ModelBook | None:
        """One runtime model per family (runtime_models.py), which the scheduler asks (and,
        with ``skip_above``, skips by) and tells of each end; None: no model."""
        if factory is None:
            return None
        book = ModelBook(factory, self.state, self.persist, self.config.skip_above)
        self.scheduler.models = book.models
        self.scheduler.skip_above = self.config.skip_above
        self.reporter.models = book
        return book

    # -- front-end side (any thread) ---------------------------------------------------------
    def submit(self, requests: list[JobRequest]) -> None:
        self.desk.submit(requests)
        self._wake.set()

    def take_report(self, key: str) -> JobReport | None:
        return self.desk.take(key)

    def wait_reports(self, keys: set[str], timeout: float) -> list[JobReport]:
        """Take the reports of any of ``keys``, waiting up to ``timeout`` s for the first."""
        return self.desk.wait(keys, timeout)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="expocloud-coordinator",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the loop and delete every VM of the run; safe to call twice, from any thread."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=30)
        self.engine.close()
        for name in self.vms.names():
            self._end_vm(name, VmEnd.DELETED)
        for adoption in self.adopted:
            try:
                adoption.close(gone_timeout=ADOPTED_GONE_TIMEOUT)
            except Exception as exc:  # noqa: BLE001 - this run's own end must go on
                self.log(f"expocloud: could not stop the workers of adopted run "
                         f"{adoption.run_id} ({type(exc).__name__}: {exc}); they stop "
                         f"themselves within their heartbeat grace, or: expocloud cleanup "
                         f"--run {adoption.run_id}")
        self.adopted = []
        self._purge_bucket()
        if self.held_run is not None:
            self.held_run.end()  # nothing of the run lives on: a rerun has nothing to stop
        self.channel.close()
        self._finished = True
        self._progress(time.time(), force=True)
        if self.models is not None:
            self.models.save()  # for the next run of each family to start from
        self.persist.flush()
        self._write_requests()
        if self.config.hourly and not self.files.has_cost():
            report = self.cost_report()
            self.files.write_cost(report.to_dict())
            for line in report.lines():
                self.log(f"expocloud: {line}")
        self._notify_end(time.time())

    def _notify_end(self, now: float) -> None:
        """The run's end, notified with its summary (once: stop may be called twice); the
        notices still queued are flushed, for at most the sender's flush time."""
        budget = self.config.budget
        counts = {state: n for state, n in self.scheduler.counts().items() if n}
        self.notices.run_end(RunEnd(counts, self.spent(now) if self.config.hourly else None,
                                    budget.limit_usd if budget is not None else None,
                                    round(now - self._started, 1)), now)

    def _purge_bucket(self) -> None:
        """The run is over (a crashed one never gets here: its prefix is what a rerun adopts
        or harvests), so its objects go, unless ``keep_bucket``. Never raises: a left-over
        object must not fail a run at its end; ``expocloud cleanup`` removes it later."""
        if self.config.keep_bucket:
            self.log(f"expocloud: the run's objects stay in {self.bucket.url} "
                     "(--expocloud-keep-bucket)")
            return
        try:
            purged = purge(self.bucket)
        except Exception as exc:  # noqa: BLE001 - see above
            purged = Purged(0, 1, f"{type(exc).__name__}: {exc}")
        if purged.left:
            self.log(f"expocloud: could not delete the run's objects in {self.bucket.url} "
                     f"({purged.left} left; {purged.error}); fix: expocloud cleanup --run "
                     f"{self.config.run_id}")

    def _write_requests(self) -> None:
        """The run's storage operations and VM time: the inputs of the request budget."""
        self.files.write_requests({**self.channel.usage(), "vm_seconds": self.meter.vm_seconds,
                                   "run_seconds": time.time() - self._started})

    def cost_report(self, now: float | None = None) -> CostReport:
        """The run's cost so far, from its VM records and job outcomes."""
        now = time.time() if now is None else now
        return summarize(self.files.vms() + self.vms.alive_records(), self.files.jobs(),
                         self.config.prices_label or "not priced", now)

    def spent(self, now: float) -> float:
        """USD so far: VMs that are gone, and those alive up to ``now``."""
        return self.meter.spent(now, self.vms)

    # -- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stopping.is_set() and self.round(time.time()):
            self._wake.wait(self.poll_now())
            self._wake.clear()

    def round(self, now: float) -> bool:
        """One :meth:`tick`, never dying silently (the run would hang with VMs billing): a
        failed round is tried again next poll, an outage of the coordinator's own storage or
        compute is ridden out (:mod:`.outage`); False once the run has been given up."""
        try:
            self.tick(now)
        except Exception as exc:  # noqa: BLE001 - see above
            if self.outage.round_failed(exc, now):
                self._give_up(exc)
                return False
            return True
        self.outage.round_ok(now)
        return True

    def _give_up(self, exc: Exception) -> None:
        """After a non-transient error repeated for a while: delete the VMs and fail every open
        job, loudly, not hang."""
        self.log(f"expocloud: giving up after {self.outage.give_up_after:g} s of failed "
                 f"rounds: {exc}")
        self.engine.close()
        pending = [r.task.key for r in self.desk.take_submissions()]
        pending += [k for k in self._requests if k not in self.scheduler.outcomes]
        for key in pending:
            self.desk.post(JobReport(key, Outcome.FAILED,
                                     f"the coordinator failed repeatedly: {exc}"))

    def tick(self, now: float) -> None:
        """One round: intake, observe, decide, act."""
        self.persist.retry(now)  # the local records that failed to be written
        self._intake()
        # one listing shows the changed statuses and the new results: only those are read
        self._read_statuses(now)
        self._read_results(set(self.vms.names()))
        if not self.persist.pending():  # every result read has its record on disk
            self.channel.delete_taken()
            self.dropped.sweep(self.vms.names())
        adopted_error = self._adopted_round(now)
        engine_error = self._watch_engine(now)
        self.pools.check_capacity(self.vms.ready_by_shape(), now)
        acts = self._decide(now, blind=engine_error is not None)
        self.channel.write_inboxes(self.vms, now)
        # twice a heartbeat: a worker reads it once a heartbeat of silence, and then finds
        # one at most half a heartbeat old (silence stays under 1.5 heartbeats, not 2)
        self.channel.write_pulse(self.vms, now, self.config.heartbeat / 2)
        if engine_error is not None:  # no scaling or stranding on a blind engine
            raise engine_error
        self._scale(acts, now)
        self._progress(now)
        if adopted_error is not None:
            raise adopted_error

    # -- intake ------------------------------------------------------------------------------
    def _intake(self) -> None:
        for request in self.desk.take_submissions():
            key = request.task.key
            if request.harvested is not None:  # solved by a crashed run: never scheduled
                self.reporter.harvested(request)
                continue
            self._requests[key] = request
            self.reporter.submitted(request)
            shape = request.task.shape
            if shape not in self.setups:
                self._add_shape(shape)
            family = request.task.family
            if family is not None and request.family is not None \
                    and family not in self.scheduler.frontiers:
                self.scheduler.frontiers[family] = self.state.load_frontier(request.family)
            if self.models is not None:
                self.models.take_in(request)
            worker = self._claim(request)
            if worker is not None:  # in flight on a crashed run's worker: not run again
                self.reporter.handle(self.scheduler.adopt(request.task, worker))
                continue
            if self.meter.spent_out or shape in self._stranded:  # nothing more runs; a dominated
                events = self.scheduler.submit(request.task)  # is still skipped
                if not events:
                    self.scheduler.withdraw(key)
                    self._fail_unrunnable(key, self._stranded.get(shape))
                self.reporter.handle(events)
                continue
            self.reporter.handle(self.scheduler.submit(request.task))
        self.reporter.say_arrivals()
        self.reporter.say_model_skips()

    def _add_shape(self, shape: Shape | None) -> None:
        """A per-rule machine's first job: its Spot and on-demand pools, each as large as the
        run's own (no reliable core: a shape's VMs live only while its work does)."""
        config, size = self.config, self.config.size(shape)
        fleets = pools(config.pool, size.slots, config.max_workers, config.max_on_demand,
                       config.idle_timeout)
        self.setups[shape] = FleetSetup(fleets, config.pool, config.straggler_rule)
        if shape is not None:
            prices = ", ".join(f"{pool.value} ${config.price(pool, shape):.4f}/h"
                               for pool in fleets) if config.hourly else "not priced"
            self.log(f"expocloud: pools of {shape.describe()} for jobs that need it "
                     f"({size.slots} slots; {prices})")

    # -- progress ----------------------------------------------------------------------------
    def _progress(self, now: float, force: bool = False) -> None:
        if not (force or self.progress.due(now)):
            return
        if self.models is not None and not force:
            self.models.save(now)  # now and then: a crash loses little of what it learned
        status = self.status(now)
        self.progress.report(status, force)
        self.notices.status(status)

    def status(self, now: float) -> RunStatus:
        """The run's live status (core.run_status): counts, jobs running, pools, timeouts and
        the outcome map so far."""
        ready = self.vms.ready_count()
        running = running_keys(self.scheduler)
        since = self.starts.update((key for key, _ in running), now)
        budget = self.config.budget
        return RunStatus(
            now, self.scheduler.counts(), ready, len(self.vms) - ready,
            ready * self.config.slots_per_worker, self.config.status_interval, self._finished,
            self.spent(now) if self.config.hourly else None,
            budget.limit_usd if budget is not None else None,
            running_jobs(running, self._requests, since),
            snapshot.pools(self.vms, self.meter.ended_by, self.config, now),
            tuple(self.reporter.timeouts),
            self.job_map.get(self.scheduler, self._requests, now, force=self._finished),
            tuple(self.reporter.model_skips), self._estimate(since))

    def _estimate(self, since: Mapping[str, float]) -> Remaining | None:
        """The runtime model's estimate of the jobs queued and running (None: no model), on
        the run's whole fleet at the main pool's price per slot-hour."""
        if self.models is None:
            return None
        now, config = time.time(), self.config
        left = {key: (now - since[key]) if key in since else None for key in self._requests
                if self.scheduler.state(key) in ("queued", "running", "cancelling")}
        slot_hour = config.hourly.get(config.pool, 0.0) / max(1, config.slots_per_worker)
        return self.models.estimate(left, self._requests, config.max_workers
                                    * config.slots_per_worker, slot_hour, now)

    # -- failing jobs that will not run -------------------------------------------------------
