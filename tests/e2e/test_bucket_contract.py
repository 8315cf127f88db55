"""The bucket contract, held by every backend: the local directory and GCS (through the
precondition-faithful emulator). Atomic objects, distinct generations, compare-and-swap,
create-only writes, keys that cannot escape, and exactly one winner of a create-only race
among 16 processes. (Which backend a URL opens: tests/unit/protocol/test_bucket.py.)"""

from __future__ import annotations

import multiprocessing
from pathlib import Path

import pytest

from expo_executor.protocol.bucket import ObjectTooLarge, PreconditionFailed, open_bucket
from expo_executor.protocol.messages import MessageError

from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401  (session fixture, lazy imports)


@pytest.fixture(params=["local", "gcs"])
def bucket_url(request: pytest.FixtureRequest, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "local":
        return str(tmp_path / "bucket")
    pytest.importorskip("google.cloud.storage")
    pytest.importorskip("gcp_storage_emulator")
    endpoint = request.getfixturevalue("gcs_emulator")
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", endpoint)  # inherited by the race's processes
    return f"gs://{fresh_bucket(endpoint)}/runs/r1"


@pytest.fixture
def bucket(bucket_url: str):  # type: ignore[no-untyped-def]
    return open_bucket(bucket_url)


def test_write_read_list_delete(bucket) -> None:  # type: ignore[no-untyped-def]
    gen1 = bucket.write("a/b.json", b"1")
    gen2 = bucket.write("a/b.json", b"2")
    assert gen2 != gen1, "two quick writes must get distinct generations"
    blob = bucket.read("a/b.json")
    assert blob is not None and blob.data == b"2" and blob.generation == gen2
    assert bucket.list("a/") == {"a/b.json": gen2}
    bucket.delete("a/b.json")
    bucket.delete("a/b.json")  # idempotent
    assert bucket.read("a/b.json") is None and bucket.list("a/") == {}


def test_generation_match_is_compare_and_swap(bucket) -> None:  # type: ignore[no-untyped-def]
    gen = bucket.write("k", b"v1")
    bucket.write("k", b"v2", if_generation_match=gen)
    with pytest.raises(PreconditionFailed):
        bucket.write("k", b"v3", if_generation_match=gen)
    assert bucket.read("k").data == b"v2"


def test_create_only_twice_fails_the_second_time(bucket) -> None:  # type: ignore[no-untyped-def]
    gen = bucket.write("results/job.json", b"first", if_generation_match=0)
    with pytest.raises(PreconditionFailed):
        bucket.write("results/job.json", b"second", if_generation_match=0)
    blob = bucket.read("results/job.json")
    assert blob.data == b"first" and blob.generation == gen


def test_a_read_is_bounded_before_the_body_is_taken(bucket) -> None:  # type: ignore[no-untyped-def]
    generation = bucket.write("workers/w/status.json", b"x" * 100_000)
    with pytest.raises(ObjectTooLarge) as caught:
        bucket.read("workers/w/status.json", limit=1000)
    refused = caught.value
    assert isinstance(refused, MessageError), "callers take it for a malformed message"
    assert (refused.size, refused.generation) == (100_000, generation)
    assert "100000 bytes exceeds the 1000 byte limit" in str(refused)
    assert bucket.read("workers/w/status.json", limit=100_000).data == b"x" * 100_000
    assert bucket.read("workers/w/status.json", limit=None).generation == generation
    assert bucket.read("absent", limit=1) is None


def test_an_unchanged_object_is_not_downloaded_again(bucket) -> None:  # type: ignore[no-untyped-def]
    first = bucket.write("pulse.json", b"one")
    blob = bucket.read("pulse.json", if_generation_not_match=first)
    assert blob is not None and blob.unchanged and blob.data == b"" \
        and blob.generation == first
    second = bucket.write("pulse.json", b"two")
    blob = bucket.read("pulse.json", if_generation_not_match=first)
    assert blob is not None and not blob.unchanged and blob.data == b"two" \
        and blob.generation == second
    assert bucket.read("absent", if_generation_not_match=first) is None


def test_keys_cannot_escape_the_bucket(bucket) -> None:  # type: ignore[no-untyped-def]
    for key in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ValueError):
            bucket.write(key, b"")


def _race(url: str, index: int, start, results) -> None:  # type: ignore[no-untyped-def]
    bucket = open_bucket(url)
    start.wait()
    try:
        bucket.write("results/job.json", f"writer {index}".encode(), if_generation_match=0)
        results.put(index)
    except PreconditionFailed:
        results.put(-1)
    except Exception as err:  # reported to the parent, which fails the test
        results.put(f"error: {err!r}")


def test_create_only_race_has_exactly_one_winner(bucket_url: str) -> None:
    ctx = multiprocessing.get_context("fork")
    start, results = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_race, args=(bucket_url, i, start, results)) for i in range(16)]
    for proc in procs:
        proc.start()
    start.set()
    outcomes = [results.get(timeout=60) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
    assert all(isinstance(o, int) for o in outcomes), outcomes
    winners = [o for o in outcomes if o >= 0]
    assert len(winners) == 1, outcomes
    assert open_bucket(bucket_url).read("results/job.json").data == f"writer {winners[0]}".encode()


def test_files_stream_to_and_from_objects(  # type: ignore[no-untyped-def]
        bucket, tmp_path: Path) -> None:
    """A job's files (tests/e2e/test_gcs_bucket_emulator.py sends one above GCS's resumable
    threshold): whole, under preconditions, never partly there, keys that cannot escape."""
    tmp_path = tmp_path / "files"  # beside the local backend's directory
    tmp_path.mkdir()
    (tmp_path / "f").write_bytes(b"file\n" * 1000)
    generation = bucket.upload_from("files/f", tmp_path / "f", if_generation_match=0)
    assert bucket.read("files/f", limit=None).data == b"file\n" * 1000
    assert bucket.list("files/") == {"files/f": generation}
    with pytest.raises(PreconditionFailed):
        bucket.upload_from("files/f", tmp_path / "f", if_generation_match=0)
    bucket.write("files/g", b"object")
    assert bucket.download_to("files/g", tmp_path / "g") == len(b"object")
    assert (tmp_path / "g").read_bytes() == b"object"
    assert bucket.download_to("files/none", tmp_path / "none") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "g"]
    for call in (lambda: bucket.download_to("../x", tmp_path / "x"),
                 lambda: bucket.upload_from("../x", tmp_path / "f")):
        with pytest.raises(ValueError):
            call()
