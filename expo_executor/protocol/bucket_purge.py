"""Deleting a whole run's objects: what a run does to its coordination prefix when it ends,
and what ``expocloud cleanup`` does to a dead run's.

Every key of a run lives under its own prefix (``gs://BUCKET/PREFIX/<run label>/``, a bucket
URL whose prefix ends in ``/``, gcs_bucket.parse_gs_url), so listing the bucket's ``""`` lists
this run's objects and no other's: ``.../run-1/`` is not a prefix of ``.../run-10/...``. A
bucket opened at the root of a GCS bucket has no such boundary, and is refused.

Each delete is the backend's, retried with backoff there (gcp/retry.py); one that still fails
is counted and reported, never raised: a left-over object costs a few cents a month, a run that
fails at its very end costs its user the whole run's report.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from expo_executor.protocol.bucket_contract import Bucket

PURGE_THREADS = 16  # deletes in flight at once (each is one HTTP round trip on GCS)


@dataclass(frozen=True)
class Purged:
    """What a purge did: objects deleted, objects left (their deletes failed), and the first
    error seen ("" if none)."""

    deleted: int
    left: int
    error: str = ""


def purge(bucket: Bucket) -> Purged:
    """Delete every object under ``bucket``'s prefix. Raises ValueError for a bucket opened at
    a GCS bucket's root (its objects are not one run's); a listing that fails raises as the
    backend does."""
    if getattr(bucket, "prefix", None) == "":
        raise ValueError(f"{bucket.url} is a whole bucket, not one run's prefix: not deleted")
    keys = sorted(bucket.list(""))
    if not keys:
        return Purged(0, 0)
    with ThreadPoolExecutor(min(PURGE_THREADS, len(keys)),
                            thread_name_prefix="expocloud-purge") as pool:
        errors = list(pool.map(lambda key: _delete(bucket, key), keys))
    failed = [error for error in errors if error]
    return Purged(len(keys) - len(failed), len(failed), failed[0] if failed else "")


def _delete(bucket: Bucket, key: str) -> str:
    try:
        bucket.delete(key)
    except Exception as exc:  # noqa: BLE001 - counted and reported by purge()
        return f"{key}: {type(exc).__name__}: {exc}"
    return ""
