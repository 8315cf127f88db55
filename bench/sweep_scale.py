#!/usr/bin/env python3
"""Issue 31: sweeps of 5,000 and 50,000 points, side by side in one run.

    python bench/sweep_scale.py [--points 5000,50000] [--max-seconds 1800] [--latency 0.03]
                                [--skip-local] [--skip-gce] [--results]

For each number of points, the nested sweep of bench/sweep_workflow.py (``results/{a}/{n}/{s}.txt``,
trivial jobs), each run in a fresh folder, one run after the other:

  local engine
    (1) ``snakemake -n``: plain Snakemake's DAG time (a dry run, no storage)
    (2) ``snakemake -j 2 --scheduler greedy``: plain local execution
    (3) ``snakemake --executor expocloud -j 1000``: what users type, no other setting
  emulated GCE path: the GCS emulator behind a proxy (expo_executor/emulator/faulty_proxy.py,
  no faults) that holds every storage call ``--latency`` s (GCS's per-call latency) and counts
  it; the fake Compute Engine in this process
    (4) ``snakemake -n`` with the bucket as default storage: Snakemake's existence checks alone
    (5) ``snakemake --profile profiles/gce-emulated``: the GCE path (2 one-slot workers)

A run still going after ``--max-seconds`` (one value, or one per points value) is stopped as a
user would stop it: SIGINT to its process group (Ctrl-C), then SIGTERM and SIGKILL if it has
not exited within ``--stop-grace`` s; the time it took to exit is recorded, and on the GCE path
the fake VMs still running when it exited. Figures per run: wall, jobs done, time to the first
output (a local file's mtime; on the GCE path the proxy's first upload of an output, and on
its way there the first VM created and the first job started, from the run's vms.jsonl and
jobs.jsonl), jobs/s
over the whole run and from the first output to the last, the Snakemake main process's peak
RSS (VmHWM, sampled from /proc, which also holds the expocloud coordinator thread), storage
calls by kind before the first output and per job after it. An expocloud run also reports, from
bench/snakewrap.py, its coordinator's CPU per round and the bytes the coordinator holds per job
(``_requests`` and the scheduler, by a deep sizeof when its loop ends), and the size of its
run directory's files (status.json and run.html are rewritten every status interval).
``--results`` rewrites the "Issue 31: sweeps" section of bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import (PYTHON, REPO, WRAP, fmt, machine_line, show_cmd, versions,  # noqa: E402
                    wait_quiet, write_section)
import sweep_workflow  # noqa: E402
from tests.helpers import interruptible  # noqa: E402

from expo_executor.emulator.compute import FakeCompute  # noqa: E402
from expo_executor.emulator.faulty_proxy import FaultyProxy, Request  # noqa: E402
from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket  # noqa: E402

PROFILE = REPO / "profiles" / "gce-emulated"
PROJECT = "expocloud-emulated"
OUTPUT = re.compile(r"results/\d+/\d+/\d+\.txt")
UPLOADED = re.compile(r'(?:name=|"name":\s*")[^"&]*?(results/\d+/\d+/\d+\.txt)')


# -- the storage proxy ---------------------------------------------------------------------------
def classify(method: str, target: str) -> str:
    """The kind of a GCS JSON-API call, from its method and (unquoted) path and query."""
    path, _, query = target.partition("?")
    if path.startswith("/batch/"):
        return "batch"
    if path.startswith("/upload/"):
        return "upload"
    if path.startswith("/download/") or "alt=media" in query:
        return "download"
    if method == "DELETE":
        return "delete"
    if method == "GET" and path.endswith("/o"):
        return "list"
    if method == "GET" and "/o/" in path:
        return "metadata"
    return "bucket" if method == "GET" else "other write"


def uploaded_output(request: Request) -> str | None:
    """The sweep output an upload stores (its object name in the query or the metadata)."""
    if not request.target.startswith("/upload/"):
        return None
    found = UPLOADED.search(request.target) or \
        UPLOADED.search(request.body[:8192].decode("utf-8", "replace"))
    return found.group(1) if found else None


class CountingProxy:
    """A FaultyProxy without faults that holds every storage call ``latency`` s and notes each
    call's time and kind, and when each sweep output was first uploaded."""

    def __init__(self, upstream: str, latency: float) -> None:
        self.upstream = upstream  # the emulator itself, for calls not to count
        self.proxy = FaultyProxy(upstream, rate=0.0)
        self.calls: list[tuple[float, str]] = []
        self.uploads: dict[str, float] = {}
        self.proxy.slow_down(self._note, latency)  # called once per storage call, under a lock

    def _note(self, request: Request) -> bool:
        now = time.time()
        self.calls.append((now, classify(request.method, request.target)))
        name = uploaded_output(request)
        if name is not None:
            self.uploads.setdefault(name, now)
        return True

    def reset(self) -> None:
        self.calls, self.uploads = [], {}

    def __enter__(self) -> CountingProxy:
        self.proxy.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.proxy.stop()

    @property
    def endpoint(self) -> str:
        return self.proxy.endpoint


def storage_figures(calls: list[tuple[float, str]], first_output: float | None,
                    jobs: int) -> dict:
    """Storage calls by kind before the first output (the start: DAG, existence checks, VMs
    booting) and after it, per job done."""
    cut = first_output if first_output is not None else float("inf")
    before = Counter(kind for when, kind in calls if when < cut)
    after = Counter(kind for when, kind in calls if when >= cut)
    return {"calls": len(calls), "before_first": dict(before), "after_first": dict(after),
            "per_job_after_first": sum(after.values()) / jobs if jobs else None}


# -- running one variant -------------------------------------------------------------------------
@dataclass
class Result:
    """One run of one variant; times in s, memory in MB."""

    variant: str
    points: int
    command: str
    wall_s: float = 0.0
    exit_code: int | None = None
    stopped: bool = False  # still running at --max-seconds: interrupted
    stop_to_exit_s: float | None = None  # from SIGINT to the process's exit
    stop_signals: str = ""  # what it took: SIGINT, +SIGTERM, +SIGKILL
    stop_sent_at: float | None = None  # epoch s of the SIGINT
    stop_to_return_s: float | None = None  # from SIGINT to Snakemake's return (snakewrap)
    done: int = 0
    first_output_s: float | None = None
    last_output_s: float | None = None
    peak_rss_mb: float | None = None
    load: str = ""  # the load average (1, 5, 15 min) as the run ended
    wrap: dict = field(default_factory=dict)
    run_files: dict = field(default_factory=dict)
    storage: dict = field(default_factory=dict)
    vms_left: int | None = None  # fake VMs still running as it exited (GCE path)
    # milestones of an expocloud run, from its start: Snakemake's DAG done (the executor's
    # start, from snakewrap), its first VM created, its first job started on a worker (the
    # run's vms.jsonl and jobs.jsonl)
    dag_done_s: float | None = None
    first_vm_s: float | None = None
    first_handed_s: float | None = None  # Snakemake first handed jobs to the executor
    first_ready_s: float | None = None  # a worker was first ready (its key granted)
    first_start_s: float | None = None
    left_behind: int | None = None  # its processes still alive as it exited (stopped runs)

    @property
    def jobs_per_s(self) -> float | None:
        ran = self.wall_s - (self.stop_to_exit_s or 0.0)  # until it was stopped
        return self.done / ran if self.done and ran > 0 else None

    @property
    def steady_jobs_per_s(self) -> float | None:
        """Jobs per second from the first output to the last."""
        if self.done < 2 or self.first_output_s is None or self.last_output_s is None:
            return None
        span = self.last_output_s - self.first_output_s
        return (self.done - 1) / span if span > 0 else None


class RssWatch:
    """Samples a process's peak RSS (VmHWM) until it exits: the high-water mark survives a
    SIGKILL, which the process's own report would not."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak_kb = pid, 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._done.wait(0.5):
            self.sample()

    def sample(self) -> None:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    self.peak_kb = max(self.peak_kb, int(line.split()[1]))
        except (OSError, ValueError):
            pass

    def stop(self) -> float:
        self._done.set()
        self._thread.join()
        return self.peak_kb / 1024


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid`` (read from /proc), so that what a killed run leaves
    behind is ended by its own ids."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def stop(proc: subprocess.Popen, grace: float, result: Result) -> None:
    """Ctrl-C as a terminal sends it (SIGINT to the process group), then harder."""
    below = descendants(proc.pid)
    result.stop_sent_at = time.time()
    started = time.perf_counter()
    signals = []
    for sig, wait in ((signal.SIGINT, grace), (signal.SIGTERM, 10.0), (signal.SIGKILL, 10.0)):
        signals.append(sig.name)
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    result.stop_to_exit_s = time.perf_counter() - started
    result.stop_signals = "+".join(signals)
    alive = [pid for pid in below if running(pid)]  # reparented or not
    result.left_behind = len(alive)
    for pid in alive:  # what the run left behind (local workers in sessions of their own)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def run(result: Result, args: list[str], cwd: Path, env: dict, max_seconds: float,
        grace: float, log: Path) -> float:
    """Run snakemake (under snakewrap.py) in ``cwd``; fills ``result``; returns its start time
    (epoch s)."""
    report = log.with_suffix(".json")
    argv = [PYTHON, str(WRAP), str(report), "--", *args]
    started = time.time()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=interruptible)
        watch = RssWatch(proc.pid)
        try:
            proc.wait(timeout=max_seconds)
        except subprocess.TimeoutExpired:
            result.stopped = True
            watch.sample()
            stop(proc, grace, result)
    result.wall_s = time.time() - started
    result.exit_code = proc.returncode
    result.peak_rss_mb = watch.stop()
    result.load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    try:
        result.wrap = json.loads(report.read_text())
    except (OSError, ValueError):
        result.wrap = {}
    if result.stopped and result.wrap.get("returned_at"):
        result.stop_to_return_s = result.wrap["returned_at"] - result.stop_sent_at
    return started


def output_times(folder: Path) -> list[float]:
    """mtimes of the sweep outputs written under ``folder/results``."""
    times = []
    stack = [folder / "results"]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            elif OUTPUT.search(entry.path):
                times.append(entry.stat().st_mtime)
    return sorted(times)


def note_outputs(result: Result, times: list[float], started: float) -> None:
    result.done = len(times)
    if times:
        result.first_output_s = times[0] - started
        result.last_output_s = times[-1] - started


def run_dir_of(folder: Path) -> Path | None:
    runs = sorted((folder / ".expocloud" / "runs").glob("*/"))
    return runs[-1] if runs else None


def milestones(result: Result, folder: Path, started: float) -> None:
    """When the run's executor started (Snakemake's DAG done), it created its first VM,
    Snakemake first handed it jobs, a worker was first ready and the first job started, each
    from the run's start."""
    run_dir = run_dir_of(folder)
    if run_dir is None:
        return

    def first(name: str, key: str) -> float | None:
        path = run_dir / name
        times = [rec[key] for line in (path.read_text().splitlines() if path.exists() else [])
                 if (rec := json.loads(line)).get(key) is not None]
        return min(times) - started if times else None
    if result.wrap.get("executor_started_at"):
        result.dag_done_s = result.wrap["executor_started_at"] - started
    if result.wrap.get("first_run_jobs_at"):
        result.first_handed_s = result.wrap["first_run_jobs_at"] - started
    result.first_vm_s = first("vms.jsonl", "created")
    result.first_ready_s = first("vms.jsonl", "ready")
    result.first_start_s = first("jobs.jsonl", "started")


def run_files(folder: Path) -> dict:
    """Sizes (bytes) of an expocloud run's own files, and its solved jobs."""
    run_dir = run_dir_of(folder)
    if run_dir is None:
        return {}
    sizes = {p.name: p.stat().st_size for p in run_dir.iterdir() if p.is_file()}
    solved = 0
    jobs = run_dir / "jobs.jsonl"
    if jobs.exists():
        solved = sum(1 for line in jobs.read_text(errors="replace").splitlines()
                     if '"solved"' in line)
    return {"sizes": sizes, "solved": solved}


# -- the variants --------------------------------------------------------------------------------
PLAIN_DAG = ["-n", "-j", "1", "--quiet"]
PLAIN_GREEDY = ["-j", "2", "--scheduler", "greedy"]
EXPOCLOUD = ["--executor", "expocloud", "-j", "1000"]


@dataclass
class Plan:
    """What one invocation runs: the points, the per-run limits, the proxy's latency."""

    base: Path
    max_seconds: dict[int, float]  # per points value, local runs
    gce_max_seconds: dict[int, float]  # per points value, runs on the GCE path
    grace: float
    latency: float
    quiet_wait: float
    boot: float


def slug(label: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")


def fresh(plan: Plan, label: str, points: int) -> Path:
    folder = plan.base / f"{points}-{slug(label)}"
    sweep_workflow.make(folder, points)
    return folder


def local_run(plan: Plan, label: str, points: int, args: list[str], env: dict) -> Result:
    folder = fresh(plan, label, points)
    result = Result(label, points, show_cmd(args))
    wait_quiet(plan.quiet_wait)
    started = run(result, args, folder, env, plan.max_seconds[points], plan.grace,
                  plan.base / f"{points}-{slug(label)}.log")
    note_outputs(result, output_times(folder), started)
    if label == "expocloud":
        result.run_files = run_files(folder)
    return result


def local_variants(plan: Plan, points: int, log) -> list[Result]:
    env = {**os.environ}
    results = []
    for label, args in (("plain dry run (DAG)", PLAIN_DAG), ("plain greedy", PLAIN_GREEDY),
                        ("expocloud", EXPOCLOUD)):
        log(f"{points} points, local: {label}: {show_cmd(args)}")
        results.append(local_run(plan, label, points, args, env))
        log(f"    {summary(results[-1])}")
    return results


@contextlib.contextmanager
def emulated_storage(plan: Plan) -> Iterator[tuple[CountingProxy, dict]]:
    """The GCS emulator behind a proxy holding each call ``plan.latency`` s, and the
    environment that sends a run's storage calls through it (no HTTP proxy in the way)."""
    storage = EmulatorProcess()
    try:
        with CountingProxy(storage.endpoint, plan.latency) as proxy:
            env = {**os.environ, "STORAGE_EMULATOR_HOST": proxy.endpoint}
            for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
                env.pop(var, None)
            yield proxy, env
    finally:
        storage.stop()


def gce_variants(plan: Plan, points: int, log) -> list[Result]:
    with emulated_storage(plan) as (proxy, env):
        return [gce_dry_run(plan, points, proxy, env, log),
                gce_expocloud(plan, points, proxy, env, log)]


def gce_dry_run(plan: Plan, points: int, proxy: CountingProxy, env: dict, log) -> Result:
    """Snakemake's DAG with the bucket as default storage: its existence checks alone."""
    prefix = f"gs://{fresh_bucket(proxy.upstream)}/wf"
    args = [*PLAIN_DAG, "--default-storage-provider", "gcs", "--default-storage-prefix", prefix,
            "--storage-gcs-project", PROJECT]
    shown = show_cmd([*args[:-4], "gs://BUCKET/wf", *args[-2:]])
    label = "plain dry run, GCS storage"
    log(f"{points} points, GCE: {label}: {shown}")
    folder = fresh(plan, "gce-dry", points)
    result = Result(label, points, shown)
    proxy.reset()
    wait_quiet(plan.quiet_wait)
    run(result, args, folder, env, plan.gce_max_seconds[points], plan.grace,
        plan.base / f"{points}-gce-dry.log")
    result.storage = storage_figures(proxy.calls, None, 0)
    log(f"    {summary(result)}")
    return result


def gce_expocloud(plan: Plan, points: int, proxy: CountingProxy, env: dict, log) -> Result:
    """The GCE path as the docs run it: the emulated profile, the fake Compute Engine."""
    folder = fresh(plan, "gce-expocloud", points)
    fake = FakeCompute(plan.base / f"{points}-vms", boot_delay=plan.boot).start()
    prefix = f"gs://{fresh_bucket(proxy.upstream)}/wf"
    args = ["--profile", str(PROFILE), "--expocloud-gce-endpoint", fake.endpoint,
            "--default-storage-prefix", prefix]
    shown = show_cmd(["--profile", "profiles/gce-emulated"])
    label = "expocloud, GCE path"
    log(f"{points} points, GCE: {label}: {shown}")
    result = Result(label, points, shown)
    proxy.reset()
    wait_quiet(plan.quiet_wait)
    try:
        started = run(result, args, folder, env, plan.gce_max_seconds[points], plan.grace,
                      plan.base / f"{points}-gce-expocloud.log")
        result.vms_left = sum(1 for vm in fake.ledger() if vm["ended"] is None)
    finally:
        fake.stop()
    times = sorted(proxy.uploads.values())
    note_outputs(result, times, started)
    first = times[0] if times else None
    result.storage = storage_figures(proxy.calls, first, result.done)
    result.run_files = run_files(folder)
    milestones(result, folder, started)
    log(f"    {summary(result)}")
    return result


def summary(r: Result) -> str:
    stopped = f", stopped ({r.stop_signals}, exited {fmt(r.stop_to_exit_s, 1)} s later)" \
        if r.stopped else ""
    way = (f", DAG done at {fmt(r.dag_done_s, 1)} s, first VM at {fmt(r.first_vm_s, 1)} s, "
           f"first job started at "
           f"{fmt(r.first_start_s, 1)} s") if r.first_vm_s is not None else ""
    return (f"wall {r.wall_s:.1f} s, exit {r.exit_code}{stopped}, {r.done} outputs{way}, first at "
            f"{fmt(r.first_output_s, 1)} s, {fmt(r.steady_jobs_per_s)} jobs/s after it, peak RSS "
            f"{fmt(r.peak_rss_mb, 0)} MB, load {r.load}")


# -- the run page at scale, in this process -------------------------------------------------------
def page_at_scale(points: int, grid: tuple[int, int, int]) -> dict:
    """What the status (status.json) and the run page (run.html) weigh, and cost to build, for
    a run of ``points`` jobs whose hardness spans ``grid`` (a x n x s), half of them solved:
    what a sweep that declares its hardness shows every status interval."""
    from expo_executor.coordinator import run_page
    from expo_executor.core.records import HardnessMeta
    from expo_executor.core.run_status import STATES, RunStatus, outcome_map

    jobs = []
    for a in range(grid[0]):
        for n in range(grid[1]):
            for s in range(grid[2]):
                if len(jobs) < points:
                    state = "solved" if len(jobs) < points // 2 else "queued"
                    jobs.append((HardnessMeta("a,n,s", ("a", "n", "s"), (a, n, s), ()),
                                 {"a": str(a), "n": str(n), "s": str(s)}, state))
    t0 = time.perf_counter()
    omap = outcome_map(jobs)
    t1 = time.perf_counter()
    counts = {state: 0 for state in STATES}
    counts.update(solved=points // 2, queued=points - points // 2)
    status = RunStatus(time.time(), counts, 2, 0, 2, 10.0, outcome_map=omap)
    html = run_page.render(status, "bench", time.time())
    t2 = time.perf_counter()
    record = json.dumps(status.to_dict())
    t3 = time.perf_counter()
    return {"points": points, "grid": "x".join(map(str, grid)),
            "cells": len(omap.cells) if omap else 0, "html_bytes": len(html.encode()),
            "json_bytes": len(record.encode()), "map_ms": (t1 - t0) * 1000,
            "render_ms": (t2 - t1) * 1000, "json_ms": (t3 - t2) * 1000}


def page_grids(points: int) -> list[tuple[int, int, int]]:
    """The sweep's own grid (10 x 10 x as many as needed) and a cube of the same size (every
    cell one job: the largest map these points can draw)."""
    side = round(points ** (1 / 3))
    while side ** 3 < points:
        side += 1
    return [(sweep_workflow.A_VALUES, sweep_workflow.N_VALUES, sweep_workflow.s_values(points)),
            (side, side, side)]


# -- the report ----------------------------------------------------------------------------------
def stopped_phrase(r: Result) -> str:
    if not r.stopped:
        return "no"
    left = f", {r.left_behind} of its processes left" if r.left_behind else ""
    back = f"Snakemake returned {fmt(r.stop_to_return_s, 1)} s later, " \
        if r.stop_to_return_s is not None else ""
    return (f"at {r.wall_s - (r.stop_to_exit_s or 0):.0f} s; {r.stop_signals}; {back}process "
            f"exited {fmt(r.stop_to_exit_s, 1)} s later{left}")


def run_table(results: list[Result], gce: bool) -> list[str]:
    head = ("| points | run | command | wall s | outputs | stopped (Ctrl-C) | first output s | "
            "jobs/s, whole run | jobs/s, first to last output | main process peak RSS MB |"
            + (" storage calls | per job after the first output | VMs left |" if gce else "")
            + " load avg after |")
    L = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in results:
        row = (f"| {r.points} | {r.variant} | `{r.command}` | {r.wall_s:.1f} | {r.done} | "
               f"{stopped_phrase(r)} | {fmt(r.first_output_s, 1)} | {fmt(r.jobs_per_s)} | "
               f"{fmt(r.steady_jobs_per_s)} | {fmt(r.peak_rss_mb, 0)} |")
        if gce:
            st = r.storage or {}
            kinds = Counter(st.get("before_first", {})) + Counter(st.get("after_first", {}))
            row += (f" {st.get('calls', 0)} ({', '.join(f'{k} {v}' for k, v in kinds.most_common())})"
                    f" | {fmt(st.get('per_job_after_first'), 1)} | "
                    f"{'' if r.vms_left is None else r.vms_left} |")
        L.append(row + f" {r.load} |")
    return L


def _floor_rows(points: int, dag: Result, gce: Result, boot: float) -> list[str]:
    """Where Snakemake's own DAG (with the bucket as its storage) ended, and the earliest a
    first job could start after it: no VM may be asked for before the run's bad input is
    refused (the executor's start, which follows the DAG), and a VM then boots."""
    if gce.dag_done_s is None:
        return []
    floor = gce.dag_done_s + boot
    return [f"| {points} | GCE: Snakemake's DAG with storage done (the executor's start) / "
            f"plain DAG time | {gce.dag_done_s / dag.wall_s:.2f} ({gce.dag_done_s:.1f} s) | "
            "(the first job's way) |",
            f"| {points} | GCE: that + the fake boot ({boot:g} s), the first job's floor / "
            f"plain DAG time | {floor / dag.wall_s:.2f} ({floor:.1f} s) | (the first job's way) |"]


def ratio_lines(results: list[Result], boot: float) -> list[str]:
    """The issue's targets, per points value, from the runs that measure them (``boot``:
    the fake VMs' boot, s)."""
    L = []
    for points in sorted({r.points for r in results}):
        by = {r.variant: r for r in results if r.points == points}
        dag, greedy, expo = (by.get("plain dry run (DAG)"), by.get("plain greedy"),
                             by.get("expocloud"))
        gce = by.get("expocloud, GCE path")
        if greedy and expo and not greedy.stopped and not expo.stopped:
            L.append(f"| {points} | local: expocloud wall / plain greedy wall | "
                     f"{expo.wall_s / greedy.wall_s:.2f} | <= 1.5 |")
        elif greedy and expo and greedy.steady_jobs_per_s and expo.steady_jobs_per_s:
            L.append(f"| {points} | local: plain greedy jobs/s / expocloud jobs/s, first to last "
                     f"output (a run was stopped) | "
                     f"{greedy.steady_jobs_per_s / expo.steady_jobs_per_s:.2f} | <= 1.5 |")
        if dag and expo and expo.first_output_s is not None:
            L.append(f"| {points} | local: expocloud first output / plain DAG time | "
                     f"{expo.first_output_s / dag.wall_s:.2f} | (reference) |")
        if dag and gce:
            L.extend(_floor_rows(points, dag, gce, boot))
            for what, value in (("first VM created", gce.first_vm_s),
                                ("first job started on a worker", gce.first_start_s)):
                L.append(f"| {points} | GCE: {what} / plain DAG time | "
                         + (f"{value / dag.wall_s:.2f} ({value:.1f} s)" if value is not None
                            else "n/a") + " | (the first job's way) |")
            first = gce.first_output_s
            L.append(f"| {points} | GCE: first output / plain DAG time | "
                     + (f"{first / dag.wall_s:.2f}" if first is not None else
                        f"no output within {gce.wall_s:.0f} s (> {gce.wall_s / dag.wall_s:.1f})")
                     + " | <= 2 |")
        for r in (expo, gce):
            if r is not None and r.stopped:
                vms = f", {r.vms_left} VMs left" if r.vms_left is not None else ""
                L.append(f"| {points} | {r.variant}: Ctrl-C to exit | "
                         f"{fmt(r.stop_to_return_s, 1)} s to Snakemake's return, "
                         f"{fmt(r.stop_to_exit_s, 1)} s to the process's exit "
                         f"({r.stop_signals}){vms} | <= 10 s, no VM left |")
    return L


def memory_lines(results: list[Result]) -> list[str]:
    L = ["| points | run | jobs the coordinator held | its `_requests`, bytes per job | "
         "its scheduler, bytes per job | coordinator CPU per round | main process peak RSS "
         "MB (plain greedy's) | status.json / run.html / jobs.jsonl bytes |",
         "|---|---|---|---|---|---|---|---|"]
    for r in results:
        if r.variant not in ("expocloud", "expocloud, GCE path"):
            continue
        w, jobs = r.wrap, r.wrap.get("coordinator_jobs") or 0
        plain = next((p for p in results if p.points == r.points
                      and p.variant == "plain greedy"), None)
        ticks = w.get("coordinator_ticks") or 0
        per_round = (w["coordinator_cpu_s"] / ticks * 1000
                     if ticks and w.get("coordinator_cpu_s") is not None else None)
        sizes = r.run_files.get("sizes", {})
        L.append(f"| {r.points} | {r.variant} | {jobs or 'n/a (no report)'} | "
                 f"{fmt(w['coordinator_requests_bytes'] / jobs, 0) if jobs else 'n/a'} | "
                 f"{fmt(w['coordinator_scheduler_bytes'] / jobs, 0) if jobs else 'n/a'} | "
                 f"{fmt(per_round, 2)} ms over {ticks} rounds | {fmt(r.peak_rss_mb, 0)} "
                 f"({fmt(plain.peak_rss_mb, 0) if plain else '-'}) | "
                 f"{sizes.get('status.json', '-')} / {sizes.get('run.html', '-')} / "
                 f"{sizes.get('jobs.jsonl', '-')} |")
    return L


def request_sizes(folder: Path) -> dict:
    """Bytes one job's request holds in the coordinator (a deep sizeof, as snakewrap.py
    measures), whole and as an ended job keeps it (``JobRequest.ended``), for the command a
    worker of the run in ``folder`` ran (the first ``Command:`` line of its job logs)."""
    from expo_executor.core.records import JobMeta
    from expo_executor.core.scheduler import Task
    from expo_executor.frontends.base import job_request
    from snakewrap import deep_size

    for log in sorted(folder.glob(".expocloud/runs/*/vms/*/jobs/*.log")):
        for line in log.read_text(errors="replace").splitlines():
            if line.strip().startswith("Command:"):
                command = line.strip()[len("Command:"):].strip()
                request = job_request(Task("k", "point {a=1, n=2, s=3}"),
                                      ["/bin/sh", "-c", command], str(folder), {}, None,
                                      meta=JobMeta("point", {"a": "1", "n": "2", "s": "3"}),
                                      identity=f"point\0{folder}/results/1/2/3.txt")
                ended = request.ended() if hasattr(request, "ended") else None
                return {"command_chars": len(command), "whole_bytes": deep_size(request),
                        "ended_bytes": deep_size(ended) if ended is not None else None}
    return {}


def request_lines(sizes: dict) -> list[str]:
    if not sizes:
        return []
    whole, ended = sizes["whole_bytes"], sizes["ended_bytes"]
    return ["", f"One job's request, built in this process around the command a worker of the "
            f"5,000-point local run ran ({sizes['command_chars']} characters): "
            f"**{whole} bytes** whole, {whole * 50_000 / 2**20:.0f} MB for 50,000 jobs; "
            + (f"**{ended} bytes** once the job has ended (`JobRequest.ended`), "
               f"{ended * 50_000 / 2**20:.0f} MB for 50,000 ended jobs." if ended is not None
               else "this code keeps every ended job's request whole.")]


def page_lines(pages: list[dict]) -> list[str]:
    L = ["| points | hardness grid (a x n x s) | map cells | status.json bytes | "
         "run.html bytes | map built, ms | page rendered, ms | JSON, ms |",
         "|---|---|---|---|---|---|---|---|"]
    L += [f"| {p['points']} | {p['grid']} | {p['cells']} | "
          f"{p['json_bytes']} | {p['html_bytes']} | {p['map_ms']:.0f} | {p['render_ms']:.0f} | "
          f"{p['json_ms']:.0f} |" for p in pages]
    return L


def report(args: argparse.Namespace, results: list[Result], pages: list[dict],
           loads: tuple[str, str], total_s: float | None, sizes: dict) -> str:
    v = versions()
    local = [r for r in results if r.variant in ("plain dry run (DAG)", "plain greedy",
                                                  "expocloud")]
    gce = [r for r in results if r not in local]
    L = ["## Issue 31: sweeps", "",
         f"`PYTHONPATH=. .venv/bin/python bench/sweep_scale.py {' '.join(args.argv)}` "
         f"(whole script {fmt(total_s / 60 if total_s else None, 0)} min; measured "
         f"{time.strftime('%Y-%m-%d %H:%M')} "
         f"UTC on commit {v['commit']}). {machine_line(v)} The machine was shared: load "
         f"average (1, 5, 15 min) {loads[0]} at the start and {loads[1]} at the end; each "
         "run's own is in its row.", "",
         "The sweep: bench/sweep_workflow.py (`results/{a}/{n}/{s}.txt`, 10 x 10 x points/100, "
         "`echo` jobs), a fresh folder per run. A run still going after its limit "
         f"(`--max-seconds {args.max_seconds}`, on the GCE path "
         f"`{args.gce_max_seconds or args.max_seconds}`) is stopped with SIGINT to its process group, "
         f"as Ctrl-C does (then SIGTERM, SIGKILL after {args.stop_grace:g} s); first output: "
         "the first sweep output's mtime (GCE path: its first upload at the proxy), from the "
         "start of the process; jobs/s first to last: (outputs - 1) / (last - first).", ""]
    if local:
        L += ["### Local engine", ""] + run_table(local, gce=False) + [""]
    if gce:
        L += [f"### Emulated GCE path, {args.latency * 1000:g} ms per storage call", "",
              "The GCS emulator behind a proxy that holds every storage call "
              f"{args.latency * 1000:g} ms and counts it by kind; the fake Compute Engine "
              f"(boot {args.boot:g} s); `profiles/gce-emulated` (2 workers of 1 slot) with "
              "`--expocloud-gce-endpoint` and `--default-storage-prefix gs://BUCKET/wf` set "
              "to them. Storage calls: all of the run's (Snakemake, coordinator, workers); "
              "per job: those after the first output over the outputs.", ""]
        L += run_table(gce, gce=True) + [""]
    L += ["### Against the issue's targets", "", "| points | figure | measured | target |",
          "|---|---|---|---|"] + ratio_lines(results, args.boot) + [""]
    L += ["### Memory", "", "From bench/snakewrap.py as the coordinator's loop ends (a deep "
          "sizeof of what it holds per job) and /proc (the Snakemake main process's VmHWM, "
          "which holds the coordinator thread):", ""] + memory_lines(results) \
        + request_lines(sizes) + [""]
    if pages:
        L += ["### The run page at scale (in this process, no run)", "",
              "A sweep that declares hardness `a,n,s` gets an outcome map on its page; half "
              "the jobs solved. The page and status.json are rewritten every status interval "
              "(10 s); the map is redrawn at each one up to 10,000 jobs, then every 10 s per "
              "10,000 jobs (coordinator/snapshot.py).", ""] + page_lines(pages) + [""]
    return "\n".join(L)


def publish(args: argparse.Namespace, md: str) -> None:
    print()
    print(md)
    if args.results:
        write_section("sweeps", md)
        print("(section 'sweeps' of bench/RESULTS.md rewritten)")


def report_again(args: argparse.Namespace) -> int:
    """The report of the runs a ``--keep`` run left in ``args.report_from``."""
    folder = args.report_from
    rows = json.loads((folder / "results.json").read_text())
    names = {f.name for f in fields(Result)}
    results = [Result(**{k: v for k, v in row.items() if k in names})
               for row in rows if "variant" in row]
    pages = [row for row in rows if "variant" not in row]
    meta = json.loads((folder / "meta.json").read_text()) if (folder / "meta.json").exists() \
        else {}
    args.argv = meta.get("argv") or [a for a in args.argv if a not in ("--report-from",
                                                                     str(folder), "--results")]
    loads = tuple(meta.get("loads") or (results[0].load, results[-1].load))
    first = min((r.points for r in results), default=0)
    publish(args, report(args, results, pages, loads, meta.get("total_s"),
                         request_sizes(folder / f"{first}-expocloud")))
    return 0


def per_points(points: list[int], text: str) -> dict[int, float]:
    """A limit per points value from "S" (every one) or "S1,S2,..." (one each)."""
    limits = [float(s) for s in text.split(",")]
    if len(limits) not in (1, len(points)):
        raise ValueError(f"{text!r}: one number of seconds, or one per --points value")
    return dict(zip(points, limits * len(points) if len(limits) == 1 else limits))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default="5000,50000", help="comma-separated sweep sizes")
    ap.add_argument("--max-seconds", default="1800",
                    help="stop a run after this long (one value, or one per --points value)")
    ap.add_argument("--gce-max-seconds", default=None,
                    help="the same for the runs on the GCE path (default: --max-seconds)")
    ap.add_argument("--stop-grace", type=float, default=30.0,
                    help="seconds after SIGINT before SIGTERM")
    ap.add_argument("--latency", type=float, default=0.03, help="s added to each storage call")
    ap.add_argument("--boot", type=float, default=2.0, help="fake VM boot time, s")
    ap.add_argument("--quiet-wait", type=float, default=5.0,
                    help="seconds to wait for a quieter machine before each run")
    ap.add_argument("--skip-local", action="store_true")
    ap.add_argument("--skip-gce", action="store_true")
    ap.add_argument("--results", action="store_true",
                    help="rewrite the 'Issue 31: sweeps' section of bench/RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--report-from", type=Path, metavar="DIR",
                    help="run nothing: report the runs kept in DIR (a --keep run's folder)")
    args = ap.parse_args()
    args.argv = sys.argv[1:]
    if args.report_from is not None:
        return report_again(args)
    points = [int(p) for p in args.points.split(",")]
    try:
        limits = per_points(points, args.max_seconds)
        gce_limits = per_points(points, args.gce_max_seconds or args.max_seconds)
    except ValueError as exc:
        ap.error(str(exc))
    base = Path(tempfile.mkdtemp(prefix="expo-bench-sweep-"))
    plan = Plan(base, limits, gce_limits, args.stop_grace, args.latency, args.quiet_wait,
                args.boot)
    began = time.time()

    def log(text: str) -> None:
        print(f"[{time.time() - began:6.0f} s] {text}", flush=True)

    log(f"work folder {base}")
    load0 = " ".join(f"{x:.2f}" for x in os.getloadavg())
    results: list[Result] = []
    for n in points:
        if not args.skip_local:
            results += local_variants(plan, n, log)
        if not args.skip_gce:
            results += gce_variants(plan, n, log)
    pages = [page_at_scale(n, grid) for n in points for grid in page_grids(n)]
    loads = (load0, " ".join(f"{x:.2f}" for x in os.getloadavg()))
    (base / "results.json").write_text(json.dumps(
        [{**asdict(r), "jobs_per_s": r.jobs_per_s, "steady_jobs_per_s": r.steady_jobs_per_s}
         for r in results] + pages, indent=1))
    (base / "meta.json").write_text(json.dumps({"argv": args.argv, "loads": loads,
                                                "total_s": time.time() - began}))
    publish(args, report(args, results, pages, loads, time.time() - began,
                         request_sizes(base / f"{points[0]}-expocloud")))
    if not args.keep:
        import shutil
        shutil.rmtree(base, ignore_errors=True)
    return 0 if all(r.exit_code == 0 or r.stopped for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
