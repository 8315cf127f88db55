"""Per-rule machines in the pure core: a job goes only to a worker of its shape, and each shape's
pools grow, shrink and follow the budget on their own (core.shapes, core.scheduler,
core.scaling.scale_shapes)."""

from __future__ import annotations

from expo_executor.core.budget import BudgetConfig, Phase, Spend
from expo_executor.core.fleet import FleetConfig, WorkerView
from expo_executor.core.pool_health import PoolHealth, stop
from expo_executor.core.scaling import FleetSetup, Growth, Load, Money, scale, scale_shapes
from expo_executor.core.scheduler import Pool, Scheduler, Task
from expo_executor.core.shapes import Shape, shape_order

SPOT, OD = Pool.SPOT, Pool.ON_DEMAND
T4 = Shape("n1-standard-4", "nvidia-tesla-t4", 1)
BIG = Shape("e2-standard-4")
DISK = Shape("e2-standard-2", disk_gb=120)


def _setup(slots: int, spot_cap: int = 3) -> FleetSetup:
    return FleetSetup({SPOT: FleetConfig(slots, spot_cap, 5.0), OD: FleetConfig(slots, 1, 5.0)},
                      SPOT, False)


SETUPS = {None: _setup(1), T4: _setup(4), BIG: _setup(4)}


def test_a_shape_reads_as_one_phrase_and_orders_the_runs_own_first() -> None:
    assert T4.describe() == "n1-standard-4 + 1 x nvidia-tesla-t4"
    assert DISK.describe() == "e2-standard-2, 120 GB disk"
    assert sorted([T4, None, BIG], key=shape_order) == [None, BIG, T4]


def test_a_task_runs_only_on_a_worker_of_its_shape() -> None:
    scheduler = Scheduler()
    scheduler.add_worker("plain", 4, pool=SPOT)
    scheduler.add_worker("gpu", 4, pool=SPOT, shape=T4)
    scheduler.submit(Task("g", "g", shape=T4))
    scheduler.submit(Task("p", "p"))
    scheduler.submit(Task("b", "b", cpus=4, shape=BIG))  # no worker of its shape yet: waits
    placed = {a.key: a.worker_id for a in scheduler.assign()}
    assert placed == {"g": "gpu", "p": "plain"}
    assert scheduler.queued_by_shape()[BIG] == {SPOT: 4, OD: 0}
    assert scheduler.queued_demand() == {SPOT: 4, OD: 0}
    scheduler.add_worker("big", 4, pool=OD, shape=BIG)
    assert [(a.key, a.worker_id) for a in scheduler.assign()] == [("b", "big")]


def test_with_memory_declared_the_shape_still_decides() -> None:
    scheduler = Scheduler()
    scheduler.add_worker("plain", 4, mem_mb=8000, pool=SPOT)
    scheduler.submit(Task("g", "g", mem_mb=100, shape=T4))
    assert scheduler.assign() == []
    scheduler.add_worker("gpu", 4, mem_mb=8000, pool=SPOT, shape=T4)
    assert [a.worker_id for a in scheduler.assign()] == ["gpu"]


def test_a_shapes_straggler_rule_keeps_only_its_own_tasks_off_spot() -> None:
    scheduler = Scheduler()
    scheduler.add_worker("s-plain", 1, pool=SPOT)
    scheduler.add_worker("s-gpu", 1, pool=SPOT, shape=T4)
    scheduler.submit(Task("p", "p"))
    scheduler.submit(Task("g", "g", shape=T4))
    placed = {a.key: a.worker_id for a in scheduler.assign(spot_held=frozenset({T4}))}
    assert placed == {"p": "s-plain"}


def test_each_shape_grows_for_its_own_queue() -> None:
    # a T4 worker holds 4: the on-demand one takes the reliable CPU and 3 of the 6 others
    loads = {None: Load({SPOT: 2, OD: 0}, {}, 0, 0), T4: Load({SPOT: 6, OD: 1}, {}, 0, 0)}
    plan = scale_shapes(loads, 0.0, SETUPS, {}, Money(), {})
    grown = {(g.shape, g.pool): g.create for g in plan.pools}
    assert grown == {(None, SPOT): 2, (None, OD): 0, (T4, SPOT): 1, (T4, OD): 1,
                     (BIG, SPOT): 0, (BIG, OD): 0}


def test_an_idle_shape_is_deleted_while_another_shape_still_works() -> None:
    views_gpu = {SPOT: [WorkerView("gpu-1", False, 0, 0.0)]}
    views_plain = {SPOT: [WorkerView("plain-1", False, 1, None)]}
    loads = {None: Load({SPOT: 3, OD: 0}, views_plain, 1, 1),
             T4: Load({SPOT: 0, OD: 0}, views_gpu, 0, 0)}
    plan = scale_shapes(loads, 10.0, SETUPS, {}, Money(), {})
    deleted = {g.shape: g.delete for g in plan.pools if g.delete}
    assert deleted == {T4: ("gpu-1",)}
    # the Spot cap (3) still counts gpu-1 this round: its place is free from the next one
    assert [g.create for g in plan.pools if g.shape is None and g.pool is SPOT] == [1]
    loads[T4] = Load({SPOT: 0, OD: 0}, {}, 0, 0)
    loads[None] = Load({SPOT: 2, OD: 0}, {SPOT: [*views_plain[SPOT],
                                                 WorkerView("plain-2", True, 0, None)]}, 1, 1)
    plan = scale_shapes(loads, 11.0, SETUPS, {}, Money(), {})
    assert [g.create for g in plan.pools if g.shape is None and g.pool is SPOT] == [1]


def test_one_shape_is_exactly_the_one_pool_round() -> None:
    load = Load({SPOT: 3, OD: 1}, {}, 0, 0)
    alone = scale_shapes({None: load}, 0.0, {None: SETUPS[None]}, {}, Money(), {})
    assert alone.pools == scale(load, 0.0, SETUPS[None], PoolHealth(), Money()).pools


def test_a_stopped_shape_pool_stops_only_that_shape() -> None:
    stopped = stop(PoolHealth(), SPOT, "no T4 quota").health
    loads = {None: Load({SPOT: 1, OD: 0}, {}, 0, 0), T4: Load({SPOT: 1, OD: 0}, {}, 0, 0)}
    plan = scale_shapes(loads, 0.0, SETUPS, {T4: stopped}, Money(), {})
    grown = {(g.shape, g.pool): g.create for g in plan.pools if g.create}
    # T4's Spot pool is gone: its work goes to T4's on-demand pool, the rest is untouched
    assert grown == {(None, SPOT): 1, (T4, OD): 1}
    assert plan.stragglers_in == frozenset({T4}) and not plan.stragglers


def test_the_budget_prices_each_shape_and_carries_its_spend_from_shape_to_shape() -> None:
    budget = BudgetConfig(1.0, horizon_s=100.0)
    hourly = {None: {SPOT: 3.6, OD: 36.0}, T4: {SPOT: 18.0, OD: 36.0}}  # $0.10 and $0.50
    loads = {None: Load({SPOT: 3, OD: 0}, {}, 0, 0), T4: Load({SPOT: 4, OD: 0}, {}, 0, 0)}
    wide = {None: _setup(1, spot_cap=10), T4: _setup(4, spot_cap=10)}  # the budget binds
    plan = scale_shapes(loads, 0.0, wide, {}, Money(Phase.OK, budget, Spend(0.0, ()), {}),
                        hourly)
    grown = {(g.shape, g.pool): g.create for g in plan.pools if g.create}
    # $1: three plain Spot VMs ($0.30), then one T4 Spot VM ($0.50); a second would overrun
    assert grown == {(None, SPOT): 3, (T4, SPOT): 1}
    assert Growth(SPOT, (), 1, shape=T4) in plan.pools


def test_a_pools_cap_bounds_its_vms_of_every_shape_together() -> None:
    # Spot at most 3, on-demand at most 1 (SETUPS): three shapes each wanting more share them,
    # the run's own first, but every shape waiting for its first VM keeps a Spot place
    loads = {None: Load({SPOT: 2, OD: 1}, {}, 0, 0), T4: Load({SPOT: 8, OD: 4}, {}, 0, 0),
             BIG: Load({SPOT: 8, OD: 0}, {}, 0, 0)}
    plan = scale_shapes(loads, 0.0, SETUPS, {}, Money(), {})
    grown = {(g.shape, g.pool): g.create for g in plan.pools if g.create}
    assert grown == {(None, SPOT): 1, (None, OD): 1, (BIG, SPOT): 1, (T4, SPOT): 1}
    # VMs a shape already has count against the others', and are never deleted for a cap
    views = {SPOT: [WorkerView(f"big-{i}", False, 4, None) for i in range(3)]}
    loads[BIG] = Load({SPOT: 8, OD: 0}, views, 12, 12)
    plan = scale_shapes(loads, 0.0, SETUPS, {}, Money(), {})
    assert {(g.shape, g.pool): g.create for g in plan.pools if g.create} == {(None, OD): 1}
    assert not any(g.delete for g in plan.pools)
