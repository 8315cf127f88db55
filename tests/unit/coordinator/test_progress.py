"""The progress line (coordinator/progress.py): the runtime model's estimate rides along with a
line that says something new, and alone it is no news."""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator.progress import Progress
from expo_executor.core.remaining import Remaining
from expo_executor.core.run_status import STATES, RunStatus
from expo_executor.runs.files import RunFiles

ESTIMATE = Remaining(4, 60.0, 30.0, 90.0, 0.0, 0.0, 0.0)


def _status(time: float, solved: int, estimate: Remaining | None,
            finished: bool = False) -> RunStatus:
    counts = {state: 0 for state in STATES} | {"solved": solved}
    return RunStatus(time, counts, 1, 0, 2, 1.0, finished, estimate=estimate)


def test_the_estimate_rides_along_with_news_only(tmp_path: Path) -> None:
    lines: list[str] = []
    progress = Progress(RunFiles(tmp_path), 1.0, lines.append)
    progress.report(_status(1.0, 1, ESTIMATE))
    progress.report(_status(2.0, 1, Remaining(4, 50.0, 25.0, 80.0, 0.0, 0.0, 0.0)))
    progress.report(_status(3.0, 2, None, finished=True), force=True)
    assert lines[0].endswith("| estimate for 4 jobs: 60 s left (90%: 30 s to 90 s)")
    assert len(lines) == 2 and "estimate" not in lines[1]
