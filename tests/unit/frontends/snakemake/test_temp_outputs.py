"""A job's own snakemake uploads every temp output the main process waits for
(frontends/snakemake/temp_outputs.py), checked on Snakemake's own DAG of a small workflow and
the arguments Snakemake's remote executors give a job (``RealExecutor.get_job_args``)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake_interface_executor_plugins.executors.real import RealExecutor

from expo_executor.frontends.snakemake.temp_outputs import FLAG, upload_awaited

from tests.helpers import snakemake_dag

# Snakemake's test_temp_expand (one job writes a, b and c as temp; only a is read), and a
# group whose first member's temp output only its second member reads
SNAKEFILE = """
rule all:
    input: "test.txt", "grouped.txt"

rule consume:
    input: "a.txt"
    output: "test.txt"
    shell: "touch {output}"

rule make:
    output: temp(expand("{ds}.txt", ds="a b c".split()))
    shell: "touch {output}"

rule first:
    output: temp("inner.txt")
    group: "g"
    shell: "touch {output}"

rule second:
    input: "inner.txt"
    output: "grouped.txt"
    group: "g"
    shell: "touch {output}"
"""


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Snakemake's workflow object with its DAG built as the main process builds it (the
    dry-run plugin stands for a remote executor: both make Snakemake form group jobs)."""
    root = tmp_path_factory.mktemp("temp-outputs")
    (root / "Snakefile").write_text(SNAKEFILE)
    with snakemake_dag(root) as built:
        yield built


def _job(workflow, name: str):
    """The job of rule ``name``, or the group job of group ``name``."""
    return next(job for job in workflow.dag.get_jobs_or_groups()
                if (job.is_group() and job.groupid == name)
                or (not job.is_group() and job.rule.name == name))


def _snakemakes_args(workflow, job) -> str:
    """What Snakemake's remote executors give the job's own snakemake (our executor's base)."""
    return RealExecutor.get_job_args(SimpleNamespace(workflow=workflow, cores="all"), job)


def test_a_single_job_uploads_its_temp_outputs_no_job_reads(workflow) -> None:
    job = _job(workflow, "make")
    given = _snakemakes_args(workflow, job)
    assert f"{FLAG} 'b.txt' 'c.txt'" in given  # what made the main process wait in vain
    kept = upload_awaited(given, job, workflow.dag)
    assert FLAG not in kept
    assert kept.split() == [word for word in given.split()
                            if word not in (FLAG, "'b.txt'", "'c.txt'")]


def test_a_group_keeps_its_inner_temp_files_on_the_worker(workflow) -> None:
    group = _job(workflow, "g")
    given = _snakemakes_args(workflow, group)
    assert f"{FLAG} 'inner.txt'" in given
    assert upload_awaited(given, group, workflow.dag) == given


def test_a_job_without_unneeded_temp_outputs_keeps_its_arguments(workflow) -> None:
    job = _job(workflow, "consume")
    given = _snakemakes_args(workflow, job)
    assert upload_awaited(given, job, workflow.dag) == given


def test_arguments_not_as_snakemake_formats_them_are_refused(workflow) -> None:
    """A Snakemake that formats the flag otherwise must not silently keep it."""
    with pytest.raises(ValueError, match="--unneeded-temp-files is not in the job's arguments"):
        upload_awaited("--unneeded-temp-files b.txt c.txt", _job(workflow, "make"),
                       workflow.dag)
