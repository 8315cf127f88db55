"""What the two kinds of staged job (worker/staged_job.py, worker/direct_staged.py) check alike:
a path from the assignment stays inside the job's directory, a file matches its sha256 (read a
chunk at a time: it may be larger than memory), and an exception reaches a verdict as one
bounded line."""

from __future__ import annotations

import hashlib
import os
from pathlib import PurePosixPath


def safe_relative(path: str) -> str:
    """A relative path that stays inside its base; raises ValueError otherwise."""
    pure = PurePosixPath(path)
    if not path or pure.is_absolute() or ".." in pure.parts:
        raise ValueError(f"unsafe staged path {path!r}")
    return str(pure)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """A file's sha256 (hex), read a chunk at a time."""
    with open(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def one_line(exc: BaseException, limit: int = 400) -> str:
    """An exception as one bounded line for a verdict (the google client's can be long)."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text if len(text) <= limit else text[:limit - 3] + "..."
