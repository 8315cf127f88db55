"""Which jobs are direct jobs, one reason each, and a direct job's command, on Snakemake's own
DAG of a small workflow built as the main process builds it (frontends/snakemake/direct_jobs.py)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
from snakemake_interface_executor_plugins.settings import SharedFSUsage

from expo_executor.frontends.snakemake.direct_jobs import (DIRECT_ENV, THREAD_VARIABLES,
                                                           DirectJobs, command, why_not)
from expo_executor.frontends.snakemake.staged_direct import staged, stage, why_not_staged
from expo_executor.protocol.keys import COMMAND_ONLY_ENV

from tests.helpers import snakemake_dag, storage_file

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


GCS_STORAGE = {"default_storage_provider": "gcs", "default_storage_prefix": "gs://b/wf",
               "shared_fs_usage": frozenset()}


@pytest.mark.parametrize("settings, reason", [
    ({}, "not the GCS default storage"),  # this workflow's: no default storage
    ({**GCS_STORAGE, "default_storage_provider": "s3"}, "not the GCS default storage"),
    ({**GCS_STORAGE, "default_storage_prefix": None}, "not the GCS default storage"),
    ({**GCS_STORAGE, "shared_fs_usage": frozenset({SharedFSUsage.STORAGE_LOCAL_COPIES})},
     "a shared file system"),
    # the settings suit, but this workflow's files are local ones
    (GCS_STORAGE, "a file outside the default storage"),
])
def test_on_gce_only_jobs_of_the_gcs_default_storage_can_be_direct(workflow, settings,
                                                                   reason) -> None:
    assert why_not(_job(workflow, "plain"), _with(workflow, **settings), False, 4) == reason


def test_on_gce_a_rule_that_is_not_plain_keeps_its_reason(workflow) -> None:
    assert why_not(_job(workflow, "run"), _with(workflow, **GCS_STORAGE), False, 4) \
        == "not a shell rule"


def _gcs_file(path: str, query: str = "gs://b/wf/x.txt", retrieve: bool = True,
              flags: tuple[str, ...] = ()) -> object:
    """A default-storage file as Snakemake makes it: the GCS plugin's own storage object (no
    client is made until it touches storage), on the local copy's path."""
    from snakemake_storage_plugin_gcs import StorageObject

    stored = StorageObject(query, False, retrieve, SimpleNamespace(safe_print=str))
    file = storage_file(Path(path), stored)
    file.flags["path_modified"] = True  # as snakemake/path_modifier.py marks every one
    for name in flags:
        file.flags[name] = True
    return file


LOCAL_COPY = ".snakemake/storage/gcs/b/wf/x.txt"


def _gcs_job(*files: object) -> SimpleNamespace:
    return SimpleNamespace(input=list(files), output=[_gcs_file(LOCAL_COPY)], log=[])


@pytest.mark.parametrize("file, reason", [
    (_gcs_file(LOCAL_COPY), None),
    (_gcs_file(LOCAL_COPY, flags=("temp",)),
     "a flagged file (temp, protected, touch, directory, ancient...)"),
    (_gcs_file(LOCAL_COPY, flags=("directory",)),
     "a flagged file (temp, protected, touch, directory, ancient...)"),
    (_gcs_file(LOCAL_COPY, retrieve=False), "a storage file Snakemake does not retrieve"),
    (_gcs_file("/abs/x.txt"), "a storage file whose local copy is not a relative path"),
    (_gcs_file("../x.txt"), "a storage file whose local copy is not a relative path"),
    (storage_file(Path(LOCAL_COPY), SimpleNamespace(query="s3://b/x", retrieve=True)),
     "a file of another storage"),
])
def test_on_gce_each_file_must_be_a_plain_file_of_the_gcs_storage(file, reason) -> None:
    workflow = SimpleNamespace(storage_settings=SimpleNamespace(**GCS_STORAGE),
                               workdir_init=os.getcwd(), overwrite_workdir=None)
    assert why_not_staged(_gcs_job(file), workflow) == reason


@pytest.mark.parametrize("moved", [
    {"workdir_init": "/where/snakemake/started"},  # a workdir: directive moved it since
    {"overwrite_workdir": "sub"},  # --directory
])
def test_on_gce_a_job_of_a_workflow_that_moved_its_working_directory_is_not_direct(
        moved: dict) -> None:
    """The job's own snakemake starts in the unpacked sources with the Snakefile named
    relative to the main process's new working directory (on the emulated GCE path it failed:
    'Snakefile "../Snakefile" not found') and the worker's line would run elsewhere than the
    main process formatted it for: such a job keeps its own snakemake, with and without
    direct jobs alike."""
    workflow = SimpleNamespace(storage_settings=SimpleNamespace(**GCS_STORAGE),
                               **{"workdir_init": os.getcwd(), "overwrite_workdir": None,
                                  **moved})
    assert why_not_staged(_gcs_job(_gcs_file(LOCAL_COPY)), workflow) == \
        "a working directory moved by workdir: or --directory"


def test_a_staged_direct_jobs_spec_lists_its_files_and_the_sources() -> None:
    job = SimpleNamespace(
        input=[_gcs_file("c/in.txt", "gs://b/wf/in.txt"), _gcs_file("c/in.txt", "gs://b/wf/in.txt")],
        output=[_gcs_file("c/out.txt", "gs://b/wf/out.txt")],
        log=[_gcs_file("c/a.log", "gs://b/wf/a.log")])
    archive = SimpleNamespace(query="gs://b/wf/snakemake-workflow-sources.H.tar.xz", checksum="H")
    assert stage(job, SimpleNamespace(source_archive=archive)) == {
        "direct": True, "host_env": True,
        "fetch": [["c/in.txt", "gs://b/wf/in.txt"]],  # once, though named twice
        "outputs": [["c/out.txt", "gs://b/wf/out.txt"]],
        "logs": [["c/a.log", "gs://b/wf/a.log"]],
        "sources": ["gs://b/wf/snakemake-workflow-sources.H.tar.xz", "H"]}


def _with(workflow, **settings: object) -> SimpleNamespace:
    """The workflow's settings with some replaced, as another command line would give them."""
    names = ("storage_settings", "workflow_settings", "execution_settings")
    given = {name: getattr(workflow, name) for name in names}
    for field, value in settings.items():
        owner = next(name for name in names if hasattr(given[name], field))
        given[owner] = dataclasses.replace(given[owner], **{field: value})
    # the main process still works where it started (no workdir: directive, no --directory)
    return SimpleNamespace(**given, workdir_init=os.getcwd(), overwrite_workdir=None)


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


def _staged(line: str, tmpdir: object) -> tuple[list, dict, dict] | None:
    """``staged`` for a job with one output whose line is ``line``, in this working directory."""
    from snakemake.common.tbdstring import TBDString

    job = SimpleNamespace(input=[], output=[_gcs_file("c/out.txt", "gs://b/wf/out.txt")], log=[],
                          rule=SimpleNamespace(basedir="/home/me/flow"),
                          resources={"tmpdir": TBDString() if tmpdir == "TBD" else tmpdir})
    workflow = SimpleNamespace(basedir="/home/me/flow", source_archive=SimpleNamespace(
        query="gs://b/wf/s.tar.xz", checksum="H"))
    env = {COMMAND_ONLY_ENV: "1", "OMP_NUM_THREADS": "1", "TMPDIR": "/x"}
    return staged(["/bin/bash", "-c", line], env, job, workflow, ("TMPDIR",))


def test_on_gce_the_tmpdir_is_left_to_the_worker_unless_the_job_names_one() -> None:
    argv, env, spec = _staged("touch c/out.txt", "TBD")
    assert argv == ["bash", "-c", "touch c/out.txt"]  # the worker's bash, on its PATH
    assert env == {"OMP_NUM_THREADS": "1"}  # the staged job stamps and sets the rest
    assert spec["tmpdir"] == [None, ["TMPDIR"]]
    assert _staged("touch c/out.txt", "/scratch")[2]["tmpdir"] == ["/scratch", ["TMPDIR"]]
    assert "tmpdir" not in _staged("touch c/out.txt", None)[2]


@pytest.mark.parametrize("line", ["cat <TBD> > c/out.txt",  # {resources.tmpdir} on GCE
                                  "python /home/me/flow/s.py > c/out.txt",  # {workflow.basedir}
                                  "cat {cwd}/in.txt > c/out.txt"])
def test_on_gce_a_line_naming_what_only_its_worker_knows_is_not_direct(line: str) -> None:
    assert _staged(line.replace("{cwd}", os.getcwd()), "TBD") is None
