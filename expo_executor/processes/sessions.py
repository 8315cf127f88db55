"""Process sessions: a job, and everything it started, dies together; a VM's power-off kills
every session it marked.

Each job runs as the leader of its own session, so a timeout or a cancel can reach every
process it spawned (the snakemake job process, its shell, the solver) and nothing else.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

VM_ENV = "EXPOCLOUD_VM"  # in every job's environment: the scratch ("local disk") of its VM


def session_members(sid: int, zombies: bool = False) -> list[int]:
    """PIDs whose session is ``sid`` (Linux /proc), including ones that changed group.

    Zombies (dead, waiting for their parent to reap them) are left out unless asked for.
    """
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # fields after the ")" closing the command name: state ppid pgrp session ...
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 3 and int(fields[3]) == sid and (zombies or fields[0] != "Z"):
            members.append(int(entry.name))
    return members


def signal_session(sid: int, sig: int) -> None:
    """Send ``sig`` to the process group ``sid`` and to any straggler of its session."""
    try:
        os.killpg(sid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in session_members(sid, zombies=True):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_session(sid: int, grace: float = 2.0) -> None:
    """SIGTERM the whole session, then SIGKILL whatever is left after ``grace`` seconds."""
    signal_session(sid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not _alive(sid):
            return
        time.sleep(0.05)
    signal_session(sid, signal.SIGKILL)


def _alive(sid: int) -> bool:
    return bool(session_members(sid))


def recorded_sessions(scratch: Path) -> list[int]:
    """The job sessions a worker recorded on its VM's disk (``scratch/sessions``)."""
    try:
        return [int(line) for line in (scratch / "sessions").read_text().split()]
    except (OSError, ValueError):
        return []


def vm_mark(scratch: Path) -> str:
    """The environment entry every job started on the "VM" ``scratch`` carries (``NAME=VALUE``)."""
    return f"{VM_ENV}={Path(scratch).resolve()}"


def marked_sessions(scratch: Path) -> set[int]:
    """Sessions of live processes whose environment marks them as jobs of the VM ``scratch``
    (Linux /proc; other users' processes are out of sight, and out of reach anyway)."""
    mark = vm_mark(scratch).encode()
    sids: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if mark not in (entry / "environ").read_bytes().split(b"\0"):
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[-1].split()
        except OSError:
            continue
        if len(fields) > 3 and fields[0] != "Z":
            sids.add(int(fields[3]))
    return sids


def power_off(proc: subprocess.Popen, scratch: Path, grace: float = 0.5) -> None:
    """What pulling a VM's plug does to a worker process standing in for it: the worker and
    every job session it started die (local engine, fake Compute server).

    The worker's record of its sessions can miss one: a worker killed between starting a job
    and recording it (or a job whose leader exited and left members behind). On a real VM
    those die with the machine; here they would live on as orphans that write late, so the
    sessions of every process carrying the VM's mark (``vm_mark``) die too."""
    power_off_pid(proc.pid, scratch, grace)
    proc.wait()


def power_off_pid(pid: int, scratch: Path, grace: float = 0.5) -> None:
    """:func:`power_off` for a worker known only by its pid (not our child: a crashed run's,
    stopped by a rerun); nothing to reap."""
    for sid in sorted(set(recorded_sessions(scratch)) | marked_sessions(scratch)):
        kill_session(sid, grace=grace)
    kill_session(pid, grace=grace)
