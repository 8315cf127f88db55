"""``expocloud doctor`` against the fakes: the real command line and the real HTTP clients, the
fake Compute (which also serves Service Usage, Resource Manager, IAM and tokeninfo) and the GCS
emulator. A good setup is all green; each broken one (one thing broken through the fakes'
control API or the real IAM API) fails with one line naming the fix; a GCE run with a broken
setup stops before any VM. The checks' pure parts: tests/unit/engines/gce/test_doctor.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from expo_executor import cli
from expo_executor.emulator.catalogue import default_bucket_policy
from expo_executor.emulator.compute import FakeCompute

from tests.emulated_gce import (PROJECT, REPO, WORKER, emulated_args, emulated_env,  # noqa: F401
                                fake_compute)
from tests.gcs_emulator import fresh_bucket, gcs_emulator  # noqa: F401
from tests.helpers import SNAKEMAKE

EXPOCLOUD = str(Path(sys.executable).parent / "expocloud")
PROFILE = REPO / "profiles" / "gce-emulated"
REGION = "us-central1"
ZONES = ("us-central1-a", "us-central1-b")
GPU_IMAGE = "projects/expocloud-emulated/global/images/gpu-worker"
GPU_RULE = "set-resources:\n  train:\n    gpu_type: nvidia-tesla-t4\n    gpu: 1\n"
HOST = f"{sys.version_info.major}.{sys.version_info.minor}"
# a public image family whose Python is not this machine's
OTHER_IMAGE = next(f"projects/{project}/global/images/family/{family}"
                   for project, family, version in (
                       ("ubuntu-os-cloud", "ubuntu-2204-lts", "3.10"),
                       ("debian-cloud", "debian-13", "3.13")) if version != HOST)
HOST_IMAGE = {"3.11": "projects/debian-cloud/global/images/family/debian-12",
              "3.12": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2404-lts",
              "3.10": "projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts",
              "3.13": "projects/debian-cloud/global/images/family/debian-13"}.get(HOST, "")
PIP = ("--expocloud-gce-worker-software", "pip", "--expocloud-gce-image", HOST_IMAGE)


@dataclass
class Setup:
    """The fakes of one test and its bucket."""

    fake: FakeCompute
    storage: str
    bucket: str

    def bucket_policy(self, bindings: list[dict]) -> None:
        """Replace the bucket's IAM policy through the real API (setIamPolicy)."""
        answer = requests.put(f"{self.storage}/storage/v1/b/{self.bucket}/iam",
                              json={"bindings": bindings}, timeout=10)
        answer.raise_for_status()


@pytest.fixture
def setup(fake_compute: FakeCompute, gcs_emulator: str,  # noqa: F811
          monkeypatch: pytest.MonkeyPatch) -> Setup:
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", gcs_emulator)
    return Setup(fake_compute, gcs_emulator, fresh_bucket(gcs_emulator))


def doctor(setup: Setup, capsys: pytest.CaptureFixture, *extra: str,
           profile: Path = PROFILE) -> tuple[int, list[str]]:
    """``expocloud doctor`` in this process: (exit code, output lines)."""
    code = cli.main(["doctor", "--profile", str(profile), "--expocloud-gce-endpoint",
                     setup.fake.endpoint, "--default-storage-prefix", f"gs://{setup.bucket}/wf",
                     *extra])
    out = capsys.readouterr()
    return code, (out.out + out.err).splitlines()


def gpu_profile(tmp_path: Path) -> Path:
    """profiles/gce-emulated with a rule that asks for a T4 (and the GPU image it needs)."""
    text = (PROFILE / "config.yaml").read_text()
    (tmp_path / "gpu").mkdir()
    (tmp_path / "gpu" / "config.yaml").write_text(
        f"{text}\n{GPU_RULE}expocloud-gce-gpu-image: {GPU_IMAGE}\n")
    return tmp_path / "gpu"


def test_a_good_setup_is_all_green_in_one_summary(setup: Setup, capsys) -> None:
    code, lines = doctor(setup, capsys)
    assert code == 0, lines
    assert len(lines) == 1 and lines[0].startswith(f"expocloud doctor: project {PROJECT} is "
                                                   "ready: 12 checks passed"), lines
    assert f"workers as {WORKER}" in lines[0]
    code, lines = doctor(setup, capsys, "-v")
    assert code == 0 and len(lines) == 13 and all(line.startswith("ok ") for line in lines[:-1])
    # Google's discovery documents found nothing wrong in any request the checks made
    requests_made = setup.fake.requests
    assert [r["problems"] for r in requests_made if r["problems"]] == []
    assert {"serviceusage.services.get", "cloudresourcemanager.projects.testIamPermissions",
            "iam.projects.serviceAccounts.testIamPermissions", "machineTypes.get",
            "regions.get", "oauth2.tokeninfo"} <= {r["op"] for r in requests_made}
    assert not [r for r in requests_made if r["op"] in ("insert", "bulkInsert")]


@dataclass(frozen=True)
class Broken:
    """One thing broken: how, the check that must fail and what its line must say."""

    name: str
    check: str
    says: str
    fix: str
    breaks: Callable[[Setup], None] = lambda _setup: None
    args: tuple[str, ...] = ()
    gpu: bool = False


def _withhold(*names: str) -> Callable[[Setup], None]:
    """Every zone of the profile stops offering ``names``."""
    def breaks(setup: Setup) -> None:
        for zone in ZONES:
            setup.fake.withhold(zone, *names)
    return breaks


BROKEN = [
    Broken("Compute API disabled", "APIs", "compute.googleapis.com not enabled",
           "gcloud services enable compute.googleapis.com --project expocloud-emulated",
           lambda s: s.fake.project.disable("compute.googleapis.com")),
    Broken("Storage API disabled", "APIs", "storage.googleapis.com not enabled",
           "gcloud services enable storage.googleapis.com",
           lambda s: s.fake.project.disable("storage.googleapis.com")),
    Broken("coordinator lacks compute.instances.create", "permissions",
           "lacks compute.instances.create on project",
           "--member=user:you@example.com --role=roles/compute.instanceAdmin.v1",
           lambda s: s.fake.project.deny("compute.instances.create")),
    Broken("no actAs on the worker account", "worker account",
           f"may not act as {WORKER}", "--role=roles/iam.serviceAccountUser",
           lambda s: s.fake.project.deny_act_as(WORKER)),
    Broken("worker account missing", "worker account", f"{WORKER} does not exist",
           "gcloud iam service-accounts create expocloud-worker",
           lambda s: s.fake.project.remove_service_account(WORKER)),
    Broken("bucket 403 for the worker", "worker's bucket access",
           f"{WORKER} lacks storage.objects.get, storage.objects.list, storage.objects.create",
           f"--member=serviceAccount:{WORKER} --role=projects/expocloud-emulated/roles/"
           "expocloudStorage",
           lambda s: s.bucket_policy(default_bucket_policy(PROJECT))),
    Broken("the coordinator may not write the bucket", "bucket",
           "you@example.com lacks storage.objects.get",
           "--member=user:you@example.com --role=projects/expocloud-emulated/roles/"
           "expocloudStorage",
           lambda s: s.bucket_policy([{"role": "projects/expocloud-emulated/roles/"
                                               "expocloudStorage",
                                       "members": [f"serviceAccount:{WORKER}"]}])),
    Broken("machine type in no zone", "machine types",
           "e2-standard-2 offered in none of us-central1-a, us-central1-b",
           "--expocloud-gce-zones with zones that offer it", _withhold("e2-standard-2")),
    Broken("accelerator in no zone", "machine types",
           "1 x nvidia-tesla-t4 offered in none", "--expocloud-gce-zones",
           _withhold("nvidia-tesla-t4"), gpu=True),
    Broken("CPU quota short", "quotas", "CPUS: up to 6 (2 Spot x e2-standard-2, 2 vCPUs + "
           "1 on-demand x e2-standard-2, 2 vCPUs), but 4 - 0 in use leaves 4",
           "lower --expocloud-max-workers or --expocloud-max-on-demand, or ask for more",
           lambda s: s.fake.catalogue.set_quota(REGION, "CPUS", limit=4)),
    Broken("Spot CPU quota short", "quotas", "PREEMPTIBLE_CPUS: up to 4 (2 Spot x "
           "e2-standard-2, 2 vCPUs), but 2 - 0 in use leaves 2", "quotas?project=",
           lambda s: s.fake.catalogue.set_quota(REGION, "PREEMPTIBLE_CPUS", limit=2)),
    Broken("GPU quota short", "quotas", "NVIDIA_T4_GPUS: up to 3 (2 Spot x 1 x "
           "nvidia-tesla-t4 + 1 on-demand x 1 x nvidia-tesla-t4), but 2 - 0 in use leaves 2",
           "NVIDIA_T4_GPUS in us-central1",
           lambda s: s.fake.catalogue.set_quota(REGION, "NVIDIA_T4_GPUS", limit=2), gpu=True),
    Broken("Spot GPU quota short", "quotas", "PREEMPTIBLE_NVIDIA_T4_GPUS: up to 2", "ask for more",
           lambda s: s.fake.catalogue.set_quota(REGION, "PREEMPTIBLE_NVIDIA_T4_GPUS", limit=1,
                                                usage=0), gpu=True),
    Broken("in-use addresses short", "quotas", "IN_USE_ADDRESSES: up to 3", "ask for more",
           lambda s: s.fake.catalogue.set_quota(REGION, "IN_USE_ADDRESSES", limit=8, usage=6)),
    Broken("Python mismatch", "worker Python", "has Python", "an image with Python "
           f"{HOST} (--expocloud-gce-image)",
           args=("--expocloud-gce-worker-software", "pip", "--expocloud-gce-image",
                 OTHER_IMAGE)),
    Broken("no NAT with internal IPs", "network", "no Cloud NAT in us-central1 serves "
           "subnetwork default of network default",
           "gcloud compute routers nats create expocloud-nat",
           args=("--expocloud-gce-internal-ip-only", *PIP)),
]


@pytest.mark.parametrize("broken", BROKEN, ids=[b.name for b in BROKEN])
def test_each_broken_setup_fails_in_one_line_with_its_fix(setup: Setup, capsys, tmp_path: Path,
                                                          broken: Broken) -> None:
    broken.breaks(setup)
    profile = gpu_profile(tmp_path) if broken.gpu else PROFILE
    code, lines = doctor(setup, capsys, *broken.args, profile=profile)
    assert code == 1, lines
    mine = [line for line in lines if line.startswith(f"FAIL  {broken.check}: ")]
    assert len(mine) == 1, lines
    assert broken.says in mine[0] and "; fix: " in mine[0] and broken.fix in mine[0], mine[0]
    assert "Traceback" not in "\n".join(lines)
    assert not [r for r in setup.fake.requests if r["op"] in ("insert", "bulkInsert")]


def _real_path(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    """``expocloud doctor`` on the real path (no endpoint, no emulator), every route out
    pointed at a closed loopback port, so that failing needs no network."""
    env = {**os.environ, "HTTPS_PROXY": "http://127.0.0.1:9", "HTTP_PROXY": "http://127.0.0.1:9",
           "GCE_METADATA_HOST": "127.0.0.1:9", "GCE_METADATA_IP": "127.0.0.1:9",
           "NO_GCE_CHECK": "True", "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"), **env}
    for name in ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS"):
        if not env.get(name):
            env.pop(name, None)
    return subprocess.run([EXPOCLOUD, "doctor", "--profile", str(REPO / "profiles" / "gce-spot"),
                           "--expocloud-gce-project", "p", "--expocloud-gce-service-account",
                           "expocloud-worker@p.iam.gserviceaccount.com",
                           "--default-storage-prefix", "gs://expocloud-bkt/wf"],
                          capture_output=True, text=True, env=env, timeout=120, cwd=tmp_path)


def test_no_credentials_fails_first_with_the_login_command(tmp_path: Path) -> None:
    result = _real_path(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("FAIL  credentials: no Application Default "
                                                   "Credentials"), result.stdout
    assert "gcloud auth application-default login" in lines[0]


def test_credentials_that_get_no_token_fail_first(tmp_path: Path) -> None:
    """A well-formed service-account key whose token endpoint does not answer: found, but not
    working, said in one line before any other check."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
    (tmp_path / "key.json").write_text(json.dumps({
        "type": "service_account", "project_id": "p", "private_key_id": "1", "private_key": key,
        "client_email": "runner@p.iam.gserviceaccount.com", "client_id": "1",
        "token_uri": "http://127.0.0.1:9/token"}))
    result = _real_path(tmp_path, GOOGLE_APPLICATION_CREDENTIALS=str(tmp_path / "key.json"))
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("FAIL  credentials: the credentials do not "
                                                   "work ("), result.stdout
    assert "gcloud auth application-default login" in lines[0]


def test_warnings_pass_and_transient_errors_are_retried(setup: Setup, capsys) -> None:
    setup.fake.withhold("us-central1-b", "e2-standard-2")
    setup.fake.fail_next("unavailable", 2, op="regions.get")
    setup.fake.fail_next("rate_limit", 1, op="iam.projects.serviceAccounts.testIamPermissions",
                         http_status=429)
    code, lines = doctor(setup, capsys)
    assert code == 0, lines
    assert lines[0] == ("warn  machine types: e2-standard-2 not in us-central1-b: the run skips "
                        "those zones for it"), lines
    assert lines[1].startswith("expocloud doctor: project expocloud-emulated is ready")
    served = setup.fake.faults_served()
    assert served.get("unavailable") == 2 and served.get("rate_limit") == 1, served
    # what the caller may not read is not checked, and said so: not a reason to stop a run
    setup.fake.project.deny("compute.regions.get", "serviceusage.services.get")
    code, lines = doctor(setup, capsys)
    assert code == 0, lines
    assert [line.split(":")[0] for line in lines[:-1]] == ["warn  APIs", "warn  machine types",
                                                          "warn  zones", "warn  quotas"], lines
    assert lines[3].startswith("warn  quotas: not checked: you@example.com may not read what "
                               "this check needs (403 Required 'compute.regions.get' permission")


def test_internal_ips_pass_with_a_nat_or_without_installs(setup: Setup, capsys) -> None:
    setup.fake.catalogue.add_nat(REGION, network="default")
    code, lines = doctor(setup, capsys, "-v", "--expocloud-gce-internal-ip-only", *PIP)
    assert code == 0, lines
    assert "ok    network: no external IPs; Cloud NAT serves default in us-central1" in lines
    setup.fake.catalogue.remove_routers(REGION)
    code, lines = doctor(setup, capsys, "-v", "--expocloud-gce-internal-ip-only")  # image mode
    assert code == 0 and "ok    network: no external IPs; image mode installs nothing" in lines


def test_the_worker_may_hold_its_bucket_roles_at_the_project_level(setup: Setup,
                                                                   capsys) -> None:
    setup.bucket_policy(default_bucket_policy(PROJECT))
    setup.fake.project.bind("roles/storage.objectAdmin", f"serviceAccount:{WORKER}")
    code, lines = doctor(setup, capsys)  # objectAdmin lacks storage.buckets.get
    assert code == 1 and lines == [
        f"FAIL  worker's bucket access: {WORKER} lacks storage.buckets.get on gs://{setup.bucket} "
        "(its roles: projects/expocloud-emulated/roles/expocloudSelfDelete, "
        "roles/storage.objectAdmin); fix: gcloud storage buckets add-iam-policy-binding "
        f"gs://{setup.bucket} --member=serviceAccount:{WORKER} --role=projects/"
        "expocloud-emulated/roles/expocloudStorage (docs/gce.md, 'Service accounts and IAM')"]
    setup.fake.project.bind("roles/storage.legacyBucketReader", f"serviceAccount:{WORKER}")
    assert doctor(setup, capsys)[0] == 0
    # a coordinator that may not read the project's policy cannot confirm it: a warning
    setup.fake.project.deny("resourcemanager.projects.getIamPolicy")
    code, lines = doctor(setup, capsys)
    assert code == 0 and lines[0].startswith("warn  worker's bucket access: not confirmed: "), lines


def test_a_gce_run_with_a_broken_setup_stops_before_any_vm(
        tmp_path: Path, fake_compute: FakeCompute, gcs_emulator: str) -> None:  # noqa: F811
    fake_compute.project.deny_act_as(WORKER)
    (tmp_path / "Snakefile").write_text("rule all:\n    output: 'out.txt'\n"
                                        "    shell: 'echo > {output}'\n")
    result = subprocess.run([SNAKEMAKE, *emulated_args(fake_compute, gcs_emulator)],
                            cwd=tmp_path, env=emulated_env(gcs_emulator), capture_output=True,
                            text=True, timeout=300)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    lines = [line for line in output.splitlines() if f"may not act as {WORKER}" in line]
    assert len(lines) == 1, output[-3000:]
    assert "expocloud doctor: worker account: you@example.com may not act as" in lines[0]
    assert "fix: gcloud iam service-accounts add-iam-policy-binding" in lines[0]
    assert "Traceback" not in output, output[-3000:]
    ops = [r["op"] for r in fake_compute.requests]
    assert "iam.projects.serviceAccounts.testIamPermissions" in ops
    assert not [op for op in ops if op in ("insert", "bulkInsert", "aggregatedList")], ops
    assert not fake_compute.ledger()


def test_faults_armed_for_no_method_are_left_to_the_run(setup: Setup, capsys) -> None:
    """The fault-injection suites arm faults for whichever instance call comes next: the
    checks before the run must not take them."""
    setup.fake.fail_next("unavailable", 5)
    setup.fake.fail_next("rate_limit", 5, zone="us-central1-a")
    code, lines = doctor(setup, capsys)
    assert code == 0, lines
    assert setup.fake.faults_served() == {}


def test_across_regions_each_regions_quotas_are_checked(setup: Setup, capsys) -> None:
    """The fleet at its largest may land in any region: a region too small for it is a
    warning while the regions together hold it, and a failure when they do not."""
    regions = ("--expocloud-gce-regions", "europe-west1")
    setup.fake.catalogue.set_quota("europe-west1", "CPUS", limit=4)
    code, lines = doctor(setup, capsys, *regions)
    assert code == 0, lines
    assert lines[0].startswith("warn  quotas: in europe-west1, CPUS: up to 6") and \
        "the run fills those regions, then uses the others" in lines[0], lines
    setup.fake.catalogue.set_quota(REGION, "CPUS", limit=1)
    code, lines = doctor(setup, capsys, *regions)
    assert code == 1, lines
    failed = [line for line in lines if line.startswith("FAIL  quotas")]
    assert len(failed) == 1 and "in us-central1, CPUS" in failed[0] and \
        "in europe-west1, CPUS" in failed[0] and "--expocloud-gce-regions" in failed[0], lines
