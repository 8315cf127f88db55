"""The runtime model's interface, as the scheduler and the coordinator see it: what a model is
told (a finished job's parameters and seconds, ``finished`` False for a timeout, right-censored
at its deadline), what it answers (a median, a 90% interval and the probability of running past
a deadline), and what it is built from (which parameters are noise, which are ordered).

Only the interface lives here: the model itself is a library's (``expo_executor.learned``),
imported lazily by whoever builds one, so the core stays pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Protocol


@dataclass(frozen=True)
class RuntimeObservation:
    """A finished job: its parameters, its seconds, and whether it finished (False: it timed
    out, and ``seconds`` is its deadline, a lower bound)."""

    params: Mapping[str, Any]
    seconds: float
    finished: bool


@dataclass(frozen=True)
class RuntimePrediction:
    """A job's predicted runtime: median and 90% interval (s), and the probability that it
    runs past the deadline asked about."""

    median_s: float
    low_s: float
    high_s: float
    p_exceed: float


class RuntimeModel(Protocol):
    """One family's model, fitted online from its finished jobs."""

    def observe(self, observation: RuntimeObservation) -> None: ...

    def predict(self, params: Mapping[str, Any], deadline_s: float) -> RuntimePrediction: ...

    def to_dict(self) -> dict[str, Any]: ...


@dataclass(frozen=True)
class ModelSpec:
    """What a family's model is built from: the parameters that are noise (a seed, an
    instance) and those the user declared ordered (the hardness spec's dimensions)."""

    noise: tuple[str, ...] = ()
    ordered: tuple[str, ...] = ()
