"""In a Snakemake job's own process, a storage file's local copy is its size.

Without a shared file system, Snakemake's remote job (``--mode remote``) keeps every storage
file local while it runs (``Workflow.keep_storage_local_at_runtime``: it waits for inputs
locally, and stores outputs only once all its jobs are done, ``DAG.store_storage_outputs``).
Yet ``_IOFile.size`` asks the storage. In a group job whose second rule reads what the first
made, that file is not in storage yet: a resource such as ``mem_mb=max(2*input.size, 1000)``
evaluates to ``<TBD>`` and the rule runs with it (Snakemake's test_default_resources fails so,
under any remote executor: cluster-generic does the same). The main process, and the local
engine, store each job's outputs as it ends, so there the storage has them.

:func:`install` makes ``size`` read the local copy when the job's process has one: a file one
of its jobs made, or an input it retrieved (then the same bytes). A storage file with no local
copy is asked of the storage, as before. The job's snakemake runs under the command clock
(worker/command_clock.py, worker/zygote.py), which installs this first; any surprise in
Snakemake's internals leaves it uninstalled (Snakemake's own behaviour), never a broken job.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from expo_executor.worker.method_patch import Wrap, not_found, wrap_once

MARK = "_expocloud_local_copy_first"


def local_copy_first(size: Callable[..., Any]) -> Callable[..., Any]:
    """``_IOFile.size`` that reads a storage file's local copy when there is one."""
    @functools.wraps(size)
    async def wrapper(self: Any) -> int:
        if self.is_storage and os.path.exists(self.file):
            return await self.size_local()
        return await size(self)

    return wrapper


def install() -> str | None:
    """Patch Snakemake's ``_IOFile.size`` in this process (once); None when done, else why
    not (nothing changed)."""
    try:
        from snakemake.io import _IOFile
    except Exception as exc:  # noqa: BLE001 - any import-time surprise: leave Snakemake be
        return not_found("file size", exc)
    return wrap_once([Wrap(_IOFile, "size", local_copy_first)], MARK, "file size",
                     expected=hasattr(_IOFile, "size_local"))
