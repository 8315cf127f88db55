#!/usr/bin/env python3
"""Seeded instance generator for the agent-assignment problem.

Usage: python scripts/generate.py N_TASKS N_AGENTS INSTANCE OUTPUT.json

times[a][t] is the (integer) number of seconds agent ``a`` needs for task ``t``.
The random seed is derived only from (n_tasks, n_agents, instance), so
re-running the generator gives byte-identical files.
"""
import hashlib
import json
import random
import sys

from atomic import write_atomic

MIN_TIME = 1
MAX_TIME = 100


def derive_seed(n_tasks, n_agents, instance):
    key = f"agent-assignment/{int(n_tasks)}/{int(n_agents)}/{int(instance)}".encode()
    return int.from_bytes(hashlib.sha256(key).digest()[:8], "big")


def generate(n_tasks, n_agents, instance):
    n_tasks, n_agents, instance = int(n_tasks), int(n_agents), int(instance)
    if n_tasks < 1 or n_agents < n_tasks:
        raise ValueError(f"need 1 <= n_tasks <= n_agents, got n_tasks={n_tasks}, n_agents={n_agents}")
    seed = derive_seed(n_tasks, n_agents, instance)
    rng = random.Random(seed)
    times = [[rng.randint(MIN_TIME, MAX_TIME) for _ in range(n_tasks)] for _ in range(n_agents)]
    return {"n_tasks": n_tasks, "n_agents": n_agents, "instance": instance,
            "seed": seed, "times": times}


def dumps(data):
    return json.dumps(data, separators=(", ", ": ")) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 4:
        sys.exit("usage: generate.py N_TASKS N_AGENTS INSTANCE OUTPUT.json")
    n_tasks, n_agents, instance, out = argv
    write_atomic(out, dumps(generate(n_tasks, n_agents, instance)))


if __name__ == "__main__":
    main()
