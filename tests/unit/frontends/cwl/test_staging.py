"""Staged jobs (CWL) in process: inputs uploaded once per content; unsafe paths, inputs outside
the job's root and a forged output manifest refused; and what places a CWL job (its preemptible
hints, the workers' memory). Staged commands run for real: tests/e2e/test_staging_commands.py."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from expo_executor.coordinator.settings import ExecutorSettings, worker_memory_mb
from expo_executor.cost.machines import machine_memory_mb
from expo_executor.frontends.cwl.executor import _mount_sources
from expo_executor.frontends.cwl.hints import ARV_PREEMPTIBLE, PREEMPTIBLE, spot_attempts
from expo_executor.worker.staged_checks import safe_relative

from tests.cwl_job import laid_out_job


def test_inputs_are_uploaded_once_per_content(tmp_path: Path) -> None:
    root, spec, bucket, staging = laid_out_job(tmp_path)
    again = staging.manifest("c2", [(str(root / "stg1" / "data.txt"), True)],
                             str(root / "out1"), str(root / "tmp1"))
    assert again["inputs"][0][1] == spec["stage"]["inputs"][1][1]
    assert len([k for k in bucket.list("stage/in/")]) == 2  # data.txt and step0.txt


@pytest.mark.parametrize("path", ["", "/etc/passwd", "../x", "a/../../b"])
def test_unsafe_paths_are_refused(path: str) -> None:
    with pytest.raises(ValueError):
        safe_relative(path)


def test_a_forged_output_manifest_cannot_write_outside_the_outdir(tmp_path: Path) -> None:
    root, spec, bucket, staging = laid_out_job(tmp_path)
    prefix = spec["stage"]["upload"] + "w-1/"
    bucket.write(prefix + "manifest.json", json.dumps(
        {"files": {"../escape.txt": 420}, "dirs": [], "links": {}}).encode())
    with pytest.raises(ValueError):
        staging.fetch(spec["stage"]["upload"], "w-1", str(root / "out1"))
    assert not (root / "escape.txt").exists()


def test_inputs_outside_the_root_are_refused(tmp_path: Path) -> None:
    root, _, _, staging = laid_out_job(tmp_path)
    with pytest.raises(ValueError, match="outside the job root"):
        staging.manifest("c3", [(str(tmp_path / "data.txt"), True)], str(root / "out1"),
                         str(root / "tmp1"))


@pytest.mark.parametrize("hints, attempts", [
    ([], None),
    ([{"class": PREEMPTIBLE, "spotAttempts": 0}], 0),
    ([{"class": PREEMPTIBLE, "spotAttempts": 3}], 3),
    ([{"class": ARV_PREEMPTIBLE, "usePreemptible": False}], 0),
    ([{"class": ARV_PREEMPTIBLE, "usePreemptible": True}], None),
    # ours wins over Arvados', and the last (the tool's own) over a step's
    ([{"class": ARV_PREEMPTIBLE, "usePreemptible": False},
      {"class": PREEMPTIBLE, "spotAttempts": 1}], 1),
    ([{"class": PREEMPTIBLE, "spotAttempts": 1}, {"class": PREEMPTIBLE, "spotAttempts": 4}], 4),
])
def test_preemptible_hints(hints: list[dict], attempts: int | None) -> None:
    assert spot_attempts(hints) == attempts


@pytest.mark.parametrize("machine_type, mib", [
    ("e2-standard-2", 8192), ("n2-highmem-4", 32768), ("n2d-highcpu-8", 8192),
    ("n1-standard-1", 3840), ("e2-medium", 4096), ("n2-custom-6-20480", 20480),
    ("a3-megagpu-8g", None),
])
def test_machine_memory_from_the_type_name(machine_type: str, mib: int | None) -> None:
    assert machine_memory_mb(machine_type) == mib


def test_worker_memory_is_the_smaller_pool_s_and_unknown_types_are_not_tracked() -> None:
    gce = ExecutorSettings(engine="gce", gce_machine_type="n2-highmem-2",
                           gce_on_demand_machine_type="n2-standard-2")
    assert worker_memory_mb(gce, 4) == 8192
    gce.gce_on_demand_machine_type = "a3-megagpu-8g"
    assert worker_memory_mb(gce, 4) == 0
    local = ExecutorSettings(engine="local")
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    assert worker_memory_mb(local, 2) == total // 2


def test_a_container_commands_mounts_are_what_it_reads() -> None:
    argv = ["podman", "run", "-i", "--mount=type=bind,source=/r/job/out,target=/var/spool/cwl",
            "--mount=type=bind,source=/r/inputs-1/x/in.txt,target=/var/lib/cwl/stg1/in.txt,"
            "readonly", "--workdir=/var/spool/cwl", "img", "cat", "source=/not/a/mount"]
    assert _mount_sources(argv) == ["/r/job/out", "/r/inputs-1/x/in.txt"]



def test_a_staged_job_counts_the_bytes_it_reads_from_and_writes_to_the_bucket(
        tmp_path: Path) -> None:
    """What a staged job moves (its inputs fetched, its outputs and their manifest uploaded):
    staged_job.run stamps it for its worker, which reports it (the egress of a VM in another
    region than the bucket's)."""
    from expo_executor.worker.staged_job import Rebase, materialise, upload_outputs

    _, spec, bucket, _ = laid_out_job(tmp_path)
    base = tmp_path / "worker" / "root"
    assert materialise(bucket, spec["stage"], base) == len("42\n") + len("from step 0\n")
    outdir = Path(Rebase(spec["stage"]["root"], base)(spec["stage"]["outdir"]))
    (outdir / "result.txt").write_text("12345")
    prefix = spec["stage"]["upload"] + "w-1/"
    moved = upload_outputs(bucket, outdir, prefix, Rebase(spec["stage"]["root"], base))
    uploaded = list(bucket.list(prefix))
    assert len(uploaded) == 2  # result.txt and the manifest
    assert moved == sum(len(bucket.read(key, limit=None).data) for key in uploaded)
