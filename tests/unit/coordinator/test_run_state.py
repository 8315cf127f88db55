"""A coordinator's host-side run state (coordinator/run_state.py): a rerun finds a run whose
coordinator died before the run ended, never a live one or one that ended cleanly."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from expo_executor.coordinator.run_state import KEY, RunState, crashed_runs, record

KEY_BYTES = bytes(range(32))


def _run(root: Path, name: str) -> Path:
    run_dir = root / "runs" / name
    run_dir.mkdir(parents=True)
    return run_dir


def test_a_live_coordinators_run_is_not_taken_for_crashed(tmp_path: Path) -> None:
    held = record(_run(tmp_path, "r1"), RunState("r1", "local", "/b"), KEY_BYTES)
    assert crashed_runs(tmp_path) == []  # its lock is held
    held.release()  # as the kernel does when the coordinator dies
    found = crashed_runs(tmp_path)
    assert [run.dir.name for run in found] == ["r1"]
    assert found[0].key() == KEY_BYTES and found[0].state.engine == "local"
    assert crashed_runs(tmp_path) == []  # the finder holds it now: no second rerun takes it
    found[0].end()
    assert crashed_runs(tmp_path) == []  # dealt with: the key is gone


def test_a_run_that_ended_cleanly_is_not_crashed(tmp_path: Path) -> None:
    record(_run(tmp_path, "r1"), RunState("r1", "gce", "gs://b/p", label="r1-0123456789",
                                          zones=("z1",)), KEY_BYTES).end()
    assert crashed_runs(tmp_path) == []


def test_the_key_file_is_readable_by_its_owner_only(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "r1")
    held = record(run_dir, RunState("r1", "local", "/b"), KEY_BYTES)
    assert stat.S_IMODE((run_dir / KEY).stat().st_mode) == 0o600
    held.end()


def test_the_new_run_itself_is_skipped(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "r1")
    record(run_dir, RunState("r1", "local", "/b"), KEY_BYTES).release()
    assert crashed_runs(tmp_path, skip=run_dir) == []


def test_a_run_dir_cannot_be_held_twice(tmp_path: Path) -> None:
    run_dir = _run(tmp_path, "r1")
    held = record(run_dir, RunState("r1", "local", "/b"), KEY_BYTES)
    with pytest.raises(RuntimeError):
        record(run_dir, RunState("r1", "local", "/b"), KEY_BYTES)
    held.end()

