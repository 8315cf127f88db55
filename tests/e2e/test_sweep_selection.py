"""A real ``snakemake --executor expocloud`` run with hundreds of ready jobs: every job selection
is expocloud's one pass (frontends/snakemake/job_selection.py), never Snakemake's MILP, and
each hands over every ready job that -j lets through. Shown by the selections' own records in
Snakemake's log, not by timing (the time a selection takes: bench/ctrl_c.py and RESULTS.md)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

from tests.helpers import SNAKEMAKE, interruptible, processes_under, wait_until

POINTS = 300
JOBS = 100  # -j: what Snakemake may have handed over at once

# one quick local job, then POINTS ready at once; they never need to end
SNAKEFILE = f"""
localrules: start

rule all:
    input: expand("out/{{n}}.txt", n=range({POINTS}))

rule start:
    output: "start.txt"
    shell: "touch {{output}}"

rule point:
    input: "start.txt"
    output: "out/{{n}}.txt"
    shell: "sleep 300; touch {{output}}"
"""

OURS = re.compile(r"expocloud: job selection (\d+): (\d+) of (\d+) ready jobs handed over "
                  r"\(free: (.*)\)")
SNAKEMAKES = re.compile(r"^Selected jobs: (\d+)$", re.MULTILINE)  # after each selection


def test_each_selection_hands_over_every_ready_job_that_fits_in_one_pass(
        tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    log = tmp_path / "snakemake.log"
    with log.open("w") as err:
        # a Ctrl-C that does not end the run shows where it is stuck: SIGABRT makes Python's
        # faulthandler write every thread's stack into the log (below)
        proc = subprocess.Popen([SNAKEMAKE, "--executor", "expocloud", "-j", str(JOBS),
                                 "--verbose", "--expocloud-status-interval", "0.5"],
                                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=err,
                                preexec_fn=interruptible,
                                env={**os.environ, "PYTHONFAULTHANDLER": "1"})
    try:
        # both selections, and Snakemake's own line after each (it logs it after ours: a
        # SIGINT between the two would leave its second one out)
        logged = lambda: (len(OURS.findall(log.read_text())),  # noqa: E731
                          len(SNAKEMAKES.findall(log.read_text())))
        assert wait_until(lambda: min(logged()) >= 2, timeout=180), log.read_text()[-3000:]
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGABRT)
            proc.wait(timeout=10)
            pytest.fail(f"still running 60 s after Ctrl-C: {log.read_text()[-6000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
    text = log.read_text()
    ours = [(int(n), int(chosen), int(ready), _limits(free))
            for n, chosen, ready, free in OURS.findall(text)]
    # the start job alone, then all points ready at once
    assert [(n, ready) for n, _, ready, _ in ours[:2]] == [(1, 1), (2, POINTS)], ours
    # each took every ready job that fitted what was free (each job takes one of -j's nodes and
    # of Snakemake's job-rate limit, 100 a second by default), in one go
    assert all(chosen == min(ready, *limits.values()) for _, chosen, ready, limits in ours), ours
    assert ours[1][3]["_nodes"] == JOBS
    # Snakemake selected exactly as often as we did, and took what we chose: its ILP never ran
    assert [int(n) for n in SNAKEMAKES.findall(text)] == [chosen for _, chosen, _, _ in ours]
    assert "ready jobs are handed over in one pass" in text
    assert "ILP solver" not in text  # Snakemake's words when its ILP gives up or is missing
    assert wait_until(lambda: not processes_under(tmp_path), timeout=10), processes_under(tmp_path)


def _limits(free: str) -> dict[str, int]:
    """``_nodes=100, _job_count=99`` as a dict."""
    return {name: int(value) for name, value in (item.split("=") for item in free.split(", "))}
