"""One decision, one place: the coordinator and the simulator, put in the same situation, take
the same decisions (both call ``core.one_round.round_of`` once a round, and carry out what it
answers): they scale the same way whatever holds a pool back (a stopped pool, a stockout's
no-growth time, the budget), for the run's own shape and per-rule machines alike, and strand
the same work; with prefetch they hold the same jobs, leaving queued what VMs booting or still
to be created will start, and ask the same held jobs back for a free slot; and they take a
cancelled result the same way.
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
from expo_executor.core.scheduler import Outcome, Pool, Scheduler, Task
from expo_executor.core.shapes import Shape
from expo_executor.frontends.base import job_request
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.records import JobSpec, WorkerResult
from expo_executor.simulate.cloud import SimVm
from expo_executor.simulate.policies import SimConfig
from expo_executor.simulate.simulation import _Simulation
from expo_executor.simulate.workload import FixedPrices, SimJob, Workload
from tests.helpers import ScriptedEngine

SPOT, OD = Pool.SPOT, Pool.ON_DEMAND
NOW = 1000.0
PRICES = FixedPrices(spot=3.6, on_demand=36.0)
KEYS = "abcdefghij"
GPU = Shape("g2-standard-8", "nvidia-l4", 1)

Call = tuple[str, Pool | None, tuple[str, ...], Shape | None]


@dataclass(frozen=True)
class Situation:
    """VMs (name, pool, the job it runs or None: idle for ``idle_s``), jobs queued, pool
    health, budget and its phase; ``gpu``: the VMs and jobs of the per-rule machine ``GPU``
    (of the others: the run's own), ``gpu_health`` its pools' health; ``solved``: jobs that
    ran before, on the idle VM of their shape."""

    vms: tuple[tuple[str, Pool, str | None], ...]
    health: PoolHealth = field(default_factory=PoolHealth)
    budget: BudgetConfig | None = None
    phase: Phase = Phase.OK
    queued: int = 5
    idle_s: float = 50.0
    gpu: frozenset[str] = frozenset()
    gpu_health: PoolHealth = field(default_factory=PoolHealth)
    solved: tuple[str, ...] = ()

    def jobs(self) -> list[str]:
        running = {job for _, _, job in self.vms if job}
        return sorted(running) + list(self.solved) + self.queued_jobs()

    def queued_jobs(self) -> list[str]:
        ran = {job for _, _, job in self.vms if job} | set(self.solved)
        return [k for k in KEYS if k not in ran][:self.queued]

    def shape(self, name: str) -> Shape | None:
        """A VM's or a job's shape."""
        return GPU if name in self.gpu else None


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
    # per-rule machines: a shape's pools beside the run's own
    "GPU jobs queued, no GPU VM": Situation(
        (("old-1", SPOT, "a"),), queued=4, gpu=frozenset("cde")),
    "a GPU VM idle past its timeout, the run's own busy": Situation(
        (("old-1", SPOT, "a"), ("gpu-1", SPOT, None)), queued=1,
        gpu=frozenset({"gpu-1", "z"}), solved=("z",)),
    "a GPU job and a GPU VM, spot stockout for GPUs": Situation(
        (("gpu-1", SPOT, "a"),), queued=3, gpu=frozenset({"gpu-1", "a", "c"}),
        gpu_health=failed_create(PoolHealth(), SPOT, NOW - 5, False, "no GPUs").health),
    "both GPU pools stopped: the GPU jobs are stranded": Situation(
        (("old-1", SPOT, "a"),), queued=3, gpu=frozenset("bc"),
        gpu_health=stop(stop(PoolHealth(), SPOT, "no GPUs").health, OD, "no GPUs").health),
}


def _scheduler(scheduler: Scheduler, situation: Situation) -> None:
    """The same work in either scheduler: a job running on each busy VM, the rest queued."""
    for name, pool, job in situation.vms:
        if job is not None:
            scheduler.add_worker(name, 1, 0, pool=pool, shape=situation.shape(name))
            scheduler.submit(Task(job, job, shape=situation.shape(job)))
            assert [a.worker_id for a in scheduler.assign()] == [name]
    for name, pool, job in situation.vms:
        if job is None:
            scheduler.add_worker(name, 1, 0, pool=pool, shape=situation.shape(name))
    for key in situation.solved:
        scheduler.submit(Task(key, key, shape=situation.shape(key)))
        assert len(scheduler.assign()) == 1
        scheduler.finish(key, Outcome.SOLVED)
    for key in situation.queued_jobs():
        scheduler.submit(Task(key, key, shape=situation.shape(key)))


def _coordinator(situation: Situation, tmp_path: Path, scheduler: Scheduler | None = None
                 ) -> tuple[Coordinator, ScriptedEngine]:
    engine = ScriptedEngine()
    config = CoordinatorConfig("run", 1, 4, idle_timeout=5.0, pool=SPOT, max_on_demand=2,
                               straggler_rule=True, vm_prefix="n",
                               hourly={SPOT: PRICES.spot, OD: PRICES.on_demand},
                               budget=situation.budget)
    coordinator = Coordinator(config, engine, LocalBucket(tmp_path / "bucket"), b"k" * 32,
                              tmp_path, StateDir(tmp_path / "state"), lambda line: None,
                              scheduler)
    for name, pool, job in situation.vms:
        vm = Vm(name, NOW - 100, pool, situation.shape(name), ready=True, ready_at=NOW - 90,
                idle_since=None if job else NOW - situation.idle_s)
        if job is not None:
            vm.places.assign(job, JobSpec(["true"], None, {}, None))
        coordinator.vms.track(vm)
    _scheduler(coordinator.scheduler, situation)
    for key in situation.jobs():  # what the front end handed over
        coordinator._requests[key] = job_request(Task(key, key, shape=situation.shape(key)),
                                                 ["true"], None, {}, None)
    if situation.gpu:
        coordinator._add_shape(GPU)
        coordinator.pools.healths[GPU] = situation.gpu_health
    coordinator.pools.health = situation.health
    coordinator.meter.phase = situation.phase
    return coordinator, engine


def _simulation(situation: Situation, prefetch: int = 0) -> _Simulation:
    config = SimConfig(max_workers=4, slots=1, main_pool=SPOT, max_on_demand=2,
                       straggler_rule=True, idle_timeout=5.0, vm_prefix="n",
                       machine_type="m", budget=situation.budget, prefetch=prefetch)
    jobs = tuple(SimJob(key, key, 100.0, shape=situation.shape(key))
                 for key in situation.jobs())
    sim = _Simulation(Workload("w", jobs), config, PRICES, None, None, 0, "same")
    for name, pool, job in situation.vms:
        shape = situation.shape(name)
        vm = SimVm(name, pool, NOW - 100, 1, sim.cloud.hourly(pool, shape), ready=True,
                   idle_since=None if job else NOW - situation.idle_s, shape=shape)
        sim.vms[name] = vm
        sim.views.add(vm)
        sim.views.touch(name)
    _scheduler(sim.scheduler, situation)
    sim.healths[None] = situation.health
    if situation.gpu:
        sim.healths[GPU] = situation.gpu_health
    sim.meter.phase = situation.phase
    return sim


def _rounds(monkeypatch: pytest.MonkeyPatch) -> list[one_round.Acts]:
    """Every ``one_round.round_of`` answer, whoever asks."""
    seen: list[one_round.Acts] = []
    round_of = one_round.round_of

    def recording(scheduler: Scheduler, observed: one_round.Seen) -> one_round.Acts:
        seen.append(round_of(scheduler, observed))
        return seen[-1]

    monkeypatch.setattr(one_round, "round_of", recording)
    return seen


def _coordinator_round(coordinator: Coordinator) -> list[Call]:
    """One round's decisions, carried out: the engine's calls, deletes first."""
    coordinator._scale(coordinator._decide(NOW), NOW)
    return sorted(coordinator.engine.calls, key=lambda call: call[0] != "delete")


def _simulated_round(sim: _Simulation) -> list[Call]:
    """One round's decisions, carried out: the simulated cloud's calls, deletes first."""
    before = set(sim.vms)
    sim._scale(sim._decide(NOW), NOW)
    calls: list[Call] = [("delete", None, (name,), None)
                         for name in sorted(before - set(sim.vms))]
    created: dict[tuple[Pool, Shape | None], list[str]] = {}
    for vm in sim.cloud.all_vms:
        created.setdefault((vm.pool, vm.shape), []).append(vm.name)
    calls += [("create", pool, tuple(names), shape) for (pool, shape), names in created.items()]
    return calls


@pytest.mark.parametrize("name", sorted(SITUATIONS))
def test_the_coordinator_and_the_simulator_take_the_same_decision(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    situation = SITUATIONS[name]
    coordinator, _ = _coordinator(situation, tmp_path)
    sim = _simulation(situation)
    rounds = _rounds(monkeypatch)
    real, simulated = _coordinator_round(coordinator), _simulated_round(sim)
    assert real == simulated, name
    assert rounds[0] == rounds[1], name  # every decision, the plan and the stranded work
    assert coordinator._spot_held == sim.spot_held
    assert coordinator.scheduler.counts() == sim.scheduler.counts()


def test_the_situations_are_not_all_alike(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Each situation holds a pool back in its own way: the decisions (the creates and
    deletes, the plan, the stranded work) differ; some are the per-rule machine's own."""
    rounds = _rounds(monkeypatch)
    decisions, calls = set(), []
    for i, situation in enumerate(SITUATIONS.values()):
        coordinator, _ = _coordinator(situation, tmp_path / str(i))
        calls += _coordinator_round(coordinator)
        decisions.add((tuple(coordinator.engine.calls), rounds[-1].plan, rounds[-1].stranded))
    assert len(decisions) == len(SITUATIONS)
    assert any(call[3] == GPU for call in calls)
    assert [stranded.keys for acts in rounds for stranded in acts.stranded] == [("b", "c")]


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


def _prefetching(case: Prefetching, tmp_path: Path) -> tuple[Coordinator, _Simulation]:
    situation = case.situation()
    coordinator, _ = _coordinator(situation, tmp_path, Scheduler(prefetch=case.prefetch))
    sim = _simulation(situation, prefetch=case.prefetch)
    for vm_name in case.booting:
        coordinator.vms.track(Vm(vm_name, NOW - 10, SPOT))
        sim._track(SimVm(vm_name, SPOT, NOW - 10, 1, sim.cloud.price_h[SPOT]))
    return coordinator, sim


@pytest.mark.parametrize("name", sorted(PREFETCHING))
def test_the_coordinator_and_the_simulator_hold_the_same_jobs(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = PREFETCHING[name]
    coordinator, sim = _prefetching(case, tmp_path)
    rounds = _rounds(monkeypatch)
    assert _coordinator_round(coordinator) == _simulated_round(sim), name
    real, simulated = rounds
    assert real == simulated, name
    assert real.decided.assignments, name  # something is held
    held = {a.key for a in real.decided.assignments}
    assert held == {key for vm in coordinator.vms for key in vm.places.jobs()} - {
        job for _, job in case.busy}
    assert not any(key in sim.started for key in held)  # held: none starts before a slot frees


def test_prefetch_holds_less_while_vms_are_coming(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The situations differ in what is coming: the holds differ with it."""
    rounds = _rounds(monkeypatch)
    held = {}
    for i, (name, case) in enumerate(PREFETCHING.items()):
        if case.prefetch == 2:
            _, sim = _prefetching(case, tmp_path / str(i))
            sim._decide(NOW)
            held[name] = len(rounds[-1].decided.assignments)
    assert sorted(held.values()) == [1, 1, 3], held


def test_a_free_slot_asks_the_same_held_jobs_back_in_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Jobs held on busy workers, then a worker with a free slot is ready: both sides ask the
    same held job back from its holder (``Release``), for the free slot to start."""
    case = PREFETCHING["no growth past the budget's first phase: every job may be held"]
    coordinator, sim = _prefetching(case, tmp_path)
    rounds = _rounds(monkeypatch)
    _coordinator_round(coordinator)
    _simulated_round(sim)
    assert rounds[0].decided.assignments and not rounds[0].decided.releases
    # on-demand: the straggler rule keeps the tail off Spot
    coordinator.vms.track(Vm("new-1", NOW - 60, OD, ready=True, ready_at=NOW - 1,
                             idle_since=NOW - 1))
    coordinator.scheduler.add_worker("new-1", 1, 0, pool=OD)
    vm = SimVm("new-1", OD, NOW - 60, 1, sim.cloud.price_h[OD], ready=True, idle_since=NOW - 1)
    sim.vms[vm.name] = vm
    sim.views.add(vm)
    sim.views.touch(vm.name)
    sim.scheduler.add_worker("new-1", 1, 0, pool=OD)
    _coordinator_round(coordinator)
    _simulated_round(sim)
    real, simulated = rounds[2:]
    assert real == simulated
    assert len(real.decided.releases) == 1
    release = real.decided.releases[0]
    assert release.key in coordinator.vms[release.worker_id].places.releases()


# -- cancelled results: one the scheduler did not ask for ----------------------------------------
def test_a_cancel_nobody_asked_for_sends_the_workers_jobs_elsewhere_in_both(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker that is stopping kills its jobs: the result says cancelled, though the domino
    effect asked for nothing. Both sides take it in with the round (``one_round.round_of``),
    and take the worker's jobs back to the queue, first in line."""
    situation = Situation((("old-1", SPOT, "a"), ("old-2", SPOT, "b")), queued=1)
    coordinator, _ = _coordinator(situation, tmp_path)
    sim = _simulation(situation)
    coordinator._take_result(WorkerResult("a", "old-1", AttemptEnd.CANCELLED, None, NOW - 5,
                                          NOW - 1, "stopping"))
    sim.cloud.seen_results = [("a", "old-1", AttemptEnd.CANCELLED)]
    sim._take_results(NOW)
    assert coordinator.scheduler.state("a") == sim.scheduler.state("a") == "running"
    rounds = _rounds(monkeypatch)
    _coordinator_round(coordinator)
    _simulated_round(sim)
    real, simulated = rounds
    assert real == simulated
    assert real.cancelled and real.cancelled[0], real  # the worker's job, re-queued
    for scheduler in (coordinator.scheduler, sim.scheduler):
        assert "old-1" not in scheduler.workers()
        assert scheduler.state("b") == "running"
    assert "a" not in coordinator.vms["old-1"].places
