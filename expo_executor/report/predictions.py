"""The runtime model against the truth, per rule: how its predictions (made as each job was
taken in, kept in ``jobs.jsonl``) compare with the runtimes the jobs then had.

A solved job's runtime is its command's seconds (its whole job's when the command left no
stamps); a timed-out job only says "longer than its deadline", so it counts as hit when its
interval reached the deadline. Model skips are counted apart: their truth is unknown (they
never ran), and a rerun without ``--expocloud-skip-above`` is how to learn it.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from expo_executor.report.values import MODEL_SKIPPED, SOLVED, TIMEOUT, format_value, unique


@dataclass(frozen=True)
class RulePredictions:
    """One rule's line: jobs compared, the median of actual/predicted over solved ones, the
    share whose truth fell in the 90% interval, and the model skips."""

    rule: str
    compared: int
    median_ratio: float | None
    in_interval: float
    model_skips: int


def compare(jobs: Sequence[Mapping]) -> list[RulePredictions]:
    """Per rule with any prediction, in the order the rules first appear."""
    rules = unique(str(job.get("rule")) for job in jobs if job.get("predicted_s") is not None)
    return [_rule(rule, [j for j in jobs if str(j.get("rule")) == rule
                         and j.get("predicted_s") is not None]) for rule in rules]


def _rule(rule: str, jobs: Sequence[Mapping]) -> RulePredictions:
    ratios, hits, compared = [], 0, 0
    for job in jobs:
        low, high = float(job["predicted_low_s"]), float(job["predicted_high_s"])
        if job.get("outcome") == SOLVED:
            actual = job.get("command_s") if job.get("command_s") is not None \
                else job.get("runtime_s")
            if actual is None:
                continue
            compared += 1
            ratios.append(float(actual) / max(float(job["predicted_s"]), 1e-9))
            hits += low <= float(actual) <= high
        elif job.get("outcome") == TIMEOUT and job.get("deadline_s") is not None:
            compared += 1
            hits += high >= float(job["deadline_s"])
    skips = sum(job.get("outcome") == MODEL_SKIPPED for job in jobs)
    return RulePredictions(rule, compared, statistics.median(ratios) if ratios else None,
                           hits / compared if compared else 0.0, skips)


def to_markdown(lines: Sequence[RulePredictions]) -> str:
    """The report's table of predicted against actual runtimes."""
    rows = ["| rule | jobs compared | median actual / predicted | in the 90% interval | "
            "model-skipped |", "| --- | --- | --- | --- | --- |"]
    rows += [f"| {p.rule} | {p.compared} | {format_value(p.median_ratio) or '-'} | "
             f"{p.in_interval:.0%} | {p.model_skips} |" for p in lines]
    return "\n".join(rows)
