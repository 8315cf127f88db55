"""One decision, one place: the coordinator and the simulator, put in the same situation, take
the same decisions (both call core.one_round): they scale the same way whatever holds a pool
back (a stopped pool, a stockout's no-growth time, the budget), and whatever other shapes' pools
the coordinator has; and with prefetch they hold the same jobs, leaving queued what VMs booting
or still to be created will start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
from expo_executor.coordinator.state import StateDir
from expo_executor.coordinator.vms import Vm
from expo_executor.core import one_round
from expo_executor.core.budget import BudgetConfig, Phase
from expo_executor.core.records import AttemptEnd
from expo_executor.core.pool_health import PoolHealth, failed_create, stop
from expo_executor.core.scheduler import Pool, Scheduler, Task
from expo_executor.core.shapes import Shape
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.frontends.base import job_request
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.records import JobSpec, WorkerResult
from expo_executor.simulate.cloud import SimVm
from expo_executor.simulate.policies import SimConfig
from expo_executor.simulate.simulation import _Simulation
from expo_executor.simulate.workload import FixedPrices, SimJob, Workload

SPOT, OD = Pool.SPOT, Pool.ON_DEMAND
NOW = 1000.0
PRICES = FixedPrices(spot=3.6, on_demand=36.0)
KEYS = "abcdefghij"


@dataclass(frozen=True)
class Situation:
    """VMs (name, pool, the job it runs or None: idle for ``idle_s``), jobs queued, pool
    health, budget and its phase."""

    vms: tuple[tuple[str, Pool, str | None], ...]
    health: PoolHealth = field(default_factory=PoolHealth)
    budget: BudgetConfig | None = None
    phase: Phase = Phase.OK
    queued: int = 5
    idle_s: float = 50.0

    def jobs(self) -> list[str]:
        running = {job for _, _, job in self.vms if job}
        return sorted(running) + [k for k in KEYS if k not in running][:self.queued]


SITUATIONS = {
    "spot held by a stockout": Situation(
        (("old-1", SPOT, None), ("old-2", SPOT, "a")),
        failed_create(PoolHealth(), SPOT, NOW - 5, False, "no capacity").health),
    "spot stopped, none left": Situation(
        (), stop(PoolHealth(), SPOT, "quota").health),
    "the straggler rule hands the tail on-demand": Situation(
        (("old-1", SPOT, "a"),), queued=1),
    "on-demand stopped: no straggler rule": Situation(
        (("old-1", SPOT, "a"),), stop(PoolHealth(), OD, "boots fail").health, queued=1),
    "a budget that pays for two more VMs": Situation(
        (("old-1", SPOT, "a"),), budget=BudgetConfig(0.3, horizon_s=60.0)),
    "a budget past its limit drains": Situation(
        (("old-1", SPOT, None), ("old-2", SPOT, "a"), ("old-3", OD, None)),
        budget=BudgetConfig(0.1), phase=Phase.LIMIT, idle_s=2.0),
}


class RecordingEngine:
    """Creates and deletes on paper, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Pool | None, tuple[str, ...]]] = []

    def create(self, names: list[str], pool: Pool, slots: int) -> None:
        self.calls.append(("create", pool, tuple(names)))

    def delete(self, name: str) -> None:
        self.calls.append(("delete", None, (name,)))

    def list(self) -> list[Instance]:
        return []

    def failures(self) -> list[CreateFailed]:
        return []

    def preempted(self) -> set[str]:
        return set()

    def close(self) -> None:
        pass


def _scheduler(scheduler: Scheduler, situation: Situation) -> None:
    """The same work in either scheduler: a job running on each busy VM, the rest queued."""
    for name, pool, job in situation.vms:
        if job is not None:
            scheduler.add_worker(name, 1, 0, pool=pool)
            scheduler.submit(Task(job, job))
            assert [a.worker_id for a in scheduler.assign()] == [name]
    for name, pool, job in situation.vms:
        if job is None:
            scheduler.add_worker(name, 1, 0, pool=pool)
    for key in situation.jobs():
        if key not in {job for _, _, job in situation.vms}:
            scheduler.submit(Task(key, key))


def _coordinator(situation: Situation, tmp_path: Path, scheduler: Scheduler | None = None
                 ) -> tuple[Coordinator, RecordingEngine]:
    engine = RecordingEngine()
    config = CoordinatorConfig("run", 1, 4, idle_timeout=5.0, pool=SPOT, max_on_demand=2,
                               straggler_rule=True, vm_prefix="n",
                               hourly={SPOT: PRICES.spot, OD: PRICES.on_demand},
                               budget=situation.budget)
    coordinator = Coordinator(config, engine, LocalBucket(tmp_path / "bucket"), b"k" * 32,
                              tmp_path, StateDir(tmp_path / "state"), lambda line: None,
                              scheduler)
    for name, pool, job in situation.vms:
        vm = Vm(name, NOW - 100, pool, ready=True, ready_at=NOW - 90,
                idle_since=None if job else NOW - situation.idle_s)
        if job is not None:
            vm.places.assign(job, JobSpec(["true"], None, {}, None))
        coordinator.vms.track(vm)
    _scheduler(coordinator.scheduler, situation)
    for key in situation.jobs():  # what the front end handed over
        coordinator._requests[key] = job_request(Task(key, key), ["true"], None, {}, None)
    coordinator.pools.health = situation.health
    coordinator.meter.phase = situation.phase
    return coordinator, engine


def _simulation(situation: Situation, prefetch: int = 0) -> _Simulation:
    config = SimConfig(max_workers=4, slots=1, main_pool=SPOT, max_on_demand=2,
                       straggler_rule=True, idle_timeout=5.0, vm_prefix="n",
                       machine_type="m", budget=situation.budget, prefetch=prefetch)
    jobs = tuple(SimJob(key, key, 100.0) for key in situation.jobs())
    sim = _Simulation(Workload("w", jobs), config, PRICES, None, None, 0, "same")
    for name, pool, job in situation.vms:
        vm = SimVm(name, pool, NOW - 100, 1, sim.cloud.price_h[pool], ready=True,
                   idle_since=None if job else NOW - situation.idle_s)
        sim.vms[name] = vm
        sim.views.add(vm)
        sim.views.touch(name)
    _scheduler(sim.scheduler, situation)
    sim.health = situation.health
    sim.meter.phase = situation.phase
    return sim


def _simulated_calls(sim: _Simulation) -> list[tuple[str, Pool | None, tuple[str, ...]]]:
    before = set(sim.vms)
    sim._scale(NOW)
    calls: list[tuple[str, Pool | None, tuple[str, ...]]] = [
        ("delete", None, (name,)) for name in sorted(before - set(sim.vms))]
    created: dict[Pool, list[str]] = {}
    for vm in sim.cloud.all_vms:
        created.setdefault(vm.pool, []).append(vm.name)
    calls += [("create", pool, tuple(names)) for pool, names in created.items()]
    return calls


@pytest.mark.parametrize("name", sorted(SITUATIONS))
def test_the_coordinator_and_the_simulator_take_the_same_decision(name: str,
                                                                  tmp_path: Path) -> None:
    situation = SITUATIONS[name]
    coordinator, engine = _coordinator(situation, tmp_path)
    sim = _simulation(situation)
    coordinator._scale(NOW)
    simulated = _simulated_calls(sim)
    real = sorted(engine.calls, key=lambda call: call[0] != "delete")
    assert real == simulated, name
    assert coordinator._spot_held == sim.spot_held


def test_the_situations_are_not_all_alike(tmp_path: Path) -> None:
    """Each situation holds a pool back in its own way: the decisions differ."""
    decisions = set()
    for i, situation in enumerate(SITUATIONS.values()):
        coordinator, engine = _coordinator(situation, tmp_path / str(i))
        coordinator._scale(NOW)
        decisions.add(tuple(engine.calls))
    assert len(decisions) == len(SITUATIONS)


# -- a round's assignments with prefetch: what VMs to come will start is not held ---------------
@dataclass(frozen=True)
class Prefetching:
    """Busy VMs (name, the job it runs), VMs booting, jobs queued, prefetch depth and the
    budget's phase: the holds of one round."""

    busy: tuple[tuple[str, str], ...]
    booting: tuple[str, ...] = ()
    queued: int = 3
    prefetch: int = 2
    phase: Phase = Phase.OK

    def situation(self) -> Situation:
        budget = BudgetConfig(100.0) if self.phase is not Phase.OK else None
        return Situation(tuple((name, SPOT, job) for name, job in self.busy), budget=budget,
                         phase=self.phase, queued=self.queued)


PREFETCHING = {
    "a booting VM and room for one more: two CPUs to come": Prefetching(
        (("old-1", "a"), ("old-2", "b")), booting=("new-1",)),
    "room for two VMs, none booting": Prefetching((("old-1", "a"), ("old-2", "b"))),
    "no growth past the budget's first phase: every job may be held": Prefetching(
        (("old-1", "a"), ("old-2", "b")), phase=Phase.NO_GROWTH),
    "prefetch 1: one job a worker": Prefetching(
        (("old-1", "a"), ("old-2", "b"), ("old-3", "c")), prefetch=1, queued=2),
}


def _decisions(monkeypatch: pytest.MonkeyPatch) -> list[one_round.Decided]:
    """Every ``one_round.decide`` answer, whoever calls it."""
    seen: list[one_round.Decided] = []
    decide = one_round.decide

    def recording(*args, **kwargs) -> one_round.Decided:  # type: ignore[no-untyped-def]
        seen.append(decide(*args, **kwargs))
        return seen[-1]

    monkeypatch.setattr(one_round, "decide", recording)
    return seen


@pytest.mark.parametrize("name", sorted(PREFETCHING))
def test_the_coordinator_and_the_simulator_hold_the_same_jobs(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = PREFETCHING[name]
    situation = case.situation()
    coordinator, _ = _coordinator(situation, tmp_path, Scheduler(prefetch=case.prefetch))
    sim = _simulation(situation, prefetch=case.prefetch)
    for vm_name in case.booting:
        coordinator.vms.track(Vm(vm_name, NOW - 10, SPOT))
        vm = SimVm(vm_name, SPOT, NOW - 10, 1, sim.cloud.price_h[SPOT])
        sim._track(vm)
    decisions = _decisions(monkeypatch)
    coordinator._decide(NOW)
    sim._decide(NOW)
    real, simulated = decisions
    assert real.assignments == simulated.assignments, name
    assert real.assignments, name  # something is held
    held = {a.key for a in real.assignments}
    assert held == {key for vm in coordinator.vms for key in vm.places.jobs()} - {
        job for _, job in case.busy}
    assert not any(key in sim.started for key in held)  # held: none starts before a slot frees


def test_prefetch_holds_less_while_vms_are_coming(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The situations differ in what is coming: the holds differ with it."""
    held = {}
    for i, (name, case) in enumerate(PREFETCHING.items()):
        if case.prefetch == 2:
            sim = _simulation(case.situation(), prefetch=case.prefetch)
            for vm_name in case.booting:
                sim._track(SimVm(vm_name, SPOT, NOW - 10, 1, sim.cloud.price_h[SPOT]))
            decisions = _decisions(monkeypatch)
            sim._decide(NOW)
            held[name] = len(decisions[-1].assignments)
    assert sorted(held.values()) == [1, 1, 3], held


# -- shapes: a per-rule machine's pools beside the run's own ----------------------------------
@pytest.mark.parametrize("name", sorted(SITUATIONS))
def test_another_shapes_idle_pools_leave_the_run_s_own_decision_alone(name: str,
                                                                     tmp_path: Path) -> None:
    """The coordinator scales every shape's pools in one round (``one_round.plan``); the
    simulator, with the run's own shape only, through the same function: a per-rule machine
    with no work changes nothing of the run's own pools."""
    situation = SITUATIONS[name]
    coordinator, engine = _coordinator(situation, tmp_path)
    coordinator._add_shape(Shape("g2-standard-8", "nvidia-l4", 1))
    sim = _simulation(situation)
    coordinator._scale(NOW)
    real = sorted(engine.calls, key=lambda call: call[0] != "delete")
    assert real == _simulated_calls(sim), name
    assert coordinator._spot_held == sim.spot_held


# -- cancelled results: one the scheduler did not ask for ----------------------------------------
def test_a_cancel_nobody_asked_for_sends_the_workers_jobs_elsewhere_in_both(
        tmp_path: Path) -> None:
    """A worker that is stopping kills its jobs: the result says cancelled, though the domino
    effect asked for nothing. Both sides (``one_round.take_cancelled``) take the worker's jobs
    back to the queue, first in line."""
    situation = Situation((("old-1", SPOT, "a"), ("old-2", SPOT, "b")), queued=1)
    coordinator, _ = _coordinator(situation, tmp_path)
    sim = _simulation(situation)
    coordinator._take_result(WorkerResult("a", "old-1", AttemptEnd.CANCELLED, None, NOW - 5,
                                          NOW - 1, "stopping"))
    sim.cloud.seen_results = [("a", "old-1", AttemptEnd.CANCELLED)]
    sim._take_results(NOW)
    for scheduler in (coordinator.scheduler, sim.scheduler):
        assert scheduler.state("a") == "queued" and "old-1" not in scheduler.workers()
        assert scheduler.state("b") == "running"
    assert "a" not in coordinator.vms["old-1"].places
