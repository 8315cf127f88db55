"""Prefetch's rules for a worker's held jobs (core/held_jobs.py), which the scheduler decides
with and the worker agent follows: when a worker wants a refill, and which held job starts."""

from __future__ import annotations

from expo_executor.core.held_jobs import runs_low, starts_now, wants_refill


def test_a_worker_is_refilled_on_low_with_prefetch_two_or_more() -> None:
    # 4 CPUs, prefetch 2: up to 8 held CPUs; refilled only at one held job per slot or fewer
    assert not wants_refill(2, 8, 4) and not wants_refill(2, 5, 4)
    assert wants_refill(2, 4, 4) and wants_refill(2, 0, 4)
    # prefetch 0 or 1: whenever it has prefetch left (the held CPUs never pass its CPUs)
    assert wants_refill(1, 4, 4) and wants_refill(0, 0, 4)


def test_runs_low_is_the_refill_rule_the_worker_reports_by() -> None:
    """The worker does not know the prefetch: with 0 or 1 its held jobs never need more CPUs
    than it has, so ``runs_low`` alone says what ``wants_refill`` says for every prefetch."""
    for prefetch in range(4):
        for cpus in (1, 2, 4):
            for held in range(cpus * prefetch + 1):
                assert runs_low(held, cpus) == wants_refill(prefetch, held, cpus)


def test_a_held_job_starts_when_it_fits_or_nothing_runs() -> None:
    assert starts_now(2, 2, busy=True) and not starts_now(3, 2, busy=True)
    assert starts_now(8, 0, busy=False), "a job wider than the free CPUs starts on an idle worker"
