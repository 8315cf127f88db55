"""A generated hardness sweep whose outcomes do not depend on timing, and its ledger.

Each job of rule ``sweep`` is a point ``(a, b)`` of the hardness order (``i`` is always 0,
kept so a sweep could repeat a point). Easy jobs are ``(a, 0)``, ``a = 0, 1, ...``, and take
half a second (or, for ``slow`` sweeps, eight seconds when ``a`` is odd). A job is *hopeless*
iff ``b >= 1``: an up-set of the partial order, so a timeout can only ever dominate hopeless
jobs, and every easy job is solved whatever the timing; hopeless jobs tick for an hour, far
past the deadline. So the solved set is fixed, and so is the set of jobs that time out or are
skipped; *which* of those two a hopeless job gets depends on timing (the first to reach the
deadline times out; the others are skipped, queued or killed while running; a kill restarts
a deadline), so tests compare ``timeout | skipped`` as one set.

The hopeless points are ``(0, 1)``, the hopeless job with the smallest coordinate sum, which
the easiest-first order starts second, and ``(a, 1000)``, which come after every easy job: so
one slot sits out one deadline from the start while the others do the easy work, instead of
every slot waiting for a deadline at the end (on two loaded cores that is most of the run).

The hardness spec and the deadline are given on the command line (``--set-resources``), never
in the Snakefile. The job script (outside the workflow, at an absolute path, as is the
ledger: the emulated cloud's VMs are processes on this machine) writes its output atomically
(a temporary file and a rename) and appends to the ledger, one JSON line per event: ``start``,
a ``tick`` every 0.2 s while it runs, ``end`` with the output's text; each with the time and
its pid.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from expo_executor.runs.files import RunFiles
from tests.emulated_gce import PROJECT
from .conftest import size

TICK_S = 0.2
JOB_SCRIPT = '''\
"""One sweep job: ledger lines around an atomic write (see tests/faults/sweep.py)."""
import json, os, sys, time

a, b, i, out, ledger, seconds = sys.argv[1:7]
job = f"{a}/{b}/{i}"


def note(event, **extra):
    line = json.dumps({"job": job, "event": event, "t": time.time(), "pid": os.getpid(),
                       **extra}) + "\\n"
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())  # one small O_APPEND write: never interleaved
    finally:
        os.close(fd)


note("start")
until = time.time() + float(seconds)
while time.time() < until:
    time.sleep(%(tick)s)
    note("tick")
text = f"{a} {b} {i}\\n"
os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
tmp = f"{out}.tmp.{os.getpid()}"
with open(tmp, "w") as handle:
    handle.write(text)
os.replace(tmp, out)
note("end", text=text)
''' % {"tick": TICK_S}

SNAKEFILE = '''\
JOBS = {jobs!r}

wildcard_constraints:
    a=r"\\d+", b=r"\\d+", i=r"\\d+"

rule all:
    input: [f"out/{{job}}.txt" for job in JOBS]

rule sweep:
    output: "out/{{a}}/{{b}}/{{i}}.txt"
    params: seconds=lambda wc: JOBS[f"{{wc.a}}/{{wc.b}}/{{wc.i}}"]
    shell: "{python} {script} {{wildcards.a}} {{wildcards.b}} {{wildcards.i}} {{output}} {ledger} {{params.seconds}}"
'''


@dataclass(frozen=True)
class Grid:
    """The sweep: ``easy`` easy jobs and ``hopeless`` hopeless ones (see the module's
    docstring); ``slow``: odd easy jobs take ``slow_s`` (still far below any deadline), so
    that some are always running when something is killed."""

    easy: int
    hopeless: int
    slow: bool = False
    slow_s: float = 8.0

    @property
    def seconds(self) -> dict[str, float]:
        jobs = {f"{a}/0/0": self.slow_s if self.slow and a % 2 else 0.5
                for a in range(self.easy)}
        if self.hopeless:
            jobs["0/1/0"] = 3600.0
        jobs.update({f"{a}/1000/0": 3600.0 for a in range(self.hopeless - 1)})
        return jobs

    @property
    def jobs(self) -> list[str]:
        return list(self.seconds)

    @staticmethod
    def is_hopeless(job: str) -> bool:
        return int(job.split("/")[1]) >= 1

    @property
    def solvable(self) -> set[str]:
        return {j for j in self.jobs if not self.is_hopeless(j)}

    @property
    def hard(self) -> set[str]:
        return {j for j in self.jobs if self.is_hopeless(j)}

    @staticmethod
    def is_slow(job: str) -> bool:
        return int(job.split("/")[0]) % 2 == 1

    @staticmethod
    def text(job: str) -> str:
        return job.replace("/", " ") + "\n"


def grid(quick: tuple, full: tuple) -> Grid:
    """``Grid(*quick)`` by default, ``Grid(*full)`` under EXPOCLOUD_FAULTS=full."""
    return Grid(*(size(q, f) for q, f in zip(quick, full)))


def write_workflow(workdir: Path, grid: Grid, ledger: Path) -> None:
    """The Snakefile and the job script (outside ``workdir``, beside the ledger)."""
    workdir.mkdir(parents=True, exist_ok=True)
    script = ledger.parent / "sweep_job.py"
    script.write_text(JOB_SCRIPT)
    (workdir / "Snakefile").write_text(SNAKEFILE.format(
        jobs=grid.seconds, python=sys.executable, script=script, ledger=ledger))


def sweep_args(deadline_s: int, *extra: str) -> list[str]:
    """The annotations, on the command line: hardness over (a, b), and the deadline."""
    return ["--executor", "expocloud", "-j", "1000", "--keep-going",
            "--set-resources", 'sweep:hardness="a, b"', f"sweep:deadline={deadline_s}s",
            *extra]


def read_ledger(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def job_of(record: dict) -> str:
    w = record["wildcards"]
    return f"{w['a']}/{w['b']}/{w['i']}"


def final_records(run_dir: Path) -> dict[str, dict]:
    """The last jobs.jsonl record of each sweep job (there is one per job; checked)."""
    records: dict[str, dict] = {}
    for record in RunFiles(run_dir).jobs():
        if record.get("rule") == "sweep":
            job = job_of(record)
            assert job not in records, f"job {job} reported twice: {records[job]} / {record}"
            records[job] = record
    return records


def classes(records: dict[str, dict]) -> tuple[set[str], set[str], set[str]]:
    """solved, timed out or skipped, anything else (failed)."""
    solved = {j for j, r in records.items() if r["outcome"] == "solved"}
    pruned = {j for j, r in records.items() if r["outcome"] in ("timeout", "skipped")}
    other = set(records) - solved - pruned
    return solved, pruned, other


def overlapping_attempts(ledger: list[dict]) -> list[str]:
    """Attempts of one job (one pid each) that ran at the same time: a lost attempt still
    alive when its job started again elsewhere."""
    spans: dict[tuple[str, int], list[float]] = {}
    for entry in ledger:
        span = spans.setdefault((entry["job"], entry["pid"]), [entry["t"], entry["t"]])
        span[0], span[1] = min(span[0], entry["t"]), max(span[1], entry["t"])
    by_job: dict[str, list[list[float]]] = {}
    for (job, _), span in spans.items():
        by_job.setdefault(job, []).append(span)
    found = []
    for job, attempts in by_job.items():
        attempts.sort()
        for before, after in zip(attempts, attempts[1:]):
            if before[1] > after[0]:
                found.append(f"{job}: an attempt ran {before[1] - after[0]:.2f} s into the next")
    return found


def requeued_lines(log: str) -> list[str]:
    return [line for line in log.splitlines() if re.search(r"re-queued .* from lost worker", line)]


def bucket_outputs(endpoint: str, prefix: str) -> dict[str, tuple[str, float]]:
    """name under the prefix -> (text, time of its last write) of every ``out/`` object."""
    bucket_name, _, path = prefix.removeprefix("gs://").partition("/")
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    found = {}
    for blob in client.list_blobs(bucket_name, prefix=f"{path}/out/"):
        found[blob.name.removeprefix(f"{path}/")] = (blob.download_as_text(),
                                                     blob.updated.timestamp())
    return found


def worker_pids(scratch_root: Path) -> list[int]:
    """Live worker agents whose scratch lies under ``scratch_root`` (the run's "VMs")."""
    root = str(scratch_root.resolve())
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        args = [a.decode(errors="replace") for a in argv]
        if state == "Z" or "expo_executor.worker.agent" not in args or "--scratch" not in args:
            continue
        scratch = args[args.index("--scratch") + 1] if args.index("--scratch") + 1 < len(args) \
            else ""
        if scratch.startswith(root):
            pids.append(int(entry.name))
    return pids


@dataclass
class Killer:
    """A thread that SIGKILLs a random worker agent of the run every ``every`` seconds
    (jittered), up to ``most`` times, while ``busy()`` says work remains and a job is running
    (a kill then always lands on a live run); the job sessions it leaves are the engine's to
    clean up, as a crashed VM's are."""

    scratch_root: Path
    most: int
    every: float
    busy: Callable[[], bool]
    seed: int = 6
    kills: list[tuple[float, int]] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> Killer:
        self._thread = threading.Thread(target=self._run, name="killer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        rng = random.Random(self.seed)
        while len(self.kills) < self.most and not self._stop.wait(
                self.every * rng.uniform(0.6, 1.4)):
            pids = worker_pids(self.scratch_root)
            if not pids or not self.busy():
                continue
            pid = rng.choice(sorted(pids))
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue
            self.kills.append((time.time(), pid))
