"""The command clock in real processes. End to end through ``snakemake --executor expocloud``
on the local engine, a job's deadline times its rule's body, not Snakemake's start-up: every
job's snakemake process sleeps 3 s while it reads the Snakefile (module-level code, as a slow
import or a loaded machine would), longer than the 2 s deadline; the quick rule is solved all
the same, the slow one times out, and both records say how long the command ran and how long
everything around it took."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from expo_executor.worker import command_clock
from expo_executor.worker.command_clock import read_stamps, stamp

from tests.helpers import processes_under, run_dirs, run_snakemake

SNAKEFILE = """
import time
time.sleep(3)  # every job's own snakemake reads this before it runs the rule's body

rule all:
    input: "quick/1.txt", "slow/1.txt"

rule quick:
    output: "quick/{n}.txt"
    shell: "sleep 0.3; echo done > {output}"

rule slow:
    output: "slow/{n}.txt"
    shell: "sleep 60; echo done > {output}"
"""
DEADLINE = 2


@pytest.mark.slow
def test_the_deadline_times_the_rules_body_not_snakemakes_start_up(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    result = run_snakemake(
        tmp_path, "--executor", "expocloud", "-j", "4", "--keep-going",
        "--set-resources", 'quick:hardness="n"', f"quick:deadline={DEADLINE}s",
        'slow:hardness="n"', f"slow:deadline={DEADLINE}s",
        "--expocloud-max-workers", "1", "--expocloud-slots-per-worker", "2",
        "--expocloud-poll-interval", "0.1", "--expocloud-status-interval", "2",
        # each job in a snakemake of its own, whose start-up reads the Snakefile: a direct
        # job (direct_jobs.py) has no start-up to tell from its command
        env={**os.environ, "EXPOCLOUD_DIRECT_JOBS": "0"})
    lines = (run_dirs(tmp_path)[-1] / "jobs.jsonl").read_text().splitlines()
    records = {r["rule"]: r for r in map(json.loads, lines)}
    quick, slow = records["quick"], records["slow"]
    assert quick["outcome"] == "solved", (quick, result.stderr[-3000:])
    assert quick["command_s"] < DEADLINE and quick["overhead_s"] >= 3, quick
    assert quick["runtime_s"] > DEADLINE  # the whole job took longer than the deadline
    assert slow["outcome"] == "timeout", slow
    assert DEADLINE <= slow["command_s"] < DEADLINE + 2 and slow["overhead_s"] >= 3, slow
    assert f"timed out after {DEADLINE} s (deadline {DEADLINE} s)" in result.stderr
    assert not processes_under(tmp_path), "no job or worker may outlive the run"


def test_the_shell_announcement_is_a_hooked_stamp(tmp_path: Path) -> None:
    """A Snakemake job's shell command announces its stamps before anything else runs (its
    sources' download on GCE is staging already); the hook's later word stands."""
    path = tmp_path / "s"
    subprocess.run(["/bin/sh", "-c", command_clock.ANNOUNCE],
                   env={command_clock.STAMPS_ENV: str(path)}, check=True)
    assert read_stamps(path).hooked
    stamp(str(path), hooked=False, why="no rule runner")
    assert not read_stamps(path).hooked and read_stamps(path).why == "no rule runner"
    subprocess.run(["/bin/sh", "-c", command_clock.ANNOUNCE], env={}, check=True)  # no file


# -- --expocloud-confirm-timeouts on the local engine ---------------------------------------------

CONFIRM = """
rule all:
    input: expand("out/{n}.txt", n=[1, 2, 3])

rule work:
    output: "out/{n}.txt"
    # n=1 is slow only on its first attempt (a slow worker), n=3 is always too slow
    shell: "if [ {wildcards.n} = 1 ] && [ ! -e first-1 ]; then touch first-1; sleep 60; fi; "
           "if [ {wildcards.n} = 3 ]; then sleep 60; fi; echo done > {output}"
"""


@pytest.mark.slow
def test_a_timeout_is_confirmed_on_another_worker_before_it_prunes(tmp_path: Path) -> None:
    """n=1's first run times out (its worker was "slow"), its re-run on the other worker is
    solved: nothing is pruned, so n=2 and n=3 run; n=3 times out twice and is a timeout."""
    (tmp_path / "Snakefile").write_text(CONFIRM)
    result = run_snakemake(
        tmp_path, "--executor", "expocloud", "-j", "4", "--keep-going",
        "--set-resources", 'work:hardness="n"', "work:deadline=2s",
        "--expocloud-max-workers", "2", "--expocloud-slots-per-worker", "1",
        "--expocloud-confirm-timeouts", "--expocloud-idle-timeout", "60",
        "--expocloud-poll-interval", "0.1", "--expocloud-status-interval", "2")
    lines = (run_dirs(tmp_path)[-1] / "jobs.jsonl").read_text().splitlines()
    records = {r["wildcards"]["n"]: r for r in map(json.loads, lines)}
    log = result.stderr
    assert {n: r["outcome"] for n, r in records.items()} == \
        {"1": "solved", "2": "solved", "3": "timeout"}, log[-3000:]
    assert records["1"]["first_timeout_on"] not in (None, records["1"]["worker"])
    assert "a slow worker, not a hard combination" in records["1"]["reason"]
    assert records["3"]["first_timeout_on"] not in (None, records["3"]["worker"])
    assert "running it once more on another, idle worker" in log
    assert not processes_under(tmp_path), "no job or worker may outlive the run"
