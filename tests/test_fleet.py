"""Fleet policy: grow to cover queued work counting booting VMs, delete idle ones."""

from expo_executor.fleet import Demand, FleetConfig, WorkerView, plan, plan_pools, stragglers_fit

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
