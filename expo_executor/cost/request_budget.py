"""The request budget: what the run's storage operations would cost at 1,000 workers, against
the VM bill of those workers. Pure arithmetic over the run's own counts.

Coordination through a bucket is cheap only if it stays cheap at scale: a per-worker poll or
heartbeat is paid a thousand times over. The figure is built from what this run measured:
the workers' operations per VM-hour (each reports its counts) and the coordinator's operations
per hour, split into a part that grows with the number of workers (inbox writes, status reads),
listings (one page per 1,000 objects, two objects per worker), and the pulse (one write a
heartbeat for the whole fleet, however many workers: the workers' reads of it are in their own
counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Standard storage list prices, us-central1 (cloud.google.com/storage/pricing, read 2026-11);
# the VMs' prices come from the price snapshot (prices.py).
PRICE_PER_OP = {"A": 0.005 / 1000, "B": 0.0004 / 1000, "free": 0.0}
SCALE_WORKERS = 1000
OBJECTS_PER_WORKER = 2  # its inbox and its status
LIST_PAGE = 1000


@dataclass(frozen=True)
class Budget:
    """The storage bill against the VM bill, split by what drives it.

    ``overhead``: what every worker costs per hour whatever its jobs (inbox reads, the
    coordinator's listings at the scaled page count). ``per_job``: what each job adds
    (result writes, their reads, assignment writes). Both from the run's counts.
    """

    workers: int
    vm_per_worker_hour: float  # USD
    overhead_per_worker_hour: float  # USD
    per_job: float  # USD per job
    jobs_per_worker_hour: float  # this run's rate
    slots: int

    @property
    def overhead_ratio(self) -> float:
        return self.overhead_per_worker_hour / self.vm_per_worker_hour

    @property
    def ratio(self) -> float:
        """At this run's job rate: overhead plus its jobs' operations."""
        return (self.overhead_per_worker_hour + self.per_job * self.jobs_per_worker_hour) \
            / self.vm_per_worker_hour

    @property
    def break_even_job_s(self) -> float:
        """Job length (per slot) from which each job's operations cost under 1% of its VM
        time; shorter jobs spend proportionally more on coordination."""
        slot_price_per_s = self.vm_per_worker_hour / 3600 / max(self.slots, 1)
        return self.per_job / (0.01 * slot_price_per_s)

    def line(self) -> str:
        return (f"request budget at {self.workers} workers: fixed overhead "
                f"{100 * self.overhead_ratio:.2f}% of the VM bill; with this run's jobs "
                f"{100 * self.ratio:.1f}% (${self.per_job:.2g} of storage operations per job: "
                f"under 1% for jobs of {self.break_even_job_s:.0f} s or longer per slot)")


def at_scale(worker_ops: dict[str, dict[str, int]], worker_seconds: float,
             coordinator_ops: dict[str, int], coordinator_lists: int, run_seconds: float,
             jobs: int, slots: int, vm_price_per_hour: float,
             workers: int = SCALE_WORKERS, coordinator_heartbeats: int = 0) -> Budget:
    """This run's measured operations, priced, and its listings scaled to ``workers``.

    ``coordinator_heartbeats``: pulses written (one a heartbeat, grace/4, for the whole
    fleet): overhead of having workers, not of their jobs, shared by ``workers`` like the
    listings.
    """
    worker_hours = max(worker_seconds, 1e-9) / 3600
    run_hours = max(run_seconds, 1e-9) / 3600
    worker_a = sum(ops.get("A", 0) for ops in worker_ops.values())
    worker_b = sum(ops.get("B", 0) for ops in worker_ops.values())
    pages = math.ceil(workers * OBJECTS_PER_WORKER / LIST_PAGE)
    listing_per_hour = coordinator_lists * pages / run_hours * PRICE_PER_OP["A"]
    pulse_per_hour = coordinator_heartbeats / run_hours * PRICE_PER_OP["A"]
    overhead = worker_b * PRICE_PER_OP["B"] / worker_hours \
        + (listing_per_hour + pulse_per_hour) / workers
    per_job_total = (worker_a * PRICE_PER_OP["A"]
                     + (coordinator_ops.get("A", 0) - coordinator_lists - coordinator_heartbeats)
                     * PRICE_PER_OP["A"]
                     + coordinator_ops.get("B", 0) * PRICE_PER_OP["B"])
    jobs = max(jobs, 1)
    return Budget(workers, vm_price_per_hour, overhead, per_job_total / jobs,
                  jobs / worker_hours, slots)
