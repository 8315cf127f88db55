"""The local bucket keeps GCS's guarantees: atomic objects, generations, first writer wins."""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from expo_executor.bucket import LocalBucket, PreconditionFailed, open_bucket


def test_write_read_list_delete(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path)
    gen1 = bucket.write("a/b.json", b"1")
    gen2 = bucket.write("a/b.json", b"2")
    assert gen2 != gen1, "two quick writes must get distinct generations"
    blob = bucket.read("a/b.json")
    assert blob is not None and blob.data == b"2" and blob.generation == gen2
    assert bucket.list("a/") == {"a/b.json": gen2}
    bucket.delete("a/b.json")
    bucket.delete("a/b.json")  # idempotent
    assert bucket.read("a/b.json") is None and bucket.list("a/") == {}


def test_generation_match_is_compare_and_swap(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path)
    gen = bucket.write("k", b"v1")
    bucket.write("k", b"v2", if_generation_match=gen)
    with pytest.raises(PreconditionFailed):
        bucket.write("k", b"v3", if_generation_match=gen)
    assert bucket.read("k").data == b"v2"


def test_keys_cannot_escape_the_bucket(tmp_path: Path) -> None:
    bucket = LocalBucket(tmp_path / "b")
    for key in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ValueError):
            bucket.write(key, b"")


def test_open_bucket_rejects_unknown_schemes(tmp_path: Path) -> None:
    assert isinstance(open_bucket(f"file://{tmp_path}"), LocalBucket)
    with pytest.raises(ValueError):
        open_bucket("s3://elsewhere")


def _race(root: str, index: int, start, results) -> None:  # type: ignore[no-untyped-def]
    bucket = LocalBucket(Path(root))
    start.wait()
    try:
        bucket.write("results/job.json", f"writer {index}".encode(), if_generation_match=0)
        results.put(index)
    except PreconditionFailed:
        results.put(-1)


def test_create_only_race_has_exactly_one_winner(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), i, start, results)) for i in range(16)]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(timeout=30)
    outcomes = [results.get(timeout=5) for _ in procs]
    winners = [o for o in outcomes if o >= 0]
    assert len(winners) == 1
    assert LocalBucket(tmp_path).read("results/job.json").data == f"writer {winners[0]}".encode()
