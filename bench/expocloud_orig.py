#!/usr/bin/env python3
"""The original ExpoCloud (github.com/mgoldenbe/ExpoCloud) running trivial tasks on this machine.

    git clone https://github.com/mgoldenbe/ExpoCloud /path/to/ExpoCloud
    python bench/expocloud_orig.py --orig /path/to/ExpoCloud --tasks 300   # prints one JSON line
    python bench/expocloud_orig.py --orig /path/to/ExpoCloud \
        --sweep workflows/agent-assignment/config.yaml --deadline 6 [--no-pruning]

Benchmark 1 (bench/dispatch.py) runs the first form, benchmark 2 (bench/pruning.py) the second.

The checkout is never modified nor copied into this repository: its ``src`` is copied into the
work directory and bench/expocloud_orig.patch (what Python 3.11 needs) is applied to the copy.
The tasks, the server script and the client script are ours (bench/expocloud_orig_tasks/),
written against its API; its own local engine (``src/engines/local.py``) starts the client as a
local process, and the client forks one worker process per task.

This script is the parent of the original's server and makes itself a child subreaper: the
client the server starts is orphaned when the server returns (it sleeps 5 s after saying BYE),
and its CPU (with its workers') reaches no rusage unless someone reaps it. So the server's
wall time is the run's time, and the CPU reported covers every process of the run.
"""

from __future__ import annotations

import argparse
import csv
import ctypes
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
PATCH = BENCH / "expocloud_orig.patch"
TASKS_PACKAGE = "expocloud_orig_tasks"
PR_SET_CHILD_SUBREAPER = 36
REAP_GRACE_S = 30.0  # the client's own exit: 5 s of CLIENT_WAIT_AFTER_SENDING_BYE, then shutdown


def check_checkout(orig: Path) -> None:
    """A one-line error before anything runs if ``orig`` is not an ExpoCloud checkout."""
    for rel in ("src/server.py", "src/client.py", "src/engines/local.py"):
        if not (orig / rel).is_file():
            raise SystemExit(f"--orig {orig}: no {rel} there; give the path of a checkout of "
                             "https://github.com/mgoldenbe/ExpoCloud")


def describe_checkout(orig: Path) -> str:
    """Its commit when the checkout is a git work tree of the original, else 'unknown commit'."""
    out = subprocess.run(["git", "-C", str(orig), "log", "-1", "--format=%h (%ad)",
                          "--date=short"], capture_output=True, text=True)
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown commit"


def prepare(orig: Path, dest: Path) -> str:
    """Copy the original's ``src`` to ``dest/src`` and apply the patch there; returns the patch
    state ('applied' or 'already applied' when the checkout carries it already)."""
    check_checkout(orig)
    shutil.copytree(orig / "src", dest / "src", ignore=shutil.ignore_patterns("__pycache__"))
    # git apply works outside a repository; the ceiling keeps it from finding one above dest
    env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(dest.parent)}

    def git_apply(*extra: str) -> bool:
        return subprocess.run(["git", "apply", *extra, str(PATCH)], cwd=dest, env=env,
                              capture_output=True).returncode == 0
    if git_apply("--check"):
        git_apply()
        return "applied"
    if git_apply("--check", "--reverse"):
        return "already applied"
    raise SystemExit(f"--orig {orig}: {PATCH.name} neither applies nor is applied already; "
                     "this benchmark was written against commit 161638b of the original")


def become_subreaper() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def reap_orphans(grace_s: float, group: int) -> int:
    """Wait for every descendant adopted by us; SIGKILL the server's process group after
    ``grace_s``. Returns how many had to be killed."""
    deadline, killed = time.monotonic() + grace_s, 0
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return killed
        if pid:
            continue
        if time.monotonic() > deadline and not killed:
            killed = 1
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def primary_events(run_dir: Path) -> list[Path]:
    """The events files its primary server wrote, one per client (output-<this host>/<client>/;
    a backup server keeps copies under output-<its name>/)."""
    return sorted(run_dir.glob(f"output-{socket.gethostname()}/*/events.txt"))


def events_span(run_dir: Path) -> dict:
    """First task start to last task end from the events the client sent the server
    (output-<host>/<client>/events.txt, seconds since the client started)."""
    starts, dones = [], []
    for f in primary_events(run_dir):
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                try:
                    ts = float(row["timestamp"])
                except (KeyError, TypeError, ValueError):
                    continue
                if row.get("descr") == "starting":
                    starts.append(ts)
                elif row.get("descr") == "done":
                    dones.append(ts)
    span = max(dones) - min(starts) if starts and dones else None
    return {"started": len(starts), "done": len(dones), "span_s": span}


def run_server(orig: Path, workdir: Path, module: str, server_args: list[str],
               timeout: float, extra_path: tuple[Path, ...] = ()) -> dict:
    """Run ``python -m expocloud_orig_tasks.<module> <server_args>`` in ``workdir/run`` with a
    patched copy of the original; every process of the run is reaped before returning."""
    workdir.mkdir(parents=True, exist_ok=True)
    patch_state = prepare(orig, workdir)
    run_dir = workdir / "run"
    run_dir.mkdir()
    become_subreaper()
    env = {**os.environ,
           # its local engine starts the client as plain `python`: ours, not whatever is on PATH
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           "PYTHONPATH": os.pathsep.join(str(p) for p in (workdir, BENCH, *extra_path))}
    argv = [sys.executable, "-m", f"{TASKS_PACKAGE}.{module}", *server_args]
    cpu0 = children_cpu()
    w0 = time.perf_counter()
    with open(workdir / "server.log", "wb") as log:
        server = subprocess.Popen(argv, cwd=run_dir, env=env, stdout=log,
                                  stderr=subprocess.STDOUT, start_new_session=True)
        try:
            exit_code = server.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            exit_code = -999
    wall = time.perf_counter() - w0
    killed = reap_orphans(REAP_GRACE_S, server.pid)
    return {"exit_code": exit_code, "wall_s": wall, "cpu_s": children_cpu() - cpu0,
            "killed_leftovers": killed, "checkout": describe_checkout(orig),
            "patch": patch_state, "command": " ".join(["python", "-m", *argv[2:]]),
            "run_dir": str(run_dir)}


def run_trivial(orig: Path, workdir: Path, tasks: int, slots: int, backup: bool,
                timeout: float) -> dict:
    """Benchmark 1: ``tasks`` trivial tasks on one client of ``slots`` workers."""
    args = [str(tasks), str(slots)] + (["--backup"] if backup else [])
    result = run_server(orig, workdir, "run_server", args, timeout)
    run_dir = Path(result["run_dir"])
    outputs = sum(1 for i in range(tasks) if (run_dir / "out" / f"{i}.txt").is_file())
    return {"tasks": tasks, "slots": slots, "backup": backup, **result,
            "outputs_ok": outputs, "events": events_span(run_dir)}


def run_sweep(orig: Path, workdir: Path, config: dict, deadline_s: float, slots: int,
              pruning: bool, scripts: Path, timeout: float) -> dict:
    """Benchmark 2: the demo sweep's solve jobs; ``records`` in the shape of jobs.jsonl's."""
    args = [json.dumps(config), f"{deadline_s:g}", str(slots)]
    if not pruning:
        args.append("--no-pruning")
    result = run_server(orig, workdir, "run_sweep", args, timeout, (scripts,))
    sys.path.insert(0, str(scripts))
    sys.path.insert(0, str(workdir))
    from expocloud_orig_tasks.agent_assignment import sweep_tasks
    every = [t.parameters() for t in sweep_tasks(config, deadline_s, pruning)]
    run_dir = Path(result["run_dir"])
    return {"slots": slots, "pruning": pruning, "deadline_s": deadline_s, **result,
            "records": task_records(run_dir, every, ("variant", "n_tasks", "n_agents")),
            "skipped_by_server": server_skips(workdir / "server.log")}


def task_records(run_dir: Path, every: list[tuple], dims: tuple[str, ...]) -> list[dict]:
    """One record per task from the client's events: outcome 'solved' (done), 'timeout' or
    'skipped' (killed by the domino effect, or never started), ``runtime_s`` from its
    'starting' event to its last one (None when it never started)."""
    seen: dict[tuple, dict] = {}
    for f in primary_events(run_dir):
        with open(f, newline="") as fh:
            for row in csv.DictReader(fh):
                params = tuple(row.get(k) for k in ("variant", "n_tasks", "n_agents",
                                                    "instance"))
                ev = seen.setdefault(params, {})
                try:
                    ev[row["descr"]] = float(row["timestamp"])
                except (KeyError, TypeError, ValueError):
                    continue
    outcome = {"done": "solved", "timeout": "timeout", "domino": "skipped"}
    records = []
    for params in every:
        ev = seen.get(tuple(str(p) for p in params), {})
        end = next((e for e in ("timeout", "domino", "done") if e in ev), None)
        start = ev.get("starting")
        records.append({
            "rule": "solve", "wildcards": dict(zip((*dims, "instance"), map(str, params))),
            "outcome": outcome[end] if end else "skipped",
            "killed": end == "domino",
            "runtime_s": ev[end] - start if end and start is not None else None})
    return records


def server_skips(log: Path) -> int:
    """Tasks its server skipped at assignment as dominated by a timed-out task."""
    return sum(1 for line in log.read_text(errors="replace").splitlines()
               if "Skipping hard task" in line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--orig", type=Path, required=True,
                    help="a checkout of github.com/mgoldenbe/ExpoCloud (left unmodified)")
    ap.add_argument("--tasks", type=int, default=300)
    ap.add_argument("--slots", type=int, default=2, help="workers of its one client")
    ap.add_argument("--backup", action="store_true", help="run its backup server too")
    ap.add_argument("--sweep", type=Path, metavar="CONFIG_YAML",
                    help="run the demo sweep of this workflow config instead of trivial tasks")
    ap.add_argument("--deadline", type=float, default=6.0, help="--sweep: seconds per task")
    ap.add_argument("--no-pruning", action="store_true", help="--sweep: no domino effect")
    ap.add_argument("--workdir", type=Path, help="default: a new temporary directory")
    ap.add_argument("--timeout", type=float, default=1800)
    args = ap.parse_args()
    check_checkout(args.orig.resolve())
    if args.workdir is None:
        import tempfile
        args.workdir = Path(tempfile.mkdtemp(prefix="expo-bench-orig-"))
    if args.sweep:
        import yaml
        config = yaml.safe_load(args.sweep.read_text())
        result = run_sweep(args.orig.resolve(), args.workdir.resolve(), config, args.deadline,
                           args.slots, not args.no_pruning,
                           args.sweep.resolve().parent / "scripts", args.timeout)
        print(json.dumps(result))
        return 0 if result["exit_code"] == 0 else 1
    result = run_trivial(args.orig.resolve(), args.workdir.resolve(), args.tasks, args.slots,
                         args.backup, args.timeout)
    print(json.dumps(result))
    return 0 if result["exit_code"] == 0 and result["outputs_ok"] == args.tasks else 1


if __name__ == "__main__":
    sys.exit(main())
