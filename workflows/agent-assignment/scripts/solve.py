#!/usr/bin/env python3
"""Exact solver for the agent-assignment problem (ExpoCloud paper example).

Usage: python scripts/solve.py VARIANT INSTANCE.json OUTPUT.json

Variants:
  brute      enumerate every full assignment, no cutoffs
  bnb        classic branch and bound: prune when partial cost >= best full cost
  heuristic  B&B plus the paper's lower bound: for every remaining task the
             cheapest *unused* agent (the same agent may serve several remaining
             tasks); prune when partial + bound >= best full cost

``nodes`` counts the search nodes expanded: every partial or full assignment
that the search reached and did not cut off (the root, inner nodes whose
children were generated, and full assignments evaluated).

The process has no internal timeout: it is meant to be killed from outside.
The output file is written atomically, only once the search has finished.
"""
import json
import sys

from atomic import write_atomic
import time

VARIANTS = ("brute", "bnb", "heuristic")


def _prepare(times, n_tasks, n_agents):
    if len(times) != n_agents or any(len(row) != n_tasks for row in times):
        raise ValueError("times must be an n_agents x n_tasks matrix")
    if n_agents < n_tasks:
        raise ValueError("need n_agents >= n_tasks")
    # cols[t][a]: time of agent a on task t (task-major for the inner loops)
    return [[times[a][t] for a in range(n_agents)] for t in range(n_tasks)]


def solve(times, variant):
    """Return (cost, assignment, nodes). assignment[t] = agent of task t."""
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; choose from {VARIANTS}")
    n_agents = len(times)
    n_tasks = len(times[0]) if n_agents else 0
    cols = _prepare(times, n_tasks, n_agents)
    agents = range(n_agents)
    used = [False] * n_agents
    current = [0] * n_tasks
    best_cost = float("inf")
    best_assignment = None
    nodes = 0

    def leaf(cost):
        nonlocal best_cost, best_assignment
        if cost < best_cost:
            best_cost = cost
            best_assignment = list(current)

    if variant == "brute":
        def rec(t, cost):
            nonlocal nodes
            nodes += 1
            if t == n_tasks:
                leaf(cost)
                return
            col = cols[t]
            for a in agents:
                if not used[a]:
                    used[a] = True
                    current[t] = a
                    rec(t + 1, cost + col[a])
                    used[a] = False

    elif variant == "bnb":
        def rec(t, cost):
            nonlocal nodes
            if cost >= best_cost:
                return
            nodes += 1
            if t == n_tasks:
                leaf(cost)
                return
            col = cols[t]
            for a in agents:
                if not used[a]:
                    used[a] = True
                    current[t] = a
                    rec(t + 1, cost + col[a])
                    used[a] = False

    else:  # heuristic
        def rec(t, cost):
            nonlocal nodes
            if t == n_tasks:
                if cost >= best_cost:
                    return
                nodes += 1
                leaf(cost)
                return
            free = [a for a in agents if not used[a]]
            bound = 0
            for tt in range(t, n_tasks):
                c = cols[tt]
                bound += min([c[a] for a in free])
            if cost + bound >= best_cost:
                return
            nodes += 1
            col = cols[t]
            for a in free:
                used[a] = True
                current[t] = a
                rec(t + 1, cost + col[a])
                used[a] = False

    if n_tasks == 0:
        return 0, [], 1
    rec(0, 0)
    return best_cost, best_assignment, nodes


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 3 or argv[0] not in VARIANTS:
        sys.exit(f"usage: solve.py {{{'|'.join(VARIANTS)}}} INSTANCE.json OUTPUT.json")
    variant, inst_path, out = argv
    with open(inst_path) as fh:
        inst = json.load(fh)
    t0 = time.process_time()
    cost, assignment, nodes = solve(inst["times"], variant)
    elapsed = time.process_time() - t0
    result = {
        "variant": variant,
        "n_tasks": inst["n_tasks"],
        "n_agents": inst["n_agents"],
        "instance": inst["instance"],
        "cost": cost,
        "nodes": nodes,
        "solve_seconds": round(elapsed, 6),
        "assignment": assignment,
    }
    write_atomic(out, json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
