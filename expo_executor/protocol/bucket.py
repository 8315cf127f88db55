"""The bucket: the only channel between the coordinator and its workers.

One contract (``bucket_contract``: ``Bucket``, ``Blob``, ``PreconditionFailed``, bounded reads
and ``ObjectTooLarge``), two backends
(``local_bucket``: a directory for the local engine; ``gcs_bucket``: a GCS prefix in the cloud),
and ``open_bucket``, which picks the backend from a URL. Callers import all of it from here.
"""

from __future__ import annotations

from pathlib import Path

from expo_executor.protocol.bucket_contract import (MAX_READ_BYTES, Blob, Bucket, ObjectTooLarge,
                                                    PreconditionFailed)
from expo_executor.protocol.local_bucket import LocalBucket

__all__ = ["MAX_READ_BYTES", "Blob", "Bucket", "LocalBucket", "ObjectTooLarge",
           "PreconditionFailed", "open_bucket"]


def open_bucket(url: str) -> Bucket:
    """A bucket from its URL: ``gs://bucket/prefix``, or a plain path (or ``file://``)."""
    if url.startswith("gs://"):
        # google-cloud-storage loads only when used
        from expo_executor.protocol.gcs_bucket import GcsBucket

        return GcsBucket(url)
    if url.startswith("file://"):
        url = url[len("file://"):]
    if "://" in url:
        raise ValueError(f"unsupported bucket URL {url!r}: use gs://bucket/prefix or a directory")
    return LocalBucket(Path(url))
