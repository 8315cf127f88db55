"""A worker's results are all read before its jobs are re-queued (C3): results are read in
sorted key order, so a stopping worker's "cancelled" of ``j10a1`` comes before its "solved" of
``j9a1``; the cancelled branch must not re-queue ``j9a1`` (and drop its result) first."""

from __future__ import annotations

from pathlib import Path

from expo_executor.core.scheduler import Outcome

from tests.coordinator_rig import Rig


def test_a_cancelled_result_read_first_does_not_drop_a_solved_one(tmp_path: Path) -> None:
    rig = Rig(tmp_path, slots=2)
    rig.submit("j9a1", "j10a1")
    rig.round()
    rig.ready("w-1")
    rig.round()
    assert rig.assigned("w-1") == {"j9a1", "j10a1"}
    # j9a1 ended; then the worker stopped and killed j10a1, "cancelled" (not the job's end)
    rig.result("j9a1", "w-1", "solved")
    rig.result("j10a1", "w-1", "cancelled", "worker stopping: terminated")
    rig.ready("w-1")
    rig.round()
    assert rig.reports["j9a1"].outcome is Outcome.SOLVED, rig.lines
    assert "j10a1" not in rig.reports
    assert rig.coordinator.scheduler.state("j10a1") in ("queued", "running")
    requeued = [line for line in rig.lines if "re-queued" in line]
    assert len(requeued) == 1 and "j10a1" in requeued[0], requeued
