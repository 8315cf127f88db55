"""``expocloud simulate``'s engine: the real scheduler and the coordinator's decisions under
simulated time.

A discrete-event simulation with no threads and no sleeping: the simulated cloud
(:mod:`.cloud`) keeps an event heap of what happens on the "VMs" (a VM finished booting, a job
ended, a job was killed, a Spot VM was preempted) and a simulated clock. The coordinator's
round is mirrored, not re-implemented: it ticks every ``poll`` seconds, but only when something
happened or a decision waits for a time (ticks with nothing to see are skipped), and each round
does what ``Coordinator.tick`` does, in the same order and through the same pure functions: take
in ready workers (``Scheduler.add_worker``, ``pool_health.vm_ready``), prefetch's answers
(:mod:`.held_jobs`), finished results (``finish``) and lost VMs
(``remove_worker(preempted=True)``); the boot check and the capacity check
(``pool_health.boot_round``, ``capacity_round``, each shape's); the budget's meter; then the
round itself, one call of ``core.one_round.round_of``: the cancelled results, withdrawals,
assignments with prefetch's ``coming``, one scaling plan over every shape's pools (the fleet
policy, stopped and held pools, the budget) and stranded work, which the simulation then only
carries out. So a policy compared here is the policy a run would follow, and a
simulated run cannot drift from a real one.

What is modelled, and how:
- a job starts ``dispatch_s`` after its assignment (the worker reads its inbox), or, held with
  prefetch (``SimConfig.prefetch``), when a slot of its worker frees; its result
  is seen at the next tick; a job whose runtime reaches its deadline times out at the deadline;
  a ``Cancel`` (domino effect) kills it ``dispatch_s`` later, seen at the tick after that;
- VM boot delays (constant, lognormal, or resampled from a past run's ``ready - created``); a VM
  not ready ``boot_timeout`` s after its creation is deleted and replaced, and failures in a row
  stop its pool, as in a run;
- Spot lifetimes drawn from the SciSpot bathtub model of the Spot machine type (a VM the model
  lets reach its cap is not preempted: Spot VMs have no cap of their own), or an explicit
  schedule ``{vm_name: seconds after creation}`` (for comparing with a real run);
- stockouts: a create call fails with probability ``stockout``, and that pool does not grow for
  ``CAPACITY_RETRY`` seconds; a pool with no ready VM that meets stockouts for
  ``capacity_timeout`` s stops growing; the names are used up, as in a run;
- stopped pools: work no live or growable pool may run fails with the reason (``failed``);
- cost: every VM bills from its creation to its deletion or preemption, boot included, with
  GCE's one-minute minimum (``budget.vm_cost``), at its pool's hourly price; at the end of the
  run every VM is deleted;
- a budget (``SimConfig.budget``): the same meter and phases as a run's; with one, the
  simulation ticks every ``poll`` while VMs are alive, as the meter moves with the clock.

- per-rule machines: a job with a ``shape`` runs only on VMs of that shape, which have a Spot
  and an on-demand pool of their own (``SimConfig.shape_slots`` CPUs each, priced at the shape's
  machine type, no reliable core), scaled in the same round as the run's own.

Not modelled: ``max_run_duration`` caps,
quotas (no create call fails for good), memory, job
dependencies (every job is submitted at the start), priorities, lost or late bucket writes, and the
storage requests. The meter sees a preempted VM's bill end when the VM stopped, a run's
coordinator when it noticed.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Mapping, Sequence

from expo_executor.core import pool_health
from expo_executor.core import one_round
from expo_executor.core.budget import Phase
from expo_executor.core.fleet import Booting, pools
from expo_executor.core.pool_health import PoolHealth
from expo_executor.core.scaling import FleetSetup, ScalePlan
from expo_executor.core.scheduler import (Cancel, Event, Finished, Pool, Requeued, Scheduler,
                                          Skipped)
from expo_executor.core.shapes import Shape, shape_order
from expo_executor.simulate.cloud import WAKE, SimCloud, SimVm
from expo_executor.simulate.held_jobs import HeldJobs
from expo_executor.simulate.policies import POLICIES, SimConfig, policy
from expo_executor.simulate.result import SimResult, percentile
from expo_executor.simulate.sim_meter import SimMeter
from expo_executor.simulate.views import FleetViews
from expo_executor.simulate.workload import Lifetimes, Prices, Workload


def _check(workload: Workload, config: SimConfig) -> None:
    keys = {job.key for job in workload.jobs}
    if len(keys) != len(workload.jobs):
        raise ValueError("the workload has duplicate job keys")
    for job in workload.jobs:
        if job.deadline_s is None and not math.isfinite(job.runtime_s):
            raise ValueError(f"job {job.key} would run forever: no deadline, no runtime")
    if config.poll <= 0:
        raise ValueError("the coordinator's poll must be positive")


class _Simulation:
    """The coordinator's side of one policy on one workload; ``run`` once."""

    def __init__(self, workload: Workload, config: SimConfig, prices: Prices,
                 lifetime: Lifetimes | None, preempt_at: Mapping[str, float] | None,
                 seed: int, name: str) -> None:
        _check(workload, config)
        self.jobs = {job.key: job for job in workload.jobs}
        self.workload = workload
        self.config = config
        self.name = name
        self.cloud = SimCloud(config, prices, lifetime, preempt_at, seed)
        self.scheduler = Scheduler(spot_attempts=config.spot_attempts, prefetch=config.prefetch)
        self.setup = FleetSetup(pools(config.main_pool, config.slots, config.max_workers,
                                      config.max_on_demand, config.idle_timeout,
                                      config.on_demand_min),
                                config.main_pool, config.straggler_rule)
        # every shape's pools: the run's own, and one per per-rule machine (as the coordinator's
        # ``_add_shape``: no reliable core, a shape's VMs live only while its work does)
        self.setups: dict[Shape | None, FleetSetup] = {None: self.setup}
        for shape in sorted({job.shape for job in workload.jobs} - {None}, key=shape_order):
            self.setups[shape] = FleetSetup(
                pools(config.main_pool, config.slots_of(shape), config.max_workers,
                      config.max_on_demand, config.idle_timeout),
                config.main_pool, config.straggler_rule)
        self.healths: dict[Shape | None, PoolHealth] = {shape: PoolHealth()
                                                       for shape in self.setups}
        self.meter = SimMeter(config.budget, min(self.cloud.price_h[pool]
                                                  for pool in self.setup.fleets))
        self.vms: dict[str, SimVm] = {}  # the coordinator's VMs, in creation order
        self.booting: dict[str, SimVm] = {}  # ... of them not ready yet
        self.views = FleetViews(self.scheduler, config.idle_timeout,
                                lambda when: self.cloud.at(when, WAKE))
        # the shapes whose straggler rule is in force
        self.spot_held: frozenset[Shape | None] = frozenset()
        self.stranded: set[Shape | None] = set()  # no VM left, no pool may grow: none runs
        self.done: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.held = HeldJobs(self.scheduler, self.cloud, self.jobs, config.dispatch_s,
                             self.started)
        self.requeues = self.rounds = 0
        self.cancels: list[one_round.Cancelled] = []  # for the next round to take in

    # -- the clock ---------------------------------------------------------------------------
    def run(self) -> SimResult:
        poll = self.config.poll
        self.cloud.at(0.0, WAKE)
        last = -1
        now = 0.0
        while len(self.scheduler.outcomes) < len(self.jobs):
            due = self.cloud.next_event()
            if due is None:
                raise RuntimeError(f"{self.name}: the simulation is stuck with work left "
                                   f"({self.scheduler.counts()}); can the pools hold every job?")
            # the next tick at which anything can be seen (never twice at one instant)
            tick = max(math.ceil(due / poll - 1e-9), last + 1)
            now = tick * poll
            self.cloud.run_until(now)
            self._round(now, first=last < 0)
            last = tick
        for vm in list(self.vms.values()):  # the run is over: every VM is deleted
            self._end(vm, now)
        return self._result(now)

    # -- one coordinator round (Coordinator.tick) --------------------------------------------
    def _round(self, now: float, first: bool) -> None:
        self.rounds += 1
        if first:
            for job in self.workload.jobs:
                self._handle(self.scheduler.submit(job.task()), now)
        self._take_ready(now)
        freed = self.held.take_answers(self.vms, lambda events: self._handle(events, now))
        freed |= self._take_results(now)
        self._take_lost(now)
        # a worker with a cancelled result waits for the round: until it is taken in, the
        # scheduler still runs the cancelled job there
        self.held.promote(self.vms, freed - {c.worker for c in self.cancels}, now)
        self._check_boots(now)
        self._check_capacity(now)
        acts = self._decide(now)
        if len(self.scheduler.outcomes) < len(self.jobs):
            self._scale(acts, now)
        if self.config.budget is not None and self.vms:
            self.cloud.at(now + self.config.poll, WAKE)  # the meter moves with the clock

    def _take_ready(self, now: float) -> None:
        ready, self.cloud.seen_ready = self.cloud.seen_ready, []
        for vm in ready:
            if vm.tracked and not vm.ready:
                vm.ready = True
                vm.idle_since = now
                self.booting.pop(vm.name, None)
                self.healths[vm.shape] = pool_health.vm_ready(self.healths[vm.shape], vm.pool)
                self.scheduler.add_worker(vm.name, vm.slots, 0, pool=vm.pool, shape=vm.shape)
                self.views.touch(vm.name)

    def _take_results(self, now: float) -> set[str]:
        """The results seen: returns the workers they came from (slots freed)."""
        results, self.cloud.seen_results = self.cloud.seen_results, []
        scheduler = self.scheduler
        for key, worker, end in sorted(results):
            if end.outcome is None:  # cancelled: the round takes it in, last
                self.cancels.append(one_round.Cancelled(key, worker, True))
            else:
                self._handle(scheduler.finish(key, end.outcome), now)
            self.views.touch(worker)
            vm = self.vms.get(worker)
            if self.config.vm_per_job and vm is not None and not vm.runs:
                self._delete(vm, now)  # its job is done: so is the VM
        return {worker for _, worker, _ in results}

    def _take_lost(self, now: float) -> None:
        lost, self.cloud.seen_preempted = self.cloud.seen_preempted, []
        for vm in sorted(lost, key=lambda v: v.name):
            if vm.tracked:
                self._handle(self.scheduler.remove_worker(vm.name, preempted=True), now)
                self._forget(vm)

    def _check_boots(self, now: float) -> None:
        """VMs not ready ``boot_timeout`` s after their creation are deleted (and replaced);
        failures in a row stop their pool (``pool_health.boot_round``)."""
        for shape in {vm.shape for vm in self.booting.values()}:
            booting = [Booting(vm.name, vm.pool, vm.created) for vm in self.booting.values()
                       if vm.shape == shape]
            transition = pool_health.boot_round(self.healths[shape], booting, now,
                                                self.config.boot_timeout)
            self.healths[shape] = transition.health
            for name in transition.timed_out:
                self._delete(self.vms[name], now)

    def _check_capacity(self, now: float) -> None:
        for shape, health in self.healths.items():
            if not health.short_since:
                continue
            ready = frozenset(vm.pool for vm in self.vms.values()
                              if vm.ready and vm.shape == shape)
            machines = {Pool.SPOT: self.config.machine_type,
                        Pool.ON_DEMAND: self.config.od_machine_type} if shape is None else \
                {pool: shape.machine_type for pool in Pool}
            self.healths[shape] = pool_health.capacity_round(
                health, ready, now, self.config.capacity_timeout, machines).health

    def _handle(self, events: list[Event], now: float) -> None:
        for event in events:
            if isinstance(event, Cancel):
                vm = self.vms.get(event.worker_id)
                # the worker kills it when it next reads its inbox (or drops it, if held)
                if vm is not None and not self.held.unstarted(event.key, vm, now, None):
                    self.cloud.kill(vm, event.key, now + self.config.dispatch_s)
            elif isinstance(event, (Skipped, Finished)):
                self.done[event.key] = now
            elif isinstance(event, Requeued):
                self.requeues += 1

    # -- decisions (Coordinator._decide) -------------------------------------------------------
    def _decide(self, now: float) -> one_round.Acts:
        """The meter, then the round (``core.one_round.round_of``), and its decisions on the
        jobs carried out: the cancelled results' events; a phase change withdraws (fails) what
        the budget takes back, at ``STOP`` every VM is deleted; then the assignments, each job
        starting ``dispatch_s`` later (or held: :mod:`.held_jobs`)."""
        queued = sum(self.scheduler.queued_demand().values()) > 0 \
            if self.config.budget is not None else False
        change = self.meter.read(now, self.vms, queued)
        cancels, self.cancels = tuple(self.cancels), []
        alive: dict[Shape | None, Counter[Pool]] = {}
        for vm in self.vms.values():
            alive.setdefault(vm.shape, Counter())[vm.pool] += 1
        seen = one_round.Seen(
            self.jobs.keys(), cancels, change, self.meter.phase, self._fleet(), alive,
            self.meter.money(self.vms, self.cloud.price_h),
            {shape: {pool: self.cloud.hourly(pool, shape) for pool in setup.fleets}
             for shape, setup in self.setups.items()},
            lambda: self.views.load(self.vms, now), now, self.spot_held,
            frozenset(self.stranded))
        acts = one_round.round_of(self.scheduler, seen)
        for events in acts.cancelled:
            self._handle(list(events), now)
        decided = acts.decided
        for taken in decided.withdrawn:
            self._withdrawn(taken.key, taken.worker, now)
        self.held.promote(self.vms, {t.worker for t in decided.withdrawn if t.worker}, now)
        if change is not None and change.phase is Phase.STOP:
            for vm in list(self.vms.values()):
                self._delete(vm, now)
        for assignment in decided.assignments:
            self.held.assigned(assignment.key, self.vms[assignment.worker_id], now)
            self.views.touch(assignment.worker_id)
        # what a cancelled result's freed slot starts (after the assignments: started already)
        self.held.promote(self.vms, {c.worker for c in cancels}, now)
        for release in decided.releases:  # a held job asked back for a free slot elsewhere
            self.held.unstarted(release.key, self.vms[release.worker_id], now, release.request)
        return acts

    def _withdrawn(self, key: str, worker: str | None, now: float) -> None:
        """A job that will not run (to its end) fails: the budget, or no VM to be had."""
        if worker is not None:
            self.views.touch(worker)
        self.done[key] = now

    def _fleet(self) -> one_round.Fleet:
        """The VMs as the round's decisions see them: every shape's pools."""
        alive = Counter(vm.pool for vm in self.vms.values())
        booting: dict[Shape | None, int] = {}
        for vm in self.booting.values():
            booting[vm.shape] = booting.get(vm.shape, 0) + vm.slots
        return one_round.Fleet(self.setups, self.healths, alive, booting)

    # -- scaling (Coordinator._scale) ----------------------------------------------------------
    def _scale(self, acts: one_round.Acts, now: float) -> None:
        """The round's plan, its deletes and creates, as the coordinator's; then the stranded
        work fails, as in a run."""
        if acts.plan is not None:
            again = acts.plan.stragglers_in != self.spot_held  # assignment changes next round
            self.spot_held = acts.plan.stragglers_in
            if self._act(acts.plan, now) or again:
                self.cloud.at(now + self.config.poll, WAKE)
        for stranded in acts.stranded:
            if stranded.stranding.whole_run:
                self.stranded.add(stranded.shape)
            for key in stranded.keys:
                self._withdrawn(key, None, now)

    def _act(self, plan: ScalePlan, now: float) -> bool:
        """Deletes and creates; True when VMs were deleted (the pool may grow into the freed
        room next round)."""
        deleted = False
        for growth in plan.pools:
            for name in growth.delete:
                self._delete(self.vms[name], now)
                deleted = True
            if growth.create:
                self._create(growth.pool, growth.create, now, growth.shape)
            if growth.held_until is not None:
                self.cloud.at(growth.held_until, WAKE)
        for vm in [vm for name, vm in self.vms.items() if name in plan.drain]:
            self._delete(vm, now)
            deleted = True
        return deleted

    def _create(self, pool: Pool, count: int, now: float, shape: Shape | None) -> None:
        """Ask the cloud for VMs of ``shape``; a stockout holds the pool back (``pool_health``)
        and a wake-up is due when it may grow again, or when its capacity timeout runs out."""
        created = self.cloud.create(pool, count, self.config.slots_of(shape), now, shape)
        if created is None:
            first = pool not in self.healths[shape].short_since
            health = pool_health.failed_create(self.healths[shape], pool, now, False,
                                               "every zone is out of capacity").health
            self.healths[shape] = health
            held = health.held_until(pool, now)
            if held is not None:
                self.cloud.at(held, WAKE)
            if first and pool in health.short_since:
                self.cloud.at(now + self.config.capacity_timeout, WAKE)
            return
        for vm, ready in created:
            self._track(vm)
            if ready - now >= self.config.boot_timeout:  # a look when it is overdue
                self.cloud.at(now + self.config.boot_timeout, WAKE)

    def _track(self, vm: SimVm) -> None:
        """A new VM of the coordinator's, booting."""
        self.vms[vm.name] = vm
        self.booting[vm.name] = vm
        self.views.add(vm)

    def _delete(self, vm: SimVm, now: float) -> None:
        self._handle(self.scheduler.remove_worker(vm.name), now)
        self._end(vm, now)

    def _end(self, vm: SimVm, now: float) -> None:
        self.cloud.power_off(vm, now)
        self._forget(vm)

    def _forget(self, vm: SimVm) -> None:
        """The coordinator lets go of a VM (deleted, or found preempted): its bill is final."""
        if vm.tracked:
            self.meter.vm_gone(vm)
        vm.tracked = False
        self.vms.pop(vm.name, None)
        self.booting.pop(vm.name, None)
        self.views.drop(vm)

    def _result(self, makespan: float) -> SimResult:
        hours, cost = self.cloud.bill(makespan)
        return SimResult(
            policy=self.name, makespan_s=makespan, cost_usd=cost,
            preemptions=self.cloud.preemptions, requeues=self.requeues,
            p99_s=percentile(self.done.values(), 99), vm_hours=hours,
            vms=len(self.cloud.all_vms), stockouts=self.cloud.stockouts, rounds=self.rounds,
            outcomes={k: o.value for k, o in self.scheduler.outcomes.items()},
            completion_s=dict(self.done), started_s=dict(self.started),
            stopped={p.value + ("" if shape is None else f" ({shape.describe()})"): why
                     for shape, health in self.healths.items()
                     for p, why in health.stopped_why.items()})


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
