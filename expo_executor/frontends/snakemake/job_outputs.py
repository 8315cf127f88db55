"""A job's outputs as the main process checks and writes them itself, beside Snakemake's own
handling: whether an output exists now (a result harvested from an earlier run is taken only
when its outputs are there), and the placeholder outputs of a job skipped or timed out under
``--expocloud-on-skip placeholder``, uploaded when storage is the default (no shared file
system: the next job reads them from there)."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Iterable
from pathlib import Path

PLACEHOLDER_IN_DIRECTORY = ".expocloud-placeholder"


def write_placeholders(outputs: Iterable, text: str) -> dict[str, bytes]:
    """Write ``text`` as every output (a directory output gets a file of it inside), upload the
    storage ones; what was written, path -> bytes (the state records placeholders)."""
    written: dict[str, bytes] = {}
    for output in outputs:
        path = Path(str(output))
        if getattr(output, "is_directory", False):
            path.mkdir(parents=True, exist_ok=True)
            path = path / PLACEHOLDER_IN_DIRECTORY
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written[str(path)] = text.encode()
        if getattr(output, "is_storage", False):
            run_async(output.store_in_storage())  # no shared file system: upload it
    return written


def exists(output) -> bool:
    """Whether a job's output exists now: the storage object (its query, not the cached
    answer of the DAG's build), or the local file or directory."""
    if getattr(output, "is_storage", False):
        return bool(run_async(output.storage_object.managed_exists()))
    return os.path.exists(str(output))


def run_async(coroutine) -> object:
    """Run a coroutine to completion from inside Snakemake's status loop (which already runs
    an event loop in this thread) by giving it a thread and a loop of its own; its value."""
    failure: list[BaseException] = []
    value: list[object] = []

    def run() -> None:
        try:
            value.append(asyncio.run(coroutine))
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return value[0] if value else None
