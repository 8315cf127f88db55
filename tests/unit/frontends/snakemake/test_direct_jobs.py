"""Which jobs are direct jobs, one reason each, and a direct job's command, on Snakemake's own
DAG of a small workflow built as the main process builds it (frontends/snakemake/direct_jobs.py)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from types import SimpleNamespace

import pytest

from expo_executor.frontends.snakemake.direct_jobs import (DIRECT_ENV, THREAD_VARIABLES,
                                                           DirectJobs, command, why_not)
from expo_executor.protocol.keys import COMMAND_ONLY_ENV

from tests.helpers import snakemake_dag

SNAKEFILE = """
NAME = "sweep"
shell.prefix("set -eu; ")

rule all:
    input: "plain/1.txt", "run.txt", "script.txt", "shadow.txt", "bench.txt", "update.txt",
           "conda.txt", "container.txt", "modules.txt", "wide.txt", "grouped.txt",
           "check.txt", "handover.txt", "consumer.txt", "cached.txt"

rule plain:
    input: "in.txt"
    output: "plain/{n}.txt"
    log: "logs/{n}.log"
    params: p="a b"
    threads: 2
    resources: tmpdir="/tmp/direct-tmp"
    shell: "echo {NAME} {input} {output} {params.p:q} {wildcards.n} {threads} {rule} > {log}"

rule run:
    output: "run.txt"
    run:
        pass

rule script:
    output: "script.txt"
    script: "s.py"

rule shadow:
    output: "shadow.txt"
    shadow: "minimal"
    shell: "touch {output}"

rule bench:
    output: "bench.txt"
    benchmark: "bench.tsv"
    shell: "touch {output}"

rule update:
    output: update("update.txt")
    shell: "touch {output}"

rule conda:
    output: "conda.txt"
    conda: "env.yaml"
    shell: "touch {output}"

rule container:
    output: "container.txt"
    container: "docker://busybox"
    shell: "touch {output}"

rule modules:
    output: "modules.txt"
    envmodules: "gcc"
    shell: "touch {output}"

rule wide:
    output: "wide.txt"
    threads: 8
    shell: "touch {output}"

rule first:
    output: "inner.txt"
    group: "g"
    shell: "touch {output}"

rule second:
    input: "inner.txt"
    output: "grouped.txt"
    group: "g"
    shell: "touch {output}"

checkpoint check:
    output: "check.txt"
    shell: "touch {output}"

rule handover:
    output: "handover.txt"
    handover: True
    shell: "touch {output}"

rule cached:
    output: "cached.txt"
    cache: True
    shell: "touch {output}"

rule producer:
    output: pipe("piped")
    shell: "echo x > {output}"

rule consumer:
    input: "piped"
    output: "consumer.txt"
    shell: "cat {input} > {output}"
"""


@pytest.fixture(scope="module")
def workflow(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """Snakemake's workflow with its DAG built as the main process builds it (the dry-run
    plugin stands for our remote executor: both make Snakemake form group jobs)."""
    root = tmp_path_factory.mktemp("direct-jobs")
    (root / "Snakefile").write_text(SNAKEFILE)
    (root / "in.txt").write_text("in\n")
    (root / "s.py").write_text("")
    (root / "env.yaml").write_text("dependencies: []\n")
    with snakemake_dag(root, cores=8) as built:
        yield built


def _job(workflow, name: str):
    """The job of rule ``name`` (also inside a group), or the group job of group ``name``."""
    jobs = list(workflow.dag.get_jobs_or_groups())
    members = [member for job in jobs if job.is_group() for member in job.jobs]
    return next(job for job in jobs + members
                if (job.is_group() and job.groupid == name)
                or (not job.is_group() and job.rule.name == name))


def _why(workflow, name: str, local_engine: bool = True, cpus: int = 4) -> str | None:
    return why_not(_job(workflow, name), workflow, local_engine, cpus)


def test_a_plain_shell_job_on_the_local_engine_is_direct(workflow) -> None:
    assert _why(workflow, "plain") is None


@pytest.mark.parametrize("name, reason", [
    ("run", "not a shell rule"),
    ("script", "not a shell rule"),
    ("shadow", "a shadow rule"),
    ("bench", "a benchmark"),
    ("update", "an update output"),
    ("conda", "a conda, container or env-modules rule"),
    ("container", "a conda, container or env-modules rule"),
    ("modules", "a conda, container or env-modules rule"),
    ("wide", "more threads than its worker gives"),
    ("g", "a group job"),
    ("check", "a template engine, handover or checkpoint rule"),
    ("handover", "a template engine, handover or checkpoint rule"),
    ("producer", "a pipe, service or storage file"),
    ("consumer", "a pipe, service or storage file"),
])
def test_each_reason_keeps_a_job_in_its_own_snakemake(workflow, name: str, reason: str) -> None:
    assert _why(workflow, name) == reason


def test_no_job_is_direct_on_gce(workflow) -> None:
    assert _why(workflow, "plain", local_engine=False) == "not the local engine"


def _with(workflow, **settings: object) -> SimpleNamespace:
    """The workflow's settings with some replaced, as another command line would give them."""
    names = ("storage_settings", "workflow_settings", "execution_settings")
    given = {name: getattr(workflow, name) for name in names}
    for field, value in settings.items():
        owner = next(name for name in names if hasattr(given[name], field))
        given[owner] = dataclasses.replace(given[owner], **{field: value})
    return SimpleNamespace(**given)


@pytest.mark.parametrize("settings, reason", [
    ({"default_storage_provider": "gcs"}, "a default storage provider"),
    ({"shared_fs_usage": frozenset()}, "no shared file system for inputs and outputs"),
    ({"debug": True}, "debug mode"),
])
def test_run_settings_keep_jobs_in_their_own_snakemake(workflow, settings, reason) -> None:
    assert why_not(_job(workflow, "plain"), _with(workflow, **settings), True, 4) == reason


def test_a_cached_rule_is_not_direct_with_the_cache_on(workflow) -> None:
    assert _why(workflow, "cached") is None  # the cache is off: the rule runs as any other
    cached = _with(workflow, cache=["cached"])
    assert why_not(_job(workflow, "cached"), cached, True, 4) == "a cached rule"


def test_a_direct_jobs_command_is_its_shell_line_as_snakemake_formats_it(workflow) -> None:
    found = command(_job(workflow, "plain"))
    assert found is not None
    shell_path, flag, line = found.argv
    assert os.path.basename(shell_path) == "bash" and flag == "-c"
    assert line == "set -eu;  echo sweep in.txt plain/1.txt 'a b' 1 2 plain > logs/1.log"
    assert found.env[COMMAND_ONLY_ENV] == "1"
    assert {found.env[name] for name in THREAD_VARIABLES} == {"2"}
    assert found.env["TMPDIR"] == "/tmp/direct-tmp"


def test_the_switch_turns_every_job_off(workflow, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DIRECT_ENV, "0")
    assert DirectJobs(workflow, True, 4).command(_job(workflow, "plain")) is None
    monkeypatch.delenv(DIRECT_ENV)
    assert DirectJobs(workflow, True, 4).command(_job(workflow, "plain")) is not None
