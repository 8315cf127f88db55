"""Turning validated settings into a GCE engine for one run: names, labels, worker metadata,
and the checks of ``expocloud doctor`` it passes before its first VM.

Kept apart from the Snakemake front end so that the CWL runner builds its GCE runs the same way,
and ``expocloud doctor`` reads the settings exactly as a run does.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape, comes_with_gpus
from expo_executor.engines.gce import doctor, doctor_context
from expo_executor.engines.gce.engine import GceConfig, GceEngine
from expo_executor.engines.gce.google_apis import Roots
from expo_executor.engines.gce.key_channel import KeyGrantor
from expo_executor.engines.gce.quota_plan import FleetPlan, Machine
from expo_executor.engines.gce.settings import (AUTO_MACHINE, GceSettings, labels, needs_credentials,
                                                pool_machine_types, zones)
from expo_executor.engines.gce.settings_checks import check_bucket_url, pip_index_url
from expo_executor.engines.gce.startup import render, stage
from expo_executor.gcp.labels import as_value
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import WORKER_ATTRIBUTE
from expo_executor.protocol.worker_keys import grant_verify_key
from expo_executor.settings.values import (heartbeat_grace, heartbeat_interval, max_on_demand,
                                           poll_interval, slow_poll_interval, worker_requirements)

HALT_ATTRIBUTE = "expocloud-halt"


#: How much of the run id a label keeps readable; the digest that follows makes it unique.
LABEL_READABLE = 24
LABEL_DIGEST = 10
NO_STATUS_HEARTBEAT = 86400.0  # s: a worker's status is rewritten once a day, not per grace


def run_label(run_id: str) -> str:
    """The run id as a GCE label value and bucket prefix: a readable part (lowercase letters,
    digits and '-', at most 24 characters) and 10 hex digits of the full id's SHA-256.

    Unique by construction: ids that differ only in case, in '_' or '.', or past the readable
    part get different digests, so two runs never share a prefix (a stale result read as
    "reported already") or a label (one run adopting or deleting the other's VMs). At most 35
    characters: within a label value's 63, and leaves ``vm_prefix`` room for its VM suffix.
    """
    readable = re.sub(r"-+", "-", re.sub(r"[^a-z0-9-]", "-", run_id.lower()))
    readable = readable[:LABEL_READABLE].strip("-")
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:LABEL_DIGEST]
    return f"{readable}-{digest}" if readable else f"run-{digest}"


def vm_prefix(run_id: str) -> str:
    """Instance names must start with a letter and be unique in the project's zone: at most
    40 characters, so ``<prefix>-<n>`` fits the 63 of an instance name."""
    return f"expo-{run_label(run_id)}"


def check_new_prefix(bucket: Bucket, url: str) -> None:
    """A new run's coordination prefix must be empty: objects there belong to another run (or
    an earlier one with this run id), whose results this run would take for its own. Raises
    ExpoError naming the setting and the fix; called before anything is staged or any VM."""
    found = bucket.list("")
    if found:
        raise ExpoError("--expocloud-run-id", f"{url} holds {len(found)} objects of another "
                        "run", "choose a new run id (or leave it unset), or delete that run's "
                        "objects if it is over")


def coordination_url(settings: GceSettings, default_storage_prefix: str | None,
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


def worker_boot(settings: GceSettings, bucket_url: str) -> dict:
    """What each worker reads from its metadata: never secret (anyone with
    compute.instances.get reads it); each worker asks for its key through the bucket
    (key_channel.py)."""
    emulated = settings.gce_endpoint is not None
    grace = heartbeat_grace(settings)
    return {"v": 1, "bucket": bucket_url, "slots": settings.slots_per_worker,
            "poll": poll_interval(settings), "slow_poll": slow_poll_interval(settings),
            "grace": grace,
            # a status at boot and at the end only: liveness comes from the Compute API, and
            # results carry the worker's request counts (each status write is a billed one)
            "heartbeat": NO_STATUS_HEARTBEAT,
            # a solved result waits at most this long to share its object (worker/result_reports.py)
            "report_delay": grace,
            "pulse": heartbeat_interval(settings),  # the coordinator's: when to read its pulse
            "storage_emulator_host": os.environ.get("STORAGE_EMULATOR_HOST") if emulated
            else None,
            "compute_endpoint": settings.gce_endpoint, "self_delete": True}


def build_engine(settings: GceSettings, run_id: str, run_key: bytes, bucket: Bucket,
                 bucket_url: str, work_dir: Path, workflow: str = "") -> GceEngine:
    """Stage the worker software if needed, and configure the engine for this run
    (``workflow``: its name, a label on every VM)."""
    software = stage(bucket, work_dir / "software", mode=settings.gce_worker_software,
                     index_url=pip_index_url(settings),
                     requirements=worker_requirements(settings))
    metadata = {
        "startup-script": render(software),
        # with the public key that checks the coordinator's answers to key requests
        WORKER_ATTRIBUTE: json.dumps({**worker_boot(settings, bucket_url),
                                      "grant_verify_key": grant_verify_key(run_key).hex()}),
        HALT_ATTRIBUTE: "poweroff",
    }
    spot_type, on_demand_type = pool_machine_types(settings)
    engine = GceEngine(GceConfig(
        project=settings.gce_project or "", zones=zones(settings),
        machine_types={Pool.SPOT: spot_type, Pool.ON_DEMAND: on_demand_type},
        image=settings.gce_image, gpu_image=settings.gce_gpu_image, disk_gb=settings.gce_disk_gb,
        disk_type=settings.gce_disk_type, network=settings.gce_network,
        subnetwork=settings.gce_subnetwork, external_ip=not settings.gce_internal_ip_only,
        service_account=settings.gce_service_account,
        scopes=[s.strip() for s in settings.gce_scopes.split(",") if s.strip()],
        labels=labels(settings), workflow_label=as_value(workflow),
        max_run_duration_s=int(parse_duration(settings.gce_max_run_duration,
                                               "--expocloud-gce-max-run-duration")),
        run_label=run_label(run_id), metadata=metadata, endpoint=settings.gce_endpoint))
    # the workers' keys reach them only through the bucket, to a VM whose identity token
    # Google signed (the fake Compute's certificates on the emulated path)
    certs = f"{Roots.for_run(settings.gce_endpoint, None).oauth2}/oauth2/v1/certs"
    engine.key_grantor = KeyGrantor(run_key, settings.gce_project or "", bucket_url,
                                    engine.zone_of, certs)
    # what every VM reads from the bucket at boot (pip mode: the wheel), for the egress of a
    # VM in another region than the bucket's
    engine.staged_bytes = sum(path.stat().st_size for path in (work_dir / "software").glob("*")
                              if path.is_file()) if software.mode == "pip" else 0
    return engine


# -- expocloud doctor, before the first VM --------------------------------------------------------
def doctor_plan(settings: GceSettings, shapes: Iterable[Shape],
                bucket_url: str) -> doctor_context.Plan:
    """What the run will ask of the project, for the checks: its machine types (the pools'
    and every per-rule shape known before the run), GPUs, fleet, network, images, bucket."""
    shapes = sorted(set(shapes))
    spot, on_demand = pool_machine_types(settings)
    own = [t for t in dict.fromkeys((on_demand,) if settings.on_demand_only else (spot, on_demand))
           if t != AUTO_MACHINE]
    types = tuple(dict.fromkeys([*own, *(shape.machine_type for shape in shapes)]))
    gpus = tuple(dict.fromkeys((s.gpu_type, s.gpu_count) for s in shapes if s.gpus and s.gpu_type
                               and not comes_with_gpus(s.machine_type)))
    extra = tuple(Machine(s.machine_type, s.gpu_type, s.gpu_count) for s in shapes)
    workers = settings.max_workers or 1
    fleet = FleetPlan(
        spot=0 if settings.on_demand_only else workers,
        on_demand=max_on_demand(settings, workers),
        spot_machines=tuple(Machine(t) for t in (spot,) if t != AUTO_MACHINE) + extra,
        on_demand_machines=tuple(Machine(t) for t in (on_demand,) if t != AUTO_MACHINE) + extra,
        external_ip=not settings.gce_internal_ip_only)
    images = (settings.gce_image,) + ((settings.gce_gpu_image,) if settings.gce_gpu_image
                                      and any(s.gpus for s in shapes) else ())
    return doctor_context.Plan(
        project=settings.gce_project or "", zones=tuple(zones(settings)),
        bucket=bucket_url.removeprefix("gs://").split("/", 1)[0],
        worker=settings.gce_service_account or "default", machine_types=types, gpus=gpus,
        fleet=fleet, network=settings.gce_network, subnetwork=settings.gce_subnetwork,
        images=images, worker_software=settings.gce_worker_software,
        pip_index_url=pip_index_url(settings), endpoint=settings.gce_endpoint,
        storage_endpoint=doctor.storage_endpoint(), emulated=not needs_credentials(settings),
        auto=AUTO_MACHINE in (spot, on_demand))


def check_ready(settings: GceSettings, shapes: Iterable[Shape], bucket_url: str,
                log: Callable[[str], None]) -> None:
    """Run ``expocloud doctor``'s checks for this run before any VM: warnings are logged, the
    first failure raises ExpoError with its one line (the others are logged first), all green
    logs one summary line. ``--expocloud-gce-skip-doctor`` skips them, saying so."""
    if settings.gce_skip_doctor:
        log("expocloud: the project's checks are skipped (--expocloud-gce-skip-doctor)")
        return
    plan = doctor_plan(settings, shapes, bucket_url)
    started = time.monotonic()
    checks = doctor.run_checks(plan, doctor.host_python())
    for check in checks:
        if check.warning:
            log(f"expocloud doctor: warning: {check.line}")
    failures = [check for check in checks if not check.ok]
    for check in failures[1:]:
        log(f"expocloud doctor: {check.line}")
    if failures:
        first = failures[0]
        raise ExpoError(f"expocloud doctor: {first.name}", first.found, first.fix)
    log(f"expocloud doctor: {doctor.summary(plan, checks, time.monotonic() - started)}")
