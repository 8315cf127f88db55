"""The run's running cost and its budget (``--expocloud-budget``): what has been spent, the
budget's phase, and how many more VMs it pays for.

The arithmetic and the phase decisions are the core's (:mod:`expo_executor.core.budget`); this
module keeps the figures of one run and says each phase change once, in the log. It counts
the VMs' seconds and the egress of the jobs' staged files to VMs outside the bucket's region
(each result's bytes at its VM's rate, as they arrive); not the worker software each VM reads
at boot (the cost report has it). What a phase
change takes back (jobs, VMs) the coordinator does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Callable

from expo_executor.coordinator.vms import Vm
from expo_executor.core.budget import (BudgetConfig, Phase, PhaseChange, Spend, meter_line,
                                       meter_step, vm_cost)
from expo_executor.core.scaling import Money
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape


class Meter:
    """Prices every VM-second of the run and moves the budget's phase on."""

    def __init__(self, hourly: Mapping[Pool, float], budget: BudgetConfig | None,
                 pools: Iterable[Pool], log: Callable[[str], None],
                 price: Callable[[Pool, Shape | None, str], float] | None = None) -> None:
        self.hourly = dict(hourly)  # the run's own pools
        self.price = price  # any VM's, by pool, shape and region
        self.budget = budget
        self.pools = tuple(pools)
        self.log = log
        self.ended_usd = 0.0  # USD of VMs that are gone
        self.ended_by: dict[tuple[Pool, Shape | None], float] = {}  # ... per pool and shape
        self.vm_seconds: dict[str, float] = {}  # pool -> VM-seconds of ended VMs
        self.phase = Phase.OK
        self.spent_out = False  # the budget stopped the run: nothing more will run

    def spend(self, vms: Iterable[Vm]) -> Spend:
        return Spend(self.ended_usd, tuple((vm.name, self._price(vm), vm.created)
                                           for vm in vms))

    def _price(self, vm: Vm) -> float:
        """USD per hour of one of the run's VMs."""
        if self.price is not None:
            return self.price(vm.pool, vm.shape, vm.region)
        return self.hourly.get(vm.pool, 0.0)

    def spent(self, now: float, vms: Iterable[Vm]) -> float:
        """USD so far: VMs that are gone, and those alive up to ``now``."""
        return self.spend(vms).spent(now)

    def vm_ended(self, vm: Vm, seconds: float) -> None:
        """A VM that ran ``seconds`` is gone: its cost is final."""
        self.vm_seconds[vm.pool.value] = self.vm_seconds.get(vm.pool.value, 0.0) + seconds
        usd = vm_cost(self._price(vm), seconds)
        self.ended_usd += usd
        self.ended_by[(vm.pool, vm.shape)] = self.ended_by.get((vm.pool, vm.shape), 0.0) + usd

    def egress(self, usd: float) -> None:
        """A job's staged files moved between the bucket and a VM in another region
        (``Reporter.on_egress``, from the bytes its result says, no cloud call): spent."""
        self.ended_usd += usd

    def money(self, vms: Iterable[Vm]) -> Money:
        """The budget's side of a scaling round."""
        return Money(self.phase, self.budget, self.spend(vms), self.hourly)

    def read(self, now: float, vms: Iterable[Vm], queued_work: bool) -> PhaseChange | None:
        """Move the phase on (no budget: nothing to do); a change is logged and returned for
        the coordinator to act on. ``queued_work``: jobs are waiting for a slot."""
        if self.budget is None:
            return None
        vms = list(vms)
        cheapest = min(self.hourly.get(pool, 0.0) for pool in self.pools)
        change = meter_step(self.phase, self.spend(vms), now, cheapest, self.budget,
                            not vms and queued_work)
        if change is None:
            return None
        self.phase = change.phase
        self.spent_out = change.phase >= Phase.LIMIT
        self._say(change, self.spent(now, vms))
        return change

    def _say(self, change: PhaseChange, spent: float) -> None:
        where = f"{meter_line(spent, self.budget)} (--expocloud-budget)"
        if change.phase is Phase.NO_GROWTH:
            self.log(f"expocloud: budget: {where}: no new VMs from now on")
        elif change.phase is Phase.LIMIT:
            self.log(f"expocloud: budget: {where}: draining: running jobs may finish, "
                     "queued jobs will not run")
        else:
            self.log(f"expocloud: budget: {where}: cancelling every job and deleting every VM")

    def spent_message(self) -> str:
        """Why a job did not run to its end, once the budget stopped the run."""
        limit = self.budget.limit_usd if self.budget is not None else 0.0
        return (f"not run to its end: the budget of ${limit:g} is spent "
                "(raise --expocloud-budget to run it)")
