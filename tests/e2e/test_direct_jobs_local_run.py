"""Direct jobs end to end (frontends/snakemake/direct_jobs.py): on the local engine a plain
``shell:`` job's worker runs only its shell line, formatted in the main process; its files are
what plain Snakemake writes, a failure is reported as before, and a job that is not a plain
shell job (here a ``run:`` block) still runs in its own snakemake. A direct job past its
deadline, and the domino effect, are tests/e2e/test_domino.py's (its jobs are direct)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.helpers import run_snakemake

SNAKEFILE = """
GREETING = "hello"
shell.prefix("set -eu; PREFIXED={GREETING}-prefixed; ")

rule all:
    input: expand("out/{n}.txt", n=[1, 2]), "ran.txt", "who/direct.txt", "who/shadowed.txt"

rule make:
    input: "in.txt"
    output: "out/{n}.txt"
    log: "logs/{n}.log"
    params: word="two words", n=lambda wildcards: int(wildcards.n) * 10
    threads: 2
    shell: "echo {GREETING} {input} {output} {params.word:q} {params.n} {wildcards} "
           "{wildcards.n} {threads} $OMP_NUM_THREADS $PREFIXED > {output}; echo logged {rule} > {log}"

rule who:  # the process that started the job's shell: its worker, or the job's own snakemake
    output: "who/direct.txt"
    shell: "tr '\\\\0' ' ' < /proc/$PPID/cmdline > {output}"

rule shadowed:  # not a direct job (a shadow rule)
    output: "who/shadowed.txt"
    shadow: "minimal"
    shell: "tr '\\\\0' ' ' < /proc/$PPID/cmdline > {output}"

rule ran:
    output: "ran.txt"
    run:
        with open(output[0], "w") as f:
            f.write("ran\\n")
"""

DIRECT_LINE = "expocloud: 3 jobs ran directly"
FAILING = """
rule fail:
    output: "never.txt"
    shell: "echo doomed-{output} >&2; exit 3"
"""


def _files(workdir: Path) -> dict[str, str]:
    return {str(p.relative_to(workdir)): p.read_text() for p in sorted(workdir.rglob("*"))
            if p.is_file() and not {".snakemake", ".expocloud"} & set(p.parts)
            and p.name != "Snakefile" and p.parent.name != "who"}


def _workdir(root: Path, name: str, snakefile: str) -> Path:
    workdir = root / name
    workdir.mkdir()
    (workdir / "Snakefile").write_text(snakefile)
    (workdir / "in.txt").write_text("in\n")
    return workdir


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    workdir = _workdir(tmp_path_factory.mktemp("direct"), "plain", SNAKEFILE)
    result = run_snakemake(workdir, "--cores", "2")
    assert result.returncode == 0, result.stderr
    return _files(workdir)


def _expocloud(workdir: Path, direct: str = "1"):
    return run_snakemake(workdir, "--executor", "expocloud", "-j", "10",
                         "--expocloud-slots-per-worker", "2",
                         env={**os.environ, "EXPOCLOUD_DIRECT_JOBS": direct})


def test_direct_jobs_write_what_plain_snakemake_writes(plain, tmp_path: Path) -> None:
    workdir = _workdir(tmp_path, "expocloud", SNAKEFILE)
    result = _expocloud(workdir)
    assert result.returncode == 0, result.stderr
    assert DIRECT_LINE in result.stderr  # the run: and shadow jobs are not among them
    assert _files(workdir) == plain
    # a direct job's shell is its worker's child; the others' run in a snakemake of their own,
    # forked from the worker's zygote as before
    assert "expo_executor.worker.agent" in (workdir / "who/direct.txt").read_text()
    assert "expo_executor.worker.zygote" in (workdir / "who/shadowed.txt").read_text()
    assert plain["out/1.txt"] == "hello in.txt out/1.txt two words 10 n=1 1 2 2 hello-prefixed\n"
    assert plain["logs/2.log"] == "logged make\n"


def test_the_switch_turns_direct_jobs_off(plain, tmp_path: Path) -> None:
    workdir = _workdir(tmp_path, "off", SNAKEFILE)
    result = _expocloud(workdir, direct="0")
    assert result.returncode == 0, result.stderr
    assert "ran directly" not in result.stderr
    assert _files(workdir) == plain


@pytest.mark.parametrize("direct", ["1", "0"])
def test_a_failing_direct_job_is_reported_as_before(tmp_path: Path, direct: str) -> None:
    workdir = _workdir(tmp_path, "fail", FAILING)
    result = _expocloud(workdir, direct)
    assert result.returncode != 0
    assert ("ran directly" in result.stderr) is (direct == "1")
    assert "Error in rule fail" in result.stderr
    # the worker's exit code: the command's own, or its snakemake's
    assert f"failed on worker w-1: exit code {3 if direct == '1' else 1}" in result.stderr
    assert "doomed-never.txt" in result.stderr  # the command's output, in the error's tail
    assert not (workdir / "never.txt").exists()
