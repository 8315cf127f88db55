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

The coordinator's meter and the simulator both move a run's phase on with :func:`meter_step`,
over a :class:`Spend` snapshot, so a simulated budget ends where a real one would.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum, IntEnum

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


@dataclass(frozen=True)
class Spend:
    """What a run has spent at one moment: the USD of VMs that are gone, and the VMs alive as
    ``(name, hourly USD, created)``."""

    ended_usd: float = 0.0
    alive: tuple[tuple[str, float, float], ...] = ()

    def ages(self, now: float) -> list[tuple[float, float]]:
        """The VMs alive as ``(hourly, age_s)`` at ``now``, as :func:`projected` takes them."""
        return [(hourly, now - created) for _, hourly, created in self.alive]

    def spent(self, now: float) -> float:
        """USD so far: VMs that are gone, and those alive up to ``now``."""
        return self.ended_usd + sum(vm_cost(hourly, age) for hourly, age in self.ages(now))

    def without(self, name: str, now: float) -> Spend:
        """After VM ``name`` is deleted at ``now``: its cost moves to the VMs that are gone."""
        gone = [vm for vm in self.alive if vm[0] == name]
        cost = sum(vm_cost(hourly, now - created) for _, hourly, created in gone)
        return Spend(self.ended_usd + cost, tuple(vm for vm in self.alive if vm[0] != name))

    def plus(self, count: int, hourly: float, now: float) -> Spend:
        """After ``count`` VMs at ``hourly`` USD are asked for at ``now``."""
        new = tuple((f"+{len(self.alive) + i}", hourly, now) for i in range(count))
        return Spend(self.ended_usd, self.alive + new)


class Withdraw(str, Enum):
    """Which jobs a budget phase takes back: the queued ones (drain) or every unfinished one."""

    QUEUED = "queued"
    UNFINISHED = "unfinished"


@dataclass(frozen=True)
class PhaseChange:
    """The run's new budget phase and what it takes back. ``Phase.STOP``: every job is
    withdrawn and every VM deleted."""

    phase: Phase
    withdraw: Withdraw | None = None


def meter_step(current: Phase, spend: Spend, now: float, cheapest_vm_hourly: float,
               config: BudgetConfig, no_vm_for_queued_work: bool) -> PhaseChange | None:
    """The phase the run moves to at ``now``, or None when it stays where it is.

    Phases only advance (money spent is not coming back). Near the limit with no VM alive and
    work queued, no VM is affordable and the queued work cannot run: that is the limit. At the
    limit, ``drain`` withdraws the queued jobs and lets running ones finish; ``cancel``, or a
    run that would overrun even while draining, withdraws every unfinished job and stops.
    """
    new = phase(spend.ended_usd, spend.ages(now), cheapest_vm_hourly, config)
    if new is Phase.NO_GROWTH and no_vm_for_queued_work:
        new = Phase.LIMIT
    new = max(new, current)
    if new is current:
        return None
    if new is Phase.NO_GROWTH:
        return PhaseChange(new)
    if new is Phase.LIMIT and config.action == "drain":
        return PhaseChange(new, Withdraw.QUEUED)
    return PhaseChange(Phase.STOP, Withdraw.UNFINISHED)
