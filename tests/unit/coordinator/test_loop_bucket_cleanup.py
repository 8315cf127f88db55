"""The run cleans up what it wrote in the bucket: a VM's objects go when the VM ends (a result
read first), so the coordinator's listing of ``workers/`` grows with the fleet, not with Spot
churn; a delete that fails never fails the run. The coordinator is driven round by round with a
scripted engine and the real local bucket, so the order of events is exact."""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
from expo_executor.coordinator.state import StateDir
from expo_executor.core.records import JobMeta
from expo_executor.core.scheduler import Outcome, Task
from expo_executor.frontends.base import job_request
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import WORKERS_PREFIX, key_grant_key, key_request_key

from tests.helpers import KEY, ScriptedEngine, attempt, write_result, write_status

OBJECTS_PER_VM = 5  # status, inbox, key request, key, one result object


class StorageDown(Exception):
    pass


class CountingBucket(LocalBucket):
    """The local bucket, counting what each listing of ``workers/`` shows; its deletes fail
    while ``deletes_fail`` (a storage error that outlived its retries)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listed: list[int] = []
        self.deletes_fail = False

    def list(self, prefix: str) -> dict[str, int]:
        found = super().list(prefix)
        if prefix == WORKERS_PREFIX:
            self.listed.append(len(found))
        return found

    def delete(self, key: str) -> None:
        if self.deletes_fail:
            raise StorageDown(key)
        super().delete(key)


def _coordinator(tmp_path: Path, bucket: LocalBucket, engine: ScriptedEngine,
                 lines: list[str], keep_bucket: bool = False) -> Coordinator:
    config = CoordinatorConfig("run", 1, 1, poll=0.05, status_interval=3600,
                               keep_bucket=keep_bucket)
    return Coordinator(config, engine, bucket, KEY, tmp_path, StateDir(tmp_path / "s"),
                       lines.append)


def _submit(coordinator: Coordinator, key: str, tmp_path: Path) -> None:
    coordinator.submit([job_request(Task(key, key), ["true"], str(tmp_path), {}, None,
                                    meta=JobMeta("r"))])


def _boot(bucket: LocalBucket, name: str) -> None:
    """What a GCE worker writes as it comes up: its key request, then its ready status (the
    coordinator's answer, key.json, is written here too: the local rig grants no keys)."""
    bucket.write(key_request_key(name), b"{}")
    bucket.write(key_grant_key(name), b"{}")
    write_status(bucket, name)


def _workers_of(bucket: LocalBucket) -> set[str]:
    return {key.removeprefix(WORKERS_PREFIX).split("/", 1)[0]
            for key in bucket.list(WORKERS_PREFIX)}


def _preempted_vm_cycle(coordinator: Coordinator, bucket: LocalBucket,
                        engine: ScriptedEngine, job: str, now: float, tmp_path: Path) -> float:
    """One Spot VM's life: created for ``job``, ready, solves it, dies; its worker's last
    status lands after the coordinator dropped it."""
    _submit(coordinator, job, tmp_path)
    coordinator.tick(now)
    (name,) = [n for n, status in engine.status.items() if status == "RUNNING"]
    _boot(bucket, name)
    coordinator.tick(now + 0.1)  # ready: the job is assigned
    assert coordinator.scheduler.state(job) == "running"
    write_result(bucket, attempt(job, name, "solved", now, now + 0.2))
    engine.status[name] = "TERMINATED"
    coordinator.tick(now + 0.3)  # the result taken, the VM lost
    assert coordinator.take_report(job).outcome is Outcome.SOLVED
    write_status(bucket, name)  # its worker's last word, after the coordinator dropped it
    coordinator.tick(now + 0.4)
    return now + 1.0


def test_the_listing_grows_with_the_fleet_not_with_the_vms_that_ended(tmp_path: Path) -> None:
    """Forty VMs come and go: each one's status, inbox, key request, key and result objects
    go with it, so what a round lists stays one VM's worth, not forty."""
    bucket = CountingBucket(tmp_path / "bucket")
    engine = ScriptedEngine()
    lines: list[str] = []
    coordinator = _coordinator(tmp_path, bucket, engine, lines)
    now = 10_000.0
    for i in range(40):
        now = _preempted_vm_cycle(coordinator, bucket, engine, f"job-{i}", now, tmp_path)
    coordinator.tick(now)
    assert len(engine.deleted) == 40
    assert max(bucket.listed) <= OBJECTS_PER_VM, bucket.listed
    assert _workers_of(bucket) <= set(coordinator.vms.names())
    coordinator.stop()


def test_a_result_written_after_its_vm_was_dropped_is_read_said_and_deleted(
        tmp_path: Path) -> None:
    """A result that lands after its VM was dropped (its job given back to the queue) is read
    before its object goes, and the log says it came too late to be used."""
    bucket = LocalBucket(tmp_path / "bucket")
    engine = ScriptedEngine()
    lines: list[str] = []
    coordinator = _coordinator(tmp_path, bucket, engine, lines)
    _submit(coordinator, "job", tmp_path)
    now = 10_000.0
    coordinator.tick(now)
    _boot(bucket, "w-1")
    coordinator.tick(now + 0.1)
    assert coordinator.scheduler.state("job") == "running"
    engine.status["w-1"] = "TERMINATED"
    coordinator.tick(now + 0.2)  # lost: the job goes back to the queue
    write_result(bucket, attempt("job", "w-1", "solved", now, now + 0.3))
    coordinator.tick(now + 0.4)
    late = [line for line in lines if "after it was dropped" in line]
    assert len(late) == 1 and "job" in late[0] and "w-1" in late[0], lines
    assert "w-1" not in _workers_of(bucket)
    coordinator.stop()


def test_a_delete_that_fails_never_fails_the_run_and_is_tried_again(tmp_path: Path) -> None:
    """Storage refuses every delete: the rounds go on (none fails), the dropped VM's objects
    stay; once deletes work again, the next round removes them."""
    bucket = CountingBucket(tmp_path / "bucket")
    engine = ScriptedEngine()
    lines: list[str] = []
    coordinator = _coordinator(tmp_path, bucket, engine, lines)
    bucket.deletes_fail = True
    now = _preempted_vm_cycle(coordinator, bucket, engine, "job", 10_000.0, tmp_path)
    assert coordinator.round(now)
    assert coordinator.round(now + 0.5)
    assert coordinator.outage.since is None
    assert "w-1" in _workers_of(bucket)
    said = [line for line in lines if "could not delete" in line and "dropped VMs" in line]
    assert len(said) == 1, lines  # once while deletes keep failing, not every round
    bucket.deletes_fail = False
    assert coordinator.round(now + 1)
    assert "w-1" not in _workers_of(bucket)
    coordinator.stop()


def test_the_runs_objects_go_when_it_ends_unless_it_keeps_them(tmp_path: Path) -> None:
    """At its end the run deletes every object it and its workers wrote; with keep_bucket
    (--expocloud-keep-bucket) they stay, and the log says where."""
    for keep in (False, True):
        bucket = LocalBucket(tmp_path / f"bucket-{keep}")
        engine = ScriptedEngine()
        lines: list[str] = []
        coordinator = _coordinator(tmp_path / f"run-{keep}", bucket, engine, lines, keep)
        _submit(coordinator, "job", tmp_path)
        coordinator.tick(10_000.0)
        _boot(bucket, "w-1")
        coordinator.tick(10_000.1)
        bucket.write("logs/job/w-1/0", b"a saved log")
        assert len(bucket.list("")) >= 5
        coordinator.stop()
        left = bucket.list("")
        assert (len(left) >= 5) if keep else left == {}, left
        assert any("--expocloud-keep-bucket" in line for line in lines) is keep, lines


def test_objects_a_failed_delete_leaves_at_the_end_are_said_not_raised(tmp_path: Path) -> None:
    """Storage refuses the end's deletes: stop() still ends the run, and says how to remove
    what is left."""
    bucket = CountingBucket(tmp_path / "bucket")
    engine = ScriptedEngine()
    lines: list[str] = []
    coordinator = _coordinator(tmp_path, bucket, engine, lines)
    _submit(coordinator, "job", tmp_path)
    coordinator.tick(10_000.0)
    _boot(bucket, "w-1")
    bucket.deletes_fail = True
    coordinator.stop()
    assert bucket.list("")
    assert any("expocloud cleanup --run run" in line for line in lines), lines
