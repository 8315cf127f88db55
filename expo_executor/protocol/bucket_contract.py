"""The bucket contract every backend keeps: keys, generations, first-writer-wins.

Objects carry a generation so that readers can skip unchanged objects and writers can ask for
first-writer-wins (``if_generation_match=0``: create only if absent), as GCS preconditions do.
The backends (``local_bucket``, ``gcs_bucket``) import this module and nothing else of the
protocol's bucket, so ``bucket.open_bucket`` can import them both without a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class PreconditionFailed(Exception):
    """Another writer got there first (GCS answers 412 conditionNotMet)."""


@dataclass(frozen=True)
class Blob:
    """An object's bytes and the generation they were read at."""

    data: bytes
    generation: int


class Bucket(Protocol):
    """Keys are ``/``-separated relative names, e.g. ``workers/w-1/inbox.json``."""

    url: str  # what open_bucket() reopens it from, in another process

    def read(self, key: str) -> Blob | None:
        """The object and its generation, or None when absent."""

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        """Store ``data``; ``if_generation_match=0`` creates only if absent. Returns the generation."""

    def list(self, prefix: str) -> dict[str, int]:
        """Keys under ``prefix`` with their generations, in one call."""

    def delete(self, key: str) -> None:
        """Remove an object; absent is fine (teardown must be idempotent)."""
