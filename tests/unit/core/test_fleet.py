"""Fleet policy: grow to cover queued work counting booting VMs, delete idle ones."""

from expo_executor.core.fleet import (BOOT_FAILURES_CAP, BOOT_FAILURES_TO_STOP, BootHistory, Booting,
                                 Demand, FleetConfig, WorkerView, boot_check, booted, decide, plan,
                                 plan_pools, stranded, stragglers_fit, unrunnable)
from expo_executor.core.scheduler import Pool

CONFIG = FleetConfig(slots_per_worker=2, max_workers=3, idle_timeout=5.0)


def test_grows_to_cover_queued_cpus_up_to_the_cap() -> None:
    assert plan(3, [], 0.0, CONFIG).create == 2
    assert plan(100, [], 0.0, CONFIG).create == 3


def test_booting_workers_count_as_supply() -> None:
    booting = [WorkerView("w-1", True, 0, None)]
    assert plan(2, booting, 0.0, CONFIG).create == 0
    assert plan(3, booting, 0.0, CONFIG).create == 1


def test_idle_workers_are_deleted_after_the_timeout_only() -> None:
    workers = [WorkerView("w-1", False, 0, 10.0), WorkerView("w-2", False, 1, None),
               WorkerView("w-3", True, 0, None)]
    assert plan(0, workers, 14.0, CONFIG).delete == ()
    assert plan(0, workers, 15.0, CONFIG).delete == ("w-1",)


def test_min_workers_are_created_and_kept_while_work_is_left() -> None:
    config = FleetConfig(slots_per_worker=2, max_workers=4, idle_timeout=5.0, min_workers=2)
    assert plan(0, [], 0.0, config, work_left=True).create == 2
    assert plan(0, [], 0.0, config, work_left=False).create == 0
    idle = [WorkerView(f"w-{i}", False, 0, float(i)) for i in range(3)]
    assert plan(0, idle, 100.0, config, work_left=True).delete == ("w-0",)
    assert plan(0, idle, 100.0, config, work_left=False).delete == ("w-0", "w-1", "w-2")


def test_reliable_demand_goes_on_demand_and_spot_uses_on_demand_spare_first() -> None:
    spot = FleetConfig(slots_per_worker=2, max_workers=10, idle_timeout=5.0)
    od = FleetConfig(slots_per_worker=2, max_workers=2, idle_timeout=5.0, min_workers=1)
    spot_plan, od_plan = plan_pools(Demand(any_pool=5, reliable=1), [], [], 0.0, spot, od, True)
    assert od_plan.create == 1  # one reliable CPU, and the core of one
    assert spot_plan.create == 2  # 5 ordinary CPUs minus the on-demand VM's spare slot


def test_straggler_mode_sends_everything_queued_to_on_demand() -> None:
    spot = FleetConfig(slots_per_worker=2, max_workers=10, idle_timeout=5.0)
    od = FleetConfig(slots_per_worker=2, max_workers=2, idle_timeout=5.0)
    assert stragglers_fit(4, [], od) and not stragglers_fit(5, [], od)
    busy = [WorkerView("od-1", False, 2, None)]
    assert stragglers_fit(2, busy, od) and not stragglers_fit(3, busy, od)
    spot_plan, od_plan = plan_pools(Demand(any_pool=3, reliable=0), [], [], 0.0, spot, od,
                                    True, stragglers=True)
    assert (spot_plan.create, od_plan.create) == (0, 2)
    assert not stragglers_fit(1, [], FleetConfig(2, 0, 5.0))


# -- boots that never finish ----------------------------------------------------------------------


def test_a_vm_not_ready_within_the_boot_timeout_is_timed_out_and_only_then() -> None:
    booting = [Booting("w-2", Pool.SPOT, 5.0), Booting("w-1", Pool.SPOT, 0.0)]
    assert boot_check(booting, 59.9, 60.0, {}).timed_out == ()
    decision = boot_check(booting, 60.0, 60.0, {})
    assert decision.timed_out == ("w-1",)
    assert decision.history == {Pool.SPOT: BootHistory(1, False)}
    assert decision.stop == ()
    assert boot_check(booting, 65.0, 60.0, {}).timed_out == ("w-1", "w-2")  # oldest first


def test_failures_in_a_row_in_a_pool_that_never_came_up_stop_it_once() -> None:
    history: dict[Pool, BootHistory] = {}
    stops = []
    for i in range(BOOT_FAILURES_TO_STOP + 2):
        decision = boot_check([Booting(f"w-{i}", Pool.SPOT, 0.0)], 100.0, 60.0, history)
        history = decision.history
        stops.append(decision.stop)
    assert stops.index((Pool.SPOT,)) == BOOT_FAILURES_TO_STOP - 1
    assert stops.count((Pool.SPOT,)) == 1  # said once
    # several at once cross the limit in one round: still one stop
    many = [Booting(f"w-{i}", Pool.ON_DEMAND, 0.0) for i in range(5)]
    assert boot_check(many, 100.0, 60.0, {}).stop == (Pool.ON_DEMAND,)


def test_a_ready_vm_resets_the_count_and_a_proven_pool_tolerates_more() -> None:
    history = {Pool.SPOT: BootHistory(BOOT_FAILURES_TO_STOP - 1, False)}
    history = booted(history, Pool.SPOT)
    assert history[Pool.SPOT] == BootHistory(0, True)
    for i in range(BOOT_FAILURES_CAP - 1):
        decision = boot_check([Booting(f"w-{i}", Pool.SPOT, 0.0)], 100.0, 60.0, history)
        assert decision.stop == ()
        history = decision.history
    last = boot_check([Booting("w-x", Pool.SPOT, 0.0)], 100.0, 60.0, history)
    assert last.stop == (Pool.SPOT,)  # bounded even for a pool that once worked


def test_stranded_only_when_work_is_queued_nothing_is_alive_and_no_pool_may_grow() -> None:
    fleets = {Pool.SPOT: FleetConfig(1, 2, 5.0), Pool.ON_DEMAND: FleetConfig(1, 1, 5.0)}
    queued = {Pool.SPOT: 3, Pool.ON_DEMAND: 0}
    both = {Pool.SPOT, Pool.ON_DEMAND}
    assert stranded(queued, {}, both, fleets)
    assert not stranded({Pool.SPOT: 0, Pool.ON_DEMAND: 0}, {}, both, fleets)
    assert not stranded(queued, {Pool.SPOT: 1}, both, fleets)
    assert not stranded(queued, {}, {Pool.SPOT}, fleets)  # on-demand may still grow
    no_room = {Pool.SPOT: FleetConfig(1, 2, 5.0), Pool.ON_DEMAND: FleetConfig(1, 0, 5.0)}
    assert stranded(queued, {}, {Pool.SPOT}, no_room)


def test_a_stopped_spot_pool_with_no_vm_hands_its_work_to_on_demand() -> None:
    fleets = {Pool.SPOT: FleetConfig(1, 10, 5.0), Pool.ON_DEMAND: FleetConfig(1, 2, 5.0)}
    queued = {Pool.SPOT: 8, Pool.ON_DEMAND: 0}
    views: dict[Pool, list[WorkerView]] = {Pool.SPOT: [], Pool.ON_DEMAND: []}
    normal = decide(queued, views, 0, 0, 0.0, fleets, Pool.SPOT, True)
    assert not normal.stragglers and normal.plans[Pool.ON_DEMAND].create == 0
    gone = decide(queued, views, 0, 0, 0.0, fleets, Pool.SPOT, True, frozenset({Pool.SPOT}))
    assert gone.stragglers and gone.plans[Pool.ON_DEMAND].create == 2
    # while a Spot VM is left it keeps working: no hand-over
    views[Pool.SPOT] = [WorkerView("w-1", False, 1, None)]
    kept = decide(queued, views, 1, 1, 0.0, fleets, Pool.SPOT, True, frozenset({Pool.SPOT}))
    assert not kept.stragglers


def test_a_stopped_on_demand_pool_turns_the_straggler_rule_off() -> None:
    fleets = {Pool.SPOT: FleetConfig(1, 2, 5.0), Pool.ON_DEMAND: FleetConfig(1, 2, 5.0)}
    views = {Pool.SPOT: [WorkerView("w-1", False, 1, None)], Pool.ON_DEMAND: []}
    queued = {Pool.SPOT: 1, Pool.ON_DEMAND: 0}
    assert decide(queued, views, 1, 1, 0.0, fleets, Pool.SPOT, True).stragglers
    stopped = decide(queued, views, 1, 1, 0.0, fleets, Pool.SPOT, True,
                     frozenset({Pool.ON_DEMAND}))
    assert not stopped.stragglers  # else the Spot VM would sit idle, waiting for on-demand


def test_unrunnable_work_is_what_no_live_or_growable_pool_may_run() -> None:
    fleets = {Pool.SPOT: FleetConfig(1, 2, 5.0), Pool.ON_DEMAND: FleetConfig(1, 1, 5.0)}
    queued = {Pool.SPOT: 2, Pool.ON_DEMAND: 1}
    # on-demand stopped with none alive: non-preemptible work cannot run, the rest on Spot can
    assert unrunnable(queued, {Pool.SPOT: 1}, {Pool.ON_DEMAND}, fleets) == {Pool.ON_DEMAND}
    assert unrunnable(queued, {Pool.SPOT: 1, Pool.ON_DEMAND: 1}, {Pool.ON_DEMAND}, fleets) \
        == set()
    # Spot stopped: its work may still go on-demand
    assert unrunnable(queued, {}, {Pool.SPOT}, fleets) == set()
    assert unrunnable(queued, {}, {Pool.SPOT, Pool.ON_DEMAND}, fleets) == {Pool.SPOT,
                                                                           Pool.ON_DEMAND}
    assert unrunnable({Pool.SPOT: 0, Pool.ON_DEMAND: 0}, {}, {Pool.SPOT, Pool.ON_DEMAND},
                      fleets) == set()
    # one pool (local): it runs both kinds of demand
    local = {Pool.LOCAL: FleetConfig(1, 2, 5.0)}
    assert unrunnable(queued, {}, {Pool.LOCAL}, local) == {Pool.SPOT, Pool.ON_DEMAND}
    assert unrunnable(queued, {Pool.LOCAL: 1}, {Pool.LOCAL}, local) == set()
