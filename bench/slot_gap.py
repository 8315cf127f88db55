"""Benchmark 5: emulated GCE with the default polls: a slot's idle gap between two jobs and the
storage operations per job, without prefetch (before) and with the GCE default prefetch (sized to
the jobs' length: 1 until jobs end, then about 360 s of work per slot, at most 8 jobs).

Both runs: the same sleep jobs (no CPU, so the 2-core machine's load hardly matters), the same
fleet of workers with one slot each, the fake Compute Engine and the GCS emulator on loopback,
profile `profiles/gce-emulated` with its demo poll put back to the GCE default (2 s; the slow
poll is the default 15 s). Gap: per worker, its jobs sorted by start, next start minus previous
end on the worker's clock (``started + runtime_s`` in jobs.jsonl: its ``ended`` is when the
coordinator read the result). Operations: requests.json, coordinator plus workers, classified
as the request budget does (A: writes and lists, B: reads).

    python bench/slot_gap.py [--jobs 40] [--seconds 3] [--workers 2]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (REPO, SNAKEMAKE, fmt, machine_line, proc_stat, versions,  # noqa: E402
                    wait_quiet, write_section)
from gce_tail import SNAKEFILE  # noqa: E402

from expo_executor.emulator.compute import FakeCompute  # noqa: E402
from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket  # noqa: E402

GCE_POLL = 2  # the GCE default the emulated profile shortens to 1 for its demo


def gaps(jobs: list[dict]) -> list[float]:
    """Idle seconds of a worker's slot between consecutive jobs (one slot per worker)."""
    by_worker: dict[str, list[dict]] = {}
    for job in jobs:
        by_worker.setdefault(job["worker"], []).append(job)
    out = []
    for runs in by_worker.values():
        runs.sort(key=lambda j: j["started"])
        out += [b["started"] - (a["started"] + a["runtime_s"]) for a, b in zip(runs, runs[1:])]
    return out


def p90(xs: list[float]) -> float | None:
    return sorted(xs)[max(0, math.ceil(0.9 * len(xs)) - 1)] if xs else None


def run_once(label: str, prefetch: int | None, args: argparse.Namespace, storage: str,
             root: Path) -> dict:
    workdir = root / label
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE % args.seconds)
    fake = FakeCompute(root / f"{label}-vms", boot_delay=args.boot).start()
    cmd = [str(SNAKEMAKE), "--workflow-profile", str(REPO / "profiles" / "gce-emulated"),
           "--expocloud-gce-endpoint", fake.endpoint,
           "--default-storage-prefix", f"gs://{fresh_bucket(storage)}/wf",
           "--expocloud-run-id", "bench-gap", "--expocloud-max-workers", str(args.workers),
           "--expocloud-slots-per-worker", "1", "--expocloud-poll-interval", str(GCE_POLL),
           "--config", f"jobs={args.jobs}"]
    if prefetch is not None:
        cmd += ["--expocloud-prefetch", str(prefetch)]
    env = {**os.environ, "STORAGE_EMULATOR_HOST": storage}
    wait_quiet(args.quiet_wait)
    b0, t0 = proc_stat()
    started = time.time()
    try:
        with open(root / f"{label}.log", "w") as log:
            code = subprocess.run(cmd, cwd=workdir, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=1800).returncode
    finally:
        fake.stop()
    wall = time.time() - started
    b1, t1 = proc_stat()
    run_dir = workdir / ".expocloud" / "runs" / "bench-gap"
    jobs = [json.loads(line) for line in (run_dir / "jobs.jsonl").read_text().splitlines()]
    work = [j for j in jobs if j["rule"] == "work" and j["outcome"] == "solved"]
    ops = json.loads((run_dir / "requests.json").read_text())
    worker_a = sum(o.get("A", 0) for o in ops["workers"].values())
    worker_b = sum(o.get("B", 0) for o in ops["workers"].values())
    n = max(len(work), 1)
    g = gaps(work)
    return {"label": label, "code": code, "wall": wall, "jobs": len(work),
            "busy": (b1 - b0) / max(1e-9, t1 - t0), "gap_median": statistics.median(g) if g
            else None, "gap_p90": p90(g), "gaps": len(g), "long": sum(x > 0.5 for x in g),
            "gap_list": [round(x, 2) for x in g],
            "a_job": (ops["coordinator"].get("A", 0) + worker_a) / n,
            "b_job": (ops["coordinator"].get("B", 0) + worker_b) / n,
            "wa_job": worker_a / n, "wb_job": worker_b / n}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--seconds", type=float, default=3.0, help="each job's sleep")
    parser.add_argument("--workers", type=int, default=2, help="--expocloud-max-workers")
    parser.add_argument("--boot", type=float, default=2.0, help="fake VM boot time, s")
    parser.add_argument("--quiet-wait", type=float, default=5.0,
                        help="seconds to wait for a quiet machine before each run")
    args = parser.parse_args()
    storage = EmulatorProcess()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="expocloud-bench-gap-") as tmp:
            for label, prefetch in (("prefetch 0 (before)", 0), ("prefetch sized (default)", None)):
                print(f"running {label} ...", flush=True)
                rows.append(run_once(label.split(" (")[0].replace(" ", "-"), prefetch, args,
                                     storage.endpoint, Path(tmp)))
                rows[-1]["label"] = label
                print(rows[-1], flush=True)
    finally:
        storage.stop()
    table = "\n".join(
        f"| {r['label']} | {r['jobs']} | {fmt(r['wall'], 1)} | {fmt(r['gap_median'], 2)} | "
        f"{fmt(r['gap_p90'], 2)} | {r['long']} of {r['gaps']} | "
        f"{fmt(r['a_job'], 1)} | {fmt(r['b_job'], 1)} | "
        f"{fmt(r['wa_job'], 1)} | {fmt(r['wb_job'], 1)} | {r['busy']:.0%} |" for r in rows)
    write_section("slot-gap", f"""## Benchmark 5: emulated GCE, a slot's idle gap between jobs, prefetch before/after

`python bench/slot_gap.py --jobs {args.jobs} --seconds {args.seconds:g} --workers {args.workers} --boot {args.boot:g}`
({machine_line(versions())}). Fake Compute Engine + faithful GCS emulator on loopback, profile
`profiles/gce-emulated` with the GCE default polls (poll {GCE_POLL} s, slow poll 15 s);
{args.jobs} jobs of `sleep {args.seconds:g}` on {args.workers} workers of 1 slot; run 1 with
`--expocloud-prefetch 0`, run 2 with the GCE default (sized to the jobs: 1 until jobs end,
then about 360 s of work per slot, at most 8, so 8 for these jobs). Gap: per worker, next job's start
minus the previous job's end, both on the worker's clock (from jobs.jsonl). Operations per
job: requests.json (coordinator and workers; A = writes and lists, B = reads, as the request
budget counts them) divided by the jobs solved. Machine busy: all processes, /proc/stat.

| run | jobs solved | wall s | median gap s | p90 gap s | gaps > 0.5 s | class A / job | class B / job | of which workers A / job | workers B / job | machine busy |
|---|---|---|---|---|---|---|---|---|---|---|
{table}

Exit codes {', '.join(str(r['code']) for r in rows)}; target (issue 17): median gap under 0.5 s
with prefetch.
""")
    return 0 if all(r["code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
