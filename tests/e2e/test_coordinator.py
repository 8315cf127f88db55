"""The coordinator with the real local engine, bucket and worker processes, no Snakemake."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from expo_executor.core.records import JobMeta
from expo_executor.frontends.base import job_request
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig, JobRequest
from expo_executor.engines.local import LocalEngine, LocalEngineConfig
from expo_executor.core.scheduler import Outcome, Scheduler, Task
from expo_executor.coordinator.state import StateDir
from expo_executor.worker.staged_job import STAGED_SPEC

from tests.coordinator_rig import FlakyBucket
from tests.helpers import processes_under, wait_until

KEY = b"c" * 32


@pytest.fixture
def make(tmp_path: Path):
    made = []

    def build(max_workers: int = 2, boot_delay: float = 0.0, idle: float = 30.0,
              boot_timeout: float = 120.0, log=lambda text: None,
              prefetch: int = 0) -> Coordinator:
        run_dir = tmp_path / "run"
        run_dir.mkdir()
        bucket = LocalBucket(run_dir / "bucket")
        engine = LocalEngine(LocalEngineConfig(bucket.root, run_dir / "vms", KEY, poll=0.05,
                                               grace=30, heartbeat=1, boot_delay=boot_delay))
        config = CoordinatorConfig("run", 1, max_workers, idle_timeout=idle, poll=0.05,
                                   heartbeat=1, status_interval=60, boot_timeout=boot_timeout)
        coordinator = Coordinator(config, engine, bucket, KEY, run_dir, StateDir(tmp_path), log,
                                  Scheduler(prefetch=prefetch))
        coordinator.start()
        made.append(coordinator)
        return coordinator

    yield build
    for coordinator in made:
        coordinator.stop()
    assert not processes_under(tmp_path)


def _request(key: str, argv: list[str], cwd: Path) -> JobRequest:
    return job_request(Task(key, key), argv, str(cwd), {}, None,
                       meta=JobMeta("r", {"i": key}))


def _wait_reports(coordinator: Coordinator, keys: list[str], timeout: float) -> dict:
    reports: dict = {}

    def collect() -> bool:
        for key in keys:
            if key not in reports and (report := coordinator.take_report(key)) is not None:
                reports[key] = report
        return len(reports) == len(keys)

    assert wait_until(collect, timeout), f"missing reports: {set(keys) - set(reports)}"
    return reports


def _vms(run_dir: Path) -> list[dict]:
    path = run_dir / "vms.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_scales_up_with_boot_delay_and_deletes_idle_workers(make, tmp_path: Path) -> None:
    coordinator = make(max_workers=2, boot_delay=0.5, idle=0.5)
    keys = [f"t{i}" for i in range(6)]
    coordinator.submit([_request(k, ["sh", "-c", f"echo {k} > {k}.txt"], tmp_path) for k in keys])
    reports = _wait_reports(coordinator, keys, 30)
    assert {r.outcome for r in reports.values()} == {Outcome.SOLVED}
    assert sorted(p.name for p in tmp_path.glob("t*.txt")) == [f"{k}.txt" for k in keys]
    # work ran out: the idle workers are deleted while the run goes on
    assert wait_until(lambda: len(_vms(coordinator.run_dir)) == 2, 10)
    assert {vm["end"] for vm in _vms(coordinator.run_dir)} == {"deleted"}
    workers = {r.worker for r in reports.values()}
    assert workers <= {"w-1", "w-2"} and len(workers) == 2, "never more than max_workers"
    # new work: a new worker boots
    coordinator.submit([_request("late", ["true"], tmp_path)])
    assert _wait_reports(coordinator, ["late"], 30)["late"].worker == "w-3"


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGTERM],
                         ids=["vanishes without a word", "stops and reports its job cancelled"])
def test_jobs_of_a_lost_worker_are_requeued_and_finish(make, tmp_path: Path, how: int) -> None:
    coordinator = make(max_workers=1)
    marker = tmp_path / "attempts"
    script = f"echo x >> {marker}; sleep 2"
    coordinator.submit([_request("victim", ["sh", "-c", script], tmp_path)])
    assert wait_until(lambda: marker.exists(), 30)
    worker = next(p for p, cmd in processes_under(tmp_path)
                  if "expo_executor.worker.agent" in cmd and "w-1" in cmd)
    os.kill(worker, how)
    report = _wait_reports(coordinator, ["victim"], 60)["victim"]
    assert report.outcome is Outcome.SOLVED and report.worker == "w-2"
    assert marker.read_text().count("x") == 2
    assert [vm["end"] for vm in _vms(coordinator.run_dir)][:1] == ["lost"]


class _BrokenEngine(LocalEngine):
    """An engine whose listing always fails with a refusal (not an outage): a bug, or a
    permission taken away."""

    def list(self):  # type: ignore[override]
        raise RuntimeError("engine refuses")


def test_a_persistently_failing_round_fails_open_jobs_instead_of_hanging(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "bucket")
    engine = _BrokenEngine(LocalEngineConfig(bucket.root, tmp_path / "vms", KEY))
    lines: list[str] = []
    config = CoordinatorConfig("run", 1, 1, poll=0.01, status_interval=60, give_up_after=2.0)
    coordinator = Coordinator(config, engine, bucket, KEY, tmp_path, StateDir(tmp_path),
                              lines.append)
    coordinator.start()
    coordinator.submit([_request("stuck", ["true"], tmp_path)])
    try:
        report = _wait_reports(coordinator, ["stuck"], 30)["stuck"]
    finally:
        coordinator.stop()
    assert report.outcome is Outcome.FAILED and "engine refuses" in report.message
    assert sum("coordinator error" in line for line in lines) == 1, "logged once, not per round"
    assert any("giving up" in line for line in lines)


class _FlakyEngine(LocalEngine):
    """The local engine, whose listing fails while ``down`` is set, as a cloud API might."""

    down: Exception | None = None

    def list(self):  # type: ignore[override]
        if self.down is not None:
            raise self.down
        return super().list()


def test_an_outage_of_the_coordinators_storage_and_compute_fails_no_job(tmp_path: Path) -> None:
    """C1: the coordinator's bucket and its engine's listing fail for 15 s (longer than the 10 s
    after which the coordinator used to fail every open job; shorter than the workers' 60 s
    grace) while jobs run: no job fails, the workers carry on, the run completes."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    bucket = FlakyBucket(run_dir / "bucket")
    engine = _FlakyEngine(LocalEngineConfig(bucket.root, run_dir / "vms", KEY, poll=0.05,
                                            grace=60, heartbeat=1))
    lines: list[str] = []
    config = CoordinatorConfig("run", 1, 2, poll=0.05, heartbeat=1, status_interval=60)
    coordinator = Coordinator(config, engine, bucket, KEY, run_dir, StateDir(tmp_path),
                              lines.append)
    coordinator.start()
    try:
        keys = [f"t{i}" for i in range(4)]
        coordinator.submit([_request(k, ["sh", "-c", f"touch {k}.started; sleep 3"], tmp_path)
                            for k in keys])
        assert wait_until(lambda: len(list(tmp_path.glob("*.started"))) == 2, 30)
        bucket.down, engine.down = OSError(5, "Input/output error"), ConnectionError("no route")
        time.sleep(15)  # the outage: its length is the point of the test
        bucket.down = engine.down = None
        reports = _wait_reports(coordinator, keys, 60)
    finally:
        coordinator.stop()
    assert {r.outcome for r in reports.values()} == {Outcome.SOLVED}, reports
    assert sum("calls fail" in line for line in lines) == 1, lines
    assert any("succeed again" in line for line in lines), lines
    assert not any("re-queued" in line for line in lines), "no worker was taken for lost"
    assert not processes_under(tmp_path)


def test_workers_that_never_come_up_stop_the_pool_and_the_queued_jobs_fail(
        make, tmp_path: Path) -> None:
    """Workers that take far longer than the boot timeout: each is deleted when it is overdue,
    three in a row stop the pool, and the queued jobs fail with the reason instead of waiting
    forever (no VM is left, and none can be created)."""
    lines: list[str] = []
    coordinator = make(max_workers=1, boot_delay=600, boot_timeout=0.5, log=lines.append)
    keys = ["a", "b"]
    coordinator.submit([_request(k, ["true"], tmp_path) for k in keys])
    reports = _wait_reports(coordinator, keys, 60)
    assert {r.outcome for r in reports.values()} == {Outcome.FAILED}
    assert all("no VM is left and no more can be created" in r.message
               and "never reported ready" in r.message for r in reports.values())
    assert [vm["end"] for vm in _vms(coordinator.run_dir)] == ["never ready"] * 3
    assert sum("did not report ready within 0.5 s" in line for line in lines) == 3
    assert sum("no more local VMs this run" in line for line in lines) == 1
    # a job submitted later fails at once, for the same reason
    coordinator.submit([_request("c", ["true"], tmp_path)])
    late = _wait_reports(coordinator, ["c"], 30)["c"]
    assert late.outcome is Outcome.FAILED and "no VM is left" in late.message
    assert len(_vms(coordinator.run_dir)) == 3


def test_a_worker_whose_own_disk_fails_loses_its_jobs_to_another(tmp_path: Path) -> None:
    """C5: worker w-1 runs one job, then cannot write the next one's spec (ENOSPC: its spec
    file is /dev/full). That is the worker's failure, not the jobs': both are reported lost,
    re-queued, and solved on another worker; none fails."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    bucket = LocalBucket(run_dir / "bucket")
    home = run_dir / "vms" / "w-1" / "jobs" / "staged"  # w-1's disk, before it boots
    home.mkdir(parents=True)
    (home / STAGED_SPEC).symlink_to("/dev/full")
    engine = LocalEngine(LocalEngineConfig(bucket.root, run_dir / "vms", KEY, poll=0.05,
                                           grace=30, heartbeat=1))
    lines: list[str] = []
    config = CoordinatorConfig("run", 2, 1, poll=0.05, heartbeat=1, status_interval=60)
    coordinator = Coordinator(config, engine, bucket, KEY, run_dir, StateDir(tmp_path),
                              lines.append)
    coordinator.start()
    try:
        coordinator.submit([
            # on w-1 it is still running when w-1 fails, however late the staged job starts
            _request("plain", ["sh", "-c", 'case "$EXPOCLOUD_VM" in */w-1) sleep 60;; esac; '
                               "echo x >> plain.txt"], tmp_path),
            job_request(Task("staged", "staged"), ["sh", "-c", "echo y >> staged.txt"],
                        str(tmp_path), {}, None, meta=JobMeta("r", {"i": "staged"}),
                        stage={"host_env": True})])
        reports = _wait_reports(coordinator, ["plain", "staged"], 60)
    finally:
        coordinator.stop()
    assert {k: (r.outcome, r.worker) for k, r in reports.items()} == {
        "plain": (Outcome.SOLVED, "w-2"), "staged": (Outcome.SOLVED, "w-2")}, reports
    assert (tmp_path / "plain.txt").read_text() == "x\n"
    assert (tmp_path / "staged.txt").read_text() == "y\n"
    crash = [line for line in lines if "worker w-1 failed" in line]
    assert crash and "No space left on device" in crash[0], lines
    assert [vm["end"] for vm in _vms(run_dir)][:1] == ["lost"]


class _ResultReads(LocalBucket):
    """The coordinator's bucket, counting the result objects it read (it reads each once)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.result_objects = 0

    def read(self, key: str, **bounds):  # type: ignore[no-untyped-def]
        blob = super().read(key, **bounds)
        self.result_objects += blob is not None and "/results/" in key
        return blob


def test_a_busy_worker_holds_no_job_that_a_vm_still_to_come_would_run(make, tmp_path: Path) -> None:
    """Prefetch 1, up to two one-slot VMs: a job that arrives while the only worker is busy
    waits in the queue for the second VM, not in the busy worker's hold, where it would start
    only once the first job ended (here never, until the test releases it)."""
    coordinator = make(max_workers=2, boot_delay=0.3, prefetch=1)
    release = tmp_path / "release"
    coordinator.submit([_request("first", ["sh", "-c", f"until [ -e {release} ]; do "
                                           "sleep 0.05; done"], tmp_path)])
    assert wait_until(lambda: coordinator.status(time.time()).counts["running"] == 1, 60)
    coordinator.submit([_request("second", ["true"], tmp_path)])
    try:
        second = _wait_reports(coordinator, ["second"], 60)["second"]
    finally:
        release.touch()
    first = _wait_reports(coordinator, ["first"], 60)["first"]
    assert second.outcome is first.outcome is Outcome.SOLVED
    assert second.worker != first.worker


def _one_slot_sweep(tmp_path: Path, scheduler: Scheduler, n: int, seconds: float,
                    **config: float) -> _ResultReads:
    """``n`` jobs of ``seconds`` through a real coordinator and one one-slot local worker;
    every job must be reported once, solved. Returns the coordinator's counted bucket."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    bucket = _ResultReads(run_dir / "bucket")
    engine = LocalEngine(LocalEngineConfig(bucket.root, run_dir / "vms", KEY, poll=0.05,
                                           grace=30, heartbeat=1, report_delay=30))
    coordinator = Coordinator(
        CoordinatorConfig("run", 1, 1, idle_timeout=30, poll=0.05, heartbeat=1,
                          status_interval=60, boot_timeout=120, **config),
        engine, bucket, KEY, run_dir, StateDir(tmp_path), lambda text: None, scheduler)
    coordinator.start()
    try:
        keys = [f"p{i:02d}" for i in range(n)]
        coordinator.submit([_request(k, ["sleep", str(seconds)], tmp_path) for k in keys])
        reports = _wait_reports(coordinator, keys, 60)
        assert {r.outcome for r in reports.values()} == {Outcome.SOLVED}
    finally:
        coordinator.stop()
    assert not processes_under(tmp_path)
    return bucket


def test_with_prefetch_a_worker_reports_several_jobs_an_object(tmp_path: Path) -> None:
    """Prefetch 4 on a one-slot worker: it is refilled only when low, and reports the jobs
    it ran meanwhile in one object."""
    bucket = _one_slot_sweep(tmp_path, Scheduler(prefetch=4), 12, 0.2)
    assert bucket.result_objects < 12, bucket.result_objects


def test_the_prefetch_depth_grows_with_the_jobs_own_length(tmp_path: Path) -> None:
    """Depth sized to the jobs (the GCE default, here with 2 s of work per slot): it starts
    at 1 and, once jobs of ~0.3 s have ended, holds several, so later jobs share their result
    objects."""
    scheduler = Scheduler(prefetch=1)
    bucket = _one_slot_sweep(tmp_path, scheduler, 16, 0.3, prefetch_hold_s=2.0)
    assert scheduler.prefetch > 1, "the depth never grew"
    assert bucket.result_objects < 16, bucket.result_objects
