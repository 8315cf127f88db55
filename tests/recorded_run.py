"""A recorded run directory for the report's and the command line's tests: jobs.jsonl records
as the coordinator writes them, job outputs in JSON, TSV and CSV, and the ``run`` fixture (import
it into a test module to use it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

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
