"""``expocloud simulate``: the real scheduler and fleet policy under simulated time.

A discrete-event simulation with no threads and no sleeping: an event heap of what happens on
the "VMs" (a VM finished booting, a job ended, a job was killed, a Spot VM was preempted) and a
simulated clock. The coordinator's round is mirrored, not re-implemented: it ticks every
``poll`` seconds, but only when something happened (ticks with nothing to see are skipped), and
each round does what ``Coordinator.tick`` does, in the same order and with the same pure code:
take in ready workers (``Scheduler.add_worker``), results (``finish``/``cancelled``) and lost
VMs (``remove_worker(preempted=True)``); ``assign``; then one ``fleet.decide`` scaling round
(deletes, creates). So a policy compared here is the policy a run would follow.

What is modelled, and how:
- a job starts ``dispatch_s`` after its assignment (the worker reads its inbox) and its result
  is seen at the next tick; a job whose runtime reaches its deadline times out at the deadline;
  a ``Cancel`` (domino effect) kills it ``dispatch_s`` later, seen at the tick after that;
- VM boot delays (constant, lognormal, or resampled from a past run's ``ready - created``);
- Spot lifetimes drawn from the SciSpot bathtub model of the Spot machine type (a VM the model
  lets reach its cap is not preempted: Spot VMs have no cap of their own), or an explicit
  schedule ``{vm_name: seconds after creation}`` (for comparing with a real run);
- stockouts: a create call fails with probability ``stockout``, and that pool does not grow
  for ``CAPACITY_RETRY`` seconds (the coordinator's rule); the names are used up, as there;
- cost: every VM bills from its creation to its deletion or preemption, boot included, with
  GCE's one-minute minimum (``budget.vm_cost``), at its pool's hourly price; at the end of the
  run every VM is deleted.

Not modelled: budgets, ``max_run_duration`` caps, memory, job dependencies (every job is
submitted at the start), priorities, and the storage requests.

Policies (``POLICIES``) are small edits of one configuration and run on the same workload and
seed. The pure core (workloads from records, the simulation, the table) does no I/O; loading a
past run, plotting and the command line are at the bottom.
"""

from __future__ import annotations

import argparse
import heapq
import itertools
import math
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Protocol, Sequence

from expo_executor.core.budget import vm_cost
from expo_executor.core.pool_health import CAPACITY_RETRY
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import AttemptEnd
from expo_executor.core.fleet import WorkerView, decide, pools
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.scheduler import Cancel, Event, Finished, Outcome, Pool, Requeued, Scheduler, Skipped, Task
from expo_executor.coordinator.run_files import read_jsonl


POLICIES = ("on-demand", "spot-naive", "spot-then-od", "hybrid", "vm-per-job")
NAIVE_ATTEMPTS = 10 ** 9  # "unlimited" Spot retries: never moved to on-demand


# -- inputs ---------------------------------------------------------------------------------

class Prices(Protocol):
    """USD per VM-hour (``prices.PriceTable`` fits this)."""

    def hourly(self, machine_type: str, spot: bool) -> float: ...

    def label(self) -> str: ...


@dataclass(frozen=True)
class FixedPrices:
    """Explicit prices, for tests and what-ifs: the same for every machine type."""

    spot: float
    on_demand: float

    def hourly(self, machine_type: str, spot: bool) -> float:
        return self.spot if spot else self.on_demand

    def label(self) -> str:
        return f"fixed prices: Spot ${self.spot:g}/h, on-demand ${self.on_demand:g}/h"


class Lifetimes(Protocol):
    """A Spot VM lifetime model (``preemption.Bathtub`` fits this): hours, and whether the VM
    was preempted (False: it reached the cap and was not)."""

    def sample(self, rng: random.Random) -> tuple[float, bool]: ...


@dataclass(frozen=True)
class BootDelay:
    """Seconds from a VM's creation until its worker says ready.

    ``samples`` (e.g. a past run's ``ready - created``) are resampled when given; else the
    delay is ``mean``, or lognormal with that mean and ``sd`` (boot times are skewed right and
    never negative).
    """

    mean: float
    sd: float = 0.0
    samples: tuple[float, ...] = ()

    def sample(self, rng: random.Random) -> float:
        if self.samples:
            return rng.choice(self.samples)
        if self.sd <= 0 or self.mean <= 0:
            return max(0.0, self.mean)
        sigma2 = math.log(1.0 + (self.sd / self.mean) ** 2)
        return rng.lognormvariate(math.log(self.mean) - sigma2 / 2, math.sqrt(sigma2))

    def text(self) -> str:
        if self.samples:
            return f"resampled from {len(self.samples)} recorded boots"
        return f"{self.mean:g} s" + (f" (lognormal, sd {self.sd:g} s)" if self.sd > 0 else "")


@dataclass(frozen=True)
class SimJob:
    """One job of a workload: how long it would run if nothing stopped it.

    ``runtime_s`` may be ``inf`` (it would never end: it times out at its deadline);
    ``fails``: it exits with an error after ``runtime_s``.
    """

    key: str
    label: str
    runtime_s: float
    deadline_s: float | None = None
    family: str | None = None
    point: HardnessPoint | None = None
    cpus: int = 1
    fails: bool = False

    def task(self) -> Task:
        return Task(self.key, self.label, self.family, self.point, self.cpus)


@dataclass(frozen=True)
class Workload:
    name: str
    jobs: tuple[SimJob, ...]
    note: str = ""  # the assumptions made in building it, printed with the table


@dataclass(frozen=True)
class SimConfig:
    """One policy's run: the coordinator's settings plus the simulated cloud's behaviour."""

    max_workers: int = 10  # VMs of the main pool
    slots: int = 4
    machine_type: str = "e2-standard-4"
    on_demand_machine_type: str | None = None  # None: the same as ``machine_type``
    main_pool: Pool = Pool.SPOT
    max_on_demand: int = 3
    on_demand_min: int = 0
    spot_attempts: int = 2
    straggler_rule: bool = True
    vm_per_job: bool = False  # a fresh VM per job, deleted when its job ends
    poll: float = 2.0  # the coordinator's tick
    idle_timeout: float = 5.0
    dispatch_s: float = 2.0  # assignment (or cancel) -> the worker acts on it
    boot: BootDelay = BootDelay(60.0)
    stockout: float = 0.0  # probability that a Spot create call fails
    stockout_on_demand: float = 0.0
    vm_prefix: str = "w"
    price_scale: float = 1.0  # share of the machine type's price one VM pays (vm-per-job)

    @property
    def od_machine_type(self) -> str:
        return self.on_demand_machine_type or self.machine_type


def policy(name: str, base: SimConfig, job_cpus: int = 1) -> SimConfig:
    """``base`` turned into one of ``POLICIES``.

    - ``on-demand``: one on-demand pool of ``max_workers`` VMs (the same capacity as Spot);
    - ``spot-naive``: Spot only, a preempted job retried on Spot forever, no on-demand pool;
    - ``spot-then-od``: Spot, a job preempted ``spot_attempts`` times moves to the on-demand
      pool; no straggler rule and no reliable core;
    - ``hybrid`` (ours): that, plus the straggler rule and ``on_demand_min`` as configured;
    - ``vm-per-job`` (the googlebatch plugin's way): every job gets a VM of its own, booted
      for it and deleted after it; up to ``max_workers * slots`` such VMs (the same CPUs), each
      sized for one job and priced at ``job_cpus / slots`` of the machine type; Spot, and after
      ``spot_attempts`` preemptions on-demand (our reading of Batch's retry with a fallback:
      Batch itself retries a task on the same provisioning model). Its on-demand pool gets the
      same CPUs as the others' (``max_on_demand * slots`` VMs).
    """
    if name == "on-demand":
        return replace(base, main_pool=Pool.ON_DEMAND, max_on_demand=0, on_demand_min=0,
                       straggler_rule=False)
    if name == "spot-naive":
        return replace(base, main_pool=Pool.SPOT, max_on_demand=0, on_demand_min=0,
                       spot_attempts=NAIVE_ATTEMPTS, straggler_rule=False)
    if name == "spot-then-od":
        return replace(base, main_pool=Pool.SPOT, on_demand_min=0, straggler_rule=False)
    if name == "hybrid":
        return replace(base, main_pool=Pool.SPOT, straggler_rule=True)
    if name == "vm-per-job":
        per_vm = max(1, job_cpus)
        return replace(base, main_pool=Pool.SPOT, vm_per_job=True, slots=per_vm,
                       max_workers=base.max_workers * base.slots // per_vm,
                       max_on_demand=base.max_on_demand * base.slots // per_vm,
                       on_demand_min=0, straggler_rule=False, idle_timeout=0.0,
                       price_scale=per_vm / base.slots)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")


# -- results --------------------------------------------------------------------------------

@dataclass
class SimResult:
    """One policy's run: the figures a comparison needs, and every job's outcome and times
    (seconds from submission)."""

    policy: str
    makespan_s: float
    cost_usd: float
    preemptions: int  # Spot VMs preempted during the run
    requeues: int  # jobs sent back to the queue from a lost VM
    p99_s: float  # 99th percentile of the time from submission to a job's outcome
    vm_hours: dict[str, float]  # pool -> VM-hours
    vms: int  # VMs created
    stockouts: int  # create calls that failed
    rounds: int  # coordinator rounds simulated
    outcomes: dict[str, str]  # job key -> solved / timeout / skipped / failed
    completion_s: dict[str, float] = field(repr=False, default_factory=dict)
    started_s: dict[str, float] = field(repr=False, default_factory=dict)  # last attempt

    def counts(self) -> dict[str, int]:
        counts = {o.value: 0 for o in Outcome}
        for outcome in self.outcomes.values():
            counts[outcome] += 1
        return counts


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that occurred, no interpolation."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]


# -- the simulation -------------------------------------------------------------------------

_READY, _PREEMPT, _END, _KILL, _WAKE = range(5)


@dataclass(eq=False)
class _Run:
    """One attempt of a job on one VM."""

    key: str
    vm: _Vm
    outcome: AttemptEnd  # what its result will say
    alive: bool = True


@dataclass(eq=False)
class _Vm:
    """A simulated VM, as the cloud (``dead``, ``ended``) and the coordinator see it."""

    name: str
    pool: Pool
    created: float
    slots: int
    price_h: float
    ready: bool = False  # the coordinator saw its ready status
    dead: bool = False  # powered off (deleted or preempted)
    tracked: bool = True  # still one of the coordinator's VMs
    ended: float | None = None
    idle_since: float | None = None
    idle_wake: float | None = None
    runs: dict[str, _Run] = field(default_factory=dict)


class _Simulation:
    """One policy on one workload; ``run`` once."""

    def __init__(self, workload: Workload, config: SimConfig, prices: Prices,
                 lifetime: Lifetimes | None, preempt_at: Mapping[str, float] | None,
                 seed: int, name: str) -> None:
        self.jobs = {job.key: job for job in workload.jobs}
        if len(self.jobs) != len(workload.jobs):
            raise ValueError("the workload has duplicate job keys")
        for job in workload.jobs:
            if job.deadline_s is None and not math.isfinite(job.runtime_s):
                raise ValueError(f"job {job.key} would run forever: no deadline, no runtime")
        if config.poll <= 0:
            raise ValueError("the coordinator's poll must be positive")
        self.workload = workload
        self.config = config
        self.name = name
        self.lifetime = lifetime
        self.preempt_at = dict(preempt_at or {})
        self.scheduler = Scheduler(spot_attempts=config.spot_attempts)
        self.fleets = pools(config.main_pool, config.slots, config.max_workers,
                            config.max_on_demand, config.idle_timeout, config.on_demand_min)
        self.price_h = {
            Pool.SPOT: prices.hourly(config.machine_type, True) * config.price_scale,
            Pool.ON_DEMAND: prices.hourly(config.od_machine_type, False) * config.price_scale,
        }
        self.stockout = {Pool.SPOT: config.stockout, Pool.ON_DEMAND: config.stockout_on_demand}
        self.boot_rng = random.Random(f"{seed}:boot")
        self.life_rng = random.Random(f"{seed}:lifetime")
        self.stock_rng = random.Random(f"{seed}:stockout")
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = itertools.count()
        self.vms: dict[str, _Vm] = {}  # the coordinator's VMs, in creation order
        # The fleet's view of every VM, refreshed only for VMs whose load or state changed
        # (what Coordinator._scale recomputes for all of them each round gives the same views).
        self.views: dict[Pool, dict[str, WorkerView]] = {pool: {} for pool in self.fleets}
        self.busy: dict[str, int] = {}
        self.running = self.running_on_spot = 0
        self.dirty: set[str] = set()
        self.all_vms: list[_Vm] = []
        self.counter = 0
        self.no_growth: dict[Pool, float] = {}
        self.stragglers = False
        self.done: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.preemptions = self.requeues = self.stockouts = self.rounds = 0
        # what the coordinator will see at its next tick
        self.seen_ready: list[_Vm] = []
        self.seen_results: list[tuple[str, str, str]] = []
        self.seen_preempted: list[_Vm] = []

    # -- the clock ---------------------------------------------------------------------------
    def _at(self, when: float, kind: int, what: Any = None) -> None:
        heapq.heappush(self.heap, (when, next(self.seq), kind, what))

    def run(self) -> SimResult:
        poll = self.config.poll
        self._at(0.0, _WAKE)
        last = -1
        now = 0.0
        total = len(self.jobs)
        while len(self.scheduler.outcomes) < total:
            if not self.heap:
                counts = self.scheduler.counts()
                raise RuntimeError(f"{self.name}: the simulation is stuck with work left "
                                   f"({counts}); can the pools hold every job?")
            # the next tick at which anything can be seen (never twice at one instant)
            tick = max(math.ceil(self.heap[0][0] / poll - 1e-9), last + 1)
            now = tick * poll
            while self.heap and self.heap[0][0] <= now + 1e-9:
                when, _, kind, what = heapq.heappop(self.heap)
                self._happen(when, kind, what)
            self._round(now, first=last < 0)
            last = tick
        for vm in list(self.vms.values()):  # the run is over: every VM is deleted
            self._end(vm, now)
        return self._result(now)

    def _happen(self, when: float, kind: int, what: Any) -> None:
        """What happens on the VMs, whether or not anyone looks yet."""
        if kind == _READY:
            if not what.dead:
                self.seen_ready.append(what)
        elif kind == _PREEMPT:
            vm: _Vm = what
            if not vm.dead:
                vm.dead = True
                vm.ended = when  # billing stops with the VM
                for run in vm.runs.values():
                    run.alive = False
                vm.runs.clear()
                self.preemptions += vm.pool is Pool.SPOT
                self.seen_preempted.append(vm)
        elif kind in (_END, _KILL):
            run: _Run = what
            if run.alive:
                run.alive = False
                del run.vm.runs[run.key]
                self.seen_results.append((run.key, run.vm.name,
                                          AttemptEnd.CANCELLED if kind == _KILL else run.outcome))

    # -- one coordinator round (Coordinator.tick) --------------------------------------------
    def _round(self, now: float, first: bool) -> None:
        self.rounds += 1
        scheduler = self.scheduler
        if first:
            for job in self.workload.jobs:
                self._handle(scheduler.submit(job.task()), now)
        ready, self.seen_ready = self.seen_ready, []
        for vm in ready:
            if vm.tracked and not vm.ready:
                vm.ready = True
                vm.idle_since = now
                scheduler.add_worker(vm.name, vm.slots, 0, pool=vm.pool)
                self.dirty.add(vm.name)
        results, self.seen_results = self.seen_results, []
        for key, worker, outcome in sorted(results):
            if outcome.outcome is None:  # cancelled
                events = scheduler.cancelled(key)
                if not events and scheduler.state(key) in ("running", "queued"):
                    events = scheduler.remove_worker(worker)
            else:
                events = scheduler.finish(key, outcome.outcome)
            self._handle(events, now)
            self.dirty.add(worker)
            vm = self.vms.get(worker)
            if self.config.vm_per_job and vm is not None and not vm.runs:
                self._delete(vm, now)  # its job is done: so is the VM
        lost, self.seen_preempted = self.seen_preempted, []
        for vm in sorted(lost, key=lambda v: v.name):
            if vm.tracked:
                self._handle(scheduler.remove_worker(vm.name, preempted=True), now)
                self._forget(vm)
        dispatch = self.config.dispatch_s
        for assignment in scheduler.assign(allow_spot=not self.stragglers):
            self._start(self.jobs[assignment.key], self.vms[assignment.worker_id],
                        now + dispatch)
            self.dirty.add(assignment.worker_id)
        if len(scheduler.outcomes) < len(self.jobs):
            self._scale(now)

    def _start(self, job: SimJob, vm: _Vm, start: float) -> None:
        deadline = job.deadline_s if job.deadline_s is not None else math.inf
        if job.runtime_s >= deadline:
            ends, outcome = start + deadline, AttemptEnd.TIMEOUT
        else:
            ends, outcome = (start + job.runtime_s,
                             AttemptEnd.FAILED if job.fails else AttemptEnd.SOLVED)
        run = _Run(job.key, vm, outcome)
        vm.runs[job.key] = run
        self.started[job.key] = start
        self._at(ends, _END, run)

    def _handle(self, events: list[Event], now: float) -> None:
        for event in events:
            if isinstance(event, Cancel):
                vm = self.vms.get(event.worker_id)
                run = vm.runs.get(event.key) if vm else None
                if run is not None:  # the worker kills it when it next reads its inbox
                    self._at(now + self.config.dispatch_s, _KILL, run)
            elif isinstance(event, (Skipped, Finished)):
                self.done[event.key] = now
            elif isinstance(event, Requeued):
                self.requeues += 1

    def _scale(self, now: float) -> None:
        """Coordinator._scale: views of every pool, one ``decide``, then deletes and creates."""
        for name in self.dirty:
            vm = self.vms.get(name)
            if vm is None:
                continue  # gone already
            busy = sum(self.jobs[key].cpus for key in self.scheduler.running_on(name))
            change = busy - self.busy.get(name, 0)
            self.busy[name] = busy
            self.running += change
            self.running_on_spot += change if vm.pool is Pool.SPOT else 0
            if busy:
                vm.idle_since = None
            elif vm.ready and vm.idle_since is None:
                vm.idle_since = now
            if vm.idle_since is not None and vm.idle_wake != vm.idle_since:
                vm.idle_wake = vm.idle_since  # a look when its idle timeout runs out
                self._at(vm.idle_since + self.config.idle_timeout, _WAKE)
            self.views[vm.pool][name] = WorkerView(name, not vm.ready, busy, vm.idle_since)
        self.dirty.clear()
        views = {pool: list(by_name.values()) for pool, by_name in self.views.items()}
        decision = decide(self.scheduler.queued_demand(), views, self.running,
                          self.running_on_spot, now, self.fleets, self.config.main_pool,
                          self.config.straggler_rule)
        again = decision.stragglers != self.stragglers  # assignment changes next round
        self.stragglers = decision.stragglers
        for pool, plan in decision.plans.items():
            for name in plan.delete:
                self._delete(self.vms[name], now)
                again = True  # the pool may grow into the freed room next round
            if plan.create:
                if now >= self.no_growth.get(pool, 0.0):
                    self._create(pool, plan.create, now)
                else:
                    self._at(self.no_growth[pool], _WAKE)
        if again:
            self._at(now + self.config.poll, _WAKE)

    def _create(self, pool: Pool, count: int, now: float) -> None:
        names = []
        for _ in range(count):
            self.counter += 1
            names.append(f"{self.config.vm_prefix}-{self.counter}")
        chance = self.stockout[pool]
        if chance > 0 and self.stock_rng.random() < chance:
            self.stockouts += 1  # every zone out of capacity: ask again later
            self.no_growth[pool] = now + CAPACITY_RETRY
            self._at(self.no_growth[pool], _WAKE)
            return
        for name in names:
            vm = _Vm(name, pool, now, self.config.slots, self.price_h[pool])
            self.vms[name] = vm
            self.all_vms.append(vm)
            self.views[pool][name] = WorkerView(name, True, 0, None)
            self._at(now + self.config.boot.sample(self.boot_rng), _READY, vm)
            if name in self.preempt_at:
                self._at(now + self.preempt_at[name], _PREEMPT, vm)
            elif pool is Pool.SPOT and self.lifetime is not None:
                hours, preempted = self.lifetime.sample(self.life_rng)
                if preempted:
                    self._at(now + hours * 3600.0, _PREEMPT, vm)

    def _delete(self, vm: _Vm, now: float) -> None:
        self._handle(self.scheduler.remove_worker(vm.name), now)
        self._end(vm, now)

    def _forget(self, vm: _Vm) -> None:
        """The coordinator lets go of a VM (deleted, or found preempted)."""
        vm.tracked = False
        self.vms.pop(vm.name, None)
        self.views[vm.pool].pop(vm.name, None)
        busy = self.busy.pop(vm.name, 0)
        self.running -= busy
        self.running_on_spot -= busy if vm.pool is Pool.SPOT else 0

    def _end(self, vm: _Vm, now: float) -> None:
        self._forget(vm)
        if not vm.dead:
            vm.dead = True
            vm.ended = now
            for run in vm.runs.values():
                run.alive = False
            vm.runs.clear()

    def _result(self, makespan: float) -> SimResult:
        hours: dict[str, float] = {}
        cost = 0.0
        for vm in self.all_vms:
            seconds = (vm.ended if vm.ended is not None else makespan) - vm.created
            hours[vm.pool.value] = hours.get(vm.pool.value, 0.0) + seconds / 3600.0
            cost += vm_cost(vm.price_h, seconds)
        return SimResult(
            policy=self.name, makespan_s=makespan, cost_usd=cost, preemptions=self.preemptions,
            requeues=self.requeues, p99_s=percentile(self.done.values(), 99),
            vm_hours=hours, vms=len(self.all_vms), stockouts=self.stockouts,
            rounds=self.rounds,
            outcomes={k: o.value for k, o in self.scheduler.outcomes.items()},
            completion_s=dict(self.done), started_s=dict(self.started))


def simulate(workload: Workload, config: SimConfig, prices: Prices,
             lifetime: Lifetimes | None = None, preempt_at: Mapping[str, float] | None = None,
             seed: int = 0, name: str = "run") -> SimResult:
    """Run ``workload`` under ``config``; ``preempt_at`` preempts the named VMs that many
    seconds after their creation (other Spot VMs follow ``lifetime``, or live on)."""
    return _Simulation(workload, config, prices, lifetime, preempt_at, seed, name).run()


def compare(workload: Workload, base: SimConfig, prices: Prices,
            lifetime: Lifetimes | None = None, policies: Sequence[str] = POLICIES,
            seed: int = 0, preempt_at: Mapping[str, float] | None = None) -> list[SimResult]:
    """Every policy on the same workload and seed."""
    cpus = max((job.cpus for job in workload.jobs), default=1)
    return [simulate(workload, policy(name, base, cpus), prices, lifetime, preempt_at, seed,
                     name) for name in policies]


# -- workloads ------------------------------------------------------------------------------

def synthetic(n: int, seed: int = 0, *, grid: int = 10, instances: int = 10,
              base_s: float = 60.0, growth: float = 1.25, sigma: float = 0.3,
              deadline_s: float = 1200.0) -> Workload:
    """A hardness sweep of ``n`` jobs: scopes of a ``grid`` x ``grid`` hardness grid with
    ``instances`` jobs per point. A job at (a, b) runs ``base_s * growth**(a+b)`` seconds times
    lognormal noise (sd ``sigma`` of the log), so the hard corner passes the deadline, times
    out, and the domino effect skips what lies beyond it.
    """
    rng = random.Random(f"{seed}:synthetic")
    family = f"sweep [a, b; scope: s] @{deadline_s:g}s"
    jobs: list[SimJob] = []
    per_scope = grid * grid * instances
    for scope in range(math.ceil(n / per_scope)):
        for a in range(grid):
            for b in range(grid):
                for i in range(instances):
                    if len(jobs) == n:
                        break
                    runtime = base_s * growth ** (a + b) * rng.lognormvariate(0.0, sigma)
                    jobs.append(SimJob(
                        f"s{scope}-{a}-{b}-{i}", f"sweep {{s={scope}, a={a}, b={b}, i={i}}}",
                        runtime, deadline_s, family, HardnessPoint((str(scope),), (a, b))))
    note = (f"synthetic: {n} jobs, {grid}x{grid} hardness grid x {instances} instances per "
            f"scope, runtime {base_s:g} s x {growth:g}^(a+b) x lognormal(0, {sigma:g}), "
            f"deadline {deadline_s:g} s")
    return Workload(f"synthetic-{n}", tuple(jobs), note)


def workload_from_jobs(records: Sequence[Mapping[str, Any]], name: str = "run",
                       scale: float = 1.0, rule: str | None = None) -> Workload:
    """A past run's ``jobs.jsonl`` records (one per job) as a workload.

    Solved and failed jobs take their recorded ``runtime_s``; timed-out ones would have run
    past their deadline (``inf``). Skipped jobs never ran to their end, so their runtime is
    unknown: we take their deadline, i.e. assume they would time out (which is why they were
    skipped). ``scale`` multiplies runtimes and deadlines (local runs are short; cloud jobs are
    not). Only ``rule``'s jobs, by default those of the rules with a hardness spec
    (``report.select_jobs``); all are submitted at once: dependencies are not modelled.
    """
    from expo_executor.report.results import select_jobs

    jobs: list[SimJob] = []
    assumed = 0
    for record in select_jobs(records, rule):
        deadline = record.get("deadline_s")
        deadline = float(deadline) * scale if isinstance(deadline, (int, float)) else None
        outcome = record.get("outcome")
        runtime = record.get("runtime_s")
        if outcome == "timeout":
            runtime_s = math.inf
        elif outcome in ("solved", "failed") and isinstance(runtime, (int, float)):
            runtime_s = float(runtime) * scale
        else:  # skipped (or no runtime): assume it would time out
            assumed += 1
            runtime_s = deadline if deadline is not None else 0.0
        hardness = record.get("hardness") if isinstance(record.get("hardness"), dict) else None
        rule_name = str(record.get("rule", "job"))
        point = family = None
        if hardness and deadline is not None and isinstance(hardness.get("vector"), list):
            point = HardnessPoint(tuple(str(s) for s in hardness.get("scope") or ()),
                                  tuple(float(v) for v in hardness["vector"]))
            family = f"{rule_name} [{hardness.get('spec')}] @{deadline:g}s"
        wildcards = record.get("wildcards") if isinstance(record.get("wildcards"), dict) else {}
        label = rule_name + (" {" + ", ".join(f"{k}={v}" for k, v in wildcards.items()) + "}"
                             if wildcards else "")
        jobs.append(SimJob(str(record["key"]), label, runtime_s, deadline, family, point,
                           fails=outcome == "failed"))
    note = (f"{len(jobs)} jobs from run {name}, runtimes and deadlines x {scale:g}; "
            f"{assumed} skipped jobs assumed to time out at their deadline")
    return Workload(name, tuple(jobs), note)


def boot_from_vms(records: Sequence[Mapping[str, Any]]) -> BootDelay | None:
    """Boot delays (``ready - created``) recorded in a run's ``vms.jsonl``, if it has them."""
    samples = tuple(float(r["ready"]) - float(r["created"]) for r in records
                    if isinstance(r.get("ready"), (int, float))
                    and isinstance(r.get("created"), (int, float))
                    and r["ready"] >= r["created"])
    if not samples:
        return None
    return BootDelay(sum(samples) / len(samples), samples=samples)


# -- the table ------------------------------------------------------------------------------

def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def table(results: Sequence[SimResult]) -> str:
    """A markdown table, with cost relative to all on-demand when that policy is present."""
    reference = next((r for r in results if r.policy == "on-demand"), None)
    lines = ["| policy | makespan | cost | cost / on-demand | preemptions | re-queued jobs "
             "| p99 completion | VM-h Spot | VM-h on-demand | VMs | solved / timeout / "
             "skipped / failed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        ratio = (f"{r.cost_usd / reference.cost_usd:.3f}x"
                 if reference and reference.cost_usd > 0 else "n/a")
        c = r.counts()
        lines.append(
            f"| {r.policy} | {_duration(r.makespan_s)} | ${r.cost_usd:,.2f} | {ratio} "
            f"| {r.preemptions} | {r.requeues} | {_duration(r.p99_s)} "
            f"| {r.vm_hours.get('spot', 0.0):,.1f} | {r.vm_hours.get('on_demand', 0.0):,.1f} "
            f"| {r.vms} | {c['solved']} / {c['timeout']} / {c['skipped']} / {c['failed']} |")
    return "\n".join(lines)


def ratios(results: Sequence[SimResult]) -> dict[str, float]:
    """The ratios that matter: hybrid's cost and makespan against all on-demand, its p99
    against naive Spot retries, and its makespan against a VM per job."""
    by = {r.policy: r for r in results}
    out: dict[str, float] = {}
    ours = by.get("hybrid")
    if ours is None:
        return out
    pairs = {"cost_vs_on_demand": ("on-demand", "cost_usd"),
             "makespan_vs_on_demand": ("on-demand", "makespan_s"),
             "p99_vs_spot_naive": ("spot-naive", "p99_s"),
             "makespan_vs_vm_per_job": ("vm-per-job", "makespan_s")}
    for name, (other, attr) in pairs.items():
        if other in by and getattr(by[other], attr) > 0:
            out[name] = getattr(ours, attr) / getattr(by[other], attr)
    return out


# -- I/O: past runs, the plot, the command line ---------------------------------------------

def load_run(run_dir: Path, scale: float = 1.0,
             rule: str | None = None) -> tuple[Workload, BootDelay | None]:
    """A past run's workload (``jobs.jsonl``) and its recorded boot delays (``vms.jsonl``)."""
    from expo_executor.report.results import load_jobs

    workload = workload_from_jobs(load_jobs(run_dir), Path(run_dir).name, scale, rule)
    return workload, boot_from_vms(read_jsonl(Path(run_dir) / "vms.jsonl"))


def plot(results: Sequence[SimResult], path: Path, title: str = "") -> None:
    """Bars per policy: makespan, cost, p99 completion time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.policy for r in results]
    panels = [("makespan (h)", [r.makespan_s / 3600 for r in results]),
              ("cost (USD)", [r.cost_usd for r in results]),
              ("p99 completion (h)", [r.p99_s / 3600 for r in results])]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    colours = ["#7f7f7f" if n != "hybrid" else "#2ca02c" for n in names]
    for ax, (label, values) in zip(axes, panels):
        ax.bar(range(len(names)), values, color=colours)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _boot(text: str) -> BootDelay:
    mean, _, sd = text.partition(",")
    return BootDelay(float(mean), float(sd) if sd else 0.0)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Adds ``simulate`` to the ``expocloud`` subcommands."""
    p = sub.add_parser("simulate", help="compare Spot/on-demand policies on a workload under "
                       "simulated time (the real scheduler and fleet code)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", metavar="RUN_ID|DIR",
                        help="the workload of a past run (its jobs.jsonl)")
    source.add_argument("--synthetic", type=int, metavar="N", help="a synthetic sweep of N jobs")
    p.add_argument("--state-dir", type=Path, default=Path(".expocloud"),
                   help="the workflow's state directory (default: .expocloud)")
    p.add_argument("--rule", help="with --run: this rule's jobs (default: rules with hardness)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="with --run: multiply runtimes and deadlines (default: 1)")
    p.add_argument("--vms", type=int, default=10, help="Spot (main pool) VMs at most")
    p.add_argument("--slots", type=int, help="slots per VM (default: the machine's vCPUs)")
    p.add_argument("--machine-type", default=None, help="default: the executor's default")
    p.add_argument("--region", default="us-central1", help="prices of this region")
    p.add_argument("--spot-attempts", type=int, default=2,
                   help="preemptions before a job moves to on-demand")
    p.add_argument("--on-demand-min", type=int, default=0, help="hybrid's reliable core")
    p.add_argument("--max-on-demand", type=int, default=None,
                   help="on-demand VMs at most (default: as a run would: a quarter of --vms)")
    p.add_argument("--boot-s", default=None, metavar="MEAN[,SD]",
                   help="VM boot delay in seconds (default: a --run's recorded boots if it "
                        "has them, else 60,15)")
    p.add_argument("--stockout", type=float, default=0.0, metavar="P",
                   help="probability that a Spot create call finds no capacity")
    p.add_argument("--poll", type=float, default=None, help="coordinator tick (default: GCE's)")
    p.add_argument("--dispatch-s", type=float, default=None,
                   help="assignment to job start (default: the poll)")
    p.add_argument("--idle-timeout", type=float, default=None,
                   help="idle seconds before a VM is deleted (default: the executor's)")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--png", type=Path, default=Path("simulate.png"))
    p.add_argument("--md", type=Path, help="also write the table here")
    return p


def run(args: argparse.Namespace) -> int:
    """Build the workload and the configuration, run every policy, print and plot."""
    from expo_executor.cost import prices as prices_module
    from expo_executor.coordinator import settings
    from expo_executor.cost.preemption import load_models, vcpus
    from expo_executor.report.results import find_run

    for name, value, low in (("--synthetic", args.synthetic, 1), ("--vms", args.vms, 1),
                             ("--slots", args.slots, 1), ("--spot-attempts", args.spot_attempts, 0),
                             ("--on-demand-min", args.on_demand_min, 0),
                             ("--max-on-demand", args.max_on_demand, 0)):
        if value is not None and value < low:
            raise ExpoError(name, f"{value} is below {low}", f"give {low} or more")
    for name, value in (("--scale", args.scale), ("--poll", args.poll)):
        if value is not None and not value > 0:
            raise ExpoError(name, f"{value:g} is not positive", "give a positive number")
    if not 0 <= args.stockout < 1:
        raise ExpoError("--stockout", f"{args.stockout:g} is not a probability below 1",
                        "give P with 0 <= P < 1")
    machine_type = args.machine_type or settings.DEFAULT_MACHINE_TYPE
    slots = args.slots or vcpus(machine_type)
    recorded = None
    if args.run:
        workload, recorded = load_run(find_run(args.state_dir, args.run), args.scale, args.rule)
    else:
        workload = synthetic(args.synthetic, args.seed)
    boot = _boot(args.boot_s) if args.boot_s else recorded or BootDelay(60.0, 15.0)
    poll = args.poll if args.poll is not None else settings.GCE_POLL
    as_run = settings.ExecutorSettings(max_on_demand=args.max_on_demand,
                                       on_demand_min=args.on_demand_min)
    idle = args.idle_timeout if args.idle_timeout is not None else as_run.idle_timeout
    max_od = settings.max_on_demand(as_run, args.vms)
    base = SimConfig(max_workers=args.vms, slots=slots, machine_type=machine_type,
                     max_on_demand=max_od, on_demand_min=args.on_demand_min,
                     spot_attempts=args.spot_attempts, poll=poll, idle_timeout=idle,
                     dispatch_s=args.dispatch_s if args.dispatch_s is not None else poll,
                     boot=boot, stockout=args.stockout)
    price_table = prices_module.load(args.region)
    models = load_models(args.state_dir)
    lifetime = models.for_type(machine_type)
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    results = compare(workload, base, price_table, lifetime, names, args.seed)
    text = "\n".join([
        f"workload: {workload.note}",
        f"{args.vms} VMs x {slots} slots ({machine_type}), up to {max_od} on-demand; "
        f"boot {boot.text()}; poll {poll:g} s; stockout p={args.stockout:g}; seed {args.seed}",
        price_table.label(),
        f"preemption model ({machine_type}): {models.source(machine_type)}",
        "", table(results), ""])
    print(text)
    if args.md:
        Path(args.md).write_text(text)
    plot(results, args.png, workload.name)
    print(f"plot: {args.png}")
    return 0
