"""The simulated cloud: VMs that boot, run jobs, are preempted and powered off, on an event heap
under a simulated clock. It decides nothing: the coordinator's side (:mod:`.simulation`) sees
what happened only at its next round, as a real coordinator reads the bucket and the engine.

What it models: boot delays (``BootDelay``); Spot lifetimes from the SciSpot model or an explicit
schedule; stockouts (a create call fails with a pool's probability; the names are used up, as on
GCE), or across regions each region's own (``regions``: the cheapest with capacity takes it); a job's end at its runtime or its deadline, whichever comes first; a kill ``dispatch_s``
after it is asked for; and every VM's bill, from creation to power-off, at its pool's price.
"""

from __future__ import annotations

import heapq
import itertools
import math
import random
from dataclasses import dataclass, field
from typing import Any, Mapping

from expo_executor.core.budget import vm_cost
from expo_executor.core.records import AttemptEnd
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.simulate.policies import SimConfig
from expo_executor.simulate.regions import RegionSet
from expo_executor.simulate.workload import Lifetimes, Prices, SimJob

READY, PREEMPT, END, KILL, WAKE = range(5)  # what an event on the heap is


@dataclass(eq=False)
class SimRun:
    """One attempt of a job on one VM."""

    key: str
    vm: SimVm
    outcome: AttemptEnd  # what its result will say
    alive: bool = True


@dataclass(eq=False)
class SimVm:
    """A simulated VM, as the cloud (``dead``, ``ended``) and the coordinator see it."""

    name: str
    pool: Pool
    created: float
    slots: int
    price_h: float
    ready: bool = False  # the coordinator saw its ready status
    dead: bool = False  # powered off (deleted or preempted)
    tracked: bool = True  # still one of the coordinator's VMs
    ended: float | None = None
    idle_since: float | None = None
    idle_wake: float | None = None
    freed_at: float | None = None  # when a job of it last ended (a slot freed)
    runs: dict[str, SimRun] = field(default_factory=dict)
    shape: Shape | None = None  # a per-rule machine's (None: the run's own)
    region: str = ""  # where it was made, in a simulation across regions (regions.py)


class SimCloud:
    """The VMs and jobs of one simulated run, and what the coordinator will see next."""

    def __init__(self, config: SimConfig, prices: Prices, lifetime: Lifetimes | None,
                 preempt_at: Mapping[str, float] | None, seed: int) -> None:
        self.config = config
        self.lifetime = lifetime
        self.preempt_at = dict(preempt_at or {})
        self.prices = prices
        self.price_h = {
            Pool.SPOT: prices.hourly(config.machine_type, True) * config.price_scale,
            Pool.ON_DEMAND: prices.hourly(config.od_machine_type, False) * config.price_scale,
        }
        self.stockout = {Pool.SPOT: config.stockout, Pool.ON_DEMAND: config.stockout_on_demand}
        self.boot_rng = random.Random(f"{seed}:boot")
        self.life_rng = random.Random(f"{seed}:lifetime")
        self.stock_rng = random.Random(f"{seed}:stockout")
        self.heap: list[tuple[float, int, int, Any]] = []
        self.seq = itertools.count()
        self.all_vms: list[SimVm] = []
        self.counter = 0
        self.preemptions = self.stockouts = 0
        # what the coordinator will see at its next round
        self.seen_ready: list[SimVm] = []
        self.seen_results: list[tuple[str, str, AttemptEnd]] = []
        self.seen_preempted: list[SimVm] = []

    # -- the clock -----------------------------------------------------------------------------
    def at(self, when: float, kind: int, what: Any = None) -> None:
        heapq.heappush(self.heap, (when, next(self.seq), kind, what))

    def next_event(self) -> float | None:
        return self.heap[0][0] if self.heap else None

    def run_until(self, now: float) -> None:
        """Everything that happens on the VMs up to ``now``, whether or not anyone looks yet."""
        while self.heap and self.heap[0][0] <= now + 1e-9:
            when, _, kind, what = heapq.heappop(self.heap)
            self._happen(when, kind, what)

    def _happen(self, when: float, kind: int, what: Any) -> None:
        if kind == READY:
            if not what.dead:
                self.seen_ready.append(what)
        elif kind == PREEMPT:
            vm: SimVm = what
            if not vm.dead:
                self.power_off(vm, when)  # billing stops with the VM
                self.preemptions += vm.pool is Pool.SPOT
                self.seen_preempted.append(vm)
        elif kind in (END, KILL):
            run: SimRun = what
            if run.alive:
                run.alive = False
                del run.vm.runs[run.key]
                run.vm.freed_at = when
                self.seen_results.append((run.key, run.vm.name,
                                          AttemptEnd.CANCELLED if kind == KILL else run.outcome))

    # -- VMs -------------------------------------------------------------------------------------
    def hourly(self, pool: Pool, shape: Shape | None) -> float:
        """USD an hour of a VM of ``pool`` and ``shape`` (a per-rule machine: its machine
        type's price)."""
        if shape is None:
            return self.price_h[pool]
        return self.prices.hourly(shape.machine_type, pool is Pool.SPOT) * self.config.price_scale

    def create(self, pool: Pool, count: int, slots: int, now: float,
               shape: Shape | None = None) -> list[tuple[SimVm, float]] | None:
        """Ask for ``count`` VMs of ``pool`` and ``shape``: each with the time it will be
        ready, or None when every zone is out of capacity (a stockout; the names are used up
        all the same)."""
        names = []
        for _ in range(count):
            self.counter += 1
            names.append(f"{self.config.vm_prefix}-{self.counter}")
        if isinstance(self.prices, RegionSet):
            return self._create_in_regions(self.prices, names, pool, slots, now, shape)
        chance = self.stockout[pool]
        if chance > 0 and self.stock_rng.random() < chance:
            self.stockouts += 1
            return None
        return [self._boot(name, pool, slots, now, shape) for name in names]

    def _create_in_regions(self, regions: RegionSet, names: list[str], pool: Pool, slots: int,
                           now: float, shape: Shape | None) -> list[tuple[SimVm, float]] | None:
        """The cheapest region with capacity takes the call (each region draws its own
        stockout); its VMs are billed at its prices. None: every region is out."""
        machine = shape.machine_type if shape is not None else (
            self.config.machine_type if pool is Pool.SPOT else self.config.od_machine_type)
        for region in regions.order(machine, pool):
            if region.stockout_of(pool) > 0 and \
                    self.stock_rng.random() < region.stockout_of(pool):
                continue
            price = region.prices.hourly(machine, pool is Pool.SPOT) * self.config.price_scale
            return [self._boot(name, pool, slots, now, shape, price, region.name)
                    for name in names]
        self.stockouts += 1
        return None

    def _boot(self, name: str, pool: Pool, slots: int, now: float, shape: Shape | None,
              price_h: float | None = None, region: str = "") -> tuple[SimVm, float]:
        vm = SimVm(name, pool, now, slots,
                   self.hourly(pool, shape) if price_h is None else price_h, shape=shape,
                   region=region)
        self.all_vms.append(vm)
        ready = now + self.config.boot.sample(self.boot_rng)
        self.at(ready, READY, vm)
        if name in self.preempt_at:
            self.at(now + self.preempt_at[name], PREEMPT, vm)
        elif pool is Pool.SPOT and self.lifetime is not None:
            hours, preempted = self.lifetime.sample(self.life_rng)
            if preempted:
                self.at(now + hours * 3600.0, PREEMPT, vm)
        return vm, ready

    def power_off(self, vm: SimVm, now: float) -> None:
        """The VM stops (deleted or preempted): its jobs die with it, its bill ends."""
        if vm.dead:
            return
        vm.dead = True
        vm.ended = now
        for run in vm.runs.values():
            run.alive = False
        vm.runs.clear()

    # -- jobs ------------------------------------------------------------------------------------
    def start(self, job: SimJob, vm: SimVm, start: float) -> None:
        """``job`` starts on ``vm`` at ``start``; it ends at its runtime, or times out at its
        deadline."""
        deadline = job.deadline_s if job.deadline_s is not None else math.inf
        if job.runtime_s >= deadline:
            ends, outcome = start + deadline, AttemptEnd.TIMEOUT
        else:
            ends, outcome = (start + job.runtime_s,
                             AttemptEnd.FAILED if job.fails else AttemptEnd.SOLVED)
        run = SimRun(job.key, vm, outcome)
        vm.runs[job.key] = run
        self.at(ends, END, run)

    def kill(self, vm: SimVm, key: str, when: float) -> None:
        """The worker kills ``key`` at ``when`` (when it next reads its inbox), if it runs."""
        run = vm.runs.get(key)
        if run is not None:
            self.at(when, KILL, run)

    # -- the bill --------------------------------------------------------------------------------
    def bill(self, end: float) -> tuple[dict[str, float], float]:
        """VM-hours per pool and USD of every VM of the run (one still up is billed to
        ``end``)."""
        hours: dict[str, float] = {}
        cost = 0.0
        for vm in self.all_vms:
            seconds = (vm.ended if vm.ended is not None else end) - vm.created
            hours[vm.pool.value] = hours.get(vm.pool.value, 0.0) + seconds / 3600.0
            cost += vm_cost(vm.price_h, seconds)
        return hours, cost
