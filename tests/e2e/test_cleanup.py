"""``expocloud cleanup``: deletes the VMs of runs whose coordinator is gone, keeps live runs'
VMs, and keeps unknown runs' VMs unless asked (--all); deletes the bucket objects of dead runs
no rerun can use, and only theirs."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from expo_executor.cli import main
from expo_executor.coordinator.run_state import RunState, record
from expo_executor.emulator.compute import FakeCompute
from expo_executor.engines.gce.engine import GceConfig, GceEngine
from expo_executor.engines.gce.launch import run_label, vm_prefix
from expo_executor.core.scheduler import Pool
from expo_executor.protocol.bucket import open_bucket

from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401

ZONES = ["us-central1-a"]


def _sleeper(name: str, host: str, scratch: Path) -> list[str]:
    return ["sleep", "3600"]


@pytest.fixture
def fake(tmp_path: Path):
    # cleanup is for VMs of runs that are gone, long listed: no listing delay here
    server = FakeCompute(tmp_path / "vms", command=_sleeper, list_delay=0).start()
    yield server
    server.stop()


def _vm(fake: FakeCompute, run: str) -> None:
    engine = GceEngine(GceConfig(project="p", zones=ZONES,
                                 machine_types={Pool.SPOT: "e2-standard-2",
                                                Pool.ON_DEMAND: "e2-standard-2"},
                                 image="projects/debian-cloud/global/images/family/debian-12",
                                 max_run_duration_s=3600, run_label=run_label(run),
                                 endpoint=fake.endpoint))
    engine.create([_name(run)], Pool.SPOT, 1)


def _name(run: str) -> str:
    return f"{vm_prefix(run)}-1"


def _run_record(state: Path, run: str, pid: int) -> None:
    (state / "runs" / run).mkdir(parents=True)
    (state / "runs" / run / "run.json").write_text(json.dumps(
        {"run_id": run, "engine": "gce", "ended": None, "pid": pid,
         "host": socket.gethostname(), "created": "2026-11-21T00:00:00"}))


def test_cleanup_deletes_only_vms_of_runs_that_are_gone(fake: FakeCompute, tmp_path: Path,
                                                        capsys: pytest.CaptureFixture) -> None:
    state = tmp_path / ".expocloud"
    dead = subprocess.Popen(["true"])
    dead.wait()
    _run_record(state, "dead-run", dead.pid)
    _run_record(state, "live-run", os.getpid())
    for run in ("dead-run", "live-run", "stranger"):
        _vm(fake, run)
    args = ["cleanup", "--project", "p", "--zones", ",".join(ZONES), "--endpoint",
            fake.endpoint, "--state-dir", str(state)]

    assert main([*args, "--dry-run"]) == 0
    assert f"would delete us-central1-a/{_name('dead-run')}" in capsys.readouterr().out
    assert len(fake.instances()) == 3

    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"keep   us-central1-a/{_name('live-run')}" in out and "its run is alive" in out
    assert "--all deletes it" in out
    assert sorted(fake.instances()) == sorted([_name("live-run"), _name("stranger")])

    assert main([*args, "--all"]) == 0
    assert sorted(fake.instances()) == [_name("live-run")]


def test_cleanup_trusts_the_runs_lock_over_its_pid(fake: FakeCompute, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture) -> None:
    """A run whose coordinator died leaves its lock free; its pid may since belong to another
    process (here: this one), which must not keep the dead run's VMs alive. A run whose lock
    is held is alive whatever its pid says."""
    state = tmp_path / ".expocloud"
    _run_record(state, "dead-run", os.getpid())  # pid reused
    record(state / "runs" / "dead-run", RunState("dead-run", "gce", "gs://b/p"),
           b"k" * 32).release()
    dead = subprocess.Popen(["true"])
    dead.wait()
    _run_record(state, "live-run", dead.pid)  # its pid says dead, its lock says alive
    held = record(state / "runs" / "live-run", RunState("live-run", "gce", "gs://b/q"),
                  b"k" * 32)
    for run in ("dead-run", "live-run"):
        _vm(fake, run)
    assert main(["cleanup", "--project", "p", "--zones", ",".join(ZONES), "--endpoint",
                 fake.endpoint, "--state-dir", str(state)]) == 0
    assert sorted(fake.instances()) == [_name("live-run")], capsys.readouterr().out
    held.end()


def test_cleanup_deletes_the_objects_of_dead_runs_no_rerun_can_use(
        fake: FakeCompute, tmp_path: Path, gcs_emulator: str,  # noqa: F811
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    """A dead run that ended without deleting its objects (storage down at its end, or kept)
    loses them, and only them; a crashed run's stay for its rerun (its key is left), a live
    run's stay; --dry-run only lists."""
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    state = tmp_path / ".expocloud"
    name = fresh_bucket(gcs_emulator)
    buckets = {}
    for run in ("ended-run", "crashed-run", "live-run", "ended-run-2"):
        url = f"gs://{name}/.expocloud/{run_label(run)}"
        buckets[run] = open_bucket(url)
        for key in ("pulse.json", "workers/w-1/status.json", "logs/j/w-1/0"):
            buckets[run].write(key, b"x")
        _run_record(state, run, os.getpid())
        held = record(state / "runs" / run, RunState(run, "gce", url), b"k" * 32)
        if run.startswith("ended"):
            held.end()  # it ended: no key left
        elif run == "crashed-run":
            held.release()  # its coordinator died: the key stays, the lock is free
        else:
            live = held
    args = ["cleanup", "--project", "p", "--zones", ",".join(ZONES), "--endpoint",
            fake.endpoint, "--state-dir", str(state)]
    assert main([*args, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would delete 3 objects of run ended-run in" in out, out
    assert all(len(bucket.list("")) == 3 for bucket in buckets.values())
    assert main([*args, "--run", "ended-run"]) == 0
    assert buckets["ended-run"].list("") == {} and len(buckets["ended-run-2"].list("")) == 3
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "deleted 3 objects of run ended-run-2" in out and "keep   objects of run " \
        "crashed-run" in out, out
    assert {run: len(bucket.list("")) for run, bucket in buckets.items()} == {
        "ended-run": 0, "crashed-run": 3, "live-run": 3, "ended-run-2": 0}
    live.end()


def test_cleanup_keeps_what_it_cannot_reach_and_says_so(
        fake: FakeCompute, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture) -> None:
    """A dead run whose bucket this machine cannot reach (no credentials here) keeps its
    objects, in one line that says why, and cleanup goes on: it once raised a traceback."""
    monkeypatch.delenv("STORAGE_EMULATOR_HOST", raising=False)
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "no-such-key.json"))
    state = tmp_path / ".expocloud"
    url = f"gs://some-bucket/.expocloud/{run_label('ended-run')}"
    _run_record(state, "ended-run", os.getpid())
    record(state / "runs" / "ended-run", RunState("ended-run", "gce", url), b"k" * 32).end()
    assert main(["cleanup", "--project", "p", "--zones", ",".join(ZONES), "--endpoint",
                 fake.endpoint, "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert "keep   objects of run ended-run" in out and "cannot reach the bucket" in out, out
