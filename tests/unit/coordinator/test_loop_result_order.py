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


def test_a_stopping_workers_batch_with_its_cancelled_first_keeps_its_solved(
        tmp_path: Path) -> None:
    """The same in one object (a worker batching its reports): its "cancelled" comes first."""
    rig = Rig(tmp_path, slots=2)
    rig.submit("j9a1", "j10a1")
    rig.round()
    rig.ready("w-1")
    rig.round()
    rig.batch("w-1", ("j10a1", "cancelled"), ("j9a1", "solved"))
    rig.ready("w-1")
    rig.round()
    assert rig.reports["j9a1"].outcome is Outcome.SOLVED, rig.lines
    assert "j10a1" not in rig.reports
    requeued = [line for line in rig.lines if "re-queued" in line]
    assert len(requeued) == 1 and "j10a1" in requeued[0], requeued


def test_the_coordinator_takes_each_result_of_a_batch_once(tmp_path: Path) -> None:
    from expo_executor.protocol.keys import result_key

    rig = Rig(tmp_path, slots=4)
    rig.submit("j1a1", "j2a1", "j3a1", "j4a1")
    rig.round()
    rig.ready("w-1")
    rig.round()
    rig.batch("w-1", ("j3a1", "solved"), ("j1a1", "failed"), ("j2a1", "solved"))
    rig.ready("w-1")
    rig.round()
    assert {k: r.outcome for k, r in rig.reports.items()} == {
        "j1a1": Outcome.FAILED, "j2a1": Outcome.SOLVED, "j3a1": Outcome.SOLVED}
    assert rig.assigned("w-1") == {"j4a1"}
    assert rig.direct.read(result_key("j3a1", "w-1")) is None, "deleted once recorded"
    rig.batch("w-1", ("j3a1", "solved"), ("j4a1", "solved"))  # sent again, one more in it
    rig.ready("w-1")
    rig.round()  # (the rig fails a second report of a job)
    assert rig.reports["j4a1"].outcome is Outcome.SOLVED
    assert rig.coordinator.channel.bucket.list("workers/w-1/results/") == {}
