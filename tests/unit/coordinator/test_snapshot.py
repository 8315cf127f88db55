"""The pools of the run's status (coordinator/snapshot.py): VMs alive by state per pool and
machine, and each pool's cost so far, VMs gone included."""

from __future__ import annotations

import pytest

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.snapshot import pools
from expo_executor.coordinator.vms import Vm
from expo_executor.core.scheduler import Pool


def test_pools_count_vms_by_state_and_price_them() -> None:
    config = CoordinatorConfig("run", 2, 4, pool=Pool.SPOT,
                               machine_types={Pool.SPOT: "e2-standard-2",
                                              Pool.ON_DEMAND: "e2-standard-2"},
                               hourly={Pool.SPOT: 3.6, Pool.ON_DEMAND: 36.0})
    vms = [Vm("w-1", 0.0, Pool.SPOT, ready=True), Vm("w-2", 900.0, Pool.SPOT),
           Vm("w-3", 0.0, Pool.ON_DEMAND, ready=True)]
    shown = pools(vms, {(Pool.SPOT, None): 0.5}, config, now=1000.0)
    by_pool = {p.pool: p for p in shown}
    assert (by_pool["spot"].machine_type, by_pool["spot"].ready, by_pool["spot"].booting) == (
        "e2-standard-2", 1, 1)
    # 0.5 gone, 1000 s and 100 s at $3.6/h
    assert by_pool["spot"].cost_usd == pytest.approx(0.5 + 1.0 + 0.1)
    assert by_pool["on_demand"].cost_usd == pytest.approx(10.0)


def test_an_unpriced_run_shows_no_cost() -> None:
    config = CoordinatorConfig("run", 1, 1)
    shown = pools([Vm("w-1", 0.0, Pool.LOCAL)], {}, config, now=10.0)
    assert [(p.machine_type, p.booting, p.cost_usd) for p in shown] == [("this machine", 1, None)]


def _requests(n: int, scheduler) -> dict:
    from expo_executor.frontends.base import job_request
    from expo_executor.core.records import HardnessMeta, JobMeta
    from expo_executor.core.scheduler import Task

    requests = {}
    for i in range(n):
        meta = JobMeta("solve", {"n": str(i % 7)}, hardness=HardnessMeta("n", ("n",), (i % 7,), ()))
        requests[f"j{i}"] = job_request(Task(f"j{i}", f"solve {i}"), ["true"], None, {}, None,
                                        meta=meta)
        scheduler.submit(requests[f"j{i}"].task)
    return requests


def test_a_big_runs_outcome_map_is_redrawn_less_often() -> None:
    """Drawing the map walks every job: a run of over 20,000 jobs redraws it every third status
    interval (a run's last status always redraws it); a small run's, at every status."""
    from expo_executor.coordinator.snapshot import JobMap
    from expo_executor.core.scheduler import Scheduler

    scheduler = Scheduler()
    requests = _requests(20_002, scheduler)
    drawn = JobMap(10.0)
    first = drawn.get(scheduler, requests, 0.0)
    assert sum(c["queued"] for c in first.cells.values()) == 20_002
    del requests["j0"]  # a change the map shows only once it is redrawn
    assert drawn.get(scheduler, requests, 29.0) is first
    assert drawn.get(scheduler, requests, 29.0, force=True) is not first
    small, scheduler = JobMap(10.0), Scheduler()
    few = _requests(5, scheduler)
    assert small.get(scheduler, few, 0.0) is not small.get(scheduler, few, 10.0)
