"""The helpers and rigs tests of every tier share (a test file imports from here, never from
another test file).

In-process rigs: the run key, a scripted engine, and the workers' and the coordinator's side of
the bucket written through the protocol's own records (``WorkerStatus``, ``WorkerResult``,
``Inbox``), so a rig's message is what a real worker or coordinator would write, signed with
the right key. A test whose point is a malformed, forged or hostile message builds that message
itself. The coordinator's round-by-round rig (tests/coordinator_rig.py) is built on these.

For tests that run real processes: running snakemake, waiting, the process table, a worker
on a local bucket, and ``require`` for a prerequisite.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.protocol.bucket import Bucket, LocalBucket
from expo_executor.protocol.keys import inbox_key, result_key, status_key
from expo_executor.protocol.records import Inbox, JobSpec, WorkerResult, WorkerStatus
from expo_executor.protocol.worker_keys import worker_key
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


# In-process rigs -----------------------------------------------------------------------

KEY = b"k" * 32  # the run's key; each worker signs with worker_key(KEY, its name)


class ScriptedEngine:
    """VMs that exist on paper: created RUNNING, TERMINATED when the test says they died;
    ``calls``: the creates (pool, names, shape) and deletes, in order."""

    def __init__(self) -> None:
        self.status: dict[str, str] = {}
        self.deleted: list[str] = []
        self.calls: list[tuple[str, Pool | None, tuple[str, ...], Shape | None]] = []

    def create(self, names: list[str], pool: Pool, slots: int,
               shape: Shape | None = None) -> None:
        self.calls.append(("create", pool, tuple(names), shape))
        self.status.update({name: "RUNNING" for name in names})

    def delete(self, name: str) -> None:
        self.calls.append(("delete", None, (name,), None))
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


def write_status(bucket: Bucket, worker: str, running: Iterable[str] = (), *, slots: int = 1,
                 released: Mapping[str, int] | None = None, seq_seen: int = 0,
                 state: WorkerState = WorkerState.READY, key: bytes = KEY) -> WorkerStatus:
    """``worker``'s status, as its heartbeat writes it: ``state``, running ``running``, having
    given ``released`` back (job -> the release request it answers); signed with ``worker``'s
    key under ``key``."""
    status = WorkerStatus(worker, seq_seen, time.time(), list(running), slots, state,
                          released=dict(released or {}))
    bucket.write(status_key(worker), status.encode(worker_key(key, worker)))
    return status


def attempt(job: str, worker: str, outcome: str, started: float, ended: float, *,
            reason: str | None = None, ran: bool = True) -> WorkerResult:
    """How ``job``'s attempt on ``worker`` ended; a solved one exited 0."""
    end = AttemptEnd(outcome)
    return WorkerResult(job, worker, end, 0 if end is AttemptEnd.SOLVED else None, started,
                        ended, reason, ran=ran)


def write_result(bucket: Bucket, result: WorkerResult, *, key: bytes = KEY) -> None:
    """``result`` under its job's result key, signed with its worker's key under ``key``
    (another run's key: a forged result), written once, as a worker writes it."""
    bucket.write(result_key(result.key, result.worker),
                 result.encode(worker_key(key, result.worker)), if_generation_match=0)


def write_inbox(bucket: Bucket, worker: str, seq: int, jobs: dict[str, JobSpec], *,
                key: bytes, cancel: Iterable[str] = (),
                release: Mapping[str, int] | None = None) -> Inbox:
    """The coordinator's inbox for ``worker``, every job sealed and the whole signed with
    ``key``: the worker's own, the one it was started with (no default, so that a rig's worker
    and its inbox cannot silently disagree)."""
    inbox = Inbox(seq, worker, dict(jobs), list(cancel), dict(release or {}))
    bucket.write(inbox_key(worker), inbox.encode(key))
    return inbox


@contextmanager
def snakemake_dag(root: Path, cores: int = 1,
                  default_resources: object = None) -> Iterator[object]:
    """Snakemake's workflow object for ``root/Snakefile`` with its DAG built as the main
    process builds it (the dry-run plugin stands for a remote executor: both make Snakemake
    form group jobs), with ``default_resources`` as ``--default-resources`` gives them (a
    ``Resources``); the working directory is ``root`` until the block ends. Snakemake is
    imported here, not for every user of these helpers."""
    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import (DAGSettings, ExecutionSettings, OutputSettings,
                                          Quietness, ResourceSettings, StorageSettings)
    from snakemake_interface_executor_plugins.registry import ExecutorPluginRegistry

    cwd = os.getcwd()
    try:
        with SnakemakeApi(OutputSettings(quiet={Quietness.ALL})) as api:
            api_workflow = api.workflow(resource_settings=ResourceSettings(
                cores=cores, default_resources=default_resources),
                                        storage_settings=StorageSettings(),
                                        snakefile=root / "Snakefile", workdir=root)
            api_workflow.dag(DAGSettings())
            built = api_workflow._workflow
            built._executor_plugin = ExecutorPluginRegistry().get_plugin("dryrun")
            built.execution_settings = ExecutionSettings()
            built._prepare_dag(forceall=False, ignore_incomplete=True, lock_warn_only=False,
                               nolock=True)
            built._build_dag()
            built.async_run(built.dag.postprocess(update_needrun=False, check_initial=True))
            yield built
    finally:
        os.chdir(cwd)


def storage_file(path: Path, storage: object) -> object:
    """Snakemake's own file object (``_IOFile``) for a storage file whose local copy is ``path``
    and whose storage object is ``storage``: what the tests of the job process's hooks on
    Snakemake's files (worker/local_copies.py, worker/staged_bytes.py) build. Snakemake is
    imported here, not for every user of these helpers."""
    from snakemake.io import AnnotatedString, _IOFile

    name = AnnotatedString(str(path))
    name.flags["storage_object"] = storage
    file = _IOFile(name, None)
    file.rule = SimpleNamespace(workflow=SimpleNamespace(iocache=SimpleNamespace(active=False)))
    return file


def keep_job_hooks_local(monkeypatch) -> None:
    """Every Snakemake method the job process's hooks replace (worker/command_clock.py's
    ``hook_job``: local copies, checkpoint copies, staged bytes), restored after the test, so
    that a test installing them leaves no other test a patched Snakemake."""
    from snakemake.checkpoints import Checkpoint
    from snakemake.io import _IOFile

    for name in ("retrieve_from_storage", "store_in_storage", "size"):
        monkeypatch.setattr(_IOFile, name, getattr(_IOFile, name))
    monkeypatch.setattr(Checkpoint, "get", Checkpoint.get)


def runtime_sweep(model, log_mean, groups: int = 150, reps: int = 3, seed: int = 1,
                  deadline: float = 1000.0, sd_group: float = 1.0, sd_noise: float = 0.2,
                  **fixed: list[str]) -> None:
    """Feed a runtime model a synthetic sweep with a known answer: ``groups`` instances per
    cell (every combination of ``fixed``), each run ``reps`` times; runtimes
    exp(log_mean(params) + instance effect + noise), cut (censored) at ``deadline``."""
    import math
    import random

    from expo_executor.core.runtime_model import RuntimeObservation

    rng = random.Random(seed)
    cells: list[dict[str, str]] = [{}]
    for name, values in fixed.items():
        cells = [{**c, name: v} for c in cells for v in values]
    for cell in cells:
        for instance in range(groups):
            effect = rng.gauss(0.0, sd_group)
            for rep in range(reps):
                params = {**cell, "instance": str(instance), "rep": str(rep)}
                seconds = math.exp(log_mean(params) + effect + rng.gauss(0.0, sd_noise))
                model.observe(RuntimeObservation(params, min(seconds, deadline),
                                                 seconds < deadline))


def live_estimate(workdir: Path, wanted=lambda status: True) -> tuple[dict, str] | None:
    """A live run's ``status.json`` and ``run.html`` once both show the runtime model's
    estimate of what is left, and the status is ``wanted`` (None until then: the page is
    written just after the status)."""
    for path in (workdir / ".expocloud" / "runs").glob("*/status.json"):
        try:
            status = json.loads(path.read_text())
            page = (path.parent / "run.html").read_text()
        except (OSError, ValueError):  # not written yet
            continue
        if status.get("estimate") and not status.get("finished") and 'id="estimate"' in page \
                and wanted(status):
            return status, page
    return None


def wait_for_estimate(workdir: Path, timeout: float,
                      wanted=lambda status: True) -> tuple[dict, str]:
    """Wait (bounded) for :func:`live_estimate`, and return what it saw."""
    seen: list[tuple[dict, str]] = []

    def shown() -> bool:
        found = live_estimate(workdir, wanted)
        seen.extend([found] if found else [])
        return found is not None

    if not wait_until(shown, timeout):
        raise AssertionError(f"no estimate on the run page of {workdir} within {timeout:g} s")
    return seen[-1]
