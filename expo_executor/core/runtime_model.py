"""A runtime model's place in the pure core: what it is told (observations, timeouts censored),
what it answers (a prediction with a 90% interval and the probability of passing a deadline),
what it is built from (the user's noise columns and declared order) and what it finds (where the
data disagrees with that order).

The model itself lives outside the core (``expo_executor.learned``, which fits it with scipy);
the scheduler sees only the :class:`RuntimeModel` protocol, so the core stays pure and a run
without a model never imports a numerical library.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol, Sequence

from expo_executor.core.hardness import HardnessSpec


@dataclass(frozen=True)
class RuntimeObservation:
    """A finished attempt of a job. ``finished`` False: it did not end on its own within
    ``seconds`` (a timeout or a kill), so its runtime is only known to exceed ``seconds``
    (right-censored): never a runtime."""

    params: Mapping[str, str]
    seconds: float
    finished: bool


@dataclass(frozen=True)
class RuntimePrediction:
    """A job's predicted runtime: the median, a 90% interval (``low_s`` .. ``high_s``), and
    ``p_exceed``: the probability that it runs past the deadline asked about."""

    median_s: float
    low_s: float
    high_s: float
    p_exceed: float


@dataclass(frozen=True)
class Pending:
    """A job not yet decided, for an estimate of what is left: its parameters and, if running,
    the seconds it has run so far (its runtime is known to exceed them)."""

    params: Mapping[str, str]
    elapsed_s: float = 0.0
    running: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """What a model is built from. ``noise``: the columns that are noise (instances, seeds,
    repetitions), nested in this order: jobs sharing every parameter but the last noise column
    share an effect (partial pooling); the last one is pure noise. ``ordered``: the declared
    hardness order, in whose dimensions the model is monotone (None: no order)."""

    noise: tuple[str, ...] = ()
    ordered: HardnessSpec | None = None

    def group(self, params: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        """The jobs that share an effect: every parameter but the last noise column."""
        last = self.noise[-1] if self.noise else None
        return tuple(sorted((k, str(v)) for k, v in params.items() if k != last))


@dataclass(frozen=True)
class OrderDisagreement:
    """Where the data says the declared order is wrong: jobs at ``harder`` (declared harder
    than ``easier`` in dimension ``dimension``, all else equal) run faster, beyond doubt.
    Medians in seconds, as the data has them."""

    dimension: str
    easier: Mapping[str, str]
    harder: Mapping[str, str]
    easier_median_s: float
    harder_median_s: float


class RuntimeModel(Protocol):
    """A runtime model of one family (a rule at one deadline), fitted online.

    ``observe`` takes each finished job (cheap: the model refits on its own schedule, and
    ``version`` counts its refits, so a caller knows when every prediction may have moved;
    between refits, only the observed job's group moves). ``rank`` is what the queue is ordered
    by (log seconds): monotone in the declared order except across ``disagreements``.
    ``disputes`` is True for jobs in a region where the data disagrees with that order: the
    domino effect leaves them alone. ``to_dict`` is JSON-safe (persisted beside the frontier;
    never pickled); the model's package has the loader.
    """

    spec: ModelSpec
    observations: int
    version: int

    def observe(self, obs: RuntimeObservation) -> None: ...

    def predict(self, params: Mapping[str, str], deadline_s: float) -> RuntimePrediction: ...

    def rank(self, params: Mapping[str, str]) -> float: ...

    def disputes(self, params: Mapping[str, str]) -> bool: ...

    def disagreements(self) -> tuple[OrderDisagreement, ...]: ...

    def to_dict(self) -> dict[str, Any]: ...


class DrawsRemaining(Protocol):
    """A model that can draw what a family's undecided jobs will cost as a whole (the learned
    one): ``draws`` totals of slot-seconds, each one joint draw of all the jobs, with what they
    share (a cell's mean, a group's effect) drawn once per draw. An estimate from these holds
    the truth where one from per-job predictions summed as independent does not (the jobs of
    one cell are wrong together). Optional: a model without it gets that per-job estimate
    (``core.remaining.remaining``). It may be called from a thread other than the one that
    feeds the model, and must not change the model."""

    def remaining_draws(self, jobs: Sequence[Pending], deadline_s: float,
                        skip_above: float | None, draws: int) -> Sequence[float]: ...
