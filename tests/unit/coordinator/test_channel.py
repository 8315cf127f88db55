"""The coordinator's channel issues a round's bucket calls together, and takes their answers in
a fixed order: results in the sorted order of their keys however the reads finish, a failed
call that loses none of the others, and new results found by the round's one listing (reads
of only what it shows), each deleted once taken. The bucket is the real local one; a subclass
holds chosen reads back or fails them, the way a slow or failing storage request would."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from expo_executor.coordinator.channel import Channel
from expo_executor.coordinator.vms import Vm
from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.core.scheduler import Pool
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol import messages
from expo_executor.protocol.keys import PULSE_KEY, inbox_key, result_key, status_key
from expo_executor.protocol.records import (JobSpec, Pulse, ResultBatch, WorkerResult,
                                            WorkerStatus)
from expo_executor.protocol.worker_keys import worker_key

KEY = b"k" * 32


class StorageDown(Exception):
    pass


class HeldBucket(LocalBucket):
    """Reads of ``hold`` wait until the read of ``release`` has been made (a slow answer);
    reads and writes of ``fail`` raise (a storage error that outlived its retries)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.hold: str | None = None
        self.release: str | None = None
        self.released = threading.Event()
        self.fail: set[str] = set()

    def read(self, key: str, **bounds):  # type: ignore[override]
        if key in self.fail:
            raise StorageDown(key)
        if key == self.hold:
            self.released.wait(timeout=5)
        blob = super().read(key, **bounds)
        if key == self.release:
            self.released.set()
        return blob

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        if key in self.fail:
            raise StorageDown(key)
        return super().write(key, data, if_generation_match)

    def delete(self, key: str) -> None:
        if key in self.fail:
            raise StorageDown(key)
        super().delete(key)


def _result(bucket: LocalBucket, job: str, worker: str) -> None:
    result = WorkerResult(job, worker, AttemptEnd.SOLVED, 0, 1.0, 2.0)
    bucket.write(result_key(job, worker), result.encode(worker_key(KEY, worker)))


def _listed(channel: Channel) -> Channel:
    """The channel after a round's listing (``statuses``), which shows it the new results."""
    channel.statuses([])
    return channel


@pytest.fixture
def bucket(tmp_path: Path) -> HeldBucket:
    return HeldBucket(tmp_path / "bucket")


def test_results_come_in_key_order_while_their_reads_overlap(bucket: HeldBucket) -> None:
    """The first key's read answers only after the last key's read was made: read one after
    the other, the first would wait in vain; read together, all arrive, in sorted order."""
    pairs = [(f"j{i}", "w1") for i in range(1, 6)]
    for job, worker in pairs:
        _result(bucket, job, worker)
    bucket.hold, bucket.release = result_key("j1", "w1"), result_key("j5", "w1")
    channel = _listed(Channel(bucket, KEY, print))
    try:
        got = [(r.key, r.worker) for r in channel.results(set(pairs))]
    finally:
        channel.close()
    assert bucket.released.is_set(), "the last read was made while the first one waited"
    assert got == sorted(pairs)


def test_a_failing_result_read_loses_none_of_the_others(bucket: HeldBucket) -> None:
    """The first read fails: the others' results are still handed out, the round still sees
    the error, and the failed one is read (and taken) the next time."""
    pairs = {("a", "w1"), ("b", "w1"), ("c", "w2")}
    for job, worker in pairs:
        _result(bucket, job, worker)
    bucket.fail = {result_key("a", "w1")}
    channel = _listed(Channel(bucket, KEY, print))
    got: list[str] = []
    with pytest.raises(StorageDown):
        for result in channel.results(pairs):
            got.append(result.key)
    assert got == ["b", "c"]
    bucket.fail = set()
    assert [r.key for r in channel.results(pairs)] == ["a"]
    assert list(channel.results(pairs)) == [], "each result is taken once"
    channel.close()


def test_a_result_taken_by_a_nested_call_is_not_handed_out_again(bucket: HeldBucket) -> None:
    """Acting on one result may read a worker's results again (a lost VM's last words): what
    that nested call takes, the outer one does not hand out a second time."""
    pairs = {("a", "w1"), ("b", "w1"), ("c", "w1")}
    for job, worker in pairs:
        _result(bucket, job, worker)
    channel = _listed(Channel(bucket, KEY, print))
    outer, inner = [], []
    for result in channel.results(pairs):
        outer.append(result.key)
        if result.key == "a":
            inner = [r.key for r in channel.results(pairs)]
    assert (outer, inner) == (["a"], ["b", "c"])
    channel.close()


def test_a_round_lists_once_and_reads_only_the_results_it_shows(bucket: HeldBucket) -> None:
    """Of 200 pending results one was written: the round's one listing shows it, and it is the
    one read, not 200 reads of objects that are not there."""
    pairs = {(f"j{i:03d}", "w1") for i in range(200)}
    _result(bucket, "j123", "w1")
    channel = Channel(bucket, KEY, print)
    before = dict(bucket.ops)
    assert [r.key for r in _listed(channel).results(pairs)] == ["j123"]
    assert bucket.ops["A"] - before.get("A", 0) == 1, "one listing"
    assert bucket.ops["B"] - before.get("B", 0) == 1, "one read: the result that exists"
    assert channel.lists == 1
    channel.close()


def test_a_result_written_after_the_listing_waits_for_the_next_one(bucket: HeldBucket) -> None:
    channel = _listed(Channel(bucket, KEY, print))
    _result(bucket, "j1", "w1")
    assert list(channel.results({("j1", "w1")})) == []
    assert [r.key for r in _listed(channel).results({("j1", "w1")})] == ["j1"]
    channel.close()


def test_taken_results_are_deleted_and_a_failed_delete_is_tried_again(
        bucket: HeldBucket) -> None:
    """The listing stays the size of the fleet: a result, once taken (and its record on disk,
    the caller's part), goes; one whose delete failed goes next time; one not taken (of a
    worker not asked about) stays."""
    for job, worker in (("a", "w1"), ("b", "w1"), ("c", "w2")):
        _result(bucket, job, worker)
    channel = _listed(Channel(bucket, KEY, print))
    assert [r.key for r in channel.results({("a", "w1"), ("b", "w1")})] == ["a", "b"]
    bucket.fail = {result_key("a", "w1")}
    channel.delete_taken()
    assert bucket.read(result_key("b", "w1")) is None
    bucket.fail = set()
    assert bucket.read(result_key("a", "w1")) is not None, "its delete failed"
    channel.delete_taken()
    assert bucket.read(result_key("a", "w1")) is None
    assert bucket.read(result_key("c", "w2")) is not None, "not taken: kept"
    channel.close()


def _batch(bucket: LocalBucket, worker: str, *jobs: str,
           end: AttemptEnd = AttemptEnd.SOLVED) -> None:
    """One object of ``worker``'s results of ``jobs``, as a worker holding prefetched jobs
    writes it: named for the first job, signed once."""
    batch = ResultBatch(worker, tuple(WorkerResult(job, worker, end, 0, 1.0, 2.0)
                                      for job in jobs))
    bucket.write(result_key(jobs[0], worker), batch.encode(worker_key(KEY, worker)))


def test_each_result_of_a_batch_is_handed_out_once_and_the_object_then_goes(
        bucket: HeldBucket) -> None:
    _batch(bucket, "w1", "j3", "j1", "j2")
    _result(bucket, "j4", "w1")
    pairs = {(f"j{i}", "w1") for i in range(1, 6)}
    channel = _listed(Channel(bucket, KEY, print))
    before = bucket.ops.get("B", 0)
    assert [r.key for r in channel.results(pairs)] == ["j1", "j2", "j3", "j4"]
    assert bucket.ops["B"] - before == 2, "one read per object, not per result"
    assert list(channel.results(pairs, unlisted=True)) == [], "each result once"
    channel.delete_taken()
    assert bucket.list("workers/") == {}
    # the same batch again under its name (a worker whose first write seemed to fail sent
    # it again, with one more result): only the new result is handed out
    _batch(bucket, "w1", "j3", "j1", "j5")
    assert [r.key for r in _listed(channel).results(pairs)] == ["j5"]
    channel.close()


def test_a_batch_result_of_a_job_no_longer_wanted_is_ignored_and_its_object_goes(
        bucket: HeldBucket) -> None:
    """The loop wants every job it still has on a worker: a result of another job of that
    worker is stale (the job's first result came from elsewhere), as when read alone."""
    _batch(bucket, "w1", "a", "gone", "b")
    channel = _listed(Channel(bucket, KEY, print))
    assert [r.key for r in channel.results({("a", "w1"), ("b", "w1")})] == ["a", "b"]
    assert list(channel.results({("gone", "w1")}, unlisted=True)) == [], "dropped, not kept"
    channel.delete_taken()
    assert bucket.read(result_key("a", "w1")) is None
    channel.close()


def test_a_batch_keeps_its_object_until_every_wanted_result_was_handed_out(
        bucket: HeldBucket) -> None:
    """A round that stops half way through a batch (an error while acting on one result):
    the rest is handed out next time, and only then does the object go."""
    _batch(bucket, "w1", "a", "b")
    channel = _listed(Channel(bucket, KEY, print))
    results = channel.results({("a", "w1"), ("b", "w1")})
    assert next(results).key == "a"
    results.close()
    channel.delete_taken()
    assert bucket.read(result_key("a", "w1")) is not None, "b is in it, not handed out yet"
    assert [r.key for r in channel.results({("b", "w1")})] == ["b"]
    channel.delete_taken()
    assert bucket.read(result_key("a", "w1")) is None
    channel.close()


def test_a_batch_signed_by_another_worker_or_renamed_is_ignored(bucket: HeldBucket) -> None:
    batch = ResultBatch("w2", (WorkerResult("a", "w2", AttemptEnd.SOLVED, 0, 1.0, 2.0),
                               WorkerResult("b", "w2", AttemptEnd.SOLVED, 0, 1.0, 2.0)))
    bucket.write(result_key("a", "w1"), batch.encode(worker_key(KEY, "w1")))  # claims w2
    _batch(bucket, "w1", "c", "d")
    bucket.write(result_key("d", "w1"), bucket.read(result_key("c", "w1")).data)  # renamed
    bucket.delete(result_key("c", "w1"))
    channel = _listed(Channel(bucket, KEY, print))
    wanted = {(job, worker) for job in "abcd" for worker in ("w1", "w2")}
    assert list(channel.results(wanted)) == []
    channel.close()


def _vm(name: str) -> Vm:
    return Vm(name, 0.0, Pool.LOCAL)


def test_a_failing_status_read_loses_none_of_the_others(bucket: HeldBucket) -> None:
    vms = [_vm("w1"), _vm("w2"), _vm("w3")]
    for vm in vms:
        status = WorkerStatus(vm.name, 0, 1.0, [], 1, WorkerState.READY)
        bucket.write(status_key(vm.name), status.encode(worker_key(KEY, vm.name)))
    bucket.fail = {status_key("w1")}
    channel = Channel(bucket, KEY, print)
    with pytest.raises(StorageDown):
        channel.statuses(vms)
    assert [vm.status_generation is not None for vm in vms] == [False, True, True]
    bucket.fail = set()
    assert [vm.name for vm, _ in channel.statuses(vms)] == ["w1"], "read again, the rest not"
    channel.close()


def test_a_failing_inbox_write_leaves_only_that_inbox_due(bucket: HeldBucket) -> None:
    vms = [_vm("w1"), _vm("w2"), _vm("w3")]
    for vm in vms:
        vm.places.assign("j", JobSpec(["true"], None, {}, None))
    bucket.fail = {inbox_key("w2")}
    channel = Channel(bucket, KEY, print)
    now = time.time()
    with pytest.raises(StorageDown):
        channel.write_inboxes(vms, now)
    assert [vm.places.dirty for vm in vms] == [False, True, False]
    assert bucket.read(inbox_key("w1")) is not None and bucket.read(inbox_key("w3")) is not None
    bucket.fail = set()
    channel.write_inboxes(vms, now)
    assert not any(vm.places.dirty for vm in vms)
    channel.close()


class ReadLog(LocalBucket):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.reads: list[str] = []
        self.lists: list[str] = []

    def read(self, key: str, **bounds):  # type: ignore[override]
        self.reads.append(key)
        return super().read(key, **bounds)

    def list(self, prefix: str) -> dict[str, int]:
        self.lists.append(prefix)
        return super().list(prefix)


def test_a_round_reads_no_result_that_is_not_there(tmp_path: Path) -> None:
    """A round with a job running and no result written: the round's one listing, no read of
    the job's result key (at 1,000 workers: no 1,000 reads of 404s); once the worker writes
    it, the next round reads it, records it, and deletes it."""
    from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
    from expo_executor.frontends.base import job_request
    from expo_executor.coordinator.state import StateDir
    from expo_executor.core.records import JobMeta
    from expo_executor.core.scheduler import Task
    from tests.helpers import ScriptedEngine

    bucket = ReadLog(tmp_path / "bucket")
    config = CoordinatorConfig("run", 1, 1, poll=0.05, status_interval=3600)
    coordinator = Coordinator(config, ScriptedEngine(), bucket, KEY, tmp_path,
                              StateDir(tmp_path / "s"), print)
    coordinator.submit([job_request(Task("job", "job"), ["true"], str(tmp_path), {}, None,
                                    meta=JobMeta("r"))])
    now = 10_000.0
    coordinator.tick(now)  # a VM is asked for
    status = WorkerStatus("w-1", 0, now, [], 1, WorkerState.READY)
    bucket.write(status_key("w-1"), status.encode(worker_key(KEY, "w-1")))
    coordinator.tick(now + 1)  # ready: the job is assigned
    assert coordinator.scheduler.state("job") == "running"
    bucket.reads.clear(), bucket.lists.clear()
    coordinator.tick(now + 2)  # nothing changed
    assert bucket.lists == ["workers/"]
    assert bucket.reads == []
    _result(bucket, "job", "w-1")  # no status write: the listing shows the result
    coordinator.tick(now + 3)
    assert coordinator.scheduler.state("job") == "solved"
    assert bucket.read(result_key("job", "w-1")) is None, "recorded, then deleted"
    coordinator.stop()


def test_a_workers_operation_counts_come_with_its_results_too(bucket: HeldBucket) -> None:
    """A worker writes its status only as a heartbeat, so its results carry its storage
    counts to the request budget; an older status read later does not lower them."""
    result = WorkerResult("j1", "w1", AttemptEnd.SOLVED, 0, 1.0, 2.0, ops={"A": 7, "B": 30})
    bucket.write(result_key("j1", "w1"), result.encode(worker_key(KEY, "w1")))
    status = WorkerStatus("w1", 0, 1.0, [], 1, WorkerState.READY, {"A": 5, "B": 31})
    bucket.write(status_key("w1"), status.encode(worker_key(KEY, "w1")))
    channel = Channel(bucket, KEY, print)
    vm = _vm("w1")
    channel.statuses([vm])
    assert [r.key for r in channel.results({("j1", "w1")})] == ["j1"]
    assert channel.usage()["workers"] == {"w1": {"A": 7, "B": 31}}
    channel.close()


class WriteLog(LocalBucket):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.writes: list[str] = []

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        self.writes.append(key)
        return super().write(key, data, if_generation_match)


def test_the_coordinator_writes_no_inbox_when_nothing_changed_only_the_pulse(
        tmp_path: Path) -> None:
    """With a job running and nothing changing, a round writes no inbox (before: every inbox
    again each heartbeat, one class A write per worker); one pulse each half heartbeat proves
    the coordinator alive to the whole fleet, with a tag for each VM made with its own key."""
    from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
    from expo_executor.frontends.base import job_request
    from expo_executor.coordinator.state import StateDir
    from expo_executor.core.records import JobMeta
    from expo_executor.core.scheduler import Task
    from tests.helpers import ScriptedEngine

    bucket = WriteLog(tmp_path / "bucket")
    config = CoordinatorConfig("run", 1, 1, poll=0.05, heartbeat=10.0, status_interval=3600)
    coordinator = Coordinator(config, ScriptedEngine(), bucket, KEY, tmp_path,
                              StateDir(tmp_path / "s"), print)
    coordinator.submit([job_request(Task("job", "job"), ["sleep", "1000"], str(tmp_path), {},
                                    None, meta=JobMeta("r"))])
    now = 10_000.0
    coordinator.tick(now)  # a VM is asked for
    status = WorkerStatus("w-1", 0, now, [], 1, WorkerState.READY)
    bucket.write(status_key("w-1"), status.encode(worker_key(KEY, "w-1")))
    coordinator.tick(now + 1)  # ready: the job is assigned
    assert coordinator.scheduler.state("job") == "running"
    assert inbox_key("w-1") in bucket.writes
    bucket.writes.clear()
    seqs = []
    for second in range(2, 62):  # a minute of rounds, nothing changing
        before = len(bucket.writes)
        coordinator.tick(now + second)
        if len(bucket.writes) > before:
            seqs.append(Pulse.decode(bucket.read(PULSE_KEY).data))
    assert set(bucket.writes) == {PULSE_KEY}, "no inbox written"
    assert len(bucket.writes) == 12, "one pulse a half heartbeat (5 s) for the whole fleet"
    assert [p.seq for p in seqs] == sorted({p.seq for p in seqs}), "its sequence only grows"
    assert all(p.proves("w-1", worker_key(KEY, "w-1")) for p in seqs)
    assert coordinator.channel.usage()["coordinator_heartbeats"] >= 12
    coordinator.stop()


def test_a_pulse_carries_a_tag_per_vm_and_continues_after_a_crashed_coordinators(
        bucket: HeldBucket) -> None:
    """An adopting coordinator numbers its pulses after the last one in the bucket when that
    one is genuine (its clock may be behind the crashed one's); a forged one is not followed."""
    ahead = int(time.time() * 1000) + 10**9
    bucket.write(PULSE_KEY, Pulse.make(ahead, {"w1": worker_key(KEY, "w1")}).encode())
    channel = Channel(bucket, KEY, print)
    channel.continue_pulse(["w1"])
    channel.write_pulse([_vm("w1"), _vm("w2")], 0.0, 10.0)
    pulse = Pulse.decode(bucket.read(PULSE_KEY).data)
    assert pulse.seq > ahead
    assert sorted(pulse.tags) == ["w1", "w2"]
    assert pulse.proves("w2", worker_key(KEY, "w2")) and not pulse.proves("w2", KEY)
    assert not pulse.proves("w1", worker_key(KEY, "w2")), "a tag is bound to its worker"
    forged = Pulse(ahead * 2, {"w1": messages.pulse_tag(b"x" * 32, ahead * 2, "w1")})
    bucket.write(PULSE_KEY, forged.encode())
    channel.continue_pulse(["w1"])
    channel.write_pulse([_vm("w1")], 20.0, 10.0)
    assert Pulse.decode(bucket.read(PULSE_KEY).data).seq < ahead * 2


DEEP = b'{"v":2,"kind":"status","body":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
HUGE = b" " * (messages.MAX_BYTES + 1)


def test_planted_objects_are_refused_in_one_line_and_the_round_goes_on(
        bucket: HeldBucket) -> None:
    """Anyone who can write to the bucket can plant a deeply nested or a huge object at a
    worker's status or result key (issue 30): each is said in one line, as a malformed
    message, and read once; the other workers' statuses and results still come in."""
    vms = [_vm("w1"), _vm("w2"), _vm("w3")]
    bucket.write(status_key("w1"), DEEP)
    bucket.write(status_key("w2"), HUGE)
    bucket.write(status_key("w3"), WorkerStatus("w3", 0, 1.0, [], 1, WorkerState.READY)
                 .encode(worker_key(KEY, "w3")))
    bucket.write(result_key("a", "w1"), DEEP.replace(b"status", b"result"))
    bucket.write(result_key("b", "w1"), HUGE)
    _result(bucket, "c", "w1")
    said: list[str] = []
    channel = Channel(bucket, KEY, said.append)
    try:
        got = [(vm.name, status is not None) for vm, status in channel.statuses(vms)]
        assert got == [("w1", False), ("w2", False), ("w3", True)]
        assert [r.key for r in channel.results({(j, "w1") for j in "abc"})] == ["c"]
        assert len(said) == 4 and all("\n" not in line and "malformed" in line
                                      for line in said), said
        assert any("exceeds the" in line for line in said), said
        assert channel.statuses(vms) == [] and len(said) == 4, "each is judged once"
        channel.delete_taken()
        assert bucket.list("workers/w1/results/") == {}, "refused results go with the rest"
    finally:
        channel.close()
