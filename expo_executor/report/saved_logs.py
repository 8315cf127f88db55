"""``expocloud logs JOB``: the logs a run saved of its failed and timed-out jobs.

A job's line in ``jobs.jsonl`` names its logs directory (``logs_dir``, relative to the run
directory) when its worker saved its output and ``log:`` files. JOB names one or more jobs:

- a job id: Snakemake's (``7``: every attempt of job 7) or the run's key (``j7a1``);
- ``solve:key=value,...``: the jobs of rule ``solve`` whose wildcards include those values
  (``rule:key=value,...``, with the word ``rule``, which no rule can be named: of any rule);
- a rule name: every job of that rule whose logs were saved.
"""

from __future__ import annotations

import re
from pathlib import Path

from expo_executor.report.run_reader import ReportError, load_jobs

OUTPUT_FIRST = "output.log"  # the job's captured output is shown before its log: files
_KEY = re.compile(r"^[jg][0-9a-f]+a\d+$")


def _wildcards(text: str, job: str) -> dict[str, str]:
    pairs = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ReportError("JOB", f"{job!r}: {item!r} is not key=value",
                              "write rule:key=value,key=value (or just the rule's name)")
        pairs[key.strip()] = value.strip()
    return pairs


def matches(record: dict, job: str) -> bool:
    """Whether the job record is one ``job`` names (see the module's docstring)."""
    key, rule = str(record.get("key", "")), str(record.get("rule", ""))
    if job.isdigit():
        return re.fullmatch(rf"j{job}a\d+", key) is not None
    if _KEY.match(job):
        return key == job
    name, colon, wildcards = job.partition(":")
    if not colon:
        return rule == job
    have = {str(k): str(v) for k, v in (record.get("wildcards") or {}).items()}
    return name in (rule, "rule") and all(have.get(k) == v
                                          for k, v in _wildcards(wildcards, job).items())


def find(run_dir: Path, job: str) -> list[Path]:
    """The logs directories of the jobs ``job`` names, in the order they ended; raises
    ReportError (one line) when none of them has saved logs."""
    saved = [r for r in load_jobs(run_dir) if r.get("logs_dir")]
    found = [run_dir / r["logs_dir"] for r in saved if matches(r, job)]
    found = [d for d in found if d.is_dir()]
    if found:
        return found
    known = ", ".join(sorted({f"{r['key']} ({Path(r['logs_dir']).name})" for r in saved})[:5])
    raise ReportError("JOB", f"no saved logs for {job!r} in run {run_dir.name}" +
                      (f" (saved: {known})" if known else " (it saved none)"),
                      "name a job id, its key, a rule, or rule:key=value, or pick another run "
                      "with --run")


def files(directory: Path) -> list[Path]:
    """A job's saved logs: its output first, then its log files by path."""
    found = sorted(p for p in directory.rglob("*") if p.is_file())
    return sorted(found, key=lambda p: (p.relative_to(directory).as_posix() != OUTPUT_FIRST,
                                        p.relative_to(directory).as_posix()))
