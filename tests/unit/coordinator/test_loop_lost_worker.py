"""A worker lost right after a job of it ended: the coordinator driven round by round, with a
scripted engine and the real bucket, so the order of events is exact rather than raced."""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
from expo_executor.coordinator.state import StateDir
from expo_executor.core.records import JobMeta
from expo_executor.core.scheduler import Outcome, Pool, Task
from expo_executor.frontends.base import job_request
from expo_executor.protocol.bucket import LocalBucket

from tests.helpers import KEY, ScriptedEngine, attempt, write_result, write_status


def test_a_result_written_just_before_the_vm_died_is_not_run_again(tmp_path: Path) -> None:
    """The worker wrote the job's result and died before the status write that sends the
    coordinator looking: the result still counts, the job is not re-queued."""
    bucket = LocalBucket(tmp_path / "bucket")
    engine = ScriptedEngine()
    lines: list[str] = []
    config = CoordinatorConfig("run", 1, 1, poll=0.05, status_interval=3600)
    coordinator = Coordinator(config, engine, bucket, KEY, tmp_path, StateDir(tmp_path / "s"),
                              lines.append)
    coordinator.submit([job_request(Task("job", "job"), ["true"], str(tmp_path), {}, None,
                                    meta=JobMeta("r"))])
    now = 10_000.0
    coordinator.tick(now)  # a VM is created
    assert engine.status == {"w-1": "RUNNING"}
    write_status(bucket, "w-1")
    coordinator.tick(now + 0.1)  # ready: the job is assigned
    assert coordinator.scheduler.state("job") == "running"
    write_result(bucket, attempt("job", "w-1", "solved", now, now + 0.2))
    engine.status["w-1"] = "TERMINATED"  # ... and the VM died before its status write
    coordinator.tick(now + 0.3)
    report = coordinator.take_report("job")
    assert report is not None and report.outcome is Outcome.SOLVED, lines
    assert not any("re-queued" in line for line in lines), lines
    assert engine.deleted == ["w-1"]
    coordinator.stop()


def test_a_spot_worker_that_crashed_charges_its_job_no_preemption(tmp_path: Path) -> None:
    """Issue 30 item 8: a Spot VM gone for another reason than a preemption (crashed, deleted
    by hand: LOST) re-queues its job without charging it a Spot attempt; a preempted one does."""
    bucket = LocalBucket(tmp_path / "bucket")
    engine = ScriptedEngine()
    config = CoordinatorConfig("run", 1, 1, poll=0.05, status_interval=3600, pool=Pool.SPOT)
    coordinator = Coordinator(config, engine, bucket, KEY, tmp_path, StateDir(tmp_path / "s"),
                              [].append)
    coordinator.submit([job_request(Task("job", "job"), ["true"], str(tmp_path), {}, None,
                                    meta=JobMeta("r"))])
    now = 10_000.0
    coordinator.tick(now)
    write_status(bucket, "w-1")
    coordinator.tick(now + 0.1)
    assert coordinator.scheduler.state("job") == "running"
    engine.status["w-1"] = "TERMINATED"  # no preemption notice: lost
    coordinator.tick(now + 0.2)
    assert coordinator.scheduler.state("job") == "queued"
    assert coordinator.scheduler.preemptions("job") == 0
    coordinator.stop()
