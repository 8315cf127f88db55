"""Ctrl-C during a run leaves no process of ours alive: checked in the process table."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path

from expo_executor.runs.files import RunFiles

from tests.helpers import SNAKEMAKE, interruptible, processes_under, run_dirs, wait_until

SNAKEFILE = """
rule all:
    input: expand("out/{n}.txt", n=range(6))

rule work:
    output: "out/{n}.txt"
    shell: "sleep 300 & sleep 300; echo done > {output}"
"""


def _running(workdir: Path) -> int:
    runs = run_dirs(workdir)
    try:
        return json.loads((runs[-1] / "status.json").read_text())["running"] if runs else 0
    except (OSError, ValueError, KeyError):
        return 0


def test_sigint_leaves_no_worker_and_no_job_process(tmp_path: Path) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    proc = subprocess.Popen([SNAKEMAKE, "--executor", "expocloud", "-j", "100",
                             "--expocloud-status-interval", "0.5"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=interruptible)
    try:
        assert wait_until(lambda: _running(tmp_path) >= 2, timeout=60), "jobs never started"
        # the jobs' own processes (both sleeps of each job) are up
        assert wait_until(lambda: sum("sleep 300" in c for _, c in processes_under(tmp_path)) >= 4,
                          timeout=30)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert wait_until(lambda: not processes_under(tmp_path), timeout=5), processes_under(tmp_path)
    vms = RunFiles(run_dirs(tmp_path)[-1]).vms()
    # the default local fleet: one worker holding both jobs (every core of a 2-core machine)
    assert vms and all(vm["end"] == "deleted" for vm in vms)
