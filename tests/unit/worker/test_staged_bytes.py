"""The bytes a Snakemake job moves to and from the bucket, measured in its own process
(worker/staged_bytes.py) and stamped for its worker (worker/command_clock.py): what the cost
report prices as egress when its VM is in another region than the bucket."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from snakemake.io import _IOFile

from expo_executor.worker import command_clock, staged_bytes
from expo_executor.worker.command_clock import read_stamps

from tests.helpers import keep_job_hooks_local, storage_file


class Storage:
    """A storage object whose retrieval writes ``data`` to the local copy (Snakemake's
    storage plugins do the same: ``managed_retrieve``) and whose store counts calls."""

    print_query = "gs://bucket/wf/x"

    def __init__(self, path: Path, data: bytes, retrieve: bool = True) -> None:
        self.path, self.data, self.retrieve, self.stored = path, data, retrieve, 0

    async def managed_retrieve(self) -> None:
        self.path.write_bytes(self.data)

    async def managed_store(self) -> None:
        self.stored += 1


@pytest.fixture
def stamps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The job hook installed with a stamps file (Snakemake's methods restored after)."""
    keep_job_hooks_local(monkeypatch)
    monkeypatch.setattr(command_clock, "install", lambda path: None)  # the clock: not tested here
    monkeypatch.setattr(staged_bytes, "_record", staged_bytes._record)
    path = tmp_path / "j.stamps"
    command_clock.hook_job(str(path))
    return path


def test_inputs_retrieved_and_outputs_stored_are_stamped_and_summed(
        tmp_path: Path, stamps: Path) -> None:
    asyncio.run(storage_file(tmp_path / "in", Storage(tmp_path / "in", b"x" * 300))
                .retrieve_from_storage())
    out = tmp_path / "out"
    out.write_bytes(b"y" * 40)
    storage = Storage(out, b"")
    asyncio.run(storage_file(out, storage).store_in_storage())
    assert storage.stored == 1
    read = read_stamps(stamps)
    assert (read.down, read.up) == (300, 40)
    assert read.hooked and read.command_s(now=0.0) == 0  # the clock's word, unchanged


def test_a_retrieval_snakemake_skips_moves_nothing(tmp_path: Path, stamps: Path) -> None:
    """Storage set not to retrieve (Snakemake's ``retrieve=False``): no transfer, no bytes."""
    asyncio.run(storage_file(tmp_path / "in", Storage(tmp_path / "in", b"x", retrieve=False))
                .retrieve_from_storage())
    assert read_stamps(stamps).down == 0 and not (tmp_path / "in").exists()


def test_a_directory_counts_the_files_under_it(tmp_path: Path) -> None:
    (tmp_path / "d" / "e").mkdir(parents=True)
    (tmp_path / "d" / "a").write_bytes(b"12")
    (tmp_path / "d" / "e" / "b").write_bytes(b"345")
    assert staged_bytes.local_size(str(tmp_path / "d")) == 5
    assert staged_bytes.local_size(str(tmp_path / "absent")) == 0


def test_stamped_counts_that_are_not_byte_counts_are_ignored(tmp_path: Path) -> None:
    path = tmp_path / "j.stamps"
    path.write_text("".join(json.dumps(line) + "\n" for line in (
        {"down": 5}, {"down": -3}, {"up": "7"}, {"up": True}, {"up": 2}, {"down": 1})))
    read = read_stamps(path)
    assert (read.down, read.up) == (6, 2)


def test_installing_twice_wraps_once_and_a_changed_snakemake_is_left_alone(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(staged_bytes, "_record", staged_bytes._record)
    for name in ("retrieve_from_storage", "store_in_storage"):
        monkeypatch.setattr(_IOFile, name, getattr(_IOFile, name))
    assert staged_bytes.install(lambda way, n: None) is None
    wrapped = _IOFile.retrieve_from_storage
    heard: list[tuple[str, int]] = []
    assert staged_bytes.install(lambda way, n: heard.append((way, n))) is None
    assert _IOFile.retrieve_from_storage is wrapped
    staged_bytes._record("up", 3)  # the latest recorder hears (a job forked per zygote)
    assert heard == [("up", 3)]
    monkeypatch.setattr(_IOFile, "retrieve_from_storage", None)
    assert "not the expected" in (staged_bytes.install(lambda way, n: None) or "")
