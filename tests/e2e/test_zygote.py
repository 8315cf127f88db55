"""The worker's job zygote (worker/zygote.py, worker/forked.py) in real processes: real
Snakemake jobs forked from it, each in its own session, reaped by the agent with its real
status; a crash, a timeout or a cancel ends that job only, a dead zygote ends no running job,
and neither the agent nor the zygote grows with the jobs it ran."""

from __future__ import annotations

import os
import shlex
import signal
import sys
import threading
from pathlib import Path

import pytest

from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import result_key
from expo_executor.protocol.records import JobSpec, ResultBatch
from expo_executor.worker import command_clock
from expo_executor.worker.agent import Worker
from expo_executor.worker.forked import ForkedJob
from expo_executor.processes.sessions import marked_sessions
from expo_executor.worker.zygote import TEST_ENTRY

from tests.cwl_job import laid_out_job
from tests.helpers import processes_under, run_snakemake, wait_until, write_inbox

KEY = b"z" * 32
SNAKEFILE = """
rule ok:
    output: "ok/{n}.txt"
    shell: "echo done > {output}"

rule crash:
    output: "crash/{n}.txt"
    shell: "kill -9 $PPID"  # the job's own (forked) snakemake process dies

rule slow:
    output: "slow/{n}.txt"
    shell: "sleep 60; echo done > {output}"

rule nap:
    output: "nap/{n}.txt"
    shell: "sleep 2; echo done > {output}"
"""


def _snakemake_job(workdir: Path, rule: str, n: int = 1, deadline: float | None = None,
                   before: str = "") -> dict:
    """The Snakemake front end's shell line for one job of ``rule`` (``before``: a
    precommand, as Snakemake's ``--deploy-sources`` on GCE)."""
    args = ["--snakefile", str(workdir / "Snakefile"), "--target-jobs", f"{rule}:n={n}",
            "--allowed-rules", rule, "--cores", "1", "--force", "--nolock", "--nocolor",
            "--no-hooks", "--ignore-incomplete", "--target-files-omit-workdir-adjustment",
            "--max-jobs-per-timespan", "1000/0s", "--mode", "remote"]
    line = (f"{sys.executable} -m {command_clock.__name__} -m snakemake "
            + " ".join(shlex.quote(a) for a in args))
    return {"argv": ["/bin/sh", "-c", f"{command_clock.ANNOUNCE}; {before}{line}"],
            "cwd": str(workdir), "env": {}, "deadline_s": deadline, "cpus": 1}


class Rig:
    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.bucket = worker.bucket
        self.seq = 0
        self.thread = threading.Thread(target=worker.run, daemon=True)

    def send(self, jobs: dict, cancel: list[str] = ()) -> None:
        self.seq += 1
        write_inbox(self.bucket, self.worker.worker_id, self.seq,
                    {name: JobSpec.from_wire(job) for name, job in jobs.items()},
                    cancel=cancel, key=KEY)

    def result(self, job_key: str) -> dict | None:
        """The job's result, in whichever of the worker's result objects holds it (a worker
        holding several jobs reports them together, named for the first: ResultBatch)."""
        prefix = result_key("", self.worker.worker_id).rsplit("/", 1)[0] + "/"
        for name in self.bucket.list(prefix):
            blob = self.bucket.read(name)
            for result in ResultBatch.decode(blob.data, KEY).results if blob else ():
                if result.key == job_key:
                    return result.to_wire()
        return None

    def outcome(self, job_key: str) -> str | None:
        result = self.result(job_key)
        return result["outcome"] if result else None

    def stop(self) -> None:
        self.worker.request_stop("terminated")
        self.thread.join(timeout=20)


def _worker(tmp_path: Path, slots: int, cls: type[Worker] = Worker) -> Worker:
    return cls(LocalBucket(tmp_path / "bucket"), "w-1", slots, KEY, tmp_path / "vm", poll=0.05,
               grace=60.0, heartbeat=0.5)


@pytest.fixture
def rig(tmp_path: Path):
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    rig = Rig(_worker(tmp_path, slots=4))
    assert rig.worker.zygote.wait_ready(60), "the zygote must start"
    rig.thread.start()
    yield rig
    rig.stop()


def test_a_crash_a_timeout_and_a_cancel_end_only_their_own_job(rig: Rig, tmp_path: Path) -> None:
    zygote = rig.worker.zygote.pid
    rig.send({"ok": _snakemake_job(tmp_path, "ok"), "crash": _snakemake_job(tmp_path, "crash"),
              "slow": _snakemake_job(tmp_path, "slow", deadline=1.0),
              "cancel": _snakemake_job(tmp_path, "slow", n=2)})
    assert wait_until(lambda: "cancel" in rig.worker.running, 30)
    forked = rig.worker.running["cancel"].proc
    assert isinstance(forked, ForkedJob), "a Snakemake job is forked by the zygote"
    assert os.getpgid(forked.pid) == forked.pid, "it leads a process group of its own"
    assert forked.pid in marked_sessions(tmp_path / "vm"), "a powered-off VM finds it"
    assert wait_until(lambda: rig.outcome("slow") is not None, 60)
    rig.send({}, cancel=["cancel"])
    assert wait_until(lambda: rig.outcome("cancel") is not None, 30)
    assert wait_until(lambda: None not in map(rig.outcome, ("ok", "crash")), 30)
    assert rig.outcome("ok") == "solved" and (tmp_path / "ok/1.txt").read_text() == "done\n"
    crash = rig.result("crash")
    assert crash["outcome"] == "failed" and crash["returncode"] == -signal.SIGKILL, crash
    slow = rig.result("slow")
    assert slow["outcome"] == "timeout" and slow["command_s"] >= 1.0, slow
    assert rig.outcome("cancel") == "cancelled"
    # the zygote lives on, and forks the next job
    rig.send({"after": _snakemake_job(tmp_path, "ok", n=3)})
    assert wait_until(lambda: rig.outcome("after") is not None, 30)
    assert rig.outcome("after") == "solved" and (tmp_path / "ok/3.txt").exists()
    assert rig.worker.zygote.pid == zygote and rig.worker.zygote.refused is None


def test_a_dead_zygote_ends_no_running_job_and_jobs_go_on(rig: Rig, tmp_path: Path) -> None:
    first = rig.worker.zygote.pid
    rig.send({"nap": _snakemake_job(tmp_path, "nap")})
    assert wait_until(lambda: "nap" in rig.worker.running, 30)
    assert isinstance(rig.worker.running["nap"].proc, ForkedJob)
    os.kill(first, signal.SIGKILL)
    assert wait_until(lambda: rig.outcome("nap") is not None, 30)
    assert rig.result("nap")["outcome"] == "solved", rig.result("nap")
    assert (tmp_path / "nap/1.txt").read_text() == "done\n"
    rig.send({"next": _snakemake_job(tmp_path, "ok")})  # it waits for the next zygote
    assert wait_until(lambda: rig.outcome("next") is not None, 30)
    assert rig.outcome("next") == "solved"
    assert wait_until(lambda: rig.worker.zygote.pid not in (None, first), 30), \
        "a new zygote is started"


def test_a_precommand_runs_first_and_its_failure_is_the_jobs(rig: Rig, tmp_path: Path) -> None:
    python = f"{sys.executable} -m snakemake"
    rig.send({"pre": _snakemake_job(tmp_path, "nap", before=f"{python} --version && "),
              "bad": _snakemake_job(tmp_path, "ok", before=f"{python} --no-such-flag && ")})
    assert wait_until(lambda: "pre" in rig.worker.running, 30)
    assert isinstance(rig.worker.running["pre"].proc, ForkedJob)
    assert wait_until(lambda: None not in map(rig.outcome, ("pre", "bad")), 30)
    pre, bad = rig.result("pre"), rig.result("bad")
    assert pre["outcome"] == "solved" and (tmp_path / "nap/1.txt").exists(), pre
    log = (tmp_path / "vm" / "jobs" / "pre.log").read_text()
    assert log.splitlines()[0].strip()[:1].isdigit(), "snakemake --version printed first"
    assert (bad["outcome"], bad["returncode"]) == ("failed", 2), bad  # argparse's status
    assert not (tmp_path / "ok/1.txt").exists(), "the job's own snakemake never ran"


def test_a_staged_cwl_job_is_forked_too(rig: Rig, tmp_path: Path) -> None:
    root, spec, _, staging = laid_out_job(tmp_path)
    spec["argv"] = ["/bin/sh", "-c", "sleep 1; " + spec["argv"][2]]  # long enough to be seen
    rig.send({"c1": {"argv": spec["argv"], "cwd": spec["cwd"], "env": spec["env"],
                     "stage": spec["stage"], "deadline_s": None, "cpus": 1}})
    assert wait_until(lambda: "c1" in rig.worker.running, 30)
    assert isinstance(rig.worker.running["c1"].proc, ForkedJob)
    assert wait_until(lambda: rig.outcome("c1") is not None, 30)
    result = rig.result("c1")
    assert (result["outcome"], result["returncode"]) == ("solved", 3), result  # its verdict
    outdir = root / "out1"
    staging.fetch(spec["stage"]["upload"], "w-1", str(outdir))
    assert (outdir / "copy.txt").read_text() == "42\nfrom step 0\n"


PLUGIN_SNAKEFILE = """
rule all:
    input: expand("who/{n}.txt", n=range(4))

rule warm:
    output: "warm.txt"
    shell: "sleep 2; touch {output}"

rule who:  # what the job's own snakemake process is: a fresh interpreter or the zygote's fork
    input: "warm.txt"
    output: "who/{n}.txt"
    shell: "tr '\\\\0' ' ' < /proc/$PPID/cmdline > {output}"
"""


@pytest.mark.slow
def test_snakemake_through_the_plugin_runs_its_jobs_in_forks(tmp_path: Path) -> None:
    """``snakemake --executor expocloud`` end to end on the local engine: every job is the
    zygote's fork, the first too (it waits for the zygote, which starts with the worker,
    rather than start a fresh interpreter), and every job is done as before."""
    (tmp_path / "Snakefile").write_text(PLUGIN_SNAKEFILE)
    result = run_snakemake(tmp_path, "--executor", "expocloud", "-j", "4",
                           "--expocloud-max-workers", "1", "--expocloud-slots-per-worker", "1",
                           "--expocloud-poll-interval", "0.1")
    assert result.returncode == 0, result.stderr[-3000:]
    whos = [(tmp_path / f"who/{n}.txt").read_text() for n in range(4)]
    assert all("expo_executor.worker.zygote" in who for who in whos), whos
    assert not processes_under(tmp_path), "no job, zygote or worker may outlive the run"


class _TrivialJobs(Worker):
    """Every job's command is the zygote's test entry (a fork that exits at once): the agent,
    the zygote, the forks and the reaping are real, Snakemake's run is left out to keep 500
    jobs short."""

    def _chain(self, argv: list[str], env: dict[str, str]) -> list[list[str]] | None:
        return [[TEST_ENTRY, "0"]]


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for {pid}")


@pytest.mark.slow
def test_memory_does_not_grow_with_jobs_run(tmp_path: Path) -> None:
    rig = Rig(_worker(tmp_path, slots=8, cls=_TrivialJobs))
    assert rig.worker.zygote.wait_ready(60)
    zygote = rig.worker.zygote.pid
    rig.thread.start()
    try:
        def run(first: int, last: int) -> None:
            keys = [f"t{i}" for i in range(first, last)]
            rig.send({k: {"argv": ["trivial"], "cwd": str(tmp_path), "env": {},
                          "deadline_s": None, "cpus": 1} for k in keys})
            assert wait_until(lambda: all(rig.outcome(k) for k in keys), 120)
            assert {rig.outcome(k) for k in keys} == {"solved"}

        run(0, 50)
        after_50 = _rss_mb(os.getpid()), _rss_mb(zygote)
        run(50, 500)
        after_500 = _rss_mb(os.getpid()), _rss_mb(zygote)
    finally:
        rig.stop()
    print(f"RSS MB (agent, zygote) after 50 jobs {after_50}, after 500 {after_500}")
    assert rig.worker.zygote.pid is None  # closed with the worker
    assert after_500[0] - after_50[0] < 50, (after_50, after_500)  # the agent
    assert after_500[1] - after_50[1] < 50, (after_50, after_500)  # the zygote
