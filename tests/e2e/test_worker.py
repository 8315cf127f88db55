"""The worker agent against a real bucket directory and real job processes."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from expo_executor.protocol import messages
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import (WORKER_KEY_ENV, inbox_key, parse_result_key,
                                         result_key, status_key)
from expo_executor.protocol.records import JobSpec, ResultBatch, WorkerResult, WorkerStatus
from expo_executor.worker.agent import Worker
from expo_executor.processes.sessions import session_members

from tests.helpers import wait_until, write_inbox

KEY = b"r" * 32


def _job(argv: list[str], deadline: float | None = None, cwd: str = "/") -> dict:
    return {"argv": argv, "cwd": cwd, "env": {}, "deadline_s": deadline, "cpus": 1}


def _inbox_jobs(jobs: dict[str, dict]) -> dict[str, JobSpec]:
    """The jobs of ``_job`` (and its variants) as the inbox's records: sealed when sent."""
    return {name: JobSpec.from_wire(job) for name, job in jobs.items()}


class Rig:
    def __init__(self, tmp_path: Path, slots: int = 2, grace: float = 30.0,
                 bucket: LocalBucket | None = None, report_delay: float | None = None) -> None:
        self.bucket = bucket or LocalBucket(tmp_path / "bucket")
        self.worker = Worker(self.bucket, "w-1", slots, KEY, tmp_path / "vm", poll=0.05,
                             grace=grace, heartbeat=0.5, report_delay=report_delay)
        self.seq = 0
        self.exit_code: int | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        self.exit_code = self.worker.run()

    def send(self, jobs: dict, cancel: list[str] = (), key: bytes = KEY,
             release: dict[str, int] | None = None) -> None:
        self.seq += 1
        write_inbox(self.bucket, "w-1", self.seq, _inbox_jobs(jobs), cancel=cancel,
                    release=release, key=key)

    def result(self, job_key: str) -> dict | None:
        """The job's result, in whichever of the worker's result objects holds it."""
        found = [r for r in self.results().values() for r in r if r.key == job_key]
        return found[0].to_wire() if found else None

    def results(self) -> dict[str, list[WorkerResult]]:
        """The worker's result objects: the job each is named for -> its results."""
        objects = {}
        for name in self.bucket.list("workers/w-1/results/"):
            blob = self.bucket.read(name)
            if blob is not None:
                job = parse_result_key(name)[0]
                objects[job] = list(ResultBatch.decode(blob.data, KEY).results)
        return objects

    def stop(self) -> None:
        self.worker.request_stop("terminated")
        self.thread.join(timeout=10)


@pytest.fixture
def rig(tmp_path: Path):
    rig = Rig(tmp_path)
    rig.thread.start()
    yield rig
    rig.stop()


def test_runs_a_signed_assignment_and_reports_it(rig: Rig, tmp_path: Path) -> None:
    rig.send({"j1": _job(["sh", "-c", f"echo hi > {tmp_path}/out.txt"])})
    assert wait_until(lambda: rig.result("j1") is not None, 10)
    assert rig.result("j1")["outcome"] == "solved"
    assert (tmp_path / "out.txt").read_text() == "hi\n"


def test_ignores_an_inbox_not_signed_with_its_key(rig: Rig, tmp_path: Path) -> None:
    rig.send({"evil": _job(["sh", "-c", f"touch {tmp_path}/pwned"])}, key=b"x" * 32)
    rig.send({"j2": _job(["true"])})  # a genuine one afterwards still works
    assert wait_until(lambda: rig.result("j2") is not None, 10)
    assert rig.result("evil") is None and not (tmp_path / "pwned").exists()


def test_deadline_kills_the_whole_session(rig: Rig) -> None:
    rig.send({"slow": _job(["sh", "-c", "sleep 100 & sleep 100; wait"], deadline=1.0)})
    assert wait_until(lambda: "slow" in rig.worker.running, 10)
    running = rig.worker.running["slow"]
    sid = running.proc.pid
    # it holds the spec opened once (its limit, CPUs and log files read from it, not copied)
    assert running.spec.argv == ["sh", "-c", "sleep 100 & sleep 100; wait"]
    assert running.spec.deadline_s == running.deadline_s == 1.0 and running.spec.sealed is None
    assert wait_until(lambda: len(session_members(sid)) >= 3, 5)
    assert wait_until(lambda: rig.result("slow") is not None, 10)
    result = rig.result("slow")
    assert result["outcome"] == "timeout"
    assert 1.0 <= result["ended"] - result["started"] < 5.0
    assert session_members(sid) == [], "the background sleep must die too"


def test_cancel_and_failure(rig: Rig) -> None:
    rig.send({"c": _job(["sleep", "100"]), "f": _job(["sh", "-c", "echo boom >&2; exit 3"])})
    assert wait_until(lambda: rig.result("f") is not None, 10)
    failed = rig.result("f")
    assert failed["outcome"] == "failed" and failed["returncode"] == 3
    assert "boom" in failed["log_tail"]
    rig.send({"c": _job(["sleep", "100"])}, cancel=["c"])
    assert wait_until(lambda: rig.result("c") is not None, 10)
    assert rig.result("c")["outcome"] == "cancelled"


def test_dead_mans_switch_stops_the_worker_and_its_jobs(tmp_path: Path) -> None:
    rig = Rig(tmp_path, grace=1.5)
    rig.thread.start()
    rig.send({"long": _job(["sleep", "100"])})
    assert wait_until(lambda: "long" in rig.worker.running, 10)
    sid = rig.worker.running["long"].proc.pid
    # nobody refreshes the inbox any more: it stops by itself (the join's bound, not a timed
    # assertion: a 5-s one failed on a loaded machine at 6.4 s, grace 1.5 s)
    rig.thread.join(timeout=10)
    assert not rig.thread.is_alive() and rig.exit_code == 3
    assert rig.result("long")["outcome"] == "cancelled"
    assert session_members(sid) == []


def test_a_terminated_worker_exits_cleanly_when_idle(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.thread.start()
    rig.send({})
    rig.worker.request_stop("terminated")
    rig.thread.join(timeout=10)
    assert rig.exit_code == 0


def _counted_rig(tmp_path: Path, poll: float) -> tuple[Rig, Worker, LocalBucket]:
    """A one-slot worker with a slow poll of 60 s whose own bucket counts its requests (the
    rig writes through another view of the same bucket); not started yet."""
    bucket = LocalBucket(tmp_path / "bucket")
    worker = Worker(bucket, "w-1", 1, KEY, tmp_path / "vm", poll=poll, grace=600,
                    heartbeat=600, slow_poll=60)
    rig = Rig.__new__(Rig)
    rig.bucket, rig.worker, rig.seq, rig.exit_code = (LocalBucket(tmp_path / "bucket"), worker,
                                                      0, None)
    rig.thread = threading.Thread(target=rig._run, daemon=True)
    return rig, worker, bucket


def test_busy_worker_reads_its_inbox_slowly_but_reports_a_finished_job_at_once(
        tmp_path: Path) -> None:
    """Inbox reads are billed: a worker whose only slot is busy reads at the slow interval
    (here 60 s), yet a job that ends is reaped and reported within a tick, and the next
    inbox read comes one fast poll later."""
    rig, worker, bucket = _counted_rig(tmp_path, poll=0.05)
    rig.send({"j1": _job(["sleep", "1.5"])})
    rig.thread.start()
    try:
        assert wait_until(lambda: "j1" in worker.running, 5)
        reads_while_busy = bucket.ops["B"]
        assert wait_until(lambda: rig.result("j1") is not None, 5)  # not after 60 s
        assert bucket.ops["B"] - reads_while_busy <= 2  # nothing read while the slot was busy
        rig.send({"j2": _job(["true"])})
        assert wait_until(lambda: rig.result("j2") is not None, 5)
    finally:
        rig.stop()


def test_a_worker_holding_its_next_job_reads_slowly_until_it_reports(tmp_path: Path) -> None:
    """Prefetch: a one-slot worker running j1 with j2 held for its slot needs nothing from its
    inbox but a cancel, so it reads at the slow interval (here 60 s) however recent the inbox
    was; once j1 is reported it reads fast again (the coordinator answers a report), and the
    job sent then starts one fast poll later, not a slow one."""
    rig, worker, bucket = _counted_rig(tmp_path, poll=0.5)
    rig.send({"j1": _job(["sleep", "3"]), "j2": _job(["sleep", "30"])})
    rig.thread.start()
    try:
        assert wait_until(lambda: "j1" in worker.running and "j2" in worker.pending, 5)
        reads_while_supplied = bucket.ops["B"]
        assert wait_until(lambda: rig.result("j1") is not None, 10)
        # within the fast window (5 s) of the new inbox, yet no read while j2 was held
        assert bucket.ops["B"] - reads_while_supplied <= 1
        assert wait_until(lambda: "j2" in worker.running, 5)
        rig.send({"j2": _job(["sleep", "30"]), "j3": _job(["true"])})
        assert wait_until(lambda: "j3" in worker.pending, 5)  # not after a 60-s slow poll
    finally:
        rig.stop()


def test_jobs_without_a_shared_directory_each_get_their_own_and_it_is_removed(
        rig: Rig, tmp_path: Path) -> None:
    """Two jobs on one VM with no shared file system (cwd None) both write the same relative
    file (as each unpacks the workflow's sources): each in a directory of its own, never the
    other's, and the directory is gone once the job has ended."""
    seen = tmp_path / "seen"
    seen.mkdir()
    script = (f'echo "$1" > sources.txt; sleep 0.5; cat sources.txt > "{seen}/$1"; '
              f'pwd >> "{seen}/$1"')
    rig.send({key: _job(["sh", "-c", script, "x", key], cwd=None) for key in ("a", "b")})
    assert wait_until(lambda: rig.result("a") is not None and rig.result("b") is not None, 10)
    assert rig.result("a")["outcome"] == rig.result("b")["outcome"] == "solved"
    work = tmp_path / "vm" / "work"
    dirs = {}
    for key in ("a", "b"):
        content, directory = (seen / key).read_text().splitlines()
        assert content == key  # nobody else wrote its file
        dirs[key] = Path(directory)
    assert dirs["a"] != dirs["b"] and {d.parent for d in dirs.values()} == {work.resolve()}
    assert not dirs["a"].exists() and not dirs["b"].exists()


def test_a_worker_whose_output_pipes_close_still_runs_and_reports(tmp_path: Path) -> None:
    """At a VM's shutdown the reader of the worker's output (the startup script's tee) can die
    first: every later line the worker prints would raise BrokenPipeError. It must go on, run
    its jobs and report them, and stop cleanly."""
    bucket = LocalBucket(tmp_path / "bucket")
    worker = subprocess.Popen(
        [sys.executable, "-m", "expo_executor.worker.agent", "--bucket", str(tmp_path / "bucket"),
         "--worker-id", "w-1", "--slots", "1", "--scratch", str(tmp_path / "vm"),
         "--poll", "0.05", "--heartbeat", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env={**os.environ, WORKER_KEY_ENV: KEY.hex()})
    try:
        assert wait_until(lambda: bucket.read(status_key("w-1")) is not None, 30)
        worker.stdout.close()  # the reader is gone
        worker.stderr.close()
        # A bad inbox makes the worker say so on stderr: a write to the closed pipe.
        bucket.write(inbox_key("w-1"), b"not a signed inbox")
        time.sleep(0.5)
        assert worker.poll() is None, "the worker died of its closed output"
        write_inbox(bucket, "w-1", 1,
                    _inbox_jobs({"j1": _job(["sh", "-c", f"echo hi > {tmp_path}/out.txt"])}),
                    key=KEY)
        assert wait_until(lambda: bucket.read(result_key("j1", "w-1")) is not None, 30)
        assert messages.decode("result", bucket.read(result_key("j1", "w-1")).data)[
            "outcome"] == "solved"
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 0
        status = messages.decode("status", bucket.read(status_key("w-1")).data)
        assert status["state"] == "stopped", status
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()


# -- the deadline times the command (worker/command_clock.py) ------------------------------------

def _stamped(startup: float, command: float, after: float = 0.0) -> list[str]:
    """A job that stamps its command as a hooked Snakemake job does, around ``command`` seconds
    of work, with ``startup`` seconds before it and ``after`` seconds after it."""
    script = ("import os, time\n"
              "from expo_executor.worker.command_clock import STAMPS_ENV, stamp\n"
              "path = os.environ[STAMPS_ENV]\n"
              "stamp(path, hooked=True)\n"
              f"time.sleep({startup})\n"
              "stamp(path, start=time.monotonic())\n"
              f"time.sleep({command})\n"
              "stamp(path, end=time.monotonic())\n"
              f"time.sleep({after})\n")
    return [sys.executable, "-c", script]


def test_a_slow_start_up_is_not_a_timeout(rig: Rig) -> None:
    rig.send({"s": _job(_stamped(startup=2.5, command=0.2), deadline=1.5)})
    assert wait_until(lambda: rig.result("s") is not None, 15)
    result = rig.result("s")
    assert result["outcome"] == "solved", result
    assert 0.2 <= result["command_s"] < 1.5
    assert result["ended"] - result["started"] - result["command_s"] >= 2.5  # its overhead


def test_a_command_past_its_deadline_times_out_after_a_slow_start_up(rig: Rig) -> None:
    rig.send({"t": _job(_stamped(startup=1.0, command=60), deadline=1.0)})
    assert wait_until(lambda: rig.result("t") is not None, 15)
    result = rig.result("t")
    assert result["outcome"] == "timeout" and "its command's time" in result["reason"]
    assert 1.0 <= result["command_s"] < 3.0


def test_a_hung_start_up_ends_at_its_allowance_as_a_failure(tmp_path: Path) -> None:
    rig = Rig(tmp_path)
    rig.worker.allowance = 1.0
    rig.thread.start()
    try:
        rig.send({"h": _job(_stamped(startup=60, command=0), deadline=30.0)})
        assert wait_until(lambda: rig.result("h") is not None, 15)
    finally:
        rig.stop()
    result = rig.result("h")
    assert result["outcome"] == "failed", result
    assert "allowance of 1 s (before its command started" in result["reason"]
    assert result["command_s"] == 0


def _pruning(argv: list[str], family: str, *vector: float, deadline: float = 30.0) -> dict:
    return {**_job(argv, deadline), "prune": {"family": family, "scope": [],
                                              "vector": list(vector)}}


def test_a_held_job_its_own_timeout_dominates_is_never_started(tmp_path: Path) -> None:
    """One slot, four jobs in inbox order (the coordinator's: prefetched jobs wait behind the
    running one): the first times out; the next, no easier in its family, is reported
    cancelled without starting; an easier one and one of another family run."""
    rig = Rig(tmp_path, slots=1)
    rig.thread.start()
    try:
        rig.send({"hard1": _pruning(["sleep", "100"], "f", 1, deadline=1.0),
                  "hard2": _pruning(["touch", f"{tmp_path}/hard2"], "f", 2),
                  "easy0": _pruning(["touch", f"{tmp_path}/easy0"], "f", 0),
                  "other": _pruning(["touch", f"{tmp_path}/other"], "g", 5)})
        assert wait_until(lambda: all(rig.result(k) for k in ("hard2", "easy0", "other")), 20)
        assert rig.result("hard1")["outcome"] == "timeout"
        skipped = rig.result("hard2")
        assert skipped["outcome"] == "cancelled" and "dominates" in skipped["reason"]
        assert skipped["ran"] is False, "the coordinator must not count it as killed"
        assert not (tmp_path / "hard2").exists()
        assert {rig.result(k)["outcome"] for k in ("easy0", "other")} == {"solved"}
    finally:
        rig.stop()


def test_a_held_job_cancelled_while_its_worker_reads_slowly_is_never_started(
        tmp_path: Path) -> None:
    """The domino effect of a timeout on another worker: the coordinator cancels a held job
    in the inbox of a worker that is busy and so reads its inbox only every slow poll (here
    60 s). The held job has a hardness point: the worker reads its inbox once more when the
    slot frees, and reports the job cancelled instead of starting it."""
    rig, worker, _ = _counted_rig(tmp_path, poll=0.05)
    gate = tmp_path / "gate"
    running = _job(["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done'])
    held = _pruning(["touch", f"{tmp_path}/held"], "f", 2)
    rig.send({"run": running, "held": held})
    rig.thread.start()
    try:
        assert wait_until(lambda: "run" in worker.running and "held" in worker.pending, 5)
        assert wait_until(lambda: worker.next_read - time.monotonic() > 30, 5), \
            "a busy worker holding its next job reads its inbox slowly"
        rig.send({"run": running, "held": held}, cancel=["held"])
        assert wait_until(lambda: time.monotonic() - worker.last_read > 2 * worker.poll, 5)
        gate.touch()
        assert wait_until(lambda: rig.result("held") is not None, 10)  # not after 60 s
        result = rig.result("held")
        assert result["outcome"] == "cancelled" and "before start" in result["reason"], result
        assert result["ran"] is False
        assert not (tmp_path / "held").exists()
        assert rig.result("run")["outcome"] == "solved"
    finally:
        rig.stop()


def test_a_held_job_asked_back_is_given_back_unstarted_and_can_come_back(
        tmp_path: Path) -> None:
    """The coordinator asks a held job back (another worker's free slot will run it): the
    worker never starts it, and its status says it gave it back, as it does for a key it
    never saw. A job it started already is not given back. Assigned to it again later, the
    job runs (a job given back is not a job run)."""
    rig = Rig(tmp_path, slots=1)
    gate = tmp_path / "gate"
    running = _job(["sh", "-c", f'while [ ! -e "{gate}" ]; do sleep 0.05; done'])
    held = _job(["sh", "-c", f"echo ran >> {tmp_path}/held"])
    rig.send({"run": running, "held": held})
    rig.thread.start()
    worker = rig.worker
    try:
        assert wait_until(lambda: "run" in worker.running and "held" in worker.pending, 5)
        rig.send({"run": running}, release={"held": 1, "never-seen": 2, "run": 3})
        assert wait_until(lambda: _status(rig).released == {"held": 1, "never-seen": 2}, 5), \
            "given back: the held job and the unknown key, not the running one"
        gate.touch()
        assert wait_until(lambda: rig.result("run") is not None, 10)
        assert "held" not in worker.pending and "held" not in worker.seen
        assert not (tmp_path / "held").exists() and rig.result("held") is None
        rig.send({"run": running, "held": held})
        assert wait_until(lambda: rig.result("held") is not None, 10)
        assert rig.result("held")["outcome"] == "solved"
        assert (tmp_path / "held").read_text() == "ran\n"
    finally:
        rig.stop()


def _status(rig: Rig) -> WorkerStatus:
    return WorkerStatus.decode(rig.bucket.read(status_key("w-1")).data, KEY)


def test_jobs_start_in_inbox_order(tmp_path: Path) -> None:
    rig = Rig(tmp_path, slots=1)
    rig.thread.start()
    try:
        rig.send({name: _job(["sh", "-c", f"echo {name} >> {tmp_path}/order"])
                  for name in ("c", "a", "b")})
        assert wait_until(lambda: all(rig.result(k) for k in "abc"), 10)
        assert (tmp_path / "order").read_text().split() == ["c", "a", "b"]
    finally:
        rig.stop()


# -- batched reports: a worker holding prefetched jobs reports several in one object ---------
class CountingBucket(LocalBucket):
    """The worker's bucket, counting its result writes; ``fail`` makes them raise (storage
    down past its retries); ``lose_answer`` makes the next one happen but raise (its answer
    lost on the way back)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.result_writes = 0
        self.failed = 0
        self.fail = False
        self.lose_answer = False

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        if "/results/" not in key:
            return super().write(key, data, if_generation_match)
        if self.fail:
            self.failed += 1
            raise OSError("storage down")
        generation = super().write(key, data, if_generation_match)
        self.result_writes += 1
        if self.lose_answer:
            self.lose_answer = False
            raise OSError("connection reset")
        return generation


def _batching_rig(tmp_path: Path) -> Rig:
    """One slot, and solved results wait for company up to a minute (so only the rules
    under test send them)."""
    rig = Rig(tmp_path, slots=1, bucket=CountingBucket(tmp_path / "bucket"), report_delay=60)
    rig.thread.start()
    return rig


def _each_once(rig: Rig) -> dict[str, str]:
    """Job -> outcome over all the worker's result objects; every job's result is in one."""
    keys = [r.key for results in rig.results().values() for r in results]
    assert len(keys) == len(set(keys)), keys
    return {r.key: r.end.value for results in rig.results().values() for r in results}


def test_a_worker_holding_several_jobs_a_slot_writes_fewer_result_objects_than_jobs(
        tmp_path: Path) -> None:
    """Six jobs for one slot: the solved results wait while more than one job per slot is
    still to start (the coordinator refills only then), so four go in one object and the
    last two, with nothing left to start, go each at once."""
    rig = _batching_rig(tmp_path)
    try:
        rig.send({f"j{n}": _job(["true"]) for n in range(1, 7)})
        assert wait_until(lambda: len(_each_once(rig)) == 6, 20)
        assert rig.bucket.result_writes == 3
        assert {job: [r.key for r in results] for job, results in rig.results().items()} == \
            {"j1": ["j1", "j2", "j3", "j4"], "j5": ["j5"], "j6": ["j6"]}
    finally:
        rig.stop()


def test_a_timeout_is_reported_at_once_with_the_solved_results_waiting(tmp_path: Path) -> None:
    rig = _batching_rig(tmp_path)
    try:
        rig.send({"s1": _job(["true"]), "s2": _job(["true"]),
                  "t": _job(["sleep", "100"], deadline=0.5),
                  **{f"h{n}": _job(["sleep", "100"]) for n in (1, 2)}})
        assert wait_until(lambda: "t" in _each_once(rig), 20)
        assert {job: [r.key for r in results] for job, results in rig.results().items()} == \
            {"s1": ["s1", "s2", "t"]}
        assert _each_once(rig)["t"] == "timeout"
        # nothing else ended, so the timeout sent them: h1 takes t's slot once the report is
        # written (not before: the report goes at once), and runs on
        assert wait_until(lambda: "h1" in rig.worker.running, 20)
        assert set(_each_once(rig)) == {"s1", "s2", "t"}
    finally:
        rig.stop()


def test_a_solved_result_waits_for_company_no_longer_than_the_report_delay(
        tmp_path: Path) -> None:
    """Long jobs behind it: s1's result goes alone once it has waited ``report_delay``."""
    rig = Rig(tmp_path, slots=1, bucket=CountingBucket(tmp_path / "bucket"), report_delay=0.5)
    rig.thread.start()
    try:
        rig.send({"s1": _job(["true"]), **{f"h{n}": _job(["sleep", "100"]) for n in (1, 2, 3)}})
        assert wait_until(lambda: "s1" in _each_once(rig), 20)
        assert list(rig.results()) == ["s1"] and "h1" in rig.worker.running
    finally:
        rig.stop()


def test_a_stopping_worker_sends_what_waited(tmp_path: Path) -> None:
    rig = _batching_rig(tmp_path)
    rig.send({"s1": _job(["true"]), **{f"h{n}": _job(["sleep", "100"]) for n in (1, 2, 3)}})
    assert wait_until(lambda: "s1" in rig.worker.unsent and "h1" in rig.worker.running, 20)
    assert rig.results() == {}
    rig.stop()
    assert _each_once(rig) == {"s1": "solved", "h1": "cancelled"}
    assert rig.bucket.result_writes == 1


def test_a_crashing_worker_sends_what_waited(tmp_path: Path) -> None:
    """Its own disk fails it while starting a staged job (the job's directory cannot be
    made): the solved result that waited goes with the jobs it reports lost."""
    from expo_executor.worker.agent import _run

    rig = Rig(tmp_path, slots=1, bucket=CountingBucket(tmp_path / "bucket"), report_delay=60)
    (tmp_path / "vm" / "jobs").mkdir(parents=True)
    (tmp_path / "vm" / "jobs" / "st").write_text("in the way of its directory")
    crash: list[BaseException] = []

    def run() -> None:
        try:
            _run(rig.worker)
        except OSError as exc:  # raised again after its last breath
            crash.append(exc)

    rig.send({"s1": _job(["true"]), "st": {**_job(["true"]), "stage": {"host_env": True}},
              **{f"h{n}": _job(["sleep", "100"]) for n in (1, 2)}})
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=20)
    assert crash and not thread.is_alive()
    assert _each_once(rig) == {"s1": "solved", "st": "lost", "h1": "lost", "h2": "lost"}
    assert rig.bucket.result_writes == 1


def test_a_failed_report_keeps_every_result_and_sends_them_later(tmp_path: Path) -> None:
    rig = _batching_rig(tmp_path)
    try:
        rig.bucket.fail = True
        rig.send({"s1": _job(["true"]), "f": _job(["sh", "-c", "exit 3"]),
                  **{f"h{n}": _job(["sleep", "100"]) for n in (1, 2)}})
        assert wait_until(lambda: rig.bucket.failed >= 2, 20), "tried, and tried again"
        assert set(rig.worker.unsent) == {"s1", "f"}
        rig.bucket.fail = False
        assert wait_until(lambda: "f" in _each_once(rig), 20)
        assert {job: [r.key for r in results] for job, results in rig.results().items()} == \
            {"s1": ["s1", "f"]}
    finally:
        rig.stop()


def test_a_report_whose_answer_was_lost_is_not_sent_twice(tmp_path: Path) -> None:
    """The write of s1 and f1 happened, its answer did not come back; f2 fails next: the
    object named s1 exists, so the worker reads it, and sends only f2, in an object of its
    own."""
    rig = _batching_rig(tmp_path)
    try:
        rig.bucket.lose_answer = True
        rig.send({"s1": _job(["true"]), "f1": _job(["sh", "-c", "exit 3"]),
                  "f2": _job(["sh", "-c", "exit 4"]),
                  **{f"h{n}": _job(["sleep", "100"]) for n in (1, 2)}})
        assert wait_until(lambda: "f2" in _each_once(rig) and not rig.worker.unsent, 20)
        assert {job: [r.key for r in results] for job, results in rig.results().items()} == \
            {"s1": ["s1", "f1"], "f2": ["f2"]}
    finally:
        rig.stop()


def test_a_staged_jobs_spec_and_log_are_private_and_its_directory_goes_when_it_ends(
        tmp_path: Path) -> None:
    """Issue 30, defect 6: the staged spec holds the job's opened environment (its secrets),
    its log the job's unblanked output; both were readable by others (the local engine's run
    directory), and the spec and the job's directory were left: a long-lived VM's disk filled
    with ended jobs. Under
    umask 0, what the worker creates is still 0600 (files) and 0700 (directories): made so,
    and seen so by the job itself while it runs."""
    secret = "s3cr3t-staged-0123456789"
    modes = tmp_path / "modes.txt"
    probe = f'cd "$EXPOCLOUD_VM/jobs" && stat -c "%n %a" . st1* st1/* > {modes}; true'
    old = os.umask(0)
    try:
        rig = Rig(tmp_path)
        rig.thread.start()
        rig.send({"st1": {**_job(["/bin/sh", "-c", probe], cwd=str(tmp_path)),
                          "env": {"TOKEN": secret}, "stage": {"host_env": True}}})
        assert wait_until(lambda: rig.result("st1") is not None, 30)
        rig.stop()
    finally:
        os.umask(old)
    assert rig.result("st1")["outcome"] == "solved", rig.result("st1")
    seen = dict(line.split() for line in modes.read_text().splitlines())
    assert {"st1.log", "st1/job.json"} <= set(seen), seen  # its log, its spec (and stamps)
    assert {name: mode for name, mode in seen.items() if mode not in ("600", "700")} == {}
    jobs = tmp_path / "vm" / "jobs"
    assert not (jobs / "st1").exists()  # its directory, its spec and verdict in it
    assert [p for p in (tmp_path / "vm").rglob("*")
            if p.is_file() and secret.encode() in p.read_bytes()] == []
    assert stat.S_IMODE((jobs / "st1.log").stat().st_mode) == 0o600  # the log stays, private


def _forks_fail() -> None:
    """In the worker process before it runs (x86-64 Linux): a seccomp filter makes every
    process creation fail with EAGAIN, as a machine out of processes does; threads are still
    made (clone with CLONE_THREAD; clone3 says ENOSYS, and the C library falls back to clone)."""
    import ctypes

    allow, eagain, enosys = 0x7FFF0000, 0x00050000 | 11, 0x00050000 | 38
    program = [  # (code, jt, jf, k): classic BPF over struct seccomp_data
        (0x20, 0, 0, 0),  # 0: load the syscall number
        (0x15, 8, 0, 435),  # 1: clone3 -> 10
        (0x15, 6, 0, 57),  # 2: fork -> 9
        (0x15, 5, 0, 58),  # 3: vfork -> 9
        (0x15, 1, 0, 56),  # 4: clone -> 6
        (0x06, 0, 0, allow),  # 5
        (0x20, 0, 0, 16),  # 6: load clone's flags (its first argument's low half)
        (0x45, 0, 1, 0x10000),  # 7: CLONE_THREAD -> 8, else 9
        (0x06, 0, 0, allow),  # 8
        (0x06, 0, 0, eagain),  # 9
        (0x06, 0, 0, enosys),  # 10
    ]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte),
                    ("k", ctypes.c_uint)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    filters = (Filter * len(program))(*[Filter(*ins) for ins in program])
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(
            22, 2, ctypes.byref(Program(len(program), filters)), 0, 0) != 0:
        os._exit(99)


@pytest.mark.skipif(os.uname().machine != "x86_64", reason="the filter knows x86-64 only")
def test_a_worker_that_cannot_fork_loses_its_job_and_never_fails_it(tmp_path: Path) -> None:
    """Issue 30, a suspicion confirmed: a fork that fails for the machine's want of processes
    or memory (EAGAIN, ENOMEM) reported the job FAILED ("could not start the job"), a worker
    fault counted against the job. Now the worker fails as when its own disk fails: its jobs
    are reported LOST, to run again elsewhere."""
    bucket = LocalBucket(tmp_path / "bucket")
    write_inbox(bucket, "w1", 1, _inbox_jobs({"j1": _job(["true"])}), key=KEY)
    env = {**os.environ, WORKER_KEY_ENV: KEY.hex(), "EXPOCLOUD_JOB_ZYGOTE": "0"}
    done = subprocess.run(
        [sys.executable, "-m", "expo_executor.worker.agent", "--bucket", str(bucket.root),
         "--worker-id", "w1", "--slots", "1", "--scratch", str(tmp_path / "scratch"),
         "--poll", "0.05", "--grace", "30"],
        env=env, capture_output=True, text=True, timeout=60, preexec_fn=_forks_fail)
    results = [r for name in bucket.list("workers/w1/results/")
               for r in ResultBatch.decode(bucket.read(name).data, KEY).results]
    assert [(r.key, r.end.value) for r in results] == [("j1", "lost")], done.stderr[-2000:]
    assert "Resource temporarily unavailable" in results[0].reason, results[0].reason
    assert done.returncode != 0  # it crashed, loudly
