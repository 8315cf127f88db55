"""Tests for the results report: reading a run directory, the table logic, CSV, Markdown and the outcome map."""

from __future__ import annotations

import csv
import json
import os
import struct
from pathlib import Path

import pytest

from expo_executor.report.results import ReportError, plot_outcomes, report
from tests.helpers import REPO

SPEC = "variant:heuristic<bnb<brute, n_tasks, n_agents"
DIMS = ["variant", "n_tasks", "n_agents"]
RANK = {"heuristic": 0, "bnb": 1, "brute": 2}


def job(key: str, variant: str, n_tasks: int, n_agents: int, seed: int, outcome: str, **extra: object) -> dict:
    """A jobs.jsonl record of the 'solve' rule, as the coordinator writes it."""
    record = {
        "v": 1, "key": key, "rule": "solve",
        "wildcards": {"variant": variant, "n_tasks": str(n_tasks), "n_agents": str(n_agents), "seed": str(seed)},
        "hardness": {"spec": SPEC, "dims": DIMS, "vector": [RANK[variant], float(n_tasks), float(n_agents)],
                     "scope": []},
        "outcome": outcome, "killed": False, "runtime_s": 1.5 if outcome != "skipped" else None,
        "worker": "w-1", "started": 100.0, "ended": 101.5, "deadline_s": 10.0,
        "outputs": [f"results/{variant}/{n_tasks}/{n_agents}/{seed}.json"],
        "reason": None, "dominator": None, "attempt": 1, "placeholder": False,
    }
    record.update(extra)
    return record


def write_output(workdir: Path, relative: str, content: object) -> None:
    path = workdir / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content if isinstance(content, str) else json.dumps(content))


def make_run(state: Path, run_id: str, created: str | None, workdir: Path, lines: list[str]) -> Path:
    run_dir = state / "runs" / run_id
    run_dir.mkdir(parents=True)
    info = {"v": 1, "run_id": run_id, "created": created, "workdir": str(workdir), "engine": "local",
            "settings": {}, "ended": None, "future_key": 1}
    (run_dir / "run.json").write_text(json.dumps(info))
    (run_dir / "jobs.jsonl").write_text("\n".join(lines))
    return run_dir


@pytest.fixture
def run(tmp_path: Path) -> Path:
    """A live run: retried jobs, garbage lines, a half-written last line, JSON/TSV/CSV outputs, a name clash."""
    workdir = tmp_path / "work"
    records = [
        job("j1", "heuristic", 5, 2, 0, "failed", runtime_s=0.2),
        job("j2", "heuristic", 5, 2, 1, "solved"),
        job("j3", "bnb", 5, 2, 0, "solved", outputs=["log/j3.txt", "results/bnb/5/2/0.tsv"]),
        job("j4", "bnb", 5, 2, 1, "timeout", runtime_s=10.0),
        job("j5", "brute", 7, 3, 0, "skipped", dominator="j4", reason="dominated by j4"),
        job("j6", "brute", 7, 3, 1, "solved", outputs=["results/brute/7/3/1.csv"]),
        job("j7", "brute", 7, 3, 2, "solved", outputs=["results/missing.json"]),
        {"v": 1, "key": "agg", "rule": "aggregate", "wildcards": {}, "hardness": None, "outcome": "solved",
         "runtime_s": 0.1, "worker": None, "outputs": ["summary.json"], "attempt": 1, "placeholder": False},
    ]
    lines = [json.dumps(record) for record in records]
    lines.insert(3, "this is not json")
    lines.insert(5, json.dumps(["a", "list"]))
    # j1 was retried and then solved: its last record wins, yet it keeps its place in the table
    lines.append(json.dumps(job("j1", "heuristic", 5, 2, 0, "solved", attempt=2, unknown_future_field=[1])))
    lines.append('{"v": 1, "key": "j8", "rule": "solve", "outco')
    write_output(workdir, "results/heuristic/5/2/0.json",
                 {"cost": 12.5, "n_tasks": 99, "outcome": "clash", "solve_seconds": 0.4,
                  "assignment": [1, 2], "meta": {"x": 1}, "optimal": True, "note": "ok", "nothing": None})
    write_output(workdir, "results/heuristic/5/2/1.json", {"cost": 10, "solve_seconds": 0.3})
    write_output(workdir, "results/bnb/5/2/0.tsv", "cost\tsolve_seconds\tlabel\n8.25\t3\tfast\n")
    write_output(workdir, "results/brute/7/3/1.csv", "cost,solve_seconds\n20,1e-4\n")
    write_output(workdir, "summary.json", {"total": 3})
    return make_run(tmp_path / ".expocloud", "r1", "2024-05-01T10:00:00+00:00", workdir, lines)


# --- finding and reading a run ----------------------------------------------------------------------------


# --- rows -------------------------------------------------------------------------------------------------


# --- filter, groups, best -----------------------------------------------------------------------------------


# --- output -----------------------------------------------------------------------------------------------


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    return struct.unpack(">II", data[16:24])


def colour_share(path: Path, rgb: tuple[int, int, int]) -> float:
    """The share of pixels close to a colour: shows the cells were drawn with the outcome colours."""
    import matplotlib.image

    pixels = matplotlib.image.imread(path)[..., :3] * 255
    close = (abs(pixels - rgb) < 8).all(axis=-1)
    return float(close.mean())


def test_plot_outcomes_writes_a_png_with_outcome_colours(tmp_path: Path) -> None:
    rows = []
    for variant in ("heuristic", "bnb", "brute"):
        for n_tasks in ("5", "10", "15"):
            for n_agents in ("2", "4"):
                outcome = "solved" if variant != "brute" or n_tasks == "5" else "timeout"
                rows += [{"variant": variant, "n_tasks": n_tasks, "n_agents": n_agents, "outcome": outcome}] * 2
    path = tmp_path / "deep" / "map.png"
    plot_outcomes(rows, "n_tasks", "n_agents", path, hardness_dims=DIMS,
                  order={"variant": ["heuristic", "bnb", "brute"]}, title="Outcomes of rule solve in run r1")
    width, height = png_size(path)
    assert width > 600 and height > 250 and path.stat().st_size > 10_000
    assert colour_share(path, (0x2C, 0xA0, 0x2C)) > 0.05  # solved: green
    assert colour_share(path, (0xD6, 0x27, 0x28)) > 0.01  # timeout: red
    with pytest.raises(ReportError, match="unknown column 'nope'"):
        plot_outcomes(rows, "nope", "n_agents", tmp_path / "x.png")
    with pytest.raises(ReportError, match="already an axis"):
        plot_outcomes(rows, "n_tasks", "n_agents", tmp_path / "x.png", facet="n_tasks")


def test_report_end_to_end(run: Path, tmp_path: Path) -> None:
    text = report(run, filter="n_tasks >= 5", best=("min", "cost"), min_group_size=1)
    assert text.splitlines()[0].startswith("run r1 (no end time")
    assert "| rule  | variant" in text
    assert "filter 'n_tasks >= 5': kept 7 of 7 rows" in text
    # group (bnb, 5, 2) has a solved row; (brute, 7, 3) has two; all groups survive k=1
    assert "min_group_size 1 by (variant, n_tasks, n_agents): dropped 0 rows" in text
    assert "best (min cost): 8.25 at rule=solve, variant=bnb, n_tasks=5, n_agents=2, seed=0" in text
    assert f"CSV: {run / 'results.csv'}" in text and (run / "results.csv").is_file()
    assert f"PNG: {run / 'outcomes.png'}" in text
    png_size(run / "outcomes.png")
    assert "7 rows: 5 solved, 1 timeout, 1 skipped" in text


def test_report_min_group_size_drops_groups_and_custom_paths(run: Path, tmp_path: Path) -> None:
    text = report(run, min_group_size=2, csv_path=tmp_path / "t.csv", png_path=tmp_path / "t.png",
                  dims=["variant", "n_tasks"], facet="n_agents")
    # (heuristic,5,2): 2 solved, kept; (bnb,5,2): 1 solved of 2 rows, dropped; (brute,7,3): 2 solved of 3, kept
    assert "dropped 2 rows in 1 groups" in text
    assert "bnb" not in text.split("\n\n")[1]
    assert (tmp_path / "t.csv").is_file() and png_size(tmp_path / "t.png")[0] > 300


def test_importing_report_does_not_import_matplotlib() -> None:
    import subprocess
    import sys

    code = "import sys, expo_executor.report.results; print('matplotlib' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "False"
