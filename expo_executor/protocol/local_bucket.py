"""The local backend of the bucket contract: a directory standing in for a GCS prefix."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Callable, Iterator

from expo_executor.protocol.bucket_contract import (MAX_READ_BYTES, Blob, ObjectTooLarge,
                                                    PreconditionFailed)


class LocalBucket:
    """A directory standing in for a GCS prefix, with the same atomicity guarantees.

    Whole-object writes are atomic (temp file + rename); create-only writes use ``link``,
    which fails if the name exists; other preconditions take an advisory lock.
    """

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.url = str(self.root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.ops: Counter[str] = Counter()  # counted like GCS operations, by price class
        self._ops_lock = threading.Lock()  # the coordinator calls it from several threads

    @property
    def requests(self) -> int:
        return sum(self.ops.values())

    def _count(self, price_class: str) -> None:
        with self._ops_lock:
            self.ops[price_class] += 1

    def _path(self, key: str) -> Path:
        if key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"bad bucket key {key!r}")
        return self.root / key

    def read(self, key: str, limit: int | None = MAX_READ_BYTES,
             if_generation_not_match: int | None = None) -> Blob | None:
        """Stat before read: the size and generation of the file opened (a rename cannot
        swap it in between), and only then its bytes."""
        self._count("B")
        path = self._path(key)
        try:
            with open(path, "rb") as handle:
                meta = os.fstat(handle.fileno())
                generation = meta.st_mtime_ns
                if generation == if_generation_not_match:
                    return Blob(b"", generation, unchanged=True)
                if limit is not None and meta.st_size > limit:
                    raise ObjectTooLarge(key, meta.st_size, limit, generation)
                data = handle.read() if limit is None else handle.read(limit + 1)
        except FileNotFoundError:
            return None
        if limit is not None and len(data) > limit:  # grew in place: not by our writes
            raise ObjectTooLarge(key, None, limit, generation)
        return Blob(data, generation)

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        return self._put(key, lambda handle: handle.write(data), if_generation_match)

    def download_to(self, key: str, path: str | os.PathLike[str]) -> int | None:
        """Object ``key`` into file ``path``, copied a chunk at a time (a staged job's input
        may be larger than memory); returns its size, or None when absent. The file appears
        whole or not at all."""
        self._count("B")
        path = Path(path)
        try:
            source = open(self._path(key), "rb")
        except FileNotFoundError:
            return None
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        try:
            with source, os.fdopen(fd, "wb") as handle:
                shutil.copyfileobj(source, handle)
                size = handle.tell()
            os.replace(tmp, path)
            return size
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def upload_from(self, key: str, path: str | os.PathLike[str],
                    if_generation_match: int | None = None) -> int:
        """File ``path`` into object ``key``, copied a chunk at a time."""
        with open(path, "rb") as source:
            return self._put(key, lambda handle: shutil.copyfileobj(source, handle),
                             if_generation_match)

    def _put(self, key: str, fill: Callable[[BinaryIO], object],
             if_generation_match: int | None) -> int:
        """A whole-object write: ``fill`` writes the bytes into a temporary file, which then
        takes the key's place under the precondition."""
        self._count("A")
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                fill(handle)
            # File timestamps tick in jiffies: stamp a fine-grained clock so that two quick
            # writes never share a generation.
            stamp = time.time_ns()
            os.utime(tmp, ns=(stamp, stamp))
            if if_generation_match == 0:
                try:
                    os.link(tmp, path)
                except FileExistsError:
                    raise PreconditionFailed(key) from None
            elif if_generation_match is not None:
                with self._locked():
                    current = path.stat().st_mtime_ns if path.exists() else 0
                    if current != if_generation_match:
                        raise PreconditionFailed(key)
                    os.replace(tmp, path)
            else:
                os.replace(tmp, path)
            return path.stat().st_mtime_ns
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def list(self, prefix: str) -> dict[str, int]:
        # os.scandir and plain strings: the coordinator lists every round, and pathlib made
        # an idle round cost three times as much.
        self._count("A")
        root = str(self.root)
        base = str(self._path(prefix.rstrip("/"))) if prefix else root
        found: dict[str, int] = {}
        stack = [base]
        while stack:
            try:
                entries = os.scandir(stack.pop())
            except (FileNotFoundError, NotADirectoryError):
                continue
            with entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif not entry.name.startswith(".tmp-") and entry.name != ".lock":
                        try:
                            found[entry.path[len(root) + 1:]] = entry.stat().st_mtime_ns
                        except FileNotFoundError:
                            continue
        return found

    def delete(self, key: str) -> None:
        self._count("free")
        try:
            self._path(key).unlink()
        except FileNotFoundError:
            pass

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with open(self.root / ".lock", "a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
