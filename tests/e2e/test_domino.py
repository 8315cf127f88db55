"""End to end through ``snakemake --executor expocloud``: a real timeout kills a running harder
job and skips queued ones; a rerun skips without running; placeholders let the aggregate run;
``expocloud forget`` undoes them.

The workflow is built so that the order of events does not depend on timing luck: x/0
finishes at once, y/0 after 3 s, every other job sleeps far past the deadline; with two slots,
x/1 and x/0 start first, then y/0, then x/2, 3 s after x/1 (jobs start within a fraction of a
second of each other), so it is still running when x/1 reaches its deadline and the domino
effect kills it. No job is held (prefetch 0): which worker holds what would depend on which is
ready first.
"""

from __future__ import annotations

import json
import re
import subprocess
from datetime import datetime
from pathlib import Path

import pytest

from expo_executor.runs.files import RunFiles

from tests.helpers import EXPOCLOUD, job_records, processes_under, run_dirs, run_snakemake

SNAKEFILE = """
rule all:
    input: "summary.txt"

rule summary:
    input: expand("out/{a}/{n}.txt", a=["x", "y"], n=[0, 1, 2, 3])
    output: "summary.txt"
    shell: "cat {input} > {output}"

rule work:
    output: "out/{a}/{n}.txt"
    shell: "if [ {wildcards.n} -gt 0 ]; then sleep 300; elif [ {wildcards.a} = y ]; then sleep 3; fi; echo solved > {output}"
"""

DEADLINE = 10


def _args(*extra: str) -> list[str]:
    return ["--executor", "expocloud", "-j", "100", "--keep-going",
            "--set-resources", 'work:hardness="a:x<y, n"', f"work:deadline={DEADLINE}s",
            "--expocloud-max-workers", "2", "--expocloud-slots-per-worker", "1",
            "--expocloud-poll-interval", "0.1", "--expocloud-status-interval", "2",
            "--expocloud-prefetch", "0", *extra]


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess]:
    workdir = tmp_path_factory.mktemp("domino")
    (workdir / "Snakefile").write_text(SNAKEFILE)
    return workdir, run_snakemake(workdir, *_args())


def test_timeout_kills_running_and_skips_queued(first_run) -> None:
    workdir, result = first_run
    assert result.returncode != 0, "skipped jobs are errors in the default mode"
    records = job_records(run_dirs(workdir)[-1])
    outcomes = {k: (r["outcome"], r["killed"]) for k, r in records.items() if r["rule"] == "work"}
    assert outcomes == {
        "x/0": ("solved", False), "y/0": ("solved", False),
        "x/1": ("timeout", False),
        "x/2": ("skipped", True),  # it was running: the domino effect killed it
        "x/3": ("skipped", False), "y/1": ("skipped", False), "y/2": ("skipped", False),
        "y/3": ("skipped", False),
    }
    # killed before its own command reached the deadline (its whole runtime, Snakemake's
    # start-up included, may pass it on a loaded machine: the deadline times the command)
    assert records["x/2"]["command_s"] < DEADLINE
    assert records["x/1"]["runtime_s"] >= DEADLINE
    log = result.stdout + result.stderr
    assert "timed out after 10 s (deadline 10 s); 5 harder combinations will be skipped" in log
    # its work jobs ran directly, their shell lines alone (frontends/snakemake/direct_jobs.py):
    # the deadline and the domino effect time and kill them as they did their own snakemakes
    assert "jobs ran directly" in log
    assert "skipped: as hard as or harder than work {a=x, n=1}, which timed out" in log
    # the coordinator's own line says the timeout once, with what it pruned, before Snakemake
    # hears of any skip (each skip's error above is Snakemake's own, per job)
    line = ("expocloud: timeout: work {a=x, n=1} after 10 s (deadline 10 s); pruned 4 queued, "
            "cancelled 1 running")
    assert result.stderr.count(line) == 1, result.stderr[-3000:]
    assert result.stderr.index(line) < result.stderr.index("skipped: as hard as")
    assert not processes_under(workdir), "no job or worker may outlive the run"


def test_rerun_skips_known_hopeless_jobs_without_running_them(first_run) -> None:
    workdir, _ = first_run
    result = run_snakemake(workdir, *_args())
    assert result.returncode != 0
    run_dir = run_dirs(workdir)[-1]
    records = job_records(run_dir)
    assert {k: r["outcome"] for k, r in records.items()} == {
        k: "skipped" for k in ("x/1", "x/2", "x/3", "y/1", "y/2", "y/3")}
    assert all(r["worker"] is None for r in records.values()), "nothing may have run"
    arrivals = re.findall(r"expocloud: skipped (\d+) jobs? on arrival: as hard as or harder "
                          r"than work \{a=x, n=1\}, which timed out in an earlier run", result.stderr)
    assert sum(map(int, arrivals)) == 6, result.stderr[-3000:]
    assert not (run_dir / "vms.jsonl").exists(), "no worker was needed"
    # the run's own span (run.json: the executor's start to its end), not the command's wall
    # time: Snakemake's start-up alone took 24 s on a loaded machine, and it pays no deadline
    info = RunFiles(run_dir).info()
    span = (datetime.fromisoformat(info["ended"]) - datetime.fromisoformat(info["created"]))
    assert span.total_seconds() < DEADLINE, "known timeouts are not paid again"


def test_placeholders_let_the_aggregate_run_and_forget_removes_them(first_run) -> None:
    workdir, _ = first_run
    result = run_snakemake(workdir, *_args("--expocloud-on-skip", "placeholder"))
    assert result.returncode == 0, result.stderr[-3000:]
    summary = (workdir / "summary.txt").read_text().splitlines()
    assert summary.count("solved") == 2
    assert summary.count('{"expocloud_outcome": "skipped"}') == 6
    placeholders = json.loads((workdir / ".expocloud" / "placeholders.json").read_text())
    assert len(placeholders) == 6

    forget = subprocess.run([EXPOCLOUD, "forget"], cwd=workdir, capture_output=True, text=True)
    assert forget.returncode == 0
    assert "forgot 1 frontier(s) and deleted 6 placeholder output(s)" in forget.stdout
    assert sorted(p.name for p in (workdir / "out" / "x").iterdir()) == ["0.txt"]
    assert not list((workdir / ".expocloud" / "frontiers").glob("*.json"))


QUICK = """
rule all:
    input: expand("out/{n}.txt", n=[1, 2])

rule work:
    output: "out/{n}.txt"
    shell: "echo solved > {output}"
"""


def test_a_stored_timeout_prunes_only_runs_on_its_engine_and_machine(tmp_path: Path) -> None:
    """A GCE timeout in the state directory leaves a local run alone; the same timeout
    measured on this host prunes it."""
    from expo_executor.coordinator.measured_on import local_host
    from expo_executor.coordinator.state import FamilyRef, StateDir
    from expo_executor.core.hardness import HardnessPoint

    def run(where: tuple[str, str]) -> dict[str, str]:
        workdir = tmp_path / where[0]
        workdir.mkdir()
        (workdir / "Snakefile").write_text(QUICK)
        ref = FamilyRef(str(workdir / "Snakefile"), "work", "n", 10.0, *where)
        StateDir(workdir / ".expocloud").add_timeout(ref, HardnessPoint((), (1.0,)),
                                                     "work {n=1}", "earlier")
        run_snakemake(workdir, "--executor", "expocloud", "-j", "4", "--keep-going",
                      "--set-resources", 'work:hardness="n"', "work:deadline=10s",
                      "--expocloud-poll-interval", "0.1")
        return {k: r["outcome"] for k, r in job_records(run_dirs(workdir)[-1]).items()}

    assert run(("gce", "e2-standard-2")) == {"1": "solved", "2": "solved"}
    assert run(("local", local_host())) == {"1": "skipped", "2": "skipped"}
