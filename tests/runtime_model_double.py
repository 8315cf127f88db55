"""A runtime model for tests that must not wait on learning: fulfils
``core.runtime_model.RuntimeModel`` with a fixed rule, so a test of the wiring (records, the
run page, the estimate, the GCE path) is fast and certain. The real model
(``expo_executor.learned``) is exercised end to end in tests/e2e/test_model_skip.py too.

It predicts from one numeric parameter: a value at or above ``THRESHOLD`` runs past any
deadline with probability ``HOPELESS``, a smaller one with ``HOPEFUL``; the median is the
value in seconds. It counts what it was told, and ``to_dict`` carries the count, so a test can
see a rerun start from what the last run learned. ``factory`` is what
``--expocloud-hardness-model tests.runtime_model_double:factory`` names.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from expo_executor.core.runtime_model import (ModelSpec, OrderDisagreement, RuntimeObservation,
                                              RuntimePrediction)

PARAM = "n"
THRESHOLD = 3
HOPELESS = 0.995
HOPEFUL = 0.01


class ThresholdModel:
    def __init__(self, spec: ModelSpec, saved: Mapping[str, Any] | None = None) -> None:
        self.spec = spec
        self.seen: list[RuntimeObservation] = []
        self.earlier = int((saved or {}).get("observed", 0))
        self.version = 0

    @property
    def observations(self) -> int:
        return self.earlier + len(self.seen)

    def observe(self, observation: RuntimeObservation) -> None:
        self.seen.append(observation)

    def rank(self, params: Mapping[str, str]) -> float:
        return math.log(max(float(params.get(PARAM, 0)), 0.1))

    def disputes(self, params: Mapping[str, str]) -> bool:
        return False

    def disagreements(self) -> tuple[OrderDisagreement, ...]:
        return ()

    def predict(self, params: Mapping[str, Any], deadline_s: float) -> RuntimePrediction:
        value = float(params.get(PARAM, 0))
        p = HOPELESS if value >= THRESHOLD else HOPEFUL
        return RuntimePrediction(max(value, 0.1), max(value, 0.1) / 2, max(value, 0.1) * 2, p)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "threshold", "observed": self.observations,
                "noise": list(self.spec.noise),
                "ordered": self.spec.ordered.text if self.spec.ordered else None}


def factory(spec: ModelSpec, saved: Mapping[str, Any] | None) -> ThresholdModel:
    return ThresholdModel(spec, saved)
