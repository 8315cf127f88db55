"""The faithful GCS emulator as a pytest fixture (the emulator itself is in the package)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket

__all__ = ["EmulatorProcess", "fresh_bucket", "gcs_emulator"]


@pytest.fixture(scope="session")
def gcs_emulator() -> Iterator[str]:
    """The faithful emulator's endpoint, for the whole session."""
    emulator = EmulatorProcess()
    try:
        yield emulator.endpoint
    finally:
        emulator.stop()
