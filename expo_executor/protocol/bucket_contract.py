"""The bucket contract every backend keeps: keys, generations, first-writer-wins.

Objects carry a generation so that readers can skip unchanged objects and writers can ask for
first-writer-wins (``if_generation_match=0``: create only if absent), as GCS preconditions do.
The backends (``local_bucket``, ``gcs_bucket``) import this module and nothing else of the
protocol's bucket, so ``bucket.open_bucket`` can import them both without a cycle.

Every read is bounded (issue 30): whoever can write to the bucket can put a multi-GB object at
any key, and the coordinator reads up to 16 at once. A read takes at most ``limit`` bytes
(``MAX_READ_BYTES``, a message's own limit, unless the caller knows better: a saved log's
recorded size) and
raises :class:`ObjectTooLarge` for a bigger object without taking its body into memory. It is a
``MessageError``: the callers already say a malformed message in one line and go on. A reader
polling an object (a worker's inbox, the pulse) passes the generation it judged last as
``if_generation_not_match``: an unchanged object is then compared by its metadata and not
downloaded. A job's files are not read this way: ``download_to`` and ``upload_from`` stream them
between a file and an object in bounded memory.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Protocol

from expo_executor.protocol.messages import MAX_BYTES, MessageError

MAX_READ_BYTES = MAX_BYTES  # what a read takes unless told otherwise: a message's limit


class PreconditionFailed(Exception):
    """Another writer got there first (GCS answers 412 conditionNotMet)."""


class ObjectTooLarge(MessageError):
    """An object bigger than the read's limit: refused before its body was taken. Its
    ``generation`` lets a caller remember it, as it would a malformed message."""

    def __init__(self, key: str, size: int | None, limit: int, generation: int) -> None:
        said = f"{size} bytes" if size is not None else "more bytes"
        super().__init__(f"{key}: {said} exceeds the {limit} byte limit of a read")
        self.key, self.size, self.limit, self.generation = key, size, limit, generation


@dataclass(frozen=True)
class Blob:
    """An object's bytes and the generation they were read at. ``unchanged``: read with
    ``if_generation_not_match`` equal to its generation, so ``data`` is empty, not fetched."""

    data: bytes
    generation: int
    unchanged: bool = False


class Bucket(Protocol):
    """Keys are ``/``-separated relative names, e.g. ``workers/w-1/inbox.json``."""

    url: str  # what open_bucket() reopens it from, in another process

    def read(self, key: str, limit: int | None = MAX_READ_BYTES,
             if_generation_not_match: int | None = None) -> Blob | None:
        """The object and its generation, or None when absent; raises ObjectTooLarge when it
        holds more than ``limit`` bytes (None: no limit), and answers ``unchanged`` without its
        bytes when its generation is ``if_generation_not_match``."""

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        """Store ``data``; ``if_generation_match=0`` creates only if absent. Returns the generation."""

    def download_to(self, key: str, path: str | os.PathLike[str]) -> int | None:
        """Object ``key`` into file ``path`` (its folder exists), streamed in bounded memory,
        whole or not at all; its size, or None when absent. For a job's files, which may be
        larger than the memory of the machine that moves them."""

    def upload_from(self, key: str, path: str | os.PathLike[str],
                    if_generation_match: int | None = None) -> int:
        """File ``path`` into object ``key``, streamed in bounded memory, under the same
        precondition as ``write``; returns the generation."""

    def list(self, prefix: str) -> dict[str, int]:
        """Keys under ``prefix`` with their generations, in one call."""

    def delete(self, key: str) -> None:
        """Remove an object; absent is fine (teardown must be idempotent)."""
