#!/usr/bin/env python3
"""Issue 31: the local engine's throughput on a nested sweep, side by side in one invocation.

    .venv/bin/python bench/throughput.py [--points 5000] [--skip before] [--no-results]

Runs, one after the other, each in a fresh copy of a generated sweep of trivial jobs in
nested folders (``results/{a}/{n}/{s}.txt``, :func:`make`):

  (p) snakemake -j 2 --scheduler greedy                        (plain local execution)
  (a) snakemake --executor expocloud -j 1000 --scheduler greedy (each job forked from the
      worker's loaded workflow: worker/loaded_workflow.py)
  (b) the same with EXPOCLOUD_LOADED_WORKFLOW=0: each job forked from the zygote loads the
      workflow itself (the code before issue 31)

``--scheduler greedy`` on expocloud's runs keeps Snakemake's ILP job selection (another part
of issue 31) out of this measurement of dispatch. Every snakemake runs in-process under
bench/snakewrap.py, which separates the main process's CPU from its children's. The section
"throughput" of bench/RESULTS.md is rewritten unless ``--no-results``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (Run, fmt, machine_line, run_snakemake, show_cmd, versions,  # noqa: E402
                    wait_quiet, write_section)

TARGET_VS_PLAIN = 1.5  # issue 31: expocloud's wall within 1.5x plain greedy's

SNAKEFILE = '''\
A, N, S = config["na"], config["nn"], config["ns"]

localrules: all

rule all:
    input: expand("results/{a}/{n}/{s}.txt", a=range(A), n=range(N), s=range(S))

rule point:
    output: "results/{a}/{n}/{s}.txt"
    shell: "echo {wildcards.a} {wildcards.n} {wildcards.s} > {output}"
'''


def shape(points: int) -> tuple[int, int, int]:
    """Three folder levels whose product is ``points`` (10 x 20 x 25 for 5,000)."""
    a = 10 if points % 10 == 0 else 1
    rest = points // a
    n = next(d for d in (20, 10, 5, 4, 2, 1) if rest % d == 0)
    return a, n, rest // n


def make(folder: Path, points: int) -> list[str]:
    """A sweep of ``points`` trivial jobs in ``folder``; the config arguments it needs."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "Snakefile").write_text(SNAKEFILE)
    a, n, s = shape(points)
    return ["--config", f"na={a}", f"nn={n}", f"ns={s}"]


def outputs(folder: Path) -> int:
    return sum(1 for _ in (folder / "results").glob("*/*/*.txt")) \
        if (folder / "results").exists() else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=5000)
    ap.add_argument("--skip", action="append", default=[], choices=["plain", "after", "before"])
    ap.add_argument("--quiet-wait", type=float, default=5.0)
    ap.add_argument("--no-results", action="store_true")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="expo-bench-throughput-"))
    print(f"work dir {base}", flush=True)
    started = time.time()
    variants = [("plain", ["-j", "2", "--scheduler", "greedy"], {}),
                ("after", ["--executor", "expocloud", "-j", "1000", "--scheduler", "greedy"], {}),
                ("before", ["--executor", "expocloud", "-j", "1000", "--scheduler", "greedy"],
                 {"EXPOCLOUD_LOADED_WORKFLOW": "0"})]
    runs: dict[str, tuple[Run, list[str], int, float]] = {}
    for name, cli, env in variants:
        if name in args.skip:
            continue
        folder = base / name
        config = make(folder, args.points)
        print(f"[{time.time() - started:5.0f} s] ({name}) {show_cmd(cli + config)}", flush=True)
        busy = wait_quiet(args.quiet_wait)
        run = run_snakemake(name, cli + config, folder, base / f"{name}.log",
                            env={**os.environ, **env}, timeout=7200)
        done = outputs(folder)
        runs[name] = (run, cli + config, done, busy)
        print(f"    wall {run.wall_s:.1f} s, exit {run.exit_code}, outputs {done}"
              f"/{args.points}, {args.points / run.wall_s:.2f} jobs/s", flush=True)
    md = report(args.points, runs, time.time() - started)
    print(md)
    if not args.no_results:
        write_section("throughput", md)
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if all(r.exit_code == 0 for r, *_ in runs.values()) else 1


def report(points: int, runs: dict, total_s: float) -> str:
    v = versions()
    lines = ["## Issue 31: throughput, a nested sweep on the local engine", "",
             f"Reproduce: `.venv/bin/python bench/throughput.py --points {points}`. "
             + machine_line(v) + f" Measured {time.strftime('%Y-%m-%d %H:%M')}, whole script "
             f"{total_s:.0f} s; load average at the end {os.getloadavg()[0]:.1f}.", "",
             "| variant | command | wall | jobs/s | main process CPU per job | children CPU "
             "per job | other processes' share |", "|---|---|---:|---:|---:|---:|---:|"]
    for name, (run, cli, done, _) in runs.items():
        cpu = run.wrap.get("self_cpu_s")
        lines.append(
            f"| {name} | `{show_cmd(cli)}`{'' if name != 'before' else ' with EXPOCLOUD_LOADED_WORKFLOW=0'}"
            f" | {run.wall_s:.1f} s | {points / run.wall_s:.2f} | "
            f"{fmt(cpu / points * 1000 if cpu else None, 1)} ms | "
            f"{run.children_cpu_s / points * 1000:.1f} ms | {run.foreign_share:.0%} |"
            + ("" if run.exit_code == 0 and done == points
               else f" (exit {run.exit_code}, {done}/{points} outputs)"))
    plain = runs.get("plain")
    for name in ("after", "before"):
        if plain and name in runs:
            ratio = runs[name][0].wall_s / plain[0].wall_s
            lines += ["", f"{name} / plain wall: **{ratio:.2f}** (target <= {TARGET_VS_PLAIN}: "
                      f"{'met' if ratio <= TARGET_VS_PLAIN else 'not met'})"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
