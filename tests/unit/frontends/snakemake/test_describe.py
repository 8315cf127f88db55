"""A Snakemake job on the GCE path, described against its run's machines: a job (or a group job,
sized for its whole group) beyond the run's own workers gets a machine of its own that holds
it, on one worker, also when the user set the slots of the run's own workers; memory and disk in
MiB or in words size it as in MB. Stand-in job objects (real ones of Snakemake's own DAG for the
units), the real ShapeBook over the bundled price snapshot."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from expo_executor.coordinator.rule_machines import shape_book
from expo_executor.coordinator.settings import ExecutorSettings, worker_memory_mb
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.cost import machines
from expo_executor.frontends.snakemake.describe import Fleet, JobDescriber, rule_values
from expo_executor.settings.values import with_default_slots
from tests.helpers import snakemake_dag
from tests.unit.frontends.test_base import COMMAND, SnakemakeJob

GCE = {"engine": "gce", "gce_project": "p", "gce_zones": "us-central1-a", "max_workers": 2}


@dataclass
class GroupJob:
    """What the describer reads of a Snakemake group job: its resources are the whole
    group's (Snakemake's GroupResources: a pipe group's jobs at once, summed)."""

    jobs: list[SnakemakeJob]
    threads: int
    resources: dict[str, Any] = field(default_factory=dict)
    groupid: str = "0"
    jobid: str = "5d2f7e1c-9a3b-4c1d-8e2f-0a1b2c3d4e5f"
    attempt: int = 1

    def is_group(self) -> bool:
        return True

    @property
    def output(self) -> list[str]:
        return [o for job in self.jobs for o in job.output]


def _describer(tmp_path: Path, lines: list[str], **given: Any) -> JobDescriber:
    """The describer a GCE run of these settings builds (executor.Executor.__post_init__):
    the slots the user gave decide whether a job beyond them gets a machine."""
    raw = ExecutorSettings(**{**GCE, **given})
    settings = with_default_slots(raw)
    book = shape_book(settings, {}, StateDir(tmp_path), lines.append)
    fleet = Fleet(settings.slots_per_worker, worker_memory_mb(settings, 2))
    return JobDescriber("/wf/Snakefile", fleet, lines.append, book)


def test_a_job_beyond_the_default_slots_gets_a_machine_of_its_own(tmp_path: Path) -> None:
    lines: list[str] = []
    task = _describer(tmp_path, lines).describe(SnakemakeJob(name="rule1", threads=3),
                                                *COMMAND).task
    assert task.shape is not None and task.cpus == 3
    assert machines.shape(task.shape.machine_type).vcpus >= 3
    assert lines[0].startswith("expocloud: rule 'rule1' needs 3 thread(s): its jobs run on "
                               f"{task.shape.machine_type}")
    small = _describer(tmp_path, []).describe(SnakemakeJob(threads=1), *COMMAND).task
    assert small.shape is None  # the run's own workers hold it


def test_a_group_job_runs_on_one_machine_that_holds_the_whole_group(tmp_path: Path) -> None:
    """A pipe group of two 1-thread jobs needs 2 slots at once: more than a default GCE
    worker's one, so the group gets a machine of 2 vCPUs or more, as one task."""
    lines: list[str] = []
    members = [SnakemakeJob(name="a", jobid=1, output=["a.txt"]),
               SnakemakeJob(name="b", jobid=2, output=["b.txt"])]
    group = GroupJob(members, threads=2, resources={"_cores": 2, "mem_mb": 2000})
    request = _describer(tmp_path, lines).describe(group, *COMMAND)
    task = request.task
    assert task.shape is not None and task.cpus == 2 and task.mem_mb == 2000
    dims = machines.shape(task.shape.machine_type)
    assert dims is not None and dims.vcpus >= 2 and dims.memory_mb >= 2000
    assert request.spec.cpus == 2 and request.meta.rule == "group 0"
    assert lines[0].startswith("expocloud: group 0 needs 2 thread(s) and 2000 MB")


def test_slots_the_user_set_describe_the_own_workers_and_a_job_beyond_gets_a_machine(
        tmp_path: Path) -> None:
    """The shipped GCE profiles set the slots (2 on e2-standard-2): a rule of 3 threads must
    run there as it does without them, not be refused."""
    lines: list[str] = []
    describer = _describer(tmp_path, lines, slots_per_worker=2)
    fits = describer.describe(SnakemakeJob(name="rule0", threads=2), *COMMAND).task
    assert fits.shape is None and fits.cpus == 2  # the run's own 2-slot workers
    beyond = describer.describe(SnakemakeJob(name="rule1", threads=3), *COMMAND).task
    assert beyond.shape is not None and beyond.cpus == 3
    assert machines.shape(beyond.shape.machine_type).vcpus >= 3
    assert lines[0].startswith("expocloud: rule 'rule1' needs 3 thread(s): its jobs run on ")


def test_a_named_machine_wins_and_is_checked_against_the_job(tmp_path: Path) -> None:
    describer = _describer(tmp_path, [])
    named = SnakemakeJob(threads=3, resources={"machine_type": "n2-standard-8"})
    assert describer.describe(named, *COMMAND).task.shape.machine_type == "n2-standard-8"
    with pytest.raises(ExpoError, match="its machine, n2-standard-4"):
        describer.describe(SnakemakeJob(threads=8, resources={"machine_type": "n2-standard-4"}),
                           *COMMAND)


def test_a_job_no_machine_holds_is_refused_before_any_vm(tmp_path: Path) -> None:
    with pytest.raises(ExpoError, match="threads of rule 'huge': it needs 500 threads, more "
                       "than any machine type has"):
        _describer(tmp_path, []).check_rule("huge", {"_cores": 500})


# One machine's worth of memory and disk, said four ways: in MB, in MiB, in words, and by
# functions (which only a job evaluates: the plan leaves them out)
SIZES_SNAKEFILE = """
rule all:
    input: expand("{r}.txt", r=["mb", "mib", "words", "functions"])

rule mb:
    output: "mb.txt"
    resources: mem_mb=12000, disk_mb=200000
    shell: "touch {output}"

rule mib:
    output: "mib.txt"
    resources: mem_mib=11445, disk_mib=190735
    shell: "touch {output}"

rule words:
    output: "words.txt"
    resources: mem="12 GB", disk="200 GB"
    shell: "touch {output}"

rule functions:
    output: "functions.txt"
    resources: mem=lambda wildcards: "12 GB", disk_mib=lambda wildcards: 190735
    shell: "touch {output}"
"""


def test_memory_and_disk_in_mib_or_words_size_the_machine_as_in_mb(tmp_path: Path) -> None:
    """``mem_mib``, ``disk_mib`` and sizes in words ("12 GB") choose the machine and boot disk
    that the same ``mem_mb``/``disk_mb`` choose, in the plan (rule_values, before the run) and
    for each job: Snakemake's own DAG of a workflow that says one size four ways."""
    (tmp_path / "wf").mkdir()
    (tmp_path / "wf" / "Snakefile").write_text(SIZES_SNAKEFILE)
    with snakemake_dag(tmp_path / "wf") as workflow:
        planned = {rule.name: rule_values(rule) for rule in workflow.rules}
        jobs = {job.name: job for job in workflow.dag.jobs if job.name != "all"}
        describer = _describer(tmp_path, [])
        tasks = {name: describer.describe(job, *COMMAND).task for name, job in jobs.items()}
    sizes = {name: (values.get("mem_mb"), values.get("disk_mb"))
             for name, values in planned.items()}
    assert sizes["mib"] == sizes["words"] == sizes["mb"] == (12000, 200000)
    assert sizes["functions"] == (None, None)
    chosen = {name: (task.shape, task.mem_mb) for name, task in tasks.items()}
    shape = chosen["mb"][0]  # beyond the default worker (e2-standard-2, 8 GB, 10 GB disk)
    assert shape is not None and shape.disk_gb > 0 and chosen["mb"][1] == 12000
    assert machines.shape(shape.machine_type).memory_mb >= 12000
    assert chosen["mib"] == chosen["words"] == chosen["functions"] == chosen["mb"]
