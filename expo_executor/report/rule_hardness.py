"""Which jobs a report is about (one rule's, by default those of rules with a hardness spec)
and that rule's hardness: its dims, its scope, and the declared order of categorical values.

The spec is read with the core's own parser (``core.hardness.HardnessSpec.parse``), the one
that accepted it before the run: a spec it refuses is refused here too, never guessed at.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec
from expo_executor.report.run_reader import ReportError
from expo_executor.report.safe_expr import as_number, is_number
from expo_executor.report.values import natural_key, unique


@dataclass(frozen=True)
class HardnessInfo:
    """The hardness spec of the reported rule, as far as the job records tell it."""

    spec: str | None
    dims: tuple[str, ...]
    scope: tuple[str, ...] = ()
    order: dict[str, list[object]] = field(default_factory=dict)
    """Declared order (easiest first) of the values of each categorical dim."""


def select_jobs(jobs: Sequence[Mapping], rule: str | None = None) -> list[Mapping]:
    """The jobs of ``rule``; by default those of the rules with a hardness spec, or all jobs if none has one."""
    if rule is not None:
        chosen = [job for job in jobs if job.get("rule") == rule]
        if jobs and not chosen:
            raise ReportError("rule", f"no jobs of rule {rule!r} in this run", f"use one of: {rule_names(jobs)}")
        return chosen
    hard_rules = {job.get("rule") for job in jobs if job_hardness(job) is not None}
    return [job for job in jobs if job.get("rule") in hard_rules] if hard_rules else list(jobs)


def default_group_by(jobs: Sequence[Mapping], rule: str | None = None) -> list[str]:
    """The "parameter setting" of a job without its instance: hardness dims + scope, else all wildcards but the last."""
    selected = select_jobs(jobs, rule)
    info = hardness_info(selected)
    if info is not None:
        return unique([*info.dims, *info.scope])
    for job in selected:
        wildcards = job.get("wildcards")
        if isinstance(wildcards, dict) and wildcards:
            return list(wildcards)[:-1]
    return []


def hardness_info(jobs: Sequence[Mapping], rule: str | None = None) -> HardnessInfo | None:
    """The hardness spec of the reported rule, with the declared order of categorical values; None without one."""
    selected = select_jobs(jobs, rule)
    first = next((h for h in map(job_hardness, selected) if h is not None), None)
    if first is None:
        return None
    dims = tuple(str(dim) for dim in first["dims"])
    spec = first.get("spec") if isinstance(first.get("spec"), str) else None
    parsed = _parsed(spec)
    scope = parsed.scope if parsed is not None and parsed.scope else _scope_names(first, selected)
    declared = {d.name: list(d.order) for d in parsed.dimensions if d.order is not None} \
        if parsed is not None else {}
    order = {}
    for index, dim in enumerate(dims):
        ranks = _vector_ranks(selected, dims, index)
        values = set(ranks) | set(declared.get(dim, ()))
        if values and not all(is_number(as_number(value)) for value in values):
            order[dim] = sorted(values, key=lambda v, d=dim: _order_key(v, declared.get(d, []), ranks))
    return HardnessInfo(spec=spec, dims=dims, scope=scope, order=order)


def job_hardness(job: Mapping) -> dict | None:
    hardness = job.get("hardness")
    if isinstance(hardness, dict) and isinstance(hardness.get("dims"), list) and hardness["dims"]:
        return hardness
    return None


def rule_names(jobs: Iterable[Mapping]) -> str:
    return ", ".join(unique(str(job.get("rule")) for job in jobs)) or "(none)"


def _parsed(spec: str | None) -> HardnessSpec | None:
    """The record's spec read by the core's parser, the one the run itself used; a spec it
    refuses (a hand-edited or foreign record) is refused here too: a ReportError."""
    if spec is None:
        return None
    try:
        return HardnessSpec.parse(spec)
    except ExpoError as exc:
        raise ReportError("hardness", f"the run records the hardness spec {spec!r}, which the "
                          f"executor refuses ({exc.problem})",
                          "report another run or rule (--rule), or fix the spec in jobs.jsonl") \
            from None


def _scope_names(hardness: Mapping, jobs: Sequence[Mapping]) -> tuple[str, ...]:
    """Without a scope in the spec: the record's "scope" entries that are wildcard names.

    The record's "scope" list holds the job's scope values (e.g. ["dataset1"]); it is used only for entries
    that happen to be wildcard names, in case a writer stores names there instead.
    """
    wildcard_names = {name for job in jobs if isinstance(job.get("wildcards"), dict) for name in job["wildcards"]}
    return tuple(name for name in hardness.get("scope") or () if isinstance(name, str) and name in wildcard_names)


def _vector_ranks(jobs: Sequence[Mapping], dims: tuple[str, ...], index: int) -> dict[object, float]:
    """Value of dim ``index`` -> its hardness coordinate, which encodes the declared order of categories."""
    ranks: dict[object, float] = {}
    for job in jobs:
        hardness, wildcards = job_hardness(job), job.get("wildcards")
        if hardness is None or tuple(hardness["dims"]) != dims or not isinstance(wildcards, dict):
            continue
        vector = hardness.get("vector")
        value = wildcards.get(dims[index])
        if isinstance(vector, list) and len(vector) == len(dims) and value is not None and is_number(vector[index]):
            ranks.setdefault(value, float(vector[index]))
    return ranks


def _order_key(value: object, declared: Sequence[object], ranks: Mapping[object, float]) -> tuple:
    position = declared.index(value) if value in declared else len(declared)
    return (position, ranks.get(value, math.inf), natural_key(value))
