"""The request budget: what the run's storage operations would cost at 1,000 workers, against
the VM bill of those workers. Pure arithmetic over the run's own counts.

Coordination through a bucket is cheap only if it stays cheap at scale: a per-worker poll or
heartbeat is paid a thousand times over. The figure is built from what this run measured:
the workers' operations per VM-hour (each reports its counts) and the coordinator's operations
per hour, split into a part that grows with the number of workers (inbox writes, status reads)
and listings (one page per 1,000 objects, two objects per worker).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# List prices, us-central1, read 2026-11 (cloud.google.com/storage/pricing and
# cloud.google.com/compute/vm-instance-pricing); issue 5 replaces them with the catalog.
PRICE_PER_OP = {"A": 0.005 / 1000, "B": 0.0004 / 1000, "free": 0.0}  # Standard storage
VM_PRICE_PER_HOUR = {  # machine type -> (on-demand, spot) USD per hour
    "e2-standard-2": (0.067006, 0.022),
    "e2-standard-4": (0.134012, 0.044),
    "e2-standard-8": (0.268024, 0.088),
    "n2-standard-2": (0.097118, 0.0235),
    "n2-standard-4": (0.194236, 0.047),
    "n2-standard-8": (0.388472, 0.094),
    "c2d-standard-8": (0.363, 0.087),
}
SCALE_WORKERS = 1000
OBJECTS_PER_WORKER = 2  # its inbox and its status
LIST_PAGE = 1000


@dataclass(frozen=True)
class Budget:
    workers: int
    storage_per_hour: float  # USD, all storage operations at ``workers`` workers
    vm_per_hour: float  # USD, the same workers' VMs
    per_worker_ops_per_hour: dict[str, float]
    coordinator_ops_per_hour: dict[str, float]

    @property
    def ratio(self) -> float:
        return self.storage_per_hour / self.vm_per_hour if self.vm_per_hour else math.inf

    def line(self) -> str:
        return (f"request budget: at {self.workers} workers storage operations would cost "
                f"${self.storage_per_hour:.3f}/h against ${self.vm_per_hour:.2f}/h of VMs "
                f"({100 * self.ratio:.2f}% of the VM bill)")


def vm_price(machine_type: str, spot: bool) -> float:
    on_demand, spot_price = VM_PRICE_PER_HOUR.get(machine_type, VM_PRICE_PER_HOUR["e2-standard-2"])
    return spot_price if spot else on_demand


def _cost(ops: dict[str, float]) -> float:
    return sum(PRICE_PER_OP.get(kind, 0.0) * count for kind, count in ops.items())


def at_scale(worker_ops: dict[str, dict[str, int]], worker_seconds: float,
             coordinator_ops: dict[str, int], coordinator_lists: int, run_seconds: float,
             mean_workers: float, vm_price_per_hour: float,
             workers: int = SCALE_WORKERS) -> Budget:
    """Extrapolate this run's measured rates to ``workers`` workers.

    ``coordinator_lists``: how many of the coordinator's class A operations were listings
    (their page count grows with the objects: two per worker).
    """
    hours = max(worker_seconds, 1e-9) / 3600
    per_worker: dict[str, float] = {}
    for ops in worker_ops.values():
        for kind, count in ops.items():
            per_worker[kind] = per_worker.get(kind, 0.0) + count / hours
    run_hours = max(run_seconds, 1e-9) / 3600
    scale = workers / max(mean_workers, 1e-9)
    pages = math.ceil(workers * OBJECTS_PER_WORKER / LIST_PAGE)
    coordinator: dict[str, float] = {}
    for kind, count in coordinator_ops.items():
        listed = coordinator_lists if kind == "A" else 0
        coordinator[kind] = ((count - listed) * scale + listed * pages) / run_hours
    storage = _cost({k: v * workers for k, v in per_worker.items()}) + _cost(coordinator)
    return Budget(workers, storage, vm_price_per_hour * workers, per_worker, coordinator)
