"""GcsBucket's own parsing of ``gs://`` URLs (the bucket against the GCS emulator is in
tests/e2e/test_gcs_bucket_emulator.py; which of its errors are retried, in
tests/unit/gcp/test_errors.py)."""

from __future__ import annotations

import pytest

from expo_executor.protocol.gcs_bucket import parse_gs_url


def test_parse_gs_url() -> None:
    assert parse_gs_url("gs://b") == ("b", "")
    assert parse_gs_url("gs://b/") == ("b", "")
    assert parse_gs_url("gs://b/x/y/") == ("b", "x/y/")
    for bad in ("s3://b/x", "gs:///x"):
        with pytest.raises(ValueError):
            parse_gs_url(bad)
