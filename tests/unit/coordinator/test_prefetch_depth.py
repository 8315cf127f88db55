"""The GCE default prefetch: a slot holds about HOLD_S of work, sized by the jobs' length."""

from __future__ import annotations

from expo_executor.coordinator.prefetch_depth import HOLD_S, MAX_DEPTH, PrefetchDepth


def test_before_any_job_ends_a_slot_holds_one():
    assert PrefetchDepth().depth() == 1


def test_the_depth_holds_about_the_hold_time_of_the_median_job():
    depth = PrefetchDepth()
    for seconds in (55, 60, 65, 3000):  # one straggler does not move the median
        depth.observe(seconds)
    assert depth.depth() == -(-HOLD_S // 62.5)


def test_short_jobs_are_capped_and_long_ones_hold_one():
    short, long = PrefetchDepth(), PrefetchDepth()
    for _ in range(10):
        short.observe(0.0)
        long.observe(2 * HOLD_S)
    assert short.depth() == MAX_DEPTH
    assert long.depth() == 1


def test_the_depth_follows_the_latest_jobs():
    depth = PrefetchDepth()
    for _ in range(100):
        depth.observe(10)
    for _ in range(64):
        depth.observe(150)  # harder jobs now: the window has only these
    assert depth.depth() == -(-HOLD_S // 150)


def test_gce_sizes_the_depth_unless_the_setting_fixes_it_and_local_holds_one():
    from expo_executor.coordinator.settings import ExecutorSettings
    from expo_executor.settings.values import prefetch, prefetch_hold_s

    gce = dict(engine="gce", gce_project="p", gce_zones="us-central1-a", max_workers=2)
    assert (prefetch(ExecutorSettings(**gce)), prefetch_hold_s(ExecutorSettings(**gce))) \
        == (1, HOLD_S)
    fixed = ExecutorSettings(**gce, prefetch=3)
    assert (prefetch(fixed), prefetch_hold_s(fixed)) == (3, None)
    local = ExecutorSettings(engine="local")
    assert (prefetch(local), prefetch_hold_s(local)) == (1, None)
