#!/usr/bin/env python3
"""Run Snakemake in this very process and report what this process itself spent.

Usage: python bench/snakewrap.py REPORT.json -- SNAKEMAKE-ARGS...

The benchmarks need the CPU time of the main ``snakemake`` process alone (the expocloud
coordinator is a thread inside it), which ``RUSAGE_CHILDREN`` of a parent cannot give: that
one also holds every worker and job process below it. So this wrapper calls
``snakemake.cli.main()`` in-process and, when it returns, writes to REPORT.json:

* ``self_cpu_s``: ``getrusage(RUSAGE_SELF)`` user+sys, i.e. every thread of this process
  (Snakemake's DAG handling, the executor front end, the coordinator thread), no children;
* ``children_cpu_s``: ``getrusage(RUSAGE_CHILDREN)``: waited-for descendants (local workers and
  the jobs they waited for; the shell commands of plain local execution);
* ``coordinator_cpu_s``: CPU of the thread named ``expocloud-coordinator``, read with
  ``time.thread_time()`` inside that thread as its loop ends (instrumented by wrapping
  ``Coordinator._loop`` from the outside; expo_executor itself is not modified), and the number
  of loop rounds (``coordinator_ticks``);
* ``frontend_cpu_s``: CPU spent inside the executor's ``run_jobs`` and ``check_active_jobs``
  in Snakemake's thread (this includes the Snakemake callbacks they invoke, e.g.
  ``report_job_success`` -> Snakemake's own job postprocessing);
* ``coordinator_jobs``, ``coordinator_requests_bytes``, ``coordinator_scheduler_bytes``: the
  jobs the coordinator held as its loop ended, and the bytes its ``_requests`` and its
  scheduler hold (a deep ``sys.getsizeof`` over containers and instances, each object once),
  what grows with the jobs of a run (measured after Snakemake returned, so as not to slow
  its stop);
* ``returned_at``: when Snakemake returned (epoch s), before those sizes were taken;
* ``executor_started_at``: when the executor's ``__post_init__`` began (epoch s): Snakemake had
  then built its DAG (with storage, its existence checks) and uploaded the sources, and nothing
  of the run was provisioned yet;
* ``first_run_jobs_at``: when Snakemake first handed jobs to the executor (epoch s);
* ``maxrss_mb``: this process's peak RSS (``ru_maxrss``).

Set BENCH_PROFILE_COORDINATOR=FILE to also write a cProfile of the coordinator thread to FILE.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import threading
import time
import types

_coordinators: list = []  # the coordinators whose loop ended, for their sizes
_stats = {"coordinator_cpu_s": None, "coordinator_ticks": 0, "frontend_cpu_s": 0.0,
          "frontend_calls": 0}


def _instrument_expocloud() -> None:
    from expo_executor.coordinator import loop as coord_mod
    from expo_executor.frontends.snakemake import executor as front

    orig_loop = coord_mod.Coordinator._loop
    orig_tick = coord_mod.Coordinator.tick

    def _loop(self):
        profile_path = os.environ.get("BENCH_PROFILE_COORDINATOR")
        profiler = None
        if profile_path:  # optional: a cProfile of the coordinator thread, for diagnosis
            import cProfile
            profiler = cProfile.Profile()
            profiler.enable()
        try:
            orig_loop(self)
        finally:
            if profiler is not None:
                profiler.disable()
                profiler.dump_stats(profile_path)
            # thread_time() is the CPU of the calling thread only: the coordinator's
            total = time.thread_time()
            prev = _stats["coordinator_cpu_s"] or 0.0
            _stats["coordinator_cpu_s"] = prev + total
            _coordinators.append(self)  # sized once Snakemake has returned

    def tick(self, now):
        _stats["coordinator_ticks"] += 1
        return orig_tick(self, now)

    coord_mod.Coordinator._loop = _loop
    coord_mod.Coordinator.tick = tick

    orig_run_jobs = front.Executor.run_jobs
    orig_check = front.Executor.check_active_jobs

    def run_jobs(self, jobs):
        _stats.setdefault("first_run_jobs_at", time.time())
        t0 = time.thread_time()
        try:
            return orig_run_jobs(self, jobs)
        finally:
            _stats["frontend_cpu_s"] += time.thread_time() - t0
            _stats["frontend_calls"] += 1

    async def check_active_jobs(self, active_jobs):
        agen = orig_check(self, active_jobs)
        while True:
            t0 = time.thread_time()
            try:
                item = await agen.__anext__()
            except StopAsyncIteration:
                _stats["frontend_cpu_s"] += time.thread_time() - t0
                break
            _stats["frontend_cpu_s"] += time.thread_time() - t0
            yield item
        _stats["frontend_calls"] += 1

    front.Executor.run_jobs = run_jobs
    front.Executor.check_active_jobs = check_active_jobs

    orig_post_init = front.Executor.__post_init__

    def __post_init__(self):
        _stats.setdefault("executor_started_at", time.time())
        return orig_post_init(self)

    front.Executor.__post_init__ = __post_init__


OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
          types.MethodType, threading.Thread, type(threading.Lock()))


def deep_size(root: object) -> int:
    """Bytes held by ``root`` and everything it reaches through containers and instance
    attributes, each object once; classes, modules, functions, threads and locks are not
    followed (they do not grow with the jobs)."""
    seen: set[int] = set()
    stack, total = [root], 0
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, OPAQUE):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple, set, frozenset)):
            stack.extend(obj)
        elif not isinstance(obj, (str, bytes, int, float)):
            if hasattr(obj, "__dict__"):
                stack.append(vars(obj))
            for slot in getattr(type(obj), "__slots__", ()):
                if hasattr(obj, slot):
                    stack.append(getattr(obj, slot))
    return total


def _cpu(usage) -> float:
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    if len(sys.argv) < 3 or sys.argv[2] != "--":
        sys.exit("usage: snakewrap.py REPORT.json -- SNAKEMAKE-ARGS...")
    report, args = sys.argv[1], sys.argv[3:]
    wall0 = time.perf_counter()
    if any("expocloud" in arg for arg in args) or os.environ.get("BENCH_EXPOCLOUD"):
        _instrument_expocloud()
    from snakemake.cli import main as snakemake_main

    code = 0
    try:
        snakemake_main(args)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except KeyboardInterrupt:
        code = 130
    returned_at = time.time()
    if _coordinators:
        last = _coordinators[-1]
        _stats.update(coordinator_jobs=len(last._requests),
                      coordinator_requests_bytes=deep_size(last._requests),
                      coordinator_scheduler_bytes=deep_size(last.scheduler))
    # Any coordinator thread has been joined by the executor's shutdown by now.
    result = {
        "exit_code": code,
        "returned_at": returned_at,
        "wall_s": time.perf_counter() - wall0,  # after interpreter start-up
        "self_cpu_s": _cpu(resource.getrusage(resource.RUSAGE_SELF)),
        "children_cpu_s": _cpu(resource.getrusage(resource.RUSAGE_CHILDREN)),
        "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "threads_alive": [t.name for t in threading.enumerate()],
        **_stats,
    }
    with open(report, "w") as handle:
        json.dump(result, handle, indent=1)
    return code


if __name__ == "__main__":
    sys.exit(main())
