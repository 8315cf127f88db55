"""The GCE path end to end, offline: snakemake --executor expocloud on the fake Compute Engine,
files staged through the emulated bucket, Spot VMs preempted at random. (A SIGKILLed
coordinator: tests/faults/test_kill_coordinator.py.)"""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest
from google.auth.credentials import AnonymousCredentials
from google.cloud import storage

from expo_executor.runs.files import RunFiles

from tests.agent_assignment import RANK, WORKFLOW, hardness_vector
from tests.emulated_gce import PROJECT, emulated_args, emulated_env, fake_compute  # noqa: F401
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import SNAKEMAKE, interruptible, job_records, run_dirs, wait_until



def _objects(endpoint: str, prefix: str) -> list[str]:
    bucket_name, _, path = prefix.removeprefix("gs://").partition("/")
    client = storage.Client(project=PROJECT, credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    return [b.name for b in client.list_blobs(bucket_name, prefix=path)]


def test_agent_assignment_sweep_survives_preemptions(tmp_path: Path, fake_compute,  # noqa: F811
                                                     gcs_emulator) -> None:  # noqa: F811
    workdir = tmp_path / "agent-assignment"
    shutil.copytree(WORKFLOW, workdir, ignore=shutil.ignore_patterns(
        ".snakemake", ".expocloud", "results", "instances"))
    # Without a shared file system Snakemake ships the workflow's git-tracked files to the
    # VMs (its rule: scripts called from shell commands travel only if tracked).
    for git in (["init", "-q"], ["add", "."]):
        subprocess.run(["git", *git], cwd=workdir, check=True, capture_output=True)
    fake_compute.chaos(spot_mean_life_s=6.0, seed=7)
    # the engine profile with --profile, as the docs say: the workflow's profiles/default
    # (hardness, deadline, keep-going, placeholders) is read too
    args = emulated_args(fake_compute, gcs_emulator, None,
                         "--config", "n_tasks=6,10", "n_agents=10,14", "instances=1",
                         flag="--profile")
    prefix = args[args.index("--default-storage-prefix") + 1]
    result = subprocess.run([SNAKEMAKE, *args], cwd=workdir, capture_output=True, text=True,
                            timeout=600, env=emulated_env(gcs_emulator))
    assert result.returncode == 0, result.stderr[-4000:]

    run_dir = run_dirs(workdir)[-1]
    records = [r for r in job_records(run_dir).values() if r["rule"] == "solve"]
    assert len(records) == 12
    assert {r["outcome"] for r in records} <= {"solved", "timeout", "skipped"}
    timed_out = [hardness_vector(r["wildcards"]) for r in records if r["outcome"] == "timeout"]
    for record in records:
        if record["outcome"] == "skipped":
            assert any(all(t <= p for t, p in zip(t_out, hardness_vector(record["wildcards"])))
                       for t_out in timed_out), f"{record['wildcards']} skipped without cause"
    # Preemptions happened, their jobs ran again, and twice-preempted ones ran on-demand.
    vms = RunFiles(run_dir).vms()
    assert any(vm["end"] == "preempted" for vm in vms), "no preemption was injected"
    rerun = [r for r in job_records(run_dir).values() if r["preemptions"] > 0]
    assert rerun, "no job was preempted while running"
    for record in rerun:
        assert record["outcome"] in ("solved", "timeout", "skipped")
        if record["preemptions"] >= 2 and record["worker"]:
            assert record["pool"] == "on_demand", record
    # Nothing left running, every output exactly where it belongs.
    assert wait_until(lambda: not fake_compute.instances(), timeout=30), \
        fake_compute.instances()
    names = _objects(gcs_emulator, prefix)
    expected = {f"results/{v}/{t}/{a}/0.json" for v in RANK for t, a in
                ((6, 10), (6, 14), (10, 10), (10, 14))}
    results = {n.removeprefix("wf/") for n in names
               if n.startswith("wf/results/") and n.endswith(".json")}
    assert results == expected
    assert "wf/results/table.tsv" in names
    assert len(names) == len(set(names))
    # the run deleted its coordination prefix as it ended, its VMs gone first
    assert not [n for n in names if n.startswith("wf/.expocloud/")], names


SLEEPY = """
rule all:
    input: expand("out/{i}.txt", i=range(2))

rule nap:
    output: "out/{i}.txt"
    shell: "sleep 300; echo done > {output}"
"""


def _running_jobs(fake) -> int:  # noqa: ANN001
    """Jobs (sleep 300) running on the fake's VMs, from their workers' recorded sessions."""
    count = 0
    for vm in fake.scratch_root.glob("*/sessions"):
        count += len(vm.read_text().split())
    return count


@pytest.mark.parametrize("phase", ["booting", "running"])
def test_ctrl_c_deletes_every_vm_at_once(tmp_path: Path, fake_compute,  # noqa: F811
                                         gcs_emulator, phase: str) -> None:  # noqa: F811
    """Ctrl-C while the run's VMs boot, or once its jobs run on them: the coordinator deletes
    every VM of the run itself, long before any worker's dead man's switch (grace 300 s)
    could, and the process ends. (The seconds it takes, per phase: bench/ctrl_c.py.)"""
    if phase == "booting":
        fake_compute.boot_delay = 600.0  # no worker comes up before the Ctrl-C
    (tmp_path / "Snakefile").write_text(SLEEPY)
    args = emulated_args(fake_compute, gcs_emulator, None, "--expocloud-heartbeat-grace", "300",
                         "--expocloud-slow-poll-interval", "1")
    proc = subprocess.Popen([SNAKEMAKE, *args], cwd=tmp_path, env=emulated_env(gcs_emulator),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            preexec_fn=interruptible)
    in_phase = (lambda: bool(fake_compute.instances())) if phase == "booting" else \
        (lambda: _running_jobs(fake_compute) >= 2)
    try:
        assert wait_until(in_phase, timeout=120), fake_compute.instances()
        created = set(fake_compute.instances())
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    if phase == "booting":
        assert _running_jobs(fake_compute) == 0  # it was Ctrl-C'd before any job started
    assert not fake_compute.instances(), fake_compute.instances()
    deletes = [r for r in fake_compute.requests if r["method"] == "DELETE"]
    assert all("requestId" in r["query"] for r in deletes)
    assert created <= {r["path"].rstrip("/").rsplit("/", 1)[-1] for r in deletes}, deletes
