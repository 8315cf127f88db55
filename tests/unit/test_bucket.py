"""The bucket contract, held by every backend: the local directory and GCS (through the
precondition-faithful emulator). Atomic objects, distinct generations, compare-and-swap,
create-only writes, keys that cannot escape, and exactly one winner of a create-only race."""

from __future__ import annotations

from pathlib import Path

import pytest

from expo_executor.protocol.bucket import LocalBucket, open_bucket

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


def test_open_bucket_rejects_unknown_schemes(tmp_path: Path) -> None:
    assert isinstance(open_bucket(f"file://{tmp_path}"), LocalBucket)
    with pytest.raises(ValueError):
        open_bucket("s3://elsewhere")
