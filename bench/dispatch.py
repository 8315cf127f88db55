#!/usr/bin/env python3
"""Benchmark 1: dispatch overhead of 300 trivial jobs, side by side in one invocation.

    .venv/bin/python bench/dispatch.py --orig PATH   # full run, refreshes bench/RESULTS.md

PATH is a checkout of the original ExpoCloud (github.com/mgoldenbe/ExpoCloud); without --orig
variant (e) is left out.

Runs, one after the other, each in a fresh copy of a generated workflow
(``rule t: output: "out/{i}.txt"; shell: "echo {wildcards.i} > {output}"`` plus ``rule all``):

  (a) snakemake --executor expocloud -j 1000              (default settings of the local engine)
  (b) snakemake --executor cluster-generic -j 2 with an asynchronous local submit script and
      cluster-generic's default status interval, on a subset (--cg-jobs, default 60), scaled
  (c) snakemake -j 2                                       (plain local execution)
  (d) one job's own snakemake process, N times in a row: the exact command an expocloud worker
      ran (taken from a worker's job log), for its CPU (user+sys) and wall time.
  (e) the original ExpoCloud on the same number of trivial tasks (bench/expocloud_orig.py: its
      local engine, one client with as many worker processes as expocloud has slots).

Every snakemake runs in-process under bench/snakewrap.py so that the main process's own CPU
(and the coordinator thread's) can be separated from its children's.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (BENCH, CORES, PYTHON, Run, fmt, last_json_line, machine_line,  # noqa: E402
                    run_snakemake, run_timed, show_cmd, versions, wait_quiet, write_section)

# issue 17's targets for benchmark 1
TARGET_VS_ORIGINAL = 2.0    # expocloud tasks/s >= 2x the original ExpoCloud's
TARGET_VS_PLAIN = 6.0       # expocloud wall <= 6x plain `snakemake -j 2`'s
TARGET_JOB_CPU_S = 0.35     # CPU on the worker per trivial job

SNAKEFILE = '''\
N = int(config.get("njobs", 300))

localrules: all

rule all:
    input: expand("out/{i}.txt", i=range(N))

rule t:
    output: "out/{i}.txt"
    shell: "echo {wildcards.i} > {output}"
'''

# Asynchronous local "cluster": start the jobscript in the background and print its pid as the
# job id. /usr/bin/time appends the job's CPU to $BENCH_CG_CPU (the job is orphaned, so no rusage
# of ours would ever see it). cluster-generic learns of completion from the jobscript's markers.
SUBMIT_SH = '''\
#!/bin/bash
jobscript="${@: -1}"
log="$BENCH_CG_LOGDIR/$(basename "$jobscript").log"
if [ -x /usr/bin/time ]; then
  nohup /usr/bin/time -a -o "$BENCH_CG_CPU" -f "%e %U %S" /bin/bash "$jobscript" > "$log" 2>&1 &
else
  nohup /bin/bash "$jobscript" > "$log" 2>&1 &
fi
echo $!
'''


def make_template(base: Path) -> Path:
    tpl = base / "template"
    tpl.mkdir(parents=True)
    (tpl / "Snakefile").write_text(SNAKEFILE)
    submit = base / "submit.sh"
    submit.write_text(SUBMIT_SH)
    submit.chmod(0o755)
    return tpl


def fresh(base: Path, tpl: Path, name: str) -> Path:
    d = base / name
    shutil.copytree(tpl, d)
    return d


def check_outputs(d: Path, n: int) -> int:
    return sum(1 for i in range(n) if (d / "out" / f"{i}.txt").is_file())


def job_command_from_logs(workdir: Path) -> list[str] | None:
    """The command line one expocloud job ran, from the 'Command:' line of a worker job log."""
    for log in sorted(workdir.glob(".expocloud/runs/*/vms/*/jobs/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            line = line.strip()
            if line.startswith("Command:"):
                argv = shlex.split(line[len("Command:"):])
                if argv and argv[0].endswith("__main__.py"):
                    argv = [PYTHON, "-m", "snakemake", *argv[1:]]
                out, skip = [], False
                for a in argv:  # its wait-for-files dir was removed with the run
                    if skip:
                        skip = False
                        continue
                    if a == "--wait-for-files":
                        skip = True
                        continue
                    out.append(a)
                return out
    return None


def retarget(argv: list[str], i: int) -> list[str]:
    return [f"t:i={i}" if a.startswith("t:i=") else a for a in argv]


def jobs_records(workdir: Path) -> list[dict]:
    recs = []
    for f in workdir.glob(".expocloud/runs/*/jobs.jsonl"):
        recs += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return recs


def slot_gaps(recs: list[dict]) -> tuple[float | None, float | None]:
    """Idle time of a worker slot between one job's end and the next job's start.

    The records name the worker, not the slot: a worker's slots are taken to be as many as its
    jobs ever overlapped, and each job to take the slot freed last before it started."""
    gaps = []
    for rs in by_worker(recs).values():
        rs.sort(key=lambda r: r["started"])
        slot_ends: list[float] = [rs[0]["started"] + rs[0]["runtime_s"]]
        for r in rs[1:]:
            free = [e for e in slot_ends if e <= r["started"]]
            if free:
                k = slot_ends.index(max(free))
                gaps.append(r["started"] - slot_ends[k])
                slot_ends[k] = r["started"] + r["runtime_s"]
            else:  # every slot busy: this job opened another slot of the worker
                slot_ends.append(r["started"] + r["runtime_s"])
    if not gaps:
        return None, None
    return statistics.median(gaps), statistics.mean(gaps)


def by_worker(recs: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in recs:
        if r.get("worker") and r.get("started") and r.get("runtime_s") is not None:
            out.setdefault(r["worker"], []).append(r)
    return out


def fleet_shape(recs: list[dict]) -> str:
    """'N worker(s) x S slots' as the run's records show it (most jobs at once per worker)."""
    workers = by_worker(recs)
    most = 0
    for rs in workers.values():
        edges = sorted([(r["started"], 1) for r in rs]
                       + [(r["started"] + r["runtime_s"], -1) for r in rs])
        now = 0
        for _, step in edges:
            now += step
            most = max(most, now)
    return f"{len(workers)} worker(s) x {most} slot(s)"


def jobs_span(recs: list[dict]) -> float | None:
    """First job start to last job end on the workers: the dispatching part of the run."""
    timed = [r for r in recs if r.get("started") and r.get("runtime_s") is not None]
    if not timed:
        return None
    return (max(r["started"] + r["runtime_s"] for r in timed)
            - min(r["started"] for r in timed))


def rate(tasks: int, seconds: float | None) -> float | None:
    return tasks / seconds if seconds else None


def probe_exit_lag(job_cmd: list[str], workdir: Path, base: Path, runs: int) -> dict:
    """Run the job command through jobprobe.py: how long after main() returns does it exit?"""
    lags, lingering = [], set()
    argv = [PYTHON, str(BENCH / "jobprobe.py"), *job_cmd[3:]]  # job_cmd = python -m snakemake
    for i in range(runs):
        out = base / f"probe{i}.json"
        with open(base / f"probe{i}.log", "wb") as log:
            subprocess.run(retarget(argv, 200 + i), cwd=workdir, stdout=log,
                           stderr=subprocess.STDOUT, env={**os.environ, "BENCH_PROBE_OUT": str(out)})
        reaped = time.time()
        try:
            data = json.loads(out.read_text())
        except (OSError, ValueError):
            continue
        lags.append(reaped - data["main_returned"])
        lingering.update(data["lingering"])
    return {"lags": lags, "lingering": sorted(lingering)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=300, help="jobs for expocloud and plain runs")
    ap.add_argument("--cg-jobs", type=int, default=30, help="jobs for the cluster-generic run")
    ap.add_argument("--single", type=int, default=10, help="repetitions of one job's process")
    ap.add_argument("--quiet-wait", type=float, default=5.0,
                    help="seconds to wait for other processes to calm down before each run")
    ap.add_argument("--orig", type=Path,
                    help="checkout of github.com/mgoldenbe/ExpoCloud for variant (e)")
    ap.add_argument("--orig-backup", action="store_true",
                    help="(e) with the original's backup server (off by default)")
    ap.add_argument("--skip", action="append", default=[],
                    choices=["expocloud", "cluster-generic", "plain", "original"])
    ap.add_argument("--no-results", action="store_true", help="do not touch bench/RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = ap.parse_args()
    if args.orig is not None:
        from expocloud_orig import check_checkout
        args.orig = args.orig.resolve()
        check_checkout(args.orig)

    v = versions()
    base = Path(tempfile.mkdtemp(prefix="expo-bench-dispatch-"))
    tpl = make_template(base)
    print(f"work dir {base}", flush=True)
    n, ncg = args.jobs, args.cg_jobs
    runs: dict[str, Run] = {}
    notes: list[str] = []
    started = time.time()

    def announce(what: str) -> None:
        print(f"[{time.time() - started:6.0f} s] {what}", flush=True)

    # (a) expocloud ------------------------------------------------------------------------
    expo_args = ["--executor", "expocloud", "-j", "1000", "--config", f"njobs={n}"]
    if "expocloud" not in args.skip:
        d = fresh(base, tpl, "expocloud")
        announce(f"(a) {show_cmd(expo_args)}  [{n} jobs]")
        wait_quiet(args.quiet_wait, log=announce)
        r = run_snakemake("expocloud", expo_args, d, base / "expocloud.log", timeout=3600)
        r.wrap["outputs_ok"] = check_outputs(d, n)
        recs = jobs_records(d)
        r.wrap["job_runtime_median_s"] = (statistics.median(x["runtime_s"] for x in recs
                                                            if x.get("runtime_s") is not None)
                                          if recs else None)
        r.wrap["jobs_solved"] = sum(1 for x in recs if x.get("outcome") == "solved")
        r.wrap["slot_gap_median_s"], r.wrap["slot_gap_mean_s"] = slot_gaps(recs)
        r.wrap["span_s"] = jobs_span(recs)
        r.wrap["fleet"] = fleet_shape(recs)
        runs["expocloud"] = r
        announce(f"    wall {r.wall_s:.1f} s, exit {r.exit_code}, outputs {r.wrap['outputs_ok']}/{n}")

    # (d) one job's own snakemake process ------------------------------------------------------
    single: list[Run] = []
    job_cmd = job_command_from_logs(base / "expocloud") if "expocloud" in runs else None
    if job_cmd is None:
        d = base / "expocloud" if (base / "expocloud").exists() else fresh(base, tpl, "single")
        job_cmd = [PYTHON, "-m", "snakemake", "--snakefile", str(d / "Snakefile"), "--cores",
                   "1", "out/0.txt", "--force", "--config", f"njobs={n}"]
        notes.append("The single-job command was not found in a worker log; a plain "
                     "`python -m snakemake --cores 1 out/<i>.txt --force` was timed instead.")
        single_dir = d
    else:
        single_dir = base / "expocloud"
    announce(f"(d) one job's process x{args.single}: {' '.join(job_cmd)[:160]}...")
    wait_quiet(args.quiet_wait, log=announce)
    for i in range(args.single):
        single.append(run_timed(f"single{i}", retarget(job_cmd, i), single_dir,
                                base / f"single{i}.log", timeout=600))
    bad = [s for s in single if s.exit_code != 0]
    if bad:
        notes.append(f"{len(bad)} of {len(single)} single-job runs failed (see logs).")
    job_cpu = statistics.mean(s.children_cpu_s for s in single)
    job_wall = statistics.mean(s.wall_s for s in single)
    announce(f"    one job: {job_cpu:.3f} s CPU, {job_wall:.3f} s wall (means)")
    probe = (probe_exit_lag(job_cmd, single_dir, base, 3)
             if job_cmd[1:3] == ["-m", "snakemake"] else {"lags": [], "lingering": []})
    if probe["lags"]:
        announce(f"    exit lag after main() returned: {statistics.mean(probe['lags']):.2f} s "
                 f"(non-daemon threads: {', '.join(probe['lingering']) or 'none'})")

    # (b) cluster-generic ------------------------------------------------------------------
    submit = base / "submit.sh"
    cg_args = ["--executor", "cluster-generic", "--cluster-generic-submit-cmd",
               f"{submit}", "-j", "2", "--config", f"njobs={ncg}"]
    if "cluster-generic" not in args.skip:
        d = fresh(base, tpl, "cluster-generic")
        (d / "cglogs").mkdir()
        cpu_file = d / "cg_cpu.txt"
        env = {**os.environ, "BENCH_CG_LOGDIR": str(d / "cglogs"),
               "BENCH_CG_CPU": str(cpu_file)}
        announce(f"(b) {show_cmd(cg_args)}  [{ncg} jobs]")
        wait_quiet(args.quiet_wait, log=announce)
        r = run_snakemake("cluster-generic", cg_args, d, base / "cluster-generic.log", env=env,
                          timeout=3600)
        r.wrap["outputs_ok"] = check_outputs(d, ncg)
        jobs_cpu = jobs_wall = 0.0
        count = 0
        if cpu_file.exists():
            for line in cpu_file.read_text().splitlines():
                parts = line.split()
                if len(parts) == 3:
                    try:
                        e, u, s = map(float, parts)
                    except ValueError:
                        continue
                    jobs_cpu += u + s
                    jobs_wall += e
                    count += 1
        r.extra_cpu_s = jobs_cpu
        r.wrap["jobs_timed"] = count
        r.wrap["job_cpu_mean_s"] = jobs_cpu / count if count else None
        r.wrap["job_wall_mean_s"] = jobs_wall / count if count else None
        runs["cluster-generic"] = r
        announce(f"    wall {r.wall_s:.1f} s, exit {r.exit_code}, outputs {r.wrap['outputs_ok']}/{ncg}")

    # (c) plain local ----------------------------------------------------------------------
    plain_args = ["-j", "2", "--config", f"njobs={n}"]
    if "plain" not in args.skip:
        d = fresh(base, tpl, "plain")
        announce(f"(c) {show_cmd(plain_args)}  [{n} jobs]")
        wait_quiet(args.quiet_wait, log=announce)
        r = run_snakemake("plain", plain_args, d, base / "plain.log", timeout=3600)
        r.wrap["outputs_ok"] = check_outputs(d, n)
        runs["plain"] = r
        announce(f"    wall {r.wall_s:.1f} s, exit {r.exit_code}, outputs {r.wrap['outputs_ok']}/{n}")

    # (e) the original ExpoCloud ----------------------------------------------------------
    if args.orig is not None and "original" not in args.skip:
        announce(f"(e) the original ExpoCloud at {args.orig}  [{n} tasks]")
        wait_quiet(args.quiet_wait, log=announce)
        argv = [PYTHON, str(BENCH / "expocloud_orig.py"), "--orig", str(args.orig),
                "--tasks", str(n), "--slots", str(CORES), "--workdir", str(base / "original")]
        if args.orig_backup:
            argv.append("--backup")
        r = run_timed("original", argv, base, base / "original.log", timeout=3600)
        r.wrap = last_json_line(base / "original.log")
        if not r.wrap:
            r.exit_code = r.exit_code or -1
            notes.append("The original ExpoCloud's run printed no result line (see its log).")
        else:
            r.exit_code = r.wrap["exit_code"]
            r.wall_s = r.wrap["wall_s"]  # its server's lifetime, not the client's 5 s BYE tail
        runs["original"] = r
        announce(f"    wall {r.wall_s:.1f} s, exit {r.exit_code}, outputs "
                 f"{r.wrap.get('outputs_ok')}/{n}")

    # -- figures ----------------------------------------------------------------------------
    md = report(args, v, runs, single, job_cmd, job_cpu, job_wall, notes, expo_args, cg_args,
                plain_args, time.time() - started, probe)
    print()
    print(md)
    if not args.no_results:
        write_section("dispatch", md)
        print("(section 'dispatch' of bench/RESULTS.md refreshed)")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    failed = [r.name for r in runs.values() if r.exit_code != 0]
    return 1 if failed else 0


def report(args, v, runs, single, job_cmd, job_cpu, job_wall, notes, expo_args, cg_args,
           plain_args, total_s, probe) -> str:
    n, ncg = args.jobs, args.cg_jobs
    e, cg, pl = runs.get("expocloud"), runs.get("cluster-generic"), runs.get("plain")
    og = runs.get("original")
    floor = n * job_cpu / CORES
    L = []
    L.append("## Benchmark 1: dispatch overhead, trivial jobs")
    L.append("")
    orig_opt = " --orig PATH" + (" --orig-backup" if args.orig_backup else "") if og else ""
    L.append("Reproduce (about 10 minutes on an idle machine): "
             f"`.venv/bin/python bench/dispatch.py{orig_opt}` "
             f"(options used: `--jobs {n} --cg-jobs {ncg} --single {args.single}`"
             + (", PATH a checkout of github.com/mgoldenbe/ExpoCloud" if og else "") + ").")
    L.append("")
    L.append(machine_line(v) + f" Measured {time.strftime('%Y-%m-%d %H:%M')}, "
             f"whole script {total_s:.0f} s.")
    L.append("")
    L.append(f"Workflow: {n} jobs `rule t: output: \"out/{{i}}.txt\"; shell: "
             "\"echo {wildcards.i} > {output}\"` plus `rule all`, each variant in a fresh copy. "
             "Commands (each run in-process by `bench/snakewrap.py` with the venv's Python):")
    L.append("")
    L.append(f"* (a) `{show_cmd(expo_args)}` (default settings: "
             f"{e.wrap.get('fleet', '?') if e else '?'} as the jobs' records show)")
    L.append(f"* (b) `{show_cmd(cg_args).replace(str(Path(cg_args[3]).parent), '$TMP')}` where "
             "`submit.sh` starts the jobscript with `nohup ... &` (under `/usr/bin/time` for its "
             "CPU) and echoes `$!`; no status command (jobscript marker files), default "
             f"status interval; **only {ncg} jobs, scaled per job to {n}**")
    L.append(f"* (c) `{show_cmd(plain_args)}`")
    L.append(f"* (d) one job's own process, {len(single)} times in a row: the exact command an "
             "expocloud worker ran (from its job log; `--wait-for-files` dropped since its "
             "directory is gone), `--target-jobs t:i=0..9`")
    if og:
        w = og.wrap
        L.append(f"* (e) the original ExpoCloud, commit {w.get('checkout')}, with "
                 f"`bench/expocloud_orig.patch` ({w.get('patch')}; Python 3.11 only) on a copy: "
                 f"`python bench/expocloud_orig.py --orig PATH --tasks {n} --slots {CORES}"
                 f"{' --backup' if w.get('backup') else ''}`, i.e. `{w.get('command')}` on its "
                 f"local engine: one client with {w.get('slots')} worker processes "
                 f"(`max_clients=1, max_cpus_per_client={w.get('slots')}`), backup server "
                 f"{'on' if w.get('backup') else 'off'}; each task (`bench/expocloud_orig_tasks/`) "
                 "writes `out/{i}.txt` from the worker process the client forks for it; wall = "
                 "its server's lifetime (it returns once every result is in)")
    L.append("")
    L.append("| figure | value |")
    L.append("|---|---|")

    def row(k, val):
        L.append(f"| {k} | {val} |")

    if e:
        row(f"(a) expocloud wall, {n} jobs", f"**{e.wall_s:.1f} s** ({e.wall_s / n:.3f} s/job); "
            f"exit {e.exit_code}, {e.wrap.get('outputs_ok')}/{n} outputs")
    if cg:
        per = cg.wall_s / ncg
        row(f"(b) cluster-generic wall, {ncg} jobs", f"{cg.wall_s:.1f} s = **{per:.2f} s/job**; "
            f"exit {cg.exit_code}, {cg.wrap.get('outputs_ok')}/{ncg} outputs")
        row(f"(b) cluster-generic extrapolated to {n} jobs", f"**{per * n:.0f} s**")
    if pl:
        row(f"(c) plain `snakemake -j 2` wall, {n} jobs", f"**{pl.wall_s:.1f} s**; exit "
            f"{pl.exit_code}, {pl.wrap.get('outputs_ok')}/{n} outputs")
    if single:
        cpus = [s.children_cpu_s for s in single]
        walls = [s.wall_s for s in single]
        row("(d) one job's snakemake process: CPU (user+sys)",
            f"**{job_cpu:.3f} s** mean (min {min(cpus):.3f}, max {max(cpus):.3f})")
        row("(d) one job's snakemake process: wall",
            f"**{job_wall:.3f} s** mean (min {min(walls):.3f}, max {max(walls):.3f})")
        row(f"floor = {n} x job CPU / {CORES} cores", f"**{floor:.1f} s**")
        row(f"slot floor = {n} x job wall / {CORES} slots (one process per job, slots = cores)",
            f"{n * job_wall / CORES:.1f} s")
    if probe and probe["lags"]:
        row("(d) of which: exit lag after Snakemake's main() returned "
            f"({len(probe['lags'])} probe runs)",
            f"{statistics.mean(probe['lags']):.2f} s mean; non-daemon threads alive then: "
            f"{', '.join(probe['lingering']) or 'none'}")
    if e and e.wrap.get("job_runtime_median_s"):
        row("(a) median job runtime on a worker (jobs.jsonl `runtime_s`, 2 at a time)",
            f"{e.wrap['job_runtime_median_s']:.2f} s")
    if e and e.wrap.get("slot_gap_median_s") is not None:
        row("(a) idle gap of a worker slot between two jobs (dispatch latency)",
            f"{e.wrap['slot_gap_median_s']:.3f} s median, {e.wrap['slot_gap_mean_s']:.3f} s mean")
    if cg and cg.wrap.get("job_cpu_mean_s"):
        row("(b) cluster-generic job process, mean CPU / wall (`/usr/bin/time`)",
            f"{cg.wrap['job_cpu_mean_s']:.3f} s / {cg.wrap['job_wall_mean_s']:.2f} s")
    if og:
        row(f"(e) the original ExpoCloud wall, {n} tasks", f"**{og.wall_s:.1f} s**; exit "
            f"{og.exit_code}, {og.wrap.get('outputs_ok')}/{n} outputs")
        row("(e) its CPU, all processes (server, client, one worker process per task)",
            f"{og.children_cpu_s:.1f} s ({og.children_cpu_s / n * 1000:.0f} ms per task)")
    L.append("")
    L += rates_table(n, ncg, e, cg, pl, og)
    L.append("")
    L.append("Ratios against the expectations:")
    L.append("")
    L.append("| ratio | measured | expected | met? |")
    L.append("|---|---|---|---|")
    verdicts = []
    if e and cg:
        ratio = e.wall_s / (cg.wall_s / ncg * n)
        ok = ratio <= 0.3
        verdicts.append(("expocloud / cluster-generic", ok))
        L.append(f"| expocloud wall / cluster-generic wall (per job, x{n}) | {ratio:.3f} | "
                 f"<= 0.3 | {'yes' if ok else 'NO'} |")
    if e and single:
        ratio = e.wall_s / floor
        ok = ratio <= 1.2
        verdicts.append(("expocloud / floor", ok))
        L.append(f"| expocloud wall / floor | {ratio:.3f} | <= 1.2 | {'yes' if ok else 'NO'} |")
        L.append(f"| expocloud wall / slot floor | {e.wall_s / (n * job_wall / CORES):.3f} | "
                 "(reference) | |")
    coord = e.wrap.get("coordinator_cpu_s") if e else None
    if coord is not None:
        ms = coord / n * 1000
        ok = ms < 5
        verdicts.append(("coordinator CPU per job", ok))
        L.append(f"| coordinator thread CPU per job | {ms:.2f} ms | < 5 ms | "
                 f"{'yes' if ok else 'NO'} |")
    if e and og and og.exit_code == 0:
        ratio = (n / e.wall_s) / (n / og.wall_s)
        ok = ratio >= TARGET_VS_ORIGINAL
        verdicts.append(("expocloud / original ExpoCloud tasks/s", ok))
        L.append(f"| expocloud tasks/s / the original ExpoCloud's (issue 17) | {ratio:.2f} | "
                 f">= {TARGET_VS_ORIGINAL:g} | {'yes' if ok else 'NO'} |")
    if e and pl:
        ratio = e.wall_s / pl.wall_s
        ok = ratio <= TARGET_VS_PLAIN
        verdicts.append(("expocloud / plain -j 2", ok))
        L.append(f"| expocloud wall / plain `-j 2` wall (issue 17) | {ratio:.1f} | "
                 f"<= {TARGET_VS_PLAIN:g} | {'yes' if ok else 'NO'} |")
    if e:
        per_job = e.children_cpu_s / n
        ok = per_job <= TARGET_JOB_CPU_S
        verdicts.append(("trivial job CPU on the worker", ok))
        L.append("| trivial job CPU on the worker: all CPU of (a)'s workers and their job "
                 f"processes / jobs (issue 17) | {per_job:.3f} s | <= {TARGET_JOB_CPU_S:g} s | "
                 f"{'yes' if ok else 'NO'} |")
    L.append("")
    L.append("Where the CPU goes (from `bench/snakewrap.py`: `RUSAGE_SELF` of the snakemake "
             "process, which holds the coordinator thread; `RUSAGE_CHILDREN` for everything it "
             "waited for; per-thread CPU of `expocloud-coordinator` by `time.thread_time()` in "
             "that thread as its loop ends):")
    L.append("")
    L.append("| run | main snakemake process CPU | per job | children CPU | per job | "
             "other processes' share of the machine during the run |")
    L.append("|---|---|---|---|---|---|")
    for name, r, jobs in (("(a) expocloud", e, n), ("(b) cluster-generic", cg, ncg),
                          ("(c) plain -j 2", pl, n), ("(e) original ExpoCloud", og, n)):
        if r is None:
            continue
        sc = r.wrap.get("self_cpu_s")  # None for (e): its server is among the children
        ch = r.children_cpu_s + r.extra_cpu_s
        extra = " (jobs via /usr/bin/time)" if r.extra_cpu_s else ""
        main = (f"{fmt(sc)} s | {fmt(sc / jobs * 1000 if sc else None, 1)} ms"
                if sc is not None else "(its server is among the children) | ")
        L.append(f"| {name} | {main} | {ch:.1f} s{extra} | {ch / jobs:.3f} s | "
                 f"{r.foreign_share:.0%} |")
    if single:
        fs = statistics.mean(s.foreign_share for s in single)
        L.append(f"| (d) one job x{len(single)} | | | {sum(s.children_cpu_s for s in single):.1f} s "
                 f"| {job_cpu:.3f} s | {fs:.0%} |")
    L.append("")
    if e and coord is not None:
        ticks = e.wrap.get("coordinator_ticks") or 0
        fe = e.wrap.get("frontend_cpu_s")
        sc = e.wrap.get("self_cpu_s") or 0
        L.append(f"Coordinator: {coord:.2f} s of CPU over {ticks} rounds "
                 f"({coord / max(1, ticks) * 1000:.2f} ms per round), i.e. "
                 f"**{coord / n * 1000:.2f} ms per job**. Executor front end in Snakemake's "
                 f"thread (`run_jobs` + `check_active_jobs`, including the Snakemake callbacks "
                 f"they call): {fmt(fe)} s ({fe / n * 1000:.1f} ms per job). The rest of the "
                 f"main process, {sc - coord - (fe or 0):.1f} s, is Snakemake itself "
                 "(start-up, DAG, scheduling, job postprocessing); compare plain `-j 2`'s main "
                 "process above, which also runs each job's shell command from Python.")
        if e.children_cpu_s and single:
            L.append("")
            L.append(f"Children of the expocloud run: {e.children_cpu_s / n:.3f} s of CPU per job "
                     f"(job process + `/bin/sh` + the worker loop's share) vs {job_cpu:.3f} s for "
                     "one job process run alone.")
        L.append("")
    foreign = [r.foreign_share for r in runs.values()]
    if foreign and max(foreign) > 0.1:
        L.append(f"Note: this machine was shared with other work while measuring (other "
                 f"processes used up to {max(foreign):.0%} of its CPU capacity during a run, "
                 "computed as /proc/stat busy time minus our own rusage); wall times are "
                 "inflated by that much, CPU figures much less.")
        L.append("")
    for note in notes:
        L.append(f"Note: {note}")
        L.append("")
    missed = [k for k, ok in verdicts if not ok]
    if missed:
        L.append("Missed expectations: " + ", ".join(missed) + ". See the discussion below.")
    else:
        L.append("All expectations met.")
    return "\n".join(L)


def rates_table(n: int, ncg: int, e: Run | None, cg: Run | None, pl: Run | None,
                og: Run | None) -> list[str]:
    """Tasks per second of each variant: over the whole run (start-up included, what the
    targets use) and, where the runs record it, from the first task's start to the last's end."""
    L = ["| variant | tasks | wall | tasks/s, whole run | first start to last end | "
         "tasks/s there |", "|---|---|---|---|---|---|"]
    spans = {"(a) expocloud": e.wrap.get("span_s") if e else None,
             "(e) the original ExpoCloud":
                 (og.wrap.get("events") or {}).get("span_s") if og else None}
    for name, r, jobs in (("(a) expocloud", e, n), ("(b) cluster-generic", cg, ncg),
                          ("(c) plain `snakemake -j 2`", pl, n),
                          ("(e) the original ExpoCloud", og, n)):
        if r is None:
            continue
        span = spans.get(name)
        L.append(f"| {name} | {jobs} | {r.wall_s:.1f} s | **{fmt(rate(jobs, r.wall_s))}** | "
                 f"{fmt(span, 1) + ' s' if span else ''} | {fmt(rate(jobs, span))} |")
    return L


if __name__ == "__main__":
    sys.exit(main())
