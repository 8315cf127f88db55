"""Finding a run and reading it: its directory, ``run.json``, the last record of each job in
``jobs.jsonl``, and the numbers a job wrote to its output. Records are read as written (plain
JSON); a run may be live, so a half-written line or a garbage output is skipped, never fatal.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

from expo_executor.core.errors import ExpoError
from expo_executor.report.safe_expr import as_number
from expo_executor.runs.files import JOBS as JOBS_FILE
from expo_executor.runs.files import RUN as RUN_FILE
from expo_executor.runs.files import RunFiles


RUNS_DIR = "runs"
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
"""Outputs larger than this are not read for numbers: a report must not stall on a huge result file."""


class ReportError(ExpoError, ValueError):
    """A report request that cannot be met: no run, unknown rule or column, bad option."""


def find_run(state_dir: Path, run: str | None = None) -> Path:
    """Return the run directory named by ``run`` (an id, a unique id prefix or a path), or the newest run."""
    runs = Path(state_dir) / RUNS_DIR
    candidates = _run_dirs(runs)
    if run is not None:
        as_path = Path(run).expanduser()
        if _is_run_dir(as_path):
            return as_path
        if _is_run_dir(runs / run):
            return runs / run
        matches = [path for path in candidates if path.name.startswith(run)]
        if len(matches) == 1:
            return matches[0]
        problem = f"{len(matches)} runs start with {run!r}" if matches else f"no run {run!r} in {runs}"
        raise ReportError("run", problem, f"pass a run directory or one of the run ids: {_newest_ids(candidates)}")
    if not candidates:
        raise ReportError(
            "run", f"no runs in {runs}", "run the workflow with the expocloud executor first, or pass a run directory"
        )
    return max(candidates, key=_run_sort_key)


def state_dir_of(run_dir: Path) -> Path | None:
    """The state dir a run directory lives in (``<state>/runs/<id>``: the frontiers and the
    runtime models saved beside them are there), or None for a run directory kept elsewhere."""
    run_dir = Path(run_dir).resolve()
    return run_dir.parent.parent if run_dir.parent.name == RUNS_DIR else None


def load_run_info(run_dir: Path) -> dict[str, object]:
    """``run.json``, read by the run files' reader; an unreadable one gives {}."""
    return RunFiles(Path(run_dir)).info()


def load_jobs(run_dir: Path) -> list[dict]:
    """Each job's final record, read by the run files' reader (a live run's half-written last
    line is skipped); ReportError when ``run_dir`` is not a directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError("run", f"{run_dir} is not a directory", "pass a run directory (.expocloud/runs/<run-id>)")
    return RunFiles(run_dir).final_jobs()


def read_job_numbers(path: Path) -> dict[str, object]:
    """Return the top-level scalars of a JSON object file, or the columns of a one-row TSV/CSV file.

    A missing, oversized or malformed file gives {}: a report must not fail because one job wrote garbage.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if path.stat().st_size > MAX_OUTPUT_BYTES:
            return {}
        if suffix == ".json":
            return _json_scalars(path.read_text(encoding="utf-8"))
        if suffix in (".tsv", ".csv"):
            with path.open(encoding="utf-8", newline="") as handle:
                head = [handle.readline() for _ in range(64)]  # header + first data row, skipping blank lines
            return _table_scalars("".join(head), "\t" if suffix == ".tsv" else ",")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return {}


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / RUN_FILE).is_file() or (path / JOBS_FILE).is_file())


def _run_dirs(runs: Path) -> list[Path]:
    try:
        return [path for path in runs.iterdir() if _is_run_dir(path)]
    except OSError:
        return []


def _run_sort_key(path: Path) -> tuple[bool, float, str]:
    """Runs with a readable ``created`` sort by it; others (older layouts, broken run.json) by name, before them."""
    created = load_run_info(path).get("created")
    try:
        stamp = datetime.fromisoformat(str(created)).timestamp() if created else None
    except ValueError:
        stamp = None
    return (stamp is not None, stamp or 0.0, path.name)


def _newest_ids(candidates: Sequence[Path], limit: int = 5) -> str:
    ids = [path.name for path in sorted(candidates, key=_run_sort_key, reverse=True)[:limit]]
    if not ids:
        return "(none yet)"
    return ", ".join(ids) + (", ..." if len(candidates) > limit else "")


def _json_scalars(text: str) -> dict[str, object]:
    data = json.loads(text)
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, (bool, int, float, str))}


def _table_scalars(text: str, delimiter: str) -> dict[str, object]:
    records = [record for record in csv.reader(io.StringIO(text), delimiter=delimiter) if any(f.strip() for f in record)]
    if len(records) < 2:
        return {}
    header, data = records[0], records[1]
    return {
        name.strip(): as_number(value.strip())
        for name, value in zip(header, data)
        if name.strip() and value.strip()
    }
