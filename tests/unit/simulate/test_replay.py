"""``expocloud simulate --workload``: recorded runtimes replayed under the real scheduler, with
and without the learned model, on small synthetic workloads of two shapes; and its bad input."""

from __future__ import annotations

import csv
import json
import math
import random
from pathlib import Path

import pytest

from expo_executor.cli import main
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec
from expo_executor.simulate.replay import ReplayConfig, Row, load_rows, replay


def hopeless_sweep(seed: int = 0) -> list[Row]:
    """solver x size, 40 instances x 4 seeds: one instance in eight never finishes; the rest
    take exp(1 + size/2 + instance effect + small noise) seconds."""
    rng = random.Random(seed)
    rows = []
    for solver in ("x", "y"):
        for size in range(1, 5):
            for instance in range(40):
                hopeless = rng.random() < 0.125
                effect = rng.gauss(0.0, 0.8)
                for rep in range(4):
                    seconds = math.exp(1 + size / 2 + (solver == "y") + effect
                                       + rng.gauss(0.0, 0.1))
                    params = {"solver": solver, "size": str(size), "instance": str(instance),
                              "rep": str(rep)}
                    rows.append(Row(params, 600.0 if hopeless else seconds, not hopeless))
    return rows


def test_the_learned_model_skips_hopeless_instances_and_loses_almost_nothing():
    rows = hopeless_sweep()
    plain = replay(rows, ReplayConfig(600.0, vms=4, slots=4))
    learned = replay(rows, ReplayConfig(600.0, learned=True, noise=("instance", "rep"),
                                        skip_above=0.99, vms=4, slots=4))
    assert plain.solvable == learned.solvable == sum(r.ok and r.runtime_s < 600 for r in rows)
    assert plain.solvable_lost == 0 and plain.model_skips == 0
    assert plain.oracle_cpu_s == pytest.approx(sum(r.runtime_s for r in rows
                                                   if r.ok and r.runtime_s < 600))
    timeouts = len(rows) - plain.solvable
    assert plain.cpu_s == pytest.approx(plain.oracle_cpu_s + 600.0 * timeouts)
    assert learned.model_skips > timeouts / 2
    assert learned.model_skips_wrong <= 0.05 * learned.model_skips  # P=0.99, ~100 skips
    assert learned.solvable_lost <= 0.01 * learned.solvable
    assert learned.cpu_s < 0.6 * plain.cpu_s
    assert learned.remaining["covered"] is not None


def test_the_domino_rule_loses_what_a_wrong_order_hides():
    """The paper's rule, size ordered within (solver, instance, rep): an instance number names
    a different instance at each size (as in TSP-LION2015), so a small hopeless one skips
    larger solvable ones; the learned model, with no order, loses far less."""
    rows = hopeless_sweep()
    spec = HardnessSpec.parse("size; scope: solver, instance, rep")
    domino = replay(rows, ReplayConfig(600.0, hardness=spec, vms=4, slots=4))
    learned = replay(rows, ReplayConfig(600.0, learned=True, noise=("instance", "rep"),
                                        skip_above=0.99, vms=4, slots=4))
    assert domino.domino_skips > 0 and domino.model_skips == 0
    assert domino.solvable_lost > 10 * max(learned.solvable_lost, 1)


def write_csv(path: Path, rows: list[Row]) -> None:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, [*rows[0].params, "runtime_s", "status"])
        writer.writeheader()
        for row in rows:
            writer.writerow({**row.params, "runtime_s": row.runtime_s,
                             "status": "ok" if row.ok else "timeout"})


def test_the_command_writes_the_figures(tmp_path, capsys):
    rows = hopeless_sweep()[:320]
    write_csv(tmp_path / "w.csv", rows)
    out = tmp_path / "out.json"
    assert main(["simulate", "--workload", str(tmp_path / "w.csv"), "--deadline", "10m",
                 "--hardness-model", "learned", "--noise", "instance,rep", "--skip-above",
                 "0.99", "--vms", "2", "--slots", "4", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    for name in ("jobs", "solvable", "solvable_lost", "cpu_s", "oracle_cpu_s", "model_skips",
                 "model_skips_wrong", "remaining_cost_covered"):
        assert name in figures
    assert figures["jobs"] == 320
    assert "320 jobs" in capsys.readouterr().out


def test_bad_workloads_get_one_line_errors(tmp_path):
    (tmp_path / "no_status.csv").write_text("a,runtime_s\n1,2\n")
    (tmp_path / "bad_runtime.csv").write_text("a,runtime_s,status\n1,soon,ok\n")
    with pytest.raises(ExpoError, match="no column status"):
        load_rows(tmp_path / "no_status.csv")
    with pytest.raises(ExpoError, match="line 2: runtime_s 'soon'"):
        load_rows(tmp_path / "bad_runtime.csv")
    with pytest.raises(ExpoError, match="cannot read"):
        load_rows(tmp_path / "missing.csv")
