"""What the fake Google Cloud offers, as data: machine and accelerator types, region quotas,
IAM roles and permissions, and the emulated project's identities.

Representative, not recorded from the live API (nothing here reaches Google): the machine
families, sizes and memory ratios and the GPU types are Compute Engine's published ones; every
zone offers every type until a test withholds one (``FakeCompute.withhold``); the quotas are a
project whose limits were raised (a new project has far less: 24 CPUS, 8 IN_USE_ADDRESSES, no
GPUs), which tests lower one by one; the roles' permissions are the predefined roles' as the
IAM reference lists them, cut to the permissions expocloud asks about. The emulated profile's
one-time setup (docs/gce.md) is data too: its worker account, the custom roles
``expocloudStorage`` and ``expocloudSelfDelete``, and the caller ("you") who runs the doctor.
"""

from __future__ import annotations

import re

PROJECT = "expocloud-emulated"
CALLER = "you@example.com"  # who the fake says the credentials belong to (tokeninfo)
CALLER_MEMBER = f"user:{CALLER}"
WORKER = f"expocloud-worker@{PROJECT}.iam.gserviceaccount.com"  # profiles/gce-emulated's

# -- machine types ---------------------------------------------------------------------------------
# family -> class -> (GiB per vCPU, sizes in vCPUs)
_FAMILIES: dict[str, dict[str, tuple[float, tuple[int, ...]]]] = {
    "e2": {"standard": (4.0, (2, 4, 8, 16, 32)), "highcpu": (1.0, (2, 4, 8, 16, 32)),
           "highmem": (8.0, (2, 4, 8, 16))},
    "n1": {"standard": (3.75, (1, 2, 4, 8, 16, 32, 64, 96)),
           "highcpu": (0.9, (2, 4, 8, 16, 32, 64, 96)),
           "highmem": (6.5, (2, 4, 8, 16, 32, 64, 96))},
    "n2": {"standard": (4.0, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)),
           "highcpu": (1.0, (2, 4, 8, 16, 32, 48, 64, 80, 96)),
           "highmem": (8.0, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128))},
    "n2d": {"standard": (4.0, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224)),
            "highcpu": (1.0, (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224)),
            "highmem": (8.0, (2, 4, 8, 16, 32, 48, 64, 80, 96))},
    "c2": {"standard": (4.0, (4, 8, 16, 30, 60))},
    "c2d": {"standard": (4.0, (2, 4, 8, 16, 32, 56, 112)),
            "highcpu": (2.0, (2, 4, 8, 16, 32, 56, 112)),
            "highmem": (8.0, (2, 4, 8, 16, 32, 56, 112))},
    "c3": {"standard": (4.0, (4, 8, 22, 44, 88, 176)), "highcpu": (2.0, (4, 8, 22, 44, 88, 176)),
           "highmem": (8.0, (4, 8, 22, 44, 88, 176))},
    "t2d": {"standard": (4.0, (1, 2, 4, 8, 16, 32, 48, 60))},
    "g2": {"standard": (4.0, (4, 8, 12, 16, 24, 32, 48, 96))},
}
_SHARED_CORE = {"e2-micro": 1.0, "e2-small": 2.0, "e2-medium": 4.0}  # GiB; 2 vCPUs each
_A2 = {"a2-highgpu-1g": (12, 85, 1), "a2-highgpu-2g": (24, 170, 2), "a2-highgpu-4g": (48, 340, 4),
       "a2-highgpu-8g": (96, 680, 8), "a2-megagpu-16g": (96, 1360, 16)}  # vCPUs, GiB, A100s
_G2_L4S = {4: 1, 8: 1, 12: 1, 16: 1, 32: 1, 24: 2, 48: 4, 96: 8}
_PREDEFINED = re.compile(r"([a-z][a-z0-9]*)-(standard|highmem|highcpu)-(\d+)")
_CUSTOM = re.compile(r"(?:(n1|n2|n2d|e2)-)?custom-(\d+)-(\d+)(?:-ext)?")


def machine_type(name: str) -> dict | None:
    """vCPUs, memory and attached GPUs of a machine type Compute Engine has; None for a name
    it does not (a 404)."""
    if name in _SHARED_CORE:
        return {"guestCpus": 2, "memoryMb": int(_SHARED_CORE[name] * 1024), "isSharedCpu": True}
    if name in _A2:
        vcpus, gib, gpus = _A2[name]
        return {"guestCpus": vcpus, "memoryMb": gib * 1024,
                "accelerators": [{"guestAcceleratorType": "nvidia-tesla-a100",
                                  "guestAcceleratorCount": gpus}]}
    custom = _CUSTOM.fullmatch(name)
    if custom:
        return {"guestCpus": int(custom.group(2)), "memoryMb": int(custom.group(3))}
    match = _PREDEFINED.fullmatch(name)
    if match is None:
        return None
    family, kind, vcpus = match.group(1), match.group(2), int(match.group(3))
    gib_per_vcpu, sizes = _FAMILIES.get(family, {}).get(kind, (0.0, ()))
    if vcpus not in sizes:
        return None
    found: dict = {"guestCpus": vcpus, "memoryMb": int(gib_per_vcpu * vcpus * 1024)}
    if family == "g2":
        found["accelerators"] = [{"guestAcceleratorType": "nvidia-l4",
                                  "guestAcceleratorCount": _G2_L4S[vcpus]}]
    return found


def machine_type_names() -> list[str]:
    """Every machine type of the catalogue but custom ones, as a zone lists them."""
    names = [f"{family}-{kind}-{size}" for family, kinds in _FAMILIES.items()
             for kind, (_ratio, sizes) in kinds.items() for size in sizes]
    return sorted([*names, *_SHARED_CORE, *_A2])


# -- accelerator types ------------------------------------------------------------------------------
ACCELERATOR_TYPES = {  # name -> (description, most cards per instance)
    "nvidia-tesla-t4": ("NVIDIA T4", 4), "nvidia-tesla-v100": ("NVIDIA V100", 8),
    "nvidia-tesla-p4": ("NVIDIA Tesla P4", 4), "nvidia-tesla-p100": ("NVIDIA Tesla P100", 4),
    "nvidia-l4": ("NVIDIA L4", 8), "nvidia-tesla-a100": ("NVIDIA A100 40GB", 16),
}
# The machine families that come with GPUs of their own (accelerator-optimized): a VM of one
# cannot live-migrate. Compute Engine's own list, kept here as Google keeps it, apart from the
# executor's (core.shapes.GPU_MACHINE_FAMILIES, which the emulator may not import);
# tests/unit/emulator/test_catalogue.py holds the two to agreement.
GPU_MACHINE_FAMILIES = ("a2", "a3", "a4", "g2", "g4")

# -- regions and zones ------------------------------------------------------------------------------
# region -> its zones' letters, as ``gcloud compute zones list`` shows them: the zones the fake
# serves (any other is a 404, as Google's); the executor's own copy is gcp/zones.py, which
# tests/unit/emulator/test_catalogue.py holds equal to this one.
_ABC = "abc"
ZONE_LETTERS: dict[str, str] = {
    "us-central1": "abcf", "us-east1": "bcd", "us-east4": _ABC, "us-east5": _ABC,
    "us-south1": _ABC, "us-west1": _ABC, "us-west2": _ABC, "us-west3": _ABC, "us-west4": _ABC,
    "northamerica-northeast1": _ABC, "northamerica-northeast2": _ABC,
    "northamerica-south1": _ABC, "southamerica-east1": _ABC, "southamerica-west1": _ABC,
    "europe-west1": "bcd", "europe-west2": _ABC, "europe-west3": _ABC, "europe-west4": _ABC,
    "europe-west6": _ABC, "europe-west8": _ABC, "europe-west9": _ABC, "europe-west10": _ABC,
    "europe-west12": _ABC, "europe-north1": _ABC, "europe-north2": _ABC,
    "europe-central2": _ABC, "europe-southwest1": _ABC,
    "asia-east1": _ABC, "asia-east2": _ABC, "asia-northeast1": _ABC, "asia-northeast2": _ABC,
    "asia-northeast3": _ABC, "asia-south1": _ABC, "asia-south2": _ABC,
    "asia-southeast1": _ABC, "asia-southeast2": _ABC, "australia-southeast1": _ABC,
    "australia-southeast2": _ABC, "me-west1": _ABC, "me-central1": _ABC, "me-central2": _ABC,
    "africa-south1": _ABC,
}


def zones_of(region: str) -> list[str]:
    """The region's zones ([] for a region Google does not have)."""
    return [f"{region}-{letter}" for letter in ZONE_LETTERS.get(region, "")]


def zone_exists(zone: str) -> bool:
    return zone in zones_of(zone.rsplit("-", 1)[0])


# -- region quotas ----------------------------------------------------------------------------------
# metric -> limit; usage starts at 0. A raised project's, not a new one's (see above).
DEFAULT_QUOTAS = {
    "CPUS": 2400.0, "PREEMPTIBLE_CPUS": 0.0, "N2_CPUS": 2400.0, "N2D_CPUS": 2400.0,
    "C2_CPUS": 2400.0, "C2D_CPUS": 2400.0, "C3_CPUS": 2400.0, "A2_CPUS": 2400.0,
    "T2D_CPUS": 2400.0, "IN_USE_ADDRESSES": 2300.0, "STATIC_ADDRESSES": 8.0,
    "NVIDIA_T4_GPUS": 64.0, "NVIDIA_V100_GPUS": 64.0, "NVIDIA_P4_GPUS": 64.0,
    "NVIDIA_P100_GPUS": 64.0, "NVIDIA_L4_GPUS": 64.0, "NVIDIA_A100_GPUS": 64.0,
    "PREEMPTIBLE_NVIDIA_T4_GPUS": 0.0, "PREEMPTIBLE_NVIDIA_V100_GPUS": 0.0,
    "PREEMPTIBLE_NVIDIA_P4_GPUS": 0.0, "PREEMPTIBLE_NVIDIA_P100_GPUS": 0.0,
    "PREEMPTIBLE_NVIDIA_L4_GPUS": 0.0, "PREEMPTIBLE_NVIDIA_A100_GPUS": 0.0,
}

# -- IAM ------------------------------------------------------------------------------------------
_OBJECTS = ("storage.objects.get", "storage.objects.list", "storage.objects.create",
            "storage.objects.delete", "storage.objects.update", "storage.objects.getIamPolicy",
            "storage.objects.setIamPolicy")
_BUCKETS = ("storage.buckets.get", "storage.buckets.list", "storage.buckets.create",
            "storage.buckets.delete", "storage.buckets.update", "storage.buckets.getIamPolicy",
            "storage.buckets.setIamPolicy")
COMPUTE_PERMISSIONS = (
    "compute.instances.create", "compute.instances.delete", "compute.instances.get",
    "compute.instances.list", "compute.instances.setMetadata", "compute.instances.setLabels",
    "compute.instances.setServiceAccount", "compute.instances.setTags",
    "compute.instances.setScheduling", "compute.disks.create", "compute.disks.delete",
    "compute.subnetworks.use", "compute.subnetworks.useExternalIp", "compute.networks.use",
    "compute.networks.useExternalIp", "compute.zoneOperations.get",
    "compute.zoneOperations.list", "compute.images.useReadOnly", "compute.machineTypes.get",
    "compute.machineTypes.list", "compute.acceleratorTypes.get", "compute.regions.get",
    "compute.routers.list", "compute.routers.get",
)
# What the doctor reads about the project itself (a project owner has them all).
PROJECT_READS = ("serviceusage.services.get", "resourcemanager.projects.get",
                 "resourcemanager.projects.getIamPolicy", "iam.roles.get")
# The permissions of predefined roles that expocloud asks about (the IAM roles reference).
PREDEFINED_ROLES: dict[str, tuple[str, ...]] = {
    "roles/storage.admin": _OBJECTS + _BUCKETS,
    "roles/storage.objectAdmin": _OBJECTS,
    "roles/storage.objectUser": _OBJECTS[:5],
    "roles/storage.objectViewer": _OBJECTS[:2],
    "roles/storage.objectCreator": ("storage.objects.create",),
    "roles/storage.legacyBucketOwner": ("storage.buckets.get", "storage.buckets.update",
                                        "storage.buckets.getIamPolicy",
                                        "storage.buckets.setIamPolicy", "storage.objects.list",
                                        "storage.objects.create", "storage.objects.delete"),
    "roles/storage.legacyBucketWriter": ("storage.buckets.get", "storage.objects.list",
                                         "storage.objects.create", "storage.objects.delete"),
    "roles/storage.legacyBucketReader": ("storage.buckets.get", "storage.objects.list"),
    "roles/storage.legacyObjectOwner": ("storage.objects.get", "storage.objects.update",
                                        "storage.objects.getIamPolicy",
                                        "storage.objects.setIamPolicy"),
    "roles/storage.legacyObjectReader": ("storage.objects.get",),
    "roles/compute.instanceAdmin.v1": tuple(p for p in COMPUTE_PERMISSIONS
                                            if not p.startswith("compute.routers")),
    "roles/iam.serviceAccountUser": ("iam.serviceAccounts.actAs",),
    "roles/owner": _OBJECTS + _BUCKETS + COMPUTE_PERMISSIONS + PROJECT_READS
    + ("iam.serviceAccounts.actAs",),
    "roles/editor": _OBJECTS + _BUCKETS[:5] + COMPUTE_PERMISSIONS + PROJECT_READS[:2]
    + ("iam.serviceAccounts.actAs",),
}
# docs/gce.md's one-time setup: the custom roles every fake project has.
CUSTOM_ROLES: dict[str, tuple[str, ...]] = {
    "expocloudStorage": ("storage.objects.get", "storage.objects.list", "storage.objects.create",
                         "storage.objects.delete", "storage.buckets.get"),
    "expocloudSelfDelete": ("compute.instances.delete", "compute.disks.delete"),
}
KNOWN_PERMISSIONS = frozenset({p for perms in PREDEFINED_ROLES.values() for p in perms}
                              | {p for perms in CUSTOM_ROLES.values() for p in perms})


def role_permissions(role: str) -> tuple[str, ...] | None:
    """A role's permissions (``roles/...`` or ``projects/P/roles/NAME``); None for a role the
    catalogue does not have."""
    if role in PREDEFINED_ROLES:
        return PREDEFINED_ROLES[role]
    custom = re.fullmatch(r"projects/[^/]+/roles/([^/]+)", role)
    return CUSTOM_ROLES.get(custom.group(1)) if custom else None


def default_bucket_policy(project: str) -> list[dict]:
    """The bindings GCS gives a new bucket: the project's owners and editors own it, its
    viewers read it (convenience members)."""
    return [{"role": "roles/storage.legacyBucketOwner",
             "members": [f"projectEditor:{project}", f"projectOwner:{project}"]},
            {"role": "roles/storage.legacyObjectOwner",
             "members": [f"projectEditor:{project}", f"projectOwner:{project}"]},
            {"role": "roles/storage.legacyBucketReader", "members": [f"projectViewer:{project}"]},
            {"role": "roles/storage.legacyObjectReader", "members": [f"projectViewer:{project}"]}]


def caller_holds(member: str) -> bool:
    """Is ``member`` the fake's caller? The caller owns every fake project, so the project's
    owner and editor convenience members are the caller too, as are allUsers and
    allAuthenticatedUsers."""
    return member in (CALLER_MEMBER, "allUsers", "allAuthenticatedUsers") \
        or member.startswith(("projectOwner:", "projectEditor:"))


def granted(bindings: list[dict], holds=caller_holds) -> set[str]:
    """The permissions ``bindings`` give the members ``holds`` accepts (conditions ignored)."""
    return {permission for binding in bindings
            if any(holds(member) for member in binding.get("members") or [])
            for permission in role_permissions(binding.get("role", "")) or ()}
