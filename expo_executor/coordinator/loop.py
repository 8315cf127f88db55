"""The coordinator: drives the pure scheduler and fleet with what the bucket and engine say.

Front ends (Snakemake, cwltool) hand it ``JobRequest``s and collect ``JobReport``s; a loop thread
does the rest, one round (:meth:`Coordinator.tick`) every poll: take in new jobs, read worker
statuses and results, check the pools' health and the budget, assign, write inboxes, scale the
fleet, fail stranded work, report progress. All scheduler state is touched by the loop thread
only; the front ends talk to it through two locked hand-over points (``submit``, and
``take_report`` / ``wait_reports``).

This module owns the thread and the order of a round; each step's work is a collaborator's:
:mod:`.desk` (the hand-over between threads), :mod:`.channel` (the bucket: statuses, results,
inboxes), :mod:`.vms` (the VMs tracked and their records), :mod:`.pools` (pool health),
:mod:`.meter` (the budget), :mod:`.reports` (scheduler events: reports, job records, cancels),
:mod:`.progress` and :mod:`.snapshot` (the live status and the run page); the decisions are the
core's (``core.scaling.scale``, ``core.pool_health``, ``core.budget``), which the simulator calls
too.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from expo_executor.coordinator.adopt import Adoption, Ended
from expo_executor.coordinator.channel import Channel
from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.crashed_workers import ALIVE
from expo_executor.coordinator.desk import JobDesk
from expo_executor.coordinator.harvest import record_timeout
from expo_executor.coordinator.meter import Meter
from expo_executor.coordinator.outage import GIVE_UP_AFTER, Outage
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.prefetch_depth import PrefetchDepth
from expo_executor.coordinator.pools import PoolWatch
from expo_executor.coordinator.progress import Progress
from expo_executor.coordinator.reports import Reporter
from expo_executor.coordinator.requests import Harvested, JobReport, JobRequest
from expo_executor.coordinator.run_files import RunFiles
from expo_executor.coordinator.run_state import HeldRun
from expo_executor.coordinator.saved_logs import LogFetcher
from expo_executor.coordinator import snapshot
from expo_executor.coordinator.snapshot import JobMap, StartTimes, running_jobs, running_keys
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.coordinator.vms import Vm, VmFleet
from expo_executor.core.budget import Phase
from expo_executor.core.fleet import pools
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.pool_health import CAPACITY_TIMEOUT
from expo_executor.core.records import AttemptEnd, VmEnd, WorkerState
from expo_executor.core.run_status import RunStatus
from expo_executor.core import one_round
from expo_executor.core.scaling import FleetSetup, ScalePlan
from expo_executor.core.scheduler import Assignment, Cancel, Outcome, Pool, Release, Scheduler
from expo_executor.core.shapes import Shape
from expo_executor.cost.cost_report import CostReport, summarize
from expo_executor.engines.base import CreateFailed, Engine
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.records import InboxJob, WorkerResult

# What front ends, launch and settings import from here.
__all__ = ["CAPACITY_TIMEOUT", "GIVE_UP_AFTER",
           "Coordinator", "CoordinatorConfig", "JobReport", "JobRequest"]

HALTING = ("STOPPING", "SUSPENDING")
ADOPTED_GONE_TIMEOUT = 120.0  # s the end of a run waits for an adopted run's VMs to go


class Coordinator:
    """Runs one run: a scheduler, a fleet on one engine, and the bucket between them."""

    def __init__(self, config: CoordinatorConfig, engine: Engine, bucket: Bucket, run_key: bytes,
                 run_dir: Path, state: StateDir, log: Callable[[str], None],
                 scheduler: Scheduler | None = None) -> None:
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
        self.vms = VmFleet(config, self.files, self.persist)
        self.run_key = run_key  # every worker's key derives from it (worker_keys)
        # a GCE engine answers its workers' key requests through the channel (key_channel.py)
        self.channel = Channel(bucket, run_key, log, getattr(engine, "key_grantor", None))
        self.pools = PoolWatch(config, log)
        self.meter = Meter(config.hourly, config.budget, self.fleets, log,
                           config.price if config.shapes is not None else None)
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
        self.reporter.elsewhere = self._cancel_adopted

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
        if self.held_run is not None:
            self.held_run.end()  # nothing of the run lives on: a rerun has nothing to stop
        self.channel.close()
        self._finished = True
        self._progress(time.time(), force=True)
        self.persist.flush()
        self._write_requests()
        if self.config.hourly and not self.files.has_cost():
            report = self.cost_report()
            self.files.write_cost(report.to_dict())
            for line in report.lines():
                self.log(f"expocloud: {line}")

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
            self._wake.wait(self.config.poll)
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
        adopted_error = self._adopted_round(now)
        engine_error = self._watch_engine(now)
        self.pools.check_capacity(self.vms.ready_by_shape(), now)
        self._decide(now)
        self.channel.write_inboxes(self.vms, now)
        # twice a heartbeat: a worker reads it once a heartbeat of silence, and then finds
        # one at most half a heartbeat old (silence stays under 1.5 heartbeats, not 2)
        self.channel.write_pulse(self.vms, now, self.config.heartbeat / 2)
        if engine_error is not None:  # no scaling or stranding on a blind engine
            raise engine_error
        self._scale(now)
        self._check_stranded()
        self._progress(now)
        if adopted_error is not None:
            raise adopted_error

    def _watch_engine(self, now: float) -> Exception | None:
        """What the engine says of the VMs, and the boots that timed out. Its error is
        returned, not raised: while Compute Engine does not answer, the round still assigns
        and writes the pulse through the bucket, so the workers carry on (the round then fails)."""
        try:
            self._check_instances(now)
            self._check_boots(now)
        except Exception as exc:  # noqa: BLE001 - raised again at the end of the round
            return exc
        return None

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

    # -- adopted runs (adopt.py) -------------------------------------------------------------
    def _claim(self, request: JobRequest) -> str | None:
        """The scheduler's id of the adopted worker running this very job, if one is."""
        for adoption in self.adopted:
            worker = adoption.claim(request.identity, request.task.key)
            if worker is not None:
                self.reporter.adopted_from[request.task.key] = adoption.run_id
                self.log(f"expocloud: {request.task.label} is in flight on worker "
                         f"{worker} of the adopted run: its result is used")
                return worker
        return None

    def _cancel_adopted(self, event: Cancel) -> None:
        for adoption in self.adopted:
            if adoption.cancel(event):
                return

    def _adopted_round(self, now: float) -> Exception | None:
        """One round of each adopted run: its workers kept alive, its ended jobs taken in.
        An error is returned (the round then fails), not raised: this run's own work goes on."""
        error = None
        for adoption in list(self.adopted):
            try:
                for end in adoption.round(now):
                    self._adopted_end(adoption, end)
                adoption.settle(now, self.config.heartbeat / 2)  # as the run's own
                if not self.persist.pending():
                    adoption.channel.delete_taken()
            except Exception as exc:  # noqa: BLE001 - raised again at the end of the round
                error = error or exc
                continue
            if adoption.done:
                self.log(f"expocloud: every adopted worker of run {adoption.run_id} is done")
                adoption.close(gone_timeout=0.0)
                self.adopted.remove(adoption)
        return error

    def _adopted_end(self, adoption: Adoption, end: Ended) -> None:
        """An adopted job ended: as any result, when a job of this run stands for it."""
        key, result = end.job.claimed_by, end.result
        if key is None:
            self._unclaimed_end(adoption, end)
        elif result is None:  # its worker went away: what it ran there runs again here
            self.reporter.handle(self.scheduler.remove_worker(
                adoption.worker_id(end.job.worker), preempted=True))
        elif result.end is AttemptEnd.CANCELLED:
            self.reporter.handle(self.scheduler.cancelled(key, result.ran), result)
        else:
            outcome = result.end.outcome
            assert outcome is not None
            self.reporter.handle(self.scheduler.finish(key, outcome), result)

    def _unclaimed_end(self, adoption: Adoption, end: Ended) -> None:
        """An adopted job no job of this run stands for (yet): its solution waits for a
        submission of it, its timeout joins the frontier (as a harvested one would)."""
        job, result = end.job, end.result
        if result is None:
            return
        if result.end is AttemptEnd.SOLVED and job.identity:
            self.harvested[job.identity] = Harvested(adoption.run_id, job.key, result.worker,
                                                     result.runtime_s, result.command_s)
        elif result.end is AttemptEnd.TIMEOUT and not self.scheduler.confirm_timeouts:
            record_timeout(RunFiles(adoption.held.dir), self.state, job.submitted, result,
                           self.config.run_id)
            family, point = job.submitted.get("family"), job.submitted.get("point")
            key = FamilyRef(**family).key if family else None
            if key in self.scheduler.frontiers and point is not None:
                self.reporter.handle(self.scheduler.add_timeout(
                    key, HardnessPoint(tuple(point["scope"]), tuple(point["vector"])),
                    job.submitted.get("label", job.key)))

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

    # -- observe -----------------------------------------------------------------------------
    def _read_statuses(self, now: float) -> None:
        """Take in changed worker statuses: a worker that says it is ready becomes a slot
        holder of the scheduler."""
        for vm, status in self.channel.statuses(self.vms):
            if status is not None and vm.places.releases():
                self._take_released(vm, status.released)
            if status is not None and status.state is WorkerState.READY and not vm.ready:
                vm.ready, vm.ready_at = True, now
                self.pools.vm_ready(vm.pool, vm.shape)
                vm.idle_since = now
                size = self.config.size(vm.shape)
                self.scheduler.add_worker(vm.name, size.slots, size.mem_mb, pool=vm.pool,
                                          shape=vm.shape)

    def _take_released(self, vm: Vm, keys: list[str]) -> None:
        """Held jobs its worker says it gave back unstarted: queued again (or skipped, when
        the domino effect cancelled one meanwhile), and gone from its inbox."""
        for key in vm.places.given_back(keys):
            if self.scheduler.state(key) == "cancelling":
                self.reporter.handle(self.scheduler.cancelled(key, ran=False))
            else:
                self.scheduler.released(key, vm.name)

    def _give_back(self, release: Release) -> None:
        """Ask a held job back from its worker: out of its inbox's jobs, into its release."""
        vm = self.vms.get(release.worker_id)
        if vm is not None:
            vm.places.ask_back(release.key)

    def _read_results(self, workers: set[str], unlisted: bool = False) -> None:
        """Take in the results the round's listing showed (``unlisted``: or not, see
        ``Channel.results``) of the jobs assigned to (or cancelled on) ``workers``."""
        wanted = {(k, vm.name) for vm in self.vms if vm.name in workers for k in vm.places}
        for result in self.channel.results(wanted, unlisted):
            self._take_result(result)

    def _take_result(self, result: WorkerResult) -> None:
        """One attempt ended: the job leaves its VMs' inboxes, and the scheduler hears how."""
        key = result.key
        # A finished job leaves its worker's inbox with the next write (an assignment or a
        # cancel): the worker never runs a key twice, and every write is billed.
        # A re-queued copy still running elsewhere is killed: the first result stands; one
        # asked back that its worker started before it knew ends as any other.
        for vm in self.vms:
            vm.places.ended(key, here=vm.name == result.worker)
        if result.end is AttemptEnd.PREEMPTED:
            self._lose(result.worker, VmEnd.PREEMPTED, "was preempted (its last breath)")
            return
        if result.end is AttemptEnd.LOST:  # the worker crashed: not the job's doing
            self._lose(result.worker, VmEnd.LOST, f"failed ({result.reason})")
            return
        outcome = result.end.outcome
        if outcome is None:  # cancelled
            # Looking again reads every other result of the worker (results are read in key
            # order): a timeout there may be what it was not started for (a held job its
            # worker's own timeout dominates), or a job that ended before the worker stopped.
            events = one_round.take_cancelled(
                self.scheduler, key, result.worker, result.ran,
                lambda: self._read_results({result.worker}, unlisted=True))
        else:
            events = self.scheduler.finish(key, outcome)
            if outcome is Outcome.SOLVED and self.prefetch_depth is not None:
                self.prefetch_depth.observe(result.ended - result.started)
        self.reporter.handle(events, result)

    def _check_instances(self, now: float) -> None:
        """What the engine says: creates that failed, VMs preempted, VMs gone. A VM is gone
        only once a listing showed it (a new VM is listed some time after its insert) or after
        ``listing_grace``; one powered off before it was ready failed its startup."""
        for failure in self.engine.failures():
            self._create_failed(failure, time.time())
        for name in sorted(self.engine.preempted()):
            self._lose(name, VmEnd.PREEMPTED, "was preempted")
        status = {i.name: i.status for i in self.engine.list()}
        for vm in self.vms:
            now_status = status.get(vm.name)
            if now_status in ALIVE:
                vm.listed = True
            elif now_status in HALTING and not vm.ready:
                continue  # powering off: preempted (seen soon) or its startup failed
            elif now_status is not None and not vm.ready:
                self._startup_failed(vm.name, now_status)
            elif vm.listed or now_status is not None \
                    or now - vm.created >= self.config.listing_grace:
                self._lose(vm.name, VmEnd.LOST, "was lost")

    def _startup_failed(self, name: str, status: str) -> None:
        """VM ``name`` is listed but down (``status``) before its worker said ready: its
        startup script halted it. That counts as a failed boot of its pool, with the last
        lines of its startup log, which the script leaves in the bucket."""
        vm = self.vms[name]
        boot_log = self.channel.boot_log(name)
        self.log(f"expocloud: worker {name} is {status} before it reported ready: its startup "
                 f"failed{'; its log ends: ' + boot_log if boot_log else ''}")
        self.pools.startup_failed(vm.pool, vm.shape, boot_log)
        self._drop_unready(name)

    def _lose(self, name: str, end: VmEnd, how: str) -> None:
        """A VM went away under us (preempted, crashed, deleted): its jobs go back to the queue,
        first in line; on Spot that counts as a preemption of each of them."""
        if name not in self.vms:
            return
        # What it reported before it went stands: a job whose result object was written just
        # before its VM died (after this round's listing, too) ended, and must not be
        # re-queued and run a second time.
        self._read_results({name}, unlisted=True)
        if name not in self.vms:  # its last breath said "preempted": handled already
            return
        self.log(f"expocloud: worker {name} {how}; its jobs go back to the queue first")
        self.reporter.handle(self.scheduler.remove_worker(name, preempted=True))
        self._end_vm(name, end)
        self.engine.delete(name)

    def _create_failed(self, failure: CreateFailed, now: float) -> None:
        for name in failure.names:
            self._end_vm(name, VmEnd.NOT_CREATED)
        self.pools.create_failed(failure, now, alive=len(self.vms))

    def _check_boots(self, now: float) -> None:
        """Delete VMs that did not come up in time (the fleet replaces them); the pool watch
        stops a pool whose VMs keep failing to come up."""
        for name in self.pools.check_boots(self.vms.booting(), now):
            self._drop_unready(name)

    def _drop_unready(self, name: str) -> None:
        """Delete a VM that never reported ready (it holds no jobs): it ends "never ready"."""
        self.reporter.handle(self.scheduler.remove_worker(name))
        self._end_vm(name, VmEnd.NEVER_READY)
        self.engine.delete(name)

    # -- decide and act ----------------------------------------------------------------------
    def _decide(self, now: float) -> None:
        """Read the meter, then the round's decisions (``core.one_round.decide``): fail what
        a budget phase change takes back (at ``STOP``, delete every VM), and put what the
        scheduler assigns into the VMs' inboxes; a job given a free slot starts now, as the
        run's status sees it."""
        change = None
        if self.meter.budget is not None:
            queued_work = sum(self.scheduler.queued_demand().values()) > 0
            change = self.meter.read(now, self.vms, queued_work)
        depth = self.prefetch_depth.depth() if self.prefetch_depth is not None else None
        decided = one_round.decide(self.scheduler, self._requests.keys(), change,
                                   self.meter.phase, self._fleet(), self._spot_held, now,
                                   self._stopping.is_set(), depth)
        for taken in decided.withdrawn:
            vm = self.vms.get(taken.worker)
            if vm is not None:
                vm.places.withdraw(taken.key)
            self._fail_for_budget(taken.key)
        if change is not None and change.phase is Phase.STOP:
            for name in self.vms.names():
                self.engine.delete(name)
                self._end_vm(name, VmEnd.DELETED)
        for assignment in decided.assignments:
            self._place(assignment, now)
        for release in decided.releases:
            self._give_back(release)
        # timeouts whose re-run has no worker to run on prune now (--expocloud-confirm-timeouts)
        self.reporter.handle(list(decided.unconfirmed))

    def _place(self, assignment: Assignment, now: float) -> None:
        """An assignment goes into its VM's inbox."""
        request = self._requests[assignment.key]
        vm = self.vms[assignment.worker_id]
        self.reporter.assigned(assignment.key, assignment.worker_id)
        if self.scheduler.state(assignment.key) == "running":
            self.starts.started(assignment.key, now)
        vm.places.assign(assignment.key, InboxJob(
            request.argv, request.cwd, request.env, request.deadline_s, request.task.cpus,
            request.stage, tuple(request.logs), tuple(request.redact),
            prune=self._prune(request)))

    def _fleet(self) -> one_round.Fleet:
        """The VMs as the round's decisions see them (``core.one_round.Fleet``)."""
        booting: dict[Shape | None, int] = {}
        for vm in self.vms:
            if not vm.ready:
                booting[vm.shape] = booting.get(vm.shape, 0) + self.config.size(vm.shape).slots
        return one_round.Fleet(self.setups, self.pools.healths,
                               Counter(vm.pool for vm in self.vms), booting)

    def _prune(self, request: JobRequest) -> dict | None:
        """Where the job's timeout prunes at once, for a worker that holds prefetched jobs:
        it starts none of them that its own timeouts dominate (the coordinator's cancel could
        come after it started them). None when its timeout does not prune at once."""
        task = request.task
        if task.family is None or task.point is None or self.scheduler.confirm_timeouts:
            return None
        return {"family": task.family, "scope": list(task.point.scope),
                "vector": list(task.point.vector)}

    def _scale(self, now: float) -> None:
        """One scaling round (``core.one_round.plan``), then its deletes and creates."""
        if self._stopping.is_set():
            return
        loads = self.vms.loads(self.scheduler.workers(), self.scheduler.queued_by_shape(), now)
        plan = one_round.plan(loads, now, self._fleet(), self.meter.money(self.vms),
                              self.config.price)
        self._stragglers, self._spot_held = plan.stragglers, plan.stragglers_in
        self._act(plan, now)

    def _act(self, plan: ScalePlan, now: float) -> None:
        for growth in plan.pools:
            for name in growth.delete:
                self._delete(name)
            if growth.create:
                self._create(growth.pool, growth.create, now, growth.shape)
        for name in [n for n in self.vms.names() if n in plan.drain]:
            self._delete(name)

    def _create(self, pool: Pool, count: int, now: float, shape: Shape | None = None) -> None:
        names = self.vms.add(pool, count, now, shape)
        self.channel.write_inboxes(self.vms, now)  # before they boot
        try:
            if shape is None:  # the run's own: engines without per-rule machines take this
                self.engine.create(names, pool, self.config.slots_per_worker)
            else:
                self.engine.create(names, pool, self.config.size(shape).slots, shape=shape)
        except CreateFailed as failure:
            self._create_failed(failure, now)

    def _delete(self, name: str) -> None:
        """Delete a VM the run no longer needs; its jobs (if any) go back to the queue."""
        self.reporter.handle(self.scheduler.remove_worker(name))
        self.engine.delete(name)
        self._end_vm(name, VmEnd.DELETED)

    def _end_vm(self, name: str, end: VmEnd) -> None:
        """Stop tracking a VM: its inbox goes, its record is written, its cost is final."""
        ended = time.time()
        vm = self.vms.end(name, end, ended)
        if vm is None:
            return
        self.channel.delete_inbox(name)
        if end is not VmEnd.NOT_CREATED:
            self.meter.vm_ended(vm, ended - vm.created)
            self.pools.vm_ended()

    def _check_stranded(self) -> None:
        """Queued work that no VM alive may run, in pools that cannot grow: fail it now, with
        the reason, rather than wait forever for capacity that will not come
        (``core.one_round.strand``). With no VM of a shape and none of its pools left, the
        shape is stranded: its later jobs fail on arrival."""
        if self._stopping.is_set():
            return
        for stranded in one_round.strand(self.scheduler, self._requests.keys(), self._fleet(),
                                         self.vms.alive_by_shape(), self._stranded):
            reason = stranded.stranding.reason
            if stranded.stranding.whole_run:
                self._stranded[stranded.shape] = reason
            self.log(f"expocloud: failing {len(stranded.keys)} queued job(s): {reason}")
            for key in stranded.keys:
                self._fail_unrunnable(key, reason)

    def _progress(self, now: float, force: bool = False) -> None:
        if not (force or self.progress.due(now)):
            return
        self.progress.report(self.status(now), force)

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
            self.job_map.get(self.scheduler, self._requests, now, force=self._finished))

    # -- failing jobs that will not run -------------------------------------------------------
    def _fail_unrunnable(self, key: str, reason: str | None = None) -> None:
        """Fail a job that will not run: the budget is spent, or no VM can be had."""
        if self.meter.spent_out:
            self._fail_for_budget(key)
            return
        self.reporter.fail(key, f"not run: {reason}")

    def _fail_for_budget(self, key: str) -> None:
        self.reporter.fail(key, self.meter.spent_message())
