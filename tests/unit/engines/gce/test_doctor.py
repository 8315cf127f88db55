"""The pure parts of the checks before a run (engines/gce/doctor.py and its helpers): quotas
against the fleet, what IAM policies grant the worker, the image's Python, Cloud NAT, what the
coordinator must hold, the plan read from the settings and a profile, and the worker account
setting. Against the fakes, end to end: tests/e2e/test_doctor_fakes.py."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from expo_executor.coordinator.profile_settings import (Profile, add_setting_flags, read_profile,
                                                        settings_of)
from expo_executor.coordinator.settings import ExecutorSettings, validate
from expo_executor.core.errors import ExpoError
from expo_executor.core.shapes import Shape
from expo_executor.engines.gce import bucket_access, doctor_access, doctor_context, doctor_fleet, quota_plan
from expo_executor.engines.gce.launch import doctor_plan
from expo_executor.engines.gce.quota_plan import FleetPlan, Machine, Quota

E2 = Machine("e2-standard-2")
T4 = Machine("n1-standard-4", "nvidia-tesla-t4", 1)
VCPUS = {"e2-standard-2": 2, "n1-standard-4": 4, "n2-standard-8": 8}


def quotas(**limits: float) -> dict[str, Quota]:
    return {metric: Quota(limit, 0.0) for metric, limit in limits.items()}


# -- quotas -------------------------------------------------------------------------------------------
def test_spot_draws_on_the_preemptible_quota_only_when_the_project_has_one() -> None:
    fleet = FleetPlan(10, 2, (E2,), (E2,), external_ip=False)
    without = quota_plan.needs(fleet, VCPUS, quotas(CPUS=24, PREEMPTIBLE_CPUS=0))
    assert [(n.metric, n.amount) for n in without] == [("CPUS", 24)]
    assert without[0].why == ("10 Spot x e2-standard-2, 2 vCPUs + 2 on-demand x e2-standard-2, "
                              "2 vCPUs")
    with_ = quota_plan.needs(fleet, VCPUS, quotas(CPUS=24, PREEMPTIBLE_CPUS=8))
    assert {(n.metric, n.amount) for n in with_} == {("PREEMPTIBLE_CPUS", 20), ("CPUS", 4)}
    short = quota_plan.shortfalls(with_, quotas(CPUS=24, PREEMPTIBLE_CPUS=8))
    assert [need.metric for need, _ in short] == ["PREEMPTIBLE_CPUS"]
    assert quota_plan.describe(*short[0]) == ("PREEMPTIBLE_CPUS: up to 20 (10 Spot x "
                                              "e2-standard-2, 2 vCPUs), but 8 - 0 in use "
                                              "leaves 8")


def test_each_pool_counts_its_largest_machine_per_quota_and_gpus_and_addresses() -> None:
    fleet = FleetPlan(4, 1, (E2, T4, Machine("n2-standard-8")), (E2, T4), external_ip=True)
    found = {n.metric: n.amount for n in quota_plan.needs(
        fleet, VCPUS, quotas(CPUS=100, N2_CPUS=100, NVIDIA_T4_GPUS=4,
                             PREEMPTIBLE_NVIDIA_T4_GPUS=0))}
    # n2 has its own quota here; e2 and n1 share CPUS, the largest (4 vCPUs) counted per VM
    assert found == {"CPUS": 4 * 4 + 1 * 4, "N2_CPUS": 32, "NVIDIA_T4_GPUS": 5,
                     "IN_USE_ADDRESSES": 5}
    # a region that lists no N2 quota counts n2 in CPUS; a GPU quota it lists not is 0
    found = quota_plan.needs(fleet, VCPUS, quotas(CPUS=100))
    assert {n.metric for n in found} == {"CPUS", "NVIDIA_T4_GPUS", "IN_USE_ADDRESSES"}
    short = quota_plan.shortfalls(found, quotas(CPUS=100))
    assert [(need.metric, quota.limit) for need, quota in short] == [("NVIDIA_T4_GPUS", 0.0),
                                                                    ("IN_USE_ADDRESSES", 0.0)]


def test_usage_counts_against_the_limit_and_gpu_metrics_are_named_as_gce_does() -> None:
    need = quota_plan.Need("CPUS", 10, "x")
    assert quota_plan.shortfalls([need], {"CPUS": Quota(24, 15)})
    assert not quota_plan.shortfalls([need], {"CPUS": Quota(24, 14)})
    assert quota_plan.gpu_metric("nvidia-tesla-t4") == "NVIDIA_T4_GPUS"
    assert quota_plan.gpu_metric("nvidia-l4") == "NVIDIA_L4_GPUS"
    assert quota_plan.gpu_metric("nvidia-a100-80gb") == "NVIDIA_A100_80GB_GPUS"
    assert quota_plan.quotas_of({"quotas": [{"metric": "CPUS", "limit": 24.0, "usage": 2.0}]}) \
        == {"CPUS": Quota(24.0, 2.0)}


# -- what IAM gives the worker --------------------------------------------------------------------------
WORKER = "serviceAccount:w@p.iam.gserviceaccount.com"


def _policy(*bindings: tuple[str, list[str]]) -> dict:
    return {"bindings": [{"role": role, "members": members} for role, members in bindings]}


def test_object_admin_alone_lacks_the_bucket_get_the_storage_plugin_needs() -> None:
    read = bucket_access.KNOWN_ROLES.get
    alone = bucket_access.grants([_policy(("roles/storage.objectAdmin", [WORKER]))], WORKER, read)
    assert alone.missing == ("storage.buckets.get",)
    both = bucket_access.grants([_policy(("roles/storage.objectAdmin", [WORKER])),
                                 _policy(("roles/storage.legacyBucketReader", [WORKER]))],
                                WORKER, read)
    assert both.missing == () and both.roles == ("roles/storage.legacyBucketReader",
                                                 "roles/storage.objectAdmin")


def test_everyone_counts_groups_may_and_unreadable_roles_are_said() -> None:
    def read(role: str) -> list[str] | None:
        return None if role.startswith("projects/") else bucket_access.KNOWN_ROLES.get(role)

    found = bucket_access.grants([_policy(("roles/storage.objectViewer", ["allUsers"]),
                                          ("roles/storage.admin", ["group:lab@example.com"]),
                                          ("projects/p/roles/expocloudStorage", [WORKER]))],
                                 WORKER, read)
    assert found.granted == {"storage.objects.get", "storage.objects.list"}
    assert found.unresolved == ("projects/p/roles/expocloudStorage",)
    assert found.indirect == ("roles/storage.admin",)


# -- the image's Python, NAT, the coordinator's permissions ----------------------------------------------------
@pytest.mark.parametrize("image, version", [
    ("projects/debian-cloud/global/images/family/debian-12", "3.11"),
    ("projects/debian-cloud/global/images/debian-12-bookworm-v20250610", "3.11"),
    ("projects/debian-cloud/global/images/family/debian-13", "3.13"),
    ("projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts", "3.10"),
    ("projects/ubuntu-os-cloud/global/images/family/ubuntu-minimal-2404-lts-amd64", "3.12"),
    ("projects/my-lab/global/images/debian-12-with-tools", None),  # custom: anything goes
    ("projects/deeplearning-platform-release/global/images/family/common-cu124", None),
])
def test_public_image_families_map_to_their_python(image: str, version: str | None) -> None:
    assert doctor_fleet.image_python(image) == version


def _plan(**changes) -> doctor_context.Plan:
    settings = ExecutorSettings(engine="gce", gce_project="p", gce_zones="us-central1-a",
                                max_workers=4, gce_service_account="w@p.iam.gserviceaccount.com",
                                **changes)
    return doctor_plan(settings, [], "gs://bkt/wf/.expocloud/r1")


def test_the_python_check_names_the_versions_and_the_fix() -> None:
    pip = _plan(gce_image="projects/ubuntu-os-cloud/global/images/family/ubuntu-2204-lts")
    bad = doctor_fleet.check_python(pip, "3.11")
    assert not bad.ok and bad.line.startswith("worker Python: image projects/ubuntu-os-cloud/"
                                              "global/images/family/ubuntu-2204-lts has Python "
                                              "3.10, this machine 3.11")
    assert "an image with Python 3.11 (--expocloud-gce-image)" in bad.fix
    assert "--expocloud-gce-worker-software image" in bad.fix
    assert doctor_fleet.check_python(pip, "3.10").ok
    custom = doctor_fleet.check_python(_plan(gce_image="projects/p/global/images/mine"), "3.11")
    assert custom.ok and custom.warning
    assert doctor_fleet.check_python(_plan(gce_worker_software="image", gce_image="x"), "3.9").ok


def test_a_nat_covers_all_subnetworks_or_the_listed_one_of_its_network() -> None:
    def router(network: str, **nat) -> dict:
        return {"network": f"https://www.googleapis.com/compute/v1/projects/p/global/networks/"
                           f"{network}", "nats": [nat]}

    every = router("default", sourceSubnetworkIpRangesToNat="ALL_SUBNETWORKS_ALL_IP_RANGES")
    listed = router("vpc", sourceSubnetworkIpRangesToNat="LIST_OF_SUBNETWORKS", subnetworks=[
        {"name": "https://www.googleapis.com/compute/v1/projects/p/regions/r/subnetworks/a"}])
    assert doctor_fleet.nat_covers([every], "default", "default")
    assert not doctor_fleet.nat_covers([every], "vpc", "a")
    assert doctor_fleet.nat_covers([listed], "vpc", "a") and not doctor_fleet.nat_covers([listed], "vpc", "b")
    assert not doctor_fleet.nat_covers([], "default", "default")


def test_the_coordinator_needs_what_the_engine_calls() -> None:
    needed = set(doctor_access.coordinator_permissions(_plan()))
    assert {"compute.instances.create", "compute.instances.setMetadata",
            "compute.instances.setServiceAccount", "compute.disks.create",
            "compute.subnetworks.useExternalIp", "compute.zoneOperations.get"} <= needed
    assert "compute.images.useReadOnly" not in needed  # debian-cloud's image is public
    internal = set(doctor_access.coordinator_permissions(_plan(gce_internal_ip_only=True)))
    assert "compute.subnetworks.useExternalIp" not in internal
    shared = set(doctor_access.coordinator_permissions(_plan(
        gce_subnetwork="projects/host/regions/us-central1/subnetworks/s",
        gce_image="projects/p/global/images/worker")))
    assert "compute.subnetworks.use" not in shared  # the host project's to grant
    assert "compute.images.useReadOnly" in shared


# -- the plan, from the settings and a profile ---------------------------------------------------------------
def test_the_plan_is_what_the_run_would_create() -> None:
    settings = ExecutorSettings(
        engine="gce", gce_project="p", gce_zones="us-central1-a,us-central1-b", max_workers=6,
        max_on_demand=2, gce_machine_type="e2-standard-4", gce_on_demand_machine_type="auto",
        gce_service_account="default", gce_gpu_image="projects/p/global/images/gpu")
    shapes = [Shape("n1-standard-4", "nvidia-tesla-t4", 1), Shape("g2-standard-8", "nvidia-l4", 1)]
    plan = doctor_plan(settings, shapes, "gs://bkt/wf/.expocloud/r1")
    assert plan.machine_types == ("e2-standard-4", "g2-standard-8", "n1-standard-4")
    assert plan.gpus == (("nvidia-tesla-t4", 1),)  # an L4 comes with its g2 machine
    assert plan.auto and plan.bucket == "bkt" and plan.worker == "default"
    assert plan.region == "us-central1" and plan.zones == ("us-central1-a", "us-central1-b")
    assert (plan.fleet.spot, plan.fleet.on_demand) == (6, 2)
    assert Machine("e2-standard-4") in plan.fleet.spot_machines
    assert Machine("n1-standard-4", "nvidia-tesla-t4", 1) in plan.fleet.on_demand_machines
    assert plan.images == ("projects/debian-cloud/global/images/family/debian-12",
                           "projects/p/global/images/gpu")
    only = doctor_plan(ExecutorSettings(engine="gce", gce_project="p", gce_zones="us-central1-a",
                                        max_workers=6, on_demand_only=True), [], "gs://b/x")
    assert (only.fleet.spot, only.fleet.on_demand) == (0, 2)


def test_a_profile_is_read_as_a_run_reads_it(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "executor: expocloud\nexpocloud-engine: gce\nexpocloud-max-workers: 7\n"
        "expocloud-gce-internal-ip-only: true\nexpocloud-idle-timeout: 2.5\n"
        "default-storage-prefix: gs://bkt/wf\n"
        "set-resources:\n  train:\n    gpu_type: nvidia-tesla-t4\n    gpu: 2\n")
    profile = read_profile(tmp_path)
    assert profile.default_storage_prefix == "gs://bkt/wf"
    assert profile.resources == {"train": {"gpu_type": "nvidia-tesla-t4", "gpu": 2}}
    parser = argparse.ArgumentParser()
    add_setting_flags(parser)
    settings = settings_of(profile, parser.parse_args(["--expocloud-max-workers", "3"]))
    assert (settings.engine, settings.max_workers, settings.gce_internal_ip_only,
            settings.idle_timeout) == ("gce", 3, True, 2.5)
    (tmp_path / "list.yaml").write_text("set-resources: ['train:machine_type=n1-standard-8', "
                                        "'train:gpu=1']\n")
    assert read_profile(tmp_path / "list.yaml").resources == {
        "train": {"machine_type": "n1-standard-8", "gpu": 1}}
    (tmp_path / "bad.yaml").write_text("expocloud-colour: red\n")
    with pytest.raises(ExpoError, match="expocloud-colour in .*is not an expocloud setting"):
        read_profile(tmp_path / "bad.yaml")
    assert settings_of(Profile(), parser.parse_args([])) == ExecutorSettings()


# -- the workers' service account ---------------------------------------------------------------------------------
def test_a_gce_run_names_its_worker_account_or_asks_for_the_default_one() -> None:
    base = dict(engine="gce", gce_project="p", gce_zones="us-central1-a", max_workers=2)
    with pytest.raises(ExpoError) as caught:
        validate(ExecutorSettings(**base))
    message = str(caught.value)
    assert message.startswith("--expocloud-gce-service-account: a GCE run needs the workers' "
                              "service account named; fix: set expocloud-gce-service-account: "
                              "expocloud-worker@p.iam.gserviceaccount.com")
    assert "'default' for the Compute Engine default account" in message
    with pytest.raises(ExpoError, match="'worker' is not a service account's email"):
        validate(ExecutorSettings(**base, gce_service_account="worker"))
    validate(ExecutorSettings(**base, gce_service_account="default"))
    validate(ExecutorSettings(**base, gce_service_account="w@p.iam.gserviceaccount.com"))
    validate(ExecutorSettings())  # the local engine has no VMs to name one for


def test_a_check_is_one_line_with_its_fix() -> None:
    bad = doctor_context.failed("quotas", "CPUS short", "ask for more")
    assert bad.line == "quotas: CPUS short; fix: ask for more" and not bad.ok
    assert doctor_context.passed("APIs", "enabled").line == "APIs: enabled"
