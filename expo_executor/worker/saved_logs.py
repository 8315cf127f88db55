"""A failed or timed-out job's logs, saved to the bucket before its VM (and its disk) goes.

What is saved: the job's captured stdout and stderr, and the log files it names (a Snakemake
rule's ``log:``), each under ``keys.saved_log_key``. A result's 20-line tail rarely says why a
job failed; its whole log does, and on GCE the VM that held it is deleted soon after.

Each file is cut to its last :data:`MAX_LOG_BYTES` (from a line start, under a first line
saying so: the end of a failed job's log is where the error is) and has the job's secrets
blanked, as its report's tail has (``worker/log_end.py``): blanking comes before the cut and
the cut starts at a line outside every blank, so a secret the cut runs through (a token, a key
of several lines) is never left half-shown.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

from expo_executor.protocol.keys import saved_log_key
from expo_executor.protocol.records import SavedLog
from expo_executor.worker.log_end import LogEnd, blanked_end, read_end

MAX_LOG_BYTES = 10 * 1024 * 1024  # per file, in the bucket and in the run directory
MAX_LOG_FILES = 16  # a job's own log files saved at most (besides its output)


def capped(data: bytes, size: int, secrets: Sequence[str],
           cap: int = MAX_LOG_BYTES) -> tuple[bytes, bool]:
    """The last bytes of a file (``data``; the file holds ``size`` bytes) as they are saved:
    secrets blanked, then at most ``cap`` bytes from a line start (``log_end``), under a first
    line saying so when it was cut; and whether it was cut."""
    return _marked(blanked_end(data, size, secrets, cap), cap)


def read_log(path: Path, secrets: Sequence[str],
             cap: int = MAX_LOG_BYTES) -> tuple[bytes, bool] | None:
    """A log file as it is saved (see :func:`capped`); None when it is not a regular file
    that can be read (a job that failed before writing its log has none)."""
    end = read_end(path, secrets, cap)
    return _marked(end, cap) if end is not None else None


def _marked(end: LogEnd, cap: int) -> tuple[bytes, bool]:
    if not end.cut:
        return end.data, False
    marker = (f"[expocloud: this log was cut: it had {end.size} bytes, over the {cap}-byte "
              "cap; only its end is kept, from a line start]\n")
    return marker.encode() + end.data, True


def save_logs(job_key: str, worker_id: str, output: Path, cwd: str | None,
              paths: Sequence[str], secrets: Sequence[str],
              write: Callable[[str, bytes], bool],
              cap: int = MAX_LOG_BYTES) -> tuple[SavedLog, ...]:
    """Save a job's output (``output``) and its log files (``paths``, relative to ``cwd``)
    through ``write(key, data)``, which says whether the bucket took it; returns what was
    saved. A log that is missing or that the bucket refused is left out, not retried: the
    result must not wait for it."""
    files: list[tuple[str | None, Path]] = [(None, output)]
    files += [(path, Path(cwd or ".", path)) for path in paths[:MAX_LOG_FILES]]
    saved: list[SavedLog] = []
    for path, file in files:
        read = read_log(file, secrets, cap)
        if read is None:
            continue
        data, cut = read
        key = saved_log_key(job_key, worker_id, len(saved))
        if write(key, data):
            saved.append(SavedLog(path, key, len(data), hashlib.sha256(data).hexdigest(), cut))
    return tuple(saved)
