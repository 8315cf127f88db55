"""A failed or timed-out job's logs, saved to the bucket before its VM (and its disk) goes.

What is saved: the job's captured stdout and stderr, and the log files it names (a Snakemake
rule's ``log:``), each under ``keys.saved_log_key``. A result's 20-line tail rarely says why a
job failed; its whole log does, and on GCE the VM that held it is deleted soon after.

Each file is cut to its last :data:`MAX_LOG_BYTES` (from a line start, under a first line
saying so: the end of a failed job's log is where the error is) and has the job's secrets
blanked with :func:`messages.redacted`, the blanking its report gets. Blanking comes after the
cut and the cut starts at a line, so a secret the cut runs through is never left half-shown.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable, Sequence
from pathlib import Path

from expo_executor.protocol import messages
from expo_executor.protocol.keys import saved_log_key
from expo_executor.protocol.records import SavedLog

MAX_LOG_BYTES = 10 * 1024 * 1024  # per file, in the bucket and in the run directory
MAX_LOG_FILES = 16  # a job's own log files saved at most (besides its output)
_ENCODING = ("utf-8", "surrogateescape")  # any bytes round-trip; text is matched as text


def capped(data: bytes, size: int, secrets: Sequence[str],
           cap: int = MAX_LOG_BYTES) -> tuple[bytes, bool]:
    """The last bytes of a file (``data``; the file holds ``size`` bytes) as they are saved:
    secrets blanked, at most ``cap`` bytes (a first line saying so when it was cut); and
    whether it was cut."""
    text = data.decode(*_ENCODING)
    cut = size > len(data)
    if cut:
        text = _from_line_start(text, secrets)
    text = messages.redacted(text, list(secrets)) or ""
    body = text.encode(*_ENCODING)
    while len(body) > cap:  # blanking short secrets made it longer: whole lines go
        cut = True
        text = text.partition("\n")[2]
        body = text.encode(*_ENCODING)
    if not cut:
        return body, False
    marker = (f"[expocloud: this log was cut: it had {size} bytes, over the {cap}-byte cap; "
              "only its end is kept, from a line start]\n")
    return marker.encode() + body, True


def _from_line_start(text: str, secrets: Sequence[str]) -> str:
    """``text`` from its first whole line on; a secret of several lines that the cut ran
    through shows there as the rest of the secret after one of its newlines: blanked."""
    text = text.partition("\n")[2]
    for secret in sorted(secrets, key=len, reverse=True):
        for i, char in enumerate(secret):
            rest = secret[i + 1:]
            if char == "\n" and rest and text.startswith(rest):
                return messages.REDACTED + text[len(rest):]
    return text


def read_log(path: Path, secrets: Sequence[str],
             cap: int = MAX_LOG_BYTES) -> tuple[bytes, bool] | None:
    """A log file as it is saved (see :func:`capped`); None when it is not a regular file
    that can be read (a job that failed before writing its log has none)."""
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - cap))
            data = handle.read(cap)
    except OSError:
        return None
    return capped(data, size, secrets, cap)


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
