"""The checks of the settings every engine reads: each raises ExpoError naming the setting and
the fix, before anything is provisioned. An engine's own checks live in its package; the
coordinator runs them all (``coordinator.settings.validate``).
"""

from __future__ import annotations

import re
from string import Template

from expo_executor.core.errors import ExpoError
from expo_executor.settings.fields import (BUDGET_ACTIONS, ENGINE_CHOICES, HARDNESS_MODELS,
                                           ON_SKIP_CHOICES, Settings)
from expo_executor.settings.notify import check_notify
from expo_executor.settings.values import (boot_timeout, capacity_timeout, heartbeat_grace,
                                           poll_interval, prefetch, slow_poll_interval,
                                           with_default_slots, worker_requirements)


def check(settings: Settings) -> Settings:
    """Raise ExpoError for the first bad value (unset slots checked as their default); the
    settings with their slots set, for the engine's checks that follow."""
    _check_choices(settings)
    settings = with_default_slots(settings)
    _check_numbers(settings)
    _check_timing(settings)
    _check_pools(settings)
    _check_names(settings)
    _check_model(settings)
    worker_requirements(settings)
    check_notify(settings)
    return settings


def positive(name: str, value: float, allow_zero: bool = False) -> None:
    """ExpoError naming ``--expocloud-<name>`` unless ``value`` is positive (or zero)."""
    if value is None or value < 0 or (value == 0 and not allow_zero):
        bound = "zero or more" if allow_zero else "a positive number"
        raise ExpoError(f"--expocloud-{name.replace('_', '-')}", f"{value!r} is not valid",
                        f"give {bound}")


def _check_choices(settings: Settings) -> None:
    if settings.engine not in ENGINE_CHOICES:
        raise ExpoError("--expocloud-engine", f"unknown engine {settings.engine!r}",
                        f"use one of {', '.join(ENGINE_CHOICES)}")
    if settings.on_skip not in ON_SKIP_CHOICES:
        raise ExpoError("--expocloud-on-skip", f"unknown value {settings.on_skip!r}",
                        f"use one of {', '.join(ON_SKIP_CHOICES)}")
    if settings.budget_action not in BUDGET_ACTIONS:
        raise ExpoError("--expocloud-budget-action", f"unknown value {settings.budget_action!r}",
                        f"use one of {', '.join(BUDGET_ACTIONS)}")


def _check_numbers(settings: Settings) -> None:
    positive("slots_per_worker", settings.slots_per_worker)
    if settings.max_workers is not None:
        positive("max_workers", settings.max_workers)
    positive("idle_timeout", settings.idle_timeout, allow_zero=True)
    positive("poll_interval", poll_interval(settings))
    positive("heartbeat_grace", heartbeat_grace(settings))
    positive("status_interval", settings.status_interval)
    if settings.budget is not None:
        positive("budget", settings.budget)


def _check_timing(settings: Settings) -> None:
    """Timeouts that a poll would make meaningless."""
    poll, grace = poll_interval(settings), heartbeat_grace(settings)
    boot = boot_timeout(settings)
    if boot < 5 * poll:
        raise ExpoError("--expocloud-boot-timeout", f"{boot:g} s is too short for a poll "
                        f"interval of {poll:g} s", "make it at least 5 poll intervals")
    capacity_timeout(settings)
    positive("prefetch", prefetch(settings), allow_zero=True)
    positive("slow_poll_interval", slow_poll_interval(settings))
    if grace < 5 * poll:
        raise ExpoError("--expocloud-heartbeat-grace",
                        f"{grace:g} s is too short for a poll interval of "
                        f"{poll:g} s", "make it at least 5 poll intervals")


def _check_pools(settings: Settings) -> None:
    positive("spot_attempts", settings.spot_attempts, allow_zero=True)
    positive("on_demand_min", settings.on_demand_min, allow_zero=True)
    if settings.max_on_demand is not None:
        positive("max_on_demand", settings.max_on_demand, allow_zero=True)
        if settings.max_on_demand < settings.on_demand_min:
            raise ExpoError("--expocloud-max-on-demand",
                            f"{settings.max_on_demand} is below --expocloud-on-demand-min "
                            f"{settings.on_demand_min}", "raise it or lower the minimum")


def _check_model(settings: Settings) -> None:
    """The runtime model's settings: a probability strictly between 0 and 1, a known model
    (or a module:attribute of the user's own), and skipping only with a model."""
    skip, model = settings.skip_above, settings.hardness_model
    if skip is not None and not 0 < skip < 1:
        raise ExpoError("--expocloud-skip-above", f"{skip!r} is not a probability between 0 "
                        "and 1", "give a P with 0 < P < 1, e.g. 0.99 (leave it unset to skip "
                        "nothing)")
    if model is not None and model not in HARDNESS_MODELS \
            and not re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", model):
        raise ExpoError("--expocloud-hardness-model", f"unknown model {model!r}",
                        f"use one of {', '.join(HARDNESS_MODELS)}, or module:attribute")
    if settings.model_trust_after < 0:
        raise ExpoError("--expocloud-model-trust-after", f"{settings.model_trust_after} is not "
                        "a count of finished jobs", "give 0 or more (the default is 50)")
    if skip is not None and model == "none":
        raise ExpoError("--expocloud-skip-above", "it needs a runtime model, and "
                        "--expocloud-hardness-model is 'none'", "drop one of the two (the "
                        "model defaults to 'learned' with --expocloud-skip-above)")


def _check_names(settings: Settings) -> None:
    if settings.run_id is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}",
                                                        settings.run_id):
        raise ExpoError("--expocloud-run-id", f"{settings.run_id!r} is not a valid run name",
                        "use letters, digits, '.', '_' and '-' (at most 64)")
    if not Template(settings.placeholder_text).is_valid():
        raise ExpoError("--expocloud-placeholder-text", "it is not a valid $-template",
                        "write $name for substitutions and $$ for a literal dollar sign")
