"""``expocloud report`` on a recorded run directory, whole: the table and the best row printed,
the CSV and the outcome map written. (Its options and the other subcommands, in process:
tests/unit/test_cli.py.)"""

from __future__ import annotations

from pathlib import Path

from expo_executor.cli import main

from tests.recorded_run import run  # noqa: F401  (the fixture: a recorded, still-open run)


def test_report_prints_the_table_and_writes_csv_and_png(run: Path, capsys) -> None:  # noqa: F811
    state = run.parent.parent
    assert main(["report", "--state-dir", str(state), "--best", "min", "cost"]) == 0
    out = capsys.readouterr().out
    assert "| variant" in out and "best" in out
    assert (run / "results.csv").stat().st_size > 0
    assert (run / "outcomes.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
