"""The records and the table of bench/snakemake_on_gce.py, apart from its runs (so they are
tested without an emulator): one verdict per case and way of running it, the first line of
what went wrong, JSON lines to compare one measurement with a later one, and the markdown.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass

PASS, FAIL, TIMEOUT, NOT_RUN, ERROR = "pass", "fail", "timeout", "not run", "rig error"
VERDICTS = (PASS, FAIL, TIMEOUT, NOT_RUN, ERROR)
PROBLEM_CHARS = 320  # a table cell, not a log

# What marks the line that says what went wrong, best first: expocloud's own refusals (one line
# that names the fix), then a named exception or error, then Snakemake's "Error in rule", then
# anything that says it failed. A run's output is searched for the first line of the best kind.
_MARKS = (
    re.compile(r"expocloud\b.*\b(refus|cannot|can't|fix:|no machine|not allowed|exceeds)", re.I),
    re.compile(r"^(?!Error in rule).*\b\w*(Exception|Error)\b"),
    re.compile(r"Error in rule"),
    re.compile(r"\b(error|failed|missing|timed? ?out|not found|denied)\b", re.I),
)
# Snakemake's closing lines, said after every failure: never the first problem
_NOISE = re.compile(r"^(Shutting down|Exiting because|Complete log|Storing output|"
                    r"Will exit after finishing|.*Look for the error message above|"
                    r"Traceback \(most recent call last\):$)")


@dataclass(frozen=True)
class RunOutcome:
    """One way of running a case: its verdict, wall time, and the first line of its problem."""

    verdict: str
    wall_s: float | None = None
    problem: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"unknown verdict {self.verdict!r} (one of {', '.join(VERDICTS)})")


@dataclass(frozen=True)
class CaseResult:
    """A case of Snakemake's suite, run by plain Snakemake and through expocloud."""

    case: str
    plain: RunOutcome
    expocloud: RunOutcome

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, line: str) -> CaseResult:
        data = json.loads(line)
        return cls(data["case"], RunOutcome(**data["plain"]), RunOutcome(**data["expocloud"]))


def read_jsonl(text: str) -> dict[str, CaseResult]:
    """Results by case from JSON lines (a later line for the same case wins)."""
    results = [CaseResult.from_json(line) for line in text.splitlines() if line.strip()]
    return {result.case: result for result in results}


def first_problem(text: str, known: Iterable[str] = ()) -> str:
    """The line of a run's output (or of a verdict) that says first what went wrong, with the
    next line when it is only a heading ("WorkflowError:"); '' for none. Lines in ``known``
    (what a passing run of the same case printed too) are never the problem."""
    seen = {line.strip() for line in known}
    lines = [line.strip() for line in text.splitlines()]
    lines = [line for line in lines if line]
    for mark in _MARKS:
        for i, line in enumerate(lines):
            if mark.search(line) and line not in seen and not _NOISE.match(line) \
                    and not _traceback_frame(lines, i):
                if line.endswith(":") and i + 1 < len(lines):
                    line = f"{line} {lines[i + 1]}"
                return cell(line)
    return cell(lines[0]) if lines else ""


def _traceback_frame(lines: list[str], i: int) -> bool:
    """A traceback's ``File "...", line N`` or the source line under it: code, not a message
    (``raise IOError(`` names an error and says nothing)."""
    return lines[i].startswith('File "') or (i > 0 and lines[i - 1].startswith('File "'))


def cell(text: str) -> str:
    """``text`` as one table cell: pipes escaped, cut to PROBLEM_CHARS."""
    text = re.sub(r"(?<!\\)\|", r"\\|", text)  # once: a cell of cells stays right
    return text if len(text) <= PROBLEM_CHARS else text[:PROBLEM_CHARS - 1] + "…"


def _wall(outcome: RunOutcome) -> str:
    return "" if outcome.wall_s is None else f"{outcome.wall_s:.0f}"


def summary(results: Iterable[CaseResult]) -> str:
    """Counts: the cases, those plain Snakemake passes, and expocloud's verdicts on those."""
    results = list(results)
    plain_passes = [r for r in results if r.plain.verdict == PASS]
    counts = {v: sum(r.expocloud.verdict == v for r in plain_passes) for v in VERDICTS}
    said = ", ".join(f"{n} {v}" for v, n in counts.items() if n)
    return (f"{len(results)} cases; plain Snakemake passes {len(plain_passes)} with the emulated "
            f"bucket as default storage; of those, through expocloud: {said or 'none run'}.")


def table(results: Iterable[CaseResult],
          before: Mapping[str, CaseResult] | None = None) -> str:
    """The markdown table, one row per case by name; with ``before`` (an earlier
    measurement), a column with that measurement's expocloud verdict."""
    head = ["case", "plain", "plain s", "expocloud", "expocloud s"]
    head += ["before"] if before is not None else []
    head += ["first problem (expocloud's; plain's when plain fails)"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in sorted(results, key=lambda r: r.case):
        cells = [r.case, r.plain.verdict, _wall(r.plain), r.expocloud.verdict,
                 _wall(r.expocloud)]
        if before is not None:
            cells.append(before[r.case].expocloud.verdict if r.case in before else "")
        problem = r.expocloud.problem or (f"plain: {r.plain.problem}" if r.plain.problem else "")
        rows.append("| " + " | ".join([*cells, problem]) + " |")
    return "\n".join(rows)
