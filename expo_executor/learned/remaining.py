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
from typing import Any, Sequence

from expo_executor.core.runtime_model import Pending

__all__ = ["CHUNK", "CostInterval", "Pending", "informed_draws", "remaining_cost",
           "remaining_draws"]

CHUNK = 25  # draws at a time: at 50,000 jobs a chunk's arrays take tens of MB, not hundreds


@dataclass(frozen=True)
class CostInterval:
    """Slot-seconds still to spend: median and a 90% interval."""

    median_s: float
    low_s: float
    high_s: float


def remaining_cost(model: Any, jobs: Sequence[Pending], deadline_s: float,
                   skip_above: float | None, draws: int = 200, seed: int = 0) -> CostInterval:
    """The 5th, 50th and 95th percentiles of :func:`remaining_draws`."""
    import numpy as np

    if not jobs:
        return CostInterval(0.0, 0.0, 0.0)
    totals = remaining_draws(model, jobs, deadline_s, skip_above, draws, seed)
    low, median, high = np.quantile(totals, [0.05, 0.5, 0.95])
    return CostInterval(float(median), float(low), float(high))


def informed_draws(model: Any, jobs: Sequence[Pending], deadline_s: float,
                   skip_above: float | None, draws: int = 200, seed: int = 0) -> list[float]:
    """:func:`remaining_draws` from a copy of ``model`` that has also seen the running jobs,
    each censored at what it has run so far, and been refitted: the jobs decided early are
    the quick ones, and a model of them alone would think every job quick. ``model`` itself is
    only read (its observations so far, taken at once), so this may run in another thread
    than the one that feeds it. What the replay validated (``simulate.remaining``), and what a
    run shows (``coordinator.estimates``)."""
    from expo_executor.core.runtime_model import RuntimeObservation

    if model.version == 0:  # not fitted yet: it knows nothing to draw from
        return []
    copy = model.copy()
    for job in jobs:
        if job.running and job.elapsed_s > 0:
            copy.observe(RuntimeObservation(job.params, job.elapsed_s, False))
    copy.refit()
    return remaining_draws(copy, jobs, deadline_s, skip_above, draws, seed)


def remaining_draws(model: Any, jobs: Sequence[Pending], deadline_s: float,
                    skip_above: float | None, draws: int = 200, seed: int = 0) -> list[float]:
    """Draw the undecided jobs' runtimes ``draws`` times (shared cell and group effects), cap
    each at the deadline, apply the skip, and sum: one total of slot-seconds per draw. The
    draws are taken :data:`CHUNK` at a time, so memory stays bounded at many jobs."""
    import numpy as np

    if not jobs:
        return [0.0] * draws
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
    cell_mu, cell_sd = np.zeros(len(cells)), np.zeros(len(cells))
    cell_mu[c], cell_sd[c] = mu, np.sqrt(mu_var)
    group_mu, group_sd, group_h = (np.zeros(len(groups)) for _ in range(3))
    group_mu[g], group_sd[g], group_h[g] = u, np.sqrt(u_var), hopeless
    shared = (c, g, cell_mu, cell_sd, group_mu, group_sd, group_h, elapsed, running)
    totals: list[float] = []
    while len(totals) < draws:
        size = min(CHUNK, draws - len(totals))
        totals.extend(_draw(rng, shared, model.sigma, deadline_s, skip_above, size))
    return totals


def _draw(rng: Any, shared: tuple, sigma: float, deadline_s: float, skip_above: float | None,
          draws: int) -> list[float]:
    """``draws`` totals: each cell's and group's effect drawn once per draw, then each job's."""
    import numpy as np

    c, g, cell_mu, cell_sd, group_mu, group_sd, group_h, elapsed, running = shared
    cells, groups = len(cell_mu), len(group_mu)
    cell_draw = cell_mu[:, None] + cell_sd[:, None] * rng.standard_normal((cells, draws))
    group_draw = group_mu[:, None] + group_sd[:, None] * rng.standard_normal((groups, draws))
    lost = rng.random((groups, draws)) < group_h[:, None]  # hopeless in this draw
    group_draw = np.where(lost, np.inf, group_draw)
    noise = sigma * rng.standard_normal((len(c), draws))
    seconds = np.exp(np.minimum(cell_draw[c] + group_draw[g] + noise, np.log(deadline_s) + 1))
    cost = np.minimum(seconds, deadline_s)
    cost = np.where(running[:, None], np.maximum(cost - elapsed[:, None], 0.0), cost)
    if skip_above is not None:
        cost = _skip_after_first_timeout(cost, seconds >= deadline_s, g)
    return [float(total) for total in cost.sum(axis=0)]


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
