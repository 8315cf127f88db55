"""Per-rule machines on GCE: a job's resources choose its VM's shape, and each shape's workers
are sized and priced here.

A rule asks for a machine of its own with resources (from the Snakefile or a profile's
``set-resources``): ``machine_type`` (a GCE type, or ``auto``: the cheapest per job for the
rule's threads, memory and runtime), ``gpu_type`` (or ``gpu_model``, as Snakemake's SLURM
plugin names it) and ``gpu`` (a count, default 1), and a ``disk_mb`` more than the run's boot
disk holds. A job that names no machine but needs more threads or memory than the run's own
workers hold gets one that holds it (``ShapeBook.fit``: rule_machines.MachineFit), unless the
user set the slots per worker. Everything is checked before a VM exists, with one line naming
the rule's resource and the fix: an unknown GPU type, GPUs a machine type cannot take, a job
larger than its machine or than any machine. A rule's ``gce_labels`` (``"team=ml,project=x"``)
gives it VMs of its own, carrying its labels and ``expocloud-rule``: labels are checked by
Google's rules here too. A rule that asks for nothing of its own and fits
the run's own workers runs on the run's own pools (shape None), exactly as without this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape, ShapeSize, find_misfit
from expo_executor.cost import machines
from expo_executor.cost.prices import PriceTable
from expo_executor.engines.gce.config import RULE_LABEL, USER_LABELS
from expo_executor.gcp.labels import LABEL_RULES, MAX_LABELS, as_value, parse_labels

MACHINE_TYPE = "machine_type"
GPU_TYPE = "gpu_type"
GPU_MODEL = "gpu_model"  # what Snakemake's SLURM plugin reads: the same, when gpu_type is not set
GPU = "gpu"
DISK_MB = "disk_mb"
GCE_LABELS = "gce_labels"  # a rule's own labels, "team=ml,project=x": VMs of its own
AUTO = "auto"
THREADS = "_cores"  # how Snakemake names a rule's threads among its resources
SYSTEM_DISK_GB = 10  # what the image and the worker's software take of a boot disk


@dataclass(frozen=True)
class RunMachines:
    """The run's own machines, which a rule's shape starts from: the Spot and on-demand types
    (after 'auto'), its slots and memory per worker and its boot disk."""

    spot_type: str
    on_demand_type: str
    slots: int
    mem_mb: int
    disk_gb: int

    def own(self, shape: Shape) -> bool:
        """Is ``shape`` the run's own (so its jobs run on the run's own pools)?"""
        return shape == Shape(self.spot_type) and self.spot_type == self.on_demand_type


@dataclass
class ShapeBook:
    """Every shape of a run: its workers' size, its hourly prices per pool (no table: not
    priced) and the largest one seen, for the error of a job no shape holds."""

    run: RunMachines
    table: PriceTable | None = None
    region_tables: Mapping[str, PriceTable] = field(default_factory=dict)  # across regions
    priced: bool = False  # a budget needs every shape priced: an unpriced one is an error
    rule_machines: Mapping[str, str] = field(default_factory=dict)  # rule -> 'auto' resolved
    gpu_image: str | None = None  # --expocloud-gce-gpu-image: GPU VMs boot nothing else
    run_labels: Mapping[str, str] = field(default_factory=dict)  # --expocloud-gce-labels
    # (rule, threads, mem_mb) -> the machine type of a job the run's own workers cannot hold
    # (rule_machines.MachineFit); None: such a job is refused (the user set the slots)
    fit: Callable[[str, int, int], str] | None = None
    _seen: dict[Shape, ShapeSize] = field(default_factory=dict)
    _fitted: dict[tuple[str, int, int], str] = field(default_factory=dict)

    def size(self, shape: Shape | None) -> ShapeSize:
        if shape is None:
            return ShapeSize(self.run.slots, self.run.mem_mb)
        dims = machines.shape(shape.machine_type)
        return ShapeSize(dims.vcpus, dims.memory_mb) if dims else ShapeSize(1, 0)

    def hourly(self, shape: Shape, pool: Pool, region: str = "") -> float:
        """USD per hour of a VM of ``shape`` in ``pool`` and ``region`` (empty, or a region
        not priced apart: the first region's table); 0 when the run or the shape is not
        priced (with a budget, ``shape_of`` refused an unpriced shape already)."""
        try:
            return self._hourly(shape, pool, region)
        except ExpoError:
            return 0.0

    def _hourly(self, shape: Shape, pool: Pool, region: str = "") -> float:
        table = self.region_tables.get(region, self.table)
        if table is None:
            return 0.0
        return table.shape_hourly(shape.machine_type, shape.gpu_type, shape.gpu_count,
                                  spot=pool is Pool.SPOT)

    def known(self) -> list[Shape]:
        """Every shape seen so far (before a run: those of the rules that name theirs as
        values), for the checks of the project before the first VM."""
        return sorted(self._seen)

    def max_slots(self) -> int:
        """The most slots of any worker of the run so far (a job's threads never exceed its
        own worker's)."""
        return max([self.run.slots, *(size.slots for size in self._seen.values())])

    def largest(self) -> str:
        """The largest machine of the run so far, in words."""
        own = f"{self.run.spot_type} ({self.run.slots} slots)"
        if not self._seen:
            return own
        shape, size = max(self._seen.items(), key=lambda item: (item[1].slots, item[1].mem_mb))
        return own if size.slots <= self.run.slots else f"{shape.describe()} ({size.slots} vCPUs)"

    def shape_of(self, rule: str, get: Callable[[str], object], threads: int,
                 mem_mb: int) -> Shape | None:
        """The shape a job of ``rule`` needs from its resources (``get``), None for the run's
        own; raises ExpoError naming the resource and the fix."""
        gpu_type, count = _gpus(rule, get)
        machine = self._machine(rule, get, gpu_type, count, threads, mem_mb)
        attached = machines.attached_gpus(machine) if machine else None
        if attached and gpu_type is None:
            gpu_type, count = attached
        disk_gb = _disk_gb(rule, get(DISK_MB), self.run.disk_gb)
        labels = self._labels(rule, get(GCE_LABELS))
        if machine is None and gpu_type is None and not disk_gb and not labels:
            return None
        shape = Shape(machine or self.run.spot_type, gpu_type, count, disk_gb, labels)
        if gpu_type is not None:
            problem = machines.gpu_problem(shape.machine_type, gpu_type, count)
            if problem:
                raise ExpoError(f"resource '{GPU_TYPE}' of rule '{rule}'", problem,
                                "name a GPU type and count the machine type takes (n1: "
                                "nvidia-tesla-t4 or -v100; g2: nvidia-l4; a2: nvidia-tesla-a100)"
                                f", or drop '{MACHINE_TYPE}' to have one chosen")
        if self.run.own(shape):
            return None
        self._register(rule, shape)
        return shape

    def _labels(self, rule: str, value: object) -> tuple[tuple[str, str], ...]:
        return rule_labels(rule, value, self.run_labels,
                           f"resource '{GCE_LABELS}' of rule '{rule}'")

    def _machine(self, rule: str, get: Callable[[str], object], gpu_type: str | None,
                 count: int, threads: int, mem_mb: int) -> str | None:
        value = get(MACHINE_TYPE)
        if value is not None and str(value) == AUTO:
            value = self.rule_machines.get(rule)
        if value is None and gpu_type is not None:
            value = machines.gpu_machine(gpu_type, count, threads, mem_mb) \
                if gpu_type in machines.GPU_TYPES else None
            if value is None and gpu_type in machines.GPU_TYPES:
                raise ExpoError(f"resource '{GPU_TYPE}' of rule '{rule}'",
                                f"no machine type holds {count} x {gpu_type} with {threads} "
                                f"threads and {mem_mb} MB", f"name one with '{MACHINE_TYPE}', or "
                                "lower the rule's threads, mem_mb or GPU count")
        if value is None:  # nothing named: the run's own, unless they cannot hold the job
            return None if gpu_type is not None else self._fitting(rule, threads, mem_mb)
        name = str(value)
        if machines.shape(name) is None:
            raise ExpoError(f"resource '{MACHINE_TYPE}' of rule '{rule}'",
                            f"cannot read the machine type {name!r}",
                            "give a predefined GCE type such as n2-standard-8, or auto")
        return name

    def _fitting(self, rule: str, threads: int, mem_mb: int) -> str | None:
        """The machine type of a job of ``rule`` that names none, when the run's own workers
        cannot hold its threads or memory: chosen once per (rule, threads, mem_mb), since
        resource functions may give each job its own. None: the run's own hold it, or there
        is no choice to make (the job is then checked against the run's own workers)."""
        run = self.run
        if find_misfit(threads, mem_mb, run.slots, run.mem_mb) is None or self.fit is None:
            return None
        need = (rule, threads, mem_mb)
        if need not in self._fitted:
            self._fitted[need] = self.fit(rule, threads, mem_mb)
        return self._fitted[need]

    def _register(self, rule: str, shape: Shape) -> None:
        """A new shape: priced now when the run has a budget, before any VM of it exists."""
        if shape in self._seen:
            return
        if shape.gpus and self.gpu_image is None:
            raise ExpoError(f"resource '{GPU_TYPE}' of rule '{rule}'", "the rule asks for GPUs, "
                            "and no GPU image is set (one with the NVIDIA driver and the "
                            "worker's Python: the standard GPU images ship another Python)",
                            "build one and set --expocloud-gce-gpu-image (docs/gce.md, \"GPU "
                            "workers\")")
        if self.priced and self.table is not None:
            for pool in (Pool.SPOT, Pool.ON_DEMAND):
                try:
                    self._hourly(shape, pool)
                except ExpoError as exc:
                    raise ExpoError(f"machine of rule '{rule}'", f"{shape.describe()} has no "
                                    f"price ({exc.problem})", "--expocloud-budget needs every "
                                    "VM priced: choose a priced machine and GPU, or run without "
                                    "a budget") from None
        self._seen[shape] = self.size(shape)


def _gpus(rule: str, get: Callable[[str], object]) -> tuple[str | None, int]:
    gpu_type, count = get(GPU_TYPE), get(GPU)
    if gpu_type is None:
        gpu_type = get(GPU_MODEL)
    if count is not None and (isinstance(count, bool) or not isinstance(count, int)
                              or count < 0):
        raise ExpoError(f"resource '{GPU}' of rule '{rule}'", f"{count!r} is not a GPU count",
                        "give a whole number of GPUs, e.g. gpu=1")
    if gpu_type is None:
        if count:
            raise ExpoError(f"resource '{GPU}' of rule '{rule}'", f"{count} GPUs of no type",
                            f"name the type with '{GPU_TYPE}', e.g. gpu_type=nvidia-tesla-t4")
        return None, 0
    if count == 0:
        return None, 0
    return str(gpu_type), 1 if count is None else count


def _disk_gb(rule: str, disk_mb: object, run_disk_gb: int) -> int:
    """The boot disk a job's ``disk_mb`` needs (with the system's share), or 0 when the run's
    own disk holds it."""
    if disk_mb is None:
        return 0
    if isinstance(disk_mb, bool) or not isinstance(disk_mb, (int, float)) or disk_mb < 0:
        raise ExpoError(f"resource '{DISK_MB}' of rule '{rule}'", f"{disk_mb!r} is not a size",
                        "give megabytes, e.g. disk_mb=100000")
    need = math.ceil(disk_mb / 1024) + SYSTEM_DISK_GB
    return need if need > run_disk_gb else 0


def named_shapes(book: ShapeBook, resources: Mapping[str, Mapping[str, object]]) -> list[Shape]:
    """The machines rules name as values in a profile's ``set-resources``, or need for the
    threads (``set-threads``, as ``_cores``) and memory it gives them, checked as at a run
    (ExpoError names the rule's resource and the fix): what ``expocloud doctor`` checks the
    zones and quotas for, besides the run's own. A rule's ``auto``, and threads or memory the
    Snakefile gives, are known only to a run, which checks them before its first VM too."""
    for rule, values in sorted(resources.items()):
        threads, mem_mb = values.get(THREADS), values.get("mem_mb")
        book.shape_of(rule, values.get, max(1, threads) if isinstance(threads, int) else 1,
                      mem_mb if isinstance(mem_mb, int) else 0)
    return book.known()


def rule_labels(rule: str, value: object, run_labels: Mapping[str, str],
                setting: str) -> tuple[tuple[str, str], ...]:
    """A rule's (or CWL tool's) own labels, ``"team=ml,project=x"``, with its name as
    ``expocloud-rule``, checked by Google's rules before any VM (ExpoError naming ``setting``);
    () when it has none. A VM's labels are set at its creation (changing them later is a
    setLabels call per VM per change, docs/cost.md), so a rule with labels of its own gets VMs
    of its own, labelled with its name too."""
    if value is None or str(value).strip() == "":
        return ()
    try:
        labels = parse_labels(str(value))
    except ValueError as exc:
        raise ExpoError(setting, f"not a valid label: {exc}", "write key=value,key=value "
                        f"({LABEL_RULES}; expocloud-* keys are reserved)") from None
    if len({**run_labels, **labels}) > USER_LABELS:
        raise ExpoError(setting, f"with the run's --expocloud-gce-labels, more than "
                        f"{USER_LABELS} labels (GCE allows {MAX_LABELS} per VM, and "
                        f"{MAX_LABELS - USER_LABELS} are the executor's)", "give fewer")
    return tuple(sorted({**labels, RULE_LABEL: as_value(rule)}.items()))
