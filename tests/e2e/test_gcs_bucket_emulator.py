"""GcsBucket against the GCS emulator made faithful to preconditions (the shared contract, with
the race, is in test_bucket_contract.py): what the faithful wrapper fixes, keys under the
prefix, listing pages, request counts, a create-only write whose answer was lost, and our own
retries of connection errors. Everything stays on loopback."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import urllib.request

import pytest

pytest.importorskip("google.cloud.storage")
pytest.importorskip("gcp_storage_emulator")

from expo_executor.emulator.faulty_proxy import CORRUPT, FaultyProxy
from expo_executor.gcp.errors import is_transient_storage
from expo_executor.protocol.bucket import PreconditionFailed
from expo_executor.protocol.bucket_purge import Purged, purge
from expo_executor.protocol.gcs_bucket import GcsBucket

from tests.gcs_emulator import EmulatorProcess, fresh_bucket, gcs_emulator  # noqa: F401


@pytest.fixture
def bucket(gcs_emulator: str) -> GcsBucket:  # noqa: F811
    return GcsBucket(f"gs://{fresh_bucket(gcs_emulator)}/runs/r1", endpoint=gcs_emulator)


def test_bare_emulator_ignores_preconditions() -> None:
    """Why the wrapper exists: without it, create-only writes silently overwrite."""
    emulator = EmulatorProcess(bare=True)
    try:
        bare = GcsBucket(f"gs://{fresh_bucket(emulator.endpoint)}/p", endpoint=emulator.endpoint)
        bare.write("k", b"first", if_generation_match=0)
        bare.write("k", b"second", if_generation_match=0)  # no 412 from the stock emulator
        assert bare.read("k").data == b"second"
    finally:
        emulator.stop()


# -- retries through GcsBucket ----------------------------------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_connection_errors_are_retried_then_raised() -> None:
    """Our loop, not the client's: exactly ``attempts`` tries, ``attempts - 1`` sleeps."""
    sleeps: list[float] = []
    port = _closed_port()
    bucket = GcsBucket("gs://b/p", endpoint=f"http://127.0.0.1:{port}", attempts=4,
                       sleep=sleeps.append, rand=lambda: 1.0)
    for call in (lambda: bucket.read("k"), lambda: bucket.write("k", b"x"),
                 lambda: bucket.list(""), lambda: bucket.delete("k")):
        sleeps.clear()
        with pytest.raises(Exception) as info:
            call()
        assert is_transient_storage(info.value)
        assert sleeps == [0.1, 0.2, 0.4]


# -- GCS specifics -----------------------------------------------------------------------------


def test_keys_are_relative_to_the_prefix(gcs_emulator: str) -> None:  # noqa: F811
    name = fresh_bucket(gcs_emulator)
    one = GcsBucket(f"gs://{name}/runs/r1", endpoint=gcs_emulator)
    two = GcsBucket(f"gs://{name}/runs/r2/", endpoint=gcs_emulator)
    root = GcsBucket(f"gs://{name}", endpoint=gcs_emulator)
    gen = one.write("x/y", b"one")
    two.write("x/y", b"two")
    assert one.list("") == {"x/y": gen}
    assert one.read("x/y").data == b"one" and two.read("x/y").data == b"two"
    assert set(root.list("runs/")) == {"runs/r1/x/y", "runs/r2/x/y"}
    for key in ("../x", "/etc/passwd", "a/../../x"):
        with pytest.raises(ValueError):
            one.write(key, b"")


def test_a_run_purge_deletes_its_prefix_and_no_other_runs(gcs_emulator: str) -> None:  # noqa: F811
    """A run's prefix goes whole at its end; a run whose label extends it (r1 and r10), a
    sibling and the objects above it stay; the bucket's root is never purged."""
    name = fresh_bucket(gcs_emulator)
    runs = {label: GcsBucket(f"gs://{name}/runs/{label}", endpoint=gcs_emulator)
            for label in ("r1", "r10", "r2")}
    for bucket in runs.values():
        for key in ("pulse.json", "workers/w-1/status.json", "logs/j/w-1/0"):
            bucket.write(key, b"x")
    root = GcsBucket(f"gs://{name}", endpoint=gcs_emulator)
    root.write("runs/r1.json", b"beside the prefix")
    assert purge(runs["r1"]) == Purged(3, 0)
    assert runs["r1"].list("") == {}
    assert len(runs["r10"].list("")) == 3 and len(runs["r2"].list("")) == 3
    assert "runs/r1.json" in root.list("")
    with pytest.raises(ValueError, match="whole bucket"):
        purge(root)
    assert len(root.list("")) == 7


def test_412_has_gcs_error_body(gcs_emulator: str) -> None:  # noqa: F811
    import json
    import urllib.error
    import urllib.request

    name = fresh_bucket(gcs_emulator)
    url = f"{gcs_emulator}/upload/storage/v1/b/{name}/o?uploadType=media&name=k&ifGenerationMatch=0"
    for expected in (200, 412):
        request = urllib.request.Request(url, data=b"x", method="POST")
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status, body = answer.status, None
        except urllib.error.HTTPError as err:
            status, body = err.code, json.loads(err.read())
        assert status == expected
    assert body["error"]["code"] == 412
    assert body["error"]["errors"][0]["reason"] == "conditionNotMet"


def test_list_follows_pages(bucket: GcsBucket, gcs_emulator: str) -> None:  # noqa: F811
    gens = {f"many/{i:03d}": bucket.write(f"many/{i:03d}", b"x") for i in range(25)}
    bucket.write("other", b"y")
    paged = GcsBucket(bucket.url, endpoint=gcs_emulator, page_size=10)
    assert paged.list("many/") == gens
    assert paged.requests == 3, "25 objects in pages of 10: three list requests"
    assert bucket.list("many/") == gens


def test_a_listing_asks_only_for_names_and_generations(
        bucket: GcsBucket, gcs_emulator: str) -> None:  # noqa: F811
    """The coordinator lists every round: each listed object carries its name and generation
    only (GCS's partial response), not its whole metadata; pages still follow."""
    gens = {f"lean/{i}": bucket.write(f"lean/{i}", b"x") for i in range(3)}
    targets: list[str] = []
    with FaultyProxy(gcs_emulator, rate=0.0) as proxy:
        proxy.refuse(lambda request: targets.append(request.target) and False)
        lean = GcsBucket(bucket.url, endpoint=proxy.endpoint, page_size=2)
        assert lean.list("lean/") == gens
    listings = [t for t in targets if "/o?" in t and "alt=media" not in t]
    assert len(listings) == 2 and all("fields=items(name,generation),nextPageToken" in t
                                      for t in listings), listings
    # the emulator answers it as GCS does: only the fields asked for
    url = (f"{gcs_emulator}/storage/v1/b/{bucket.bucket_name}/o?prefix={bucket.prefix}lean/"
           f"&fields=items(name,generation),nextPageToken")
    with urllib.request.urlopen(url) as answer:
        items = json.load(answer)["items"]
    assert len(items) == 3 and all(set(item) == {"name", "generation"} for item in items)


def test_requests_are_counted(bucket: GcsBucket) -> None:
    bucket.write("c", b"1")
    bucket.read("c")
    bucket.list("")
    bucket.delete("c")
    assert bucket.requests == 4


def test_lost_response_of_create_only_write_counts_as_success(
    bucket: GcsBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first attempt lands but its answer is lost; the retry meets 412, reads back, wins."""
    import requests

    real_upload = bucket._upload
    calls = []

    def flaky(name: str, data: bytes, if_generation_match):  # type: ignore[no-untyped-def]
        calls.append(name)
        generation = real_upload(name, data, if_generation_match)
        if len(calls) == 1:
            raise requests.exceptions.ConnectionError("response lost")
        return generation

    monkeypatch.setattr(bucket, "_upload", flaky)
    bucket._retry["sleep"] = lambda _s: None
    gen = bucket.write("lease", b"mine", if_generation_match=0)
    assert len(calls) == 2 and bucket.read("lease").generation == gen
    # Somebody else's object is still a lost race, even after a transient failure.
    calls.clear()
    monkeypatch.setattr(bucket, "_upload", flaky)
    with pytest.raises(PreconditionFailed):
        bucket.write("lease", b"theirs", if_generation_match=0)


def test_open_bucket_reaches_gcs_through_the_emulator_variable(
        gcs_emulator: str, monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    from expo_executor.protocol.bucket import open_bucket

    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    bucket = open_bucket(f"gs://{fresh_bucket(gcs_emulator)}/runs/r9")
    assert isinstance(bucket, GcsBucket)
    generation = bucket.write("workers/w-1/status.json", b"{}")
    assert bucket.list("workers/") == {"workers/w-1/status.json": generation}


# -- files, streamed ---------------------------------------------------------------------------


def _large_file(path, extra: int = 12_345):  # type: ignore[no-untyped-def]
    """A file above the resumable threshold: two upload chunks (UPLOAD_CHUNK, then ``extra``)."""
    from expo_executor.protocol.gcs_bucket import MULTIPART_MAX, UPLOAD_CHUNK

    assert UPLOAD_CHUNK + extra > MULTIPART_MAX
    data = os.urandom(UPLOAD_CHUNK + extra)
    path.write_bytes(data)
    return data


def test_a_large_file_goes_up_in_a_resumable_session_and_comes_back_whole(
        bucket: GcsBucket, tmp_path) -> None:  # type: ignore[no-untyped-def]
    """Above the client's multipart threshold a file goes up as a resumable session, a chunk
    per request (the emulator answers 308 Resume Incomplete to the first), and comes back
    through one streamed GET; both counted for the cost records."""
    data = _large_file(tmp_path / "big")
    generation = bucket.upload_from("in/big", tmp_path / "big")
    assert dict(bucket.ops) == {"A": 3}  # the session's start and two chunks
    stored = bucket.read("in/big", limit=None)
    assert stored is not None and stored.data == data and stored.generation == generation
    assert bucket.download_to("in/big", tmp_path / "back") == len(data)
    assert (tmp_path / "back").read_bytes() == data
    (tmp_path / "small").write_bytes(b"small")
    bucket.upload_from("in/small", tmp_path / "small")
    assert bucket.read("in/small").data == b"small"


def test_a_missing_object_downloads_to_no_file(  # type: ignore[no-untyped-def]
        bucket: GcsBucket, tmp_path) -> None:
    assert bucket.download_to("in/none", tmp_path / "none") is None
    assert list(tmp_path.iterdir()) == []


def test_a_missing_object_is_a_404_not_an_error_in_the_emulator_s_terminal() -> None:
    """The stock emulator logs two ERROR lines for every read of a missing object; a new
    worker reads its missing key ten times a second, and those lines buried real errors."""
    emulator = EmulatorProcess(stderr=subprocess.PIPE)
    try:
        bucket = GcsBucket(f"gs://{fresh_bucket(emulator.endpoint)}/p",
                           endpoint=emulator.endpoint)
        assert bucket.read("workers/w-1/key.json") is None
        bucket.write("k", b"x")
        assert bucket.read("k").data == b"x"
    finally:
        emulator.stop()
    assert emulator.proc.stderr is not None
    said = emulator.proc.stderr.read()
    assert "Resource not found" not in said and "key.json" not in said, said


def test_file_transfers_retry_transient_faults_from_the_start(
        gcs_emulator: str, tmp_path) -> None:  # type: ignore[no-untyped-def]  # noqa: F811
    """A 503 on a chunk in the middle of a resumable upload, a lost answer to the session's
    start, and a download whose body was corrupted on the way (the CRC32C check catches it
    after part of it reached the disk): each retried with our backoff, the file whole."""
    data = _large_file(tmp_path / "big")
    chunks = []

    def second_chunk(request) -> bool:  # type: ignore[no-untyped-def]
        if request.method == "PUT" and "upload_id=" in request.target:
            chunks.append(request.target)
            return len(chunks) == 2
        return False

    with FaultyProxy(gcs_emulator, rate=0.0) as proxy:
        sleeps: list[float] = []
        bucket = GcsBucket(f"gs://{fresh_bucket(gcs_emulator)}/p", endpoint=proxy.endpoint,
                           sleep=sleeps.append, rand=lambda: 1.0)
        proxy.refuse(second_chunk, status=503)
        bucket.upload_from("big", tmp_path / "big")
        assert proxy.refused[503] == 1 and len(sleeps) == 1
        proxy.inject_next("drop-after")
        bucket.upload_from("big", tmp_path / "big")
        assert proxy.injected["drop-after"] == 1 and len(sleeps) == 2
        proxy.inject_next(CORRUPT)
        assert bucket.download_to("big", tmp_path / "back") == len(data)
        assert proxy.injected[CORRUPT] == 1 and len(sleeps) == 3
    assert (tmp_path / "back").read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back", "big"]  # no partial files
