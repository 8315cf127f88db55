"""What one simulated run gives: a policy's figures (``SimResult``) and the percentile they
use."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable

from expo_executor.core.scheduler import Outcome


@dataclass
class SimResult:
    """One policy's run: the figures a comparison needs, and every job's outcome and times
    (seconds from submission)."""

    policy: str
    makespan_s: float
    cost_usd: float
    preemptions: int  # Spot VMs preempted during the run
    requeues: int  # jobs sent back to the queue from a lost VM
    p99_s: float  # 99th percentile of the time from submission to a job's outcome
    vm_hours: dict[str, float]  # pool -> VM-hours
    vms: int  # VMs created
    stockouts: int  # create calls that failed
    rounds: int  # coordinator rounds simulated
    outcomes: dict[str, str]  # job key -> solved / timeout / skipped / failed
    completion_s: dict[str, float] = field(repr=False, default_factory=dict)
    started_s: dict[str, float] = field(repr=False, default_factory=dict)  # last attempt
    stopped: dict[str, str] = field(default_factory=dict)  # pool -> why it stopped growing

    def counts(self) -> dict[str, int]:
        counts = {o.value: 0 for o in Outcome}
        for outcome in self.outcomes.values():
            counts[outcome] += 1
        return counts


def percentile(values: Iterable[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100): a value that occurred, no interpolation."""
    ordered = sorted(values)
    if not ordered:
        return 0.0
    return ordered[max(0, math.ceil(q / 100.0 * len(ordered)) - 1)]
