"""Machines per rule on the emulated GCE path: a 1-thread rule, a 4-thread rule, a GPU rule and
a big-disk rule get VMs of four shapes, each job on a VM of its own shape, each VM deleted when
its work ends; a group job beyond the run's workers runs on one machine chosen to hold the
whole group; a job no machine can hold (with auto, or naming no machine) is refused before
any VM. Real snakemake, the fake
Compute API (which refuses GPU bodies the real one refuses) and the GCS emulator."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from expo_executor.emulator.compute import FakeCompute
from expo_executor.runs.files import RunFiles

from tests.emulated_gce import (created_bodies, emulated_args, emulated_env,  # noqa: F401
                                fake_compute)
from tests.gcs_emulator import gcs_emulator  # noqa: F401
from tests.helpers import run_dirs, run_snakemake

pytestmark = pytest.mark.slow

# the 4-thread rule's machine comes from the command line's set-resources (a profile's words),
# the others' from the Snakefile
SNAKEFILE = """
rule all:
    input: "out/one.txt", "out/four.txt", "out/gpu.txt", "out/disk.txt"

rule one:
    output: "out/one.txt"
    shell: "echo {threads} > {output}"

rule four:
    output: "out/four.txt"
    threads: 4
    shell: "echo {threads} > {output}"

rule gpu:
    output: "out/gpu.txt"
    resources: gpu_type="nvidia-tesla-t4", gpu=1
    shell: "echo {resources.gpu} > {output}"

rule disk:
    output: "out/disk.txt"
    resources: disk_mb=200000
    shell: "echo {resources.disk_mb} > {output}"
"""

GPU_IMAGE = "projects/expocloud-emulated/global/images/gpu-worker"
FAST = ("--expocloud-gce-gpu-image", GPU_IMAGE, "--expocloud-poll-interval", "0.2", "--expocloud-slow-poll-interval", "0.5",
        "--expocloud-idle-timeout", "1", "--expocloud-max-workers", "4")


def _shape(body: dict) -> tuple[str, tuple, int, str | None]:
    """(machine type, accelerators as (type, count), boot disk GB, onHostMaintenance)."""
    accelerators = tuple((a["acceleratorType"].rsplit("/", 1)[-1], a["acceleratorCount"])
                         for a in body.get("guestAccelerators") or [])
    disk = int(body["disks"][0]["initializeParams"]["diskSizeGb"])
    return (body["machineType"].rsplit("/", 1)[-1], accelerators, disk,
            (body.get("scheduling") or {}).get("onHostMaintenance"))


def _git_workdir(tmp_path: Path, snakefile: str) -> Path:
    workdir = tmp_path / "wf"
    workdir.mkdir()
    (workdir / "Snakefile").write_text(snakefile)
    for git in (["init", "-q"], ["add", "."]):  # sources travel to the VMs by git
        subprocess.run(["git", *git], cwd=workdir, check=True, capture_output=True)
    return workdir


def test_four_rules_get_four_shapes_and_each_job_a_fitting_vm(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str) -> None:  # noqa: F811
    workdir = _git_workdir(tmp_path, SNAKEFILE)
    args = emulated_args(fake_compute, gcs_emulator, None, *FAST,
                         "--set-resources", "four:machine_type=n2-standard-4")
    proc = run_snakemake(workdir, *args, env=emulated_env(gcs_emulator), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]

    created = created_bodies(fake_compute)
    shapes = {name: _shape(body) for name, body in created.items()}
    run_dir, = run_dirs(workdir)
    jobs = {r["rule"]: r for r in RunFiles(run_dir).jobs()}
    ran_on = {rule: shapes[jobs[rule]["worker"]] for rule in ("one", "four", "gpu", "disk")}
    assert ran_on["one"][:2] == ("e2-standard-2", ()) and ran_on["one"][2] < 200
    assert ran_on["four"][:2] == ("n2-standard-4", ())
    machine, accelerators, disk, maintenance = ran_on["gpu"]
    assert machine.startswith("n1-standard-") and accelerators == (("nvidia-tesla-t4", 1),)
    assert maintenance == "TERMINATE" and disk >= 50
    assert ran_on["disk"][:2] == ("e2-standard-2", ()) and ran_on["disk"][2] >= 200000 // 1024
    assert len({shape[:3] for shape in ran_on.values()}) == 4
    # GPU VMs boot the GPU image; the others the run's own
    images = {name: body["disks"][0]["initializeParams"]["sourceImage"]
              for name, body in created.items()}
    assert images.pop(jobs["gpu"]["worker"]) == GPU_IMAGE
    assert GPU_IMAGE not in images.values()
    # every VM asked for was deleted by the run, and none is left
    deleted = {r["path"].rsplit("/", 1)[-1] for r in fake_compute.requests
               if r["method"] == "DELETE"}
    assert set(created) <= deleted and not fake_compute.instances()
    # Google's discovery document found nothing wrong in any request of the run
    assert [r["problems"] for r in fake_compute.requests if r["problems"]] == []
    # the profile's --expocloud-max-on-demand 1 bounds every shape's on-demand VMs together
    assert sum(not vm["spot"] for vm in fake_compute.ledger()) <= 1


@pytest.mark.parametrize("named", [("--set-resources", "four:machine_type=auto"), ()],
                         ids=["auto", "no machine named"])
def test_a_job_no_machine_holds_is_refused_before_any_vm(
        named: tuple[str, ...], tmp_path: Path, fake_compute: FakeCompute,  # noqa: F811
        gcs_emulator: str) -> None:  # noqa: F811
    workdir = _git_workdir(tmp_path, SNAKEFILE.replace("threads: 4", "threads: 1000"))
    args = emulated_args(fake_compute, gcs_emulator, None, *FAST, *named)
    proc = run_snakemake(workdir, *args, env=emulated_env(gcs_emulator), timeout=300)
    assert proc.returncode != 0
    lines = [line for line in (proc.stdout + proc.stderr).splitlines()
             if "rule 'four'" in line and "fix:" in line]
    assert len(lines) == 1, proc.stderr[-3000:]
    assert not [r for r in fake_compute.requests if r["op"] in ("insert", "bulkInsert")]
    assert not fake_compute.instances()


# two independent jobs of one group, joined into one group job (--group-components g=2), run at
# once: 2 slots, one more than a default GCE worker's; each echoes its threads
GROUP_SNAKEFILE = """
rule all:
    input: "out/x.txt", "out/y.txt"

rule x:
    output: "out/x.txt"
    group: "g"
    shell: "echo {threads} > {output}"

rule y:
    output: "out/y.txt"
    group: "g"
    shell: "echo {threads} > {output}"
"""


def test_a_group_beyond_the_runs_workers_runs_on_one_machine_that_holds_it(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str) -> None:  # noqa: F811
    workdir = _git_workdir(tmp_path, GROUP_SNAKEFILE)
    args = emulated_args(fake_compute, gcs_emulator, None, *FAST, "--group-components", "g=2")
    proc = run_snakemake(workdir, *args, env=emulated_env(gcs_emulator), timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    chosen = [line for line in proc.stderr.splitlines() if "group g needs 2 thread(s)" in line]
    assert len(chosen) == 1, proc.stderr[-3000:]  # chosen and said once
    run_dir, = run_dirs(workdir)
    jobs = list(RunFiles(run_dir).jobs())
    assert [job["rule"] for job in jobs] == ["group g"]  # one job: the whole group
    body = created_bodies(fake_compute)[jobs[0]["worker"]]
    machine, accelerators, _disk, _maintenance = _shape(body)
    assert machine != "e2-standard-2" and f"its jobs run on {machine} " in chosen[0]
    assert accelerators == () and not fake_compute.instances()
