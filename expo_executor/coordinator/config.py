"""The coordinator's settings for one run (``CoordinatorConfig``), as ``launch`` builds them from
the validated executor settings, with the defaults of the timeouts it enforces.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from expo_executor.coordinator.outage import GIVE_UP_AFTER
from expo_executor.coordinator.shapes import ShapeBook
from expo_executor.core.budget import BudgetConfig
from expo_executor.core.notices import STALL_AFTER
from expo_executor.core.pool_health import BOOT_TIMEOUT, CAPACITY_TIMEOUT
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape, ShapeSize

LISTING_GRACE = 120.0  # seconds; see CoordinatorConfig.listing_grace


@dataclass
class CoordinatorConfig:
    run_id: str
    slots_per_worker: int
    max_workers: int
    worker_mem_mb: int = 0  # memory of every worker for its jobs; 0: not tracked
    idle_timeout: float = 5.0
    poll: float = 0.2
    heartbeat: float = 10.0
    status_interval: float = 10.0
    pool: Pool = Pool.LOCAL  # the main pool: LOCAL, or SPOT in the cloud
    max_on_demand: int = 0  # the on-demand pool (cloud only)
    on_demand_min: int = 0  # on-demand VMs kept while work is left: a reliable core
    straggler_rule: bool = True
    vm_prefix: str = "w"
    # What VMs cost (empty: not priced, as on the local engine) and which prices said so.
    machine_types: dict[Pool, str] = field(default_factory=dict)
    hourly: dict[Pool, float] = field(default_factory=dict)  # USD per VM-hour
    on_demand_hourly: dict[Pool, float] = field(default_factory=dict)  # same types, on-demand
    prices_label: str = ""
    # A run across regions: each region's prices of the run's own machines, as ``hourly`` and
    # ``on_demand_hourly`` are the first region's (a region missing here is priced as those).
    region_hourly: dict[str, dict[Pool, float]] = field(default_factory=dict)
    region_on_demand_hourly: dict[str, dict[Pool, float]] = field(default_factory=dict)
    # What every VM reads from the bucket whatever its jobs (the worker software), and where
    # the bucket is: a VM in another region pays GCS's egress for it (cost.egress).
    staged_bytes_per_vm: float = 0.0
    bucket_location: str = ""
    budget: BudgetConfig | None = None
    max_run_s: float | None = None  # every VM's hard cap (GCE max_run_duration)
    # A VM not ready this long after it was asked for is deleted and replaced; repeated
    # failures stop its pool (core.pool_health.boot_round).
    boot_timeout: float = BOOT_TIMEOUT
    # A VM missing from the engine's listing is lost only once a listing showed it, or this
    # long after it was asked for: the Compute API lists a new VM some time after its insert.
    listing_grace: float = LISTING_GRACE
    # A pool with no ready VM whose every zone has been out of capacity this long stops
    # growing (its work moves to the other pool, or fails with the reason): never a silent wait.
    capacity_timeout: float = CAPACITY_TIMEOUT
    # A round failing for a reason that is not an outage (a bug, a refusal) this long fails
    # the run; an outage of the coordinator's own storage or compute is ridden out (.outage).
    give_up_after: float = GIVE_UP_AFTER
    # the run's bucket objects stay when it ends (--expocloud-keep-bucket); else they go
    keep_bucket: bool = False
    # Prefetch sized to the jobs' length (coordinator/prefetch_depth.py): a slot holds about
    # this many seconds of work. None: the scheduler's prefetch stays as it was given.
    prefetch_hold_s: float | None = None
    # Per-rule machines (GCE): every shape's size and prices; None: the run's own shape only.
    shapes: ShapeBook | None = None
    # No job started or ended this long while workers are alive: the run is notified as
    # stalled (--expocloud-stall-after; core.notices.stall_step)
    stall_after: float = STALL_AFTER
    # --expocloud-skip-above: a job its runtime model gives at least this probability of
    # passing its deadline is model-skipped (None: none is)
    skip_above: float | None = None

    def size(self, shape: Shape | None) -> ShapeSize:
        """What a worker of ``shape`` (None: the run's own) holds for its jobs."""
        if shape is None or self.shapes is None:
            return ShapeSize(self.slots_per_worker, self.worker_mem_mb)
        return self.shapes.size(shape)

    def price(self, pool: Pool, shape: Shape | None, region: str = "") -> float:
        """USD per hour of a VM of ``pool`` and ``shape`` in ``region`` (empty or not priced
        apart: the first region's; 0: not priced)."""
        if shape is None or self.shapes is None:
            return self.region_hourly.get(region, self.hourly).get(pool, 0.0)
        return self.shapes.hourly(shape, pool, region)

    def on_demand_price(self, pool: Pool, region: str = "") -> float:
        """USD per hour of the run's own machine of ``pool`` at on-demand prices."""
        return self.region_on_demand_hourly.get(region, self.on_demand_hourly).get(pool, 0.0)
