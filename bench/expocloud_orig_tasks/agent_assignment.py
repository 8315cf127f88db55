"""The demo sweep's `solve` jobs as tasks of the original ExpoCloud (bench/pruning.py).

Same instances (workflows/agent-assignment/scripts/generate.py, seeded by the point), same
solver (scripts/solve.py), same deadline, and the same hardness order as the workflow's profile
(``variant:heuristic<bnb<brute, n_tasks, n_agents``): the original compares hardness tuples
element-wise, which is that Pareto order over (variant rank, n_tasks, n_agents). The scripts
directory must be on the PYTHONPATH of its processes.
"""

from __future__ import annotations

import time

from src.abstract_task import AbstractTask

VARIANT_RANK = {"heuristic": 0, "bnb": 1, "brute": 2}


class NeverDominates(AbstractTask.Hardness):
    """Hardness for the run without pruning: it still sorts tasks easiest first (``<``), but
    no task is as hard as a timed-out one (``>=`` is answered by ``__le__``) except that task
    itself, so the original's server skips no task and its clients kill none. The exception
    matters: its server unregisters a timed-out task from its client by that comparison;
    a task left registered is re-run as a failed client's when the client leaves."""

    def __le__(self, other: AbstractTask.Hardness) -> bool:
        return other is self


class Solve:
    """The 'algorithm' AbstractTask wants: the point and instance to solve."""

    def __init__(self, variant: str, n_tasks: int, n_agents: int, instance: int) -> None:
        self.options: set = set()
        self.instance = (variant, n_tasks, n_agents, instance)


class Task(AbstractTask):
    def __init__(self, variant: str, n_tasks: int, n_agents: int, instance: int,
                 timeout: float, pruning: bool = True) -> None:
        if not pruning:
            self.Hardness = NeverDominates
        super().__init__(Solve(variant, n_tasks, n_agents, instance), timeout)

    def parameter_titles(self) -> tuple:
        return ("variant", "n_tasks", "n_agents", "instance")

    def parameters(self) -> tuple:
        return self.instance

    def hardness_parameters(self) -> tuple:
        variant, n_tasks, n_agents, _ = self.instance
        return (VARIANT_RANK[variant], n_tasks, n_agents)

    def result_titles(self) -> tuple:
        return ("cost", "nodes", "solve_seconds")

    def run(self) -> tuple:
        from generate import generate
        from solve import solve
        variant, n_tasks, n_agents, instance = self.instance
        times = generate(n_tasks, n_agents, instance)["times"]
        t0 = time.process_time()
        cost, _, nodes = solve(times, variant)
        return (cost, nodes, round(time.process_time() - t0, 6))


def sweep_tasks(config: dict, deadline_s: float, pruning: bool) -> list[Task]:
    """The workflow's solve jobs for its config.yaml (points with n_agents >= n_tasks)."""
    return [Task(v, t, a, i, deadline_s, pruning)
            for v in config["variants"] for t in config["n_tasks"] for a in config["n_agents"]
            if a >= t for i in range(int(config["instances"]))]
