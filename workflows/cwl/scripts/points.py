#!/usr/bin/env python3
"""The sweep's instance points, as the Snakefile's POINTS: every (n_tasks, n_agents) with
n_agents >= n_tasks (a distinct agent per task), times every instance index.

Usage: python points.py --n-tasks 6 10 --n-agents 10 14 --instances 0 1

Writes cwl.output.json (CWL's way for a CommandLineTool to return typed outputs), so the
workflow filters the cross product without JavaScript.
"""
import argparse
import json


def points(n_tasks, n_agents, instances):
    return [{"n_tasks": t, "n_agents": a, "instance": i}
            for t in n_tasks for a in n_agents if a >= t for i in instances]


def main(argv=None):
    p = argparse.ArgumentParser()
    for flag in ("--n-tasks", "--n-agents", "--instances"):
        p.add_argument(flag, type=int, nargs="*", default=[])
    args = p.parse_args(argv)
    with open("cwl.output.json", "w") as fh:
        json.dump({"points": points(args.n_tasks, args.n_agents, args.instances)}, fh)


if __name__ == "__main__":
    main()
