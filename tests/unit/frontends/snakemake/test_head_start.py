"""The head start: what the jobs Snakemake can run now will want, per (shape, pool), judged by
the real describer (over the real ShapeBook and the bundled price snapshot) on one job per rule
before any is submitted; bad annotations are refused then, before any worker starts (the
scheduler's side: tests/unit/core/test_scheduler.py). Stand-in jobs and rules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from expo_executor.coordinator.rule_machines import shape_book
from expo_executor.coordinator.settings import ExecutorSettings, worker_memory_mb
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.frontends.snakemake.describe import Fleet, JobDescriber
from expo_executor.frontends.snakemake.head_start import first_wave, planned_demand
from expo_executor.settings.values import with_default_slots
from tests.unit.frontends.test_base import SnakemakeJob

GCE = {"engine": "gce", "gce_project": "p", "gce_zones": "us-central1-a", "max_workers": 2}


@dataclass(frozen=True)
class Rule:
    name: str
    local: bool = False


def _describer(tmp_path: Path) -> JobDescriber:
    settings = with_default_slots(ExecutorSettings(**GCE))
    book = shape_book(settings, {}, StateDir(tmp_path), lambda line: None)
    return JobDescriber("/wf/Snakefile", Fleet(1, worker_memory_mb(settings, 2)),
                        lambda line: None, book)


def _jobs(name: str, count: int, **given: Any) -> list[SnakemakeJob]:
    return [SnakemakeJob(name=name, jobid=i, wildcards_dict={"n": str(i)}, **given)
            for i in range(count)]


def _demand(tmp_path: Path, ready: dict[Rule, list[SnakemakeJob]], known: bool = False):
    return planned_demand(ready, lambda rule: rule.local, _describer(tmp_path), known)


def test_ready_jobs_want_their_cpus_on_the_machine_that_holds_them(tmp_path: Path) -> None:
    demand = _demand(tmp_path, {
        Rule("point"): _jobs("point", 5000),
        Rule("wide"): _jobs("wide", 2, threads=3),
        Rule("merge"): _jobs("merge", 1, resources={"expocloud_preemptible": 0}),
        Rule("plot", local=True): _jobs("plot", 3)})  # runs in Snakemake's own process
    assert demand[(None, Pool.SPOT)] == 5000 and demand[(None, Pool.ON_DEMAND)] == 1
    (shape, pool), cpus = next((key, cpus) for key, cpus in demand.items() if key[0])
    assert pool is Pool.SPOT and cpus == 6 and shape.machine_type != "e2-standard-2"
    assert len(demand) == 3


def test_a_bad_hardness_value_in_any_ready_job_is_refused_before_any_worker(
        tmp_path: Path) -> None:
    jobs = _jobs("solve", 3, resources={"hardness": "n:0<1", "deadline": "10s"})
    with pytest.raises(ExpoError, match="resource 'hardness' of rule 'solve'"):
        _demand(tmp_path, {Rule("solve"): jobs})  # n=2 is missing from the declared order


def test_after_recorded_timeouts_rules_with_hardness_wait_for_their_jobs(tmp_path: Path) -> None:
    """A rerun whose jobs an earlier run's timeouts dominate skips them on arrival: no VM may
    boot for them (tests/e2e/test_domino.py's rerun)."""
    ready = {Rule("solve"): _jobs("solve", 6, resources={"hardness": "n", "deadline": "9s"}),
             Rule("plot"): _jobs("plot", 2)}
    assert _demand(tmp_path, ready) == {(None, Pool.SPOT): 8}
    assert _demand(tmp_path, ready, known=True) == {(None, Pool.SPOT): 2}


class Dag:
    def __init__(self, ready: list[Any]) -> None:
        self.ready_jobs = set(ready)


def test_the_first_wave_is_the_dags_ready_jobs_by_rule_without_groups() -> None:
    @dataclass(frozen=True)
    class Job:
        rule: str
        group: bool = False

        def is_group(self) -> bool:
            return self.group

    workflow = type("Workflow", (), {"dag": Dag([Job("a"), Job("b"), Job("b", group=True)])})
    assert first_wave(workflow) == {"a": [Job("a")], "b": [Job("b")]}
