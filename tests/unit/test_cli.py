"""The ``expocloud`` command line in process, on a recorded run directory: report's bad options
refused in one line, status and runs, no run at all. (A whole report, drawing its outcome map:
tests/e2e/test_cli_report.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from expo_executor.cli import main

from tests.recorded_run import run  # noqa: F401  (the fixture: a recorded, still-open run)


@pytest.mark.parametrize("args,message", [
    (["--best", "median", "cost"], "--best: direction 'median' is neither min nor max"),
    (["--dims", "n_tasks"], "--dims: 'n_tasks' does not name two columns"),
    (["--filter", "__import__('os')"], "not allowed"),
])
def test_report_rejects_bad_options_in_one_line(run: Path, capsys, args: list[str],  # noqa: F811
                                                message: str) -> None:
    assert main(["report", "--state-dir", str(run.parent.parent), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1


def test_status_and_runs(run: Path, capsys) -> None:  # noqa: F811
    state = run.parent.parent
    (run / "status.json").write_text(json.dumps({
        "queued": 3, "running": 2, "solved": 5, "timeout": 1, "skipped": 4, "failed": 0,
        "workers": 2, "booting": 0, "slots": 2, "time": 0.0}))
    assert main(["status", "--state-dir", str(state)]) == 0
    out = capsys.readouterr().out
    assert "3 queued, 2 running, 5 solved, 1 timed out, 4 skipped, 0 failed | 2 workers" in out
    assert "coordinator may have died" in out  # an open run whose progress is stale
    assert main(["runs", "--state-dir", str(state)]) == 0
    assert run.name in capsys.readouterr().out


def test_no_run_is_a_clear_error(tmp_path: Path, capsys) -> None:
    assert main(["report", "--state-dir", str(tmp_path / ".expocloud")]) == 2
    assert "expocloud report:" in capsys.readouterr().err
