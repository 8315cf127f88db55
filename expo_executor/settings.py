"""Executor settings: one typed dataclass, validated once, before anything is provisioned.

Each field becomes ``--expocloud-<field>`` on Snakemake's command line and ``expocloud-<field>``
in a profile.
"""

import os
import re
from dataclasses import dataclass, field
from string import Template
from typing import Optional

from snakemake_interface_executor_plugins.settings import ExecutorSettingsBase

from .errors import ExpoError

ON_SKIP_CHOICES = ("error", "placeholder")
ENGINE_CHOICES = ("local",)
DEFAULT_PLACEHOLDER = '{"expocloud_outcome": "$outcome"}\n'


def _opt(help: str, **extra) -> dict:
    return {"help": help, "env_var": False, "required": False, **extra}


@dataclass
class ExecutorSettings(ExecutorSettingsBase):
    engine: str = field(default="local", metadata=_opt(
        "Where workers run: 'local' (processes on this machine standing in for VMs).",
        choices=list(ENGINE_CHOICES)))
    slots_per_worker: int = field(default=1, metadata=_opt(
        "Job slots (cores) per worker VM.", type=int))
    max_workers: Optional[int] = field(default=None, metadata=_opt(
        "Most workers at once (local default: as many as fit in this machine's cores).", type=int))
    oversubscribe: bool = field(default=False, metadata=_opt(
        "Local engine: allow more slots in total than this machine has cores (distorts "
        "deadlines)."))
    boot_delay: float = field(default=0.0, metadata=_opt(
        "Local engine: seconds a new worker takes to boot, to exercise autoscaling.", type=float))
    idle_timeout: float = field(default=5.0, metadata=_opt(
        "Seconds an idle worker is kept before it is deleted.", type=float))
    poll_interval: float = field(default=0.05, metadata=_opt(
        "Seconds between the coordinator's rounds and the workers' inbox reads.", type=float))
    heartbeat_grace: float = field(default=60.0, metadata=_opt(
        "A worker that hears nothing from the coordinator for this many seconds kills its jobs "
        "and shuts its VM down.", type=float))
    on_skip: str = field(default="error", metadata=_opt(
        "What Snakemake sees for skipped and timed-out jobs: 'error', or 'placeholder' (their "
        "outputs are written with the placeholder text and reported as success, so an unchanged "
        "aggregate rule still runs).", choices=list(ON_SKIP_CHOICES)))
    placeholder_text: str = field(default=DEFAULT_PLACEHOLDER, metadata=_opt(
        "Content of placeholder outputs; $outcome, $rule, $reason and the job's wildcards as "
        "$name are substituted."))
    status_interval: float = field(default=10.0, metadata=_opt(
        "Seconds between progress lines.", type=float))
    run_id: Optional[str] = field(default=None, metadata=_opt(
        "Name of the run directory under .expocloud/runs (default: a time stamp)."))
    state_dir: str = field(default=".expocloud", metadata=_opt(
        "Where runs, frontiers and placeholder records are kept, relative to the workdir."))


def validate(settings: ExecutorSettings) -> None:
    """Raise ExpoError naming the setting and the fix for the first bad value."""
    def positive(name: str, value: float, allow_zero: bool = False) -> None:
        if value is None or value < 0 or (value == 0 and not allow_zero):
            bound = "zero or more" if allow_zero else "a positive number"
            raise ExpoError(f"--expocloud-{name.replace('_', '-')}", f"{value!r} is not valid",
                            f"give {bound}")

    if settings.engine not in ENGINE_CHOICES:
        raise ExpoError("--expocloud-engine", f"unknown engine {settings.engine!r}",
                        f"use one of {', '.join(ENGINE_CHOICES)}")
    if settings.on_skip not in ON_SKIP_CHOICES:
        raise ExpoError("--expocloud-on-skip", f"unknown value {settings.on_skip!r}",
                        f"use one of {', '.join(ON_SKIP_CHOICES)}")
    positive("slots_per_worker", settings.slots_per_worker)
    if settings.max_workers is not None:
        positive("max_workers", settings.max_workers)
    positive("boot_delay", settings.boot_delay, allow_zero=True)
    positive("idle_timeout", settings.idle_timeout, allow_zero=True)
    positive("poll_interval", settings.poll_interval)
    positive("heartbeat_grace", settings.heartbeat_grace)
    positive("status_interval", settings.status_interval)
    if settings.heartbeat_grace < 5 * settings.poll_interval:
        raise ExpoError("--expocloud-heartbeat-grace",
                        f"{settings.heartbeat_grace:g} s is too short for a poll interval of "
                        f"{settings.poll_interval:g} s", "make it at least 5 poll intervals")
    if settings.run_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
                                                        settings.run_id):
        raise ExpoError("--expocloud-run-id", f"{settings.run_id!r} is not a valid run name",
                        "use letters, digits, '.', '_' and '-' (at most 64)")
    if not Template(settings.placeholder_text).is_valid():
        raise ExpoError("--expocloud-placeholder-text", "it is not a valid $-template",
                        "write $name for substitutions and $$ for a literal dollar sign")
    cores = os.cpu_count() or 1
    if (settings.engine == "local" and not settings.oversubscribe
            and settings.slots_per_worker > cores):
        raise ExpoError("--expocloud-slots-per-worker",
                        f"{settings.slots_per_worker} slots exceed this machine's {cores} cores",
                        "lower it or set --expocloud-oversubscribe")


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
