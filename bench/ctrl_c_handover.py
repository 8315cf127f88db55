"""Ctrl-C as Snakemake hands jobs over, many runs at a time: how many runs ignore it.

tests/e2e/test_sweep_selection.py's scenario (300 ready jobs under ``-j 100``, ``--verbose``):
SIGINT comes as soon as Snakemake logged its second job selection, while it hands 99 jobs over
and logs a job line for each. Snakemake's log handler drops a KeyboardInterrupt raised while it
writes a line (frontends/process_exit.py), so without our handler's deferral a share of such
runs went on for as long as one waited. ``--at-once`` runs go together (a loaded machine makes
the log writes longer, and the loss likelier).

    python bench/ctrl_c_handover.py [--runs 12] [--at-once 3] [--wait 30]

Prints, per run, the seconds from the SIGINT to the process's exit, or ``ignored`` when it still
ran ``--wait`` seconds later (it is then killed), and the count of ignored runs.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.e2e.test_sweep_selection import JOBS, OURS, SNAKEFILE, SNAKEMAKES  # noqa: E402
from tests.helpers import SNAKEMAKE, interruptible  # noqa: E402


def one_run(folder: Path, wait_s: float) -> float | None:
    """Seconds from the SIGINT to the exit; None: still running ``wait_s`` after it."""
    folder.mkdir(parents=True)
    (folder / "Snakefile").write_text(SNAKEFILE)
    log = folder / "snakemake.log"
    with log.open("w") as err:
        proc = subprocess.Popen([SNAKEMAKE, "--executor", "expocloud", "-j", str(JOBS),
                                 "--verbose"], cwd=folder, stdout=subprocess.DEVNULL,
                                stderr=err, preexec_fn=interruptible, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            text = log.read_text()
            if len(OURS.findall(text)) >= 2 and len(SNAKEMAKES.findall(text)) >= 2:
                break
            time.sleep(0.05)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=wait_s)
        except subprocess.TimeoutExpired:
            return None
        return time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # a second Ctrl-C, as a user would, then a kill
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=12)
    p.add_argument("--at-once", type=int, default=3)
    p.add_argument("--wait", type=float, default=30.0, help="s after the SIGINT")
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="ctrl-c-handover-") as scratch, \
            ThreadPoolExecutor(args.at_once) as pool:
        results = list(pool.map(lambda n: one_run(Path(scratch) / f"run{n}", args.wait),
                                range(args.runs)))
    for n, seconds in enumerate(results):
        print(f"run {n}: " + ("ignored" if seconds is None else f"exit after {seconds:.1f} s"))
    ignored = sum(seconds is None for seconds in results)
    print(f"{ignored} of {len(results)} runs ignored the Ctrl-C for {args.wait:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
