"""A runtime model for tests: a stand-in for ``expo_executor.learned``'s (a dependency of the
code under test, which lives on another branch until it is merged), fulfilling
``core.runtime_model.RuntimeModel``.

It predicts from one numeric parameter: a value at or above ``THRESHOLD`` runs past any
deadline with probability ``HOPELESS``, a smaller one with ``HOPEFUL``; the median is the
value in seconds. It counts what it was told, and ``to_dict`` carries the count, so a test can
see a rerun start from what the last run learned. ``factory`` is what
``--expocloud-hardness-model tests.runtime_model_double:factory`` names.
"""

from __future__ import annotations

from typing import Any, Mapping

from expo_executor.core.runtime_model import (ModelSpec, RuntimeObservation,
                                              RuntimePrediction)

PARAM = "n"
THRESHOLD = 3
HOPELESS = 0.995
HOPEFUL = 0.01


class ThresholdModel:
    def __init__(self, spec: ModelSpec, saved: Mapping[str, Any] | None = None) -> None:
        self.spec = spec
        self.observations: list[RuntimeObservation] = []
        self.earlier = int((saved or {}).get("observed", 0))

    def observe(self, observation: RuntimeObservation) -> None:
        self.observations.append(observation)

    def predict(self, params: Mapping[str, Any], deadline_s: float) -> RuntimePrediction:
        value = float(params.get(PARAM, 0))
        p = HOPELESS if value >= THRESHOLD else HOPEFUL
        return RuntimePrediction(max(value, 0.1), max(value, 0.1) / 2, max(value, 0.1) * 2, p)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "threshold", "observed": self.earlier + len(self.observations),
                "noise": list(self.spec.noise), "ordered": list(self.spec.ordered)}


def factory(spec: ModelSpec, saved: Mapping[str, Any] | None) -> ThresholdModel:
    return ThresholdModel(spec, saved)
