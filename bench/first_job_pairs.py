#!/usr/bin/env python3
"""Issue 31, point 4: the time to the first job on the emulated GCE path against plain
Snakemake's DAG time, as interleaved pairs, so that one noisy run does not decide the ratio.

    python bench/first_job_pairs.py [--points 5000] [--pairs 5] [--boot 2] [--latency 0.03]
                                    [--gce-max-seconds 14] [--quiet-wait 5] [--results]

Each pair runs, one after the other in fresh folders (the runs of bench/sweep_scale.py):
  (1) ``snakemake -n -j 1 --quiet``: plain Snakemake's DAG time (process start to exit);
  (2) ``snakemake --profile profiles/gce-emulated`` against the GCS emulator behind a proxy
      holding each storage call ``--latency`` s, and the fake Compute Engine (VMs boot in
      ``--boot`` s), stopped with Ctrl-C after ``--gce-max-seconds``.
From run (2)'s vms.jsonl, jobs.jsonl and bench/snakewrap.py: when Snakemake's DAG was done (the
executor's start), the first VM was created, Snakemake first handed jobs to the executor, a
worker was first ready (its key granted) and the first job started on it, each from the
process's start. The ratio is the first job's start over
run (1)'s wall. A pair's runs are back to back, so both meet the same machine; the median and
range over the pairs are what the issue's target is judged on. ``--results`` appends the table
to bench/RESULTS.md as its own section.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import REPO, fmt, machine_line, versions  # noqa: E402
from sweep_scale import (PLAIN_DAG, CountingProxy, Plan, emulated_storage,  # noqa: E402
                         gce_expocloud, local_run)

SECTION = "Issue 31: the first job on GCE, interleaved pairs (`bench/first_job_pairs.py`)"


def one_pair(plan: Plan, points: int, proxy: CountingProxy, env: dict, log) -> dict:
    dag = local_run(plan, "plain dry run (DAG)", points, PLAIN_DAG, {**os.environ})
    gce = gce_expocloud(plan, points, proxy, env, log)
    row = {"dag_s": dag.wall_s, "gce_dag_done_s": gce.dag_done_s, "first_vm_s": gce.first_vm_s,
           "first_handed_s": gce.first_handed_s, "first_ready_s": gce.first_ready_s,
           "first_start_s": gce.first_start_s,
           "first_output_s": gce.first_output_s, "vms_left": gce.vms_left,
           "load": gce.load}
    row["ratio"] = gce.first_start_s / dag.wall_s if gce.first_start_s else None
    for name in ("plain-dry-run-dag", "gce-expocloud", "vms"):  # the next pair's folders fresh
        _remove(plan.base / f"{points}-{name}")
    return row


def _remove(path: Path) -> None:
    import shutil
    shutil.rmtree(path, ignore_errors=True)


def table(rows: list[dict]) -> list[str]:
    L = ["| pair | plain DAG s | GCE: DAG done | first VM created | first jobs handed over | "
         "first worker ready | first job started | first output | first job / plain DAG | "
         "VMs left | load after |",
         "|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, r in enumerate(rows, 1):
        L.append(f"| {i} | {r['dag_s']:.1f} | {fmt(r['gce_dag_done_s'], 1)} | "
                 f"{fmt(r['first_vm_s'], 1)} | {fmt(r['first_handed_s'], 1)} | "
                 f"{fmt(r['first_ready_s'], 1)} | "
                 f"{fmt(r['first_start_s'], 1)} | {fmt(r['first_output_s'], 1)} | "
                 f"{fmt(r['ratio'])} | {fmt(r['vms_left'], 0)} | {r['load']} |")
    return L


def summary(rows: list[dict]) -> list[str]:
    ratios = sorted(r["ratio"] for r in rows if r["ratio"] is not None)
    if not ratios:
        return ["No run started a job."]
    after = [r["first_start_s"] - r["gce_dag_done_s"] for r in rows
             if r["first_start_s"] is not None and r["gce_dag_done_s"] is not None]
    handed = [r["first_handed_s"] / r["dag_s"] for r in rows if r["first_handed_s"] is not None]
    return [f"First job started on a worker / plain DAG over {len(ratios)} pairs: median "
            f"{statistics.median(ratios):.2f}, range {ratios[0]:.2f}-{ratios[-1]:.2f}, "
            f"{sum(1 for x in ratios if x <= 2.0)} of {len(ratios)} within 2x. From Snakemake's "
            f"DAG done to the first job: median {statistics.median(after):.1f} s "
            f"(range {min(after):.1f}-{max(after):.1f} s)."
            + (f" First jobs handed over to the executor / plain DAG: median "
               f"{statistics.median(handed):.2f}." if handed else "")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5000)
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--boot", type=float, default=2.0, help="fake VM boot time, s")
    ap.add_argument("--latency", type=float, default=0.03, help="s added to each storage call")
    ap.add_argument("--gce-max-seconds", type=float, default=14.0)
    ap.add_argument("--quiet-wait", type=float, default=5.0,
                    help="seconds to wait for a quieter machine before each run")
    ap.add_argument("--results", action="store_true", help="append the table to RESULTS.md")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="expo-bench-first-job-"))
    plan = Plan(base, {args.points: 60.0}, {args.points: args.gce_max_seconds}, 30.0,
                args.latency, args.quiet_wait, args.boot)
    began = time.time()

    def log(text: str) -> None:
        print(f"[{time.time() - began:6.0f} s] {text}", flush=True)

    rows = []
    try:
        with emulated_storage(plan) as (proxy, env):
            for i in range(args.pairs):
                rows.append(one_pair(plan, args.points, proxy, env, log))
                log(f"pair {i + 1}: " + table(rows)[-1])
    finally:
        _remove(base)
    text = [f"## {SECTION}",
            f"`PYTHONPATH=. .venv/bin/python bench/first_job_pairs.py --points {args.points} "
            f"--pairs {args.pairs} --boot {args.boot:g} --latency {args.latency:g} "
            f"--gce-max-seconds {args.gce_max_seconds:g} --quiet-wait {args.quiet_wait:g}` "
            f"(whole script {time.time() - began:.0f} s; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}). "
            f"{machine_line(versions())}", "", *table(rows), "", *summary(rows), ""]
    print("\n".join(text))
    if args.results:
        with open(REPO / "bench" / "RESULTS.md", "a") as out:
            out.write("\n" + "\n".join(text))
    return 0 if all(r["vms_left"] in (0, None) for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
