"""open_bucket picks the backend from the URL, and refuses schemes it has none for. (The bucket
contract, held by every backend, is tested in tests/e2e/test_bucket_contract.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from expo_executor.protocol.bucket import LocalBucket, open_bucket


def test_open_bucket_rejects_unknown_schemes(tmp_path: Path) -> None:
    assert isinstance(open_bucket(f"file://{tmp_path}"), LocalBucket)
    with pytest.raises(ValueError):
        open_bucket("s3://elsewhere")
