"""The fit: a censored (Tobit) normal model of log-runtime with one level of random effects,
and a share of hopeless groups.

    log runtime = mu[cell] + u[group] + e,   u ~ N(0, tau^2),   e ~ N(0, sigma^2)

except that a group is hopeless (never finishes, whatever the seed) with probability
``pi[cell]``. A solved job is an observation of its log-runtime; a timed-out one says only that
its log-runtime exceeds the deadline's, and enters through the normal survival function, never
as a runtime. ``u`` is integrated out on a grid per group (so a group seen only through timeouts
gets the truncated posterior it has, not a point at the deadline). The hopeless share is what
real sweeps need: a solver that times out on an instance does so on every seed, and a normal
effect alone would place such a group just past the deadline, where its next run would be a coin
toss; a group seen only through timeouts is hopeless with the posterior probability
``pi L_hopeless / (pi L_hopeless + (1 - pi) L_regular)`` (``L_hopeless`` = 1: every run of it
times out). The fit is EM: the groups' posteriors, then ``mu`` (censored values imputed by their
conditional mean), ``sigma``, ``tau`` and ``pi`` in closed form. ``project`` makes ``mu``
monotone where an order is declared.

Cost: solved jobs enter each group's posterior through two sums (their likelihood is normal in
``u``), so the work per EM round is (groups + timeouts) x ``GRID``, not jobs x ``GRID``.

numpy and scipy are imported in the functions: the package imports without them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

GRID = 40  # points per group's posterior grid
PI_PRIOR = 2.0  # pseudo-groups shrinking a cell's hopeless share toward the whole model's
PRIOR_SD = 2.0  # a cell's mean before data: the data's mean, this sd (log seconds)


@dataclass
class Observations:
    """Every observation, as arrays: log seconds, censored?, cell and group indexes."""

    y: Any
    censored: Any
    cell: Any
    group: Any
    cells: int
    groups: int


@dataclass
class Fit:
    """A fitted model: per cell the constrained mean (``mu``), its variance, the free mean
    before the order's projection (``mu_free``) and the hopeless share (``pi``); ``sigma`` and
    ``tau``; per group the posterior grid of ``u`` (``grid``) with its weights (``weights``),
    and the probability that it is hopeless (``hopeless``)."""

    mu: Any
    mu_free: Any
    mu_var: Any
    cell_n: Any
    sigma: float
    tau: float
    grid: Any
    weights: Any
    pi: Any
    hopeless: Any


def fit(obs: Observations, start: Fit | None, rounds: int,
        project: Callable[[Any, Any, Any], Any]) -> Fit:
    """EM from ``start`` (a previous fit, warm) or from the data's means. ``project(mu_free,
    mu_var, cell_n)`` returns the constrained means."""
    import numpy as np

    parts = _Parts(obs)
    cell_n = np.bincount(obs.cell, minlength=obs.cells).astype(float)
    if start is not None and len(start.mu) == obs.cells:
        mu, sigma, tau, pi = start.mu_free.copy(), start.sigma, start.tau, start.pi.copy()
    else:
        mu = np.bincount(obs.cell, weights=obs.y, minlength=obs.cells) / np.maximum(cell_n, 1.0)
        sigma = max(float(np.std(obs.y - mu[obs.cell])), 0.1)
        tau, pi = sigma, np.full(obs.cells, 0.05)
    grand = float(np.mean(obs.y))
    for _ in range(rounds):
        grid, weights, hopeless = parts.posteriors(mu, sigma, tau, pi)
        mu, sigma, tau, pi = parts.m_step(grid, weights, hopeless, mu, sigma, tau, grand)
    grid, weights, hopeless = parts.posteriors(mu, sigma, tau, pi)
    # a cell mean's variance: its groups' effects and its jobs' noise, both averaged
    groups_n = np.bincount(parts.group_cell, minlength=obs.cells)
    spread = tau ** 2 / np.maximum(groups_n, 1) + sigma ** 2 / np.maximum(cell_n, 1)
    mu_var = 1.0 / (1.0 / spread + 1.0 / PRIOR_SD ** 2)
    return Fit(project(mu, mu_var, cell_n), mu, mu_var, cell_n, sigma, tau, grid, weights,
               pi, hopeless)


class _Parts:
    """The observations split into solved (through per-group sums) and censored ones."""

    def __init__(self, obs: Observations):
        import numpy as np

        solved = ~obs.censored
        self.obs = obs
        self.ys, self.cs, self.gs = obs.y[solved], obs.cell[solved], obs.group[solved]
        self.yc, self.cc, self.gc = obs.y[~solved], obs.cell[~solved], obs.group[~solved]
        self.group_cell = np.zeros(obs.groups, dtype=int)
        self.group_cell[obs.group] = obs.cell
        self.all_censored = np.bincount(self.gs, minlength=obs.groups) == 0

    def _sums(self, mu: Any) -> tuple[Any, Any, Any]:
        import numpy as np

        g = self.obs.groups
        resid = self.ys - mu[self.cs]
        return (np.bincount(self.gs, minlength=g).astype(float),
                np.bincount(self.gs, weights=resid, minlength=g),
                np.bincount(self.gs, weights=resid * resid, minlength=g))

    def posteriors(self, mu: Any, sigma: float, tau: float, pi: Any) -> tuple[Any, Any, Any]:
        """Every group's posterior of ``u`` on its grid (prior times its observations'
        likelihoods, normalised) as a regular group, and the probability that it is hopeless
        (only a group with no solved job can be)."""
        import numpy as np

        n, s1, s2 = self._sums(mu)
        grid = _grids(n, s1, self.gc, self.yc - mu[self.cc], self.obs.groups, sigma, tau)
        logp = -0.5 * (n[:, None] * grid ** 2 - 2.0 * grid * s1[:, None] + s2[:, None]) \
            / sigma ** 2 - 0.5 * (grid / tau) ** 2 - np.log(tau * np.sqrt(2 * np.pi))
        if len(self.yc):
            ll = _log_survival(self.yc[:, None], mu[self.cc][:, None] + grid[self.gc], sigma)
            logp += _group_sum(ll, self.gc, self.obs.groups)
        top = logp.max(axis=1, keepdims=True)
        weights = np.exp(logp - top)
        total = weights.sum(axis=1)
        weights /= total[:, None]
        # the regular model's marginal likelihood of the group (a censored-only group's is a
        # probability, the hopeless model's being 1)
        step = (grid[:, -1] - grid[:, 0]) / (GRID - 1)
        regular = np.exp(np.minimum(top[:, 0] + np.log(total * step), 0.0))
        p = pi[self.group_cell]
        hopeless = np.where(self.all_censored, p / (p + (1.0 - p) * regular), 0.0)
        return grid, weights, hopeless

    def m_step(self, grid: Any, weights: Any, hopeless: Any, mu: Any, sigma: float, tau: float,
               grand: float) -> tuple[Any, float, float, Any]:
        """Means, residual and group sd from the expected complete data of the regular groups
        (a censored log-runtime imputed by its conditional mean above the censoring point: the
        inverse Mills ratio), and each cell's hopeless share."""
        import numpy as np

        cells = self.obs.cells
        regular = 1.0 - hopeless
        weights = weights * regular[:, None]
        eu = (weights * grid).sum(axis=1) / np.maximum(regular, 1e-12)
        vu = np.maximum((weights * grid ** 2).sum(axis=1) / np.maximum(regular, 1e-12)
                        - eu ** 2, 0.0)
        target = np.bincount(self.cs, weights=self.ys - eu[self.gs], minlength=cells)
        imputed = second = None
        if len(self.yc):
            u, w = grid[self.gc], weights[self.gc]
            mean = mu[self.cc][:, None] + u
            z = (self.yc[:, None] - mean) / sigma
            mills = _mills(z)
            imputed = mean + sigma * mills
            second = (sigma ** 2 * (1.0 + z * mills), imputed - mean, w)
            target += np.bincount(self.cc, weights=((imputed - u) * w).sum(axis=1),
                                  minlength=cells)
        n = np.bincount(self.cs, minlength=cells) + np.bincount(
            self.cc, weights=regular[self.gc], minlength=cells)
        prior_w = sigma ** 2 / PRIOR_SD ** 2
        new_mu = (target + prior_w * grand) / (n + prior_w)
        # recentre (parameter-expanded EM): the groups' effects average zero in each cell, or
        # a cell's mean would creep toward it by a few percent a round
        groups = np.bincount(self.group_cell, weights=regular, minlength=cells)
        drift = np.bincount(self.group_cell, weights=regular * eu, minlength=cells) \
            / np.maximum(groups, 1e-12)
        moved = new_mu - mu  # the censored jobs' means move by this (their u by -drift)
        new_mu = new_mu + drift
        eu = eu - drift[self.group_cell]
        grid = grid - drift[self.group_cell][:, None]
        resid = self.ys - new_mu[self.cs] - eu[self.gs]
        total = float((resid ** 2 + vu[self.gs]).sum())
        if second is not None:
            moment, excess, w = second
            shift = moved[self.cc][:, None]
            total += float(((moment - 2.0 * shift * excess + shift ** 2) * w).sum())
        new_sigma = max(float(np.sqrt(total / max(float(n.sum()), 1.0))), 0.01)
        second_u = (weights * grid ** 2).sum(axis=1)  # already weighted by ``regular``
        new_tau = max(float(np.sqrt(second_u.sum() / max(float(regular.sum()), 1.0))), 0.01)
        share = float(hopeless.mean()) if len(hopeless) else 0.0
        pi = (np.bincount(self.group_cell, weights=hopeless, minlength=cells)
              + PI_PRIOR * share) / (np.bincount(self.group_cell, minlength=cells) + PI_PRIOR)
        return new_mu, new_sigma, new_tau, np.clip(pi, 1e-6, 1.0 - 1e-6)


def _log_survival(y: Any, mean: Any, sigma: float) -> Any:
    from scipy.special import log_ndtr

    return log_ndtr((mean - y) / sigma)


def _mills(z: Any) -> Any:
    """phi(z) / (1 - Phi(z)), stable far in the tail."""
    import numpy as np
    from scipy.special import log_ndtr

    return np.exp(-0.5 * z * z - 0.5 * np.log(2 * np.pi) - log_ndtr(-z))


def _group_sum(values: Any, group: Any, groups: int) -> Any:
    """Rows of ``values`` (one per observation) summed per group: groups x GRID."""
    import numpy as np

    k = values.shape[1]
    index = (group[:, None] * k + np.arange(k)[None, :]).ravel()
    return np.bincount(index, weights=values.ravel(), minlength=groups * k).reshape(groups, k)


def _grids(n: Any, s1: Any, gc: Any, cens_resid: Any, groups: int, sigma: float,
           tau: float) -> Any:
    """Each group's grid of ``u``: around its runtimes' (shrunk) mean when it has some, else
    from just below its lowest censoring point up to the prior's reach."""
    import numpy as np

    center = s1 / (n + sigma ** 2 / tau ** 2)
    half = 6.0 / np.sqrt(1.0 / tau ** 2 + n / sigma ** 2)
    low_cens = np.full(groups, np.inf)
    np.minimum.at(low_cens, gc, cens_resid)
    top_cens = np.full(groups, -np.inf)
    np.maximum.at(top_cens, gc, cens_resid)
    lo = np.where(n > 0, center - half,
                  np.maximum(-5.0 * tau, np.minimum(low_cens, 5.0 * tau) - 4.0 * sigma))
    hi = np.where(n > 0, np.maximum(center + half, top_cens + 3.0 * sigma),
                  np.maximum(5.0 * tau, lo + 8.0 * sigma))
    steps = np.linspace(0.0, 1.0, GRID)
    return lo[:, None] + (hi - lo)[:, None] * steps[None, :]


def group_posterior(y: Any, censored: Any, mu: float, sigma: float, tau: float,
                    pi: float) -> tuple[Any, Any, float]:
    """One group's posterior grid and hopeless probability from its observations (a group
    lies in one cell, of mean ``mu`` and hopeless share ``pi``): what a finish updates between
    refits."""
    import numpy as np

    k = len(y)
    obs = Observations(np.asarray(y, dtype=float), np.asarray(censored, dtype=bool),
                       np.zeros(k, dtype=int), np.zeros(k, dtype=int), 1, 1)
    grid, weights, hopeless = _Parts(obs).posteriors(np.array([mu]), sigma, tau, np.array([pi]))
    return grid[0], weights[0], float(hopeless[0])
