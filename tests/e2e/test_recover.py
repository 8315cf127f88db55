"""A rerun and a crashed run's workers (coordinator/recover.py), against the fake Compute: a
crashed run's VMs are deleted by its label, another run's are kept; a crashed run whose
workers cannot be stopped stops the rerun with one line."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from expo_executor.coordinator.recover import recover
from expo_executor.coordinator.run_state import KEY, RunState, crashed_runs, record
from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.emulator.compute import FakeCompute
from expo_executor.engines.gce.engine import GceConfig, GceEngine
from expo_executor.engines.gce.launch import run_label, vm_prefix

KEY_BYTES = bytes(range(32))
ZONES = ("us-central1-a",)


def _run(root: Path, name: str) -> Path:
    run_dir = root / "runs" / name
    run_dir.mkdir(parents=True)
    return run_dir


def _sleeper(name: str, host: str, scratch: Path) -> list[str]:
    return ["sleep", "3600"]


@pytest.fixture
def fake(tmp_path: Path):
    server = FakeCompute(tmp_path / "vms", command=_sleeper, list_delay=0).start()
    yield server
    server.stop()


def _vm(fake: FakeCompute, run: str) -> str:
    engine = GceEngine(GceConfig(project="p", zones=list(ZONES),
                                 machine_types={Pool.SPOT: "e2-standard-2",
                                                Pool.ON_DEMAND: "e2-standard-2"},
                                 image="projects/debian-cloud/global/images/family/debian-12",
                                 max_run_duration_s=3600, run_label=run_label(run),
                                 endpoint=fake.endpoint))
    name = f"{vm_prefix(run)}-1"
    engine.create([name], Pool.SPOT, 1)
    return name


def test_a_crashed_runs_vms_are_deleted_and_no_other(fake: FakeCompute, tmp_path: Path) -> None:
    record(_run(tmp_path, "r1"), RunState("r1", "gce", "gs://b/p", label=run_label("r1"),
                                          project="p", zones=ZONES, endpoint=fake.endpoint),
           KEY_BYTES).release()  # killed: the kernel freed its lock
    live = record(_run(tmp_path, "R1"), RunState("R1", "gce", "gs://b/q", label=run_label("R1"),
                                                 project="p", zones=ZONES,
                                                 endpoint=fake.endpoint), KEY_BYTES)
    crashed, other = _vm(fake, "r1"), _vm(fake, "R1")
    said: list[str] = []
    recover(tmp_path, _run(tmp_path, "r2"), said.append, gone_timeout=30, adopt=False)
    assert sorted(fake.instances()) == [other], crashed
    assert "run r1's" in said[0] and "stopped 1 of its workers" in said[0]
    # its bucket (gs://b/p, no such GCS here) cannot be read: said, and the rerun goes on
    assert len(said) == 2 and "could not read the results of run r1" in said[1], said
    assert crashed_runs(tmp_path) == []
    live.end()


class _Forbidden(BaseHTTPRequestHandler):
    """A Compute API that refuses every call (the crashed run's project is not ours now)."""

    def do_GET(self) -> None:
        body = json.dumps({"error": {"code": 403, "message": "Required 'compute.instances.list' "
                                     "permission", "errors": [{"reason": "forbidden"}]}}).encode()
        self.send_response(403)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def forbidden():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Forbidden)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_crashed_run_whose_workers_cannot_be_stopped_stops_the_rerun(tmp_path: Path,
                                                                       forbidden: str) -> None:
    """The crashed run's project refuses the listing: the rerun refuses to start, in one line
    naming the run, its key file and the fix, and the run stays crashed for the next."""
    record(_run(tmp_path, "r1"), RunState("r1", "gce", "gs://b/p", label="r1-0123456789",
                                          project="p", zones=("us-central1-a",),
                                          endpoint=forbidden), KEY_BYTES).release()
    with pytest.raises(ExpoError) as caught:
        recover(tmp_path, _run(tmp_path, "r2"), lambda line: None, gone_timeout=1, adopt=False)
    assert "r1" in str(caught.value) and KEY in str(caught.value)
    assert "\n" not in str(caught.value)
    assert [run.dir.name for run in crashed_runs(tmp_path)] == ["r1"]
