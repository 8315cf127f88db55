"""Private files: created 0600, directories 0700, whatever the umask; never narrowed after."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from expo_executor.processes.private_files import private_dir, private_output, write_private


@pytest.fixture
def open_umask() -> Iterator[None]:
    """umask 0: a file made with the default mode would be readable and writable by all."""
    old = os.umask(0)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_directories_and_their_missing_parents_are_made_0700(tmp_path: Path,
                                                              open_umask: None) -> None:
    made = private_dir(tmp_path / "a" / "b" / "c")
    assert [_mode(p) for p in (tmp_path / "a", tmp_path / "a" / "b", made)] == [0o700] * 3
    assert private_dir(made) == made  # again: nothing to do


def test_a_file_in_the_way_of_a_directory_is_an_error_as_for_mkdir_p(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("in the way")
    with pytest.raises(FileExistsError):
        private_dir(tmp_path / "x")
    with pytest.raises(NotADirectoryError):
        private_dir(tmp_path / "x" / "y")


def test_files_are_created_0600_and_rewritten_from_their_start(tmp_path: Path,
                                                               open_umask: None) -> None:
    path = tmp_path / "spec.json"
    write_private(path, b"a long first version")
    write_private(path, b"short")
    assert path.read_bytes() == b"short" and _mode(path) == 0o600
    fd = private_output(tmp_path / "job.log")
    os.close(fd)
    assert _mode(tmp_path / "job.log") == 0o600
