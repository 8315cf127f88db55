"""Logs that outlive the VM: a failed or timed-out job's whole output and its ``log:`` files end
up in ``.expocloud/runs/<run>/logs/``, Snakemake's error names that directory, and
``expocloud logs`` prints them. Real snakemake on the local engine (the worker code path every
engine runs), and a real worker with a sealed secret."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from expo_executor.protocol import messages
from expo_executor.protocol.bucket import LocalBucket
from expo_executor.protocol.keys import LOGS_PREFIX, result_key
from expo_executor.protocol.records import JobSpec
from expo_executor.worker.agent import Worker
from tests.emulated_gce import emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import (EXPOCLOUD, SNAKEMAKE, run_dirs, run_snakemake, running_worker,
                           wait_until, write_inbox)

KEY = b"s" * 32

# work: writes its log, prints 60 lines (more than the 20-line tail an error shows), and fails
# for x=b; slow: writes its log, then outlives its deadline.
WORK = """
rule work:
    output: "out/{x}.txt"
    log: "logs/{x}.log"
    shell:
        '''
        echo "working on {wildcards.x}" > {log}
        for i in $(seq 1 60); do echo "stdout line $i of {wildcards.x}"; done
        if [ {wildcards.x} = b ]; then echo "boom in {wildcards.x}" >> {log}; exit 3; fi
        echo done > {output}
        '''
"""
SNAKEFILE = """
rule all:
    input: expand("out/{x}.txt", x=["a", "b"]), "out/slow.txt"
""" + WORK + """

rule slow:
    output: "out/slow.txt"
    log: "logs/slow.log"
    resources: deadline="3s"
    shell: "echo 'slow started' > {log}; sleep 120; touch {output}"
"""


def _records(run_dir: Path) -> dict[str, dict]:
    lines = (run_dir / "jobs.jsonl").read_text().splitlines()
    return {"/".join(r["wildcards"].values()) or r["rule"]: r for r in map(json.loads, lines)}


def test_a_failed_and_a_timed_out_jobs_logs_are_kept_named_and_printed(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    result = run_snakemake(tmp_path, "--executor", "expocloud", "-j", "3", "--keep-going")
    assert result.returncode != 0, result.stderr[-3000:]
    run_dir = run_dirs(tmp_path)[-1]
    records = _records(run_dir)
    assert records["a"]["outcome"] == "solved" and records["a"]["logs_dir"] is None
    assert records["b"]["outcome"] == "failed" and records["slow"]["outcome"] == "timeout"

    failed = run_dir / records["b"]["logs_dir"]
    assert failed == run_dir / "logs" / "work.x=b"
    output = (failed / "output.log").read_text()
    assert "stdout line 1 of b\n" in output and "stdout line 60 of b\n" in output  # all of it
    assert (failed / "logs" / "b.log").read_text() == "working on b\nboom in b\n"
    timed_out = run_dir / records["slow"]["logs_dir"]
    assert (timed_out / "logs" / "slow.log").read_text() == "slow started\n"
    assert (timed_out / "output.log").is_file()

    # Snakemake's error for the failed job names the directory (relative to the workflow)
    shown = str(failed.relative_to(tmp_path))
    assert f"saved in {shown}/" in result.stderr, result.stderr[-3000:]
    assert "stdout line 1 of b" not in result.stderr  # the error shows a tail; the file all

    printed = subprocess.run([EXPOCLOUD, "logs", "work:x=b"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert f"==> {shown}/output.log <==" in printed.stdout
    assert "stdout line 1 of b" in printed.stdout and "boom in b" in printed.stdout
    by_rule = subprocess.run([EXPOCLOUD, "logs", "slow", "--list"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert by_rule.stdout.split() == [
        str((timed_out / name).relative_to(tmp_path)) for name in ("output.log", "logs/slow.log")]
    missing = subprocess.run([EXPOCLOUD, "logs", "work:x=a"], cwd=tmp_path,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and missing.stdout == ""
    assert missing.stderr.count("\n") == 1 and "no saved logs for 'work:x=a'" in missing.stderr


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[tuple[Worker, LocalBucket]]:
    with running_worker(tmp_path, KEY) as (agent, bucket):
        yield agent, bucket


def test_a_sealed_jobs_saved_log_has_its_secrets_blanked(
        worker: tuple[Worker, LocalBucket]) -> None:
    """The saved log travels through the bucket like the result: the secrets the runner sealed
    with the job are blanked out of it, as they are out of the result's tail."""
    agent, bucket = worker
    argv = ["/bin/sh", "-c", 'echo "token is $TOKEN"; echo "arg is $1" >&2; exit 3', "x",
            "s3cr3t-arg"]
    job = JobSpec(argv, None, {"TOKEN": "hunter2"}, None, redact=("hunter2", "s3cr3t-arg"))
    write_inbox(bucket, "w1", 1, {"s1": job}, key=KEY)  # sealed for w1, as the coordinator does
    assert wait_until(lambda: bucket.read(result_key("s1", "w1")) is not None, timeout=20)
    result = messages.decode("result", bucket.read(result_key("s1", "w1")).data, KEY)
    assert result["outcome"] == "failed"
    [saved] = result["logs"]
    assert saved["path"] is None and saved["key"].startswith(LOGS_PREFIX)
    data = bucket.read(saved["key"]).data
    assert b"token is ********" in data and b"arg is ********" in data
    assert b"hunter2" not in data and b"s3cr3t-arg" not in data
    assert agent.specs == {}  # its opened spec (and secrets) forgotten once reported


FAILING = """
rule all:
    input: expand("out/{x}.txt", x=["a", "b"])
""" + WORK


def test_on_emulated_gce_the_logs_outlive_the_vm(tmp_path: Path, fake_compute,  # noqa: F811
                                                 gcs_emulator) -> None:  # noqa: F811
    """The job ran on a (fake) VM with no shared file system: its log: file lived in the job's
    directory on that VM's disk. After the run every VM is deleted and their disks are wiped,
    and the logs are still there to read."""
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(FAILING)
    args = emulated_args(fake_compute, gcs_emulator, None, "--keep-going",
                         "--expocloud-poll-interval", "0.3")
    result = subprocess.run([SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True,
                            timeout=600, env=emulated_env(gcs_emulator))
    assert result.returncode != 0, result.stderr[-3000:]
    assert wait_until(lambda: not fake_compute.instances(), timeout=60), \
        fake_compute.instances()
    shutil.rmtree(fake_compute.scratch_root)  # the VMs' disks go with them

    run_dir = run_dirs(workdir)[-1]
    failed = run_dir / _records(run_dir)["b"]["logs_dir"]
    assert "stdout line 1 of b\n" in (failed / "output.log").read_text()
    assert (failed / "logs" / "b.log").read_text() == "working on b\nboom in b\n"
    assert f"saved in {failed.relative_to(workdir)}/" in result.stderr, result.stderr[-3000:]
    printed = subprocess.run([EXPOCLOUD, "logs", "work:x=b"], cwd=workdir,
                             capture_output=True, text=True, timeout=60)
    assert printed.returncode == 0 and "boom in b" in printed.stdout, printed.stderr


FAILING_TOOL = """cwlVersion: v1.2
class: CommandLineTool
inputs:
  word: {type: string, inputBinding: {position: 1}}
baseCommand: [sh, -c, 'for i in $(seq 1 40); do echo "cwl line $i of $0"; done; exit 2']
outputs: []
"""


def test_a_failed_cwl_jobs_output_is_saved_and_named(tmp_path: Path) -> None:
    """The CWL front end shares the worker's code path: the failed command's whole output is
    in the run directory, and cwltool's warning names it."""
    (tmp_path / "tool.cwl").write_text(FAILING_TOOL)
    result = subprocess.run([str(Path(SNAKEMAKE).parent / "expocloud-cwl"), "--outdir",
                             str(tmp_path / "out"), "tool.cwl", "--word", "quux"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    [run_dir] = run_dirs(tmp_path)
    [record] = [json.loads(line) for line in (run_dir / "jobs.jsonl").read_text().splitlines()]
    assert record["outcome"] == "failed" and record["logs_dir"], record
    output = (run_dir / record["logs_dir"] / "output.log").read_text()
    assert "cwl line 1 of quux" in output and "cwl line 40 of quux" in output
    assert f"its whole log: {run_dir / record['logs_dir']}/" in result.stderr, \
        result.stderr[-3000:]
