"""The coordinator: drives the pure scheduler and fleet with what the bucket and engine say.

Front ends (Snakemake, cwltool) hand it ``JobRequest``s and collect ``JobReport``s; a loop thread
does the rest: reads worker statuses and results from the bucket, feeds them to the scheduler,
writes each worker's inbox (assignments, cancellations, and a heartbeat that keeps the workers'
dead man's switch from firing), and grows or shrinks the fleet. All scheduler state is touched
by the loop thread only; the front ends talk to it through two locked hand-over points.
"""

from __future__ import annotations

import json
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from expo_executor.protocol import messages
from expo_executor.core.budget import BudgetConfig, Phase, affordable, meter_line, phase, vm_cost
from expo_executor.protocol.bucket import Bucket
from expo_executor.cost.cost_report import CostReport, summarize
from expo_executor.engines.base import CreateFailed, Engine
from expo_executor.core.fleet import (BootHistory, Booting, WorkerView, boot_check, booted, decide, pools,
                    stranded, unrunnable)
from expo_executor.core.hardness import FrontierPoint
from expo_executor.core.scheduler import (Cancel, Event, Finished, Outcome, Pool, Requeued, Scheduler, Skipped,
                        Task)
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.coordinator.run_files import read_jsonl
from expo_executor.core.records import AttemptEnd, JobMeta, WorkerState
from expo_executor.protocol.keys import WORKERS_PREFIX, inbox_key, result_key, status_key
from expo_executor.protocol.records import Inbox, InboxJob, WorkerResult, WorkerStatus

RESULTS_BACKSTOP = 5.0  # seconds between reads of every worker's pending results (locally)
GIVE_UP_AFTER = 10.0  # seconds of nothing but failed rounds before the run is failed
CAPACITY_RETRY = 30.0  # seconds before asking again after every zone was out of capacity
BOOT_TIMEOUT = 600.0  # seconds a new VM has to report ready (settings.boot_timeout sets it)
CAPACITY_TIMEOUT = 1800.0  # seconds of stockouts, with no VM in the pool, before it stops


@dataclass
class JobRequest:
    """A job as the front end hands it over: what to run, and how it ranks."""

    task: Task
    argv: list[str]
    cwd: str | None  # None: the worker's own disk (no shared file system)
    env: dict[str, str]
    deadline_s: float | None
    family: FamilyRef | None = None
    meta: JobMeta = JobMeta("")  # rule, wildcards, outputs, hardness: for the run record
    stage: dict | None = None  # a staged command: files and streams (staged_job.py)


@dataclass
class JobReport:
    """How a job ended, with the sentence a user should read."""

    key: str
    outcome: Outcome
    message: str
    runtime_s: float | None = None
    worker: str | None = None
    log_tail: str = ""
    killed: bool = False
    returncode: int | None = None  # the command's exit code, when it ran to its end


@dataclass
class CoordinatorConfig:
    run_id: str
    slots_per_worker: int
    max_workers: int
    worker_mem_mb: int = 0  # memory of every worker for its jobs; 0: not tracked
    idle_timeout: float = 5.0
    poll: float = 0.2
    heartbeat: float = 10.0
    status_interval: float = 10.0
    pool: Pool = Pool.LOCAL  # the main pool: LOCAL, or SPOT in the cloud
    max_on_demand: int = 0  # the on-demand pool (cloud only)
    on_demand_min: int = 0  # on-demand VMs kept while work is left: a reliable core
    straggler_rule: bool = True
    vm_prefix: str = "w"
    # Every pending result is read this often even without a status change (a lost status
    # write); each read is billed on GCS, so the cloud stretches it.
    results_backstop: float = RESULTS_BACKSTOP
    # What VMs cost (empty: not priced, as on the local engine) and which prices said so.
    machine_types: dict[Pool, str] = field(default_factory=dict)
    hourly: dict[Pool, float] = field(default_factory=dict)  # USD per VM-hour
    on_demand_hourly: dict[Pool, float] = field(default_factory=dict)  # same types, on-demand
    prices_label: str = ""
    budget: BudgetConfig | None = None
    max_run_s: float | None = None  # every VM's hard cap (GCE max_run_duration)
    # A VM not ready this long after it was asked for is deleted and replaced; repeated
    # failures stop its pool (fleet.boot_check).
    boot_timeout: float = BOOT_TIMEOUT
    # A pool with no ready VM whose every zone has been out of capacity this long stops
    # growing (its work moves to the other pool, or fails with the reason): never a silent wait.
    capacity_timeout: float = CAPACITY_TIMEOUT


@dataclass
class _Vm:
    name: str
    created: float
    pool: Pool
    ready: bool = False
    ready_at: float | None = None
    idle_since: float | None = None
    jobs: dict[str, InboxJob] = field(default_factory=dict)  # assigned, no result seen yet
    cancel: set[str] = field(default_factory=set)
    status_generation: int | None = None
    inbox_dirty: bool = True
    last_inbox: float = 0.0


class Coordinator:
    """Runs one run: a scheduler, a fleet on one engine, and the bucket between them."""

    def __init__(self, config: CoordinatorConfig, engine: Engine, bucket: Bucket, run_key: bytes,
                 run_dir: Path, state: StateDir, log: Callable[[str], None],
                 scheduler: Scheduler | None = None) -> None:
        self.config = config
        self.engine = engine
        self.bucket = bucket
        self.run_key = run_key
        self.run_dir = run_dir
        self.state = state
        self.log = log
        self.scheduler = scheduler or Scheduler()
        self.fleets = pools(config.pool, config.slots_per_worker, config.max_workers,
                            config.max_on_demand, config.idle_timeout, config.on_demand_min)
        self._stragglers = False  # the straggler rule is in force: nothing new goes on Spot
        self._no_growth: dict[Pool, float] = {}  # pool -> time before which nothing is created
        self._stopped_why: dict[Pool, str] = {}  # pool -> why it may not grow any more
        self._boots: dict[Pool, BootHistory] = {}  # failed boots in a row, per pool
        self._short_since: dict[Pool, float] = {}  # pool -> first stockout since it had a VM
        self._stranded: str | None = None  # why queued work can never run (no VM, no growth)
        self._worker_ops: dict[str, dict[str, int]] = {}  # storage operations workers reported
        self._pool_of: dict[str, Pool] = {}  # every VM of the run, for the run record
        self._lists = 0  # the coordinator's listings, for the request budget
        self._heartbeats = 0  # inbox writes that only kept a worker's dead man's switch quiet
        self._vm_seconds: dict[str, float] = {}  # pool -> VM-seconds of ended VMs
        self._spent_ended = 0.0  # USD of VMs that are gone
        self._phase = Phase.OK
        self._budget_spent = False  # the budget stopped the run: nothing more will run
        self._started = time.time()
        self._requests: dict[str, JobRequest] = {}
        self._submissions: list[JobRequest] = []
        self._withdrawals: list[str] = []
        self._reports: dict[str, JobReport] = {}
        self._lock = threading.Lock()
        self._reported = threading.Condition(self._lock)  # a report arrived
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._vms: dict[str, _Vm] = {}
        self._vm_counter = 0
        self._seq = 0
        self._results_seen: set[tuple[str, str]] = set()
        self._last_results_scan = 0.0
        self._last_progress = 0.0
        self._last_progress_text = ""

    # -- front-end side (any thread) ---------------------------------------------------------
    def submit(self, requests: list[JobRequest]) -> None:
        with self._lock:
            self._submissions.extend(requests)
        self._wake.set()

    def withdraw(self, keys: list[str]) -> None:
        with self._lock:
            self._withdrawals.extend(keys)
        self._wake.set()

    def take_report(self, key: str) -> JobReport | None:
        with self._lock:
            return self._reports.pop(key, None)

    def wait_reports(self, keys: set[str], timeout: float) -> list[JobReport]:
        """Take the reports of any of ``keys``, waiting up to ``timeout`` s for the first."""
        with self._reported:
            self._reported.wait_for(lambda: not keys.isdisjoint(self._reports), timeout)
            return [self._reports.pop(k) for k in keys & self._reports.keys()]

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
        for name in list(self._vms):
            self._end_vm(name, "deleted")
        self._progress(time.time(), force=True)
        self._write_requests()
        if self.config.hourly and not (self.run_dir / "cost.json").exists():
            report = self.cost_report()
            (self.run_dir / "cost.json").write_text(json.dumps(report.to_dict(), indent=1))
            for line in report.lines():
                self.log(f"expocloud: {line}")

    def _write_requests(self) -> None:
        """The run's storage operations and VM time: the inputs of the request budget."""
        record = {"coordinator": dict(getattr(self.bucket, "ops", {})),
                  "coordinator_lists": self._lists, "coordinator_heartbeats": self._heartbeats,
                  "workers": self._worker_ops,
                  "vm_seconds": self._vm_seconds, "run_seconds": time.time() - self._started}
        (self.run_dir / "requests.json").write_text(json.dumps(record, indent=1))

    # -- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        failing_since: float | None = None
        while not self._stopping.is_set():
            try:
                self.tick(time.time())
                failing_since = None
            except Exception as exc:  # never die silently: the run would hang with VMs billing
                if failing_since is None:
                    failing_since = time.monotonic()
                    self.log(f"expocloud: coordinator error (retrying): {traceback.format_exc()}")
                elif time.monotonic() - failing_since >= GIVE_UP_AFTER:
                    self._give_up(exc)
                    return
            self._wake.wait(self.config.poll)
            self._wake.clear()

    def _give_up(self, exc: Exception) -> None:
        """After repeated failures: delete the VMs and fail every open job, loudly, not hang."""
        self.log(f"expocloud: giving up after {GIVE_UP_AFTER:g} s of failed rounds: {exc}")
        self.engine.close()
        with self._lock:
            pending = [r.task.key for r in self._submissions]
            self._submissions = []
        pending += [k for k in self._requests if k not in self.scheduler.outcomes]
        for key in pending:
            with self._lock:
                self._reports[key] = JobReport(key, Outcome.FAILED,
                                               f"the coordinator failed repeatedly: {exc}")
                self._reported.notify_all()

    def tick(self, now: float) -> None:
        """One round: intake, observe, decide, act."""
        self._intake()
        # Workers rewrite their status whenever a job ends, so only the jobs of workers whose
        # status changed can have new results; the backstop covers a status write that failed.
        changed = self._read_statuses(now)
        if now - self._last_results_scan >= self.config.results_backstop:
            self._last_results_scan = now
            changed = set(self._vms)
        self._read_results(changed)
        self._check_instances()
        self._check_boots(now)
        self._check_capacity(now)
        self._meter(now)
        for assignment in ([] if self._phase >= Phase.LIMIT else
                           self.scheduler.assign(allow_spot=not self._stragglers)):
            request = self._requests[assignment.key]
            vm = self._vms[assignment.worker_id]
            vm.jobs[assignment.key] = InboxJob(request.argv, request.cwd, request.env,
                                               request.deadline_s, request.task.cpus,
                                               request.stage)
            vm.inbox_dirty = True
        self._write_inboxes(now)
        self._scale(now)
        self._check_stranded()
        self._progress(now)

    # -- intake ------------------------------------------------------------------------------
    def _intake(self) -> None:
        with self._lock:
            submissions, self._submissions = self._submissions, []
            withdrawals, self._withdrawals = self._withdrawals, []
        for request in submissions:
            key = request.task.key
            self._requests[key] = request
            if self._budget_spent or self._stranded:  # nothing more runs; a dominated task
                events = self.scheduler.submit(request.task)  # is still skipped
                if not events:
                    self.scheduler.withdraw(key)
                    self._fail_unrunnable(key)
                self._handle(events)
                continue
            family = request.task.family
            if family is not None and request.family is not None \
                    and family not in self.scheduler.frontiers:
                self.scheduler.frontiers[family] = self.state.load_frontier(request.family)
            self._handle(self.scheduler.submit(request.task))
        for key in withdrawals:
            worker_id = self.scheduler.withdraw(key)
            if worker_id in self._vms:
                self._vms[worker_id].cancel.add(key)
                self._vms[worker_id].inbox_dirty = True

    # -- observe -----------------------------------------------------------------------------
    def _read_statuses(self, now: float) -> set[str]:
        """Take in changed worker statuses; returns the workers whose status changed."""
        listing = self.bucket.list(WORKERS_PREFIX)
        self._lists += 1
        changed: set[str] = set()
        for name, vm in self._vms.items():
            generation = listing.get(status_key(name))
            if generation is None or generation == vm.status_generation:
                continue
            blob = self.bucket.read(status_key(name))
            if blob is None:
                continue
            vm.status_generation = blob.generation
            changed.add(name)
            try:
                status = WorkerStatus.decode(blob.data, self.run_key)
            except messages.MessageError as exc:
                self.log(f"expocloud: ignoring a malformed status of {name}: {exc}")
                continue
            if status.ops:
                self._worker_ops[name] = status.ops
            if status.state is WorkerState.READY and not vm.ready:
                vm.ready, vm.ready_at = True, now
                self._boots = booted(self._boots, vm.pool)
                vm.idle_since = now
                self.scheduler.add_worker(name, self.config.slots_per_worker,
                                          self.config.worker_mem_mb, pool=vm.pool)
        return changed

    def _read_results(self, workers: set[str]) -> None:
        """Read the result objects of the jobs assigned to (or cancelled on) ``workers``."""
        wanted = {(k, name) for name in workers if name in self._vms
                  for k in (*self._vms[name].jobs, *self._vms[name].cancel)}
        for key, worker in sorted(wanted - self._results_seen):
            blob = self.bucket.read(result_key(key, worker))
            if blob is None:
                continue
            self._results_seen.add((key, worker))
            try:
                result = WorkerResult.decode(blob.data, self.run_key)
            except messages.MessageError as exc:
                self.log(f"expocloud: ignoring a malformed result of {key}: {exc}")
                continue
            if result.key != key or result.worker != worker:
                continue
            # A finished job leaves its worker's inbox with the next write (an assignment or a
            # heartbeat): the worker never runs a key twice, and every write is billed.
            for name, vm in self._vms.items():
                if vm.jobs.pop(key, None) is not None and name != result.worker:
                    vm.cancel.add(key)  # a re-queued copy still running: the first result stands
                    vm.inbox_dirty = True
                elif name == result.worker and key in vm.cancel:
                    vm.cancel.discard(key)
            if result.end is AttemptEnd.PREEMPTED:
                self._lose(result.worker, "preempted", "was preempted (its last breath)")
                continue
            outcome = result.end.outcome
            if outcome is None:  # cancelled
                events = self.scheduler.cancelled(key)
                if not events and self.scheduler.state(key) in ("running", "queued"):
                    # killed for another reason (its worker is stopping): run it elsewhere
                    events = self.scheduler.remove_worker(result.worker)
            else:
                events = self.scheduler.finish(key, outcome)
            self._handle(events, result)

    def _check_instances(self) -> None:
        for failure in self.engine.failures():
            self._create_failed(failure, time.time())
        for name in sorted(self.engine.preempted()):
            self._lose(name, "preempted", "was preempted")
        alive = {i.name for i in self.engine.list()
                 if i.status in ("PROVISIONING", "STAGING", "RUNNING")}
        for name in [n for n in self._vms if n not in alive]:
            self._lose(name, "lost", "was lost")

    def _lose(self, name: str, end: str, how: str) -> None:
        """A VM went away under us (preempted, crashed, deleted): its jobs go back to the queue,
        first in line; on Spot that counts as a preemption of each of them."""
        if name not in self._vms:
            return
        # What it reported before it went stands: a job whose result object was written just
        # before its VM died (the status write that would have sent us looking lost with it)
        # ended, and must not be re-queued and run a second time.
        self._read_results({name})
        if name not in self._vms:  # its last breath said "preempted": handled already
            return
        self.log(f"expocloud: worker {name} {how}; its jobs go back to the queue first")
        self._handle(self.scheduler.remove_worker(name, preempted=True))
        self._end_vm(name, end)
        self.engine.delete(name)

    def _create_failed(self, failure: CreateFailed, now: float) -> None:
        for name in failure.names:
            self._end_vm(name, "not created")
        if failure.stop_growth:
            self._stop_growth(failure.pool, failure.message)
        else:
            self.log(f"expocloud: {failure.message}; asking again in {CAPACITY_RETRY:g} s")
            self._no_growth[failure.pool] = now + CAPACITY_RETRY
            self._short_since.setdefault(failure.pool, now)

    def _stop_growth(self, pool: Pool, why: str) -> None:
        """No more VMs in ``pool`` for the rest of the run; said once, in one line."""
        if self._no_growth.get(pool) != float("inf"):
            self.log(f"expocloud: no more {pool.value} VMs this run: {why}")
            self._stopped_why[pool] = why
        self._no_growth[pool] = float("inf")

    def _stopped_pools(self) -> frozenset[Pool]:
        """The pools that may not grow for the rest of the run (quota, failed boots, no
        capacity for too long)."""
        return frozenset(p for p, until in self._no_growth.items() if until == float("inf"))

    def _check_boots(self, now: float) -> None:
        """Delete VMs that did not come up in time (the fleet replaces them); stop a pool
        whose VMs keep failing to come up (fleet.boot_check decides)."""
        booting = [Booting(name, vm.pool, vm.created) for name, vm in self._vms.items()
                   if not vm.ready]
        decision = boot_check(booting, now, self.config.boot_timeout, self._boots)
        self._boots = decision.history
        for name in decision.timed_out:
            self.log(f"expocloud: worker {name} did not report ready within "
                     f"{self.config.boot_timeout:g} s of its creation (--expocloud-boot-timeout); "
                     "deleting it (replaced while its pool may grow)")
            self._handle(self.scheduler.remove_worker(name))  # not ready: no jobs yet
            self._end_vm(name, "never ready")
            self.engine.delete(name)
        for pool in decision.stop:
            failed = self._boots[pool].failures_in_a_row
            self._stop_growth(pool, (
                f"{failed} VMs in a row never reported ready within "
                f"{self.config.boot_timeout:g} s (--expocloud-boot-timeout); check the image "
                "(--expocloud-gce-image), its startup script, the service account "
                "(--expocloud-gce-service-account) and a VM's worker log (serial console: "
                "gcloud compute instances get-serial-port-output NAME)"))

    def _check_capacity(self, now: float) -> None:
        """Stop a pool that has found no capacity in any zone for ``capacity_timeout`` while it
        had no ready VM: waiting on would be a silent hang. The clock starts at its first
        stockout and starts again once one of its VMs is ready (then the run goes on)."""
        for pool, since in list(self._short_since.items()):
            if any(vm.pool is pool and vm.ready for vm in self._vms.values()):
                del self._short_since[pool]
            elif now - since >= self.config.capacity_timeout:
                del self._short_since[pool]
                machine = self.config.machine_types.get(pool, "its machine type")
                self._stop_growth(pool, (
                    f"no capacity for {machine} in any of its zones for "
                    f"{self.config.capacity_timeout:g} s (--expocloud-capacity-timeout); fix: "
                    "add zones (--expocloud-gce-zones), choose another machine type, or wait "
                    "longer (--expocloud-capacity-timeout never)"))

    def _check_stranded(self) -> None:
        """Queued work that no VM alive may run, in pools that cannot grow: fail it now, with
        the reason, rather than wait forever for capacity that will not come. With no VM at
        all and no pool left, the run is stranded: later jobs fail on arrival."""
        if self._stranded is not None or self._stopping.is_set():
            return
        stopped = self._stopped_pools()
        alive: dict[Pool, int] = {}
        for vm in self._vms.values():
            alive[vm.pool] = alive.get(vm.pool, 0) + 1
        queued = self.scheduler.queued_demand()
        dead = unrunnable(queued, alive, stopped, self.fleets)
        if not dead:
            return
        why = "; ".join(f"{p.value}: {self._stopped_why[p]}" for p in sorted(
            stopped & self.fleets.keys(), key=lambda p: p.value) if p in self._stopped_why)
        why = why or "no pool may grow"
        if stranded(queued, alive, stopped, self.fleets):
            reason = self._stranded = f"no VM is left and no more can be created ({why})"
        else:  # e.g. on-demand is gone while Spot VMs still run: non-preemptible work waits
            reason = f"no VM that may run it is left and no more can be created ({why})"
        keys = [k for k in self._requests if self.scheduler.state(k) == "queued"
                and self.scheduler.demand_pool(k) in dead]
        self.log(f"expocloud: failing {len(keys)} queued job(s): {reason}")
        for key in keys:
            self.scheduler.withdraw(key)
            self._fail_unrunnable(key, reason)

    def _fail_unrunnable(self, key: str, reason: str | None = None) -> None:
        """Fail a job that will not run: the budget is spent, or no VM can be had."""
        if self._budget_spent:
            self._fail_for_budget(key)
            return
        self._report(JobReport(key, Outcome.FAILED, f"not run: {reason or self._stranded}"),
                     None)

    # -- the budget --------------------------------------------------------------------------
    def spent(self, now: float) -> float:
        """USD so far: VMs that are gone, and those alive up to ``now``."""
        return self._spent_ended + sum(vm_cost(self.config.hourly.get(vm.pool, 0.0),
                                               now - vm.created) for vm in self._vms.values())

    def _meter(self, now: float) -> None:
        """Read the meter and act on the budget's phase (no budget: nothing to do)."""
        budget = self.config.budget
        if budget is None:
            return
        spent = self.spent(now)
        cheapest = min(self.config.hourly.get(pool, 0.0) for pool in self.fleets)
        new = phase(self._spent_ended, self._alive(now), cheapest, budget)
        if new is Phase.NO_GROWTH and not self._vms \
                and sum(self.scheduler.queued_demand().values()):
            new = Phase.LIMIT  # no VM, and none affordable: the queued work cannot run
        new = max(new, self._phase)  # money spent is not coming back: phases only advance
        if new is self._phase:
            return
        self._phase = new
        where = f"{meter_line(spent, budget)} (--expocloud-budget)"
        if new is Phase.NO_GROWTH:
            self.log(f"expocloud: budget: {where}: no new VMs from now on")
            return
        if new is Phase.LIMIT and budget.action == "drain":
            self.log(f"expocloud: budget: {where}: draining: running jobs may finish, "
                     "queued jobs will not run")
            keys = [k for k in self._requests if self.scheduler.state(k) == "queued"]
        else:
            self.log(f"expocloud: budget: {where}: cancelling every job and deleting every VM")
            keys = [k for k in self._requests if k not in self.scheduler.outcomes]
            self._phase = Phase.STOP
        self._budget_spent = True
        for key in keys:
            worker = self.scheduler.withdraw(key)
            if worker in self._vms:
                self._vms[worker].jobs.pop(key, None)
            self._fail_for_budget(key)
        if self._phase is Phase.STOP:
            for name in list(self._vms):
                self.engine.delete(name)
                self._end_vm(name, "deleted")

    def _alive(self, now: float) -> list[tuple[float, float]]:
        return [(self.config.hourly.get(vm.pool, 0.0), now - vm.created)
                for vm in self._vms.values()]

    def _affordable(self, pool: Pool, count: int, now: float) -> int:
        """Of ``count`` VMs wanted in ``pool``, how many the budget pays for."""
        if self.config.budget is None:
            return count
        return min(count, affordable(self._spent_ended, self._alive(now),
                                     self.config.hourly.get(pool, 0.0), self.config.budget))

    def _fail_for_budget(self, key: str) -> None:
        budget = self.config.budget
        assert budget is not None
        self._report(JobReport(key, Outcome.FAILED,
                               f"not run to its end: the budget of ${budget.limit_usd:g} is spent "
                               "(raise --expocloud-budget to run it)"), None)

    def cost_report(self, now: float | None = None) -> CostReport:
        """The run's cost so far, from its VM records and job outcomes."""
        now = time.time() if now is None else now
        vms = read_jsonl(self.run_dir / "vms.jsonl")
        alive = [{"pool": vm.pool.value, "created": vm.created, "ended": None, "end": "alive",
                  "machine_type": self.config.machine_types.get(vm.pool, vm.pool.value),
                  "hourly": self.config.hourly.get(vm.pool, 0.0),
                  "on_demand_hourly": self.config.on_demand_hourly.get(vm.pool, 0.0)}
                 for vm in self._vms.values()]
        return summarize(vms + alive, read_jsonl(self.run_dir / "jobs.jsonl"),
                         self.config.prices_label or "not priced", now)

    # -- decide and act ----------------------------------------------------------------------
    def _handle(self, events: list[Event], result: WorkerResult | None = None) -> None:
        for event in events:
            if isinstance(event, Cancel):
                vm = self._vms.get(event.worker_id)
                if vm is not None:
                    vm.cancel.add(event.key)
                    vm.inbox_dirty = True
            elif isinstance(event, Skipped):
                self._report_skip(event, result if result and result.key == event.key else None)
            elif isinstance(event, Finished):
                self._report_finish(event, result)
            elif isinstance(event, Requeued):
                where = " (on-demand only from now on)" if event.on_demand_only else ""
                self.log(f"expocloud: re-queued {self.scheduler.task(event.key).label} "
                         f"from lost worker {event.worker_id}{where}")

    def _report_finish(self, event: Finished, result: WorkerResult | None) -> None:
        request = self._requests[event.key]
        runtime = result.runtime_s if result else None
        worker = result.worker if result else None
        if event.outcome is Outcome.TIMEOUT:
            if request.family is not None and request.task.point is not None:
                self.state.add_timeout(request.family, request.task.point, request.task.label,
                                       self.config.run_id)
            message = (f"timed out after {runtime or 0:.0f} s (deadline {request.deadline_s:g} s); "
                       f"{event.harder} harder combination{'s' if event.harder != 1 else ''} "
                       "will be skipped")
        elif event.outcome is Outcome.SOLVED:
            message = f"solved in {runtime or 0:.1f} s on {worker}"
        else:
            reason = result.reason if result else "unknown reason"
            message = f"failed on worker {worker}: {reason}"
        self._report(JobReport(event.key, event.outcome, message, runtime, worker,
                               result.log_tail if result else "",
                               returncode=result.returncode if result else None), result)

    def _report_skip(self, event: Skipped, result: WorkerResult | None) -> None:
        message = (f"skipped: as hard as or harder than {event.dominator.label}, "
                   "which timed out" + (" (killed while running)" if event.killed else ""))
        self._report(JobReport(event.key, Outcome.SKIPPED, message,
                               result.runtime_s if result else None,
                               result.worker if result else None, killed=event.killed),
                     result, event.dominator)

    def _report(self, report: JobReport, result: WorkerResult | None,
                dominator: FrontierPoint | None = None) -> None:
        request = self._requests[report.key]
        record = {
            "v": 1, "key": report.key, **request.meta.to_dict(), "outcome": report.outcome.value,
            "killed": report.killed, "runtime_s": report.runtime_s, "worker": report.worker,
            "started": result.started if result else None, "ended": time.time(),
            "deadline_s": request.deadline_s, "reason": report.message,
            "dominator": dominator.label if dominator else None,
            "pool": self._pool_of[report.worker].value if report.worker in self._pool_of
            else None,
            "preemptions": self.scheduler.preemptions(report.key),
        }
        with open(self.run_dir / "jobs.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")
        with self._lock:
            self._reports[report.key] = report
            self._reported.notify_all()

    def _write_inboxes(self, now: float) -> None:
        for name, vm in self._vms.items():
            if not (vm.inbox_dirty or now - vm.last_inbox >= self.config.heartbeat):
                continue
            self._seq += 1
            self._heartbeats += not vm.inbox_dirty
            inbox = Inbox(self._seq, name, dict(vm.jobs), sorted(vm.cancel))
            self.bucket.write(inbox_key(name), inbox.encode(self.run_key))
            vm.inbox_dirty = False
            vm.last_inbox = now

    def _scale(self, now: float) -> None:
        if self._stopping.is_set():
            return
        workers = self.scheduler.workers()
        views: dict[Pool, list[WorkerView]] = {pool: [] for pool in self.fleets}
        running = running_on_spot = 0
        for name, vm in self._vms.items():
            cpus, free = workers.get(name, (self.config.slots_per_worker,) * 2)
            busy = cpus - free
            if busy or vm.jobs:
                vm.idle_since = None
            elif vm.ready and vm.idle_since is None:
                vm.idle_since = now
            views[vm.pool].append(WorkerView(name, not vm.ready, busy, vm.idle_since))
            running += busy
            running_on_spot += busy if vm.pool is Pool.SPOT else 0
        stopped = self._stopped_pools()
        decision = decide(self.scheduler.queued_demand(), views, running, running_on_spot, now,
                          self.fleets, self.config.pool, self.config.straggler_rule, stopped)
        self._stragglers = decision.stragglers
        plans = decision.plans
        for pool, decision in plans.items():
            for name in decision.delete:
                self._handle(self.scheduler.remove_worker(name))
                self.engine.delete(name)
                self._end_vm(name, "deleted")
            count = self._affordable(pool, decision.create, now) \
                if self._phase is Phase.OK else 0
            if count and now >= self._no_growth.get(pool, 0.0):
                self._create(pool, count, now)
        if self._phase >= Phase.LIMIT:  # draining: a VM whose jobs ended is only a cost
            for name, vm in list(self._vms.items()):
                if not vm.jobs and not self.scheduler.running_on(name):
                    self._handle(self.scheduler.remove_worker(name))
                    self.engine.delete(name)
                    self._end_vm(name, "deleted")

    def _create(self, pool: Pool, count: int, now: float) -> None:
        names = []
        for _ in range(count):
            self._vm_counter += 1
            name = f"{self.config.vm_prefix}-{self._vm_counter}"
            self._vms[name] = _Vm(name, now, pool)
            self._pool_of[name] = pool
            names.append(name)
        self._write_inboxes(now)  # the first heartbeat, before they boot
        try:
            self.engine.create(names, pool, self.config.slots_per_worker)
        except CreateFailed as failure:
            self._create_failed(failure, now)

    def _end_vm(self, name: str, how: str) -> None:
        vm = self._vms.pop(name, None)
        if vm is None:
            return
        self.bucket.delete(inbox_key(name))
        ended = time.time()
        if how == "lost" and self.config.max_run_s is not None \
                and ended - vm.created >= self.config.max_run_s:
            how = "capped"  # GCE deleted it at max_run_duration
        record = {"name": name, "pool": vm.pool.value, "created": vm.created,
                  "ready": vm.ready_at, "ended": ended, "end": how,
                  "machine_type": self.config.machine_types.get(vm.pool, vm.pool.value),
                  "hourly": self.config.hourly.get(vm.pool, 0.0),
                  "on_demand_hourly": self.config.on_demand_hourly.get(vm.pool, 0.0)}
        if how != "not created":
            self._vm_seconds[vm.pool.value] = \
                self._vm_seconds.get(vm.pool.value, 0.0) + ended - vm.created
            self._spent_ended += vm_cost(record["hourly"], ended - vm.created)
        with open(self.run_dir / "vms.jsonl", "a") as handle:
            handle.write(json.dumps(record) + "\n")

    def _progress(self, now: float, force: bool = False) -> None:
        if not force and now - self._last_progress < self.config.status_interval:
            return
        counts = self.scheduler.counts()
        ready = sum(1 for vm in self._vms.values() if vm.ready)
        booting = len(self._vms) - ready
        status = {**counts, "workers": ready, "booting": booting,
                  "slots": ready * self.config.slots_per_worker, "time": now}
        text = (f"expocloud: {counts['queued']} queued, {counts['running']} running, "
                f"{counts['solved']} solved, {counts['timeout']} timed out, "
                f"{counts['skipped']} skipped, {counts['failed']} failed | "
                f"{ready} workers{f' (+{booting} booting)' if booting else ''}, "
                f"{status['slots']} slots")
        changed = text != self._last_progress_text  # the meter alone is no news
        self._last_progress_text = text
        if self.config.hourly:
            spent = self.spent(now)
            status["cost_usd"] = spent
            text += f" | {meter_line(spent, self.config.budget)}"
        tmp = self.run_dir / ".status.json.tmp"
        tmp.write_text(json.dumps(status))
        tmp.replace(self.run_dir / "status.json")
        if force or changed:
            self.log(text)
        self._last_progress = now

