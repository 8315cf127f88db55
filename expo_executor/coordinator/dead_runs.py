"""Runs whose coordinator is gone, as ``expocloud cleanup`` finds them in a state directory:
which are alive, and the bucket objects of the dead ones that no rerun can use any more.

A run that ends deletes its own objects (loop.py); what stays is a run's whose end could not
(storage down, ``--expocloud-keep-bucket``) and a crashed run's. A crashed run's objects are
what its rerun adopts its workers from and harvests its results from, so they stay as long as
its key does (run_state.py: the rerun deletes that key once it has taken over or stopped the
run); a dead run without its key has nothing left to give, and cleanup deletes its objects,
its whole coordination prefix and nothing outside it (protocol/bucket_purge.py).
"""

from __future__ import annotations

import json
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from expo_executor.coordinator.run_state import KEY, LOCK, STATE, is_held
from expo_executor.engines.gce.launch import run_label
from expo_executor.protocol.bucket import open_bucket
from expo_executor.protocol.bucket_purge import purge


@dataclass(frozen=True)
class DeadRun:
    """A GCE run of this state directory whose coordinator is gone."""

    run_id: str
    bucket_url: str  # its coordination prefix, gs://...
    recoverable: bool  # its key is left: a rerun adopts or harvests it from its objects


def runs_here(state_dir: Path) -> tuple[set[str], set[str]]:
    """Run labels this state directory knows, and those of them whose coordinator may still
    be alive: on this host, one that holds its run's lock (coordinator/run_state.py), or
    without a lock file (an older run) one whose pid lives; another host's: assumed alive."""
    known, live = set(), set()
    for path in (state_dir / "runs").glob("*/run.json"):
        info = json.loads(path.read_text())
        label = run_label(info["run_id"])
        known.add(label)
        if info.get("ended") or info.get("engine") != "gce":
            continue
        if info.get("host") != socket.gethostname():
            live.add(label)
            continue
        if (path.parent / LOCK).exists():
            if is_held(path.parent):
                live.add(label)
            continue
        try:
            os.kill(int(info.get("pid", 0)), 0)
            live.add(label)
        except (ProcessLookupError, ValueError, OverflowError):
            pass
        except PermissionError:
            live.add(label)
    return known, live


def dead_runs(state_dir: Path, live: set[str]) -> list[DeadRun]:
    """The GCE runs of ``state_dir`` not ``live`` (labels) whose coordination prefix is on
    record (coordinator.json), oldest first."""
    found = []
    for path in sorted((state_dir / "runs").glob(f"*/{STATE}")):
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        url = state.get("bucket_url", "")
        if state.get("engine") != "gce" or not url.startswith("gs://") \
                or run_label(state.get("run_id", "")) in live:
            continue
        found.append(DeadRun(state["run_id"], url, (path.parent / KEY).exists()))
    return found


def clean_objects(state_dir: Path, live: set[str], wanted: str | None, dry_run: bool,
                  say: Callable[[str], None]) -> None:
    """Delete (``dry_run``: list) the objects of the dead runs of ``state_dir`` (``wanted``:
    only the run of that label), keeping a recoverable run's; one line each."""
    for run in dead_runs(state_dir, live):
        if wanted is not None and run_label(run.run_id) != wanted:
            continue
        if run.recoverable:
            say(f"keep   objects of run {run.run_id} in {run.bucket_url}: its rerun adopts or "
                "harvests them (cleanup deletes them once it has)")
            continue
        try:
            bucket = open_bucket(run.bucket_url)
            count = len(bucket.list(""))
        except Exception as exc:  # noqa: BLE001 - no credentials, no access: said, not raised
            say(f"keep   objects of run {run.run_id} in {run.bucket_url}: cannot reach the "
                f"bucket ({type(exc).__name__}); run cleanup again where its credentials are")
            continue
        if not count:
            continue
        if dry_run:
            say(f"would delete {count} objects of run {run.run_id} in {run.bucket_url}")
            continue
        purged = purge(bucket)
        say(f"deleted {purged.deleted} objects of run {run.run_id} in {run.bucket_url}"
            + (f"; {purged.left} left ({purged.error}): run cleanup again" if purged.left
               else ""))
