"""A whole-file write that no reader sees half of: a run's JSON files and page (``files``), and
the state directory's frontiers and records (``coordinator.state``)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically: a reader sees the old file or the new one,
    never half. The temporary file's name is unique, so two processes writing one state
    directory never write into each other's temporary file; on failure it is removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
