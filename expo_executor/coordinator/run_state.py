"""What a live coordinator leaves on its host, so that a rerun can tell a crashed run from one
that ended, and reach the crashed run's workers.

In the run directory (``.expocloud/runs/<run>/``):

- ``coordinator.json``: run id, engine, coordination prefix (bucket URL), GCE label, project,
  zones and endpoint, the coordinator's pid and host, and the package version;
- ``coordinator.lock``: held (``fcntl.flock``) by the coordinator for as long as it lives; the
  kernel releases it when the process dies, however it dies, so a free lock is a dead
  coordinator (on this host: flock says nothing about another host's processes);
- ``run.key``: the run key, mode 0600, removed when the run ends cleanly (every VM deleted).

A run directory with a key file and a free lock is a run whose coordinator died while its
workers may live on: :func:`crashed_runs` finds those, holding each one's lock while the
caller deals with it, so two reruns never recover the same run.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path

STATE = "coordinator.json"
LOCK = "coordinator.lock"
KEY = "run.key"


@dataclass(frozen=True)
class RunState:
    """Where a run's workers are and how to reach them (never secret: the key is apart)."""

    run_id: str
    engine: str
    bucket_url: str
    label: str = ""  # GCE: the VMs' run label
    project: str = ""
    zones: tuple[str, ...] = ()
    endpoint: str | None = None
    pid: int = 0
    host: str = ""
    version: str = ""

    @classmethod
    def from_json(cls, data: dict) -> RunState:
        names = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in names}
        values["zones"] = tuple(values.get("zones", ()))
        return cls(**values)


class HeldRun:
    """A run directory whose lock this process holds: the live coordinator's own run, or a
    crashed run while a rerun stops its workers."""

    def __init__(self, run_dir: Path, handle: int) -> None:
        self.dir = run_dir
        self._handle = handle

    @property
    def state(self) -> RunState:
        return RunState.from_json(json.loads((self.dir / STATE).read_text()))

    def key(self) -> bytes | None:
        """The run key, or None when the key file is gone or unreadable."""
        try:
            return bytes.fromhex((self.dir / KEY).read_text().strip())
        except (OSError, ValueError):
            return None

    def end(self) -> None:
        """The run is over and none of its workers lives: forget the key, free the lock."""
        (self.dir / KEY).unlink(missing_ok=True)
        self.release()

    def release(self) -> None:
        if self._handle >= 0:
            os.close(self._handle)  # closing the descriptor releases the flock
            self._handle = -1


def _lock(run_dir: Path) -> int | None:
    """The run's lock, taken without waiting; None while another process holds it."""
    handle = os.open(run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(handle)
        return None
    return handle


def is_held(run_dir: Path) -> bool:
    """Whether a live process (a coordinator, or a rerun stopping the run's workers) holds
    the run's lock."""
    handle = _lock(run_dir)
    if handle is None:
        return True
    os.close(handle)
    return False


def record(run_dir: Path, state: RunState, run_key: bytes) -> HeldRun:
    """Take the run's lock and leave its state and key for a rerun (called by the coordinator
    as it starts, before any VM)."""
    handle = _lock(run_dir)
    if handle is None:
        raise RuntimeError(f"{run_dir} is held by another coordinator")
    state = dataclasses.replace(state, pid=os.getpid(), host=socket.gethostname())
    tmp = run_dir / f".{STATE}.tmp"
    tmp.write_text(json.dumps(dataclasses.asdict(state), indent=1))
    os.replace(tmp, run_dir / STATE)
    key_path = run_dir / KEY
    key_path.unlink(missing_ok=True)
    fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(run_key.hex())
    return HeldRun(run_dir, handle)


def crashed_runs(state_root: Path, skip: Path | None = None) -> list[HeldRun]:
    """Runs of this host whose coordinator died before the run ended (key file left, lock
    free), oldest first, each with its lock now held by the caller. Runs of other hosts are
    left alone: their coordinator may well be alive."""
    found = []
    host = socket.gethostname()
    for run_dir in sorted((state_root / "runs").glob("*/")):
        if run_dir == skip or not (run_dir / KEY).exists() or not (run_dir / STATE).exists():
            continue
        try:
            if json.loads((run_dir / STATE).read_text()).get("host") != host:
                continue
        except (OSError, ValueError):
            continue
        handle = _lock(run_dir)
        if handle is not None:
            found.append(HeldRun(run_dir, handle))
    return found
