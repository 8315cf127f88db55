"""The spending cap (``--expocloud-budget USD``): a meter over every VM-second of the run, and
what to do as the money runs out. Pure arithmetic; the coordinator feeds it and acts.

The meter prices each VM from its creation request to its deletion (an upper bound of GCE's
bill, which starts once the VM runs), with GCE's one-minute minimum. Money committed cannot be
un-spent, so every decision looks ahead: a VM is created only if the run could still pay for
everything alive plus it for ``horizon_s`` (a VM's first minute is paid whether used or not);
once even the VMs alive now would overrun the budget within ``horizon_s``, the configured
action starts (drain: start nothing new, let running jobs end; cancel: stop everything); and
whatever the action, once they would overrun it within ``margin_s`` (the time deleting
takes), everything stops.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

ACTIONS = ("drain", "cancel")
MIN_BILLED_S = 60.0  # GCE bills a VM for at least a minute


class Phase(IntEnum):
    """Ordered: each phase implies the ones before it."""

    OK = 0
    NO_GROWTH = 1  # near the limit: no new VMs
    LIMIT = 2  # at the limit: drain or cancel, as configured
    STOP = 3  # even draining would overrun: cancel everything now


@dataclass(frozen=True)
class BudgetConfig:
    limit_usd: float
    action: str = "drain"  # or "cancel"
    horizon_s: float = 300.0  # how far ahead the meter looks before spending more
    margin_s: float = 60.0  # how long it takes to stop paying once we decide to


def vm_cost(hourly_usd: float, seconds: float) -> float:
    """What one VM costs for ``seconds`` of life (GCE's one-minute minimum included)."""
    return hourly_usd / 3600.0 * max(MIN_BILLED_S, seconds)


def projected(spent_ended: float, alive: Sequence[tuple[float, float]], ahead_s: float) -> float:
    """USD spent if the VMs alive now (``(hourly, age_s)`` each) live ``ahead_s`` more."""
    return spent_ended + sum(vm_cost(hourly, age + ahead_s) for hourly, age in alive)


def affordable(spent_ended: float, alive: Sequence[tuple[float, float]], vm_hourly: float,
               config: BudgetConfig) -> int:
    """How many more VMs of ``vm_hourly`` the run can pay for over the horizon."""
    room = config.limit_usd - projected(spent_ended, alive, config.horizon_s)
    one = vm_cost(vm_hourly, config.horizon_s)
    if one <= 0:
        return 1 << 30
    return max(0, math.ceil(room / one) - 1)  # strictly within the limit


def phase(spent_ended: float, alive: Sequence[tuple[float, float]], cheapest_vm_hourly: float,
          config: BudgetConfig) -> Phase:
    """Where the run stands, from the cost of VMs that are gone and those ``alive``."""
    if projected(spent_ended, alive, config.margin_s) >= config.limit_usd:
        return Phase.STOP
    if projected(spent_ended, alive, config.horizon_s) >= config.limit_usd:
        return Phase.LIMIT
    if affordable(spent_ended, alive, cheapest_vm_hourly, config) == 0:
        return Phase.NO_GROWTH
    return Phase.OK


def meter_line(spent_usd: float, config: BudgetConfig | None) -> str:
    """The running meter as the progress line shows it."""
    if config is None:
        return f"${spent_usd:.4f} so far"
    return f"${spent_usd:.4f} of ${config.limit_usd:g} budget"
