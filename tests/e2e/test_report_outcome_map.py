"""The results report's outcome map: the PNG plot_outcomes draws, whole reports that write one,
and matplotlib loaded only when a report asks for it. (The table logic: tests/unit/report/
test_results.py.)"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from expo_executor.report.outcome_map import plot_outcomes
from expo_executor.report.results import report
from expo_executor.report.run_reader import ReportError
from tests.helpers import REPO
from tests.recorded_run import DIMS, run  # noqa: F401  (run: the fixture)


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


def test_report_end_to_end(run: Path, tmp_path: Path) -> None:  # noqa: F811
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


def test_report_min_group_size_drops_groups_and_custom_paths(run: Path, tmp_path: Path) -> None:  # noqa: F811
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
