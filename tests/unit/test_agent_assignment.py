"""The agent-assignment example workflow's scripts, in process: the solver's three variants
against an independent brute force, the generator's seeds, the aggregate's placeholders, and a
Snakefile and profile that name no executor (its commands and plain Snakemake runs are in
tests/e2e/test_agent_assignment_scripts.py)."""
import json
import math
import random
import re

import pytest
import yaml

from tests.agent_assignment import VARIANTS, WORKFLOW, reference_cost, script, write_file

generate, solve, aggregate = script("generate"), script("solve"), script("aggregate")


def random_instances(count=40, seed=12345):
    rng = random.Random(seed)
    for _ in range(count):
        t = rng.randint(1, 6)
        a = rng.randint(t, 7)
        hi = rng.choice([3, 10, 100])  # small ranges give many ties
        yield [[rng.randint(1, hi) for _ in range(t)] for _ in range(a)]


# ---------------------------------------------------------------- solver

@pytest.mark.parametrize("times", list(random_instances()))
def test_variants_agree_with_reference(times):
    expected = reference_cost(times)
    n_agents, n_tasks = len(times), len(times[0])
    for variant in VARIANTS:
        cost, assignment, nodes = solve.solve(times, variant)
        assert cost == expected, variant
        assert len(assignment) == n_tasks
        assert len(set(assignment)) == n_tasks, "agents must be distinct"
        assert all(0 <= a < n_agents for a in assignment)
        assert sum(times[a][t] for t, a in enumerate(assignment)) == cost
        assert nodes >= 1


def test_variants_agree_on_generated_instances():
    for t, a, i in [(5, 5, 0), (6, 8, 1), (7, 7, 2), (7, 9, 0)]:
        times = generate.generate(t, a, i)["times"]
        costs = {v: solve.solve(times, v)[0] for v in VARIANTS}
        assert len(set(costs.values())) == 1, costs
        assert costs["brute"] == reference_cost(times)


def test_brute_force_has_no_cutoffs_and_pruning_helps():
    times = generate.generate(6, 8, 0)["times"]
    _, _, brute_nodes = solve.solve(times, "brute")
    # every partial assignment of k tasks, k = 0..n_tasks: sum of 8!/(8-k)!
    assert brute_nodes == sum(math.perm(8, k) for k in range(7))
    _, _, bnb_nodes = solve.solve(times, "bnb")
    _, _, heur_nodes = solve.solve(times, "heuristic")
    assert heur_nodes < bnb_nodes < brute_nodes


def test_solver_rejects_bad_input():
    with pytest.raises(ValueError):
        solve.solve([[1, 2]], "dfs")
    with pytest.raises(ValueError):
        solve.solve([[1, 2, 3], [4, 5, 6]], "bnb")  # 3 tasks, 2 agents


# ---------------------------------------------------------------- generator

def test_generator_seeds_differ():
    seeds = {generate.derive_seed(t, a, i) for t in range(1, 6) for a in range(t, 8) for i in range(3)}
    assert len(seeds) == sum(3 for t in range(1, 6) for a in range(t, 8))
    assert generate.generate(6, 9, 0)["times"] != generate.generate(6, 9, 1)["times"]
    with pytest.raises(ValueError):
        generate.generate(5, 4, 0)


# ---------------------------------------------------------------- aggregate

def test_aggregate_placeholder_outside_results_layout(tmp_path):
    p = write_file(tmp_path, "elsewhere.json",
               json.dumps({"expocloud_outcome": "timeout", "variant": "bnb", "n_tasks": "9",
                           "n_agents": "10", "instance": "1"}))
    (row,) = aggregate.aggregate([str(p)])
    assert [row[c] for c in aggregate.COLUMNS] == ["bnb", "9", "10", "1", "timeout", "", "", ""]


# ---------------------------------------------------------------- workflow

def test_snakefile_and_profile_are_executor_neutral():
    snakefile = (WORKFLOW / "Snakefile").read_text()
    code = "\n".join(line.split("#", 1)[0] for line in snakefile.splitlines())
    for word in ("hardness", "deadline", "expocloud"):
        assert word not in code
    profile = yaml.safe_load((WORKFLOW / "profiles" / "default" / "config.yaml").read_text())
    assert {k for k in profile if not k.startswith("expocloud-")} == {"jobs", "keep-going", "set-resources"}
    solve_res = profile["set-resources"]["solve"]
    assert solve_res["hardness"] == "variant:heuristic<bnb<brute, n_tasks, n_agents"
    assert re.fullmatch(r"\d+(\.\d+)?s", str(solve_res["deadline"]))
    config = yaml.safe_load((WORKFLOW / "config.yaml").read_text())
    assert config["variants"] == ["heuristic", "bnb", "brute"]
