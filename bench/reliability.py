#!/usr/bin/env python3
"""The reliability figures: the fault-injection suite, the bad-input matrix and the security
tests, run in one go, summed into docs/RELIABILITY.md.

    python bench/reliability.py [--quick] [--no-write] [-- PYTEST_ARGS...]

Runs ``pytest tests/faults`` and both tiers of the bad-input and security tests (unit:
``test_bad_input.py``, ``test_security.py``; e2e: ``test_bad_input_runs.py``,
``test_security_processes.py``) with
``EXPOCLOUD_FAULTS=full`` (the sizes the figures are quoted at; ``--quick``: the CI sizes) and
``EXPOCLOUD_FAULTS_RECORD`` set, so that every fault test appends what it injected and what
survived; the JUnit XML gives each test's verdict. The table says, per kind of fault: faults
injected, faults survived, jobs, jobs lost and orphan VMs (the last two must be 0), and which
tests passed. Exits non-zero if any test failed or any figure that must be zero is not.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO, machine_line, versions, write_section  # noqa: E402

DOC = REPO / "docs" / "RELIABILITY.md"
SUITES = ["tests/faults", "tests/unit/test_bad_input.py", "tests/unit/test_security.py",
          "tests/e2e/test_bad_input_runs.py", "tests/e2e/test_security_processes.py"]


def junit_verdicts(path: Path) -> dict[str, str]:
    """test id (file::name) -> passed / failed / skipped, from pytest's JUnit XML."""
    verdicts = {}
    for case in ET.parse(path).iter("testcase"):
        module = case.get("classname", "").replace(".", "/")
        test_id = f"{module}.py::{case.get('name')}"
        if case.find("failure") is not None or case.find("error") is not None:
            verdicts[test_id] = "failed"
        elif case.find("skipped") is not None:
            verdicts[test_id] = "skipped"
        else:
            verdicts[test_id] = "passed"
    return verdicts


def summarize(rows: list[dict], verdicts: dict[str, str]) -> tuple[str, bool]:
    """The figures as Markdown, and whether everything held."""
    by_kind: dict[str, dict] = defaultdict(lambda: defaultdict(int))
    for row in rows:
        kind = by_kind[row["kind"]]
        for key in ("injected", "survived", "jobs", "jobs_lost", "orphan_vms"):
            kind[key] += int(row.get(key, 0))
        kind["runs"] += 1
        kind.setdefault("details", [])
        if row.get("detail"):
            kind["details"].append(row["detail"])
    lines = ["| fault | runs | injected | survived | jobs | jobs lost | orphan VMs |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    totals: dict[str, int] = defaultdict(int)
    for name in sorted(by_kind):
        kind = by_kind[name]
        lines.append(f"| {name} | {kind['runs']} | {kind['injected']} | {kind['survived']} | "
                     f"{kind['jobs']} | {kind['jobs_lost']} | {kind['orphan_vms']} |")
        for key in ("runs", "injected", "survived", "jobs", "jobs_lost", "orphan_vms"):
            totals[key] += kind[key]
    lines.append(f"| **all** | {totals['runs']} | {totals['injected']} | {totals['survived']} | "
                 f"{totals['jobs']} | {totals['jobs_lost']} | {totals['orphan_vms']} |")
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for test_id, verdict in verdicts.items():
        suite = ("bad-input matrix" if "test_bad_input" in test_id else
                 "security" if "test_security" in test_id else "fault injection")
        counts[suite][verdict] += 1
    lines += ["", "| tests | passed | failed | skipped |", "|---|---:|---:|---:|"]
    for suite in sorted(counts):
        c = counts[suite]
        lines.append(f"| {suite} | {c['passed']} | {c['failed']} | {c['skipped']} |")
    details = [f"- {name}: {d}" for name in sorted(by_kind) for d in by_kind[name]["details"]]
    if details:
        lines += ["", "What each run saw:", "", *details]
    failed = [t for t, v in verdicts.items() if v == "failed"]
    if failed:
        lines += ["", "Failed: " + ", ".join(f"`{t}`" for t in sorted(failed))]
    ok = not failed and totals["jobs_lost"] == 0 and totals["orphan_vms"] == 0 and bool(rows)
    return "\n".join(lines), ok


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CI sizes, not the full ones")
    parser.add_argument("--no-write", action="store_true", help="print, do not touch the doc")
    parser.add_argument("pytest_args", nargs="*", help="more pytest arguments (after --)")
    args = parser.parse_args(argv)
    mode = "quick" if args.quick else "full"
    with tempfile.TemporaryDirectory() as scratch:
        record, junit = Path(scratch) / "faults.jsonl", Path(scratch) / "junit.xml"
        env = {**os.environ, "EXPOCLOUD_FAULTS": mode, "EXPOCLOUD_FAULTS_RECORD": str(record)}
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
                   f"--junitxml={junit}", *SUITES, *args.pytest_args]
        started = time.time()
        code = subprocess.run(command, cwd=REPO, env=env).returncode
        wall = time.time() - started
        rows = [json.loads(line) for line in record.read_text().splitlines()] \
            if record.exists() else []
        verdicts = junit_verdicts(junit) if junit.exists() else {}
    table, ok = summarize(rows, verdicts)
    shown = "python bench/reliability.py" + (" --quick" if args.quick else "")
    section = (f"`{shown}` ({mode} sizes; {machine_line(versions())} "
               f"Measured {time.strftime('%Y-%m-%d %H:%M')}, {wall / 60:.1f} min.)\n\n{table}\n")
    print(section)
    if not args.no_write:
        write_section("figures", section, DOC)
    return 0 if code == 0 and ok else 1


if __name__ == "__main__":
    sys.exit(main())
