"""Pool health: pure transitions for failed creates, boots, capacity and stranded work."""

from __future__ import annotations

from expo_executor.core.fleet import BOOT_FAILURES_TO_STOP, Booting, FleetConfig
from expo_executor.core.pool_health import (CAPACITY_RETRY, STOPPED, PoolHealth, boot_round,
                                            capacity_round, failed_create, quota_full,
                                            startup_failed, stop, strand_check, vm_ended,
                                            vm_ready)
from expo_executor.core.scheduler import Pool

SPOT, OD = Pool.SPOT, Pool.ON_DEMAND


def test_a_stockout_holds_the_pool_back_and_starts_the_capacity_clock_once() -> None:
    health = failed_create(PoolHealth(), SPOT, 100.0, False, "no capacity").health
    assert not health.may_grow(SPOT, 100.0 + CAPACITY_RETRY - 0.1)
    assert health.may_grow(SPOT, 100.0 + CAPACITY_RETRY) and health.may_grow(OD, 100.0)
    assert health.held_until(SPOT, 110.0) == 100.0 + CAPACITY_RETRY
    assert health.held_until(SPOT, 200.0) is None and health.stopped == frozenset()
    again = failed_create(health, SPOT, 150.0, False, "no capacity")
    assert again.stopped == () and again.health.short_since == {SPOT: 100.0}
    assert again.health.no_growth[SPOT] == 150.0 + CAPACITY_RETRY


def test_a_create_that_fails_for_good_stops_the_pool_once_with_its_first_reason() -> None:
    first = failed_create(PoolHealth(), OD, 5.0, True, "quota CPUS exhausted")
    assert first.stopped == ((OD, "quota CPUS exhausted"),)
    assert first.health.stopped == {OD} and first.health.no_growth[OD] == STOPPED
    assert first.health.held_until(OD, 6.0) is None  # never again: nothing to wake up for
    second = stop(first.health, OD, "another reason")
    assert second.stopped == () and second.health.stopped_why == {OD: "quota CPUS exhausted"}


def test_a_stopped_pool_stays_stopped_after_a_late_stockout() -> None:
    stopped = stop(PoolHealth(), SPOT, "boots fail").health
    after = failed_create(stopped, SPOT, 50.0, False, "no capacity")
    assert after.health == stopped and after.stopped == ()


def test_boots_time_out_and_failures_in_a_row_stop_the_pool_with_the_reason() -> None:
    health = PoolHealth()
    stops = []
    for i in range(BOOT_FAILURES_TO_STOP):
        step = boot_round(health, [Booting(f"w-{i}", SPOT, 0.0)], 60.0, 60.0)
        assert step.timed_out == (f"w-{i}",)
        health, stops = step.health, stops + list(step.stopped)
    assert [pool for pool, _ in stops] == [SPOT]
    assert f"{BOOT_FAILURES_TO_STOP} VMs in a row never reported ready within 60 s" in stops[0][1]
    assert health.stopped == {SPOT}
    nothing = boot_round(PoolHealth(), [Booting("w-9", SPOT, 10.0)], 60.0, 60.0)
    assert nothing.timed_out == () and nothing.stopped == ()


def test_a_ready_vm_resets_the_failed_boots_of_its_pool() -> None:
    health = boot_round(PoolHealth(), [Booting("w-1", SPOT, 0.0)], 60.0, 60.0).health
    assert health.boots[SPOT].failures_in_a_row == 1
    health = vm_ready(health, SPOT)
    assert health.boots[SPOT].failures_in_a_row == 0 and health.boots[SPOT].ever_ready


def test_a_pool_short_of_capacity_for_too_long_stops_unless_a_vm_of_it_came_up() -> None:
    health = failed_create(PoolHealth(), SPOT, 0.0, False, "no capacity").health
    early = capacity_round(health, frozenset(), 99.0, 100.0, {SPOT: "e2-standard-4"})
    assert early.stopped == () and early.health.short_since == {SPOT: 0.0}
    late = capacity_round(health, frozenset(), 100.0, 100.0, {SPOT: "e2-standard-4"})
    assert [pool for pool, _ in late.stopped] == [SPOT]
    assert "no capacity for e2-standard-4 in any of its zones for 100 s" in late.stopped[0][1]
    assert late.health.short_since == {} and late.health.stopped == {SPOT}
    ready = capacity_round(health, frozenset({SPOT}), 100.0, 100.0, {})
    assert ready.stopped == () and ready.health.short_since == {}  # the clock starts again


def test_work_is_stranded_only_where_no_live_or_growable_pool_may_run_it() -> None:
    fleets = {SPOT: FleetConfig(1, 2, 5.0), OD: FleetConfig(1, 1, 5.0)}
    queued = {SPOT: 2, OD: 1}
    assert strand_check(PoolHealth(), queued, {}, fleets) is None
    od_gone = stop(PoolHealth(), OD, "quota").health
    partial = strand_check(od_gone, queued, {SPOT: 1}, fleets)
    assert partial is not None and partial.dead == {OD} and not partial.whole_run
    assert partial.reason == ("no VM that may run it is left and no more can be created "
                              "(on_demand: quota)")
    both = stop(od_gone, SPOT, "boots fail").health
    whole = strand_check(both, queued, {}, fleets)
    assert whole is not None and whole.whole_run and whole.dead == {SPOT, OD}
    assert whole.reason == ("no VM is left and no more can be created "
                            "(on_demand: quota; spot: boots fail)")


def test_a_full_quota_holds_the_pool_until_a_vm_of_the_run_ends() -> None:
    held = quota_full(PoolHealth(), OD, alive=2, why="quota CPUS")
    assert held.stopped == () and not held.health.may_grow(OD, 1e9)
    assert held.health.may_grow(SPOT, 0.0) and held.health.held_until(OD, 0.0) is None
    assert vm_ended(held.health).may_grow(OD, 0.0)


def test_a_full_quota_with_no_vm_of_the_run_alive_stops_the_pool() -> None:
    after = quota_full(PoolHealth(), SPOT, alive=0, why="quota PREEMPTIBLE_CPUS")
    assert after.stopped == ((SPOT, "quota PREEMPTIBLE_CPUS"),)
    assert not vm_ended(after.health).may_grow(SPOT, 0.0)  # stopped stays stopped


def test_failed_startups_count_as_failed_boots_and_quote_the_boot_log() -> None:
    health = PoolHealth()
    for _ in range(BOOT_FAILURES_TO_STOP - 1):
        step = startup_failed(health, OD, "ERROR: Python 3.11, host 3.13")
        assert step.stopped == ()
        health = step.health
    last = startup_failed(health, OD, "ERROR: Python 3.11, host 3.13")
    [(pool, why)] = last.stopped
    assert pool is OD and f"{BOOT_FAILURES_TO_STOP} VMs in a row powered off" in why
    assert "ERROR: Python 3.11, host 3.13" in why
    silent = PoolHealth()
    for _ in range(BOOT_FAILURES_TO_STOP):
        step = startup_failed(silent, SPOT, "")
        silent = step.health
    assert "no startup log reached the bucket" in step.stopped[0][1]
    # a VM that came up resets the count, as for boots that time out
    assert vm_ready(health, OD).boots[OD].failures_in_a_row == 0
