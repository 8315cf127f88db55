"""A checkpoint's storage outputs, fetched to their local copies when an input function asks
for them.

An input function that globs or lists a checkpoint's output (``glob_wildcards(os.path.join(
checkpoints.c.get(**wildcards).output[0], "{i}.txt"))``, Snakemake's documented way to
aggregate over a checkpoint's directory) reads the storage file's local copy
(``.snakemake/storage/gcs/BUCKET/...``). Under plain Snakemake the checkpoint ran in the
submitting process, which left that copy. Under a remote executor without a shared file system
it ran elsewhere: there is no copy in the main process (whose DAG update then finds no files and
submits the aggregating job with none of its inputs) nor in the process of each job that
evaluates the function again (its own ``--mode remote`` snakemake). Snakemake fetches the copy
only for ``.open()`` (it raises ``InputOpenException``, which its job factory catches to
retrieve the file and build the job again).

:func:`install` makes ``Checkpoint.get`` do the same for every output of a finished checkpoint
that is a storage file, in storage, with no local copy: it raises ``InputOpenException`` for the
first such output, and Snakemake's job factory retrieves it (with its own checks and logs, the
bytes counted by worker/staged_bytes.py) and asks again. It is installed in the main process of
a run with ``--executor expocloud`` (the plugin's settings) and in every job's own process
(worker/command_clock.py). A file already local, one that is not a storage file, one whose
retrieval the user turned off, and one missing from storage too (plain Snakemake's glob would
find nothing there either) are left as they are. Any surprise in Snakemake's internals leaves it
uninstalled (Snakemake's own behaviour), never a broken run.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Callable

from expo_executor.worker.method_patch import Wrap, not_found, wrap_once

MARK = "_expocloud_checkpoint_copies"


def missing_copy(output: Any) -> Any | None:
    """The first of a checkpoint job's outputs that is in storage with no local copy here."""
    for f in output:
        if (getattr(f, "is_storage", False) and not f.should_not_be_retrieved_from_storage
                and not os.path.exists(f.file) and f.storage_object.exists()):
            return f
    return None


def fetching(get: Callable[..., Any], raise_open: Callable[[Any], BaseException]
             ) -> Callable[..., Any]:
    """``Checkpoint.get`` that asks for a finished checkpoint's missing local copies first."""
    @functools.wraps(get)
    def wrapper(self: Any, **wildcards: Any) -> Any:
        job = get(self, **wildcards)  # raises while the checkpoint has not run: as before
        missing = missing_copy(job.output)
        if missing is not None:
            raise raise_open(missing)
        return job

    return wrapper


def install() -> str | None:
    """Patch Snakemake's ``Checkpoint.get`` in this process (once); None when done, else why
    not (nothing changed)."""
    try:
        from snakemake.checkpoints import Checkpoint
        from snakemake.exceptions import InputOpenException
        from snakemake.io import _IOFile
    except Exception as exc:  # noqa: BLE001 - any import-time surprise: leave Snakemake be
        return not_found("checkpoints", exc)
    return wrap_once([Wrap(Checkpoint, "get", lambda get: fetching(get, InputOpenException))],
                     MARK, "checkpoints",
                     expected=hasattr(_IOFile, "should_not_be_retrieved_from_storage"))
