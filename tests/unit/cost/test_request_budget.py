"""The request budget's arithmetic, on counts whose prices are easy to check by hand."""

import pytest

from expo_executor.cost.request_budget import PRICE_PER_OP, at_scale


def test_overhead_and_per_job_costs_from_counts() -> None:
    # two workers for an hour each: 3,600 inbox reads each, 100 writes each (one per job);
    # the coordinator listed 3,600 times in the hour and wrote/read 200 times for the jobs.
    budget = at_scale({"w-1": {"A": 100, "B": 3600}, "w-2": {"A": 100, "B": 3600}},
                      worker_seconds=7200, coordinator_ops={"A": 3600 + 200, "B": 200},
                      coordinator_lists=3600, run_seconds=3600, jobs=200, slots=2,
                      vm_price_per_hour=0.05, workers=1000)
    listing = 3600 * 2 * PRICE_PER_OP["A"] / 1000  # two pages per listing at 1,000 workers
    assert budget.overhead_per_worker_hour == pytest.approx(3600 * PRICE_PER_OP["B"] + listing)
    assert budget.per_job == pytest.approx((200 * PRICE_PER_OP["A"] * 2
                                            + 200 * PRICE_PER_OP["B"]) / 200)
    assert budget.jobs_per_worker_hour == pytest.approx(100)
    assert budget.ratio == pytest.approx(
        (budget.overhead_per_worker_hour + 100 * budget.per_job) / 0.05)


def test_break_even_job_length() -> None:
    budget = at_scale({"w": {"A": 0, "B": 0}}, 3600, {"A": 1, "B": 0}, 0, 3600, jobs=1, slots=1,
                      vm_price_per_hour=0.036)
    # one class A write per job = 5e-6 USD; 1% of a slot-second = 1e-7 USD: 50 s
    assert budget.break_even_job_s == pytest.approx(50.0)
    assert budget.overhead_ratio == 0.0


def test_pulse_writes_count_as_overhead_shared_by_the_fleet_not_per_job() -> None:
    # one worker-hour, 48 pulses (one a 75-s heartbeat) and 10 assignment writes for 10 jobs
    budget = at_scale({"w": {"A": 0, "B": 0}}, 3600, {"A": 58, "B": 0}, 0, 3600, jobs=10,
                      slots=1, vm_price_per_hour=0.05, workers=1000,
                      coordinator_heartbeats=48)
    # one pulse serves every worker: its 48 writes an hour are split among 1,000 of them
    assert budget.overhead_per_worker_hour == pytest.approx(48 * PRICE_PER_OP["A"] / 1000)
    assert budget.per_job == pytest.approx(PRICE_PER_OP["A"])


def test_workers_pulse_reads_are_overhead_from_their_own_counts() -> None:
    # a worker that read the pulse 48 times in its hour (and nothing else)
    budget = at_scale({"w": {"A": 0, "B": 48}}, 3600, {"A": 0, "B": 0}, 0, 3600, jobs=1,
                      slots=1, vm_price_per_hour=0.05, workers=1000)
    assert budget.overhead_per_worker_hour == pytest.approx(48 * PRICE_PER_OP["B"])
