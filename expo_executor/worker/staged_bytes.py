"""In a Snakemake job's own process, the bytes it moved between the VM and the bucket: the size
of each storage input's local copy it retrieved, and of each output it stored.

Why: a VM outside the bucket's region pays Cloud Storage's data transfer for every byte (the
cost report prices them, ``cost/cost_report.py``). The job's snakemake does the moving
(``--mode remote``: ``DAG.retrieve_storage_inputs`` calls ``_IOFile.retrieve_from_storage``,
``DAG.store_storage_outputs`` calls ``_IOFile.store_in_storage``), so it is measured there and
stamped for the worker (``worker/command_clock.py``: ``{"down": n}`` and ``{"up": n}``), which
puts the sum in the job's result. A retrieval Snakemake skipped (a local copy as new as the
storage's) moved nothing and counts nothing: the local copy's size and time are compared before
and after. A directory counts the files under it. The sizes are the local copies': the bytes
of the objects, not of the requests around them. Any surprise in Snakemake's internals leaves
it uninstalled (nothing counted), never a broken job.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from expo_executor.worker.method_patch import Wrap, not_found, wrap_once

MARK = "_expocloud_staged_bytes"

Record = Callable[[str, int], None]  # ("down" or "up", bytes)


def _nowhere(way: str, nbytes: int) -> None:
    """Before :func:`install`: nothing to tell."""


# this process's recorder: set at each install, so a process forked per job (worker/zygote.py)
# tells its own job's stamps file, whoever wrapped Snakemake's methods first
_record: Record = _nowhere


def local_size(path: str) -> int:
    """Bytes of a file, or of every file under a directory; 0 for what is not there."""
    if os.path.isdir(path):
        return sum(os.path.getsize(os.path.join(top, name))
                   for top, _, names in os.walk(path) for name in names
                   if os.path.isfile(os.path.join(top, name)))
    return os.path.getsize(path) if os.path.isfile(path) else 0


def _seen(path: str) -> tuple[int, int] | None:
    try:
        info = os.stat(path)
    except OSError:
        return None
    return info.st_mtime_ns, info.st_size


def counted(method: Callable[..., Any], way: str) -> Callable[..., Any]:
    """``_IOFile.retrieve_from_storage`` (``way`` "down") or ``store_in_storage`` ("up")
    that records the local copy's size once it moved (to this process's recorder)."""
    @functools.wraps(method)
    async def wrapper(self: Any) -> Any:
        path = str(self.file)
        before = _seen(path) if way == "down" else None
        result = await method(self)
        if getattr(self, "is_storage", False) and (way == "up" or _seen(path) != before):
            _record(way, local_size(path))
        return result

    return wrapper


def install(record: Record) -> str | None:
    """Count in this process, told to ``record`` (Snakemake's methods wrapped once); None
    when done, else why not (nothing changed)."""
    global _record
    try:
        from snakemake.io import _IOFile
    except Exception as exc:  # noqa: BLE001 - any import-time surprise: leave Snakemake be
        return not_found("storage transfers", exc)
    why = wrap_once([Wrap(_IOFile, "retrieve_from_storage", lambda m: counted(m, "down")),
                     Wrap(_IOFile, "store_in_storage", lambda m: counted(m, "up"))],
                    MARK, "storage transfers")
    if why is None:
        _record = record
    return why
