"""Benchmark 3: the emulated GCE path under injected preemptions, with and without the
straggler rule.

Both runs use the same workflow (sleep jobs: no CPU contention on this small machine), the same
fleet caps and the same preemption draws: the fake Compute Engine draws each Spot VM's life from
``Random(f"{seed}:{vm name}")`` and both runs carry the same run id (in separate work
directories), so their VMs have the same names and lives. Measured from the runs' own records:
VM-seconds per job-second (what the fleet cost per unit of useful work) and the tail, the time
from 99% to 100% of jobs done.

    python bench/gce_tail.py [--jobs 120] [--seconds 4] [--mean-life 25] [--seed 3]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import REPO, SNAKEMAKE, fmt, machine_line, versions, write_section  # noqa: E402

from expo_executor.emulator.compute import FakeCompute  # noqa: E402
from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket  # noqa: E402

SNAKEFILE = """
N = int(config["jobs"])
rule all:
    input: expand("out/{i}.txt", i=range(N))

rule work:
    output: "out/{i}.txt"
    shell: "sleep %s; echo {wildcards.i} > {output}"
"""


def run_once(label: str, straggler: bool, args: argparse.Namespace, storage: str,
             root: Path) -> dict:
    workdir = root / label
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE % args.seconds)
    fake = FakeCompute(root / f"{label}-vms", boot_delay=args.boot, notice_s=1.0).start()
    fake.chaos(args.mean_life, args.seed)
    cmd = [str(SNAKEMAKE), "--workflow-profile", str(REPO / "profiles" / "gce-emulated"),
           "--expocloud-gce-endpoint", fake.endpoint,
           "--default-storage-prefix", f"gs://{fresh_bucket(storage)}/wf",
           "--expocloud-run-id", "bench-tail", "--expocloud-max-workers", str(args.spot),
           "--expocloud-max-on-demand", str(args.on_demand),
           "--expocloud-spot-attempts", str(args.spot_attempts),
           "--config", f"jobs={args.jobs}"]
    if not straggler:
        cmd.append("--expocloud-no-straggler-rule")
    env = {**os.environ, "STORAGE_EMULATOR_HOST": storage}
    started = time.time()
    try:
        with open(root / f"{label}.log", "w") as log:
            code = subprocess.run(cmd, cwd=workdir, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, timeout=3600).returncode
    finally:
        fake.stop()
    wall = time.time() - started
    run_dir = workdir / ".expocloud" / "runs" / "bench-tail"
    jobs = [json.loads(line) for line in (run_dir / "jobs.jsonl").read_text().splitlines()]
    vms = [json.loads(line) for line in (run_dir / "vms.jsonl").read_text().splitlines()]
    work = [j for j in jobs if j["rule"] == "work" and j["outcome"] == "solved"]
    ends = sorted(j["ended"] for j in work)
    p99 = ends[max(0, math.ceil(0.99 * len(ends)) - 1)]
    p90 = ends[max(0, math.ceil(0.90 * len(ends)) - 1)]
    vm_seconds = {"spot": 0.0, "on_demand": 0.0}
    for vm in vms:
        if vm["end"] != "not created":
            vm_seconds[vm["pool"]] += vm["ended"] - vm["created"]
    job_seconds = sum(j["runtime_s"] or 0 for j in work)
    return {"label": label, "code": code, "wall": wall, "jobs": len(work),
            "tail": ends[-1] - p99, "tail90": ends[-1] - p90, "last_end": ends[-1] - started,
            "vm_spot": vm_seconds["spot"], "vm_od": vm_seconds["on_demand"],
            "vm_per_job_s": sum(vm_seconds.values()) / max(job_seconds, 1e-9),
            "preempted_vms": sum(1 for vm in vms if vm["end"] == "preempted"),
            "preempted_jobs": sum(j["preemptions"] for j in work),
            "tail_on_od": sum(1 for j in work if j["ended"] >= p99 and j["pool"] == "on_demand")}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--seconds", type=float, default=4.0, help="each job's sleep")
    parser.add_argument("--mean-life", type=float, default=25.0, help="Spot VM mean life, s")
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--spot", type=int, default=4, help="--expocloud-max-workers")
    parser.add_argument("--on-demand", type=int, default=2, help="--expocloud-max-on-demand")
    parser.add_argument("--boot", type=float, default=2.0, help="fake VM boot time, s")
    parser.add_argument("--spot-attempts", type=int, default=2)
    parser.add_argument("--name", default="a", help="section name in RESULTS.md")
    args = parser.parse_args()
    storage = EmulatorProcess()
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="expocloud-bench-tail-") as tmp:
            for label, straggler in (("with-rule", True), ("without-rule", False)):
                print(f"running {label} ...", flush=True)
                rows.append(run_once(label, straggler, args, storage.endpoint, Path(tmp)))
                print(rows[-1], flush=True)
    finally:
        storage.stop()
    v = versions()
    table = "\n".join(
        f"| {r['label']} | {r['jobs']} | {fmt(r['last_end'], 1)} | {fmt(r['tail'], 1)} | "
        f"{fmt(r['tail90'], 1)} | "
        f"{r['preempted_vms']} | {r['preempted_jobs']} | {fmt(r['vm_spot'], 0)} | "
        f"{fmt(r['vm_od'], 0)} | {fmt(r['vm_per_job_s'], 2)} |" for r in rows)
    with_rule, without = rows
    ratio = with_rule["tail"] / without["tail"] if without["tail"] else float("nan")
    write_section(f"gce-tail-{args.name}", f"""## Benchmark 3{args.name}: emulated GCE, preemptions, the straggler rule

`python bench/gce_tail.py --jobs {args.jobs} --seconds {args.seconds:g} --mean-life {args.mean_life:g} --seed {args.seed} --spot {args.spot} --on-demand {args.on_demand} --boot {args.boot:g} --spot-attempts {args.spot_attempts}`
({machine_line(v)}). Fake Compute Engine + faithful GCS emulator on loopback, profile
`profiles/gce-emulated`; {args.jobs} jobs of `sleep {args.seconds:g}`; at most {args.spot} Spot and
{args.on_demand} on-demand VMs of one slot, {args.boot:g} s boot, spot attempts
{args.spot_attempts}; each Spot VM preempted after an exponential life of mean
{args.mean_life:g} s drawn from the same seed and VM name in both runs (the same names get the
same lives; the runs create different numbers of VMs, so the draws diverge after the first).
Tail = time from 99% to 100% of jobs done. VM-s per job-s = VM-seconds of both pools divided by
the summed job runtimes.

| run | jobs solved | last job done, s | tail 99-100% s | tail 90-100% s | VMs preempted | job preemptions | Spot VM-s | on-demand VM-s | VM-s per job-s |
|---|---|---|---|---|---|---|---|---|---|
{table}

Tail with the rule / without: **{fmt(ratio, 2)}**; exit codes {with_rule['code']}, {without['code']}.
""")
    return 0 if all(r["code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
