"""The head start: what the jobs ready now will want, per (shape, pool), read from their rules'
values before Snakemake submits any job (the scheduler's side: tests/unit/core/test_scheduler.py).
Stand-in rules, the real ShapeBook over the bundled price snapshot."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from expo_executor.coordinator.rule_machines import shape_book
from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.coordinator.state import StateDir
from expo_executor.core.scheduler import Pool
from expo_executor.frontends.snakemake.head_start import planned_demand
from expo_executor.frontends.snakemake.planned_rules import PlannedRule
from expo_executor.settings.values import with_default_slots

GCE = {"engine": "gce", "gce_project": "p", "gce_zones": "us-central1-a", "max_workers": 2}


class Resource:
    """A Snakemake rule resource: a value, or a function only a job can evaluate."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def is_evaluable(self) -> bool:
        return callable(self.value)


@dataclass(eq=False)
class Rule:
    name: str
    resources: dict[str, Resource] = field(default_factory=dict)
    local: bool = False


def _planned(*rules: tuple[Rule, int]) -> tuple[dict[Rule, PlannedRule], Counter]:
    """The planned rules (each with twice its ready jobs planned) and their ready jobs."""
    planned = {rule: PlannedRule({name: r.value for name, r in rule.resources.items()
                                  if not r.is_evaluable()}, 2 * jobs) for rule, jobs in rules}
    return planned, Counter({rule: jobs for rule, jobs in rules})


def _book(tmp_path: Path):
    return shape_book(with_default_slots(ExecutorSettings(**GCE)), {}, StateDir(tmp_path),
                      lambda line: None)


def test_planned_jobs_want_their_cpus_on_the_machine_that_holds_them(tmp_path: Path) -> None:
    sweep = Rule("point", {"_cores": Resource(1), "tmpdir": Resource(lambda wc: "/tmp")})
    wide = Rule("wide", {"_cores": Resource(3)})
    reliable = Rule("merge", {"_cores": Resource(1), "expocloud_preemptible": Resource(0)})
    demand = planned_demand(*_planned((sweep, 5000), (wide, 2), (reliable, 1)),
                            lambda rule: rule.local, 1, _book(tmp_path))
    assert demand[(None, Pool.SPOT)] == 5000  # a default tmpdir function does not matter
    assert demand[(None, Pool.ON_DEMAND)] == 1
    (shape, pool), cpus = next((key, cpus) for key, cpus in demand.items() if key[0])
    assert pool is Pool.SPOT and cpus == 6 and shape.machine_type != "e2-standard-2"


def test_rules_sized_by_functions_and_local_rules_wait_for_their_jobs(tmp_path: Path) -> None:
    by_function = Rule("fit", {"_cores": Resource(lambda wc: 4)})
    local = Rule("plot", {"_cores": Resource(1)}, local=True)
    assert planned_demand(*_planned((by_function, 10), (local, 3)), lambda rule: rule.local, 1,
                          _book(tmp_path)) == {}



def test_after_recorded_timeouts_rules_with_hardness_wait_for_their_jobs(tmp_path: Path) -> None:
    """A rerun whose jobs an earlier run's timeouts dominate skips them on arrival: no VM may
    boot for them (tests/e2e/test_domino.py's rerun)."""
    # a profile's hardness string is a function of the job in Snakemake's eyes
    hard = Rule("solve", {"_cores": Resource(1), "hardness": Resource(lambda wc: "n")})
    plain = Rule("plot", {"_cores": Resource(1)})
    planned = _planned((hard, 6), (plain, 2))
    book = _book(tmp_path)
    assert planned_demand(*planned, lambda rule: False, 1, book) == {(None, Pool.SPOT): 8}
    assert planned_demand(*planned, lambda rule: False, 1, book, known_timeouts=True) == \
        {(None, Pool.SPOT): 2}


def test_only_the_jobs_ready_now_count(tmp_path: Path) -> None:
    """A rule whose jobs wait for others (a summary of the sweep) boots nothing yet."""
    sweep, summary = Rule("point", {"_cores": Resource(1)}), Rule("summary")
    planned, _ = _planned((sweep, 4), (summary, 1))
    assert planned_demand(planned, Counter({sweep: 4}), lambda rule: False, 1,
                          _book(tmp_path)) == {(None, Pool.SPOT): 4}
