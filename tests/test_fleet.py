"""Fleet policy: grow to cover queued work counting booting VMs, delete idle ones."""

from expo_executor.fleet import FleetConfig, WorkerView, plan

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
