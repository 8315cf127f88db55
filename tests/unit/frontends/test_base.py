"""The two front ends on their shared base, with stand-in job objects: no snakemake or cwltool
run, no coordinator thread. What a Snakemake job and a cwltool job become (the task, its
hardness, the typed run-record metadata), the one CPU/memory check, the template method's
order (the whole batch described before anything is submitted), and run.json kept by
RunFiles."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cwltool.errors import WorkflowException

from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.settings.values import with_default_slots
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import HardnessMeta, JobMeta
from expo_executor.core.shapes import Misfit, find_misfit
from expo_executor.frontends.base import FrontEnd, job_request
from expo_executor.frontends.cwl.executor import ExpoExecutor
from expo_executor.frontends.snakemake.describe import Fleet, JobDescriber, rule_values


@dataclass
class SnakemakeJob:
    """What the describer reads of a Snakemake job (``JobExecutorInterface``)."""

    name: str = "solve"
    jobid: int = 7
    attempt: int = 1
    threads: int = 1
    resources: dict[str, Any] = field(default_factory=dict)
    wildcards_dict: dict[str, Any] = field(default_factory=dict)
    output: list[str] = field(default_factory=list)
    priority: int = 0

    def is_group(self) -> bool:
        return False


COMMAND = (["true"], None, {})  # the command a describer is given (argv, cwd, env)

def test_a_snakemake_job_becomes_a_task_with_its_hardness_and_typed_metadata() -> None:
    job = SnakemakeJob(resources={"hardness": "n, m", "deadline": "90s", "mem_mb": 512},
                       wildcards_dict={"n": "3", "m": 5},
                       output=["results/3/5.json"], threads=2)
    description = JobDescriber("/wf/Snakefile", Fleet(2, 1024)).describe(job, *COMMAND)
    task = description.task
    assert (task.key, task.cpus, task.mem_mb, task.preemptible) == ("j7a1", 2, 512, True)
    assert description.spec.deadline_s == 90.0 and description.spec.cpus == 2
    assert task.point is not None and tuple(task.point.vector) == (3, 5)
    assert description.family is not None and description.family.rule == "solve"
    assert description.meta == JobMeta(
        "solve", {"n": "3", "m": "5"}, ("results/3/5.json",),
        HardnessMeta("n, m", ("n", "m"), (3, 5), tuple(task.point.scope)), attempt=1)
    record = description.meta.to_dict()
    assert record["hardness"]["vector"] == [3, 5] and record["attempt"] == 1
    assert "job" not in record  # a cwltool job name only


@pytest.mark.parametrize("job,words", [
    (SnakemakeJob(threads=3), "threads of rule 'solve': it needs 3 threads but workers have 2"),
    (SnakemakeJob(resources={"mem_mb": 4096}), "it needs 4096 MB but workers have 1024 MB"),
    (SnakemakeJob(resources={"hardness": "k"}, wildcards_dict={"n": "1"}), "hardness"),
])
def test_a_snakemake_job_no_worker_holds_is_refused_naming_the_rule(job: SnakemakeJob,
                                                                     words: str) -> None:
    with pytest.raises(ExpoError, match=words.replace("(", r"\(")):
        JobDescriber("/wf/Snakefile", Fleet(2, 1024)).describe(job, *COMMAND)


def test_locally_a_job_asking_more_than_a_worker_has_runs_with_what_it_has() -> None:
    lines: list[str] = []
    describer = JobDescriber("/wf/Snakefile", Fleet(2, 1024, shrink_to_fit=True), lines.append)
    tasks = [describer.describe(SnakemakeJob(jobid=i, threads=16), *COMMAND).task
             for i in range(3)]
    assert [t.cpus for t in tasks] == [2, 2, 2]
    assert describer.describe(SnakemakeJob(name="small", threads=1), *COMMAND).task.cpus == 1
    big = describer.describe(SnakemakeJob(name="big", resources={"mem_mb": 4096}),
                            *COMMAND).task
    assert big.mem_mb == 1024  # a whole worker: it runs alone, as plain Snakemake would run it
    assert lines == [  # once per rule
        "expocloud: rule 'solve' asks for 16 threads; local workers have 2: its jobs run with "
        "2, as plain Snakemake scales threads down to the cores it has",
        "expocloud: rule 'big' asks for 4096 MB; this machine has 1024 MB for jobs: its jobs "
        "run anyway, one at a time, as plain Snakemake runs them without --resources mem_mb"]


class Resource:
    """Snakemake 9's resource: a value, or a function only a job can evaluate."""

    def __init__(self, value: Any) -> None:
        self._value = value

    def is_evaluable(self) -> bool:
        return callable(self._value)

    @property
    def value(self) -> Any:
        assert not callable(self._value), "evaluated a resource function before its job"
        return self._value


@dataclass
class Rule:
    name: str
    resources: dict[str, Resource]


def test_a_rules_checks_before_the_run_never_evaluate_its_resource_functions() -> None:
    def reads_an_input_not_made_yet(wildcards: Any, input: Any) -> int:
        raise AssertionError("called before its job")

    rule = Rule("lazy", {"_cores": Resource(1), "mem_mb": Resource(reads_an_input_not_made_yet),
                         "hardness": Resource("n"), "deadline": Resource("2m")})
    values = rule_values(rule)
    assert values == {"_cores": 1, "hardness": "n", "deadline": "2m"}
    JobDescriber("/wf/Snakefile", Fleet(2, 1024)).check_rule("lazy", values)  # no error


@pytest.mark.parametrize("values,words", [
    ({"_cores": 4}, "threads of rule 'r': it needs 4 threads but workers have 2 slots"),
    ({"deadline": "soon"}, "resource 'deadline' of rule 'r'"),
    ({"hardness": "n,,"}, "resource 'hardness' of rule 'r'"),
    ({"mem_mb": 4096}, "resource 'mem_mb' of rule 'r': it needs 4096 MB"),
    ({"expocloud_preemptible": 2}, "resource 'expocloud_preemptible' of rule 'r'"),
])
def test_a_rules_bad_values_are_refused_before_any_job(values: dict, words: str) -> None:
    with pytest.raises(ExpoError, match=words):
        JobDescriber("/wf/Snakefile", Fleet(2, 1024)).check_rule("r", values)


def test_one_fit_check_for_both_front_ends() -> None:
    assert find_misfit(2, 100, slots=2, worker_mem_mb=0) is None  # memory not tracked
    assert find_misfit(3, 0, slots=2, worker_mem_mb=0) == Misfit("cpus", 3, 2)
    assert find_misfit(1, 900, slots=2, worker_mem_mb=800) == Misfit("mem_mb", 900, 800)


class StandInCoordinator:
    def __init__(self) -> None:
        self.batches: list[list[Any]] = []

    def submit(self, requests: list[Any]) -> None:
        self.batches.append(list(requests))


class StandInFrontEnd(FrontEnd):
    """Describes a job as its own request, refusing any job named 'bad'."""

    def __init__(self) -> None:
        self.coordinator = StandInCoordinator()
        self.slots, self.worker_mem_mb = 1, 0
        self.events: list[str] = []

    def describe(self, job: Any) -> Any:
        if job == "bad":
            raise ExpoError("resource 'hardness' of rule 'r'", "it is bad", "fix it")
        self.events.append(f"describe {job}")
        return f"request {job}"

    def submitted(self, job: Any, request: Any) -> None:
        self.events.append(f"submitted {job}")


def test_the_whole_batch_is_described_before_any_of_it_is_submitted() -> None:
    front = StandInFrontEnd()
    assert front.submit_jobs(["a", "b"]) == ["request a", "request b"]
    assert front.events == ["describe a", "describe b", "submitted a", "submitted b"]
    assert front.coordinator.batches == [["request a", "request b"]]
    with pytest.raises(ExpoError, match="it is bad"):
        front.submit_jobs(["c", "bad"])
    assert front.coordinator.batches == [["request a", "request b"]]  # nothing of that batch
    assert front.submit_jobs([]) == [] and len(front.coordinator.batches) == 1


def test_run_json_is_opened_and_closed_through_run_files(tmp_path: Path) -> None:
    front = StandInFrontEnd()
    front.run_files = RunFiles(tmp_path / "run-1")
    front.run_files.dir.mkdir()
    front.open_run("local", ExecutorSettings(), snakefile="/wf/Snakefile")
    record = json.loads((tmp_path / "run-1" / "run.json").read_text())
    assert (record["run_id"], record["engine"], record["ended"]) == ("run-1", "local", None)
    assert record["snakefile"] == "/wf/Snakefile" and record["settings"]["engine"] == "local"
    front.close_run()
    ended = json.loads((tmp_path / "run-1" / "run.json").read_text())
    assert ended["ended"] is not None and ended["created"] == record["created"]


def test_a_jobs_family_names_the_engine_and_machine_it_is_timed_on() -> None:
    """The frontier a timeout joins is the one of its machine: a job of a rule with its own
    GCE shape is keyed by that shape's machine, the others by the run's."""
    from expo_executor.core.shapes import Shape

    def where(shape: Shape | None) -> tuple[str, str]:
        return ("gce", shape.machine_type if shape else "e2-standard-2")

    job = SnakemakeJob(resources={"hardness": "n", "deadline": "90s"}, wildcards_dict={"n": 3})
    family = JobDescriber("/wf/Snakefile", Fleet(2, 1024),
                          measured_on=where).describe(job, *COMMAND).family
    assert family is not None and (family.engine, family.machine) == ("gce", "e2-standard-2")
    assert "on gce e2-standard-2" in family.key


def _cwl_job(cores: float = 1, ram: float = 0) -> Any:
    """What ExpoExecutor reads of a cwltool job with no hardness hint."""
    tool = SimpleNamespace(name="echo", sweep=None, spot_attempts=None)
    builder = SimpleNamespace(job={"x": 1, "f": {"class": "File"}},
                              resources={"cores": cores, "ram": ram})
    return SimpleNamespace(tool=tool, builder=builder, timelimit=0, name="echo_2")


def _cwl_executor(slots: int = 2, mem: int = 1000) -> ExpoExecutor:
    def never() -> Any:
        raise AssertionError("describing a job starts no coordinator")
    return ExpoExecutor(never, "/wf/sweep.cwl", slots, None, worker_mem_mb=mem)


def test_a_cwl_job_becomes_a_task_and_typed_metadata() -> None:
    executor = _cwl_executor()
    task, family, deadline = executor._describe(_cwl_job(cores=1.5, ram=300), "c1")
    assert (task.key, task.label, task.cpus, task.mem_mb) == ("c1", "echo_2", 2, 300)
    assert family is None and deadline is None and task.point is None
    from expo_executor.frontends.cwl.executor import _meta
    meta = _meta(_cwl_job(), task)
    assert meta == JobMeta("echo", {"x": "1"}, job="echo_2")  # simple inputs as wildcards


@pytest.mark.parametrize("job,words", [
    (_cwl_job(cores=3), "asks for 3 cores but workers have 2 slots"),
    (_cwl_job(ram=2000), "asks for 2000 MiB of RAM but workers have 1000 MiB"),
])
def test_a_cwl_job_no_worker_holds_is_refused(job: Any, words: str) -> None:
    with pytest.raises(WorkflowException, match=words):
        _cwl_executor()._describe(job, "c1")


@pytest.mark.parametrize("given,cores,want", [
    ({}, None, (8, 1)),  # one worker holding every core: a job may use them all
    ({}, 3, (3, 1)),  # snakemake --cores 3: the fleet's share of the machine
    ({}, 64, (8, 1)),  # never more than the machine has
    ({"max_workers": 4}, None, (2, 4)),  # the cores shared among the workers asked for
    ({"slots_per_worker": 1}, 3, (1, None)),  # given slots are kept as they are
    ({"engine": "gce", "gce_project": "p"}, None, (1, None)),
])
def test_both_front_ends_default_the_slots_one_way(given: dict, cores: int | None, want: tuple,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    settings = with_default_slots(ExecutorSettings(**given), cores)
    assert (settings.slots_per_worker, settings.max_workers) == want


def test_a_request_carries_one_spec_built_with_its_tasks_cpus() -> None:
    """``job_request`` builds the job's one ``JobSpec`` (what its worker runs, unchanged to
    the inbox): its CPUs are the task's, its logs the paths of ``logs``, whose names stay with
    the request; a spec that disagrees with its task is refused."""
    from expo_executor.coordinator.requests import JobRequest
    from expo_executor.core.scheduler import Task
    from expo_executor.protocol.records import JobSpec

    task = Task("j1", "solve", cpus=2)
    request = job_request(task, ["true"], None, {"A": "b"}, 5.0, logs={"x/a.log": "a.log"},
                          redact=["b"], meta=JobMeta("solve"))
    assert request.spec == JobSpec(["true"], None, {"A": "b"}, 5.0, 2, None, ("x/a.log",),
                                   ("b",))
    assert request.log_names == {"x/a.log": "a.log"} and request.meta == JobMeta("solve")
    with pytest.raises(ValueError, match="2 CPUs"):
        JobRequest(Task("j2", "solve", cpus=1), request.spec)


def test_a_requests_spec_carries_its_tasks_prune_point() -> None:
    """Where a job's timeout prunes travels in its spec, built once from its task (the worker
    holding it prefetched starts none its own timeouts dominate); a spec that disagrees with
    its task is refused, as for its CPUs."""
    from dataclasses import replace

    from expo_executor.coordinator.requests import JobRequest
    from expo_executor.core.hardness import HardnessPoint
    from expo_executor.core.scheduler import Task
    from expo_executor.protocol.records import PrunePoint

    point = HardnessPoint(("a",), (2.0,))
    task = Task("j1", "solve", family="f", point=point)
    request = job_request(task, ["true"], None, {}, 5.0)
    assert request.spec.prune == PrunePoint("f", point)
    assert job_request(Task("j2", "solve", point=point), ["true"], None, {}, 5.0).spec.prune \
        is None, "no family: its timeout prunes nothing"
    with pytest.raises(ValueError, match="prunes at None"):
        JobRequest(task, replace(request.spec, prune=None))


def test_a_profiles_labels_are_known_at_planning_as_snakemake_evaluates_them() -> None:
    """``set-resources: {r: {gce_labels: "team=ml,project=x"}}``: Snakemake keeps it as an
    expression and, on its SyntaxError, evaluates it to the text itself for every job; the
    planning reads the same text (a rule with labels gets VMs of its own before any job)."""
    from snakemake.resources import Resource as SnakemakeResource

    text = "team=ml,project=x"
    resource = SnakemakeResource.from_cli_expression("gce_labels", text,
                                                     with_threads_arg=False)
    assert resource.is_evaluable()
    values = rule_values(Rule("r", {"gce_labels": resource}))
    assert values == {"gce_labels": text}
    evaluated = resource.evaluate(wildcards={}, input=[], attempt=1, async_run=None,
                                  rulename="r")
    assert evaluated.value == values["gce_labels"]
