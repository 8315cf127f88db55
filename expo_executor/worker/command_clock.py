"""The command's own clock: when a job's command (a rule's body, a staged CWL command) runs.

A job's deadline is a statement about the problem's hardness, so it must time the command and
nothing else: not the interpreter's start-up on a loaded machine, not Snakemake's imports and
DAG, not a storage plugin fetching inputs or storing outputs. The job writes *stamps* to the
file the worker names in ``EXPOCLOUD_STAMPS`` (one JSON object a line, times on the system's
monotonic clock, which all processes of a Linux machine share):

- ``{"hooked": true}`` once: this job stamps its command (``{"hooked": false, "why": ...}``: it
  cannot, and the worker times the whole job as before);
- ``{"start": t}`` and ``{"end": t}`` around each command (a group job may run several);
- ``{"down": n}`` and ``{"up": n}``: bytes it read from the bucket (a staged input) and wrote
  to it (an output), for the cost of its egress (``worker/staged_bytes.py``, a staged CWL
  job's ``worker/staged_job.py``).

A Snakemake job's shell command starts with :data:`ANNOUNCE` and runs
``python -m expo_executor.worker.command_clock -m snakemake ARGS``
(the Snakemake front end puts this module in place of the interpreter): :func:`install` wraps
Snakemake's ``snakemake.executors.local.run_wrapper`` (what runs a rule's shell, script,
notebook, wrapper or run block in the job's process) and ``Executor.spawn_job`` (a ``run:``
block in a subprocess, when Snakemake does that), then Snakemake's own ``__main__`` runs. Any
surprise in Snakemake's internals (a renamed function) leaves the job unhooked, never broken.

The worker reads the stamps with :func:`read_stamps` and judges them with :func:`judge`.
"""

from __future__ import annotations

import functools
import json
import os
import runpy
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from expo_executor.worker import checkpoint_copies, local_copies, staged_bytes

STAMPS_ENV = "EXPOCLOUD_STAMPS"
# The first words of a Snakemake job's shell command: it will stamp its command, so whatever
# comes before the hook (Snakemake's --deploy-sources download, on GCE) is staging already.
# The hook's own word, later, stands (a hook that could not be installed says so).
ANNOUNCE = f'[ -z "${STAMPS_ENV}" ] || echo \'{{"hooked": true}}\' >> "${STAMPS_ENV}"'


def stamp(path: str | None, **fields: Any) -> None:
    """Append one stamp; best effort (a full disk must not fail the job itself). The file is
    created 0600, as everything of a job's on the worker's disk (processes/private_files.py)."""
    if not path:
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(fields) + "\n")
    except OSError:
        pass


def whole_command(path: str) -> None:
    """Stamp a job whose command is all it runs (protocol.keys.COMMAND_ONLY_ENV) as it starts:
    hooked, its command started now. No end stamp: its open interval counts until the worker
    reaps it (``Stamps.command_s``), so its deadline times the command and its record says how
    long the command ran, as for a job that stamps itself."""
    stamp(path, hooked=True)
    stamp(path, start=time.monotonic())


def timed(path: str, call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` with a start stamp before it and an end stamp after it, however it ends."""
    @functools.wraps(call)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        stamp(path, start=time.monotonic())
        try:
            return call(*args, **kwargs)
        finally:
            stamp(path, end=time.monotonic())
    return wrapper


def install(path: str) -> str | None:
    """Wrap Snakemake's rule runners; returns None when done, else why not (nothing changed)."""
    try:
        from snakemake.executors import local
        run_wrapper, spawn_job = local.run_wrapper, local.Executor.spawn_job
    except Exception as exc:  # noqa: BLE001 - any import-time surprise: run unhooked
        return f"cannot find Snakemake's rule runner ({type(exc).__name__}: {exc})"
    if not callable(run_wrapper) or not callable(spawn_job):
        return "Snakemake's rule runner is not a function"
    local.run_wrapper = timed(path, run_wrapper)
    local.Executor.spawn_job = timed(path, spawn_job)
    return None


def hook_job(path: str | None) -> None:
    """What the job's own snakemake gets before it runs, in its process: storage files' local
    copies read first (worker/local_copies.py), a checkpoint's outputs fetched when an input
    function asks for them (worker/checkpoint_copies.py) and, given a stamps file ``path``,
    this clock (its word on it stamped) and the bytes it moves to and from the bucket
    (worker/staged_bytes.py)."""
    local_copies.install()
    checkpoint_copies.install()
    if path:
        staged_bytes.install(lambda way, nbytes: stamp(path, **{way: nbytes}))
        why = install(path)
        stamp(path, hooked=why is None, **({"why": why} if why else {}))


def main(argv: list[str] | None = None) -> None:
    """``-m snakemake ARGS``: Snakemake's own command line, its rule bodies timed."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:2] != ["-m", "snakemake"]:
        sys.exit("usage: python -m expo_executor.worker.command_clock -m snakemake ARGS")
    hook_job(os.environ.get(STAMPS_ENV))
    sys.argv = ["snakemake", *args[2:]]
    runpy.run_module("snakemake", run_name="__main__", alter_sys=True)


@dataclass
class Stamps:
    """What a job said of its command so far."""

    hooked: bool | None = None  # None: it said nothing (an older or a foreign command)
    why: str | None = None  # why it is not hooked
    # [start, end or None] while at least one command ran: a group job's rules may run at
    # once, and their time counts once (the union of their runs)
    intervals: list[list[float | None]] = field(default_factory=list)
    depth: int = 0  # commands running now
    down: int = 0  # bytes it read from the bucket
    up: int = 0  # bytes it wrote to the bucket

    def command_s(self, now: float) -> float:
        """Seconds its commands have run until ``now`` (monotonic)."""
        return sum((end if end is not None else now) - start
                   for start, end in self.intervals if start is not None)

    @property
    def running(self) -> bool:
        return bool(self.intervals) and self.intervals[-1][1] is None


def read_stamps(path: Path) -> Stamps:
    """Parse a stamps file (missing: no stamps); a torn last line is ignored."""
    stamps = Stamps()
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return stamps
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if "hooked" in entry:  # the latest word stands
            stamps.hooked, stamps.why = bool(entry["hooked"]), entry.get("why")
        elif _count(entry.get("down")) or _count(entry.get("up")):
            stamps.down += _count(entry.get("down"))
            stamps.up += _count(entry.get("up"))
        elif isinstance(entry.get("start"), (int, float)):
            if stamps.depth == 0:
                stamps.intervals.append([float(entry["start"]), None])
            stamps.depth += 1
        elif isinstance(entry.get("end"), (int, float)) and stamps.depth > 0:
            stamps.depth -= 1
            if stamps.depth == 0:
                stamps.intervals[-1][1] = float(entry["end"])
    return stamps


def _count(value: Any) -> int:
    """A byte count stamped (anything else: 0)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


@dataclass(frozen=True)
class Overrun:
    """A limit a running job passed: a timeout (its command) or not (its start-up or staging)."""

    timeout: bool
    reason: str


def judge(stamps: Stamps, spawned: float, now: float, deadline_s: float | None,
          allowance_s: float) -> Overrun | None:
    """Whether a running job must be killed now (monotonic times). Without a deadline nothing
    limits a job. A hooked job's deadline counts its commands' time; the rest (start-up,
    staging in and out) has ``allowance_s`` of its own and ends in a failure, never a timeout.
    An unhooked job's deadline counts from its spawn: a timeout for a job that never spoke of
    stamps (a command with no staging around it, as before command stamps existed), a failure
    for one whose hook failed (its staging is in that time: a timeout would prune on it)."""
    if deadline_s is None:
        return None
    if not stamps.hooked:
        if now - spawned < deadline_s:
            return None
        if stamps.hooked is False:  # it said it stages around its command, then that its
            # hook failed: the time is start-up and staging too, and proves no hardness
            return Overrun(False, f"killed at its deadline of {deadline_s:g} s, counted from "
                           f"its start: its command could not be timed ({stamps.why}), so "
                           "slow start-up or file staging may have taken it: not a timeout, "
                           "nothing pruned")
        return Overrun(True, f"killed at its deadline of {deadline_s:g} s")
    command = stamps.command_s(now)
    if command >= deadline_s:
        return Overrun(True, f"killed at its deadline of {deadline_s:g} s (its command's time)")
    overhead = (now - spawned) - command
    if overhead >= allowance_s:
        where = ("before its command started" if not stamps.intervals else
                 "after its command ended" if not stamps.running else "around its command")
        return Overrun(False, f"start-up and file staging took more than their allowance of "
                       f"{allowance_s:g} s ({where}; the command ran {command:.1f} s of its "
                       f"{deadline_s:g} s deadline): not a timeout")
    return None


if __name__ == "__main__":
    main()
