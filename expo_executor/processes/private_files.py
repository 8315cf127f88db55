"""Files only this user can read: a staged job's opened spec (its command and environment with
their secrets in), a job's log before it is blanked, a worker's key on its way.

Each is created with its final mode (files 0600, directories 0700), never chmod-ed after: a
file made with the umask's mode and narrowed later is open to another user in between, and a
descriptor opened then stays readable. A directory that already exists keeps its mode: it is
this worker's own, made by an earlier start (with this mode) or by whoever laid out its disk.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

FILE_MODE = 0o600
DIR_MODE = 0o700


def private_dir(path: Path) -> Path:
    """``path`` and any missing parent, each made 0700 (an existing one is left as it is); a
    file in the way raises as ``mkdir -p`` would: FileExistsError for ``path`` itself,
    NotADirectoryError for a parent."""
    missing = []
    for part in (path, *path.parents):
        if part.is_dir():
            break
        missing.append(part)
    for part in reversed(missing):
        try:
            part.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if part.is_dir():
                continue
            if part != path:
                raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR),
                                         str(part)) from None
            raise
    return path


def private_output(path: Path) -> int:
    """A descriptor writing ``path`` from its start, the file created 0600 when it is new."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, FILE_MODE)


def write_private(path: Path, data: bytes) -> None:
    """``path`` holding ``data``, created 0600 when it is new (see :func:`private_output`)."""
    with os.fdopen(private_output(path), "wb") as handle:
        handle.write(data)
