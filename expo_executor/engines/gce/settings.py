"""The GCE engine's own settings: its fields, and the values a GCE run derives from them
(zones, labels, the pools' machine types, what the worker image provides).

No ``from __future__ import annotations``: the fields' types are read as types (see
``settings.fields``). The checks of a GCE run's settings are ``settings_checks``.
"""

import os
from dataclasses import dataclass, field
from typing import Optional

from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName
from expo_executor.engines.gce.config import USER_LABELS
from expo_executor.gcp.labels import LABEL_RULES, parse_labels
from expo_executor.gcp.zones import region_of, zones_of
from expo_executor.settings.engine_defaults import GCE
from expo_executor.settings.fields import Settings, option

WORKER_PROVIDES_CHOICES = ("conda", "apptainer")  # Snakemake's deployment method names
WORKER_SOFTWARE_CHOICES = ("pip", "image")
AUTO_MACHINE = "auto"  # a machine type chosen from the jobs (coordinator/shapes.py's AUTO)


@dataclass
class GceFields:
    """The fields only a GCE run reads (``coordinator.settings.ExecutorSettings`` has them
    beside every other engine's)."""

    bucket: Optional[str] = field(default=None, metadata=option(
        "GCE: coordination bucket gs://BUCKET/PREFIX (default: the default storage prefix "
        "followed by /.expocloud)."))
    gce_project: Optional[str] = field(default=None, metadata=option(
        "GCE: project id; required on GCE."))
    gce_zones: Optional[str] = field(default=None, metadata=option(
        "GCE: zones in order of preference, comma separated, of one region or several; a "
        "stockout moves to the next (across regions: the cheapest region first, docs/gce.md "
        "'Several regions'). This or --expocloud-gce-regions is required on GCE."))
    gce_regions: Optional[str] = field(default=None, metadata=option(
        "GCE: regions whose every zone the run may use, comma separated (after the zones of "
        "--expocloud-gce-zones, if any), e.g. us-central1,europe-west4."))
    machine_type: Optional[str] = field(default=None, metadata=option(
        f"GCE: machine type of the workers (default {GCE.machine_type}), or 'auto': per "
        "pool, the type with the lowest expected cost per job, from the jobs' threads, memory "
        "and runtime, the price snapshot and the preemption model (docs/cost.md)."))
    gce_machine_type: Optional[str] = field(default=None, metadata=option(
        "GCE: machine type of Spot workers, or 'auto' (default: --expocloud-machine-type)."))
    gce_on_demand_machine_type: Optional[str] = field(default=None, metadata=option(
        "GCE: machine type of on-demand workers, or 'auto' (default: the Spot one)."))
    gce_image: str = field(default="projects/debian-cloud/global/images/family/debian-12",
                           metadata=option("GCE: boot image or image family URL."))
    gce_gpu_image: Optional[str] = field(default=None, metadata=option(
        "GCE: boot image of VMs with GPUs, needed when a rule asks for GPUs: an image with the "
        "NVIDIA driver (or a Deep Learning VM image's first-boot driver install) and what "
        "--expocloud-gce-worker-software needs (pip: python3 of this machine's version; image: "
        "the worker installed), built as docs/gce.md says."))
    gce_worker_software: str = field(default="pip", metadata=option(
        "GCE: 'pip' (the startup script installs the host's exact versions) or 'image' (the "
        "image already has them).", choices=list(WORKER_SOFTWARE_CHOICES)))
    gce_worker_provides: Optional[str] = field(default=None, metadata=option(
        "GCE: what the worker image provides for Snakemake's --software-deployment-method, "
        "comma separated: conda, apptainer (environments and images are then built or pulled "
        "once per VM and reused by its later jobs)."))
    gce_pip_index_url: Optional[str] = field(default=None, metadata=option(
        "GCE: package index the workers install from (default PyPI)."))
    gce_disk_gb: int = field(default=20, metadata=option("GCE: boot disk size in GB.", type=int))
    gce_disk_type: str = field(default="pd-balanced", metadata=option("GCE: boot disk type."))
    gce_network: str = field(default="global/networks/default", metadata=option(
        "GCE: VPC network, a name or a URL (global/networks/NAME)."))
    gce_subnetwork: Optional[str] = field(default=None, metadata=option(
        "GCE: subnetwork, a name (completed in each zone's region) or a URL "
        "(projects/PROJECT/regions/REGION/subnetworks/NAME, for Shared VPC); across regions, "
        "one URL per region, comma separated; with it and the default network, the network is "
        "the subnetwork's."))
    gce_internal_ip_only: bool = field(default=False, metadata=option(
        "GCE: no external IP on workers (then they need Cloud NAT or Private Google Access to "
        "reach GCS and the package index). Workers listen on no port either way."))
    gce_service_account: Optional[str] = field(default=None, metadata=option(
        "GCE: the workers' service account, e.g. expocloud-worker@PROJECT.iam."
        "gserviceaccount.com (docs/gce.md: least privilege); required on GCE. 'default' asks "
        "for the "
        "Compute Engine default account, which usually holds Editor on the whole project."))
    gce_scopes: str = field(default="https://www.googleapis.com/auth/devstorage.read_write,"
                                    "https://www.googleapis.com/auth/compute", metadata=option(
        "GCE: OAuth scopes of the workers, comma separated (least privilege: storage and "
        "compute for deleting themselves)."))
    gce_labels: Optional[str] = field(default=None, metadata=option(
        "GCE: extra labels key=value,key=value on every VM and boot disk (a rule's own: its "
        "gce_labels resource, docs/cost.md)."))
    gce_max_run_duration: str = field(default="24h", metadata=option(
        "GCE: hard cap on each VM's life, the last resort against runaway cost."))
    gce_endpoint: Optional[str] = field(default=None, metadata=option(
        "GCE: Compute API endpoint (only for the local fake: profiles/gce-emulated)."))
    gce_skip_doctor: bool = field(default=False, metadata=option(
        "GCE: do not run the checks of 'expocloud doctor' (APIs, permissions, the worker "
        "account, the bucket, machine types, quotas, Python, NAT) before the first VM; for a "
        "check that is wrong about your project (please say so in an issue)."))


@dataclass
class GceSettings(GceFields, Settings):
    """The settings a GCE run reads: every engine's and its own."""


def check_fields(settings: GceSettings) -> None:
    """The GCE fields checked whatever the engine (a profile's mistake shows)."""
    worker_provides(settings)


def worker_provides(settings: GceSettings) -> frozenset[str]:
    """The software deployment methods the GCE worker image provides (checked names)."""
    given = {p.strip() for p in (settings.gce_worker_provides or "").split(",") if p.strip()}
    unknown = sorted(given - set(WORKER_PROVIDES_CHOICES))
    if unknown:
        raise ExpoError("--expocloud-gce-worker-provides", f"unknown value {unknown[0]!r}",
                        f"use some of {', '.join(WORKER_PROVIDES_CHOICES)}, comma separated")
    return frozenset(given)


def _names(value: str | None) -> list[str]:
    return list(dict.fromkeys(n.strip() for n in (value or "").split(",") if n.strip()))


def zones(settings: GceSettings) -> list[str]:
    """The run's zones in order of preference: those named, then every zone of each region
    named (``gcp.zones``' catalogue, Google's order), each once."""
    named = _names(settings.gce_zones)
    extra = [z for r in _names(settings.gce_regions) for z in zones_of(r) if z not in named]
    return named + extra


def regions(settings: GceSettings) -> list[str]:
    """The run's regions, in the order their first zone comes (a region named without a zone
    the catalogue knows is listed too, for its error)."""
    found = [region_of(z) for z in _names(settings.gce_zones)] + _names(settings.gce_regions)
    return list(dict.fromkeys(found))


def labels(settings: GceSettings) -> dict[str, str]:
    """``--expocloud-gce-labels`` as a dict, checked against Google's label rules (ExpoError
    naming the setting: ``gcp.labels``)."""
    try:
        found = parse_labels(settings.gce_labels)
    except ValueError as exc:
        raise ExpoError("--expocloud-gce-labels", f"not a valid label: {exc}",
                        f"write key=value,key=value ({LABEL_RULES}; expocloud-* keys are "
                        "reserved)") from None
    if len(found) > USER_LABELS:
        raise ExpoError("--expocloud-gce-labels", f"{len(found)} labels, more than the "
                        f"{USER_LABELS} GCE leaves beside the executor's own", "give fewer")
    return found


def pool_machine_types(settings: GceSettings) -> tuple[str, str]:
    """(Spot, on-demand) machine types as configured; either may be 'auto'."""
    spot = settings.gce_machine_type or settings.machine_type or GCE.machine_type
    on_demand = settings.gce_on_demand_machine_type or settings.gce_machine_type \
        or settings.machine_type or GCE.machine_type
    return spot, on_demand


def needs_credentials(settings: GceSettings) -> bool:
    """A GCE run talks to the real GCS or Compute API (not only to the local fakes)."""
    return settings.engine == EngineName.GCE and (settings.gce_endpoint is None
                                         or not os.environ.get("STORAGE_EMULATOR_HOST"))
