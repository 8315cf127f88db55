"""Executor settings: every engine's fields in one typed dataclass, validated once, before
anything is provisioned.

Each field becomes ``--expocloud-<field>`` on Snakemake's command line and ``expocloud-<field>``
in a profile. The fields every engine reads, their per-engine defaults (one table) and their
checks are the ``settings`` leaf's; an engine's own fields and checks live in its package
(``engines.local_settings``, ``engines.gce.settings``); this module puts them together, for
the Snakemake plugin, the CWL runner, ``expocloud doctor`` and the coordinator's launch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from expo_executor.core.records import EngineName
from expo_executor.cost.machines import machine_memory_mb
from expo_executor.engines import local_settings
from expo_executor.engines.gce import settings as gce_settings
from expo_executor.engines.gce import settings_checks as gce_checks
from expo_executor.engines.gce.settings import GceSettings, pool_machine_types
from expo_executor.engines.local_settings import LocalFields, local_worker_memory_mb
from expo_executor.settings import checks


@dataclass
class ExecutorSettings(LocalFields, GceSettings):
    """Every engine's settings: the common ones (``settings.fields``), GCE's and the local
    engine's. A check of one engine's run reads only its own."""


# Every engine's field checks run on every run (a profile's mistake shows wherever it runs);
# an engine's run checks only on its own runs.
FIELD_CHECKS: tuple[Callable[[ExecutorSettings], None], ...] = (
    gce_settings.check_fields, local_settings.check_fields)
RUN_CHECKS: Mapping[EngineName, Callable[[ExecutorSettings], None]] = {
    EngineName.LOCAL: local_settings.check_run, EngineName.GCE: gce_checks.check_run}


def validate(settings: ExecutorSettings) -> None:
    """Raise ExpoError naming the setting and the fix for the first bad value (unset slots
    checked as their default)."""
    settings = checks.check(settings)
    for check in FIELD_CHECKS:
        check(settings)
    RUN_CHECKS[EngineName(settings.engine)](settings)


def worker_memory_mb(settings: ExecutorSettings, workers: int) -> int:
    """The memory every worker of the run has for its jobs (0: unknown, not tracked).

    Locally, this machine's memory shared among its workers; on GCE, the smaller of the two
    pools' machine types, so that a job fits wherever the scheduler sends it.
    """
    if settings.engine == EngineName.LOCAL:
        return local_worker_memory_mb(workers)
    sizes = [machine_memory_mb(t) for t in set(pool_machine_types(settings))]
    return 0 if None in sizes else min(s for s in sizes if s is not None)
