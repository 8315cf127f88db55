"""Snakemake's job selection under expocloud (job_selection.py): one pass in the coordinator's
order, on stand-in jobs; and the take-over of Snakemake's own ILP plugin class, on the real one.
(A real Snakemake run's selections: tests/e2e/test_sweep_selection.py.)"""

from __future__ import annotations

import asyncio
import logging
import sys
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry

from expo_executor.core.tasks import TaskEntry
from expo_executor.frontends.snakemake.describe import Fleet, JobDescriber, order_values
from expo_executor.frontends.snakemake.job_selection import Selection, first_fit, take_over

UNLIMITED = sys.maxsize  # what Snakemake gives a resource nobody limits


@dataclass(eq=False)  # hashed by identity, as Snakemake's jobs are
class ReadyJob:
    """What the selection and the describer read of a ready Snakemake job."""

    name: str = "solve"
    priority: int = 0
    resources: dict[str, Any] = field(default_factory=dict)
    wildcards_dict: dict[str, Any] = field(default_factory=dict)
    scheduler_resources: dict[str, Any] = field(default_factory=lambda: {"_nodes": 1})
    jobid: int = 1
    attempt: int = 1
    threads: int = 1
    output: tuple = ()

    def is_group(self) -> bool:
        return False

    @property
    def rule(self) -> Any:
        """A rule of its own, whose resources are the job's (plain values)."""
        return _Rule(self.resources)


@dataclass(eq=False)
class _Rule:
    resources: dict[str, Any]


def test_every_job_that_fits_is_handed_over_in_key_order() -> None:
    jobs = [ReadyJob(jobid=i) for i in range(6)]
    free = {"_nodes": 4, "_cores": UNLIMITED, "_job_count": UNLIMITED, "tmpdir": "/tmp"}
    chosen = first_fit(jobs, free, key=lambda job: (-job.jobid,))
    assert [job.jobid for job in chosen] == [5, 4, 3, 2]  # -j leaves 4: the first four


class CountedJob(ReadyJob):
    """A ready job that counts how often its resources are evaluated (Snakemake evaluates
    them, input functions and all, when ``scheduler_resources`` is first read)."""

    evaluated: list[int] = []

    @property
    def scheduler_resources(self) -> dict[str, Any]:  # type: ignore[override]
        self.evaluated.append(self.jobid)
        return {"_nodes": 1, "_job_count": 1}

    @scheduler_resources.setter
    def scheduler_resources(self, value: dict[str, Any]) -> None:
        pass


def test_once_j_is_used_up_no_later_job_is_evaluated() -> None:
    CountedJob.evaluated = []
    jobs = [CountedJob(jobid=i) for i in range(1000)]
    chosen = first_fit(jobs, {"_nodes": 3, "_job_count": UNLIMITED}, key=lambda job: (job.jobid,))
    assert [job.jobid for job in chosen] == [0, 1, 2]
    assert CountedJob.evaluated == [0, 1, 2]  # not the other 997
    CountedJob.evaluated = []
    chosen = first_fit(jobs, {"_nodes": UNLIMITED, "_job_count": 2}, key=lambda job: (job.jobid,))
    assert len(chosen) == 2 and CountedJob.evaluated == [0, 1]


def test_a_job_too_big_for_what_is_left_is_passed_over_for_a_later_one_that_fits() -> None:
    big, small, other = (ReadyJob(jobid=1, scheduler_resources={"_cores": 3}),
                         ReadyJob(jobid=2, scheduler_resources={"_cores": 1}),
                         ReadyJob(jobid=3, scheduler_resources={"_cores": 2}))
    chosen = first_fit([small, big, other], {"_cores": 4}, key=lambda job: (job.jobid,))
    assert chosen == [big, small]  # other (2 cores) no longer fits beside them


def test_the_selection_orders_each_job_once_and_logs_each_hand_over() -> None:
    asked: list[int] = []
    lines: list[str] = []

    def order(job: ReadyJob) -> tuple:
        asked.append(job.jobid)
        return (job.jobid,)

    selection = Selection(order, lines.append, lines.append)
    ready = [ReadyJob(jobid=i) for i in range(5)]
    assert selection.select(set(ready), {"_nodes": 2}) == ready[:2]
    assert selection.select(set(ready[2:]), {"_nodes": 2}) == ready[2:4]
    assert sorted(asked) == [0, 1, 2, 3, 4]  # the three left over were not ordered again
    assert lines == ["expocloud: job selection 1: 2 of 5 ready jobs handed over (free: _nodes=2)",
                     "expocloud: job selection 2: 2 of 3 ready jobs handed over (free: _nodes=2)"]
    selection.handed_over()
    assert len(lines) == 2  # it did choose: no warning


def test_jobs_chosen_without_the_selection_are_warned_about_once() -> None:
    warnings: list[str] = []
    selection = Selection(lambda job: (), lambda line: None, warnings.append)
    selection.handed_over()
    selection.handed_over()
    assert len(warnings) == 1 and "with its own scheduler" in warnings[0]


def test_the_describers_order_is_the_coordinators_queue_order() -> None:
    """Easier first among a deadline's rule, priority before hardness: what -j lets through
    is what the coordinator would run first."""
    describer = JobDescriber("/wf/Snakefile", Fleet(2))
    annotated = {"hardness": "n", "deadline": "60s"}
    jobs = [ReadyJob(jobid=1, resources=annotated, wildcards_dict={"n": 9}),
            ReadyJob(jobid=2, resources=annotated, wildcards_dict={"n": 2}),
            ReadyJob(jobid=3, resources=annotated, wildcards_dict={"n": 5}, priority=1),
            ReadyJob(jobid=4, resources={"hardness": "n"}, wildcards_dict={"n": 7}),  # no deadline
            ReadyJob(jobid=5, resources={"hardness": "n", "deadline": "soon"})]  # bad: describe's
    tasks = {job.jobid: describer.describe(job, ["true"], None, {}).task for job in jobs[:4]}
    queue = sorted(tasks, key=lambda i: TaskEntry(tasks[i], 0).order())
    assert [job.jobid for job in sorted(jobs[:4], key=describer.order)] == queue == [3, 4, 2, 1]
    assert describer.order(jobs[4]) == (0, (0.0, ()))


def test_a_rule_s_order_is_read_from_the_rule_unless_a_job_must_evaluate_it() -> None:
    """The order of 50,000 ready jobs needs their rule's hardness and deadline, not each job's
    resources (job_selection.py): read from the rule when it gives them as values; a function
    leaves it to the job."""
    get = order_values(_Rule({"hardness": "n", "deadline": "60s", "mem_mb": lambda wc: 1}))
    assert get is not None and get("hardness") == "n" and get("runtime") is None
    assert order_values(_Rule({"hardness": lambda wc: "n", "deadline": "60s"})) is None
    assert order_values(_Rule({"hardness": "n", "runtime": lambda wc: 5})) is None


def test_the_take_over_replaces_snakemakes_ilp_selection_and_gives_it_back() -> None:
    ilp_class = SchedulerPluginRegistry().get_plugin("ilp").scheduler
    snakemakes = ilp_class.select_jobs
    lines: list[str] = []
    selection = Selection(lambda job: (job.jobid,), lines.append, lines.append)
    give_back = take_over("ilp", selection, lines.append)
    try:
        ilp = ilp_class(None, None, logging.getLogger("test"))  # as Snakemake makes it
        ready = [ReadyJob(jobid=i) for i in range(3)]
        assert ilp.select_jobs(ready, ready, {"_nodes": 2}, {}) == ready[:2]
        assert selection.selections == 1
    finally:
        give_back()
    assert ilp_class.select_jobs is snakemakes


def test_the_take_over_checks_a_job_with_snakemakes_own_check_when_it_is_looked_at() -> None:
    """Snakemake checks (and so evaluates) every ready job before each selection, and finds
    every input's size for its MILP: under the take-over its check of a job runs when the
    selection looks at the job, and no size is asked for."""
    from snakemake.scheduling.job_scheduler import JobScheduler
    from snakemake_interface_common.exceptions import WorkflowError

    snakemakes = JobScheduler.validate_job, JobScheduler.update_input_sizes
    ilp_class = SchedulerPluginRegistry().get_plugin("ilp").scheduler
    lines: list[str] = []
    selection = Selection(lambda job: (job.jobid,), lines.append, lines.append)
    give_back = take_over("ilp", selection, lines.append)
    try:
        job_scheduler = SimpleNamespace(_validated_jobs=set(),
                                        global_resources={"_nodes": 2, "_job_count": UNLIMITED})
        ready = [ReadyJob(jobid=i) for i in range(5)]
        for job in ready:  # what Snakemake does before each selection
            JobScheduler.validate_job(job_scheduler, job)
        assert asyncio.run(JobScheduler.update_input_sizes(job_scheduler, ready)) is None
        assert job_scheduler._validated_jobs == set()  # nothing checked yet
        ilp = ilp_class(None, None, logging.getLogger("test"))
        assert ilp.select_jobs(ready, ready, {"_nodes": 2}, {}) == ready[:2]
        assert job_scheduler._validated_jobs == set(ready[:2])  # the two it looked at
        too_big = ReadyJob(jobid=-1, scheduler_resources={"_nodes": 5})
        JobScheduler.validate_job(job_scheduler, too_big)
        with pytest.raises(WorkflowError, match="Job needs _nodes=5 but only _nodes=2"):
            ilp.select_jobs([too_big, *ready], ready, {"_nodes": 2}, {})
    finally:
        give_back()
    assert (JobScheduler.validate_job, JobScheduler.update_input_sizes) == snakemakes


def test_a_scheduler_the_user_named_is_left_alone() -> None:
    ilp_class = SchedulerPluginRegistry().get_plugin("ilp").scheduler
    snakemakes = ilp_class.select_jobs
    lines: list[str] = []
    give_back = take_over("greedy", Selection(lambda job: (), lines.append, lines.append),
                          lines.append)
    assert ilp_class.select_jobs is snakemakes and not lines
    give_back()
    assert ilp_class.select_jobs is snakemakes
