"""What a GCE run's VMs are, as configured: the engine's settings (``GceConfig``), one create
call's ask (``Ask``), the labels that mark a run's VMs, and how Compute calls are retried
(``CallPolicy``: ``gcp.retry.COMPUTE``'s backoff, for the engine, ``expocloud cleanup`` and a
crashed run's stop alike).
"""

from __future__ import annotations

import random
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.engines.base import CreateFailed
from expo_executor.gcp.errors import is_transient
from expo_executor.engines.gce.placement import RegionWeight
from expo_executor.engines.gce.references import DEFAULT_NETWORK, network_interface
from expo_executor.gcp.retry import COMPUTE, Backoff, retry_call

T = TypeVar("T")
Call = Callable[[Callable[[], T]], T]  # runs one Compute call with retries

RUN_LABEL = "expocloud-run"
POOL_LABEL = "expocloud-pool"
SLOTS_LABEL = "expocloud-slots"
# What a VM and its boot disk carry for the bill (BigQuery billing export, docs/recipes.md): the
# workflow, the machine type and GPUs, and the rule whose VMs they are (only a rule with labels
# of its own has VMs of its own: coordinator/shapes.py).
WORKFLOW_LABEL = "expocloud-workflow"
MACHINE_LABEL = "expocloud-machine"
GPU_LABEL = "expocloud-gpu"
RULE_LABEL = "expocloud-rule"
OWN_LABELS = (RUN_LABEL, POOL_LABEL, SLOTS_LABEL, WORKFLOW_LABEL, MACHINE_LABEL, GPU_LABEL,
              RULE_LABEL)
USER_LABELS = 64 - len(OWN_LABELS)  # of GCE's 64 labels per resource, what is left to the user
POOL_LABEL_VALUES = {Pool.SPOT: "spot", Pool.ON_DEMAND: "on-demand"}
POOLS_BY_LABEL = {value: pool for pool, value in POOL_LABEL_VALUES.items()}
PREEMPTED_OP = "compute.instances.preempted"
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{1,63}")
QUOTA_RE = re.compile(r"Quota '([^']+)' exceeded\.\s+Limit:\s*([0-9.]+)\s+in region ([a-z0-9-]+)")
PREEMPT_CLOCK_SLACK_S = 60.0  # a preemption this long before our insert can still be ours
# Deep Learning VM images install the NVIDIA driver at first boot when this metadata says so
# (a worker image built from one keeps that; other images ignore it).
GPU_DRIVER_ATTRIBUTE = "install-nvidia-driver"
GPU_DISK_GB = 50  # a Deep Learning VM image needs a boot disk of about this size

@dataclass(frozen=True)
class CallPolicy:
    """How a Compute call is retried (full jitter, bounded attempts: ``retry.retry_call``) and
    how long one request may take. Rate limits and transient errors are retried
    (``errors.is_transient``); anything else is raised at once."""

    backoff: Backoff = COMPUTE
    timeout_s: float = 60.0

    def caller(self, sleep: Callable[[float], object] = time.sleep,
               rand: Callable[[], float] = random.random) -> Call:
        """Runs a call under this policy; ``sleep`` and ``rand`` drive the backoff (tests
        inject them so that nothing waits for real)."""
        def call(fn: Callable[[], T]) -> T:
            return retry_call(fn, is_transient=is_transient, attempts=self.backoff.attempts,
                              base=self.backoff.base, cap=self.backoff.cap, sleep=sleep,
                              rand=rand)
        return call


CALLS = CallPolicy()  # the defaults, for the engine and for expocloud cleanup
TEARDOWN_TIMEOUT_S = 300.0  # how long deleting VMs may wait until they are gone


@dataclass
class GceConfig:
    """Where and how the run's VMs are created.

    ``zones`` in preference order (across regions, ``region_weight`` orders the regions:
    placement.py); ``machine_types`` per pool (names, e.g. e2-standard-2) for
    the run's own VMs (a per-rule :class:`Shape` names its own); ``image`` a source image URL,
    ``gpu_image`` the one of VMs with GPUs (with the NVIDIA driver, or installing it), whose
    boot disk is at least ``gpu_disk_gb``; ``metadata`` goes on every VM (values never logged; the
    ``slots`` of its ``expocloud-worker`` JSON is set to each create()'s slots); ``endpoint``
    set means a local fake (anonymous credentials); ``bulk_min`` or more VMs at once go
    through one bulk insert; ``exhausted_ttl_s``: how long a stocked-out zone is avoided;
    ``retry_*``: backoff of rate-limited and transient calls (full jitter, bounded attempts).
    ``labels`` (the user's, checked by ``gcp.labels``) and ``workflow_label`` go on every VM
    and boot disk, beside the run's own labels (``vm_bodies``).
    """

    project: str
    zones: list[str]
    machine_types: dict[Pool, str]
    image: str
    max_run_duration_s: int
    run_label: str
    metadata: dict[str, str] = field(default_factory=dict)
    disk_gb: int = 20
    gpu_image: str | None = None
    gpu_disk_gb: int = GPU_DISK_GB
    disk_type: str = "pd-balanced"
    network: str = DEFAULT_NETWORK
    subnetwork: str | None = None
    external_ip: bool = True
    service_account: str | None = None
    scopes: list[str] = field(default_factory=lambda: list(DEFAULT_SCOPES))
    labels: dict[str, str] = field(default_factory=dict)
    workflow_label: str = ""  # the workflow's name as a label value ('' : no such label)
    endpoint: str | None = None
    bulk_min: int = 2
    exhausted_ttl_s: float = 300.0
    retry_attempts: int = COMPUTE.attempts
    retry_base_s: float = COMPUTE.base
    retry_cap_s: float = COMPUTE.cap
    call_timeout_s: float = CALLS.timeout_s
    close_timeout_s: float = TEARDOWN_TIMEOUT_S
    # across regions: USD per hour of work of a VM of (pool, shape) in a region, which orders
    # the regions (placement.py); None: the zones' own order
    region_weight: RegionWeight | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not self.zones:
            raise ValueError("GceConfig.zones is empty: give at least one zone, e.g. us-central1-a")
        if int(self.max_run_duration_s) <= 0:
            raise ValueError("GceConfig.max_run_duration_s must be > 0: it caps every VM's life")
        if not LABEL_VALUE_RE.fullmatch(self.run_label):
            raise ValueError(f"GceConfig.run_label {self.run_label!r} is not a valid GCE label "
                             "value (lowercase letters, digits, '_' and '-', at most 63)")
        unknown = [p for p in self.machine_types if p not in POOL_LABEL_VALUES]
        if unknown or not self.machine_types:
            raise ValueError("GceConfig.machine_types needs Pool.SPOT and/or Pool.ON_DEMAND keys")
        if self.bulk_min < 1:
            raise ValueError("GceConfig.bulk_min must be at least 1")
        for zone in self.zones:  # raises ValueError on a malformed or misplaced reference
            network_interface(self.network, self.subnetwork, self.project, zone)

    @property
    def calls(self) -> CallPolicy:
        """How this engine's Compute calls are retried and bounded."""
        return CallPolicy(Backoff(self.retry_attempts, self.retry_base_s, self.retry_cap_s),
                          self.call_timeout_s)


@dataclass(frozen=True)
class Ask:
    """What one create call makes: VMs of one pool and shape (None: the run's own machine
    type of the pool), each with ``slots`` job slots."""

    pool: Pool
    slots: int
    shape: Shape | None = None

    @property
    def gpus(self) -> bool:
        return self.shape is not None and self.shape.gpus

    def failed(self, names: list[str], message: str, stop_growth: bool,
               quota: bool = False) -> CreateFailed:
        return CreateFailed(self.pool, names, message, stop_growth, shape=self.shape,
                            quota=quota)
