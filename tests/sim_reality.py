"""The workload both halves of test_simulate hold the simulator to: a real run of it (tests/e2e)
and the simulator's own schedule of it (tests/unit) must agree."""

from __future__ import annotations

import math

from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.scheduler import Task
from expo_executor.simulate.workload import SimJob

# -- simulator vs reality -------------------------------------------------------------------
# One family with two scopes. Scope "a" holds the domino: a3 never ends and times out at the
# deadline, so a4-a6 (harder) are skipped. Scope "b" jobs sort between a3 and a4 (hardness sum
# 3.3-3.9) and keep every other slot busy for 2 s after a3 starts, so no harder job can start
# within 2 s of a3 (its own deadline would race a3's). The wave-1 jobs run 3 s, so the
# preemption of w-1 4.2 s after its creation lands mid-job. The outcome set therefore does not
# depend on timing noise; the simulator's own schedule is checked for those margins below.
DEADLINE = 4.0
PREEMPT = {"w-1": 4.2}
REALITY = [  # key, scope (None: no hardness), level, runtime (None: never ends)
    ("fail", None, 0.0, 2.0),
    ("a0", "a", 0.0, 2.0), ("b0", "b", 0.5, 3.0), ("a1", "a", 1.0, 3.0), ("b1", "b", 1.5, 2.0),
    ("a2", "a", 2.0, 2.0), ("b2", "b", 2.5, 1.5),
    ("a3", "a", 3.0, None),
    ("b3", "b", 3.3, 2.0), ("b4", "b", 3.6, 2.0), ("b5", "b", 3.9, 2.0),
    ("a4", "a", 4.0, None), ("a5", "a", 5.0, 1.0), ("a6", "a", 6.0, None),
]


def _task(key: str, scope: str | None, level: float) -> Task:
    if scope is None:
        return Task(key, key)
    return Task(key, key, "f", HardnessPoint((scope,), (level,)))


def _sim_jobs() -> tuple[SimJob, ...]:
    return tuple(SimJob(key, key, math.inf if runtime is None else runtime, DEADLINE,
                        _task(key, scope, level).family, _task(key, scope, level).point,
                        fails=key == "fail")
                 for key, scope, level, runtime in REALITY)
