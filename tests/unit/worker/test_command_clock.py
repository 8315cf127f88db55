"""The command clock: stamps read back, the deadline judged on the command's own time, and the
hook installed on the installed Snakemake's own rule runner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from expo_executor.worker import command_clock
from expo_executor.worker.command_clock import Stamps, install, judge, read_stamps, stamp


def _stamps(tmp_path: Path, *lines: dict, torn: str = "") -> Stamps:
    path = tmp_path / "j.stamps"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines) + torn)
    return read_stamps(path)


def test_stamps_are_read_back_and_a_torn_line_is_ignored(tmp_path: Path) -> None:
    stamps = _stamps(tmp_path, {"hooked": True}, {"start": 10.0}, {"end": 12.5},
                     {"start": 20.0}, torn='{"end": 2')
    assert stamps.hooked and stamps.running
    assert stamps.command_s(now=21.0) == pytest.approx(3.5)
    assert read_stamps(tmp_path / "missing") == Stamps()


def test_commands_running_at_once_count_once(tmp_path: Path) -> None:
    """A group job's rules may run in parallel threads: their time is the union of their runs."""
    stamps = _stamps(tmp_path, {"hooked": True}, {"start": 0.0}, {"start": 1.0}, {"end": 2.0},
                     {"end": 3.0}, {"start": 10.0}, {"end": 11.0})
    assert not stamps.running and stamps.command_s(now=50.0) == pytest.approx(4.0)


def test_a_command_only_job_is_timed_whole_as_its_command(tmp_path: Path) -> None:
    """A direct job (frontends/snakemake/direct_jobs.py) runs its command alone: stamped at its
    start by its worker, its command runs until it is reaped, and its deadline is a timeout."""
    path = tmp_path / "stamps"
    command_clock.whole_command(str(path))
    stamps = read_stamps(path)
    started = stamps.intervals[0][0]
    assert stamps.hooked and stamps.running
    assert stamps.command_s(now=started + 7.0) == pytest.approx(7.0)
    overrun = judge(stamps, spawned=started, now=started + 5.0, deadline_s=5.0, allowance_s=1.0)
    assert overrun is not None and overrun.timeout


def test_slow_start_up_is_not_counted_against_the_deadline() -> None:
    stamps = Stamps(True, None, [[100.0, None]])  # the command started 100 s after the spawn
    assert judge(stamps, spawned=0.0, now=104.0, deadline_s=5.0, allowance_s=600.0) is None
    overrun = judge(stamps, spawned=0.0, now=105.0, deadline_s=5.0, allowance_s=600.0)
    assert overrun is not None and overrun.timeout
    assert "its command's time" in overrun.reason


def test_start_up_or_staging_past_the_allowance_is_a_failure_not_a_timeout() -> None:
    before = judge(Stamps(True), spawned=0.0, now=30.0, deadline_s=5.0, allowance_s=30.0)
    assert before is not None and not before.timeout
    assert "before its command started" in before.reason and "not a timeout" in before.reason
    after = judge(Stamps(True, None, [[1.0, 3.0]]), spawned=0.0, now=32.0, deadline_s=5.0,
                  allowance_s=30.0)
    assert after is not None and not after.timeout and "after its command ended" in after.reason


def test_without_stamps_the_deadline_times_the_whole_job_as_before() -> None:
    stamps = Stamps()  # a command that never spoke of stamps: nothing is staged around it
    assert judge(stamps, spawned=0.0, now=4.9, deadline_s=5.0, allowance_s=1.0) is None
    overrun = judge(stamps, spawned=0.0, now=5.0, deadline_s=5.0, allowance_s=1.0)
    assert overrun is not None and overrun.timeout
    assert judge(Stamps(True), spawned=0.0, now=1e6, deadline_s=None, allowance_s=1.0) is None


def test_a_job_whose_hook_failed_is_killed_at_its_deadline_as_a_failure_not_a_timeout(
        tmp_path: Path) -> None:
    """Issue 30, a suspicion confirmed: a Snakemake job announces its stamps (its staging
    starts), then its hook fails to install; its deadline then timed the whole job, so slow
    staging (an input's download) ended in a TIMEOUT that pruned harder jobs. It is killed
    at the same time, as a failure that says why: the time proves no hardness."""
    path = tmp_path / "s"
    stamp(str(path), hooked=True)  # the shell's announcement
    stamp(str(path), hooked=False, why="no rule runner")  # the hook's later word
    stamps = read_stamps(path)
    assert judge(stamps, spawned=0.0, now=4.9, deadline_s=5.0, allowance_s=1.0) is None
    overrun = judge(stamps, spawned=0.0, now=5.0, deadline_s=5.0, allowance_s=600.0)
    assert overrun is not None and not overrun.timeout
    assert "no rule runner" in overrun.reason and "not a timeout" in overrun.reason


def test_the_hook_wraps_snakemakes_own_rule_runner(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from snakemake.executors import local

    monkeypatch.setattr(local, "run_wrapper", local.run_wrapper)
    monkeypatch.setattr(local.Executor, "spawn_job", local.Executor.spawn_job)
    calls: list[str] = []
    monkeypatch.setattr(local, "run_wrapper", lambda *a: calls.append("body"))
    path = str(tmp_path / "s")
    assert install(path) is None
    local.run_wrapper()  # what Executor.run_single_job submits for a rule's body
    stamps = read_stamps(Path(path))
    assert calls == ["body"] and len(stamps.intervals) == 1 and not stamps.running


def test_a_changed_snakemake_leaves_the_job_unhooked_not_broken(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from snakemake.executors import local

    monkeypatch.delattr(local, "run_wrapper")
    why = install(str(tmp_path / "s"))
    assert why is not None and "rule runner" in why
    stamp(None, start=1.0)  # no file named: nothing written, nothing raised


def test_the_entry_point_wants_snakemakes_own_command_line() -> None:
    with pytest.raises(SystemExit, match="usage"):
        command_clock.main(["--snakefile", "x"])

