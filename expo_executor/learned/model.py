"""The learned runtime model: :class:`~expo_executor.core.runtime_model.RuntimeModel` for one
family, fitted online from its finished jobs (:mod:`.tobit_fit` over :mod:`.cells`).

Cost stays bounded: a finish updates only its group's posterior (a grid of ``GRID`` points over
that group's few jobs); the whole model is refitted when its observations, or its timeouts
(which come late, and teach most of what a skip needs), have grown by ``growth`` (20%) since
the last fit, warm-started, so a sweep of n jobs with t timeouts refits about
log(n/20)/log(1.2) + log(t/5)/log(1.2) times and predictions are cached per group until they move.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import (ModelSpec, OrderDisagreement, Pending,
                                              RuntimeObservation, RuntimePrediction)
from expo_executor.learned.cells import CellBook
from expo_executor.learned.tobit_fit import PRIOR_SD, Fit, Observations, fit, group_posterior

Z90 = 1.6448536269514722  # the normal's 95th percentile: a two-sided 90% interval
FLOOR_S = 0.01  # runtimes below this are taken as this (log of 0)
KIND = "expocloud-learned-runtime/1"
HOPELESS_RANK = 20.0  # log seconds a sure-hopeless group's rank is pushed back


class LearnedModel:
    """Observations in, predictions out; ``version`` counts refits."""

    def __init__(self, spec: ModelSpec, growth: float = 0.2, first_fit: int = 20,
                 rounds: int = 12):
        self.spec = spec
        self.observations = 0
        self.version = 0
        self._growth, self._next_fit, self._rounds = growth, first_fit, rounds
        self._censored = 0
        self._next_censored_fit = 5
        self._cells = CellBook(spec)
        self._groups: dict[tuple, int] = {}
        self._group_cell: list[int] = []
        self._group_obs: list[list[int]] = []
        self._rows: list[tuple[Mapping[str, str], float, bool]] = []
        self._y: list[float] = []
        self._cens: list[bool] = []
        self._cell: list[int] = []
        self._fit: Fit | None = None
        # group -> its posterior since the fit: (grid, weights, hopeless), or (mean, var, 0.0)
        # when it is normal (all solved)
        self._post: dict[int, tuple[Any, Any, float]] = {}
        self._dirty: set[int] = set()  # groups observed since their posterior was made
        # group -> deadline -> its effect's mean, variance, chance of passing the deadline, and
        # chance of being hopeless
        self._cache: dict[int, dict[float, tuple[float, float, float, float]]] = {}
        self._disagreements: tuple[OrderDisagreement, ...] = ()

    # -- learning -----------------------------------------------------------------------------
    def observe(self, obs: RuntimeObservation) -> None:
        cell = self._cells.cell(obs.params)
        gkey = self.spec.group(obs.params)
        group = self._groups.get(gkey)
        if group is None:
            group = self._groups[gkey] = len(self._group_cell)
            self._group_cell.append(cell)
            self._group_obs.append([])
        self._group_obs[group].append(len(self._y))
        self._rows.append((dict(obs.params), obs.seconds, obs.finished))
        self._y.append(math.log(max(obs.seconds, FLOOR_S)))
        self._cens.append(not obs.finished)
        self._cell.append(cell)
        self.observations += 1
        self._censored += not obs.finished
        if self.observations >= self._next_fit or (self._censored >= self._next_censored_fit
                                                   and self.observations >= 20):
            self.refit()
        elif self._fit is not None and cell < len(self._fit.mu):
            self._dirty.add(group)
            self._cache.pop(group, None)

    def refit(self) -> None:
        """Fit every parameter again (warm from the last fit), and find where the data
        disagrees with the declared order."""
        import numpy as np

        obs = Observations(np.array(self._y), np.array(self._cens, dtype=bool),
                           np.array(self._cell), np.array([self._group_of_obs()]).ravel(),
                           len(self._cells.keys), len(self._group_cell))
        book = self._cells

        def project(mu: Any, var: Any, n: Any) -> Any:
            book.cut = book.disputes(list(mu), list(var))
            return np.array(book.project(list(mu), list(n)))

        self._fit = fit(obs, self._fit, self._rounds if self._fit else 3 * self._rounds,
                        project)
        self._post = {}
        self._dirty = set()
        self._cache = {}
        self._disagreements = tuple(book.record(e, list(self._fit.mu_free))
                                    for e in sorted(book.cut, key=lambda e: (e.dim, e.easier)))
        self.version += 1
        self._next_fit = max(self._next_fit, math.ceil(self.observations * (1 + self._growth)))
        self._next_censored_fit = max(self._censored + 5,
                                      math.ceil(self._censored * (1 + self._growth)))

    def _group_of_obs(self) -> list[int]:
        out = [0] * len(self._y)
        for group, members in enumerate(self._group_obs):
            for i in members:
                out[i] = group
        return out

    def _update_group(self, group: int) -> None:
        """A group's posterior from its observations, at the last fit's parameters: normal in
        closed form when all solved, else on a grid."""
        assert self._fit is not None
        self._dirty.discard(group)
        members = self._group_obs[group]
        cell = self._group_cell[group]
        mu = float(self._fit.mu_free[cell])
        sigma, tau = self._fit.sigma, self._fit.tau
        if not any(self._cens[i] for i in members):
            precision = len(members) / sigma ** 2 + 1.0 / tau ** 2
            total = sum(self._y[i] - mu for i in members) / sigma ** 2
            self._post[group] = (total / precision, 1.0 / precision, 0.0)
            return
        self._post[group] = group_posterior([self._y[i] for i in members],
                                            [self._cens[i] for i in members], mu, sigma, tau,
                                            self._pi(cell))

    # -- predictions ----------------------------------------------------------------------------
    def _cell_mean(self, params: Mapping[str, str], free: bool) -> tuple[float, float]:
        """A cell's mean log-runtime and its variance; an unseen cell's from the order (or the
        cells' mean), with the prior's variance."""
        assert self._fit is not None
        key = self._cells.key(params)
        cell = self._cells.index.get(key)
        if cell is not None and cell < len(self._fit.mu):
            mu = self._fit.mu_free if free else self._fit.mu
            return float(mu[cell]), float(self._fit.mu_var[cell])
        below = self._cells.below(key, list(self._fit.mu))
        mean = below if below is not None else float(sum(self._fit.mu) / len(self._fit.mu))
        return mean, PRIOR_SD ** 2

    def _pi(self, cell: int) -> float:
        """A cell's hopeless share (a cell new since the fit: the cells' mean)."""
        assert self._fit is not None
        pi = self._fit.pi
        return float(pi[cell]) if cell < len(pi) else float(sum(pi) / max(len(pi), 1))

    def _group_u(self, params: Mapping[str, str], deadline: float,
                 shift: float) -> tuple[float, float, float, float] | None:
        """The group's effect (posterior mean, variance, as a regular group), for
        ``deadline`` the chance of passing it, and the chance it is hopeless; None for a group
        never seen."""
        assert self._fit is not None
        group = self._groups.get(self.spec.group(params))
        if group is None or (group not in self._post and group not in self._dirty
                             and group >= len(self._fit.grid)):
            return None
        if group in self._dirty:
            self._update_group(group)
        by_deadline = self._cache.setdefault(group, {})
        cached = by_deadline.get(deadline)
        if cached is None:
            cached = by_deadline[deadline] = self._summary(group, deadline, shift)
        return cached

    def _summary(self, group: int, deadline: float,
                 shift: float) -> tuple[float, float, float, float]:
        """The group effect's mean and variance, the chance of passing ``deadline``
        (integrated over the posterior: a grid's is not normal, as a group seen only through
        timeouts lies above its censoring point; a hopeless group always passes it) and the
        chance of being hopeless."""
        import numpy as np
        from scipy.special import ndtr

        assert self._fit is not None
        mu = float(self._fit.mu_free[self._group_cell[group]])
        post = self._post.get(group)
        if post is not None and np.ndim(post[0]) == 0:
            mean, var = float(post[0]), float(post[1])
            spread = math.sqrt(self._fit.sigma ** 2 + shift + var)
            p = 0.5 * math.erfc((math.log(deadline) - mu - mean) / (spread * math.sqrt(2)))
            return mean, var, p, 0.0
        grid, weights, hopeless = post or (self._fit.grid[group], self._fit.weights[group],
                                           float(self._fit.hopeless[group]))
        mean = float((weights * grid).sum())
        var = float((weights * (grid - mean) ** 2).sum())
        spread = math.sqrt(self._fit.sigma ** 2 + shift)
        p = float((weights * ndtr((mu + grid - math.log(deadline)) / spread)).sum())
        p = hopeless + (1.0 - hopeless) * float(np.clip(p, 0.0, 1.0))
        return mean, var, p, hopeless

    def predict(self, params: Mapping[str, str], deadline_s: float) -> RuntimePrediction:
        if self._fit is None:
            return RuntimePrediction(math.nan, 0.0, math.inf, 0.0)
        mu, mu_var = self._cell_mean(params, free=False)
        effect = self._group_u(params, deadline_s, mu_var)
        sigma2 = self._fit.sigma ** 2 + mu_var
        if effect is None:  # a new group: the cell's (monotone) mean, the groups' spread
            m, s = mu, math.sqrt(sigma2 + self._fit.tau ** 2)
            hopeless = self._pi(self._cells.index.get(self._cells.key(params), 1 << 30))
            p = 0.5 * math.erfc((math.log(deadline_s) - m) / (s * math.sqrt(2)))
            p = hopeless + (1.0 - hopeless) * p
        else:  # a seen group: its own data, about the cell's free mean
            free, _var = self._cell_mean(params, free=True)
            m, s, p, hopeless = free + effect[0], math.sqrt(sigma2 + effect[1]), effect[2], \
                effect[3]
        return _prediction(m, s, p, hopeless)

    def rank(self, params: Mapping[str, str]) -> float:
        """Log seconds: the cell's mean with an order (monotone in it), plus the group's
        effect without one."""
        if self._fit is None:
            return 0.0
        mu, _var = self._cell_mean(params, free=False)
        if self.spec.ordered is not None:
            return mu
        effect = self._group_u(params, 1.0, 0.0)
        if effect is None:
            return mu
        return self._cell_mean(params, free=True)[0] + effect[0] + HOPELESS_RANK * effect[3]

    def parts(self, params: Mapping[str, str]) -> tuple[tuple, float, float, tuple, float,
                                                        float, float]:
        """A job's prediction in its parts, for sums over many jobs (:mod:`.remaining`):
        (cell, its mean and variance, group, its effect's mean and variance, the chance it is
        hopeless); jobs sharing a cell or a group share those draws."""
        assert self._fit is not None
        key = self._cells.key(params)
        mu, mu_var = self._cell_mean(params, free=False)
        gkey = self.spec.group(params)
        effect = self._group_u(params, 1.0, 0.0)
        if effect is None:
            cell = self._cells.index.get(key, 1 << 30)
            return key, mu, mu_var, gkey, 0.0, self._fit.tau ** 2, self._pi(cell)
        free, _var = self._cell_mean(params, free=True)
        return key, free, mu_var, gkey, effect[0], effect[1], effect[3]

    @property
    def sigma(self) -> float:
        return self._fit.sigma if self._fit is not None else math.inf

    def copy(self) -> LearnedModel:
        """A model of the observations so far, not yet fitted: the list of them is taken in
        one step, so another thread may copy while this model goes on learning."""
        rows = self._rows[:]
        copy = LearnedModel(self.spec, first_fit=1 << 62)
        copy._next_censored_fit = 1 << 62  # no fit while it is filled
        for params, seconds, finished in rows:
            copy.observe(RuntimeObservation(params, seconds, finished))
        return copy

    def remaining_draws(self, jobs: Sequence[Pending], deadline_s: float,
                        skip_above: float | None, draws: int = 200) -> list[float]:
        """``core.runtime_model.DrawsRemaining``: :func:`.remaining.informed_draws`."""
        from expo_executor.learned.remaining import informed_draws

        return informed_draws(self, jobs, deadline_s, skip_above, draws)

    def disputes(self, params: Mapping[str, str]) -> bool:
        cell = self._cells.index.get(self._cells.key(params))
        return bool(self._cells.cut) and cell is not None and self._cells.disputed(cell)

    def disagreements(self) -> tuple[OrderDisagreement, ...]:
        return self._disagreements

    # -- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The observations themselves (the fit is redone from them on load): JSON-safe."""
        columns = sorted({k for params, _s, _f in self._rows for k in params})
        return {"kind": KIND, "noise": list(self.spec.noise),
                "ordered": self.spec.ordered.text if self.spec.ordered else None,
                "columns": columns,
                "rows": [[params.get(c) for c in columns] + [seconds, finished]
                         for params, seconds, finished in self._rows]}


def _prediction(m: float, s: float, p: float, hopeless: float) -> RuntimePrediction:
    """Log-normal quantiles of a regular group, pushed to infinity by the chance that it is
    hopeless: the median is infinite when that chance is over a half, the top of the 90%
    interval when it is over 5%."""
    median = math.inf if hopeless >= 0.5 else math.exp(m)
    low = math.inf if hopeless >= 0.95 else math.exp(m - Z90 * s)
    high = math.inf if hopeless >= 0.05 else math.exp(m + Z90 * s)
    return RuntimePrediction(median, low, high, p)


def model_from_dict(data: Mapping[str, Any], spec: ModelSpec | None = None) -> LearnedModel:
    """A model saved by ``to_dict``, refitted from its observations (under ``spec`` when given:
    a run whose noise columns or order changed re-reads the same observations its own way)."""
    if not isinstance(data, Mapping) or data.get("kind") != KIND:
        raise ValueError(f"not a saved runtime model ({KIND})")
    if spec is None:
        ordered = data.get("ordered")
        spec = ModelSpec(tuple(data.get("noise") or ()),
                         HardnessSpec.parse(ordered) if ordered else None)
    model = LearnedModel(spec, first_fit=1 << 62)
    columns = list(data["columns"])
    for row in data["rows"]:
        params = {c: str(v) for c, v in zip(columns, row) if v is not None}
        model.observe(RuntimeObservation(params, float(row[-2]), bool(row[-1])))
    model._next_fit = 20
    if model.observations >= 20:
        model.refit()
    return model


def model_factory(spec: ModelSpec, saved: Mapping[str, Any] | None) -> LearnedModel:
    """What ``--expocloud-hardness-model learned`` builds for a family: a fresh model, or the
    one its earlier runs saved (beside the frontier), read under this run's ``spec``. A saved
    model that cannot be read is dropped (the run learns afresh) rather than failing the run."""
    if saved:
        try:
            return model_from_dict(saved, spec)
        except (KeyError, TypeError, ValueError, IndexError):
            pass
    return LearnedModel(spec)
