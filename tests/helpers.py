"""Helpers for tests that run real snakemake processes and inspect the process table."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from expo_executor.protocol.bucket import LocalBucket
from expo_executor.runs.files import RunFiles
from expo_executor.worker.agent import Worker

REPO = Path(__file__).resolve().parent.parent  # the repository's root
SNAKEMAKE = str(Path(sys.executable).parent / "snakemake")
EXPOCLOUD = str(Path(sys.executable).parent / "expocloud")
# Set by .ci/run, which prepares every prerequisite: there a missing one fails the test
# instead of skipping it (a skipped test once hid a failure until CI ran it).
REQUIRE_PREREQUISITES = "EXPOCLOUD_REQUIRE_PREREQUISITES"


def require(condition: bool, reason: str) -> None:
    """Skip the test unless ``condition`` holds; under .ci/run, fail it."""
    if condition:
        return
    import pytest
    if os.environ.get(REQUIRE_PREREQUISITES) == "1":
        pytest.fail(f"a prerequisite .ci/run prepares is missing: {reason}")
    pytest.skip(reason)



def interruptible() -> None:
    """``preexec_fn`` for a child a test will Ctrl-C: SIGINT back to its default. A parent that
    ignores SIGINT (any background job of a non-interactive shell, as a CI runner may be)
    passes SIG_IGN on through exec, and Python then never raises KeyboardInterrupt: the test
    would measure the harness, not Snakemake and us."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


# A CWL tool with a hardness hint (HINT is replaced by the hint's body) whose command makes a
# marker file: a rejected tool leaves no "ran" behind.
HINTED_TOOL = """cwlVersion: v1.2
class: CommandLineTool
$namespaces: {expo: "https://expocloud.dev/cwl#"}
hints:
  expo:Hardness:
HINT
inputs:
  variant: {type: string, inputBinding: {position: 1}}
  size: {type: int, inputBinding: {position: 2}}
baseCommand: [touch, ran]
outputs: []
"""


def run_snakemake(workdir: Path, *args: str, timeout: float = 300,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True,
                          timeout=timeout, env=env)


def processes_under(path: Path) -> list[tuple[int, str]]:
    """Live processes (not zombies) whose working directory or command line mentions ``path``."""
    found = []
    root = str(path.resolve())
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if state != "Z" and (cwd.startswith(root) or root in cmdline):
            found.append((int(entry.name), cmdline))
    return found


def wait_until(predicate, timeout: float, interval: float = 0.1) -> bool:
    """Poll a condition with a bound; tests assert on the result instead of sleeping blindly."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()


def run_dirs(workdir: Path) -> list[Path]:
    return sorted((workdir / ".expocloud" / "runs").glob("*"), key=lambda p: p.stat().st_mtime)


def job_records(run_dir: Path) -> dict[str, dict]:
    """Last record per job, keyed by its wildcards joined with '/' (read as the executor reads
    them, by the run files' one reader)."""
    return {"/".join(record["wildcards"].values()) or record["rule"]: record
            for record in RunFiles(run_dir).jobs()}


@contextmanager
def running_worker(tmp_path: Path, key: bytes) -> Iterator[tuple[Worker, LocalBucket]]:
    """A real worker ("w1", 2 slots) polling a local bucket under ``tmp_path`` in a thread,
    stopped (and checked stopped) on exit: what tests of the worker's wire use."""
    bucket = LocalBucket(tmp_path / "bucket")
    agent = Worker(bucket, "w1", 2, key, tmp_path / "scratch", poll=0.02, grace=60,
                   heartbeat=30)
    thread = threading.Thread(target=agent.run, daemon=True)
    thread.start()
    try:
        yield agent, bucket
    finally:
        agent.request_stop("terminated")
        thread.join(timeout=10)
    assert not thread.is_alive()
