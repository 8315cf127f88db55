"""The policies a simulation compares (``POLICIES``), as small edits of one ``SimConfig``: the
coordinator's settings plus the simulated cloud's behaviour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from expo_executor.core.budget import BudgetConfig
from expo_executor.core.pool_health import BOOT_TIMEOUT, CAPACITY_TIMEOUT
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.simulate.workload import BootDelay

POLICIES = ("on-demand", "spot-naive", "spot-then-od", "hybrid", "vm-per-job")
NAIVE_ATTEMPTS = 10 ** 9  # "unlimited" Spot retries: never moved to on-demand


@dataclass(frozen=True)
class SimConfig:
    """One policy's run: the coordinator's settings plus the simulated cloud's behaviour."""

    max_workers: int = 10  # VMs of the main pool
    slots: int = 4
    machine_type: str = "e2-standard-4"
    on_demand_machine_type: str | None = None  # None: the same as ``machine_type``
    main_pool: Pool = Pool.SPOT
    max_on_demand: int = 3
    on_demand_min: int = 0
    spot_attempts: int = 2
    straggler_rule: bool = True
    vm_per_job: bool = False  # a fresh VM per job, deleted when its job ends
    poll: float = 2.0  # the coordinator's tick
    idle_timeout: float = 5.0
    dispatch_s: float = 2.0  # assignment (or cancel) -> the worker acts on it
    boot: BootDelay = BootDelay(60.0)
    stockout: float = 0.0  # probability that a Spot create call fails
    stockout_on_demand: float = 0.0
    vm_prefix: str = "w"
    price_scale: float = 1.0  # share of the machine type's price one VM pays (vm-per-job)
    boot_timeout: float = BOOT_TIMEOUT  # a VM not ready by then is deleted (and replaced)
    capacity_timeout: float = CAPACITY_TIMEOUT  # stockouts with no ready VM: the pool stops
    budget: BudgetConfig | None = None  # the spending cap (None: none)
    prefetch: int = 0  # jobs per CPU a busy worker holds (Scheduler.prefetch; held_jobs.py)
    # CPU slots of a per-rule machine's VMs (``SimJob.shape``; a shape not named: ``slots``)
    shape_slots: Mapping[Shape, int] = field(default_factory=dict)

    @property
    def od_machine_type(self) -> str:
        return self.on_demand_machine_type or self.machine_type

    def slots_of(self, shape: Shape | None) -> int:
        """CPU slots of a VM of ``shape`` (None: the run's own)."""
        return self.slots if shape is None else self.shape_slots.get(shape, self.slots)


def policy(name: str, base: SimConfig, job_cpus: int = 1) -> SimConfig:
    """``base`` turned into one of ``POLICIES``.

    - ``on-demand``: one on-demand pool of ``max_workers`` VMs (the same capacity as Spot);
    - ``spot-naive``: Spot only, a preempted job retried on Spot forever, no on-demand pool;
    - ``spot-then-od``: Spot, a job preempted ``spot_attempts`` times moves to the on-demand
      pool; no straggler rule and no reliable core;
    - ``hybrid`` (ours): that, plus the straggler rule and ``on_demand_min`` as configured;
    - ``vm-per-job`` (the googlebatch plugin's way): every job gets a VM of its own, booted
      for it and deleted after it; up to ``max_workers * slots`` such VMs (the same CPUs), each
      sized for one job and priced at ``job_cpus / slots`` of the machine type; Spot, and after
      ``spot_attempts`` preemptions on-demand (our reading of Batch's retry with a fallback:
      Batch itself retries a task on the same provisioning model). Its on-demand pool gets the
      same CPUs as the others' (``max_on_demand * slots`` VMs).
    """
    if name == "on-demand":
        return replace(base, main_pool=Pool.ON_DEMAND, max_on_demand=0, on_demand_min=0,
                       straggler_rule=False)
    if name == "spot-naive":
        return replace(base, main_pool=Pool.SPOT, max_on_demand=0, on_demand_min=0,
                       spot_attempts=NAIVE_ATTEMPTS, straggler_rule=False)
    if name == "spot-then-od":
        return replace(base, main_pool=Pool.SPOT, on_demand_min=0, straggler_rule=False)
    if name == "hybrid":
        return replace(base, main_pool=Pool.SPOT, straggler_rule=True)
    if name == "vm-per-job":
        per_vm = max(1, job_cpus)
        return replace(base, main_pool=Pool.SPOT, vm_per_job=True, slots=per_vm,
                       max_workers=base.max_workers * base.slots // per_vm,
                       max_on_demand=base.max_on_demand * base.slots // per_vm,
                       on_demand_min=0, straggler_rule=False, idle_timeout=0.0,
                       price_scale=per_vm / base.slots)
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")

