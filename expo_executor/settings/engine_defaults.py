"""Each engine's defaults, in one table: what a run uses for a setting the user left unset.

Why a table: the local engine and GCE differ in how often they may poll (every storage
operation on GCE is billed: see cost/request_budget.py), how long a worker takes to boot and
how long it waits for a silent coordinator; each such difference is one column here, read by
``values``, and never an ``if engine == ...`` of its own.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from expo_executor.core.pool_health import BOOT_TIMEOUT
from expo_executor.core.records import EngineName

# The GCE default prefetch (coordinator/prefetch_depth.py): a slot holds about this much work.
HOLD_S = 360.0  # seconds of work a slot holds beyond its running job
MAX_DEPTH = 8  # jobs per slot, however short they are


@dataclass(frozen=True)
class EngineDefaults:
    """One engine's defaults (seconds, unless said otherwise)."""

    poll: float  # between the coordinator's rounds and the workers' inbox reads
    slow_poll: float  # between a worker's inbox reads while busy or nothing changes (or poll)
    grace: float  # a worker that hears nothing from the coordinator this long stops
    boot_timeout: float  # a new worker not ready this long after it was asked for is replaced
    slots_per_worker: int | None  # None: the machine's cores shared among the workers
    prefetch_hold_s: float | None  # work a slot holds, sized by the jobs; None: prefetch is fixed
    machine_type: str | None  # the workers' machine type; None: this machine


DEFAULTS: Mapping[EngineName, EngineDefaults] = {
    EngineName.LOCAL: EngineDefaults(poll=0.05, slow_poll=15.0, grace=60.0, boot_timeout=120.0,
                                     slots_per_worker=None, prefetch_hold_s=None,
                                     machine_type=None),
    # A real VM boots in a minute or two, and the 'pip' worker software installs for a few more
    # (the pool health's own default, 600 s).
    EngineName.GCE: EngineDefaults(poll=2.0, slow_poll=15.0, grace=300.0,
                                   boot_timeout=BOOT_TIMEOUT, slots_per_worker=1,
                                   prefetch_hold_s=HOLD_S, machine_type="e2-standard-2"),
}
LOCAL, GCE = DEFAULTS[EngineName.LOCAL], DEFAULTS[EngineName.GCE]


def defaults_of(engine: str) -> EngineDefaults:
    """The defaults of ``engine``; the local engine's for a name no engine has (``validate``
    refuses that name before anything reads a default)."""
    try:
        return DEFAULTS[EngineName(engine)]
    except ValueError:
        return LOCAL
