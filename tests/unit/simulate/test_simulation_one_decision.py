"""One decision, one place: the coordinator and the simulator, put in the same situation, scale
the same way (both call core.scaling.scale), whatever holds a pool back: a stopped pool, a
stockout's no-growth time, the budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
from expo_executor.coordinator.state import StateDir
from expo_executor.coordinator.vms import Vm
from expo_executor.core.budget import BudgetConfig, Phase
from expo_executor.core.pool_health import PoolHealth, failed_create, stop
from expo_executor.core.scheduler import Pool, Scheduler, Task
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.records import InboxJob
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


def _coordinator(situation: Situation, tmp_path: Path) -> tuple[Coordinator, RecordingEngine]:
    engine = RecordingEngine()
    config = CoordinatorConfig("run", 1, 4, idle_timeout=5.0, pool=SPOT, max_on_demand=2,
                               straggler_rule=True, vm_prefix="n",
                               hourly={SPOT: PRICES.spot, OD: PRICES.on_demand},
                               budget=situation.budget)
    coordinator = Coordinator(config, engine, LocalBucket(tmp_path / "bucket"), b"k" * 32,
                              tmp_path, StateDir(tmp_path / "state"), lambda line: None)
    for name, pool, job in situation.vms:
        vm = Vm(name, NOW - 100, pool, ready=True, ready_at=NOW - 90,
                idle_since=None if job else NOW - situation.idle_s)
        if job is not None:
            vm.jobs[job] = InboxJob(["true"], None, {}, None)
        coordinator.vms.track(vm)
    _scheduler(coordinator.scheduler, situation)
    coordinator.pools.health = situation.health
    coordinator.meter.phase = situation.phase
    return coordinator, engine


def _simulation(situation: Situation) -> _Simulation:
    config = SimConfig(max_workers=4, slots=1, main_pool=SPOT, max_on_demand=2,
                       straggler_rule=True, idle_timeout=5.0, vm_prefix="n",
                       machine_type="m", budget=situation.budget)
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
    assert coordinator._stragglers == sim.stragglers


def test_the_situations_are_not_all_alike(tmp_path: Path) -> None:
    """Each situation holds a pool back in its own way: the decisions differ."""
    decisions = set()
    for i, situation in enumerate(SITUATIONS.values()):
        coordinator, engine = _coordinator(situation, tmp_path / str(i))
        coordinator._scale(NOW)
        decisions.add(tuple(engine.calls))
    assert len(decisions) == len(SITUATIONS)
