"""One scaling round (core.scaling.scale) and the budget's phase steps (core.budget.meter_step)."""

from __future__ import annotations

import pytest

from expo_executor.core.budget import (BudgetConfig, Phase, PhaseChange, Spend, Withdraw,
                                       meter_step, vm_cost)
from expo_executor.core.fleet import FleetConfig, WorkerView
from expo_executor.core.pool_health import PoolHealth, failed_create, stop
from expo_executor.core.scaling import FleetSetup, Growth, Load, Money, room_to_grow, scale
from expo_executor.core.scheduler import Pool

SPOT, OD = Pool.SPOT, Pool.ON_DEMAND
SETUP = FleetSetup({SPOT: FleetConfig(1, 4, 5.0), OD: FleetConfig(1, 2, 5.0)}, SPOT, False)
HOURLY = {SPOT: 3.6, OD: 36.0}  # USD per hour: a Spot VM-second costs $0.001


def _queued(spot: int, od: int = 0) -> Load:
    return Load({SPOT: spot, OD: od}, {}, 0, 0)


def test_without_limits_the_round_is_the_fleet_policy() -> None:
    plan = scale(_queued(3, 1), 0.0, SETUP, PoolHealth(), Money())
    assert plan.pools == (Growth(SPOT, (), 3), Growth(OD, (), 1))
    assert not plan.stragglers and plan.drain == frozenset()


def test_a_stopped_pool_creates_nothing_and_a_held_one_says_until_when() -> None:
    stopped = stop(PoolHealth(), SPOT, "quota").health
    plan = scale(_queued(3), 0.0, SETUP, stopped, Money())
    # no Spot VM and Spot may not grow: the straggler hand-over sends the work on-demand
    assert plan.stragglers and plan.pools == (Growth(SPOT, (), 0), Growth(OD, (), 2))
    held = failed_create(PoolHealth(), SPOT, 0.0, False, "no capacity").health
    plan = scale(_queued(3), 10.0, SETUP, held, Money())
    assert plan.pools[0] == Growth(SPOT, (), 0, held_until=30.0)
    assert scale(_queued(3), 30.0, SETUP, held, Money()).pools[0] == Growth(SPOT, (), 3)


def test_past_ok_the_budget_creates_nothing_and_past_the_limit_drains_idle_vms() -> None:
    views = {SPOT: [WorkerView("busy", False, 1, None), WorkerView("idle", False, 0, 9.0),
                    WorkerView("booting", True, 0, None)]}
    load = Load({SPOT: 5, OD: 0}, views, 1, 1)
    budget = BudgetConfig(100.0)
    no_growth = scale(load, 10.0, SETUP, PoolHealth(), Money(Phase.NO_GROWTH, budget))
    assert [g.create for g in no_growth.pools] == [0, 0] and no_growth.drain == frozenset()
    limit = scale(load, 10.0, SETUP, PoolHealth(), Money(Phase.LIMIT, budget))
    assert limit.drain == {"idle", "booting"}


def test_the_budget_caps_creates_and_a_deleted_vm_pays_for_a_new_one() -> None:
    budget = BudgetConfig(1.0, horizon_s=100.0)  # one Spot VM over the horizon: $0.10
    money = Money(Phase.OK, budget, Spend(0.0, ()), HOURLY)
    assert scale(_queued(20), 0.0, SETUP, PoolHealth(), money).pools[0].create == 4
    spent = Money(Phase.OK, budget, Spend(0.75, ()), HOURLY)  # $0.25 left: two VMs
    assert scale(_queued(20), 0.0, SETUP, PoolHealth(), spent).pools[0].create == 2
    # over a 1000 s horizon a Spot VM is $1.00: with $3 and one VM alive since 0 (projected
    # $1.005), one more is affordable; deleting it at 5 s leaves only its minimum minute ($0.06)
    # spent, and pays for a second
    long = BudgetConfig(3.0, horizon_s=1000.0)
    views = {SPOT: [WorkerView("old", False, 0, 0.0)]}
    alive = Money(Phase.OK, long, Spend(0.0, (("old", 3.6, 0.0),)), HOURLY)
    kept = scale(Load({SPOT: 5, OD: 0}, views, 0, 0), 4.0, SETUP, PoolHealth(), alive)
    assert kept.pools[0] == Growth(SPOT, (), 1)  # not idle for 5 s yet
    plan = scale(Load({SPOT: 5, OD: 0}, views, 0, 0), 5.0, SETUP, PoolHealth(), alive)
    assert plan.pools[0] == Growth(SPOT, ("old",), 2)


def test_vms_created_in_one_pool_leave_less_for_the_next() -> None:
    budget = BudgetConfig(0.5, horizon_s=100.0)  # Spot $0.10, on-demand $1.00 over the horizon
    money = Money(Phase.OK, budget, Spend(0.0, ()), HOURLY)
    assert scale(_queued(0, 1), 0.0, SETUP, PoolHealth(), money).pools[1].create == 0
    cheap = Money(Phase.OK, BudgetConfig(1.15, horizon_s=100.0), Spend(), HOURLY)
    alone = scale(_queued(0, 1), 0.0, SETUP, PoolHealth(), cheap)
    assert alone.pools[1].create == 1
    both = scale(_queued(4, 1), 0.0, SETUP, PoolHealth(), cheap)
    assert both.pools[0].create == 4 and both.pools[1].create == 0  # Spot asked first


def test_spend_moves_a_deleted_vm_to_the_money_gone() -> None:
    spend = Spend(1.0, (("a", 3.6, 0.0), ("b", 3.6, 50.0)))
    assert spend.spent(100.0) == pytest.approx(1.0 + 0.1 + vm_cost(3.6, 50.0))
    after = spend.without("a", 100.0)
    assert after.ended_usd == pytest.approx(1.1) and [vm[0] for vm in after.alive] == ["b"]
    assert len(after.plus(2, 3.6, 100.0).ages(100.0)) == 3


def test_the_meter_advances_its_phase_once_and_says_what_to_take_back() -> None:
    drain = BudgetConfig(1.0, "drain", horizon_s=100.0, margin_s=10.0)
    cancel = BudgetConfig(1.0, "cancel", horizon_s=100.0, margin_s=10.0)
    young = Spend(0.0, (("a", 3.6, 0.0),))
    assert meter_step(Phase.OK, young, 10.0, 3.6, drain, False) is None
    # $0.80 gone + $0.11 for the VM alive: no room for another over the horizon
    near = Spend(0.8, (("a", 3.6, 0.0),))
    assert meter_step(Phase.OK, near, 10.0, 3.6, drain, False) == PhaseChange(Phase.NO_GROWTH)
    assert meter_step(Phase.NO_GROWTH, near, 10.0, 3.6, drain, False) is None
    # no VM alive, work queued, none affordable: the queued work cannot run
    assert meter_step(Phase.OK, Spend(0.95), 0.0, 3.6, drain, True) \
        == PhaseChange(Phase.LIMIT, Withdraw.QUEUED)
    at_limit = Spend(0.85, (("a", 3.6, 0.0),))  # + (60 + 100) s * $0.001 = $1.01 ahead
    assert meter_step(Phase.NO_GROWTH, at_limit, 60.0, 3.6, drain, False) \
        == PhaseChange(Phase.LIMIT, Withdraw.QUEUED)
    assert meter_step(Phase.NO_GROWTH, at_limit, 60.0, 3.6, cancel, False) \
        == PhaseChange(Phase.STOP, Withdraw.UNFINISHED)
    over = Spend(0.95, (("a", 3.6, 0.0),))  # within the margin: stop whatever the action
    assert meter_step(Phase.LIMIT, over, 60.0, 3.6, drain, False) \
        == PhaseChange(Phase.STOP, Withdraw.UNFINISHED)
    assert meter_step(Phase.STOP, Spend(), 0.0, 3.6, drain, False) is None  # never back


# -- room_to_grow: the VMs still to come, which prefetch leaves queued work for -----------------

def test_room_to_grow_is_the_main_pools_headroom_and_on_demand_only_for_reliable_work():
    assert room_to_grow({None: SETUP}, {SPOT: 1}, {}, {}, 0.0) == {None: 3}
    assert room_to_grow({None: SETUP}, {SPOT: 4, OD: 1}, {None: 5}, {}, 0.0) == {None: 1}
    assert room_to_grow({None: SETUP}, {SPOT: 6}, {}, {}, 0.0) == {None: 0}


def test_a_pool_that_may_not_grow_has_no_room():
    stopped = stop(PoolHealth(), SPOT, "quota").health
    assert room_to_grow({None: SETUP}, {}, {None: 1}, {None: stopped}, 0.0) == {None: 1}
