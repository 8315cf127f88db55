"""Executor settings: one typed dataclass, validated once, before anything is provisioned.

Each field becomes ``--expocloud-<field>`` on Snakemake's command line and ``expocloud-<field>``
in a profile.
"""

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from string import Template
from typing import Optional

from snakemake_interface_executor_plugins.settings import ExecutorSettingsBase

from expo_executor.coordinator.loop import CAPACITY_TIMEOUT
from expo_executor.coordinator.prefetch_depth import HOLD_S, MAX_DEPTH
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.records import EngineName
from expo_executor.core.requirements import SETTING as REQUIREMENTS_SETTING
from expo_executor.core.requirements import UserPin, parse_requirements
from expo_executor.cost.machines import machine_memory_mb  # noqa: F401

ON_SKIP_CHOICES = ("error", "placeholder")
ENGINE_CHOICES = tuple(name.value for name in EngineName)
WORKER_PROVIDES_CHOICES = ("conda", "apptainer")  # Snakemake's deployment method names
WORKER_SOFTWARE_CHOICES = ("pip", "image")
BUDGET_ACTIONS = ("drain", "cancel")
DEFAULT_MACHINE_TYPE = "e2-standard-2"
AUTO_MACHINE = "auto"  # a machine type chosen from the jobs (coordinator/shapes.py's AUTO)
DEFAULT_SERVICE_ACCOUNT = "default"  # the Compute Engine default account, asked for by name
SERVICE_ACCOUNT_SETTING = "--expocloud-gce-service-account"
# The cloud polls the bucket far less often: every storage operation is billed
# (see request_budget.py).
LOCAL_POLL, GCE_POLL = 0.05, 2.0
LOCAL_GRACE, GCE_GRACE = 60.0, 300.0
GCE_SLOW_POLL = 15.0
# A real VM boots in a minute or two, and the 'pip' worker software installs for a few more.
LOCAL_BOOT_TIMEOUT, GCE_BOOT_TIMEOUT = 120.0, 600.0
_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")
_LABEL = re.compile(r"[a-z][a-z0-9_-]{0,62}=[a-z0-9_-]{0,63}")
DEFAULT_PLACEHOLDER = '{"expocloud_outcome": "$outcome"}\n'


def _opt(help: str, **extra) -> dict:
    return {"help": help, "env_var": False, "required": False, **extra}


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    engine: str = field(default="local", metadata=_opt(
        "Where workers run: 'local' (processes on this machine standing in for VMs) or 'gce' "
        "(Google Compute Engine VMs; see docs/gce.md).", choices=list(ENGINE_CHOICES)))
    slots_per_worker: Optional[int] = field(default=None, metadata=_opt(
        "Job slots (cores) per worker (default: local, one worker with every core of this "
        "machine, so one job may use them all; GCE, 1, or the vCPUs of an 'auto' machine "
        "type).",
        type=int))
    max_workers: Optional[int] = field(default=None, metadata=_opt(
        "Most workers at once, of every machine shape together. Required on GCE (it bounds "
        "what a run can cost); local default: one holding every core, or with slots per "
        "worker set, as many as fit in this machine's cores.",
        type=int))
    oversubscribe: bool = field(default=False, metadata=_opt(
        "Local engine: allow more slots in total than this machine has cores (distorts "
        "deadlines)."))
    boot_delay: float = field(default=0.0, metadata=_opt(
        "Local engine: seconds a new worker takes to boot, to exercise autoscaling.", type=float))
    idle_timeout: float = field(default=5.0, metadata=_opt(
        "Seconds an idle worker is kept before it is deleted.", type=float))
    poll_interval: Optional[float] = field(default=None, metadata=_opt(
        f"Seconds between the coordinator's rounds and the workers' inbox reads (default "
        f"{LOCAL_POLL:g} local, {GCE_POLL:g} on GCE, where each read is billed).", type=float))
    slow_poll_interval: Optional[float] = field(default=None, metadata=_opt(
        f"GCE: seconds between a worker's inbox reads while its slots are all busy or nothing "
        f"has changed for a while (default {GCE_SLOW_POLL:g}); the fast rate resumes after "
        f"each change. Inbox reads dominate a large fleet's storage bill.", type=float))
    prefetch: Optional[int] = field(default=None, metadata=_opt(
        "Jobs per slot a busy worker holds beyond what it runs, to start the moment a slot "
        "frees (default 1 local; on GCE, where a busy worker reads its inbox only every slow "
        f"poll, sized to the jobs' length: about {HOLD_S:g} s of work per slot, 1 to "
        f"{MAX_DEPTH} jobs); a held job is cancelled like a running one when a timeout "
        "dominates it. With 2 or more a worker is refilled only when it runs low, and reports "
        "the jobs it solved meanwhile in one result object (fewer billed writes).",
        type=int))
    heartbeat_grace: Optional[float] = field(default=None, metadata=_opt(
        f"A worker that hears nothing from the coordinator for this many seconds kills its jobs "
        f"and deletes its VM (default {LOCAL_GRACE:g} local, {GCE_GRACE:g} on GCE).", type=float))
    boot_timeout: Optional[str] = field(default=None, metadata=_opt(
        f"A new worker that has not reported ready this long after its VM was asked for (90s, "
        f"10m, ...) is deleted and replaced; 3 such failures in a row in a pool where none came "
        f"up stop that pool (default {LOCAL_BOOT_TIMEOUT:g} s local, {GCE_BOOT_TIMEOUT:g} s on "
        f"GCE: a boot plus the startup script's installation)."))
    capacity_timeout: Optional[str] = field(default=None, metadata=_opt(
        f"GCE: how long a pool with no VM may find every zone out of capacity (stockouts) "
        f"before it stops growing for the run (its work moves to the other pool, or fails with "
        f"the reason if no VM can run it); 'never' waits for capacity however long (default "
        f"{CAPACITY_TIMEOUT / 60:g}m)."))
    on_skip: str = field(default="error", metadata=_opt(
        "What Snakemake sees for skipped and timed-out jobs: 'error', or 'placeholder' (their "
        "outputs are written with the placeholder text and reported as success, so an unchanged "
        "aggregate rule still runs).", choices=list(ON_SKIP_CHOICES)))
    placeholder_text: str = field(default=DEFAULT_PLACEHOLDER, metadata=_opt(
        "Content of placeholder outputs; $outcome, $rule, $reason and the job's wildcards as "
        "$name are substituted."))
    status_interval: float = field(default=10.0, metadata=_opt(
        "Seconds between progress lines.", type=float))
    confirm_timeouts: bool = field(default=False, metadata=_opt(
        "Re-run a family's timeout once on another, idle worker before it prunes anything; a "
        "re-run that is solved prunes nothing (a slow worker, recorded as such), one that "
        "times out again prunes, and the family's later timeouts prune at once. Needs a "
        "second worker: with only one, timeouts prune as without it."))
    no_adopt: bool = field(default=False, metadata=_opt(
        "A rerun after a crash stops the crashed run's workers (their jobs in flight run "
        "again) instead of adopting them and using their results: for a rerun after changing "
        "a rule's code or inputs."))
    run_id: Optional[str] = field(default=None, metadata=_opt(
        "Name of the run directory under .expocloud/runs (default: a time stamp)."))
    state_dir: str = field(default=".expocloud", metadata=_opt(
        "Where runs, frontiers and placeholder records are kept, relative to the workdir."))
    # -- pools (GCE) ---------------------------------------------------------------------------
    # (booleans default to False: Snakemake cannot name a default-True flag of a plugin)
    on_demand_only: bool = field(default=False, metadata=_opt(
        "GCE: no Spot VMs; every job runs on on-demand VMs."))
    spot_attempts: int = field(default=2, metadata=_opt(
        "GCE: a job preempted this many times runs on on-demand VMs from then on.", type=int))
    on_demand_min: int = field(default=0, metadata=_opt(
        "GCE: on-demand VMs kept while work is left, a reliable core.", type=int))
    max_on_demand: Optional[int] = field(default=None, metadata=_opt(
        "GCE: most on-demand VMs at once, of every machine shape together (default: a quarter of --expocloud-max-workers, at "
        "least 1 and at least --expocloud-on-demand-min).", type=int))
    budget: Optional[float] = field(default=None, metadata=_opt(
        "GCE: spending cap in USD for the run's VMs, priced from the price snapshot "
        "('expocloud prices'): near it no VM is created; at it the run drains or cancels "
        "(--expocloud-budget-action); the run never knowingly overspends it.", type=float))
    budget_action: str = field(default="drain", metadata=_opt(
        "GCE: at the budget, 'drain' (running jobs may finish, queued ones do not run; all "
        "stops if even that would overrun) or 'cancel' (everything stops at once).",
        choices=list(BUDGET_ACTIONS)))
    no_straggler_rule: bool = field(default=False, metadata=_opt(
        "GCE: turn off the straggler rule (once the remaining work fits the on-demand pool, "
        "queued jobs go there, so preemptions cannot hold the end of a sweep hostage)."))
    # -- GCE -----------------------------------------------------------------------------------
    bucket: Optional[str] = field(default=None, metadata=_opt(
        "GCE: coordination bucket gs://BUCKET/PREFIX (default: the default storage prefix "
        "followed by /.expocloud)."))
    gce_project: Optional[str] = field(default=None, metadata=_opt(
        "GCE: project id; required on GCE."))
    gce_zones: Optional[str] = field(default=None, metadata=_opt(
        "GCE: zones of one region in order of preference, comma separated; a stockout moves "
        "to the next. Required on GCE."))
    machine_type: Optional[str] = field(default=None, metadata=_opt(
        f"GCE: machine type of the workers (default {DEFAULT_MACHINE_TYPE}), or 'auto': per "
        "pool, the type with the lowest expected cost per job, from the jobs' threads, memory "
        "and runtime, the price snapshot and the preemption model (docs/cost.md)."))
    gce_machine_type: Optional[str] = field(default=None, metadata=_opt(
        "GCE: machine type of Spot workers, or 'auto' (default: --expocloud-machine-type)."))
    gce_on_demand_machine_type: Optional[str] = field(default=None, metadata=_opt(
        "GCE: machine type of on-demand workers, or 'auto' (default: the Spot one)."))
    gce_image: str = field(default="projects/debian-cloud/global/images/family/debian-12",
                           metadata=_opt("GCE: boot image or image family URL."))
    gce_gpu_image: Optional[str] = field(default=None, metadata=_opt(
        "GCE: boot image of VMs with GPUs, needed when a rule asks for GPUs: an image with the "
        "NVIDIA driver (or a Deep Learning VM image's first-boot driver install) and what "
        "--expocloud-gce-worker-software needs (pip: python3 of this machine's version; image: "
        "the worker installed), built as docs/gce.md says."))
    gce_worker_software: str = field(default="pip", metadata=_opt(
        "GCE: 'pip' (the startup script installs the host's exact versions) or 'image' (the "
        "image already has them).", choices=list(WORKER_SOFTWARE_CHOICES)))
    gce_worker_provides: Optional[str] = field(default=None, metadata=_opt(
        "GCE: what the worker image provides for Snakemake's --software-deployment-method, "
        "comma separated: conda, apptainer (environments and images are then built or pulled "
        "once per VM and reused by its later jobs)."))
    gce_pip_index_url: Optional[str] = field(default=None, metadata=_opt(
        "GCE: package index the workers install from (default PyPI)."))
    worker_requirements: Optional[str] = field(default=None, metadata=_opt(
        "A requirements file of your own Python packages for the jobs: exact pins only "
        "(name==version, optionally with --hash=sha256:...; list dependencies too, nothing "
        "is resolved). GCE 'pip' workers install them once per VM into the worker's venv "
        "(with --require-hashes when hashed); 'image' workers must already have them. The "
        "local engine installs nothing: jobs use this machine's environment."))
    gce_disk_gb: int = field(default=20, metadata=_opt("GCE: boot disk size in GB.", type=int))
    gce_disk_type: str = field(default="pd-balanced", metadata=_opt("GCE: boot disk type."))
    gce_network: str = field(default="global/networks/default", metadata=_opt(
        "GCE: VPC network, a name or a URL (global/networks/NAME)."))
    gce_subnetwork: Optional[str] = field(default=None, metadata=_opt(
        "GCE: subnetwork, a name (completed in the zones' region) or a URL "
        "(projects/PROJECT/regions/REGION/subnetworks/NAME, for Shared VPC); with it and the "
        "default network, the network is the subnetwork's."))
    gce_internal_ip_only: bool = field(default=False, metadata=_opt(
        "GCE: no external IP on workers (then they need Cloud NAT or Private Google Access to "
        "reach GCS and the package index). Workers listen on no port either way."))
    gce_service_account: Optional[str] = field(default=None, metadata=_opt(
        "GCE: the workers' service account, e.g. expocloud-worker@PROJECT.iam."
        "gserviceaccount.com (docs/gce.md: least privilege); required on GCE. 'default' asks "
        "for the "
        "Compute Engine default account, which usually holds Editor on the whole project."))
    gce_scopes: str = field(default="https://www.googleapis.com/auth/devstorage.read_write,"
                                    "https://www.googleapis.com/auth/compute", metadata=_opt(
        "GCE: OAuth scopes of the workers, comma separated (least privilege: storage and "
        "compute for deleting themselves)."))
    gce_labels: Optional[str] = field(default=None, metadata=_opt(
        "GCE: extra labels key=value,key=value on every VM."))
    gce_max_run_duration: str = field(default="24h", metadata=_opt(
        "GCE: hard cap on each VM's life, the last resort against runaway cost."))
    gce_endpoint: Optional[str] = field(default=None, metadata=_opt(
        "GCE: Compute API endpoint (only for the local fake: profiles/gce-emulated)."))
    gce_skip_doctor: bool = field(default=False, metadata=_opt(
        "GCE: do not run the checks of 'expocloud doctor' (APIs, permissions, the worker "
        "account, the bucket, machine types, quotas, Python, NAT) before the first VM; for a "
        "check that is wrong about your project (please say so in an issue)."))


def validate(settings: ExecutorSettings) -> None:
    """Raise ExpoError naming the setting and the fix for the first bad value (unset slots
    checked as their default)."""
    _check_choices(settings)
    settings = with_default_slots(settings)
    _check_numbers(settings)
    _check_timing(settings)
    _check_pools(settings)
    if settings.engine == EngineName.GCE:
        _validate_gce(settings)
    _check_budget(settings)
    _check_names(settings)
    _check_local_cores(settings)
    worker_requirements(settings)


def _positive(name: str, value: float, allow_zero: bool = False) -> None:
    if value is None or value < 0 or (value == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "a positive number"
        raise ExpoError(f"--expocloud-{name.replace('_', '-')}", f"{value!r} is not valid",
                        f"give {bound}")


def worker_provides(settings: ExecutorSettings) -> frozenset[str]:
    """The software deployment methods the GCE worker image provides (checked names)."""
    given = {p.strip() for p in (settings.gce_worker_provides or "").split(",") if p.strip()}
    unknown = sorted(given - set(WORKER_PROVIDES_CHOICES))
    if unknown:
        raise ExpoError("--expocloud-gce-worker-provides", f"unknown value {unknown[0]!r}",
                        f"use some of {', '.join(WORKER_PROVIDES_CHOICES)}, comma separated")
    return frozenset(given)


def _check_choices(settings: ExecutorSettings) -> None:
    worker_provides(settings)
    if settings.engine not in ENGINE_CHOICES:
        raise ExpoError("--expocloud-engine", f"unknown engine {settings.engine!r}",
                        f"use one of {', '.join(ENGINE_CHOICES)}")
    if settings.on_skip not in ON_SKIP_CHOICES:
        raise ExpoError("--expocloud-on-skip", f"unknown value {settings.on_skip!r}",
                        f"use one of {', '.join(ON_SKIP_CHOICES)}")


def with_default_slots(settings: ExecutorSettings,
                       cores: int | None = None) -> ExecutorSettings:
    """Settings whose slots per worker are set: both front ends call this before anything
    reads them. Locally the machine's cores (or ``cores`` of them, when the user says how many
    with Snakemake's ``--cores``) are shared among ``max_workers``, one worker by default: a
    job may then use every core, and jobs pack as under plain Snakemake. On GCE 1, which an
    'auto' machine type's vCPUs replace."""
    if settings.slots_per_worker is not None:
        return settings
    if settings.engine != EngineName.LOCAL:
        return dataclasses.replace(settings, slots_per_worker=1)
    machine = os.cpu_count() or 1
    workers = settings.max_workers or 1
    return dataclasses.replace(settings, max_workers=workers,
                               slots_per_worker=max(1, min(cores or machine, machine) // workers))


def _check_numbers(settings: ExecutorSettings) -> None:
    _positive("slots_per_worker", settings.slots_per_worker)
    if settings.max_workers is not None:
        _positive("max_workers", settings.max_workers)
    _positive("boot_delay", settings.boot_delay, allow_zero=True)
    _positive("idle_timeout", settings.idle_timeout, allow_zero=True)
    _positive("poll_interval", poll_interval(settings))
    _positive("heartbeat_grace", heartbeat_grace(settings))
    _positive("status_interval", settings.status_interval)


def _check_timing(settings: ExecutorSettings) -> None:
    """Timeouts that a poll or a boot delay would make meaningless."""
    poll, grace = poll_interval(settings), heartbeat_grace(settings)
    boot = boot_timeout(settings)
    if boot < 5 * poll:
        raise ExpoError("--expocloud-boot-timeout", f"{boot:g} s is too short for a poll "
                        f"interval of {poll:g} s", "make it at least 5 poll intervals")
    if settings.engine == EngineName.LOCAL and boot <= settings.boot_delay:
        raise ExpoError("--expocloud-boot-timeout", f"{boot:g} s is not longer than "
                        f"--expocloud-boot-delay {settings.boot_delay:g} s",
                        "make it longer than the boot delay")
    capacity_timeout(settings)
    _positive("prefetch", prefetch(settings), allow_zero=True)
    slow = slow_poll_interval(settings)
    _positive("slow_poll_interval", slow)
    if settings.engine == EngineName.GCE and grace < 5 * slow:
        raise ExpoError("--expocloud-heartbeat-grace",
                        f"{grace:g} s is too short for a slow poll interval of {slow:g} s",
                        "make it at least 5 slow poll intervals")
    if grace < 5 * poll:
        raise ExpoError("--expocloud-heartbeat-grace",
                        f"{grace:g} s is too short for a poll interval of "
                        f"{poll:g} s", "make it at least 5 poll intervals")


def _check_pools(settings: ExecutorSettings) -> None:
    _positive("spot_attempts", settings.spot_attempts, allow_zero=True)
    _positive("on_demand_min", settings.on_demand_min, allow_zero=True)
    if settings.max_on_demand is not None:
        _positive("max_on_demand", settings.max_on_demand, allow_zero=True)
        if settings.max_on_demand < settings.on_demand_min:
            raise ExpoError("--expocloud-max-on-demand",
                            f"{settings.max_on_demand} is below --expocloud-on-demand-min "
                            f"{settings.on_demand_min}", "raise it or lower the minimum")


def _check_budget(settings: ExecutorSettings) -> None:
    if settings.budget is not None:
        if settings.engine != EngineName.GCE:
            raise ExpoError("--expocloud-budget", "local workers cost nothing to cap",
                            "drop it, or run with --expocloud-engine gce")
        _positive("budget", settings.budget)
    if settings.budget_action not in BUDGET_ACTIONS:
        raise ExpoError("--expocloud-budget-action", f"unknown value {settings.budget_action!r}",
                        f"use one of {', '.join(BUDGET_ACTIONS)}")


def _check_names(settings: ExecutorSettings) -> None:
    if settings.run_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
                                                        settings.run_id):
        raise ExpoError("--expocloud-run-id", f"{settings.run_id!r} is not a valid run name",
                        "use letters, digits, '.', '_' and '-' (at most 64)")
    if not Template(settings.placeholder_text).is_valid():
        raise ExpoError("--expocloud-placeholder-text", "it is not a valid $-template",
                        "write $name for substitutions and $$ for a literal dollar sign")


def _check_local_cores(settings: ExecutorSettings) -> None:
    cores = os.cpu_count() or 1
    if (settings.engine == EngineName.LOCAL and not settings.oversubscribe
            and settings.slots_per_worker > cores):
        raise ExpoError("--expocloud-slots-per-worker",
                        f"{settings.slots_per_worker} slots exceed this machine's {cores} cores",
                        "lower it or set --expocloud-oversubscribe")


def worker_requirements(settings: ExecutorSettings) -> tuple[UserPin, ...]:
    """The pins of ``--expocloud-worker-requirements`` (empty when unset), read and checked on
    every engine, so that a profile's mistake shows before a run, wherever it runs. ExpoError
    when the file cannot be read or a line is not an exact pin."""
    path = settings.worker_requirements
    if not path:
        return ()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ExpoError(REQUIREMENTS_SETTING, f"{path} does not exist",
                        "give the path of your requirements file (relative to the directory "
                        "you run in), or drop the setting") from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else \
            type(exc).__name__
        raise ExpoError(REQUIREMENTS_SETTING, f"cannot read {path} ({reason})",
                        "give a readable UTF-8 text file of name==version lines") from None
    return parse_requirements(text, path)


def local_max_workers(settings: ExecutorSettings) -> int:
    """Never more local slots in total than cores, unless the user asks to oversubscribe."""
    cores = os.cpu_count() or 1
    fitting = max(1, cores // settings.slots_per_worker)
    if settings.max_workers is None:
        return fitting
    if settings.oversubscribe:
        return settings.max_workers
    if settings.max_workers > fitting:
        raise ExpoError("--expocloud-max-workers",
                        f"{settings.max_workers} workers x {settings.slots_per_worker} slots "
                        f"exceed this machine's {cores} cores",
                        f"use at most {fitting} or set --expocloud-oversubscribe")
    return settings.max_workers


def poll_interval(settings: ExecutorSettings) -> float:
    if settings.poll_interval is not None:
        return settings.poll_interval
    return GCE_POLL if settings.engine == EngineName.GCE else LOCAL_POLL


def prefetch(settings: ExecutorSettings) -> int:
    """Jobs per slot a busy worker holds (Scheduler.prefetch) at the start of the run."""
    if settings.prefetch is not None:
        return settings.prefetch
    return 1  # the next job of a slot waits on its worker, not for the next two polls


def prefetch_hold_s(settings: ExecutorSettings) -> float | None:
    """Seconds of work a slot holds once jobs have ended (coordinator/prefetch_depth.py): on
    GCE unless ``--expocloud-prefetch`` fixes the depth; None: the depth stays fixed."""
    if settings.prefetch is not None or settings.engine != EngineName.GCE:
        return None
    return HOLD_S


def slow_poll_interval(settings: ExecutorSettings) -> float:
    if settings.slow_poll_interval is not None:
        return settings.slow_poll_interval
    return max(poll_interval(settings), GCE_SLOW_POLL)


def heartbeat_grace(settings: ExecutorSettings) -> float:
    if settings.heartbeat_grace is not None:
        return settings.heartbeat_grace
    return GCE_GRACE if settings.engine == EngineName.GCE else LOCAL_GRACE


def heartbeat_interval(settings: ExecutorSettings) -> float:
    """Seconds between the coordinator's pulses: often enough that a healthy worker never
    trips its dead man's switch (each pulse is a billed write, hence not more often)."""
    poll, grace = poll_interval(settings), heartbeat_grace(settings)
    return max(poll, grace / 4 if grace > 60 else min(10.0, grace / 4))


def boot_timeout(settings: ExecutorSettings) -> float:
    """Seconds a new worker has to report ready (ExpoError if the value is not a duration)."""
    if settings.boot_timeout is None:
        return GCE_BOOT_TIMEOUT if settings.engine == EngineName.GCE else LOCAL_BOOT_TIMEOUT
    return parse_duration(settings.boot_timeout, "--expocloud-boot-timeout")


def capacity_timeout(settings: ExecutorSettings) -> float:
    """Seconds a pool with no VM may meet stockouts in every zone before it stops growing;
    infinite for 'never' (ExpoError if the value is neither a duration nor 'never')."""
    if settings.capacity_timeout is None:
        return CAPACITY_TIMEOUT
    value = settings.capacity_timeout
    if str(value).strip().lower() == "never":
        return math.inf
    try:
        return parse_duration(value, "--expocloud-capacity-timeout")
    except ExpoError:
        raise ExpoError("--expocloud-capacity-timeout", f"cannot read the duration {value!r}",
                        "give a positive duration such as 90s, 30m or 2h, or never") from None


def zones(settings: ExecutorSettings) -> list[str]:
    return [z.strip() for z in (settings.gce_zones or "").split(",") if z.strip()]


def labels(settings: ExecutorSettings) -> dict[str, str]:
    pairs = [p.strip() for p in (settings.gce_labels or "").split(",") if p.strip()]
    return dict(p.split("=", 1) for p in pairs)


def max_on_demand(settings: ExecutorSettings, max_workers: int) -> int:
    if settings.max_on_demand is not None:
        return settings.max_on_demand
    return max(1, settings.on_demand_min, -(-max_workers // 4))


def _validate_gce(settings: ExecutorSettings) -> None:
    """Everything a GCE run needs, checked before a VM exists."""
    if not settings.gce_project:
        raise ExpoError("--expocloud-gce-project", "the GCE engine needs a project",
                        "set expocloud-gce-project in the profile")
    if settings.max_workers is None:
        raise ExpoError("--expocloud-max-workers", "the GCE engine needs a cap on workers",
                        "set expocloud-max-workers (it bounds what a run can cost)")
    if not zones(settings):
        raise ExpoError("--expocloud-gce-zones", "no zone given",
                        "set expocloud-gce-zones, e.g. us-central1-a,us-central1-b")
    for zone in zones(settings):
        if not _ZONE.fullmatch(zone):
            raise ExpoError("--expocloud-gce-zones", f"{zone!r} is not a zone name",
                            "write zones like us-central1-a, comma separated")
    if len({z.rsplit("-", 1)[0] for z in zones(settings)}) > 1:
        raise ExpoError("--expocloud-gce-zones", "the zones span several regions",
                        "keep the workers in the bucket's region: one region's zones only")
    for pair in [p.strip() for p in (settings.gce_labels or "").split(",") if p.strip()]:
        if not _LABEL.fullmatch(pair) or pair.startswith("expocloud-"):
            raise ExpoError("--expocloud-gce-labels", f"{pair!r} is not a valid label",
                            "write key=value with lowercase letters, digits, '_' and '-' "
                            "(expocloud-* keys are reserved)")
    if settings.bucket is not None:
        check_bucket_url(settings.bucket, "--expocloud-bucket")
    if settings.gce_worker_software not in WORKER_SOFTWARE_CHOICES:
        raise ExpoError("--expocloud-gce-worker-software",
                        f"unknown value {settings.gce_worker_software!r}",
                        f"use one of {', '.join(WORKER_SOFTWARE_CHOICES)}")
    if settings.gce_disk_gb is None or settings.gce_disk_gb < 10:
        raise ExpoError("--expocloud-gce-disk-gb", f"{settings.gce_disk_gb!r} is too small",
                        "give at least 10 (GB)")
    parse_duration(settings.gce_max_run_duration, "--expocloud-gce-max-run-duration")
    _check_network(settings)
    if settings.worker_requirements:  # before any VM: a pin the worker's own software breaks
        from expo_executor.engines.gce.startup import check_clashes
        check_clashes(worker_requirements(settings))
    if not settings.on_demand_only and max_on_demand(settings, settings.max_workers) == 0:
        raise ExpoError("--expocloud-max-on-demand", "0 leaves no VM for jobs preempted "
                        f"{settings.spot_attempts} times", "allow at least 1 on-demand VM")
    _check_service_account(settings)


def _check_service_account(settings: ExecutorSettings) -> None:
    """The workers' identity is named, never assumed: left unset, GCE would attach the Compute
    Engine default account, which usually holds Editor on the whole project (docs/security.md).
    'default' asks for it explicitly."""
    account = (settings.gce_service_account or "").strip()
    fix = (f"set expocloud-gce-service-account: expocloud-worker@"
           f"{settings.gce_project or 'PROJECT'}.iam.gserviceaccount.com, created with least "
           "privilege as docs/gce.md says ('Service accounts and IAM'), or "
           f"'{DEFAULT_SERVICE_ACCOUNT}' for the Compute Engine default account")
    if not account:
        raise ExpoError(SERVICE_ACCOUNT_SETTING, "a GCE run needs the workers' service account "
                        "named", fix)
    if account != DEFAULT_SERVICE_ACCOUNT and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+",
                                                               account):
        raise ExpoError(SERVICE_ACCOUNT_SETTING, f"{account!r} is not a service account's "
                        "email", fix)


def _check_network(settings: ExecutorSettings) -> None:
    """The network and subnetwork as names or URLs the Compute API takes, a subnetwork in the
    zones' region (a bare name is completed there, per zone)."""
    from expo_executor.engines.gce.references import network_url, subnetwork_url

    try:
        network_url(settings.gce_network)
    except ValueError as exc:
        raise ExpoError("--expocloud-gce-network", str(exc),
                        "give the network's name, e.g. default, or its URL") from None
    for zone in zones(settings) if settings.gce_subnetwork else []:
        try:
            subnetwork_url(settings.gce_subnetwork, settings.gce_project or "", zone)
        except ValueError as exc:
            raise ExpoError("--expocloud-gce-subnetwork", str(exc),
                            "give the subnetwork's name (completed in the zones' region) or "
                            "its URL projects/PROJECT/regions/REGION/subnetworks/NAME") from None


def worker_memory_mb(settings: ExecutorSettings, workers: int) -> int:
    """The memory every worker of the run has for its jobs (0: unknown, not tracked).

    Locally, this machine's memory shared among its workers; on GCE, the smaller of the two
    pools' machine types, so that a job fits wherever the scheduler sends it.
    """
    if settings.engine == EngineName.LOCAL:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
        return int(total // max(1, workers))
    types = set(pool_machine_types(settings))
    sizes = [machine_memory_mb(t) for t in types]
    return 0 if None in sizes else min(s for s in sizes if s is not None)


def pool_machine_types(settings: ExecutorSettings) -> tuple[str, str]:
    """(Spot, on-demand) machine types as configured; either may be 'auto'."""
    spot = settings.gce_machine_type or settings.machine_type or DEFAULT_MACHINE_TYPE
    on_demand = settings.gce_on_demand_machine_type or settings.gce_machine_type \
        or settings.machine_type or DEFAULT_MACHINE_TYPE
    return spot, on_demand


_BUCKET_CHARS = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]")
_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
_GOOGLE_LIKE = re.compile(r"g(o|0)(o|0)g(l|1)e")
BUCKET_FIX = ("name the bucket per GCS rules: 3-63 lowercase letters, digits, '-', '_' and '.', "
              "starting and ending with a letter or digit, as gs://BUCKET/PREFIX")
CREDENTIALS_SETTING = "GOOGLE_APPLICATION_CREDENTIALS"
CREDENTIALS_FIX = ("run 'gcloud auth application-default login', or point "
                   "GOOGLE_APPLICATION_CREDENTIALS at a valid service-account key file")


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid GCS bucket name (None: it is), by GCS's naming rules.

    Checked here, before anything starts, because GCS would only refuse it at the first
    request, after staging had begun."""
    if not name:
        return "no bucket name"
    parts = name.split(".")
    if len(name) < 3 or len(name) > (222 if len(parts) > 1 else 63):
        return f"bucket name {name!r} has {len(name)} characters (GCS allows 3 to 63)"
    if not _BUCKET_CHARS.fullmatch(name):
        return (f"bucket name {name!r} has characters GCS refuses (only lowercase letters, "
                "digits, '-', '_' and '.', starting and ending with a letter or digit)")
    if any(not part or len(part) > 63 for part in parts):
        return f"bucket name {name!r} has an empty or over-long dot-separated part"
    if _IPV4.fullmatch(name):
        return f"bucket name {name!r} is an IP address, which GCS refuses"
    if name.startswith("goog") or _GOOGLE_LIKE.search(name):
        return f"bucket name {name!r} starts with 'goog' or contains 'google', which GCS refuses"
    return None


def check_bucket_url(url: str, setting: str) -> None:
    """Raise ExpoError naming ``setting`` unless ``url`` is gs://BUCKET[/PREFIX] with a valid
    bucket name."""
    if not url.startswith("gs://"):
        raise ExpoError(setting, f"{url!r} is not a gs:// URL", "write gs://BUCKET/PREFIX")
    problem = bucket_name_problem(url[len("gs://"):].split("/", 1)[0])
    if problem:
        raise ExpoError(setting, problem, BUCKET_FIX)


def needs_credentials(settings: ExecutorSettings) -> bool:
    """A GCE run talks to the real GCS or Compute API (not only to the local fakes)."""
    return settings.engine == EngineName.GCE and (settings.gce_endpoint is None
                                         or not os.environ.get("STORAGE_EMULATOR_HOST"))


def check_credentials() -> None:
    """Raise a one-line ExpoError when Google's Application Default Credentials cannot load.

    Called before the bucket, staging or any VM is touched, so a bad key file is a clear error
    and not a traceback from deep inside google-auth after work began. A key file named by
    GOOGLE_APPLICATION_CREDENTIALS is read locally: failing needs no network call.
    """
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    path = os.environ.get(CREDENTIALS_SETTING)
    try:
        if path:
            if not os.path.isfile(path):
                raise ExpoError(CREDENTIALS_SETTING, f"{path!r} is not a file", CREDENTIALS_FIX)
            try:  # google-auth itself fails on some shapes with an AttributeError
                with open(path, encoding="utf-8") as handle:
                    info = json.load(handle)
            except (OSError, ValueError) as exc:
                raise DefaultCredentialsError(f"not readable JSON: {exc}") from None
            if not isinstance(info, dict):
                raise DefaultCredentialsError("not a JSON object")
            google.auth.load_credentials_from_file(path)
        else:
            google.auth.default()
    except DefaultCredentialsError as exc:
        detail = " ".join(str(exc).split())[:200]
        where = f"{path!r} is not a usable credentials file" if path else \
            "no Application Default Credentials were found"
        raise ExpoError(CREDENTIALS_SETTING, f"{where} ({detail})", CREDENTIALS_FIX) from None
