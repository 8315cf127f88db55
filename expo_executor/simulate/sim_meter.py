"""The simulated coordinator's budget meter: what its VMs cost and the budget's phase, moved on
by ``core.budget.meter_step`` as a run's meter (``coordinator/meter.py``) moves it."""

from __future__ import annotations

from typing import Iterable, Mapping

from expo_executor.core.budget import BudgetConfig, Phase, PhaseChange, Spend, meter_step, vm_cost
from expo_executor.core.scaling import Money
from expo_executor.core.scheduler import Pool
from expo_executor.simulate.cloud import SimVm


class SimMeter:
    """The simulated coordinator's meter: USD of the VMs it let go, and the budget's phase
    (``budget.meter_step`` moves it, as in a run)."""

    def __init__(self, budget: BudgetConfig | None, cheapest_hourly: float) -> None:
        self.budget = budget
        self.cheapest_hourly = cheapest_hourly
        self.ended_usd = 0.0
        self.phase = Phase.OK

    def spend(self, vms: Iterable[SimVm]) -> Spend:
        return Spend(self.ended_usd, tuple((vm.name, vm.price_h, vm.created) for vm in vms))

    def vm_gone(self, vm: SimVm) -> None:
        ended = vm.ended if vm.ended is not None else vm.created
        self.ended_usd += vm_cost(vm.price_h, ended - vm.created)

    def read(self, now: float, vms: Mapping[str, SimVm], queued: bool) -> PhaseChange | None:
        if self.budget is None:
            return None
        change = meter_step(self.phase, self.spend(vms.values()), now, self.cheapest_hourly,
                            self.budget, not vms and queued)
        if change is not None:
            self.phase = change.phase
        return change

    def money(self, vms: Mapping[str, SimVm], hourly: Mapping[Pool, float]) -> Money:
        spend = self.spend(vms.values()) if self.budget is not None else Spend()
        return Money(self.phase, self.budget, spend, hourly)
