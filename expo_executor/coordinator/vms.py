"""The VMs a run's coordinator tracks: each one's name, pool, readiness and assignments, from the
create call that names it to the line in ``vms.jsonl`` that records how it ended (a
:class:`~expo_executor.core.records.VmEnd`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.places import Places
from expo_executor.cost.egress import egress_usd, usd_per_gb
from expo_executor.runs.files import RunFiles
from expo_executor.core.fleet import Booting, WorkerView
from expo_executor.core.records import VmEnd
from expo_executor.core.scaling import Load
from expo_executor.core.scheduler import Place, Pool
from expo_executor.core.shapes import Shape, ShapeSize


@dataclass
class Vm:
    """One VM as the coordinator sees it: ready once its worker said so, or once its worker
    was granted its key (``keyed``: on GCE it says READY right after, and its first inbox
    read may then hold its first jobs); ``places``: where its jobs stand (assigned, asked
    back, being cancelled), from which its inbox is written (:mod:`.places`)."""

    name: str
    created: float
    pool: Pool
    shape: Shape | None = None  # a per-rule machine; None: the run's own
    ready: bool = False
    keyed: bool = False  # its worker was granted its key (coordinator/key_requests.py)
    listed: bool = False  # a listing of the engine showed it alive once
    ready_at: float | None = None
    idle_since: float | None = None
    places: Places = field(default_factory=Places)
    status_generation: int | None = None
    zone: str = ""  # where the engine's listing shows it (empty: not listed yet, or no zones)

    @property
    def region(self) -> str:
        return self.zone.rsplit("-", 1)[0] if self.zone else ""


class VmFleet:
    """The run's VMs alive (in creation order), the pool of every VM it ever had, and the record
    of each one that ended."""

    def __init__(self, config: CoordinatorConfig, files: RunFiles, persist: Persister,
                 place_on: Callable[[str, str], Place] = lambda key, worker: Place()) -> None:
        self.config = config
        # the scheduler's Place of a job on a VM (``Scheduler.place_on``): its inbox's
        # releases and cancels are read from it (places.py)
        self.place_on = place_on
        self.files = files
        self._vms: dict[str, Vm] = {}
        self._counter = 0
        self.pool_of: dict[str, Pool] = {}  # every VM of the run, for the job records
        self.persist = persist

    def __iter__(self) -> Iterator[Vm]:
        return iter(list(self._vms.values()))

    def __len__(self) -> int:
        return len(self._vms)

    def __contains__(self, name: object) -> bool:
        return name in self._vms

    def names(self) -> list[str]:
        return list(self._vms)

    def get(self, name: str | None) -> Vm | None:
        return self._vms.get(name) if name is not None else None

    def __getitem__(self, name: str) -> Vm:
        return self._vms[name]

    def add(self, pool: Pool, count: int, now: float, shape: Shape | None = None) -> list[str]:
        """Name and track ``count`` new VMs of ``pool`` and ``shape``, asked for at ``now``."""
        names = []
        for _ in range(count):
            self._counter += 1
            name = f"{self.config.vm_prefix}-{self._counter}"
            self.track(Vm(name, now, pool, shape))
            names.append(name)
        return names

    def _place_on(self, key: str, worker: str) -> Place:
        return self.place_on(key, worker)

    def track(self, vm: Vm) -> None:
        """Track ``vm``: its inbox's releases and cancels are read from the scheduler."""
        vm.places.placed = functools.partial(self._place_on, worker=vm.name)
        self._vms[vm.name] = vm
        self.pool_of[vm.name] = vm.pool

    def end(self, name: str, end: VmEnd, ended: float) -> Vm | None:
        """Stop tracking VM ``name`` and record how it ended; None if it is not tracked. A VM
        lost at its ``max_run_s`` was capped by Compute Engine, not lost."""
        vm = self._vms.pop(name, None)
        if vm is None:
            return None
        if end is VmEnd.LOST and self.config.max_run_s is not None \
                and ended - vm.created >= self.config.max_run_s:
            end = VmEnd.CAPPED
        record = {"name": name, "pool": vm.pool.value, "created": vm.created,
                  "ready": vm.ready_at, "ended": ended, "end": end.value, **self._prices(vm)}
        # the VM is no longer tracked: a failed write must not lose its record (its cost)
        self.persist.write(f"the record of VM {name} in vms.jsonl",
                           lambda: self.files.append_vm(record), record)
        return vm

    def alive_records(self) -> list[dict[str, Any]]:
        """The VMs alive, as ``vms.jsonl`` records of VMs not ended yet (for a cost report)."""
        return [{"name": vm.name, "pool": vm.pool.value, "created": vm.created, "ended": None,
                 "end": VmEnd.ALIVE.value, **self._prices(vm)} for vm in self._vms.values()]

    def _prices(self, vm: Vm) -> dict[str, Any]:
        """The VM's machine and its prices, in its region when known (a run across regions
        prices each VM where it ran), with its zone, the egress of the worker software it
        reads from the bucket at boot and the rate its jobs' staged files pay (``cost.egress``:
        0 in the bucket's region)."""
        config, pool, region = self.config, vm.pool, vm.region
        where = {"zone": vm.zone, "region": region, "egress_usd": egress_usd(
            config.staged_bytes_per_vm, config.bucket_location, region),
            # its jobs' staged files are priced at this rate in the cost report
            "egress_usd_per_gb": usd_per_gb(config.bucket_location, region)} if vm.zone else {}
        if vm.shape is None:
            return {"machine_type": config.machine_types.get(pool, pool.value),
                    "hourly": config.price(pool, None, region),
                    "on_demand_hourly": config.on_demand_price(pool, region), **where}
        return {**vm.shape.to_dict(), "hourly": config.price(pool, vm.shape, region),
                "on_demand_hourly": config.price(Pool.ON_DEMAND, vm.shape, region), **where}

    def staged_egress_usd(self, name: str, nbytes: int) -> float:
        """USD of ``nbytes`` moved between the bucket and VM ``name``, where it runs (0 in
        the bucket's region, for a VM of no known zone, or one no longer tracked)."""
        vm = self._vms.get(name)
        if vm is None or not vm.zone:
            return 0.0
        return egress_usd(nbytes, self.config.bucket_location, vm.region)

    def size(self, shape: Shape | None) -> ShapeSize:
        """What a worker of ``shape`` holds for its jobs."""
        return self.config.size(shape)

    def booting(self) -> list[Booting]:
        return [Booting(vm.name, vm.pool, vm.created, vm.shape) for vm in self._vms.values()
                if not vm.ready]

    def ready_count(self) -> int:
        return sum(1 for vm in self._vms.values() if vm.ready)

    def ready_by_shape(self) -> dict[Shape | None, frozenset[Pool]]:
        """The pools of each shape with a ready VM (the run's own shape always listed)."""
        ready: dict[Shape | None, set[Pool]] = {None: set()}
        for vm in self._vms.values():
            if vm.ready:
                ready.setdefault(vm.shape, set()).add(vm.pool)
        return {shape: frozenset(pools) for shape, pools in ready.items()}

    def alive_by_shape(self) -> dict[Shape | None, dict[Pool, int]]:
        alive: dict[Shape | None, dict[Pool, int]] = {None: {}}
        for vm in self._vms.values():
            per_pool = alive.setdefault(vm.shape, {})
            per_pool[vm.pool] = per_pool.get(vm.pool, 0) + 1
        return alive

    def loads(self, workers: Mapping[str, tuple[int, int]],
              queued: Mapping[Shape | None, Mapping[Pool, int]],
              now: float) -> dict[Shape | None, Load]:
        """Each shape's work and VMs for a scaling round, from the scheduler's ``workers``
        (``(cpus, free)`` each) and queued demand per shape; a ready VM with nothing to do is
        idle from ``now``."""
        views: dict[Shape | None, dict[Pool, list[WorkerView]]] = {}
        running: dict[Shape | None, list[int]] = {}
        for vm in self._vms.values():
            slots = self.size(vm.shape).slots
            cpus, free = workers.get(vm.name, (slots, slots))
            busy = cpus - free
            if busy or vm.places.has_jobs():
                vm.idle_since = None
            elif vm.ready and vm.idle_since is None:
                vm.idle_since = now
            views.setdefault(vm.shape, {}).setdefault(vm.pool, []).append(
                WorkerView(vm.name, not vm.ready, busy, vm.idle_since))
            counts = running.setdefault(vm.shape, [0, 0])
            counts[0] += busy
            counts[1] += busy if vm.pool is Pool.SPOT else 0
        return {shape: Load(queued.get(shape, {Pool.SPOT: 0, Pool.ON_DEMAND: 0}),
                            views.get(shape, {}), *running.get(shape, (0, 0)))
                for shape in {None, *queued, *views}}
