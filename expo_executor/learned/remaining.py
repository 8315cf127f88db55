"""What the rest of a sweep will cost: a 90% interval of the CPU-seconds its undecided jobs will
take, drawn from the model.

Jobs are not independent: those of one cell share its mean's uncertainty, those of one group
share its effect, so the draws share them too (an interval from independent jobs would be far
too narrow). The policy is drawn along: with ``skip_above``, a group whose first job times out
costs that job's deadline and its others nothing (the model skips them once it has seen the
timeout), as the scheduler does. A running job costs what it has left (its draw less its
elapsed time, at least nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence


@dataclass(frozen=True)
class Pending:
    """An undecided job: its parameters and, if running, the seconds it has run."""

    params: Mapping[str, str]
    elapsed_s: float = 0.0
    running: bool = False


@dataclass(frozen=True)
class CostInterval:
    """Slot-seconds still to spend: median and a 90% interval."""

    median_s: float
    low_s: float
    high_s: float


def remaining_cost(model: Any, jobs: Sequence[Pending], deadline_s: float,
                   skip_above: float | None, draws: int = 200, seed: int = 0) -> CostInterval:
    """Draw the undecided jobs' runtimes ``draws`` times (shared cell and group effects),
    cap each at the deadline, apply the skip, and sum."""
    import numpy as np

    if not jobs:
        return CostInterval(0.0, 0.0, 0.0)
    rng = np.random.default_rng(seed)
    cells: dict[tuple, int] = {}
    groups: dict[tuple, int] = {}
    rows = []
    for job in jobs:
        cell, mu, mu_var, group, u, u_var, hopeless = model.parts(job.params)
        c = cells.setdefault(cell, len(cells))
        g = groups.setdefault(group, len(groups))
        rows.append((c, mu, mu_var, g, u, u_var, hopeless, job.elapsed_s, job.running))
    c, mu, mu_var, g, u, u_var, hopeless, elapsed, running = (np.array(col)
                                                                for col in zip(*rows))
    cell_mu = np.zeros(len(cells))
    cell_sd = np.zeros(len(cells))
    cell_mu[c], cell_sd[c] = mu, np.sqrt(mu_var)
    group_mu = np.zeros(len(groups))
    group_sd = np.zeros(len(groups))
    group_mu[g], group_sd[g] = u, np.sqrt(u_var)
    group_h = np.zeros(len(groups))
    group_h[g] = hopeless
    cell_draw = cell_mu[:, None] + cell_sd[:, None] * rng.standard_normal((len(cells), draws))
    group_draw = group_mu[:, None] + group_sd[:, None] * rng.standard_normal((len(groups), draws))
    lost = rng.random((len(groups), draws)) < group_h[:, None]  # hopeless in this draw
    group_draw = np.where(lost, np.inf, group_draw)
    noise = model.sigma * rng.standard_normal((len(jobs), draws))
    seconds = np.exp(np.minimum(cell_draw[c] + group_draw[g] + noise, np.log(deadline_s) + 1))
    cost = np.minimum(seconds, deadline_s)
    cost = np.where(running[:, None], np.maximum(cost - elapsed[:, None], 0.0), cost)
    if skip_above is not None:
        cost = _skip_after_first_timeout(cost, seconds >= deadline_s, g)
    totals = cost.sum(axis=0)
    low, median, high = np.quantile(totals, [0.05, 0.5, 0.95])
    return CostInterval(float(median), float(low), float(high))


def _skip_after_first_timeout(cost: Any, timeout: Any, group: Any) -> Any:
    """In each draw, a group's jobs after its first timed-out one cost nothing."""
    import numpy as np

    order = np.argsort(group, kind="stable")
    hit = timeout[order].astype(np.int64)
    sorted_group = group[order]
    starts = np.flatnonzero(np.r_[True, sorted_group[1:] != sorted_group[:-1]])
    sizes = np.diff(np.r_[starts, len(order)])
    cum = np.cumsum(hit, axis=0)
    offset = np.repeat(cum[starts] - hit[starts], sizes, axis=0)
    earlier = cum - hit - offset  # timeouts before this job, in its group
    out = cost.copy()
    out[order] = np.where(earlier > 0, 0.0, cost[order])
    return out
