"""A real ``snakemake --executor expocloud`` run with hundreds of ready jobs: every job selection
is expocloud's one pass (frontends/snakemake/job_selection.py), never Snakemake's MILP, and
each hands over every ready job that -j lets through; a ready job's resources are evaluated
when the selection looks at it, not all before the first hand-over, and one that asks for more
than there is still fails the run in Snakemake's words. Shown by the selections' own records in
Snakemake's log and by what the resource functions wrote, not by timing (the time a selection
takes: bench/ctrl_c.py and RESULTS.md)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import textwrap
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


# every point's resources come from a function that notes which process evaluated it; each
# job records, as it runs, how many evaluations had been made by then
COUNTED = textwrap.dedent("""
    import os

    def counted(wildcards):
        with open("evaluated.txt", "a") as out:
            out.write(f"{os.getpid()} {wildcards.n}\\n")
        return 1

    rule all:
        input: expand("out/{n}.txt", n=range(%d))

    rule point:
        output: "out/{n}.txt"
        resources: tokens=counted
        shell: "wc -l < evaluated.txt > {output}"
    """)


def test_a_ready_job_s_resources_are_evaluated_when_the_selection_looks_at_it(
        tmp_path: Path) -> None:
    """Snakemake checks every ready job's resources before each selection, evaluating them
    all (7 s for 50,000 points, RESULTS.md), and the selection's order read them too; now the
    first jobs run after a handful of evaluations, easiest first by the profile's hardness
    (read from the rule, not from each job), and every job is evaluated in Snakemake's
    process by the time it is handed over."""
    points = 200
    (tmp_path / "Snakefile").write_text(COUNTED % points)
    (tmp_path / "evaluated.txt").write_text("")
    with (tmp_path / "log").open("w") as log:
        proc = subprocess.Popen([SNAKEMAKE, "--executor", "expocloud", "-j", "3",
                                 "--resources", "tokens=1000", "--set-resources",
                                 'point:hardness="n"', "point:deadline=60s"], cwd=tmp_path,
                                stdout=subprocess.DEVNULL, stderr=log, preexec_fn=interruptible)
    assert proc.wait(timeout=300) == 0, (tmp_path / "log").read_text()[-3000:]
    lines = (tmp_path / "evaluated.txt").read_text().splitlines()
    main = {int(line.split()[1]) for line in lines if line.startswith(f"{proc.pid} ")}
    assert main == set(range(points))
    seen = {n: int((tmp_path / "out" / f"{n}.txt").read_text()) for n in range(points)}
    first = sorted(seen, key=lambda n: (seen[n], n))[:3]
    assert max(seen[n] for n in first) <= 10, seen  # not all 200 before the first hand-over
    assert first == [0, 1, 2], first  # the easiest first
