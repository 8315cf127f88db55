"""The report's section on where the data disagrees with a declared order: a real learned model,
fed a synthetic sweep, saved beside its frontier as the coordinator saves it, read back by
``expocloud report``."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec
from expo_executor.learned.model import LearnedModel
from expo_executor.report.results import report

from tests.helpers import runtime_sweep
from tests.recorded_run import make_run

SPEC = "n; scope: algo"
DEADLINE = 1000.0


def _run(tmp_path: Path, log_mean) -> tuple[Path, str]:
    """A finished run of rule ``solve`` whose model (fed ``log_mean``) is saved in its state dir;
    the report's text."""
    state = tmp_path / ".expocloud"
    model = LearnedModel(ModelSpec(("instance", "rep"), HardnessSpec.parse(SPEC)))
    runtime_sweep(model, log_mean, groups=30, deadline=DEADLINE, algo=["a", "b"], n=["1", "2", "3"])
    StateDir(state).save_model(FamilyRef("wf", "solve", SPEC, DEADLINE), model.to_dict())
    record = {"v": 1, "key": "k", "rule": "solve", "outcome": "solved", "outputs": [],
              "wildcards": {"algo": "b", "n": "1", "instance": "0", "rep": "0"},
              "hardness": {"spec": SPEC, "dims": ["n"], "vector": [1.0], "scope": ["b"]}}
    run_dir = make_run(state, "r1", "2024-01-01T00:00:00", tmp_path / "w", [json.dumps(record)])
    return run_dir, report(run_dir)


def test_names_the_region_where_the_declared_order_is_wrong(tmp_path: Path) -> None:
    """Declared: n makes it harder. For algo b, n=1 is slow and n>=2 fast: the report names
    b's n=1 -> n=2 edge with its medians, says the domino effect spared it, and writes a CSV."""
    run_dir, text = _run(tmp_path, lambda p: 2.0 + int(p["n"]) if p["algo"] == "a"
                         else (7.5 if p["n"] == "1" else 2.0))
    assert "rule solve (order 'n; scope: algo', deadline 1000 s): the data disagrees" in text
    table = [line for line in text.splitlines() if line.startswith("| n |")]
    assert len(table) == 1 and "| algo=b, n=1 |" in table[0] and "| algo=b, n=2 |" in table[0]
    assert "domino effect spared" in text
    with (run_dir / "order_disagreements.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [(r["dimension"], r["easier"], r["harder"]) for r in rows] == \
        [("n", "algo=b, n=1", "algo=b, n=2")]
    assert float(rows[0]["harder_median_s"]) < float(rows[0]["easier_median_s"])


def test_one_line_when_the_order_held_and_nothing_without_a_model(tmp_path: Path) -> None:
    run_dir, text = _run(tmp_path, lambda p: 2.0 + int(p["n"]))
    assert "rule solve (order 'n; scope: algo', deadline 1000 s): the data agrees" in text
    assert "disagrees" not in text and not (run_dir / "order_disagreements.csv").exists()
    for path in (tmp_path / ".expocloud" / "frontiers").glob("*.model.json"):
        path.unlink()
    assert "declared order" not in report(run_dir)
