"""Why a job failed, in one line of its report: a full disk, or an output the storage plugin could
not store (with the cause it was given), read from the tail of its log or from this disk.

"exit code 1" alone does not tell a full disk or a refused upload from a bug in the job.
"""

from __future__ import annotations

import errno
import os
import re
from collections.abc import Sequence
from pathlib import Path

from expo_executor.worker.log_end import read_end


LOG_TAIL_BYTES = 4000
DISK_FULL = "No space left on device"  # strerror(ENOSPC), what every tool prints
REASON_DETAIL_CHARS = 400  # a reason is one line in jobs.jsonl, not a log
# Snakemake's storage plugin gave up on an output: the line naming it, then its cause
STORE_FAILED = re.compile(r"^Failed to (store output in|retrieve input from) storage \S+")


def _clip(line: str) -> str:
    line = " ".join(line.split())
    return line if len(line) <= REASON_DETAIL_CHARS else line[:REASON_DETAIL_CHARS - 3] + "..."


# What a process start fails with when the machine lacks processes, memory, descriptors or disk
# (fork's EAGAIN and ENOMEM, a full descriptor table, an I/O error): the worker's failure, never
# the job's. A missing or unrunnable command (ENOENT, EACCES, ENOEXEC, E2BIG) is the job's.
WORKER_ERRNOS = frozenset({errno.EAGAIN, errno.ENOMEM, errno.EMFILE, errno.ENFILE,
                           errno.ENOSPC, errno.EDQUOT, errno.EIO})


def worker_fault(exc: OSError) -> bool:
    """Whether a job's process could not start for this machine's want, not the job's."""
    return exc.errno in WORKER_ERRNOS


def explain_failure(tail: str) -> str | None:
    """The line of a failed job's log that says why, or None: a full disk, or an output the
    storage plugin could not store (with the cause it was given, e.g. 403 Forbidden)."""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    for line in reversed(lines):
        if DISK_FULL in line:
            return _clip(line)
    for i in range(len(lines) - 1, -1, -1):
        if STORE_FAILED.match(lines[i]):
            cause = next((line for line in lines[i + 1:]
                          if not line.endswith(":") and not line.startswith("When running")),
                         None)
            return _clip(f"{lines[i]}: {cause}" if cause else lines[i])
    return None


def disk_full(paths: tuple[Path, ...]) -> str | None:
    """Say so when one of this worker's directories has no space left: a job whose log could
    not even be written leaves nothing else to explain its failure."""
    for path in paths:
        try:
            free = os.statvfs(path).f_bavail
        except OSError:
            continue
        if free == 0:
            return f"{DISK_FULL} on the worker ({path} is full)"
    return None


def log_tail(path: Path, secrets: Sequence[str]) -> str:
    """The last :data:`LOG_TAIL_BYTES` of a job's log, from a line start, with the job's
    secrets blanked before the cut (``worker/log_end.py``); "" when there is none."""
    end = read_end(path, secrets, LOG_TAIL_BYTES)
    return end.data.decode("utf-8", "replace") if end is not None else ""
