#!/usr/bin/env python3
"""Measure solve.py per (variant, n_tasks, n_agents) to size the sweep.

Runs ``python scripts/solve.py`` as its own process (so interpreter start-up is
included in the wall time) for every grid point and instance, one at a time,
killing it after --cap seconds of wall time. Prints, per variant, a Markdown
matrix (rows n_tasks, columns n_agents) of the worst solve_seconds (CPU seconds
of the search) over the instances; ">cap" marks a run that was killed.

Example:
  python scripts/time_sizes.py --n-tasks 6,10,14,18,22 --n-agents 10,14,18,22 \
      --instances 3 --cap 8
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from generate import dumps, generate  # noqa: E402

VARIANTS = ("heuristic", "bnb", "brute")


def ints(s):
    return [int(x) for x in s.split(",") if x.strip()]


def run_one(variant, inst_path, out_path, cap):
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "solve.py"), variant, inst_path, out_path],
                            start_new_session=True)
    try:
        proc.wait(timeout=cap)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return None, None, None
    wall = time.monotonic() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"solve.py failed ({proc.returncode}) on {inst_path}")
    with open(out_path) as fh:
        res = json.load(fh)
    return res["solve_seconds"], wall, res["nodes"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--n-tasks", type=ints, required=True)
    ap.add_argument("--n-agents", type=ints, required=True)
    ap.add_argument("--instances", type=int, default=3)
    ap.add_argument("--cap", type=float, default=8.0, help="wall seconds before a run is killed")
    ap.add_argument("--tsv", help="also write every single run here")
    ap.add_argument("--detail", action="store_true", help="print every run to stderr")
    args = ap.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    rows = []
    fmt = lambda x: f">{args.cap:g}" if x is None else f"{x:.2f}"
    with tempfile.TemporaryDirectory() as tmp:
        for v in variants:
            worst = {}
            for t in args.n_tasks:
                for a in args.n_agents:
                    if a < t:
                        continue
                    secs = []
                    for i in range(args.instances):
                        ip = os.path.join(tmp, f"{t}_{a}_{i}.json")
                        if not os.path.exists(ip):
                            with open(ip, "w") as fh:
                                fh.write(dumps(generate(t, a, i)))
                        s, w, n = run_one(v, ip, os.path.join(tmp, "out.json"), args.cap)
                        rows.append((v, t, a, i, s, w, n))
                        secs.append(s)
                        if args.detail:
                            print(f"{v} n_tasks={t} n_agents={a} instance={i}: solve_seconds={fmt(s)} "
                                  f"wall={fmt(w)} nodes={n}", file=sys.stderr, flush=True)
                    worst[t, a] = None if any(s is None for s in secs) else max(secs)
            print(f"\n{v}: worst solve_seconds over instances 0..{args.instances - 1} "
                  f"(rows n_tasks, columns n_agents)\n")
            print("| n_tasks \\ n_agents | " + " | ".join(str(a) for a in args.n_agents) + " |")
            print("|---:|" + "---:|" * len(args.n_agents))
            for t in args.n_tasks:
                cells = [fmt(worst[t, a]) if (t, a) in worst else "" for a in args.n_agents]
                print(f"| {t} | " + " | ".join(cells) + " |", flush=True)
    if args.tsv:
        with open(args.tsv, "w") as fh:
            fh.write("variant\tn_tasks\tn_agents\tinstance\tsolve_seconds\twall\tnodes\n")
            for r in rows:
                fh.write("\t".join("" if x is None else str(x) for x in r) + "\n")


if __name__ == "__main__":
    main()
