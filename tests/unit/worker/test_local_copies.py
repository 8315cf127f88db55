"""A storage file's size in a Snakemake job's own process: its local copy when the job has one
(a file one of its group's rules made, not stored before the job ends), else the storage's."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake.io import _IOFile

from expo_executor.worker import command_clock, local_copies

from tests.helpers import keep_job_hooks_local, storage_file


class Storage:
    """A storage that has no object yet (what a group job's intermediate file is in storage
    until its job ends), and counts the questions it is asked."""

    print_query = "gs://bucket/wf/test.in"

    def __init__(self) -> None:
        self.asked = 0

    async def managed_size(self) -> int:
        self.asked += 1
        raise FileNotFoundError(self.print_query)


@pytest.fixture
def installed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_IOFile, "size", _IOFile.size)  # restored after the test
    assert local_copies.install() is None


def test_without_it_a_file_the_job_made_is_looked_for_in_storage(tmp_path: Path) -> None:
    """Snakemake's own behaviour, which made a group's second rule see no input size."""
    (tmp_path / "test.in").write_text("12345")
    storage = Storage()
    with pytest.raises(FileNotFoundError):
        asyncio.run(storage_file(tmp_path / "test.in", storage).size())
    assert storage.asked == 1


def test_a_local_copy_is_the_size_and_storage_is_not_asked(tmp_path: Path, installed) -> None:
    (tmp_path / "test.in").write_text("12345")
    storage = Storage()
    assert asyncio.run(storage_file(tmp_path / "test.in", storage).size()) == 5
    assert storage.asked == 0


def test_without_a_local_copy_the_storage_answers_as_before(tmp_path: Path, installed) -> None:
    storage = Storage()
    with pytest.raises(FileNotFoundError):
        asyncio.run(storage_file(tmp_path / "absent", storage).size())
    assert storage.asked == 1


def test_a_plain_file_is_measured_as_before(tmp_path: Path, installed) -> None:
    (tmp_path / "plain").write_text("abc")
    plain = _IOFile(str(tmp_path / "plain"), None)
    plain.rule = SimpleNamespace(workflow=SimpleNamespace(iocache=SimpleNamespace(active=False)))
    assert asyncio.run(plain.size()) == 3


def test_installing_twice_wraps_once(installed) -> None:
    wrapped = _IOFile.size
    assert local_copies.install() is None and _IOFile.size is wrapped


def test_a_changed_snakemake_is_left_as_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_IOFile, "size", _IOFile.size)
    monkeypatch.delattr(_IOFile, "size_local")
    before = _IOFile.size
    why = local_copies.install()
    assert why is not None and "not the expected" in why and _IOFile.size is before


def test_the_job_hook_installs_it_with_or_without_a_stamps_file(
        monkeypatch: pytest.MonkeyPatch) -> None:
    keep_job_hooks_local(monkeypatch)
    command_clock.hook_job(None)
    assert getattr(_IOFile.size, local_copies.MARK, False)
