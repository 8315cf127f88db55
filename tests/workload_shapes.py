"""Recorded-runtime CSVs of shapes other than TSP-LION2015's, written where a test asks, for
``expocloud simulate --workload``: the replay must take each (or refuse it in one line naming
the fix), and the learned model must not lose solvable runs where its assumptions hold. Made
up here, never committed as data: each function writes one CSV and returns its path and the
replay flags it needs (noise columns, order)."""

from __future__ import annotations

import csv
import math
import random
from pathlib import Path

DEADLINE = 600.0


def _write(path: Path, rows: list[dict[str, object]]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def sat_like(path: Path, instances: int = 300, seed: int = 0) -> Path:
    """ASlib-SAT-like: solver x instance, one run each (no repetition column), the instance
    the only noise. An instance is hard for every solver alike (its effect is shared), one in
    six is hopeless for all; a few runs end in a crash or memout below the deadline."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    effects = [(rng.gauss(0.0, 1.0), rng.random() < 1 / 6) for _ in range(instances)]
    for solver, base in (("minisat", 2.5), ("glucose", 2.2), ("lingeling", 2.8),
                         ("cadical", 2.0)):
        for i, (effect, hopeless) in enumerate(effects):
            seconds = math.exp(base + effect + rng.gauss(0.0, 0.3))
            status = "ok"
            if hopeless or seconds >= DEADLINE:
                seconds, status = DEADLINE, "timeout"
            elif rng.random() < 0.02:
                seconds, status = seconds / 2, rng.choice(("crash", "memout"))
            rows.append({"solver": solver, "instance": f"inst{i:04d}.cnf",
                         "runtime_s": round(seconds, 3), "status": status})
    return _write(path, rows)


def many_levels(path: Path, levels: int = 60, seed: int = 1) -> Path:
    """A categorical of 60 levels (a benchmark family each) x a non-integer numeric parameter
    (a ratio) x 3 seeds; Upper-case column names with spaces; some runtimes of 0.0; one family
    in ten hopeless at the largest ratio."""
    rng = random.Random(seed)
    rows: list[dict[str, object]] = []
    for level in range(levels):
        family_effect = rng.gauss(0.0, 0.7)
        for ratio in (0.5, 1.25, 2.75):
            hopeless = ratio == 2.75 and level % 10 == 0
            for seed_ in range(3):
                seconds = 0.0 if rng.random() < 0.05 else math.exp(
                    1.0 + ratio + family_effect + rng.gauss(0.0, 0.2))
                status = "ok"
                if hopeless or seconds >= DEADLINE:
                    seconds, status = DEADLINE, "timeout"
                rows.append({"Benchmark Family": f"fam{level}", "Clause Ratio": ratio,
                             "Seed": seed_, "runtime_s": round(seconds, 3), "status": status})
    return _write(path, rows)
