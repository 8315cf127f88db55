"""Turning validated settings into a GCE engine for one run: names, labels, worker metadata.

Kept apart from the Snakemake front end so that the CWL runner builds its GCE runs the same way.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from expo_executor.coordinator.settings import (ExecutorSettings, check_bucket_url, heartbeat_grace,
                                                labels, poll_interval, pool_machine_types,
                                                slow_poll_interval, worker_requirements,
                                                zones)
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.scheduler import Pool
from expo_executor.engines.gce.engine import GceConfig, GceEngine
from expo_executor.engines.gce.startup import render, stage
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import RUN_KEY_ATTRIBUTE, WORKER_ATTRIBUTE

HALT_ATTRIBUTE = "expocloud-halt"


def run_label(run_id: str) -> str:
    """The run id as a GCE label value and name part: lowercase letters, digits and '-'."""
    return re.sub(r"[^a-z0-9-]", "-", run_id.lower())[:40].strip("-") or "run"


def vm_prefix(run_id: str) -> str:
    """Instance names must start with a letter and be unique in the project's zone."""
    return f"expo-{run_label(run_id)}"


def coordination_url(settings: ExecutorSettings, default_storage_prefix: str | None,
                     run_id: str) -> str:
    """The run's coordination prefix; raises ExpoError on a missing or invalid bucket name."""
    base = settings.bucket or (f"{default_storage_prefix.rstrip('/')}/.expocloud"
                               if default_storage_prefix else None)
    if not base or not base.startswith("gs://"):
        raise ExpoError("--expocloud-bucket", "the GCE engine needs a gs:// bucket for "
                        "coordination", "set expocloud-bucket or default-storage-prefix to "
                        "gs://BUCKET/PREFIX")
    check_bucket_url(base, "--expocloud-bucket" if settings.bucket else "default-storage-prefix")
    return f"{base.rstrip('/')}/{run_label(run_id)}"


def worker_boot(settings: ExecutorSettings, bucket_url: str) -> dict:
    """What each worker reads from its metadata (never secret: the run key is separate)."""
    emulated = settings.gce_endpoint is not None
    grace = heartbeat_grace(settings)
    return {"v": 1, "bucket": bucket_url, "slots": settings.slots_per_worker,
            "poll": poll_interval(settings), "slow_poll": slow_poll_interval(settings),
            "grace": grace,
            "heartbeat": grace,  # liveness comes from the Compute API: no status heartbeats
            "storage_emulator_host": os.environ.get("STORAGE_EMULATOR_HOST") if emulated
            else None,
            "compute_endpoint": settings.gce_endpoint, "self_delete": True}


def build_engine(settings: ExecutorSettings, run_id: str, run_key: bytes, bucket: Bucket,
                 bucket_url: str, work_dir: Path) -> GceEngine:
    """Stage the worker software if needed, and configure the engine for this run."""
    software = stage(bucket, work_dir / "software", mode=settings.gce_worker_software,
                     index_url=settings.gce_pip_index_url,
                     requirements=worker_requirements(settings))
    metadata = {
        "startup-script": render(software),
        WORKER_ATTRIBUTE: json.dumps(worker_boot(settings, bucket_url)),
        RUN_KEY_ATTRIBUTE: run_key.hex(),
        HALT_ATTRIBUTE: "poweroff",
    }
    spot_type, on_demand_type = pool_machine_types(settings)
    return GceEngine(GceConfig(
        project=settings.gce_project or "", zones=zones(settings),
        machine_types={Pool.SPOT: spot_type, Pool.ON_DEMAND: on_demand_type},
        image=settings.gce_image, gpu_image=settings.gce_gpu_image, disk_gb=settings.gce_disk_gb,
        disk_type=settings.gce_disk_type, network=settings.gce_network,
        subnetwork=settings.gce_subnetwork, external_ip=not settings.gce_internal_ip_only,
        service_account=settings.gce_service_account,
        scopes=[s.strip() for s in settings.gce_scopes.split(",") if s.strip()],
        labels=labels(settings),
        max_run_duration_s=int(parse_duration(settings.gce_max_run_duration,
                                               "--expocloud-gce-max-run-duration")),
        run_label=run_label(run_id), metadata=metadata, endpoint=settings.gce_endpoint))
