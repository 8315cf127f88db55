"""What the rest of a run will take: wall time and cost, each with a 90% interval, from the
runtime model's predictions of the jobs still queued or running.

Each job's runtime is lognormal (its median, and its 90% interval read as +-1.645 sigma of
the log), cut at its deadline, where the job is killed; a running job's seconds so far are
taken off. The jobs' CPU-seconds are summed by moments and the sum read as one lognormal
(Fenton-Wilkinson's moment match): deterministic and cheap at 100,000 jobs, where a Monte Carlo
would need a random source the core may not have. The sum treats jobs as independent: a model
that is wrong the same way for many jobs makes the true spread wider than the interval says.

Wall time is the CPU-seconds over the run's slots (perfect packing), each bound never less
than the same bound of the longest single job left (the one of largest median: with few jobs
left on many slots, it decides); cost is the CPU-seconds at the price of a slot-hour.

That per-job sum is what a model of the user's own gets. A model that draws its jobs' total
whole (``runtime_model.DrawsRemaining``: the learned one) gets :func:`from_draws` instead, the
draws' percentiles; ``coordinator.runtime_models.ModelBook.estimate`` picks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable, Sequence

from expo_executor.core.runtime_model import RuntimePrediction

Z90 = 1.6448536269514722  # the standard normal's 95th percentile: a 90% interval's half


@dataclass(frozen=True)
class JobLeft:
    """A job still to finish: its prediction, its deadline (None: none), its CPUs, and the
    seconds it has run so far (0 while queued)."""

    prediction: RuntimePrediction
    deadline_s: float | None
    cpus: int = 1
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class Remaining:
    """The rest of the run: wall seconds and USD, each a median and a 90% interval."""

    jobs: int
    wall_s: float
    wall_low_s: float
    wall_high_s: float
    cost_usd: float
    cost_low_usd: float
    cost_high_usd: float

    def line(self) -> str:
        """One line for the log, ``expocloud status`` and the run page."""
        wall = (f"{_duration(self.wall_s)} left (90%: {_duration(self.wall_low_s)} to "
                f"{_duration(self.wall_high_s)})")
        cost = "" if self.cost_high_usd <= 0 else (
            f", ${self.cost_usd:.2f} more (90%: ${self.cost_low_usd:.2f} to "
            f"${self.cost_high_usd:.2f})")
        return f"estimate for {self.jobs} job{'s' if self.jobs != 1 else ''}: {wall}{cost}"


def remaining(jobs: Iterable[JobLeft], slots: int, slot_hour_usd: float) -> Remaining:
    """The estimate for ``jobs`` on ``slots`` slots at ``slot_hour_usd`` per slot-hour."""
    mean = var = 0.0
    count = 0
    longest = (0.0, 0.0, 0.0)  # (median, low, high) left of the job of largest median
    for job in jobs:
        count += 1
        first, second = _moments(job.prediction, job.deadline_s)
        mean += job.cpus * max(0.0, first - job.elapsed_s)
        var += job.cpus ** 2 * max(0.0, second - first * first)
        longest = max(longest, _left(job))
    low, mid, high = _lognormal_interval(mean, var)
    per_slot = 1.0 / max(1, slots)
    wall = [max(alone, value * per_slot) for alone, value in zip(longest, (mid, low, high))]
    cost = [value / 3600.0 * slot_hour_usd for value in (mid, low, high)]
    return Remaining(count, *wall, *cost)


def from_draws(totals: Sequence[float], jobs: int, slots: int,
               slot_hour_usd: float) -> Remaining:
    """The estimate from a model's joint draws of the CPU-seconds left (``DrawsRemaining``):
    their 5th, 50th and 95th percentiles, over ``slots`` slots (perfect packing) and at
    ``slot_hour_usd`` per slot-hour."""
    low, mid, high = quantiles(totals)
    per_slot = 1.0 / max(1, slots)
    return Remaining(jobs, mid * per_slot, low * per_slot, high * per_slot,
                     *(value / 3600.0 * slot_hour_usd for value in (mid, low, high)))


def quantiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(5th percentile, median, 95th percentile), interpolated as numpy's default does."""
    ordered = sorted(values)
    if not ordered:
        return 0.0, 0.0, 0.0

    def at(q: float) -> float:
        place = q * (len(ordered) - 1)
        below = int(place)
        above = min(below + 1, len(ordered) - 1)
        return ordered[below] + (ordered[above] - ordered[below]) * (place - below)

    return at(0.05), at(0.5), at(0.95)


def _left(job: JobLeft) -> tuple[float, float, float]:
    """(median, low, high) seconds the job has left, each cut at its deadline."""
    cap = math.inf if job.deadline_s is None else job.deadline_s
    p = job.prediction
    return tuple(max(0.0, min(value, cap) - job.elapsed_s)  # type: ignore[return-value]
                 for value in (p.median_s, p.low_s, p.high_s))


def _moments(prediction: RuntimePrediction, deadline_s: float | None) -> tuple[float, float]:
    """E[T] and E[T^2] of the job's runtime T, lognormal, cut at its deadline. A model may put
    a job's median or interval at infinity (it likely never finishes): with a deadline, what
    lies past ten times it is read as ten times it (the job costs its deadline either way)."""
    cap = math.inf if deadline_s is None else 10.0 * deadline_s
    median = max(min(prediction.median_s, cap), 1e-6)
    spread = math.log(max(min(prediction.high_s, cap), median)
                      / max(min(prediction.low_s, cap), 1e-6))
    mu, sigma = math.log(median), max(spread / (2 * Z90), 1e-9)
    if deadline_s is None:
        return (math.exp(mu + sigma ** 2 / 2), math.exp(2 * mu + 2 * sigma ** 2))
    cut = math.log(max(deadline_s, 1e-9))
    beyond = 1.0 - _phi((cut - mu) / sigma)
    first = math.exp(mu + sigma ** 2 / 2) * _phi((cut - mu - sigma ** 2) / sigma) \
        + deadline_s * beyond
    second = math.exp(2 * mu + 2 * sigma ** 2) * _phi((cut - mu - 2 * sigma ** 2) / sigma) \
        + deadline_s ** 2 * beyond
    return first, second


def _lognormal_interval(mean: float, var: float) -> tuple[float, float, float]:
    """(5th percentile, median, 95th percentile) of the lognormal of this mean and variance."""
    if mean <= 0:
        return 0.0, 0.0, 0.0
    sigma2 = math.log1p(var / mean ** 2)
    mu, sigma = math.log(mean) - sigma2 / 2, math.sqrt(sigma2)
    return math.exp(mu - Z90 * sigma), math.exp(mu), math.exp(mu + Z90 * sigma)


def _phi(x: float) -> float:
    return 0.5 * (1.0 + math.erf(x / math.sqrt(2.0)))


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
