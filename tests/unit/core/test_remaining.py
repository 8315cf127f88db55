"""The remaining-time estimate: a moment match of the jobs' deadline-cut lognormal runtimes,
checked against what can be computed by hand."""

from __future__ import annotations

import math

import pytest

from expo_executor.core.remaining import JobLeft, Remaining, remaining
from expo_executor.core.runtime_model import RuntimePrediction


def _exact(median: float) -> RuntimePrediction:
    """A prediction with (next to) no spread."""
    return RuntimePrediction(median, median * 0.999999, median * 1.000001, 0.0)


def test_certain_jobs_sum_their_cpu_seconds_over_the_slots() -> None:
    jobs = [JobLeft(_exact(100.0), None) for _ in range(8)]
    estimate = remaining(jobs, slots=4, slot_hour_usd=3.6)
    assert estimate.jobs == 8
    assert estimate.wall_s == pytest.approx(200.0, rel=1e-4)
    assert estimate.wall_low_s == pytest.approx(200.0, rel=1e-3)
    assert estimate.cost_usd == pytest.approx(0.8, rel=1e-4)  # 800 slot-s at $3.6/slot-h


def test_a_deadline_caps_a_job_and_running_time_is_taken_off() -> None:
    long = JobLeft(_exact(1000.0), deadline_s=60.0)
    running = JobLeft(_exact(50.0), deadline_s=None, elapsed_s=20.0)
    estimate = remaining([long, running], slots=1, slot_hour_usd=0.0)
    assert estimate.wall_s == pytest.approx(90.0, rel=1e-3)
    assert estimate.cost_high_usd == 0.0


def test_the_interval_widens_with_the_spread_and_holds_the_median() -> None:
    wide = RuntimePrediction(100.0, 100.0 / math.e, 100.0 * math.e, 0.1)
    estimate = remaining([JobLeft(wide, None)], slots=1, slot_hour_usd=1.0)
    assert estimate.wall_low_s < estimate.wall_s < estimate.wall_high_s
    # one job: the moment match gives back its own lognormal (sigma = 1 / 1.645)
    assert estimate.wall_s == pytest.approx(100.0, rel=1e-6)
    assert estimate.wall_high_s == pytest.approx(100.0 * math.e, rel=1e-6)


def test_nothing_left_is_zero_and_the_line_says_so() -> None:
    estimate = remaining([], slots=2, slot_hour_usd=1.0)
    assert estimate == Remaining(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    assert estimate.line() == "estimate for 0 jobs: 0 s left (90%: 0 s to 0 s)"


def test_the_line_gives_time_and_cost_with_their_intervals() -> None:
    line = Remaining(3, 5400.0, 3600.0, 9000.0, 1.5, 1.0, 2.5).line()
    assert line == ("estimate for 3 jobs: 90 min left (90%: 60 min to 2.5 h), $1.50 more "
                    "(90%: $1.00 to $2.50)")


def test_a_job_predicted_never_to_finish_costs_its_deadline() -> None:
    """The learned model puts a hopeless job's median (and interval) at infinity: with a
    deadline, the job costs the deadline, not NaN."""
    never = RuntimePrediction(math.inf, math.inf, math.inf, 1.0)
    half = RuntimePrediction(10.0, 5.0, math.inf, 0.3)  # a hopeless share over 5%
    estimate = remaining([JobLeft(never, 60.0), JobLeft(half, 60.0)], slots=1,
                         slot_hour_usd=0.0)
    assert all(math.isfinite(v) for v in (estimate.wall_low_s, estimate.wall_s,
                                          estimate.wall_high_s))
    assert 60.0 <= estimate.wall_low_s <= estimate.wall_s <= estimate.wall_high_s <= 120.0
