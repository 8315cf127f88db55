"""Security properties (docs/security.md) checked in process:

- a malformed, oversized, unsigned or foreign-signed status or result is ignored by the
  coordinator;
- a forged output manifest cannot link a job's outputs to files outside the run's staging root,
  and a staged input whose content was replaced is refused;
- no command in the package is built as a string for a shell, and nothing in it can unpickle.

The socket tables of real runs, real workers given forged inboxes, the run key and CWL secrets
through whole runs, and the startup script's quoting: tests/e2e/test_security_processes.py.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import time
from pathlib import Path

import pytest

from expo_executor.coordinator.loop import Coordinator, CoordinatorConfig
from expo_executor.coordinator.vms import Vm
from expo_executor.coordinator.state import StateDir
from expo_executor.core.scheduler import Pool
from expo_executor.engines.local import LocalEngine, LocalEngineConfig
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import result_key, status_key
from expo_executor.protocol.records import WorkerResult, WorkerStatus
from expo_executor.protocol.worker_keys import worker_key

from tests.helpers import REPO

PACKAGE = REPO / "expo_executor"
KEY = b"s" * 32


# -- statuses and results the coordinator must ignore -------------------------------------------
def _coordinator(tmp_path: Path, lines: list[str]) -> Coordinator:
    engine = LocalEngine(LocalEngineConfig(tmp_path / "bucket", tmp_path / "vms", KEY,
                                           grace=30, heartbeat=1))
    return Coordinator(CoordinatorConfig("run", 1, 1, poll=0.05, heartbeat=1), engine,
                       LocalBucket(tmp_path / "bucket"), KEY, tmp_path, StateDir(tmp_path),
                       lines.append)


def test_a_worker_cannot_pass_off_a_status_or_result_as_another_workers(tmp_path: Path) -> None:
    """Issue 16: every worker held the run key, so a worker (or a job on it) could sign a
    timeout in another worker's name and poison the persisted frontier. A worker holds only
    its own key now: what it signs counts only as its own."""
    from expo_executor.core.records import AttemptEnd, WorkerState

    lines: list[str] = []
    coordinator = _coordinator(tmp_path, lines)
    bucket = coordinator.bucket
    victim, forger = Vm("w1", time.time(), Pool.SPOT), Vm("w2", time.time(), Pool.SPOT)
    coordinator.vms.track(victim)
    coordinator.vms.track(forger)
    w2 = worker_key(KEY, "w2")  # all the forging worker holds
    ready = WorkerStatus("w1", 0, time.time(), [], 1, WorkerState.READY)
    bucket.write(status_key("w1"), ready.encode(w2))  # in w1's place, signed by w2
    bucket.write(status_key("w2"), ready.encode(w2))  # in its own place, claiming to be w1
    coordinator._read_statuses(time.time())
    assert not victim.ready and not forger.ready
    timeout = WorkerResult("j1", "w1", AttemptEnd.TIMEOUT, None, 1.0, 2.0, "killed")
    victim.places.assign("j1", {})
    bucket.write(result_key("j1", "w1"), timeout.encode(w2))
    coordinator._read_statuses(time.time())  # the round's listing: it shows the result
    coordinator._read_results({"w1"})
    assert "j1" in victim.places.jobs(), "a result signed by w2 counted as w1's"
    assert any("bad signature" in line for line in lines), lines
    # what w1 itself signs still counts
    bucket.write(status_key("w1"), ready.encode(worker_key(KEY, "w1")))
    coordinator._read_statuses(time.time())
    assert victim.ready



def test_the_coordinator_ignores_malformed_or_oversized_statuses_and_results(
        tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "bucket")
    engine = LocalEngine(LocalEngineConfig(bucket.root, tmp_path / "vms", KEY, poll=0.05,
                                           grace=30, heartbeat=1))
    lines: list[str] = []
    coordinator = Coordinator(CoordinatorConfig("run", 1, 1, poll=0.05, heartbeat=1),
                              engine, bucket, KEY, tmp_path, StateDir(tmp_path), lines.append)
    vm = Vm("w1", time.time(), Pool.SPOT)
    coordinator.vms.track(vm)
    status = {"worker": "w1", "seq_seen": 0, "time": time.time(), "running": [], "slots": 1,
              "state": "ready"}
    big = json.dumps({"v": 1, "kind": "status",
                      "body": {**status, "pad": "x" * messages.MAX_BYTES}}).encode()
    for data in (b"\x80\x04pickle", b"{", json.dumps({"v": 1, "kind": "status",
                                                       "body": {"worker": 3}}).encode(), big,
                 messages.encode("status", status),  # well-formed, but unsigned
                 messages.encode("status", status, b"w" * 32),  # signed with another key
                     messages.encode("status", status, KEY)):  # the run key: not w1's own
        bucket.write(status_key("w1"), data)
        coordinator._read_statuses(time.time())
        assert not vm.ready, data[:40]
    assert len([line for line in lines if "ignoring a malformed status" in line]) == 7, lines
    bucket.write(status_key("w1"),
                     messages.encode("status", status, worker_key(KEY, "w1")))
    coordinator._read_statuses(time.time())
    assert vm.ready  # the genuine status after them is read as ever

    result = {"key": "j1", "worker": "w1", "outcome": "solved", "returncode": 0, "started": 1.0,
              "ended": 2.0, "reason": None, "log_tail": "x" * (messages.MAX_BYTES + 1)}
    for name, data in (("j1", json.dumps({"v": 1, "kind": "result", "body": result}).encode()),
                       ("j2", b"not json"),
                       ("j3", json.dumps({"v": 1, "kind": "result",
                                          "body": {**result, "key": "j3", "log_tail": "",
                                                   "outcome": "pwned"}}).encode()),
                       ("j4", messages.encode("result", {**result, "key": "j4",
                                                         "log_tail": ""}))):  # unsigned
        vm.places.assign(name, {})
        bucket.write(result_key(name, "w1"), data)
    coordinator._read_statuses(time.time())  # the round's listing: it shows the results
    coordinator._read_results({"w1"})
    assert set(vm.places.jobs()) == {"j1", "j2", "j3", "j4"}, "a malformed or forged result counted"
    assert len([line for line in lines if "ignoring a malformed result" in line]) == 4, lines
    assert not (tmp_path / "jobs.jsonl").exists()


def test_a_forged_output_manifest_cannot_link_outputs_to_this_machines_files(
        tmp_path: Path) -> None:
    """Outputs come back through a manifest a bucket writer could forge: it is checked for
    shape and size, and a link may not point outside the run's staging root (else the next
    step would upload, say, a private key to the bucket)."""
    from expo_executor.frontends.cwl.staging import Staging

    root = tmp_path / "cwl"
    outdir = root / "out1"
    outdir.mkdir(parents=True)
    bucket = LocalBucket(tmp_path / "bucket")
    staging = Staging(bucket, root)
    secret = tmp_path / "id_rsa"
    secret.write_text("private")
    good = {"dirs": [], "files": {}, "links": {"in.txt": "../in0/data.txt"}}
    for manifest, error in (
            ({**good, "links": {"key": str(secret)}}, "outside the run's staging root"),
            ({**good, "links": {"key": "../../id_rsa"}}, "outside the run's staging root"),
            ({**good, "files": {"a": "0644"}}, "malformed"),
            (b"\x80\x04pickle", "not JSON"),
            ({**good, "dirs": ["x" * messages.MAX_BYTES]}, "exceeds")):
        data = manifest if isinstance(manifest, bytes) else json.dumps(manifest).encode()
        bucket.write("up/w-1/manifest.json", data)
        with pytest.raises(ValueError, match=error):
            staging.fetch("up/", "w-1", str(outdir))
        assert not (outdir / "key").exists()
    bucket.write("up/w-1/manifest.json", json.dumps(good).encode())
    staging.fetch("up/", "w-1", str(outdir))
    assert os.readlink(outdir / "in.txt") == "../in0/data.txt"


def test_a_replaced_staged_input_is_refused(tmp_path: Path) -> None:
    """Staged inputs are content-addressed and named in the signed assignment: a bucket
    writer who swaps one's content makes the job fail, not run on the forged data."""
    from expo_executor.worker.staged_job import materialise

    bucket = LocalBucket(tmp_path / "bucket")
    digest = hashlib.sha256(b"genuine").hexdigest()
    bucket.write(f"stage/in/{digest}", b"forged")
    stage = {"dirs": ["in"], "inputs": [["in/data.txt", f"stage/in/{digest}", 0o644]]}
    with pytest.raises(ValueError, match="does not match its content hash"):
        materialise(bucket, stage, tmp_path / "root")
    assert not (tmp_path / "root" / "in" / "data.txt").exists()
    bucket.write(f"stage/in/{digest}", b"genuine")
    materialise(bucket, stage, tmp_path / "root")
    assert (tmp_path / "root" / "in" / "data.txt").read_bytes() == b"genuine"


# -- commands are never strings for a shell --------------------------------------------------------
SPAWNERS = {("subprocess", n) for n in ("run", "Popen", "call", "check_call", "check_output")}


def _dotted(node: ast.AST) -> tuple[str, ...]:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return tuple(reversed(parts))


def test_no_shell_strings_in_the_package() -> None:
    """No shell=True, os.system, os.popen, subprocess.getoutput, asyncio's shell, and no string
    (f-string, %, +, .format, a literal) as a subprocess command: argv lists only, so no value
    is ever parsed by a shell of ours."""
    problems = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Call):
                continue
            name = _dotted(node.func)
            where = f"{path.relative_to(REPO)}:{node.lineno}"
            if name[-2:] in (("os", "system"), ("os", "popen"), ("subprocess", "getoutput"),
                             ("subprocess", "getstatusoutput"),
                             ("asyncio", "create_subprocess_shell")) \
                    or name[-1:] == ("create_subprocess_shell",):
                problems.append(f"{where}: {'.'.join(name)}")
            if name[-2:] in SPAWNERS or name[-1:] in {("Popen",)}:
                for kw in node.keywords:
                    if kw.arg == "shell" and not (isinstance(kw.value, ast.Constant)
                                                  and kw.value.value is False):
                        problems.append(f"{where}: shell=")
                command = node.args[0] if node.args else next(
                    (kw.value for kw in node.keywords if kw.arg == "args"), None)
                if isinstance(command, (ast.JoinedStr, ast.BinOp)) or (
                        isinstance(command, ast.Constant) and isinstance(command.value, str)) or (
                        isinstance(command, ast.Call) and _dotted(command.func)[-1:] ==
                        ("format",)):
                    problems.append(f"{where}: a string as the command")
    assert problems == [], problems


def test_no_pickle_on_the_wire() -> None:
    """Nothing in the package can unpickle (or unmarshal, or load YAML unsafely): every
    message is JSON, so a bucket writer cannot run code by writing an object."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            found += [f"{path.name}:{node.lineno} {n}" for n in names
                      if n.split(".")[0] in ("pickle", "marshal", "shelve", "dill",
                                             "cloudpickle")]
            if isinstance(node, ast.Call) and _dotted(node.func)[-2:] in (("yaml", "load"),
                                                                          ("yaml", "unsafe_load")):
                found.append(f"{path.name}:{node.lineno} yaml.load")
    assert found == [], found
