"""What a run tells the user unasked (``--expocloud-notify``, ``--expocloud-notify-command``):
which events are due, and the small document each one is.

Five events: the run's end (with its summary), a budget phase change, the first failed job, a
stalled run (no progress for ``--expocloud-stall-after`` while workers are alive, so billed on
GCE) and a pool stopped for the rest of the run (capacity, quota, or VMs that never come up).
The first failure and the stall are said once each (a stall again only after progress).

Pure: the time comes in as an argument, the documents are built from typed records, and no
setting is read here, so nothing secret (the notification URL, its signing secret, a command)
can reach a payload: only the fields below are ever sent. Sending is the ``notify`` package's.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from enum import Enum
from typing import Any

PAYLOAD_VERSION = 1
MAX_TEXT = 300  # characters of any free text (a failure's reason, a pool's why) in a payload
STALL_AFTER = 1800.0  # s without progress while workers are alive before a run is "stalled"
SECRET_ENV = "EXPOCLOUD_NOTIFY_SECRET"  # the signing secret, when not given in a file


class Kind(str, Enum):
    """The events a run notifies; the payload's ``event``."""

    RUN_END = "run_end"
    BUDGET = "budget"
    FIRST_FAILURE = "first_failure"
    STALLED = "stalled"
    POOL_STOPPED = "pool_stopped"


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """``text`` on one line and at most ``limit`` characters: a payload stays small."""
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


@dataclass(frozen=True)
class RunEnd:
    """The run's summary: jobs per outcome, its cost (None: not priced) and wall time."""

    counts: Mapping[str, int]
    cost_usd: float | None
    budget_usd: float | None
    wall_s: float


@dataclass(frozen=True)
class BudgetChange:
    """The budget's new phase (``no_growth``, ``limit``, ``stop``) and the spend then."""

    phase: str
    spent_usd: float
    limit_usd: float
    action: str


@dataclass(frozen=True)
class FirstFailure:
    """The run's first failed job and why it failed."""

    job: str
    reason: str


@dataclass(frozen=True)
class Stalled:
    """No job started or ended for ``idle_s`` while ``workers`` were alive."""

    idle_s: float
    workers: int
    queued: int
    running: int


@dataclass(frozen=True)
class PoolStopped:
    """A pool that may not grow for the rest of the run, and why."""

    pool: str
    machine: str
    why: str


Detail = RunEnd | BudgetChange | FirstFailure | Stalled | PoolStopped


@dataclass(frozen=True)
class Notice:
    """One event of one run: what is sent, signed, to the URL and on the command's stdin."""

    kind: Kind
    run_id: str
    time: float
    text: str  # one line for a human (a Slack webhook shows it as the message)
    detail: Detail

    def to_dict(self) -> dict[str, Any]:
        return {"v": PAYLOAD_VERSION, "event": self.kind.value, "run_id": self.run_id,
                "time": round(self.time, 3), "text": self.text, **asdict(self.detail)}


def run_end(run_id: str, now: float, summary: RunEnd) -> Notice:
    counts = ", ".join(f"{n} {state}" for state, n in summary.counts.items() if n)
    cost = f", ${summary.cost_usd:.4f}" if summary.cost_usd is not None else ""
    failed = summary.counts.get("failed", 0)
    how = f"ended with {failed} failed job{'s' if failed != 1 else ''}" if failed else "ended"
    text = (f"expocloud run {run_id} {how}: {counts or 'no jobs'}{cost}, "
            f"{summary.wall_s / 60:.1f} min")
    return Notice(Kind.RUN_END, run_id, now, text, replace(summary, counts=dict(summary.counts)))


def budget(run_id: str, now: float, change: BudgetChange) -> Notice:
    what = {"no_growth": "no new VMs from now on", "limit": f"at the limit ({change.action})",
            "stop": "cancelling every job and deleting every VM"}.get(change.phase, change.phase)
    text = (f"expocloud run {run_id}: budget ${change.spent_usd:.4f} of "
            f"${change.limit_usd:g}: {what}")
    return Notice(Kind.BUDGET, run_id, now, text, change)


def first_failure(run_id: str, now: float, job: str, reason: str) -> Notice:
    detail = FirstFailure(clip(job, 120), clip(reason))
    return Notice(Kind.FIRST_FAILURE, run_id, now,
                  f"expocloud run {run_id}: first failed job {detail.job}: {detail.reason}",
                  detail)


def pool_stopped(run_id: str, now: float, pool: str, machine: str, why: str) -> Notice:
    detail = PoolStopped(pool, machine, clip(why))
    return Notice(Kind.POOL_STOPPED, run_id, now,
                  f"expocloud run {run_id}: no more {pool} VMs of {machine}: {detail.why}",
                  detail)


def stalled(run_id: str, now: float, detail: Stalled) -> Notice:
    text = (f"expocloud run {run_id}: no job started or ended for {detail.idle_s / 60:.1f} min "
            f"while {detail.workers} worker{'s' if detail.workers != 1 else ''} "
            f"{'are' if detail.workers != 1 else 'is'} alive ({detail.queued} queued, "
            f"{detail.running} running)")
    return Notice(Kind.STALLED, run_id, now, text, detail)


# -- when the once-only events are due ----------------------------------------------------------


@dataclass(frozen=True)
class Watch:
    """What the run has said and seen: the first failure said; the progress marker (jobs
    started, jobs ended) and since when it has not moved while workers were alive
    (None: no worker alive, nothing billed); whether that stall was said."""

    failure_said: bool = False
    marker: tuple[int, int] = (-1, -1)
    still_since: float | None = None
    stall_said: bool = False


def failure_due(watch: Watch) -> tuple[Watch, bool]:
    """A job failed: the first one is said, the rest are the run end's count."""
    if watch.failure_said:
        return watch, False
    return replace(watch, failure_said=True), True


def stall_step(watch: Watch, marker: tuple[int, int], workers: int, now: float,
               stall_after: float) -> tuple[Watch, bool]:
    """Whether the run has just stalled: ``marker`` (jobs started, jobs ended) has not moved
    for ``stall_after`` s while ``workers`` were alive. Progress, or no worker alive (nothing
    billed), starts the clock again, and a stall is said once until then."""
    if marker != watch.marker or workers <= 0:
        return replace(watch, marker=marker, still_since=now if workers > 0 else None,
                       stall_said=False), False
    if watch.still_since is None:
        return replace(watch, still_since=now), False
    if watch.stall_said or now - watch.still_since < stall_after:
        return watch, False
    return replace(watch, stall_said=True), True
