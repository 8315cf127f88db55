#!/usr/bin/env python3
"""CPU of one trivial job's process on a worker: a fresh interpreter (issue 17's before), a
fork of the worker's zygote that loads the workflow itself (worker/zygote.py, issue 31's
before) and a fork of the workflow's template, which loaded it once
(worker/workflow_template.py, after), on the same command.

    .venv/bin/python bench/job_cpu.py [--jobs 20] [--skip fresh]

The command is the Snakemake front end's shell line for ``rule t: shell: "echo ... >
{output}"`` (``ANNOUNCE; PY -m expo_executor.worker.command_clock -m snakemake ... --mode
remote``), run in a workflow directory, one job after the other. Each job's CPU (user+sys) is
its own and its children's, from ``wait4``; the zygote's and the template's CPU is read from
/proc: their start-up once, and what each fork costs them. The template's first job starts it
and is forked from the zygote: it is left out of the template's figures, which start once the
template has loaded.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from expo_executor.worker import command_clock  # noqa: E402
from expo_executor.worker.forked import Zygote, snakemake_chain  # noqa: E402
from expo_executor.worker.workflow_template import LOADED_ENV  # noqa: E402

SNAKEFILE = '''\
N = int(config.get("njobs", 20))

rule all:
    input: expand("out/{i}.txt", i=range(N))

rule t:
    output: "out/{i}.txt"
    shell: "echo {wildcards.i} > {output}"
'''


def job_argv(workdir: Path, i: int, jobs: int) -> list[str]:
    args = ["--snakefile", str(workdir / "Snakefile"), "--target-jobs", f"t:i={i}",
            "--allowed-rules", "t", "--cores", "all", "--force-use-threads", "--force",
            "--target-files-omit-workdir-adjustment", "--max-inventory-time", "0",
            "--nocolor", "--no-hooks", "--nolock", "--ignore-incomplete",
            "--config", f"njobs={jobs}", "--max-jobs-per-timespan", "1000/0s",
            "--scheduler", "greedy",
            "--max-threads", "2", "--mode", "remote"]
    line = (f"{sys.executable} -m {command_clock.__name__} -m snakemake "
            + " ".join(shlex.quote(a) for a in args))
    return ["/bin/sh", "-c", f"{command_clock.ANNOUNCE}; {line}"]


def cpu_of(pid: int) -> float:
    """User+sys seconds of a live process so far (/proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def reaped_cpu(pid: int) -> tuple[int, float]:
    _, status, usage = os.wait4(pid, 0)
    return os.waitstatus_to_exitcode(status), usage.ru_utime + usage.ru_stime


def run_fresh(workdir: Path, jobs: int, env: dict[str, str]) -> list[float]:
    cpus = []
    for i in range(jobs):
        with open(workdir / f"fresh-{i}.log", "wb") as log:
            proc = subprocess.Popen(job_argv(workdir, i, jobs), cwd=workdir, env=env,
                                    stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        code, cpu = reaped_cpu(proc.pid)
        proc.returncode = code  # reaped here: Popen must not wait for it again
        assert code == 0, (workdir / f"fresh-{i}.log").read_text()[-2000:]
        cpus.append(cpu)
    return cpus


def run_forked(workdir: Path, jobs: int, env: dict[str, str], name: str
               ) -> tuple[list[float], float, float]:
    """Jobs forked by a zygote (and its template, unless the environment turns it off); the
    jobs' CPU, the forking process's start-up CPU and its CPU per fork."""
    zygote = Zygote(dict(env), "bench")
    if not zygote.wait_ready(60):
        raise SystemExit(f"the zygote did not start: {zygote.refused}")
    start_cpu, forker, cpus = cpu_of(zygote.pid), zygote.pid, []
    first = 0
    if env.get(LOADED_ENV) != "0":
        _job(zygote, workdir, 0, jobs, env, name)  # starts the template
        first = 1
        forker = next(iter(zygote.helpers))
        while not _loaded(forker):
            pass
        start_cpu = cpu_of(forker)
    for i in range(first, jobs):
        cpus.append(_job(zygote, workdir, i, jobs, env, name))
    per_fork = (cpu_of(forker) - start_cpu) / len(cpus)
    zygote.close()
    return cpus, start_cpu, per_fork


def _loaded(pid: int) -> bool:
    """A template waits for requests once loaded: sleeping, its CPU no longer growing."""
    before = cpu_of(pid)
    time.sleep(0.3)
    return cpu_of(pid) == before


def _job(zygote: Zygote, workdir: Path, i: int, jobs: int, env: dict[str, str],
         name: str) -> float:
    job_env = {**env, command_clock.STAMPS_ENV: str(workdir / f"{name}-{i}.stamps")}
    chain = snakemake_chain(job_argv(workdir, i, jobs), env["PATH"])
    assert chain is not None
    job = zygote.spawn(chain, str(workdir), job_env, workdir / f"{name}-{i}.log")
    code, cpu = reaped_cpu(job.pid)
    assert code == 0, (workdir / f"{name}-{i}.log").read_text()[-2000:]
    return cpu


def _line(label: str, cpus: list[float], tail: str = "") -> str:
    return (f"  {label}: mean {statistics.mean(cpus):.3f} s (min {min(cpus):.3f}, "
            f"max {max(cpus):.3f}){tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--skip", action="append", default=[],
                        choices=["fresh", "zygote", "template"])
    args = parser.parse_args()
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    lines = [f"{args.jobs} trivial jobs one after the other, CPU (user+sys) per job process:"]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "Snakefile").write_text(SNAKEFILE)
        if "fresh" not in args.skip:
            lines.append(_line("fresh interpreter", run_fresh(workdir, args.jobs, env)))
        for name, value in (("zygote", "0"), ("template", "1")):
            if name in args.skip:
                continue
            cpus, start, per_fork = run_forked(workdir, args.jobs, {**env, LOADED_ENV: value},
                                               name)
            lines.append(_line(f"forked by the {name}", cpus,
                               f"; the {name}: {per_fork:.4f} s per fork, {start:.2f} s once"))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
