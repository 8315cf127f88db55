"""A run's live status as one typed record (``status.json``): the counts, the jobs running (where
and for how long against their deadline), the pools (VMs by state and machine type, their cost),
the recent timeouts with what each pruned, the recent model skips with their probability, the
runtime model's estimate of what is left, and the outcome map as it fills in.

The coordinator builds it every status interval; ``expocloud status`` and the run page
(``run.html``) show it. Everything here is pure: what to show is a function of the record and
the time given, so that the text and the page are tested without a run. Lists are capped
(:data:`MAX_RUNNING`, :data:`MAX_TIMEOUTS`, :data:`MAX_AXIS`, :data:`MAX_CELLS`) so that a big
sweep's status stays cheap to write every round.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

from expo_executor.core.records import HardnessMeta
from expo_executor.core.remaining import Remaining

MAX_RUNNING = 50  # running jobs listed (the count covers them all)
MAX_TIMEOUTS = 20  # recent timeouts kept
MAX_AXIS = 40  # values per axis of the outcome map
MAX_CELLS = 4_000  # cells the map draws in all (panels x columns x rows)
STATES = ("queued", "running", "solved", "timeout", "skipped", "failed", "model-skipped")


@dataclass(frozen=True)
class RunningJob:
    """A job running on a worker: ``since`` is when the coordinator saw it start (s since the
    epoch); ``deadline_s`` None: no deadline."""

    label: str
    rule: str
    wildcards: Mapping[str, str]
    worker: str
    since: float
    deadline_s: float | None


@dataclass(frozen=True)
class PoolStatus:
    """One pool of one machine type: its VMs booting and ready, and what it has cost so far
    (None: not priced)."""

    pool: str
    machine_type: str
    booting: int
    ready: int
    cost_usd: float | None


@dataclass(frozen=True)
class TimeoutNote:
    """A timeout: the job, its hardness (``dim=value`` pairs), how long it ran
    against its deadline, and the queued jobs it skipped and running ones it cancelled."""

    label: str
    hardness: str
    ran_s: float
    deadline_s: float | None
    pruned: int
    cancelled: int
    time: float


@dataclass(frozen=True)
class ModelSkipNote:
    """A job the runtime model skipped: its probability of passing its deadline, the threshold
    it reached and the setting that set it (the run's, or its CWL tool's hint), and its
    predicted median."""

    label: str
    probability: float
    skip_above: float
    median_s: float | None  # None: the model predicts it never finishes (JSON has no infinity)
    deadline_s: float | None
    time: float
    setting: str = "--expocloud-skip-above"


def predicted(seconds: float | None) -> str:
    """A predicted runtime for people: the learned model puts a job it judges hopeless at
    infinity (None once written to JSON)."""
    return "unbounded" if seconds is None or not math.isfinite(seconds) else f"{seconds:.0f} s"


def model_skip_line(note: ModelSkipNote) -> str:
    """The log's (and the status's) one line for a model skip."""
    return (f"expocloud: model-skipped: {note.label}: {note.probability:.1%} likely to pass its "
            f"deadline of {note.deadline_s or 0:g} s (predicted median {predicted(note.median_s)}; "
            f"{note.setting} {note.skip_above:g})")


@dataclass(frozen=True)
class OutcomeMap:
    """Outcome counts over the hardness dims of the run's swept jobs: one panel per ``facet``
    value, one cell per ``(x, y)``; ``cells`` holds ``(facet, x, y) -> {state: count}``."""

    x: str
    y: str | None = None
    facet: str | None = None
    xs: tuple[str, ...] = ()
    ys: tuple[str, ...] = ()
    facets: tuple[str, ...] = ()
    cells: Mapping[tuple[str, str, str], Mapping[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"x": self.x, "y": self.y, "facet": self.facet, "xs": list(self.xs),
                "ys": list(self.ys), "facets": list(self.facets),
                "cells": [[*key, dict(counts)] for key, counts in self.cells.items()]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OutcomeMap:
        cells = {(str(f), str(x), str(y)): dict(counts) for f, x, y, counts in data["cells"]}
        return cls(data["x"], data.get("y"), data.get("facet"), tuple(data["xs"]),
                   tuple(data["ys"]), tuple(data["facets"]), cells)


@dataclass(frozen=True)
class RunStatus:
    """The whole snapshot. ``counts``: jobs per state (:data:`STATES`); ``finished``: the
    coordinator has stopped (nothing will change); ``budget_usd``: the budget, if any."""

    time: float
    counts: Mapping[str, int]
    workers: int
    booting: int
    slots: int
    interval: float
    finished: bool = False
    cost_usd: float | None = None
    budget_usd: float | None = None
    running_jobs: tuple[RunningJob, ...] = ()
    pools: tuple[PoolStatus, ...] = ()
    timeouts: tuple[TimeoutNote, ...] = ()
    outcome_map: OutcomeMap | None = None
    model_skips: tuple[ModelSkipNote, ...] = ()
    estimate: Remaining | None = None  # None: no runtime model, or nothing predicted yet

    def to_dict(self) -> dict[str, Any]:
        """The ``status.json`` record: the counts at the top level, as older readers expect."""
        record: dict[str, Any] = {
            **self.counts, "workers": self.workers, "booting": self.booting,
            "slots": self.slots, "time": self.time, "interval": self.interval,
            "finished": self.finished, "budget_usd": self.budget_usd,
            "running_jobs": [asdict(job) for job in self.running_jobs],
            "pools": [asdict(pool) for pool in self.pools],
            "timeouts": [asdict(note) for note in self.timeouts],
            "outcome_map": self.outcome_map.to_dict() if self.outcome_map else None,
            "model_skips": [asdict(note) for note in self.model_skips],
            "estimate": asdict(self.estimate) if self.estimate else None}
        if self.cost_usd is not None:
            record["cost_usd"] = self.cost_usd
        return record

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RunStatus:
        """A ``status.json`` record, an older one (counts only) included."""
        omap = data.get("outcome_map")
        return cls(
            float(data["time"]), {state: int(data.get(state, 0)) for state in STATES},
            int(data.get("workers", 0)), int(data.get("booting", 0)), int(data.get("slots", 0)),
            float(data.get("interval", 10.0)), bool(data.get("finished", False)),
            data.get("cost_usd"), data.get("budget_usd"),
            tuple(RunningJob(**job) for job in data.get("running_jobs", ())),
            tuple(PoolStatus(**pool) for pool in data.get("pools", ())),
            tuple(TimeoutNote(**note) for note in data.get("timeouts", ())),
            OutcomeMap.from_dict(omap) if omap else None,
            tuple(ModelSkipNote(**note) for note in data.get("model_skips", ())),
            Remaining(**data["estimate"]) if data.get("estimate") else None)

    def stale(self, now: float) -> bool:
        """No status written for long: the coordinator may have died (a finished run is not
        stale)."""
        return not self.finished and now - self.time > max(120.0, 3 * self.interval)


def timeout_line(note: TimeoutNote) -> str:
    """The log's one line for a timeout: what, after how long, and what it pruned
    (the skips it caused are this line's summary; each one's detail is in ``jobs.jsonl``)."""
    deadline = f" (deadline {note.deadline_s:g} s)" if note.deadline_s is not None else ""
    return (f"expocloud: timeout: {note.label} after {note.ran_s:.0f} s{deadline}; pruned "
            f"{note.pruned} queued, cancelled {note.cancelled} running")


def counts_line(status: RunStatus) -> str:
    counts = status.counts
    model = counts.get("model-skipped", 0)  # said only when the model skipped something
    return (f"{counts['queued']} queued, {counts['running']} running, {counts['solved']} solved, "
            f"{counts['timeout']} timed out, {counts['skipped']} skipped, "
            + (f"{model} model-skipped, " if model else "")
            + f"{counts['failed']} failed")


def cost_phrase(cost_usd: float | None, budget_usd: float | None) -> str:
    """``$0.0123 so far`` or ``$0.0123 of $5 budget``; empty when not priced."""
    if cost_usd is None:
        return ""
    if budget_usd is None:
        return f"${cost_usd:.4f} so far"
    return f"${cost_usd:.4f} of ${budget_usd:g} budget"


def elapsed_phrase(job: RunningJob, now: float) -> str:
    """``12 s of 30 s`` (or ``12 s, no deadline``)."""
    elapsed = max(0.0, now - job.since)
    if job.deadline_s is None:
        return f"{elapsed:.0f} s, no deadline"
    return f"{elapsed:.0f} s of {job.deadline_s:g} s"


def text_lines(status: RunStatus, now: float) -> list[str]:
    """What ``expocloud status`` prints of a snapshot, as of ``now``."""
    age = now - status.time
    cost = cost_phrase(status.cost_usd, status.budget_usd)
    lines = [f"{counts_line(status)} | {status.workers} workers"
             f"{f' (+{status.booting} booting)' if status.booting else ''}, {status.slots} slots"
             f"{f' | {cost}' if cost else ''} (as of {age:.0f} s ago"
             f"{', finished' if status.finished else ''})"]
    if status.estimate is not None and not status.finished:
        lines.append(status.estimate.line())
    if status.running_jobs:
        lines.append(f"running ({status.counts['running']}):")
        lines += [f"  {job.label}  on {job.worker}  {elapsed_phrase(job, now)}"
                  for job in status.running_jobs]
        hidden = status.counts["running"] - len(status.running_jobs)
        if hidden > 0:
            lines.append(f"  ... and {hidden} more")
    if status.pools:
        lines.append("pools:")
        for pool in status.pools:
            cost = f", {cost_phrase(pool.cost_usd, None)}" if pool.cost_usd is not None else ""
            lines.append(f"  {pool.pool} {pool.machine_type}: {pool.ready} ready, "
                         f"{pool.booting} booting{cost}")
    if status.timeouts:
        lines.append("recent timeouts:")
        lines += [f"  {timeout_line(note).removeprefix('expocloud: timeout: ')}"
                  for note in reversed(status.timeouts)]
    if status.model_skips:
        lines.append("recent model skips:")
        lines += [f"  {model_skip_line(note).removeprefix('expocloud: model-skipped: ')}"
                  for note in reversed(status.model_skips)]
    return lines


def outcome_map(jobs: Iterable[tuple[HardnessMeta | None, Mapping[str, str], str]]
                ) -> OutcomeMap | None:
    """The map of ``(hardness, wildcards, state)`` per job: over the dims of the first
    hardness spec seen (jobs of another spec are left out), the last two dims as x and y and
    the first of three or more as the facet (as ``expocloud report`` draws it); axes in
    hardness order, each capped at :data:`MAX_AXIS` values, and the panels at as many as
    :data:`MAX_CELLS` cells hold (the first in hardness order), so that the page and the record
    stay the same size however many jobs the sweep has. None: no job has a hardness."""
    spec: HardnessMeta | None = None
    cells: dict[tuple[str, str, str], dict[str, int]] = {}
    ranks: dict[int, dict[str, tuple]] = {0: {}, 1: {}, 2: {}}
    for hardness, wildcards, state in jobs:
        if hardness is None or (spec is not None and hardness.spec != spec.spec):
            continue
        spec = spec or hardness
        picked = _map_dims(hardness.dims)
        values = []
        for axis, index in enumerate(picked):
            value = "" if index is None else \
                str(wildcards.get(hardness.dims[index], hardness.vector[index]))
            if index is not None:
                ranks[axis].setdefault(value, _rank(hardness.vector[index], value))
            values.append(value)
        counts = cells.setdefault((values[2], values[0], values[1]), {})
        counts[state] = counts.get(state, 0) + 1
    if spec is None:
        return None
    x, y, facet = (None if i is None else spec.dims[i] for i in _map_dims(spec.dims))
    axes = [tuple(sorted(ranks[axis], key=ranks[axis].__getitem__))[:MAX_AXIS]
            for axis in range(3)]
    # as many panels as MAX_CELLS holds (at least one): every panel draws all its cells
    axes[2] = axes[2][:max(1, MAX_CELLS // (len(axes[0]) * max(1, len(axes[1]))))]
    xs, ys, facets = set(axes[0]), set(axes[1] or ("",)), set(axes[2] or ("",))
    shown = {key: counts for key, counts in cells.items()
             if key[1] in xs and key[2] in ys and key[0] in facets}
    return OutcomeMap(str(x), y, facet, axes[0], axes[1], axes[2], shown)


def _map_dims(dims: tuple[str, ...]) -> tuple[int | None, int | None, int | None]:
    """Indexes of the x, y and facet dims among ``dims``."""
    if len(dims) >= 3:
        return len(dims) - 2, len(dims) - 1, 0
    if len(dims) == 2:
        return 0, 1, None
    return 0, None, None


def _rank(component: Any, value: str) -> tuple:
    """A value's place on its axis: by its hardness component, then its text."""
    try:
        return (0, float(component), value)
    except (TypeError, ValueError):
        return (1, 0.0, value)
