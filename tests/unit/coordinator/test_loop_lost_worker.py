"""A worker lost right after a job of it ended: the coordinator driven round by round, with a
scripted engine and the real bucket, so the order of events is exact rather than raced."""

from __future__ import annotations

import time
from pathlib import Path

from expo_executor.protocol import messages
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig, JobRequest
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.core.records import JobMeta
from expo_executor.core.scheduler import Outcome, Pool, Task
from expo_executor.coordinator.state import StateDir
from expo_executor.protocol.keys import result_key, status_key
from expo_executor.protocol.worker_keys import worker_key

KEY = b"k" * 32


class ScriptedEngine:
    """VMs that exist on paper: created RUNNING, TERMINATED when the test says they died."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.deleted: list[str] = []

    def create(self, names: list[str], pool: Pool, slots: int) -> None:
        self.status.update({name: "RUNNING" for name in names})

    def delete(self, name: str) -> None:
        self.deleted.append(name)
        self.status.pop(name, None)

    def list(self) -> list[Instance]:
        return [Instance(name, Pool.LOCAL, 1, status) for name, status in self.status.items()]

    def failures(self) -> list[CreateFailed]:
        return []

    def preempted(self) -> set[str]:
        return set()

    def close(self) -> None:
        pass


def _status(bucket: LocalBucket, worker: str, running: list[str]) -> None:
    body = {"worker": worker, "seq_seen": 0, "time": time.time(), "running": running,
            "slots": 1, "state": "ready", "ops": {}}
    bucket.write(status_key(worker), messages.encode("status", body, worker_key(KEY, worker)))


def test_a_result_written_just_before_the_vm_died_is_not_run_again(tmp_path: Path) -> None:
    """The worker wrote the job's result and died before the status write that sends the
    coordinator looking: the result still counts, the job is not re-queued."""
    bucket = LocalBucket(tmp_path / "bucket")
    engine = ScriptedEngine()
    lines: list[str] = []
    config = CoordinatorConfig("run", 1, 1, poll=0.05, status_interval=3600)
    coordinator = Coordinator(config, engine, bucket, KEY, tmp_path, StateDir(tmp_path / "s"),
                              lines.append)
    coordinator.submit([JobRequest(Task("job", "job"), ["true"], str(tmp_path), {}, None,
                                   meta=JobMeta("r"))])
    now = 10_000.0
    coordinator.tick(now)  # a VM is created
    assert engine.status == {"w-1": "RUNNING"}
    _status(bucket, "w-1", [])
    coordinator.tick(now + 0.1)  # ready: the job is assigned
    assert coordinator.scheduler.state("job") == "running"
    result = {"key": "job", "worker": "w-1", "outcome": "solved", "returncode": 0,
              "started": now, "ended": now + 0.2, "reason": None, "log_tail": ""}
    bucket.write(result_key("job", "w-1"),
                 messages.encode("result", result, worker_key(KEY, "w-1")),
                 if_generation_match=0)
    engine.status["w-1"] = "TERMINATED"  # ... and the VM died before its status write
    coordinator.tick(now + 0.3)
    report = coordinator.take_report("job")
    assert report is not None and report.outcome is Outcome.SOLVED, lines
    assert not any("re-queued" in line for line in lines), lines
    assert engine.deleted == ["w-1"]
    coordinator.stop()
