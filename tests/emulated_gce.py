"""The emulated GCE path for end-to-end tests: a fake Compute Engine in this process, the
faithful GCS emulator in a child process, and the snakemake arguments that point a run at both
(profiles/gce-emulated, with this test's ports and its own bucket)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from expo_executor.emulator.compute import FakeCompute

from .gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401  (session fixture)

REPO = Path(__file__).parent.parent
PROJECT = "expocloud-emulated"
ZONES = "us-central1-a,us-central1-b"
WORKER = f"expocloud-worker@{PROJECT}.iam.gserviceaccount.com"  # profiles/gce-emulated's


def start_fake_compute(root: Path) -> FakeCompute:
    """The fake Compute Engine the emulated GCE tests and bench/snakemake_on_gce.py run on:
    quick boots and preemption notices, its VMs' disks under ``root/fake-vms``."""
    return FakeCompute(root / "fake-vms", boot_delay=0.3, notice_s=0.5).start()


@pytest.fixture
def fake_compute(tmp_path: Path) -> Iterator[FakeCompute]:
    fake = start_fake_compute(tmp_path)
    try:
        yield fake
    finally:
        fake.stop()


def emulated_env(storage_endpoint: str) -> dict[str, str]:
    env = {**os.environ, "STORAGE_EMULATOR_HOST": storage_endpoint}
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        env.pop(var, None)
    return env


def emulated_args(fake: FakeCompute, storage_endpoint: str, profile: Path | None = None,
                  *extra: str, flag: str = "--workflow-profile") -> list[str]:
    """snakemake arguments for a run on the emulated cloud, in a bucket of its own. With
    ``flag="--profile"`` the workflow's own profiles/default is read too, as the docs advise;
    the default keeps a test's workflow free of any profile but this one."""
    bucket = fresh_bucket(storage_endpoint)
    return [
        flag, str(profile or REPO / "profiles" / "gce-emulated"),
        "--expocloud-gce-endpoint", fake.endpoint,
        "--default-storage-prefix", f"gs://{bucket}/wf",
        *extra,
    ]


def created_bodies(fake: FakeCompute) -> dict[str, dict]:
    """Each VM a run asked for, by name: the instance body the Compute API received (a bulk
    insert's shared properties; an insert's whole body)."""
    bodies = {}
    for request in fake.requests:
        body = request.get("json") or {}
        if request["op"] == "insert":
            bodies[body["name"]] = body
        elif request["op"] == "bulkInsert":
            for name in body.get("perInstanceProperties") or {}:
                bodies[name] = body["instanceProperties"]
    return bodies
