"""Ctrl-C at each phase of a sweep: seconds from SIGINT to snakemake's exit, and what is left.

A sweep of N points (``results/{a}/{n}/{s}.txt``, jobs that sleep) run as users type it,
``snakemake --executor expocloud -j 1000`` (locally) or ``--profile profiles/gce-emulated``
(fake Compute Engine + GCS emulator on loopback), is sent one SIGINT in each phase:

- local ``dag``: as Snakemake starts building the DAG;
- local ``selection``: as Snakemake first selects jobs (all N ready at once);
- local ``running``: once jobs run;
- gce ``storage``: 2 s into the DAG's build, while Snakemake asks the bucket whether each
  output exists;
- gce ``booting``: once the fake Compute lists a VM of the run, before its worker is up
  (the fake boots in 30 s);
- gce ``running``: once jobs run on the VMs.

Reported: seconds from the SIGINT to the process's exit (the issue asks for 10 s at most), the
worker processes left under the work directory, and the fake Compute's instances left at exit
(none may be).

    python bench/ctrl_c.py [--points 5000] [--phases local-dag,...] [--name ctrl-c]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import REPO, SNAKEMAKE, fmt, machine_line, versions, write_section  # noqa: E402

from expo_executor.emulator.compute import FakeCompute  # noqa: E402
from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket  # noqa: E402
from tests.helpers import interruptible, processes_under  # noqa: E402

SNAKEFILE = """
N = int(config["points"])
POINTS = [(a, n, s) for a in range(10) for n in range(max(1, N // 100)) for s in range(10)][:N]

rule all:
    input: [f"results/{a}/{n}/{s}.txt" for a, n, s in POINTS]

rule point:
    output: "results/{a}/{n}/{s}.txt"
    shell: "sleep 300; touch {output}"
"""

PHASES = ("local-dag", "local-selection", "local-running", "gce-storage", "gce-booting",
          "gce-running")


@dataclass
class Outcome:
    phase: str
    reached: bool  # the phase's trigger was seen before the timeout
    seconds: float | None  # SIGINT to exit
    processes_left: int
    vms_left: int | None


def _running_sessions(fake: FakeCompute) -> int:
    """Jobs running on the fake's VMs, from their workers' recorded sessions."""
    return sum(len(p.read_text().split()) for p in fake.scratch_root.glob("*/sessions"))


def _trigger(phase: str, log: Path, fake: FakeCompute | None) -> Callable[[], bool]:
    text = lambda: log.read_text() if log.exists() else ""  # noqa: E731
    if phase in ("local-dag", "gce-storage"):
        return lambda: "Building DAG of jobs" in text()
    if phase == "local-selection":
        return lambda: "Select jobs to execute" in text()
    if phase == "local-running":
        return lambda: any("sleep 300" in cmd for _, cmd in processes_under(log.parent))
    assert fake is not None
    if phase == "gce-booting":
        return lambda: bool(fake.instances())
    return lambda: _running_sessions(fake) >= 2


def run_phase(phase: str, points: int, root: Path, storage: str | None) -> Outcome:
    workdir = root / phase
    workdir.mkdir()
    (workdir / "Snakefile").write_text(SNAKEFILE)
    fake = None
    cmd = [str(SNAKEMAKE), "--config", f"points={points}"]
    env = dict(os.environ)
    if phase.startswith("gce"):
        fake = FakeCompute(root / f"{phase}-vms", boot_delay=30.0 if phase == "gce-booting"
                           else 0.5, notice_s=0.5).start()
        cmd += ["--profile", str(REPO / "profiles" / "gce-emulated"),
                "--expocloud-gce-endpoint", fake.endpoint,
                "--default-storage-prefix", f"gs://{fresh_bucket(storage)}/wf"]
        env["STORAGE_EMULATOR_HOST"] = storage
    else:
        cmd += ["--executor", "expocloud", "-j", "1000"]
    log = workdir / "snakemake.log"
    try:
        with log.open("w") as out:
            proc = subprocess.Popen(cmd, cwd=workdir, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, preexec_fn=interruptible)
        reached = _wait(_trigger(phase, log, fake), 600)
        if phase == "gce-storage":
            time.sleep(2.0)  # into the existence checks
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=300)
            seconds: float | None = time.monotonic() - sent
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            seconds = None
        vms = len(fake.instances()) if fake else None
        return Outcome(phase, reached, seconds, len(processes_under(workdir)), vms)
    finally:
        if fake is not None:
            fake.stop()


def _wait(predicate: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return False


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=5000)
    parser.add_argument("--phases", default=",".join(PHASES))
    parser.add_argument("--name", default="ctrl-c", help="section name in RESULTS.md")
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    storage = EmulatorProcess() if any(p.startswith("gce") for p in phases) else None
    rows = []
    try:
        with tempfile.TemporaryDirectory(prefix="expocloud-bench-ctrl-c-") as tmp:
            for phase in phases:
                print(f"{phase} ...", flush=True)
                rows.append(run_phase(phase, args.points, Path(tmp),
                                      storage.endpoint if storage else None))
                print(rows[-1], flush=True)
    finally:
        if storage is not None:
            storage.stop()
    table = "\n".join(
        f"| {r.phase} | {'yes' if r.reached else 'no (sent at the timeout)'} | "
        f"{fmt(r.seconds, 1) if r.seconds is not None else 'over 300'} | {r.processes_left} | "
        f"{'n/a' if r.vms_left is None else r.vms_left} |" for r in rows)
    write_section(args.name, f"""## Ctrl-C at each phase of a {args.points}-point sweep (`bench/ctrl_c.py`)

({machine_line(versions())}). `python bench/ctrl_c.py --points {args.points}`: one SIGINT per
run, in the phase named; seconds from it to snakemake's exit; what was left at that moment.

| phase | trigger seen | SIGINT to exit (s) | worker processes left | fake VMs left |
|---|---|---|---|---|
{table}
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
