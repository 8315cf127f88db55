"""Powering a stand-in VM off kills every job it started, including one its worker died too
early to record: left alive, such an orphan runs on after its job was re-queued and writes
late."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from expo_executor.processes.sessions import power_off, session_members, vm_mark

from tests.helpers import wait_until


def _session(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    return subprocess.Popen(argv, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def test_power_off_kills_an_unrecorded_job_session_by_its_mark(tmp_path: Path) -> None:
    scratch = tmp_path / "vm"
    scratch.mkdir()
    worker = _session(["sleep", "300"])  # the worker process (already dead or not)
    name, _, value = vm_mark(scratch).partition("=")
    job = _session(["sh", "-c", "sleep 300 & sleep 300"], {**os.environ, name: value})
    other_vm = _session(["sleep", "300"], {**os.environ, name: value + "-other"})
    try:
        assert wait_until(lambda: len(session_members(job.pid)) == 3, 10)
        (scratch / "sessions").write_text("")  # the worker never recorded it
        power_off(worker, scratch)
        assert worker.poll() is not None
        assert wait_until(lambda: not session_members(job.pid), 10), \
            "an unrecorded job of the VM outlived it"
        assert other_vm.poll() is None, "a job of another VM was killed"
    finally:
        for proc in (worker, job, other_vm):
            if proc.poll() is None:
                proc.kill()
            proc.wait()
