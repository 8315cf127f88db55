"""``expocloud simulate --workload`` on CSVs of other shapes than TSP-LION2015's
(tests/workload_shapes.py): one run per instance and solver with no repetition column, crashes
and memouts ending below the deadline, runtimes of 0.0, a categorical of 60 levels, a
non-integer numeric parameter, and column names with spaces and upper case. Each replays, or
is refused in one line that names the fix; where the model's assumptions hold, the learned
policy spends less CPU than running everything and loses no solvable run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from expo_executor.cli import main
from tests.workload_shapes import many_levels, sat_like


def _replay(capsys, path: Path, out: Path, *flags: str) -> dict:
    assert main(["simulate", "--workload", str(path), "--deadline", "600", "--vms", "4",
                 "--slots", "4", "--json", str(out), *flags]) == 0
    capsys.readouterr()
    return json.loads(out.read_text())


def test_a_sat_like_sweep_with_no_repetitions_replays_and_the_model_skips_only_the_hopeless(
        tmp_path: Path, capsys) -> None:
    """The instance is what the runs of one instance share: named as the outer noise column,
    with the solver inside it, each instance's solvers are its group, and an instance that one
    solver could not finish is skipped for the others."""
    csv_path = sat_like(tmp_path / "sat.csv")
    plain = _replay(capsys, csv_path, tmp_path / "none.json")
    learned = _replay(capsys, csv_path, tmp_path / "learned.json", "--hardness-model",
                      "learned", "--noise", "instance,solver", "--skip-above", "0.99")
    assert plain["solvable"] == learned["solvable"] > 0
    assert plain["outcomes"].get("failed", 0) > 0  # the crashes and memouts, below the deadline
    assert learned["solvable_lost"] <= 0.005 * learned["solvable"]
    assert learned["model_skips"] > 0
    assert learned["model_skips_wrong"] <= 0.02 * learned["model_skips"]
    assert learned["cpu_s"] < plain["cpu_s"]


def test_many_levels_a_fractional_parameter_zero_runtimes_and_spaced_names_replay(
        tmp_path: Path, capsys) -> None:
    csv_path = many_levels(tmp_path / "levels.csv")
    plain = _replay(capsys, csv_path, tmp_path / "none.json")
    learned = _replay(capsys, csv_path, tmp_path / "learned.json", "--hardness-model",
                      "learned", "--noise", "Seed", "--skip-above", "0.99")
    assert plain["jobs"] == learned["jobs"] == 60 * 3 * 3
    assert learned["solvable_lost"] <= 0.005 * learned["solvable"]
    assert learned["cpu_s"] <= plain["cpu_s"] * 1.0001
    assert learned["remaining_cost_covered"] is not None


def test_a_declared_order_over_a_spaced_column_name_says_to_rename_it(
        tmp_path: Path, capsys) -> None:
    csv_path = many_levels(tmp_path / "levels.csv")
    assert main(["simulate", "--workload", str(csv_path), "--deadline", "600",
                 "--hardness", "Clause Ratio; scope: Benchmark Family, Seed"]) != 0
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "rename" in err and "Benchmark_Family" in err, err
