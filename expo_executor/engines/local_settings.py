"""The local engine's own settings and checks: workers are processes on this machine, so its
cores and memory are what they share.

No ``from __future__ import annotations``: the fields' types are read as types (see
``settings.fields``).
"""

import os
from dataclasses import dataclass, field

from expo_executor.core.errors import ExpoError
from expo_executor.settings.checks import positive
from expo_executor.settings.fields import Settings, option
from expo_executor.settings.values import boot_timeout


@dataclass
class LocalFields:
    """The fields only the local engine reads (``coordinator.settings.ExecutorSettings`` has
    them beside every other engine's)."""

    oversubscribe: bool = field(default=False, metadata=option(
        "Local engine: allow more slots in total than this machine has cores (distorts "
        "deadlines)."))
    boot_delay: float = field(default=0.0, metadata=option(
        "Local engine: seconds a new worker takes to boot, to exercise autoscaling.", type=float))


@dataclass
class LocalSettings(LocalFields, Settings):
    """The settings a local run reads."""


def check_fields(settings: LocalSettings) -> None:
    """The local fields' values, checked whatever the engine (a profile's mistake shows)."""
    positive("boot_delay", settings.boot_delay, allow_zero=True)


def check_run(settings: LocalSettings) -> None:
    """What a local run needs: a boot timeout longer than the boot delay, no budget (its
    workers cost nothing), and no more slots per worker than this machine has cores."""
    boot = boot_timeout(settings)
    if boot <= settings.boot_delay:
        raise ExpoError("--expocloud-boot-timeout", f"{boot:g} s is not longer than "
                        f"--expocloud-boot-delay {settings.boot_delay:g} s",
                        "make it longer than the boot delay")
    if settings.budget is not None:
        raise ExpoError("--expocloud-budget", "local workers cost nothing to cap",
                        "drop it, or run with --expocloud-engine gce")
    cores = os.cpu_count() or 1
    if not settings.oversubscribe and settings.slots_per_worker > cores:
        raise ExpoError("--expocloud-slots-per-worker",
                        f"{settings.slots_per_worker} slots exceed this machine's {cores} cores",
                        "lower it or set --expocloud-oversubscribe")


def local_max_workers(settings: LocalSettings) -> int:
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


def local_worker_memory_mb(workers: int) -> int:
    """This machine's memory shared among its workers."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // (1024 * 1024)
    return int(total // max(1, workers))
