"""Benchmark 4: the real coordinator against 1,000 synthetic workers, today's code beside a base.

What runs is the real ``Coordinator`` (its loop thread, its ``Channel``, the core scheduler and
scaling) with GCE's settings (poll 2 s, heartbeat grace 300 s so an inbox is refreshed every
75 s, one Spot pool of e2-standard-2 with one slot each). What is not
real is cheap on purpose, so that 1,000 workers fit a 2-core machine:

- the engine (``SyntheticEngine``, the ``engines/base.py`` contract): a created VM is a record
  that boots after 1-5 s and is listed RUNNING;
- the workers (``Fleet``): one thread plays all of them, speaking the real protocol (signed
  ``WorkerStatus`` and ``WorkerResult`` records, the ``Inbox`` verified and decoded) and
  behaving as the agent of the tree under test does (its poll rule, prefetch, result
  batches: see ``Fleet``), with jobs that "run" 60 s (+-20%) and succeed;
- the bucket: ``--storage memory`` (default) is an in-process store whose every coordinator
  call sleeps ``--latency`` seconds (one GCS round trip; the sleep releases the GIL, so parallel
  calls overlap as parallel HTTP requests would); ``--storage emulator`` is the real
  ``GcsBucket`` through the GCS emulator (``expo_executor/emulator/gcs.py``, which serves one
  request at a time), too slow for 1,000 workers here, used at a smaller scale to check that the
  in-process store at the emulator's measured latency gives the same picture.

Each variant runs in a subprocess with ``PYTHONPATH`` at a code tree: today's (this checkout)
and the base commit's ``expo_executor`` (``git archive``, default d13046b), so both are measured
in one invocation. Figures per variant: round time (median, p95, max of ``Coordinator.tick``),
storage requests per second by price class (coordinator and workers) and their cost per
VM-hour against e2-standard-2 Spot, heartbeat gaps (time between writes of a worker's inbox)
against the grace, and the coordinator's memory holding 100,000 jobs (tracemalloc of a
coordinator that took them in and made its first round; the run's RSS).

    .venv/bin/python bench/coordinator_scale.py                  # the recorded run, ~15 min
    .venv/bin/python bench/coordinator_scale.py --workers 50 --jobs 2000 --seconds 20 \\
        --no-results                                             # a smoke run, ~2 min
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
BASE = "d13046b"  # the merge-base of issue 16's work: sequential I/O, per-job backstop reads
KEY = b"b" * 32
GRACE = 300.0  # GCE_GRACE: a worker deletes itself after this long without contact
POLL, SLOW_POLL = 2.0, 15.0  # GCE's coordinator poll and the workers' inbox polls
HEARTBEAT = max(POLL, GRACE / 4)  # the coordinator's (settings.heartbeat_interval)
PRICE_A, PRICE_B = 0.005 / 1000, 0.0004 / 1000  # USD per operation (cost/request_budget.py)
MACHINE, REGION = "e2-standard-2", "us-central1"


def worker_signing_key(name: str) -> bytes:
    """The key worker ``name`` signs with: its own (derived from the run key) where the code
    under test has per-worker keys, the run key itself in the base commit's code."""
    try:
        from expo_executor.protocol.worker_keys import worker_key
    except ImportError:
        return KEY
    return worker_key(KEY, name)


# -- the bucket -------------------------------------------------------------------------------
class Store:
    """One in-process bucket: objects with generations, and when each inbox was written."""

    def __init__(self) -> None:
        self.objects: dict[str, tuple[bytes, int]] = {}
        self.lock = threading.Lock()
        self.generation = 0
        self.inbox_writes: dict[str, list[float]] = {}

    def read(self, key: str, limit: int | None = None, if_generation_not_match: int | None = None):
        from expo_executor.protocol import bucket
        with self.lock:
            found = self.objects.get(key)
        if found is None:
            return None
        # a base tree from before bounded reads (issue 30) asks for neither bound, and its
        # Blob has no "unchanged"
        if if_generation_not_match is not None and found[1] == if_generation_not_match:
            return bucket.Blob(b"", found[1], unchanged=True)
        if limit is not None and len(found[0]) > limit:
            raise bucket.ObjectTooLarge(key, len(found[0]), limit, found[1])
        return bucket.Blob(found[0], found[1])

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        from expo_executor.protocol.bucket import PreconditionFailed
        with self.lock:
            current = self.objects.get(key)
            if if_generation_match is not None and \
                    (current[1] if current else 0) != if_generation_match:
                raise PreconditionFailed(key)
            self.generation += 1
            self.objects[key] = (bytes(data), self.generation)
            if key.endswith("/inbox.json"):
                self.inbox_writes.setdefault(key.split("/")[1], []).append(time.time())
            return self.generation

    def list(self, prefix: str) -> dict[str, int]:
        with self.lock:
            return {k: g for k, (_, g) in self.objects.items() if k.startswith(prefix)}

    def delete(self, key: str) -> None:
        with self.lock:
            self.objects.pop(key, None)


class StoreView:
    """The bucket contract over a ``Store``, counted by GCS price class (a listing costs one
    class A operation per page of 1,000); every call waits ``latency`` s first."""

    def __init__(self, store: Store, latency: float) -> None:
        self.store, self.latency = store, latency
        self.ops: Counter[str] = Counter()
        self._lock = threading.Lock()

    def _op(self, price_class: str, n: int = 1) -> None:
        with self._lock:
            self.ops[price_class] += n
        if self.latency:
            time.sleep(self.latency * max(n, 1))

    def read(self, key: str, **bounds):
        self._op("B")
        return self.store.read(key, **bounds)

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        self._op("A")
        return self.store.write(key, data, if_generation_match)

    def list(self, prefix: str) -> dict[str, int]:
        found = self.store.list(prefix)
        self._op("A", max(1, math.ceil(len(found) / 1000)))
        return found

    def delete(self, key: str) -> None:
        self._op("free")
        self.store.delete(key)


# -- the engine and the workers ---------------------------------------------------------------
class Fleet:
    """Every synthetic worker, played by one thread from a queue of timed events, as the
    agent of the code tree under test behaves (worker/agent_loop.py), with jobs that only wait:

    - it runs one job per slot and holds the rest of its inbox, starting the next held job
      the moment a slot frees (prefetch);
    - it reads its inbox at the interval the tree's own ``Worker._inbox_interval`` gives
      (called on a stand-in holding the same state), with GCE's polls;
    - it reports as the tree's agent does: one result object per job, or (a tree with
      ``ResultBatch``) solved results held until its ``_report_due`` rule says so (at most one
      held job per slot, or ``report_delay``, the grace on GCE), then one object for all;
    - it writes its status at boot, and again every grace where the tree's GCE workers did
      (before ``NO_STATUS_HEARTBEAT``).
    """

    def __init__(self, bucket: Any, job_s: float, seed: int = 0) -> None:
        self.bucket = bucket  # the workers' own view: counted apart from the coordinator's
        self.job_s = job_s
        self.random = random.Random(seed)
        self.lock = threading.Lock()
        self.events: list[tuple[float, int, str, str, str]] = []  # (when, n, what, worker, key)
        self.n = 0
        self.alive: dict[str, dict[str, Any]] = {}
        self.ready: set[str] = set()
        self.finished = 0
        self.silence: list[float] = []  # at each inbox read: time since the last contact
        from expo_executor.engines.gce import launch
        from expo_executor.protocol import keys, records
        from expo_executor.worker.agent import Worker
        # as the agent of the checkout under test: before results lived under the worker's
        # prefix (keys.parse_result_key), a result was followed by a status write
        self.status_on_result = not hasattr(keys, "parse_result_key")
        self.batches = hasattr(records, "ResultBatch")
        self.status_every = None if hasattr(launch, "NO_STATUS_HEARTBEAT") else GRACE
        self.interval = Worker._inbox_interval
        # as the agent of the checkout under test: where the coordinator writes a pulse
        # (keys.PULSE_KEY), a worker with no new inbox for a heartbeat reads it, at most once
        # a heartbeat, and a new one with a tag for it that verifies is contact
        self.pulse_key = getattr(keys, "PULSE_KEY", None)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="fleet", daemon=True)

    def push(self, when: float, what: str, worker: str, key: str = "") -> None:
        with self.lock:
            self.n += 1
            heapq.heappush(self.events, (when, self.n, what, worker, key))

    def create(self, name: str) -> None:
        from types import SimpleNamespace
        now = time.monotonic()
        # what Worker._inbox_interval looks at, kept as the agent keeps it
        seen: set[str] = set()  # the jobs it ever started (the agent's ``seen``)
        agent = SimpleNamespace(poll=POLL, slow_poll=SLOW_POLL, slots=1, running={},
                                pending={}, last_change=now, last_inbox=0.0, last_report=0.0,
                                seen=seen)
        self.alive[name] = {"seq": 0, "generation": None, "seen": seen, "unsent": [],
                            "contact": None, "key": worker_signing_key(name), "agent": agent,
                            "pulse_seq": -1, "pulse_read": 0.0}
        self.push(time.time() + self.random.uniform(1, 5), "boot", name)

    def delete(self, name: str) -> None:
        self.alive.pop(name, None)
        self.ready.discard(name)

    def _run(self) -> None:
        while not self.stop.is_set():
            with self.lock:
                event = heapq.heappop(self.events) if self.events and \
                    self.events[0][0] <= time.time() else None
            if event is None:
                time.sleep(0.005)
                continue
            when, _, what, name, key = event
            worker = self.alive.get(name)
            if worker is None:
                continue
            getattr(self, "_" + what)(name, worker, key)

    def _status(self, name: str, worker: dict[str, Any], _: str = "") -> None:
        """The periodic status write (where the tree's GCE workers made one)."""
        self._write_status(name, worker)
        if self.status_every is not None:
            self.push(time.time() + self.status_every, "status", name)

    def _write_status(self, name: str, worker: dict[str, Any]) -> None:
        from expo_executor.core.records import WorkerState
        from expo_executor.protocol.keys import status_key
        from expo_executor.protocol.records import WorkerStatus
        status = WorkerStatus(name, worker["seq"], time.time(),
                              sorted(worker["agent"].running), 1, WorkerState.READY, {})
        self.bucket.write(status_key(name), status.encode(worker["key"]))

    def _boot(self, name: str, worker: dict[str, Any], _: str) -> None:
        self._status(name, worker)
        self.ready.add(name)
        worker["contact"] = time.time()
        self._read_at(name, worker, time.time() + POLL)

    def _read_at(self, name: str, worker: dict[str, Any], when: float) -> None:
        """The worker's next inbox read, at ``when`` or earlier: one read pending at a time
        (an event of an older token is stale), as the agent keeps one ``next_read``."""
        if worker.get("next_read", math.inf) <= when:
            return
        worker["next_read"] = when
        worker["token"] = worker.get("token", 0) + 1
        self.push(when, "read", name, str(worker["token"]))

    def _read(self, name: str, worker: dict[str, Any], token: str) -> None:
        from expo_executor.protocol.keys import inbox_key
        from expo_executor.protocol.records import Inbox
        if token != str(worker["token"]):
            return  # a read brought forward since
        worker["next_read"] = math.inf
        now, agent = time.time(), worker["agent"]
        blob = self.bucket.read(inbox_key(name))
        if blob is not None and blob.generation != worker["generation"]:
            worker["generation"] = blob.generation
            inbox = Inbox.decode(blob.data, worker["key"])
            if inbox.seq > worker["seq"]:
                worker["seq"], worker["contact"] = inbox.seq, now
                agent.last_inbox = time.monotonic()
                if inbox.jobs or inbox.cancel:
                    agent.last_change = agent.last_inbox
                agent.pending = {k: v for k, v in inbox.jobs.items() if k not in worker["seen"]}
                for key in inbox.cancel:
                    if key in agent.running:
                        self._end(name, worker, key, cancelled=True)
                self._start_held(name, worker)
        self._pulse(name, worker, now)
        self.silence.append(now - worker["contact"])
        self._read_at(name, worker, now + self.interval(agent))

    def _start_held(self, name: str, worker: dict[str, Any]) -> None:
        from types import SimpleNamespace
        agent = worker["agent"]
        while agent.pending and len(agent.running) < agent.slots:
            key = next(iter(agent.pending))
            job = agent.pending.pop(key)
            worker["seen"].add(key)
            # what the poll rule counts of a running job: its .cpus (an InboxJob's own in a
            # tree before the typed JobSpec, its spec's while an InboxJob held one, the
            # JobSpec's own since), or its .spec.cpus (a RunningJob holds its opened spec)
            spec = getattr(job, "spec", job)
            agent.running[key] = SimpleNamespace(cpus=spec.cpus, spec=spec)
            job_started = time.time()
            worker.setdefault("started", {})[key] = job_started
            self.push(job_started + self.job_s * self.random.uniform(0.8, 1.2), "end", name, key)

    def _pulse(self, name: str, worker: dict[str, Any], now: float) -> None:
        if self.pulse_key is None or now - worker["contact"] < HEARTBEAT \
                or now - worker["pulse_read"] < HEARTBEAT:
            return
        from expo_executor.protocol.records import Pulse
        worker["pulse_read"] = now
        blob = self.bucket.read(self.pulse_key)
        pulse = Pulse.decode(blob.data) if blob is not None else None
        if pulse is not None and pulse.seq > worker["pulse_seq"] \
                and pulse.proves(name, worker["key"]):
            worker["pulse_seq"], worker["contact"] = pulse.seq, now

    def _end(self, name: str, worker: dict[str, Any], key: str,
             cancelled: bool = False) -> None:
        from expo_executor.core.records import AttemptEnd
        from expo_executor.protocol.records import WorkerResult
        agent = worker["agent"]
        if agent.running.pop(key, None) is None:
            return
        started = worker["started"].pop(key)
        end = AttemptEnd.CANCELLED if cancelled else AttemptEnd.SOLVED
        worker["unsent"].append((WorkerResult(key, name, end, None if cancelled else 0,
                                              started, time.time()), time.monotonic()))
        self.finished += not cancelled
        agent.last_change = time.monotonic()
        self._start_held(name, worker)
        if not self.batches or self._report_due(worker):
            self._report(name, worker)
        elif len(worker["unsent"]) == 1:  # the report delay starts with the oldest
            self.push(time.time() + GRACE, "flush", name)

    def _report_due(self, worker: dict[str, Any]) -> bool:
        from expo_executor.core.records import AttemptEnd
        agent = worker["agent"]
        return any(r.end is not AttemptEnd.SOLVED for r, _ in worker["unsent"]) \
            or len(agent.pending) <= agent.slots

    def _flush(self, name: str, worker: dict[str, Any], _: str) -> None:
        if worker["unsent"] and time.monotonic() - worker["unsent"][0][1] >= GRACE - 0.5:
            self._report(name, worker)

    def _report(self, name: str, worker: dict[str, Any]) -> None:
        from expo_executor.protocol.bucket import PreconditionFailed
        from expo_executor.protocol.keys import result_key
        unsent, worker["unsent"] = [r for r, _ in worker["unsent"]], []
        if self.batches:
            from expo_executor.protocol.records import ResultBatch
            objects = [ResultBatch(name, tuple(unsent))]
        else:
            objects = unsent
        for item in objects:
            first = item.first if self.batches else item.key
            try:
                self.bucket.write(result_key(first, name), item.encode(worker["key"]),
                                  if_generation_match=0)
            except PreconditionFailed:
                pass
        if self.status_on_result:
            self._write_status(name, worker)
        agent = worker["agent"]
        agent.last_report = agent.last_change = time.monotonic()
        self._read_at(name, worker, time.time() + POLL)  # the agent reads soon after a report


class SyntheticEngine:
    """The engine contract over the ``Fleet``: VMs are created at once and listed RUNNING."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet

    def create(self, names: list[str], pool: Any, slots: int, shape: Any = None) -> None:
        for name in names:
            self.fleet.create(name)

    def delete(self, name: str) -> None:
        self.fleet.delete(name)

    def list(self) -> list[Any]:
        from expo_executor.core.scheduler import Pool
        from expo_executor.engines.base import Instance
        return [Instance(name, Pool.SPOT, 1, "RUNNING") for name in list(self.fleet.alive)]

    def failures(self) -> list[Any]:
        return []

    def preempted(self) -> set[str]:
        return set()

    def close(self) -> None:
        for name in list(self.fleet.alive):
            self.fleet.delete(name)


# -- one variant (in a subprocess whose PYTHONPATH is the code tree measured) -----------------
def _config(workers: int) -> Any:
    from expo_executor.coordinator.config import CoordinatorConfig
    from expo_executor.core.scheduler import Pool
    # a base checkout from before results were listed each round looks for them with a
    # backstop, which GCE's settings stretched to 60 s
    old = {"results_backstop": 60.0} \
        if "results_backstop" in CoordinatorConfig.__dataclass_fields__ else {}
    if "prefetch_hold_s" in CoordinatorConfig.__dataclass_fields__:  # GCE's default depth
        from expo_executor.coordinator.prefetch_depth import HOLD_S
        old["prefetch_hold_s"] = HOLD_S
    return CoordinatorConfig("bench", 1, workers, poll=POLL, heartbeat=HEARTBEAT,
                             status_interval=1e9, pool=Pool.SPOT,
                             boot_timeout=1e9, listing_grace=1e9, capacity_timeout=1e9,
                             idle_timeout=1e9, **old)


def _scheduler() -> Any:
    """GCE's: a busy worker holds its next job (prefetch 1 to start with); a base tree from
    before prefetch (the default base) has no such setting."""
    import inspect
    from expo_executor.core.scheduler import Scheduler
    if "prefetch" not in inspect.signature(Scheduler).parameters:
        return Scheduler()
    return Scheduler(prefetch=1)


def _requests(jobs: int) -> list[Any]:
    from expo_executor.core.records import JobMeta
    from expo_executor.core.scheduler import Task
    try:  # a tree with a typed JobSpec (issue 29): the front ends' one way to build a request
        from expo_executor.frontends.base import job_request as request
    except ImportError:  # before it: the command, directory, environment and limit inline
        from expo_executor.coordinator.requests import JobRequest as request
    # a Snakemake job's size: a shell command line, a working directory, a small environment
    return [request(Task(f"j{i}", f"solve_{i}"),
                    ["python", "-m", "snakemake", "--target-jobs", f"solve:instance={i}",
                     "--wait-for-files", f"results/instance_{i}.json", "--cores", "1"],
                    "/home/user/sweep", {"OMP_NUM_THREADS": "1"}, 600.0,
                    meta=JobMeta(f"solve_{i}")) for i in range(jobs)]


def _rss_mb() -> tuple[float, float]:
    fields = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines()
                  if ":" in line)
    return (int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024)


def _quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {"median": 0.0, "p95": 0.0, "max": 0.0, "n": 0}
    ordered = sorted(values)
    return {"median": statistics.median(ordered), "p95": ordered[int(0.95 * (len(ordered) - 1))],
            "max": ordered[-1], "n": len(ordered)}


def measure_memory(jobs: int, workers: int, tmp: Path) -> dict[str, float]:
    """The coordinator's own allocations holding ``jobs`` jobs after its first round (VMs asked
    for, none booted): tracemalloc, so the store and the fleet do not count."""
    from expo_executor.coordinator.loop import Coordinator
    from expo_executor.coordinator.state import StateDir
    fleet = Fleet(StoreView(Store(), 0.0), 60.0)
    tracemalloc.start()
    coordinator = Coordinator(_config(workers), SyntheticEngine(fleet), StoreView(Store(), 0.0),
                              KEY, tmp / "mem-run", StateDir(tmp / "mem-state"), lambda _: None)
    coordinator.submit(_requests(jobs))
    coordinator.tick(time.time())
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del coordinator
    return {"traced_mb": current / 2**20, "traced_peak_mb": peak / 2**20}


def run_variant(args: argparse.Namespace) -> dict[str, Any]:
    from expo_executor.coordinator.loop import Coordinator
    from expo_executor.coordinator.state import StateDir

    tmp = Path(tempfile.mkdtemp(prefix="coord-scale-"))
    for run_dir in ("mem-run", "run"):
        (tmp / run_dir).mkdir()
    memory = measure_memory(args.jobs, args.workers, tmp)
    store = Store()
    if args.storage == "emulator":
        from expo_executor.protocol.gcs_bucket import GcsBucket
        url = f"gs://{args.gcs_bucket}/bench"
        bucket = GcsBucket(url, endpoint=args.endpoint)
        fleet_bucket = GcsBucket(url, endpoint=args.endpoint)
        inbox_writes = _watch_inbox_writes(bucket)
    else:
        bucket, fleet_bucket = StoreView(store, args.latency), StoreView(store, 0.0)
        inbox_writes = store.inbox_writes
    fleet = Fleet(fleet_bucket, args.job_s)
    ticks: list[tuple[float, float]] = []  # (start, seconds)

    class Timed(Coordinator):
        def tick(self, now: float) -> None:
            start = time.perf_counter()
            try:
                super().tick(now)
            finally:
                ticks.append((time.time(), time.perf_counter() - start))

    rss_before = _rss_mb()[0]
    lines: list[str] = []
    coordinator = Timed(_config(args.workers), SyntheticEngine(fleet), bucket, KEY, tmp / "run",
                        StateDir(tmp / "state"), lines.append, _scheduler())
    coordinator.submit(_requests(args.jobs))
    fleet.thread.start()
    coordinator.start()
    started = time.time()
    while len(fleet.ready) < args.workers and time.time() - started < args.warmup_limit:
        time.sleep(0.5)
    ready_after = time.time() - started
    time.sleep(args.settle)
    window_start = time.time()
    ops0, fops0, finished0 = Counter(bucket.ops), Counter(fleet_bucket.ops), fleet.finished
    silence0 = len(fleet.silence)
    rss_peak = 0.0
    while time.time() - window_start < args.seconds:
        time.sleep(1.0)
        rss_peak = max(rss_peak, _rss_mb()[0])
    window = time.time() - window_start
    ops, fops = Counter(bucket.ops) - ops0, Counter(fleet_bucket.ops) - fops0
    finished = fleet.finished - finished0
    silence = fleet.silence[silence0:]
    ready = len(fleet.ready)
    if isinstance(bucket, StoreView):
        bucket.latency = 0.0  # the stop's inbox deletes are not measured
    coordinator.stop()
    fleet.stop.set()
    gaps = [b - a for times in list(inbox_writes.values()) for a, b in zip(times, times[1:])
            if a >= window_start and b <= window_start + window]
    open_gaps = [window_start + window - times[-1] for times in list(inbox_writes.values())
                 if times]
    in_window = [seconds for start, seconds in ticks if window_start <= start <= window_start
                 + window]
    return {
        "code": args.code_label, "storage": args.storage, "latency_s": args.latency,
        "workers": args.workers, "ready_workers": ready, "ready_after_s": ready_after,
        "jobs": args.jobs, "job_s": args.job_s, "window_s": window, "finished": finished,
        "rounds": _quantiles(in_window), "rounds_per_s": len(in_window) / window,
        "coordinator_ops_per_s": {k: v / window for k, v in ops.items()},
        "worker_ops_per_s": {k: v / window for k, v in fops.items()},
        "heartbeat_gap_s": _quantiles(gaps), "open_gap_at_end_s": max(open_gaps, default=0.0),
        "worker_silence_s": _quantiles(silence),
        "memory": {**memory, "rss_before_mb": rss_before, "rss_peak_mb": rss_peak},
        "errors": sum("coordinator error" in line for line in lines),
    }


def _watch_inbox_writes(bucket: Any) -> dict[str, list[float]]:
    """When each inbox write of ``bucket`` (a GcsBucket) landed, by worker."""
    writes: dict[str, list[float]] = {}
    original = bucket.write

    def write(key: str, data: bytes, if_generation_match: int | None = None) -> int:
        generation = original(key, data, if_generation_match)
        if key.endswith("/inbox.json"):
            writes.setdefault(key.split("/")[1], []).append(time.time())
        return generation

    bucket.write = write
    return writes


# -- the comparison (the parent process) ------------------------------------------------------
def _base_tree(commit: str, into: Path) -> Path:
    into.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(["git", "-C", str(REPO), "archive", commit, "expo_executor"],
                             check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return into


def emulator_latency(endpoint: str, bucket_name: str, n: int = 200) -> float:
    """The median seconds of one GcsBucket call (reads and writes) through the emulator."""
    from expo_executor.protocol.gcs_bucket import GcsBucket
    bucket = GcsBucket(f"gs://{bucket_name}/latency", endpoint=endpoint)
    times = []
    for i in range(n):
        start = time.perf_counter()
        if i % 2:
            bucket.read(f"k{(i - 1) % 10}")  # written just before
        else:
            bucket.write(f"k{i % 10}", b"x" * 600)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def spawn(tree: Path, label: str, args: argparse.Namespace, storage: str, latency: float,
          workers: int, jobs: int, seconds: float, extra: list[str]) -> dict[str, Any]:
    argv = [sys.executable, str(Path(__file__).resolve()), "--one", "--code-label", label,
            "--storage", storage, "--latency", str(latency), "--workers", str(workers),
            "--jobs", str(jobs), "--seconds", str(seconds), "--job-s", str(args.job_s),
            "--settle", str(args.settle), *extra]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    print(f"  {label:5} {storage:8} latency {latency * 1000:.1f} ms, {workers} workers ...",
          flush=True)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"variant failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def vm_price() -> float:
    from expo_executor.cost.prices import load
    return load(REGION, cache=Path("/nonexistent")).hourly(MACHINE, spot=True)


def costs(row: dict[str, Any], price: float) -> dict[str, float]:
    """Storage USD per VM-hour (coordinator and workers), its share of the VM bill, and the
    job length per slot from which it stays under 1% (request_budget's break-even)."""
    def usd(ops: dict[str, float]) -> float:
        return ops.get("A", 0) * PRICE_A + ops.get("B", 0) * PRICE_B
    per_s = usd(row["coordinator_ops_per_s"]) + usd(row["worker_ops_per_s"])
    per_vm_hour = per_s * 3600 / row["workers"]
    jobs_per_s = row["finished"] / row["window_s"]
    per_job = per_s / jobs_per_s if jobs_per_s else float("nan")
    return {"usd_per_vm_hour": per_vm_hour, "share": per_vm_hour / price,
            "coordinator_usd_per_vm_hour": usd(row["coordinator_ops_per_s"]) * 3600
            / row["workers"],
            "per_job": per_job, "break_even_s": per_job / (0.01 * price / 3600)}


def table(rows: list[dict[str, Any]], price: float) -> str:
    head = ("| code | bucket | latency | workers | rounds/s | round median / p95 / max (s) | "
            "coordinator A/s, B/s | workers A/s, B/s | inbox gap median / max (s) | "
            "worker silence max (s) | jobs/s | storage $/VM-h (% of VM) | 1% break-even job |\n"
            "|---|---|---:|---:|---:|---|---|---|---|---:|---:|---|---:|\n")
    out = []
    for r in rows:
        c = costs(r, price)
        ro, g = r["rounds"], r["heartbeat_gap_s"]
        co, wo = r["coordinator_ops_per_s"], r["worker_ops_per_s"]
        out.append(
            f"| {r['code']} | {r['storage']} | {r['latency_s'] * 1000:.1f} ms | {r['workers']} | "
            f"{r['rounds_per_s']:.2f} | {ro['median']:.3f} / {ro['p95']:.3f} / {ro['max']:.3f} | "
            f"{co.get('A', 0):.1f}, {co.get('B', 0):.1f} | {wo.get('A', 0):.1f}, "
            f"{wo.get('B', 0):.1f} | {g['median']:.1f} / {max(g['max'], r['open_gap_at_end_s']):.1f}"
            f" | {r['worker_silence_s']['max']:.1f} | {r['finished'] / r['window_s']:.2f} | "
            f"{c['usd_per_vm_hour']:.5f} ({100 * c['share']:.2f}%) | {c['break_even_s']:.0f} s |")
    return head + "\n".join(out) + "\n"


def memory_table(rows: list[dict[str, Any]]) -> str:
    seen, out = set(), []
    for r in rows:
        if r["code"] in seen or r["storage"] != "memory":
            continue
        seen.add(r["code"])
        m = r["memory"]
        out.append(f"| {r['code']} | {r['jobs']} | {m['traced_mb']:.0f} MB "
                   f"(peak {m['traced_peak_mb']:.0f} MB) | {m['rss_peak_mb']:.0f} MB |")
    return ("| code | jobs | coordinator, tracemalloc after its first round | process RSS "
            "during the run (with store and fleet) |\n|---|---:|---|---|\n" + "\n".join(out)
            + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=1000)
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=150.0, help="measured window")
    parser.add_argument("--settle", type=float, default=20.0,
                        help="seconds after every worker is ready before the window")
    parser.add_argument("--job-s", type=float, default=60.0)
    parser.add_argument("--latency", type=float, default=None,
                        help="added per-request latency of the in-process store (default: "
                        "the emulator's measured latency, and 30 ms)")
    parser.add_argument("--base", default=BASE, help="commit of the code compared against")
    parser.add_argument("--agreement-workers", type=int, default=100,
                        help="scale of the emulator vs in-process check (0: skip it)")
    parser.add_argument("--no-results", action="store_true",
                        help="do not rewrite the sections of bench/RESULTS.md and "
                        "docs/RELIABILITY.md")
    # one variant, in a subprocess
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--code-label", default="head", help=argparse.SUPPRESS)
    parser.add_argument("--storage", default="memory", help=argparse.SUPPRESS)
    parser.add_argument("--endpoint", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--gcs-bucket", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--warmup-limit", type=float, default=300.0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        print(json.dumps(run_variant(args)))
        return 0
    return compare(args)


def compare(args: argparse.Namespace) -> int:
    from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket

    base = _base_tree(args.base, Path(tempfile.mkdtemp(prefix="coord-scale-base-")))
    trees = [(base, "base"), (REPO, "head")]
    emulator = EmulatorProcess()
    try:
        measured = emulator_latency(emulator.endpoint, fresh_bucket(emulator.endpoint))
        print(f"emulator: {measured * 1000:.2f} ms per call (median)", flush=True)
        latencies = [args.latency] if args.latency is not None else [measured, 0.030]
        rows = [spawn(tree, label, args, "memory", latency, args.workers, args.jobs,
                      args.seconds, [])
                for latency in latencies for tree, label in trees]
        agreement = []
        if args.agreement_workers:
            n, jobs = args.agreement_workers, args.agreement_workers * 20
            for tree, label in trees:
                agreement.append(spawn(tree, label, args, "emulator", 0.0, n, jobs,
                                       args.seconds / 2,
                                       ["--endpoint", emulator.endpoint, "--gcs-bucket",
                                        fresh_bucket(emulator.endpoint)]))
                agreement[-1]["latency_s"] = measured
                agreement.append(spawn(tree, label, args, "memory", measured, n, jobs,
                                       args.seconds / 2, []))
    finally:
        emulator.stop()
    price = vm_price()
    text = report(rows, agreement, price, measured, args)
    print(text)
    if not args.no_results:
        sys.path.insert(0, str(BENCH))
        from common import write_section
        write_section("coordinator-scale", text)
        write_section("coordinator-scale", text, REPO / "docs" / "RELIABILITY.md")
    return 0


def report(rows: list[dict[str, Any]], agreement: list[dict[str, Any]], price: float,
           measured: float, args: argparse.Namespace) -> str:
    cmd = "python bench/coordinator_scale.py" + (f" --latency {args.latency}"
                                                 if args.latency is not None else "")
    text = (f"## Benchmark 4: the coordinator at {args.workers} synthetic workers\n\n"
            f"`{cmd}` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; base = "
            f"`{args.base}`, head = this checkout). {args.jobs} jobs of {args.job_s:g} s "
            f"(+-20%), one slot per worker, GCE settings (poll {POLL:g} s, grace {GRACE:g} s: an "
            f"inbox is refreshed every {GRACE / 4:g} s). Emulator latency "
            f"measured: {measured * 1000:.2f} ms per call; 30 ms is an assumed GCS round trip "
            f"from a host near the bucket. Storage priced at ${PRICE_A * 1000:g}/1000 class A, "
            f"${PRICE_B * 1000:g}/1000 class B; VM {MACHINE} Spot ${price:.4f}/h "
            f"(bundled snapshot). Inbox gaps: between writes of one worker's inbox (max "
            f"includes a gap still open at the end); target: under half the grace, "
            f"{GRACE / 2:g} s.\n\n" + table(rows, price) + "\n" + memory_table(rows))
    if agreement:
        text += ("\nThe in-process store against the GCS emulator itself (real GcsBucket, one "
                 "request at a time), at the emulator's latency and a smaller scale:\n\n"
                 + table(agreement, price))
    return text


if __name__ == "__main__":
    sys.exit(main())
