"""A timeout that prunes is logged once, with the queued jobs it skipped and the running ones
it cancelled, before any of those skips is reported; the run's status (``status.json``, the
run page) lists the jobs running on which worker, the pools and the recent timeouts. The real
coordinator, round by round (tests/coordinator_rig.py)."""

from __future__ import annotations

import json
from pathlib import Path

from expo_executor.core.hardness import Frontier, HardnessPoint
from expo_executor.core.run_status import RunStatus
from expo_executor.core.scheduler import Outcome

from tests.coordinator_rig import Rig, work_request


def _two_running(tmp_path: Path) -> Rig:
    """Jobs n=0..3 on two one-slot workers: j0 on w-1 and j1 on w-2 run, j2 and j3 wait."""
    rig = Rig(tmp_path, slots=1, workers=2)
    rig.coordinator.submit([work_request(n) for n in range(4)])
    rig.round()
    rig.ready("w-1")
    rig.ready("w-2")
    rig.round()
    assert rig.assigned("w-1") | rig.assigned("w-2") == {"j0", "j1"}, rig.lines
    return rig


def test_a_timeout_is_logged_once_with_what_it_pruned(tmp_path: Path) -> None:
    rig = _two_running(tmp_path)
    worker = "w-1" if "j0" in rig.assigned("w-1") else "w-2"
    rig.result("j0", worker, "timeout")
    rig.ready(worker)
    rig.round()
    lines = [line for line in rig.lines if "timeout: " in line]
    assert lines == ["expocloud: timeout: work {n=0} after 0 s (deadline 30 s); pruned 2 "
                     "queued, cancelled 1 running"], rig.lines
    assert rig.reports["j0"].outcome is Outcome.TIMEOUT
    assert {rig.reports[k].outcome for k in ("j2", "j3")} == {Outcome.SKIPPED}
    assert not any("as hard as" in line for line in rig.lines), "the skips are its summary"

    status = rig.coordinator.status(rig.now)
    assert [(n.label, n.pruned, n.cancelled, n.hardness) for n in status.timeouts] == [
        ("work {n=0}", 2, 1, "n=0")]
    assert status.outcome_map is not None and status.outcome_map.xs == ("0", "1", "2", "3")
    assert dict(status.outcome_map.cells[("", "0", "")]) == {"timeout": 1}
    assert dict(status.outcome_map.cells[("", "1", "")]) == {"running": 1}  # cancelling


def test_the_status_lists_running_jobs_and_pools_and_writes_the_page(tmp_path: Path) -> None:
    rig = _two_running(tmp_path)
    status = rig.coordinator.status(rig.now + 5)
    assert sorted((job.label, job.deadline_s) for job in status.running_jobs) == [
        ("work {n=0}", 30.0), ("work {n=1}", 30.0)]
    assert {job.worker for job in status.running_jobs} == {"w-1", "w-2"}
    assert all(job.since == rig.now for job in status.running_jobs), "started at assignment"
    assert [(p.pool, p.ready, p.booting, p.cost_usd) for p in status.pools] == [
        ("local", 2, 0, None)]

    rig.coordinator.progress.report(status, force=True)
    written = RunStatus.from_dict(json.loads((tmp_path / "status.json").read_text()))
    assert written == status
    page = (tmp_path / "run.html").read_text()
    assert 'http-equiv="refresh"' in page and "work {n=1}" in page


def test_a_held_job_its_worker_never_started_is_counted_once_and_not_as_killed(
        tmp_path: Path) -> None:
    """Prefetch: w-1 runs j0 and holds j1. j0's timeout cancels j1, and the worker confirms
    it never started it: the timeout's line counted it, no "on arrival" line counts it again,
    and its report is not a kill."""
    rig = Rig(tmp_path, slots=1, workers=1)
    rig.coordinator.scheduler.set_prefetch(1)
    rig.coordinator.submit([work_request(n) for n in range(4)])
    rig.round()
    rig.ready("w-1")
    rig.round()
    assert rig.assigned("w-1") == {"j0", "j1"}, rig.lines
    rig.result("j0", "w-1", "timeout")
    rig.round()
    rig.result("j1", "w-1", "cancelled", "cancelled before start", ran=False)
    rig.round()
    rig.submit("later")  # new jobs: the round says what it skipped on their arrival
    rig.round()
    assert [line for line in rig.lines if "timeout: " in line or "as hard as" in line] == [
        "expocloud: timeout: work {n=0} after 0 s (deadline 30 s); pruned 2 queued, "
        "cancelled 1 running"], rig.lines
    assert rig.reports["j1"].outcome is Outcome.SKIPPED and not rig.reports["j1"].killed
    assert rig.reports["j1"].worker is None


def test_jobs_an_earlier_timeout_skips_on_arrival_get_one_line(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    frontier = Frontier()
    frontier.add(HardnessPoint((), (1.0,)), "work {n=1}")
    rig.coordinator.scheduler.frontiers["f"] = frontier
    rig.coordinator.submit([work_request(n) for n in range(4)])
    rig.round()
    assert [line for line in rig.lines if "as hard as" in line] == [
        "expocloud: skipped 3 jobs on arrival: as hard as or harder than work {n=1}, which "
        "timed out in an earlier run"], rig.lines
