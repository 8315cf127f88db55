"""The worker agent's decisions, in process: a real ``Worker`` on a local bucket in a temporary
directory, its loop never run and no job started (the unit tier forbids processes and sleeps;
jobs that run: tests/e2e/test_worker.py). What it reads from its inbox, which held jobs its
own timeouts dominate (the coordinator's rule, ``core.hardness``), when its results go
(prefetch's refill rule, ``core.held_jobs``), how fast it reads, which pulse counts, and why a
failed job failed."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from expo_executor.core.hardness import Frontier, HardnessPoint
from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.protocol import messages
from expo_executor.protocol.keys import PULSE_KEY, inbox_key, status_key
from expo_executor.protocol.local_bucket import LocalBucket
from expo_executor.protocol.records import (Inbox, JobSpec, PrunePoint, Pulse,
                                            ResultBatch, WorkerResult, WorkerStatus)
from expo_executor.worker.agent import Worker
from expo_executor.worker.agent_loop import FIRST_ASSIGNMENT_POLL_S, SUPPLIED_SLOWDOWN
from expo_executor.worker.failure_reason import explain_failure
from expo_executor.worker.running_jobs import RunningJob

KEY = b"w" * 32


def _worker(tmp_path: Path, slots: int = 2, report_delay: float = 60.0) -> Worker:
    return Worker(LocalBucket(tmp_path / "bucket"), "w-1", slots, KEY, tmp_path / "vm",
                  poll=0.1, slow_poll=5.0, report_delay=report_delay, zygote=False)


def _job(family: str | None = None, *vector: float, scope: tuple[str, ...] = (),
         cpus: int = 1) -> JobSpec:
    prune = PrunePoint(family, HardnessPoint(scope, vector)) if family is not None else None
    return JobSpec(["true"], None, {}, 30.0, cpus, prune=prune)


def _results(worker: Worker) -> dict[str, WorkerResult]:
    """Every result the worker has written to the bucket, by job."""
    found = {}
    for name in worker.bucket.list("workers/w-1/results/"):
        batch = ResultBatch.decode(worker.bucket.read(name).data, KEY)
        found.update({result.key: result for result in batch.results})
    return found


def _solved(worker: Worker, key: str, waited: float = 0.0) -> None:
    result = WorkerResult(key, "w-1", AttemptEnd.SOLVED, 0, 1.0, 2.0, None, "")
    worker.unsent[key] = (result, time.monotonic() - waited)


def _busy(worker: Worker, *keys: str) -> None:
    """Slots taken by running jobs, as the loop's decisions see them (their CPUs); no process
    behind them: these tests never reap."""
    for key in keys:
        worker.running[key] = RunningJob(key, JobSpec(["true"], None, {}, None), None, 1.0,
                                         time.monotonic(), None, worker.scratch / f"{key}.log")


def test_a_held_job_its_own_timeout_dominates_is_reported_not_started(tmp_path: Path) -> None:
    """Same family and scope, no coordinate easier: dominated (the scheduler's rule); another
    family, another scope or an easier point is not."""
    worker = _worker(tmp_path)
    worker.timeouts["f"] = Frontier()
    worker.timeouts["f"].add(HardnessPoint(("d1",), (1.0, 5.0)), "t1")
    assert worker._dominated(_job("f", 1.0, 5.0, scope=("d1",)))
    assert worker._dominated(_job("f", 2.0, 7.0, scope=("d1",)))
    assert not worker._dominated(_job("f", 0.0, 9.0, scope=("d1",)))
    assert not worker._dominated(_job("f", 2.0, 7.0, scope=("d2",)))
    assert not worker._dominated(_job("g", 2.0, 7.0, scope=("d1",)))
    assert not worker._dominated(_job())
    worker.pending = {"hard": _job("f", 3.0, 5.0, scope=("d1",))}
    worker._start_pending()
    assert worker.pending == {} and worker.running == {} and "hard" in worker.seen
    result = _results(worker)["hard"]  # not solved: it goes at once
    assert result.end is AttemptEnd.CANCELLED and result.ran is False
    assert "a timeout on this worker dominates it" in result.reason


def test_a_cancelled_held_job_is_reported_and_none_behind_a_busy_slot_starts(
        tmp_path: Path) -> None:
    worker = _worker(tmp_path, slots=1)
    _busy(worker, "long")
    worker.pending = {"gone": _job(), "next": _job()}
    worker.cancel = {"gone"}
    worker._start_pending()
    assert _results(worker)["gone"].reason == "cancelled before start"
    assert list(worker.pending) == ["next"], "it waits for the slot: core.held_jobs.starts_now"
    assert list(worker.running) == ["long"]


def test_solved_results_wait_for_company_until_the_worker_runs_low(tmp_path: Path) -> None:
    """The coordinator refills a worker once it holds one job per slot or fewer (prefetch's
    rule): before that its solved results wait, up to ``report_delay``."""
    worker = _worker(tmp_path, slots=2)
    assert not worker._report_due()
    worker.pending = {k: _job() for k in ("a", "b", "c")}  # 3 held CPUs on 2 slots
    _solved(worker, "s1")
    assert not worker._report_due()
    del worker.pending["c"]  # 2 held CPUs on 2 slots: it runs low
    assert worker._report_due()
    worker.pending["c"] = _job(cpus=2)
    assert not worker._report_due()
    _solved(worker, "s0", waited=60.0)
    assert worker._report_due(), "the oldest has waited report_delay"
    del worker.unsent["s0"]
    worker.unsent["f"] = (WorkerResult("f", "w-1", AttemptEnd.FAILED, 1, 1.0, 2.0, "x", ""),
                          time.monotonic())
    assert worker._report_due(), "a failure goes at once"


def test_every_unsent_result_goes_in_one_object_and_leaves_unsent(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    for key in ("a", "b", "c"):
        _solved(worker, key)
    worker._send_results()
    assert worker.unsent == {}
    assert len(worker.bucket.list("workers/w-1/results/")) == 1
    assert set(_results(worker)) == {"a", "b", "c"}
    assert worker.next_read <= worker.last_report + worker.poll, "an answer is likely: read soon"


def _inbox(worker: Worker, seq: int, jobs: dict[str, JobSpec], to: str = "w-1",
           cancel: tuple[str, ...] = (), release: dict[str, int] | None = None) -> None:
    worker.bucket.write(inbox_key("w-1"),
                        Inbox(seq, to, jobs, list(cancel), dict(release or {})).encode(KEY))


def test_the_inbox_read_keeps_new_assignments_and_refuses_replays_and_strangers(
        tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    worker.seen.add("done")
    _inbox(worker, 2, {"done": _job(), "new": _job("f", 1.0)}, cancel=("x",))
    worker._read_inbox()
    assert list(worker.pending) == ["new"] and worker.cancel == {"x"} and worker.seq == 2
    assert worker.pending["new"].prune == PrunePoint("f", HardnessPoint((), (1.0,)))
    _inbox(worker, 1, {"old": _job()})
    worker._read_inbox()
    assert list(worker.pending) == ["new"], "a replay of an older assignment is ignored"
    _inbox(worker, 3, {"other": _job()}, to="w-2")
    worker._read_inbox()
    assert worker.seq == 2 and list(worker.pending) == ["new"]


def test_a_held_job_is_opened_once_and_its_spec_kept_until_its_result(tmp_path: Path) -> None:
    """The inbox carries the job's spec sealed, as the coordinator wrote it; the worker opens it
    once (whether it waits for the zygote and its start read the same opened spec) and keeps it,
    with the secrets its report blanks, while the job is held or runs: until its result, or
    until a fresh inbox no longer holds it."""
    worker = _worker(tmp_path)
    spec = JobSpec(["sh", "-c", "echo $T"], None, {"T": "hunter2"}, 30.0, redact=("hunter2",))
    _inbox(worker, 1, {"j": spec, "k": spec})
    worker._read_inbox()
    held = worker.pending["j"]
    assert held.sealed is not None and held.argv == messages.SEALED_ARGV
    opened = worker._opened("j", held)
    assert opened == spec and worker._opened("j", held) is opened
    worker._opened("k", worker.pending["k"])
    _inbox(worker, 2, {"j": spec})  # k is held no longer
    worker._read_inbox()
    assert list(worker.specs) == ["j"] and worker.specs["j"] is opened
    worker.cancel = {"j"}
    worker._start_pending()  # cancelled before it started: its result is written
    assert worker.specs == {} and _results(worker)["j"].end is AttemptEnd.CANCELLED


def test_held_jobs_asked_back_are_given_back_and_the_status_says_so(tmp_path: Path) -> None:
    worker = _worker(tmp_path)
    _inbox(worker, 1, {"keep": _job()}, release={"h1": 1, "h2": 2})
    worker._read_inbox()
    assert worker.released == {"h1": 1, "h2": 2} and list(worker.pending) == ["keep"]
    status = WorkerStatus.decode(worker.bucket.read(status_key("w-1")).data, KEY)
    assert status.state is WorkerState.READY and status.released == {"h1": 1, "h2": 2}


def test_a_job_asked_back_again_is_answered_again(tmp_path: Path) -> None:
    """Issue 30 item 1: h was given back, held here again and asked back again before this
    worker read an inbox in between: the new request gets its own answer at once."""
    worker = _worker(tmp_path)
    _inbox(worker, 1, {"keep": _job()}, release={"h": 1})
    worker._read_inbox()
    first = worker.bucket.read(status_key("w-1")).generation
    _inbox(worker, 2, {"keep": _job()}, release={"h": 1})
    worker._read_inbox()
    assert worker.bucket.read(status_key("w-1")).generation == first, "answered already"
    _inbox(worker, 3, {"keep": _job()}, release={"h": 4})
    worker._read_inbox()
    status = WorkerStatus.decode(worker.bucket.read(status_key("w-1")).data, KEY)
    assert status.released == {"h": 4}


def test_the_inbox_is_read_fast_only_while_an_answer_is_likely(tmp_path: Path) -> None:
    worker = _worker(tmp_path, slots=2)
    assert worker._inbox_interval() == worker.poll, "a free slot, nothing held, just started"
    _busy(worker, "a", "b")
    worker.last_change = time.monotonic() - 60
    assert worker._inbox_interval() == worker.slow_poll
    worker.pending = {"c": _job(), "d": _job()}  # every slot busy and holding its next job
    assert worker._inbox_interval() == worker.slow_poll * SUPPLIED_SLOWDOWN
    worker.last_change = worker.last_report = time.monotonic()  # it reported: an answer comes
    assert worker._inbox_interval() == worker.poll


def test_a_new_worker_reads_fastest_until_its_first_job_comes(tmp_path: Path) -> None:
    """Its first assignment is on the run's way to its first result, and comes a coordinator
    round after its READY status: read at FIRST_ASSIGNMENT_POLL_S, not at the poll (2 s on a
    real run), until a job comes or the fast window passes with none."""
    worker = Worker(LocalBucket(tmp_path / "bucket"), "w-1", 1, KEY, tmp_path / "vm",
                    poll=2.0, slow_poll=15.0, zygote=False)
    assert worker._inbox_interval() == FIRST_ASSIGNMENT_POLL_S < worker.poll
    worker.seen.add("a")  # its first job came and ended: a free slot reads at the poll
    assert worker._inbox_interval() == worker.poll
    worker.seen.clear()
    worker.last_change = time.monotonic() - 60  # nothing came in the fast window
    assert worker._inbox_interval() == worker.slow_poll


def test_only_a_newer_pulse_with_this_workers_own_tag_counts_as_contact(tmp_path: Path) -> None:
    pulses = _worker(tmp_path).pulses
    assert pulses.judge(Pulse.make(3, {"w-2": KEY})) == "no entry for this worker"
    forged = pulses.judge(Pulse.make(3, {"w-1": b"x" * 32}))
    assert forged is not None and "does not verify" in forged
    assert pulses.judge(Pulse.make(3, {"w-1": KEY})) is None and pulses.seq == 3
    assert "not newer" in pulses.judge(Pulse.make(3, {"w-1": KEY}))


def test_the_pulse_is_read_only_after_a_heartbeat_without_contact(tmp_path: Path) -> None:
    worker = Worker(LocalBucket(tmp_path / "bucket"), "w-1", 1, KEY, tmp_path / "vm",
                    zygote=False, pulse=10.0)
    pulses, contact = worker.pulses, 100.0
    assert not pulses.due(109.0, contact) and pulses.due(110.0, contact)
    worker.bucket.write(PULSE_KEY, Pulse.make(1, {"w-1": KEY}).encode())
    assert pulses.read(110.0) and pulses.next_due(contact) == 120.0
    assert not pulses.read(120.0), "the same pulse object again: nothing new"
    worker.bucket.write(PULSE_KEY, Pulse.make(2, {"w-1": KEY}).encode())
    assert pulses.read(130.0)
    assert _worker(tmp_path).pulses.next_due(contact) is None, "no heartbeat: never read"


@pytest.mark.parametrize("tail,why", [
    ("copying\ncp: error writing 'out': No space left on device\nexit 1\n",
     "cp: error writing 'out': No space left on device"),
    ("Failed to store output in storage gs://b/o\nWhen running the storage plugin:\n"
     "403 Forbidden\n", "Failed to store output in storage gs://b/o: 403 Forbidden"),
    ("Traceback (most recent call last):\nValueError: bad input\n", None),
])
def test_a_failed_jobs_log_says_why_when_it_can(tail: str, why: str | None) -> None:
    assert explain_failure(tail) == why


class _Answers(LocalBucket):
    """The local bucket, keeping what each read answered (to see what was downloaded)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.answers: list[object] = []

    def read(self, key: str, **bounds):  # type: ignore[no-untyped-def, override]
        try:
            blob = super().read(key, **bounds)
        except messages.MessageError as exc:
            self.answers.append(exc)
            raise
        self.answers.append(blob)
        return blob


@pytest.mark.parametrize("planted", [
    b" " * (messages.MAX_BYTES + 1),
    b'{"v":2,"kind":"inbox","body":' + b"[" * 100_000 + b"]" * 100_000 + b"}"])
def test_a_planted_inbox_or_pulse_is_refused_in_one_line_and_not_downloaded_again(
        tmp_path: Path, planted: bytes, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 30: a huge or deeply nested object at the worker's inbox or the pulse is said
    once, in one line, and the worker goes on; polled again unchanged, it is compared by its
    generation and not downloaded; a real inbox and pulse after it are taken."""
    bucket = _Answers(tmp_path / "bucket")
    worker = Worker(bucket, "w-1", 1, KEY, tmp_path / "vm", zygote=False, pulse=10.0)
    bucket.write(inbox_key("w-1"), planted)
    bucket.write(PULSE_KEY, planted)
    worker._read_inbox()
    assert not worker.pulses.read(100.0)
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and all("ignoring" in line for line in said), said
    worker._read_inbox()
    assert not worker.pulses.read(110.0)
    assert [getattr(answer, "unchanged", None) for answer in bucket.answers[-2:]] == \
        [True, True], "polled again: not downloaded"
    assert capsys.readouterr().err == ""
    _inbox(worker, 1, {"new": _job()})
    worker._read_inbox()
    bucket.write(PULSE_KEY, Pulse.make(1, {"w-1": KEY}).encode())
    assert list(worker.pending) == ["new"] and worker.pulses.read(120.0)


@settings(max_examples=40, deadline=None)
@given(seqs=st.lists(st.integers(min_value=0, max_value=50), min_size=1, max_size=8))
def test_a_replayed_pulse_never_counts_as_contact(seqs: list[int]) -> None:
    """Replays of old pulses (a bucket writer copying an earlier pulse object back, a new
    generation of old bytes) count only when newer than every pulse accepted before."""
    with tempfile.TemporaryDirectory() as root:
        worker = Worker(LocalBucket(Path(root) / "bucket"), "w-1", 1, KEY, Path(root) / "vm",
                        zygote=False, pulse=10.0)
        best = -1
        for step, seq in enumerate(seqs):
            worker.bucket.write(PULSE_KEY, Pulse.make(seq, {"w-1": KEY}).encode())
            assert worker.pulses.read(100.0 + 10 * step) == (seq > best)
            best = max(best, seq)
