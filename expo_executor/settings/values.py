"""The values a run uses: the setting the user gave, or its engine's default (``engine_defaults``).

Both front ends, the coordinator's launch, ``expocloud doctor`` and the simulator read them
here, so a run, its checks and its simulation never disagree on a default.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.core.pool_health import CAPACITY_TIMEOUT
from expo_executor.core.requirements import SETTING as REQUIREMENTS_SETTING
from expo_executor.core.requirements import UserPin, parse_requirements
from expo_executor.settings.engine_defaults import defaults_of
from expo_executor.settings.fields import Settings


def poll_interval(settings: Settings) -> float:
    if settings.poll_interval is not None:
        return settings.poll_interval
    return defaults_of(settings.engine).poll


def slow_poll_interval(settings: Settings) -> float:
    if settings.slow_poll_interval is not None:
        return settings.slow_poll_interval
    return max(poll_interval(settings), defaults_of(settings.engine).slow_poll)


def heartbeat_grace(settings: Settings) -> float:
    if settings.heartbeat_grace is not None:
        return settings.heartbeat_grace
    return defaults_of(settings.engine).grace


def heartbeat_interval(settings: Settings) -> float:
    """Seconds between the coordinator's pulses: often enough that a healthy worker never
    trips its dead man's switch (each pulse is a billed write, hence not more often)."""
    poll, grace = poll_interval(settings), heartbeat_grace(settings)
    return max(poll, grace / 4 if grace > 60 else min(10.0, grace / 4))


def boot_timeout(settings: Settings) -> float:
    """Seconds a new worker has to report ready (ExpoError if the value is not a duration)."""
    if settings.boot_timeout is None:
        return defaults_of(settings.engine).boot_timeout
    return parse_duration(settings.boot_timeout, "--expocloud-boot-timeout")


def capacity_timeout(settings: Settings) -> float:
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


def prefetch(settings: Settings) -> int:
    """Jobs per slot a busy worker holds (Scheduler.prefetch) at the start of the run."""
    if settings.prefetch is not None:
        return settings.prefetch
    return 1  # the next job of a slot waits on its worker, not for the next two polls


def prefetch_hold_s(settings: Settings) -> float | None:
    """Seconds of work a slot holds once jobs have ended (coordinator/prefetch_depth.py), by
    the engine's default unless ``--expocloud-prefetch`` fixes the depth; None: the depth stays
    fixed."""
    if settings.prefetch is not None:
        return None
    return defaults_of(settings.engine).prefetch_hold_s


def max_on_demand(settings: Settings, max_workers: int) -> int:
    if settings.max_on_demand is not None:
        return settings.max_on_demand
    return max(1, settings.on_demand_min, -(-max_workers // 4))


def with_default_slots(settings: Settings, cores: int | None = None) -> Settings:
    """Settings whose slots per worker are set: both front ends call this before anything
    reads them. By the engine's default (GCE: 1, which an 'auto' machine type's vCPUs
    replace); where it has none (the local engine) the machine's cores (or ``cores`` of them,
    when the user says how many with Snakemake's ``--cores``) are shared among
    ``max_workers``, one worker by default: a job may then use every core, and jobs pack as
    under plain Snakemake."""
    if settings.slots_per_worker is not None:
        return settings
    default = defaults_of(settings.engine).slots_per_worker
    if default is not None:
        return dataclasses.replace(settings, slots_per_worker=default)
    machine = os.cpu_count() or 1
    workers = settings.max_workers or 1
    return dataclasses.replace(settings, max_workers=workers,
                               slots_per_worker=max(1, min(cores or machine, machine) // workers))


def worker_requirements(settings: Settings) -> tuple[UserPin, ...]:
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


def hardness_model(settings: Settings, skip_hinted: bool = False) -> str:
    """The runtime model in force: as given, else 'learned' with --expocloud-skip-above or
    when a CWL tool's hint gives skipAbove (``skip_hinted``: a skip needs a model, and one
    model setting serves the run), else 'none' (the declared order only, as before the model)."""
    if settings.hardness_model is not None:
        return settings.hardness_model
    return "learned" if settings.skip_above is not None or skip_hinted else "none"


def hardness_noise(settings: Settings) -> tuple[str, ...]:
    """The run's default noise columns (a rule's 'hardness_noise' resource overrides them)."""
    return noise_columns(settings.hardness_noise)


def noise_columns(text: object) -> tuple[str, ...]:
    """'seed, instance' -> ('seed', 'instance'); None or '' -> ()."""
    if text is None:
        return ()
    return tuple(name.strip() for name in str(text).split(",") if name.strip())
