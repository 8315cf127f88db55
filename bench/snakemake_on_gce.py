"""Snakemake's own test workflows on the emulated GCE path, beside plain Snakemake on the same
storage (issue 31, item 3; the results and how to read them: docs/snakemake-on-gce.md).

For each case of Snakemake's ``tests.py`` that tests/snakemake_suite.py reads (a single
``run(dpath(...), literals)``), in a copy of its folder:

- **plain**: ``snakemake`` with the case's own arguments and the GCS emulator as default
  storage (``--default-storage-provider gcs``, a fresh bucket, the inputs staged to its prefix);
- **expocloud**: the same through ``--profile profiles/gce-emulated`` against a fake Compute
  Engine and the same emulator (the rig of tests/e2e/test_snakemake_workflows.py's
  ``test_emulated_gce``, with only its fast polls: no extra slots, no per-case machine), run only
  where plain passes (the measure is "what plain Snakemake passes, expocloud passes").

Each is judged as that test judges it (tests/snakemake_suite_gcs.py): the results are fetched
from storage and compared with the case's ``expected-results/``. The emulators start once per
run. Every finished case is appended to a JSON-lines file at once (a run cut short keeps what
it measured); the markdown table replaces the section ``snakemake-on-gce`` of ``--out``.

    EXPOCLOUD_SNAKEMAKE_TESTS=DIR python bench/snakemake_on_gce.py --cases test01,test02
    EXPOCLOUD_SNAKEMAKE_TESTS=DIR python bench/snakemake_on_gce.py --all --jobs 2 \\
        --out docs/snakemake-on-gce.md --jsonl results.jsonl [--before older.jsonl]
    python bench/snakemake_on_gce.py --table-from results.jsonl --out FILE.md
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import SNAKEMAKE, machine_line, versions, write_section  # noqa: E402
from suite_verdicts import (ERROR, FAIL, NOT_RUN, PASS, TIMEOUT, CaseResult,  # noqa: E402
                            RunOutcome, cell, first_problem, read_jsonl, summary,
                            table)

from expo_executor.emulator.compute import FakeCompute  # noqa: E402
from expo_executor.emulator.gcs import EmulatorProcess, fresh_bucket  # noqa: E402
from tests import snakemake_suite as suite  # noqa: E402
from tests import snakemake_suite_gcs as gcs  # noqa: E402
from tests.emulated_gce import emulated_args, emulated_env, start_fake_compute  # noqa: E402

SECTION = "snakemake-on-gce"
JOB_LOG = re.compile(r"log: (\S+) \(check log file")
GRACE_S = 30  # after a timeout's SIGINT, before SIGKILL: expocloud's Ctrl-C deletes its VMs


@dataclass(frozen=True)
class Rig:
    """What every case of a run shares: Snakemake's tests, the emulators, the limits."""

    tests: Path
    compute: FakeCompute
    storage: str  # the GCS emulator's endpoint
    root: Path  # one folder per case under it, with each run's output
    timeout_s: float
    extra: tuple[str, ...]  # more arguments for the expocloud runs
    stopping: threading.Event = field(default_factory=threading.Event)  # Ctrl-C: start nothing
    live: set[subprocess.Popen] = field(default_factory=set)  # runs under way, to interrupt

    def interrupt(self) -> None:
        """Ctrl-C for every run under way (each is in a session of its own, out of reach of
        the terminal's), and no new one."""
        self.stopping.set()
        for proc in list(self.live):
            _signal(proc, signal.SIGINT)


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_logged(rig: Rig, argv: list[str], cwd: Path, log: Path
               ) -> tuple[subprocess.CompletedProcess, float, bool]:
    """Run in a session of its own, its output in ``log``: (process, wall s, timed out). A run
    over time gets SIGINT (Ctrl-C, on which expocloud deletes its VMs), then SIGKILL."""
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, cwd=cwd, env=emulated_env(rig.storage), stdout=out,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        rig.live.add(proc)
        timed_out = False
        try:
            proc.wait(timeout=rig.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
            _signal(proc, signal.SIGINT)
            try:
                proc.wait(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                _signal(proc, signal.SIGKILL)
                proc.wait()
        finally:
            rig.live.discard(proc)
    wall = time.monotonic() - start
    output = log.read_text(errors="replace")
    return subprocess.CompletedProcess(argv, proc.returncode, output, ""), wall, timed_out


def run_case_once(rig: Rig, case: suite.Case, label: str, args: list[str]) -> RunOutcome:
    """One run of a case on storage: staged, run, its results fetched and judged."""
    folder = rig.root / case.test
    workdir = suite.copy_case(rig.tests, case, folder / label)
    if label == "expocloud":
        gcs.git_init(workdir)
    url = args[args.index("--default-storage-prefix") + 1]
    bucket, prefix = gcs.bucket(rig.storage, url)
    gcs.stage_inputs(workdir, bucket, prefix)
    if rig.stopping.is_set():
        raise KeyboardInterrupt
    proc, wall, timed_out = run_logged(rig, [str(SNAKEMAKE), *args], workdir,
                                       folder / f"{label}.log")
    if timed_out:
        return RunOutcome(TIMEOUT, wall, f"no end within {rig.timeout_s:.0f} s; last line: "
                          + first_problem("\n".join(proc.stdout.splitlines()[-1:])))
    results = folder / f"{label}-results"
    gcs.fetch_results(rig.tests, case, bucket, prefix, results)
    problem = gcs.storage_verdict(rig.tests, case, workdir, results, proc)
    if not problem:
        return RunOutcome(PASS, wall)
    if proc.returncode == 0 or case.kwargs.get("shouldfail"):
        return RunOutcome(FAIL, wall, first_problem(problem))
    return RunOutcome(FAIL, wall, failure_line(proc.stdout, workdir,
                                               _plain_lines(folder, label)))


def failure_line(output: str, workdir: Path, known: list[str]) -> str:
    """The first problem of a failed run's output, and of the first job log it points at
    ("log: PATH (check log file(s) for error details)": a remote job's own output, where a
    group's or a worker's error is)."""
    line = first_problem(output, known)
    for path in JOB_LOG.findall(output):
        log = workdir / path
        if log.is_file():
            return cell(f"{line} — job log: {first_problem(log.read_text(errors='replace'))}")
    return line


def _plain_lines(folder: Path, label: str) -> list[str]:
    """What plain Snakemake printed for the case (its folder's name made this run's): a line
    a passing run printed too is not what went wrong (test01 prints a CyclicGraphException)."""
    log = folder / "plain.log"
    if label == "plain" or not log.is_file():
        return []
    text = log.read_text(errors="replace")
    return text.replace(str(folder / "plain"), str(folder / label)).splitlines()


def measure(rig: Rig, case: suite.Case) -> CaseResult:
    """A case run plainly, then (where plain passes) through expocloud; a failure of the rig
    itself is the case's verdict, not the end of the measurement."""
    def guarded(label: str, make_args: Callable[[], list[str]]) -> RunOutcome:
        try:
            return run_case_once(rig, case, label, make_args())
        except Exception as exc:  # noqa: BLE001 - the rig's failure, recorded per case
            return RunOutcome(ERROR, None, first_problem(f"{type(exc).__name__}: {exc}"))

    plain = guarded("plain", lambda: [
        *gcs.plain_storage_args(f"gs://{fresh_bucket(rig.storage)}/wf"), *case.args()])
    if plain.verdict != PASS:
        return CaseResult(case.test, plain, RunOutcome(NOT_RUN))
    return CaseResult(case.test, plain, guarded("expocloud", lambda: emulated_args(
        rig.compute, rig.storage, None, *gcs.FAST_POLLS, *rig.extra, *case.args(),
        flag="--profile")))


def chosen(args: argparse.Namespace, cases: dict[str, suite.Case]) -> list[suite.Case]:
    if args.all:
        return [cases[name] for name in sorted(cases)]
    names = [name.strip() for name in args.cases.split(",") if name.strip()]
    unknown = [name for name in names if name not in cases]
    if unknown:
        sys.exit(f"snakemake_on_gce: not a readable case of tests.py: {', '.join(unknown)} "
                 "(--all runs every readable case)")
    return [cases[name] for name in names]


def measure_all(args: argparse.Namespace, tests: Path, picked: list[suite.Case],
                root: Path) -> list[CaseResult]:
    """Every picked case, ``--jobs`` at a time, on one pair of emulators; each result is
    appended to the JSON lines as it comes."""
    storage = EmulatorProcess()
    compute = start_fake_compute(root)
    rig = Rig(tests, compute, storage.endpoint, root, args.timeout,
              tuple(shlex.split(args.expocloud_args)))
    results: list[CaseResult] = []
    pool = ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = [pool.submit(measure, rig, case) for case in picked]
        for done, future in enumerate(as_completed(futures), 1):
            result = future.result()
            with open(args.jsonl, "a") as out:
                out.write(result.to_json() + "\n")
            results.append(result)
            print(f"[{done}/{len(picked)}] {result.case}: plain {result.plain.verdict}, "
                  f"expocloud {result.expocloud.verdict} {result.expocloud.problem}",
                  flush=True)
    except KeyboardInterrupt:
        rig.interrupt()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        compute.stop()
        storage.stop()
    return results


def report(results: list[CaseResult], args: argparse.Namespace, command: str) -> str:
    before = read_jsonl(Path(args.before).read_text()) if args.before else None
    said = ([f"The table of `{args.table_from}` (the command that measured it and the machine "
             "are in the text around this section)."] if args.table_from else
            [f"Measured by `{command}`.", machine_line(versions())])
    return "\n\n".join([*said, summary(results), table(results, before)])


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--cases", help="comma-separated test names of tests.py")
    which.add_argument("--all", action="store_true", help="every readable case")
    which.add_argument("--table-from", metavar="JSONL", help="no runs: the table of a JSONL")
    p.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1)")
    p.add_argument("--timeout", type=float, default=300, help="per run, s (default 300)")
    p.add_argument("--out", help="markdown file whose section 'snakemake-on-gce' is replaced")
    p.add_argument("--jsonl", help="JSON lines, one per case, appended as cases end "
                   "(default: a new file in the work folder)")
    p.add_argument("--before", metavar="JSONL", help="an earlier run: its expocloud verdicts "
                   "in a column")
    p.add_argument("--workdir", help="keep each run's folder and output here (default: a "
                   "temporary folder, removed)")
    p.add_argument("--expocloud-args", default="", help="more arguments for the expocloud "
                   "runs, e.g. '--expocloud-slots-per-worker 2'")
    args = p.parse_args(argv)
    if args.jobs < 1 or args.timeout <= 0:
        p.error("--jobs must be at least 1 and --timeout above 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    command = "python bench/snakemake_on_gce.py " + " ".join(
        shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    if args.table_from:
        results = list(read_jsonl(Path(args.table_from).read_text()).values())
    else:
        tests = Path(os.environ.get(suite.ENV, ""))
        if not (tests / "tests.py").is_file():
            sys.exit(f"snakemake_on_gce: {suite.ENV} does not point at Snakemake's tests/: "
                     "run tests/snakemake_tests.sh DIR and export it")
        picked = chosen(args, suite.read_cases(tests))
        keep = Path(args.workdir) if args.workdir else None
        with tempfile.TemporaryDirectory(prefix="snakemake-on-gce-") as scratch:
            root = (keep or Path(scratch)).resolve()
            root.mkdir(parents=True, exist_ok=True)
            args.jsonl = args.jsonl or str(root / "results.jsonl")
            print(f"{len(picked)} cases; JSON lines: {args.jsonl}", flush=True)
            results = measure_all(args, tests, picked, root)
    markdown = report(results, args, command)
    if args.out:
        write_section(SECTION, markdown, Path(args.out))
    print(markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
