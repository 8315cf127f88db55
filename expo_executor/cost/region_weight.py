"""What one hour of work of a VM costs in each of a run's regions, to order them (the GCE
engine's ``placement``): the region's price of the VM, the Spot rework the fitted preemption
model expects there, and the egress of the VM's staged files from a bucket elsewhere.

Pure arithmetic over the price tables, the preemption models and the bucket's location:

    weight = hourly x E[T] / T  +  staged GB x egress USD/GB / hours

``E[T] / T`` is the SciSpot model's expected running time of a job of ``job_h`` hours over its
failure-free time (``preemption.expected_time_h``: a preemption loses half the run on average),
from the model fitted to the region's own VMs of that type when ``expocloud fit-preemption``
had enough of them, else the type's; 1 on-demand. The staged bytes are read once per VM and
spread over ``vm_h`` hours of its life. A region without a price table weighs None (placed
after priced ones).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.cost import egress, preemption
from expo_executor.cost.preemption_fit import Models
from expo_executor.cost.prices import PriceTable


@dataclass(frozen=True)
class RegionWeights:
    """The inputs, and ``__call__``: (region, pool, shape) -> USD per hour of work, or None.

    ``machine_types``: the run's own machine per pool (a shape of None); ``staged_bytes``:
    what each VM reads from the bucket at ``bucket_location`` whatever its jobs (the worker
    software); ``job_h`` and ``vm_h``: the job length and VM life the weights assume."""

    tables: Mapping[str, PriceTable]
    machine_types: Mapping[Pool, str]
    models: Models | None = None
    bucket_location: str = ""
    staged_bytes: float = 0.0
    job_h: float = 1.0
    vm_h: float = 1.0

    def __call__(self, region: str, pool: Pool, shape: Shape | None) -> float | None:
        table = self.tables.get(region)
        machine = shape.machine_type if shape is not None else self.machine_types.get(pool)
        if table is None or machine is None:
            return None
        try:
            hourly = table.shape_hourly(machine, shape.gpu_type if shape else None,
                                        shape.gpu_count if shape else 0, spot=pool is Pool.SPOT)
        except ExpoError:
            return None
        return hourly * self.rework(machine, region, pool) + \
            egress.egress_usd(self.staged_bytes, self.bucket_location, region) / self.vm_h

    def rework(self, machine: str, region: str, pool: Pool) -> float:
        """E[T] / T of a job on a VM of ``machine`` in ``region`` (1 on-demand)."""
        if pool is not Pool.SPOT or self.models is None or self.job_h <= 0:
            return 1.0
        lifetime = self.models.for_type(machine, region).expected_lifetime_h()
        return preemption.expected_time_h(self.job_h, lifetime) / self.job_h


Weight = Callable[[str, Pool, Shape | None], float | None]
