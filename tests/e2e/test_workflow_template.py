"""Jobs forked from a loaded workflow (worker/workflow_template.py, worker/loaded_workflow.py),
in real processes: a real zygote, its template, and Snakemake jobs whose outputs say what they
saw. The Snakefile counts its own loads in ``loads.txt``: the first job's load is the
template's, a job forked from the template loads nothing, and still runs with its own wildcards
and config."""

from __future__ import annotations

import os
import shlex
import signal
import sys
from pathlib import Path

import pytest

from expo_executor.worker import command_clock
from expo_executor.worker.forked import ForkedJob, Zygote, snakemake_chain
from expo_executor.worker.workflow_template import LOADED_ENV

from tests.helpers import wait_until

SNAKEFILE = """
with open("loads.txt", "a") as loads:
    loads.write("{version}\\n")

rule point:
    output: "out/{{n}}.txt"
    params: x=config.get("xval", "none")
    shell: "echo {version} {{wildcards.n}} {{params.x}} > {{output}}"
"""


def _write(workdir: Path, version: str, extra: str = "") -> None:
    (workdir / "Snakefile").write_text(SNAKEFILE.format(version=version) + extra)


def _argv(workdir: Path, n: int, config: str = "xval=1") -> list[str]:
    args = ["--snakefile", str(workdir / "Snakefile"), "--target-jobs", f"point:n={n}",
            "--allowed-rules", "point", "--cores", "1", "--force", "--nolock", "--nocolor",
            "--no-hooks", "--ignore-incomplete", "--config", config,
            "--max-jobs-per-timespan", "1000/0s", "--attempt", str(n), "--mode", "remote"]
    line = (f"{sys.executable} -m {command_clock.__name__} -m snakemake "
            + " ".join(shlex.quote(a) for a in args))
    return ["/bin/sh", "-c", f"{command_clock.ANNOUNCE}; {line}"]


class Jobs:
    """Jobs run one at a time through a real zygote, as the agent runs them."""

    def __init__(self, workdir: Path, env: dict[str, str]) -> None:
        self.workdir = workdir
        self.env = env
        self.zygote = Zygote(dict(env), "test")
        assert self.zygote.wait_ready(60), "the zygote must start"

    def spawn(self, n: int, config: str = "xval=1") -> ForkedJob:
        env = {**self.env, command_clock.STAMPS_ENV: str(self.workdir / f"{n}.stamps")}
        chain = snakemake_chain(_argv(self.workdir, n, config), env["PATH"])
        job = self.zygote.spawn(chain, str(self.workdir), env, self.workdir / f"job{n}.log")
        assert job is not None, "the zygote forks it"
        return job

    def run(self, n: int, config: str = "xval=1") -> str:
        job = self.spawn(n, config)
        assert job.wait() == 0, (self.workdir / f"job{n}.log").read_text()[-3000:]
        return (self.workdir / f"out/{n}.txt").read_text()

    def loads(self) -> list[str]:
        return (self.workdir / "loads.txt").read_text().split()

    def until_adopted(self, n: int, version: str) -> int:
        """Run jobs from ``n`` on until one loads nothing: the template was ready for it (it
        says so to the zygote just after its load, so a job or two may still load their own);
        the next job's number."""
        for n in range(n, n + 10):
            before = len(self.loads())
            assert self.run(n) == f"{version} {n} 1\n"
            if len(self.loads()) == before:
                return n + 1
        raise AssertionError(f"no job was forked from the template: {self.loads()}")

    def close(self) -> None:
        self.zygote.close()


@pytest.fixture
def jobs(tmp_path: Path):
    _write(tmp_path, "v1")
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    env.pop(LOADED_ENV, None)
    rig = Jobs(tmp_path, env)
    yield rig
    rig.close()
    assert not rig.zygote.helpers, "every template is reaped"


def test_the_first_job_loads_the_workflow_once_and_the_template_never(jobs: Jobs) -> None:
    """The Snakefile's top-level code runs once for the first job, in that job's process before
    it prepares its outputs, as the job's own snakemake would run it; the template, forked
    from that job, never runs it again. A template that loaded beside its first job ran it a
    second time at a moment of its own, now and then after the job had removed its old
    outputs (Snakemake's test_protected_symlink_output then failed)."""
    assert jobs.run(1) == "v1 1 1\n" and jobs.loads() == ["v1"]
    n = jobs.until_adopted(2, "v1")
    assert len(jobs.loads()) == n - 2, "one load per job that adopted none, and no other"
    assert jobs.zygote.helpers, "the template is the agent's child"
    loads = jobs.loads()
    for n in range(n, n + 3):
        assert jobs.run(n) == f"v1 {n} 1\n", "each job its own wildcards"
    assert jobs.loads() == loads, "jobs forked from the template load nothing"


def test_a_changed_snakefile_is_loaded_afresh(jobs: Jobs) -> None:
    jobs.run(1)
    n = jobs.until_adopted(2, "v1")
    _write(jobs.workdir, "v2")  # a new source version
    v1 = len(jobs.loads())
    assert jobs.run(n) == f"v2 {n} 1\n", "the stale template forks nothing"
    assert len(jobs.loads()) == v1 + 1, "that job's load is the new template's"
    n = jobs.until_adopted(n + 1, "v2")
    loads = jobs.loads()
    assert jobs.run(n) == f"v2 {n} 1\n" and jobs.loads() == loads
    assert set(loads[:v1]) == {"v1"} and set(loads[v1:]) == {"v2"}


def test_a_first_job_killed_while_it_loads_leaves_the_next_job_to_load_it(
        jobs: Jobs, capfd: pytest.CaptureFixture) -> None:
    """A first job ended by its timeout or a cancel before the template was born says nothing
    about the workflow: the next job is a first job in its place, and templates go on."""
    _write(jobs.workdir, "v1", "import os, time\n"
           "if os.path.exists('slow'):\n    time.sleep(60)\n")
    (jobs.workdir / "slow").touch()
    first = jobs.spawn(1)
    assert wait_until(lambda: (jobs.workdir / "loads.txt").exists(), 60), "it loads"
    os.killpg(first.pid, signal.SIGKILL)  # the job's session, as the agent ends a job
    first.wait()
    (jobs.workdir / "slow").unlink()
    assert jobs.run(2) == "v1 2 1\n"
    n = jobs.until_adopted(3, "v1")
    assert len(jobs.loads()) == n - 2, "no load beside the jobs' own"
    assert "not using a loaded workflow" not in capfd.readouterr().err


def test_a_job_with_other_arguments_loads_the_workflow_itself(jobs: Jobs) -> None:
    jobs.run(1)
    n = jobs.until_adopted(2, "v1")
    loads = len(jobs.loads())
    assert jobs.run(n, config="xval=7") == f"v1 {n} 7\n", "its own config"
    log = (jobs.workdir / f"job{n}.log").read_text()
    assert log.count("differ from the loaded workflow's (--config)") == 1, log
    assert len(jobs.loads()) == loads + 1
    assert jobs.run(n + 1) == f"v1 {n + 1} 1\n"
    assert len(jobs.loads()) == loads + 1, "the template goes on for jobs that match it"


def test_a_workflow_whose_load_starts_a_thread_is_not_forked(tmp_path: Path,
                                                             capfd: pytest.CaptureFixture) -> None:
    _write(tmp_path, "t", "import threading, time\n"
           "threading.Thread(target=time.sleep, args=(600,), daemon=True).start()\n")
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    rig = Jobs(tmp_path, env)
    try:
        rig.run(1)
        notes = ""
        for n in range(2, 12):  # the first job's word comes as its load ends: a job or two
            assert rig.run(n) == f"t {n} 1\n"
            notes += capfd.readouterr().err
            if "not using a loaded workflow" in notes:
                break
        assert notes.count("not using a loaded workflow") == 1, notes
        loads = len(rig.loads())
        assert rig.run(20) == "t 20 1\n"
        assert len(rig.loads()) == loads + 1, "every job loads it itself"
    finally:
        rig.close()
    assert not rig.zygote.helpers


def test_templates_are_off_when_the_worker_says_so(tmp_path: Path) -> None:
    _write(tmp_path, "v1")
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}",
           LOADED_ENV: "0"}
    rig = Jobs(tmp_path, env)
    try:
        for n in (1, 2, 3):
            rig.run(n)
        assert rig.loads() == ["v1"] * 3 and not rig.zygote.helpers
    finally:
        rig.close()
