"""The agent-assignment example workflow's scripts as commands, and under plain Snakemake: the
solver's and generator's command lines, a killed solver that leaves no output, the aggregate over
results, placeholders and garbage, the default sweep's size and a tiny sweep end to end (the
scripts in process are in tests/unit/test_agent_assignment.py)."""
import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from tests.agent_assignment import SCRIPTS, VARIANTS, WORKFLOW, reference_cost, script, write_file

generate = script("generate")


# ---------------------------------------------------------------- solver

def test_solve_cli(tmp_path):
    inst = tmp_path / "inst.json"
    subprocess.run([sys.executable, str(SCRIPTS / "generate.py"), "5", "7", "1", str(inst)], check=True)
    times = json.loads(inst.read_text())["times"]
    for variant in VARIANTS:
        out = tmp_path / "res" / f"{variant}.json"
        subprocess.run([sys.executable, str(SCRIPTS / "solve.py"), variant, str(inst), str(out)], check=True)
        res = json.loads(out.read_text())
        assert {"variant", "n_tasks", "n_agents", "instance", "cost", "nodes",
                "solve_seconds", "assignment"} <= set(res)
        assert (res["variant"], res["n_tasks"], res["n_agents"], res["instance"]) == (variant, 5, 7, 1)
        assert res["cost"] == reference_cost(times)
        assert res["solve_seconds"] >= 0
    bad = subprocess.run([sys.executable, str(SCRIPTS / "solve.py"), "nope", str(inst), str(tmp_path / "x.json")],
                         capture_output=True)
    assert bad.returncode != 0
    assert not (tmp_path / "x.json").exists()


def test_solve_can_be_killed_and_leaves_no_output(tmp_path):
    inst = tmp_path / "inst.json"
    inst.write_text(generate.dumps(generate.generate(12, 14, 0)))  # brute force: hours
    out = tmp_path / "out.json"
    proc = subprocess.Popen([sys.executable, str(SCRIPTS / "solve.py"), "brute", str(inst), str(out)])
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=1.5)
    finally:
        proc.kill()
        proc.wait()
    assert not out.exists()


# ---------------------------------------------------------------- generator

def test_generator_is_deterministic(tmp_path):
    paths = []
    for k in range(2):
        p = tmp_path / f"{k}.json"
        subprocess.run([sys.executable, str(SCRIPTS / "generate.py"), "6", "9", "2", str(p)], check=True)
        paths.append(p)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    assert paths[0].read_text() == generate.dumps(generate.generate(6, 9, 2))
    data = json.loads(paths[0].read_text())
    assert (data["n_tasks"], data["n_agents"], data["instance"]) == (6, 9, 2)
    assert data["seed"] == generate.derive_seed(6, 9, 2)
    assert len(data["times"]) == 9 and all(len(r) == 6 for r in data["times"])
    assert all(isinstance(x, int) and 1 <= x <= 100 for r in data["times"] for x in r)


# ---------------------------------------------------------------- aggregate

def test_aggregate_handles_results_placeholders_and_garbage(tmp_path):
    real = {"variant": "bnb", "n_tasks": 3, "n_agents": 4, "instance": 0, "cost": 42, "nodes": 17,
            "solve_seconds": 0.0012, "assignment": [1, 0, 3]}
    files = [
        write_file(tmp_path, "results/bnb/3/4/0.json", json.dumps(real)),
        write_file(tmp_path, "results/brute/10/12/1.json", '{"expocloud_outcome": "timeout"}'),
        write_file(tmp_path, "results/brute/12/12/0.json",
               '{"expocloud_outcome": "skipped", "reason": "dominated by brute 10/12", "rule": "solve"}'),
        write_file(tmp_path, "results/heuristic/22/22/1.json", "this is\tnot JSON {"),
        write_file(tmp_path, "results/heuristic/3/4/0.json", ""),
        write_file(tmp_path, "results/bnb/3/4/1.json", "[1, 2, 3]"),
        tmp_path / "results/bnb/9/9/0.json",  # missing
    ]
    out = tmp_path / "results" / "table.tsv"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "aggregate.py"), str(out)] + [str(f) for f in files],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines[0].split("\t") == ["variant", "n_tasks", "n_agents", "instance", "status",
                                    "cost", "nodes", "solve_seconds"]
    rows = [line.split("\t") for line in lines[1:]]
    assert all(len(r) == 8 for r in rows)
    table = {tuple(r[:4]): r[4:] for r in rows}
    assert len(table) == len(files)
    assert table[("bnb", "3", "4", "0")] == ["solved", "42", "17", "0.0012"]
    assert table[("brute", "10", "12", "1")] == ["timeout", "", "", ""]
    assert table[("brute", "12", "12", "0")] == ["skipped", "", "", ""]
    assert table[("heuristic", "22", "22", "1")] == ["unreadable", "", "", ""]
    assert table[("heuristic", "3", "4", "0")] == ["unreadable", "", "", ""]
    assert table[("bnb", "3", "4", "1")] == ["unreadable", "", "", ""]
    assert table[("bnb", "9", "9", "0")] == ["unreadable", "", "", ""]
    # easiest first: heuristic < bnb < brute, then numerically
    assert [r[0] for r in rows] == ["heuristic"] * 2 + ["bnb"] * 3 + ["brute"] * 2
    assert [(r[1], r[2]) for r in rows[:2]] == [("3", "4"), ("22", "22")]


# ---------------------------------------------------------------- workflow

def _copy_workflow(tmp_path):
    dest = tmp_path / "agent-assignment"
    shutil.copytree(WORKFLOW, dest, ignore=shutil.ignore_patterns(
        "results", "instances", ".snakemake", ".expocloud", "__pycache__"))
    return dest


def _snakemake(cwd, *args, timeout=300):
    cmd = [sys.executable, "-m", "snakemake", "--workflow-profile", "none", "--nocolor", *args]
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def test_default_sweep_size(tmp_path):
    wf = _copy_workflow(tmp_path)
    proc = _snakemake(wf, "-n", "-j2", "--quiet", "rules")
    out = proc.stdout + proc.stderr
    counts = dict((m.group(1), int(m.group(2))) for m in re.finditer(r"^(\w+)\s+(\d+)$", out, re.M))
    config = yaml.safe_load((WORKFLOW / "config.yaml").read_text())
    points = [(t, a) for t in config["n_tasks"] for a in config["n_agents"] if a >= t]
    assert counts["generate"] == len(points) * config["instances"]
    assert counts["solve"] == 3 * len(points) * config["instances"]
    assert 60 <= counts["solve"] <= 120
    assert counts["aggregate"] == 1


def test_tiny_workflow_end_to_end(tmp_path):
    wf = _copy_workflow(tmp_path)
    config = ["--config", "n_tasks=3,4", "n_agents=4,5", "instances=2"]
    _snakemake(wf, "-j2", *config)
    lines = (wf / "results" / "table.tsv").read_text().splitlines()
    assert lines[0].split("\t")[:5] == ["variant", "n_tasks", "n_agents", "instance", "status"]
    rows = [dict(zip(lines[0].split("\t"), line.split("\t"))) for line in lines[1:]]
    expected = {(v, t, a, i) for v in VARIANTS for t in (3, 4) for a in (4, 5) for i in (0, 1)}
    assert {(r["variant"], int(r["n_tasks"]), int(r["n_agents"]), int(r["instance"])) for r in rows} == expected
    assert len(rows) == len(expected)
    assert all(r["status"] == "solved" for r in rows)
    for t in (3, 4):
        for a in (4, 5):
            for i in (0, 1):
                times = json.loads((wf / "instances" / str(t) / str(a) / f"{i}.json").read_text())["times"]
                costs = {int(r["cost"]) for r in rows
                         if (int(r["n_tasks"]), int(r["n_agents"]), int(r["instance"])) == (t, a, i)}
                assert costs == {reference_cost(times)}

    # an executor may replace a result by a placeholder; the unchanged aggregate copes
    (wf / "results" / "brute" / "4" / "5" / "1.json").write_text('{"expocloud_outcome": "timeout"}')
    (wf / "results" / "brute" / "4" / "5" / "0.json").write_text(
        '{"expocloud_outcome": "skipped", "reason": "dominated"}')
    _snakemake(wf, "-j1", "--forcerun", "aggregate", *config)
    rows = [line.split("\t") for line in (wf / "results" / "table.tsv").read_text().splitlines()[1:]]
    status = {tuple(r[:4]): r[4] for r in rows}
    assert len(rows) == len(expected)
    assert status[("brute", "4", "5", "1")] == "timeout"
    assert status[("brute", "4", "5", "0")] == "skipped"
    assert sum(s == "solved" for s in status.values()) == len(expected) - 2
