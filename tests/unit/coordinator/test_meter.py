"""The run's meter (coordinator/meter.py) counts the egress of jobs' staged files as spent, so
a budget sees what a run across regions pays the bucket, without a cloud call."""

from __future__ import annotations

import pytest

from expo_executor.coordinator.meter import Meter
from expo_executor.core.budget import BudgetConfig, Phase
from expo_executor.core.scheduler import Pool

pytestmark = pytest.mark.unit


def test_staged_egress_is_spent_and_moves_the_budget_on() -> None:
    said: list[str] = []
    meter = Meter({Pool.SPOT: 0.02}, BudgetConfig(1.0), [Pool.SPOT], said.append)
    meter.egress(0.4)
    assert meter.spent(0.0, []) == pytest.approx(0.4)
    assert meter.read(0.0, [], queued_work=False) is None and meter.phase is Phase.OK
    meter.egress(0.7)
    change = meter.read(0.0, [], queued_work=False)
    assert change is not None and change.phase is Phase.STOP
    assert meter.spent(0.0, []) == pytest.approx(1.1) and "$1.1000 of $1 budget" in said[0]
