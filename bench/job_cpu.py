#!/usr/bin/env python3
"""CPU of one trivial job's process on a worker: a fresh interpreter (before) against a fork
of the worker's zygote (worker/zygote.py, after), on the same command.

    .venv/bin/python bench/job_cpu.py [--jobs 20]

The command is the Snakemake front end's shell line for ``rule t: shell: "echo ... >
{output}"`` (``ANNOUNCE; PY -m expo_executor.worker.command_clock -m snakemake ... --mode
remote``), run in a workflow directory, one job after the other. Each job's CPU (user+sys) is
its own and its children's, from ``wait4``; the zygote's CPU is read from /proc: its start-up
once, and what each fork costs it.
"""

from __future__ import annotations

import argparse
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from expo_executor.worker import command_clock  # noqa: E402
from expo_executor.worker.forked import Zygote, snakemake_chain  # noqa: E402

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


def run_forked(workdir: Path, jobs: int, env: dict[str, str]) -> tuple[list[float], float,
                                                                        float]:
    zygote = Zygote(dict(env), "bench")
    if not zygote.wait_ready(60):
        raise SystemExit(f"the zygote did not start: {zygote.refused}")
    start_cpu = cpu_of(zygote.pid)
    cpus = []
    for i in range(jobs):
        chain = snakemake_chain(job_argv(workdir, i, jobs), env["PATH"])
        assert chain is not None
        job = zygote.spawn(chain, str(workdir), env, workdir / f"forked-{i}.log")
        code, cpu = reaped_cpu(job.pid)
        assert code == 0, (workdir / f"forked-{i}.log").read_text()[-2000:]
        cpus.append(cpu)
    per_fork = (cpu_of(zygote.pid) - start_cpu) / jobs
    zygote.close()
    return cpus, start_cpu, per_fork


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        (workdir / "Snakefile").write_text(SNAKEFILE)
        fresh = run_fresh(workdir, args.jobs, env)
        for out in (workdir / "out").iterdir():
            out.unlink()
        forked, start, per_fork = run_forked(workdir, args.jobs, env)
    print(f"{args.jobs} trivial jobs one after the other, CPU (user+sys) per job process:")
    print(f"  fresh interpreter (before): mean {statistics.mean(fresh):.3f} s "
          f"(min {min(fresh):.3f}, max {max(fresh):.3f})")
    print(f"  forked by the zygote (after): mean {statistics.mean(forked):.3f} s "
          f"(min {min(forked):.3f}, max {max(forked):.3f}); the zygote: "
          f"{per_fork:.4f} s per fork, {start:.2f} s once at its start")


if __name__ == "__main__":
    main()
