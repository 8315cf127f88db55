"""A worker's shape: the machine a job needs (machine type, GPUs, boot disk). Pure.

A run without per-rule machines has one shape, the run's own (``None`` everywhere: its Spot and
on-demand pools may even use different machine types, as configured). A rule that asks for a
machine of its own (``machine_type``, ``gpu_type``/``gpu``, a ``disk_mb`` beyond the run's
disk) gets a :class:`Shape`, and each shape has a Spot and an on-demand pool of its own, created,
scaled and deleted on their own. The scheduler puts a job only on a worker of the job's shape,
so a GPU job never lands on a CPU-only VM and a one-thread job never holds a GPU VM.
:func:`find_misfit` is the one rule of whether a job fits a worker of a size, which the front
ends and the per-rule machines (``coordinator.shapes``) both apply.
"""

from __future__ import annotations

from dataclasses import dataclass

# The machine families that come with GPUs of their own (Compute Engine's accelerator-optimized
# families): a VM of one takes no guestAccelerators and cannot live-migrate. The one list: the
# GCE engine and the cost module read it here; the emulator keeps Google's copy
# (emulator/catalogue.py) and tests/unit/emulator/test_catalogue.py holds the two to agreement.
GPU_MACHINE_FAMILIES = ("a2", "a3", "a4", "g2", "g4")


def comes_with_gpus(machine_type: str) -> bool:
    """Whether ``machine_type`` is of a family whose GPUs come with the machine type."""
    return machine_type.split("-", 1)[0] in GPU_MACHINE_FAMILIES


@dataclass(frozen=True, order=True)
class Shape:
    """What a VM is: its machine type, its GPUs (type and count), its boot disk in GB (0: the
    run's own disk size) and the labels of the rule that asked for it (sorted (key, value)
    pairs; empty for a shape any rule may share). A rule's own labels make its VMs its own: a
    VM's labels are set once, at its creation, and the billing export reads them per VM."""

    machine_type: str
    gpu_type: str | None = None
    gpu_count: int = 0
    disk_gb: int = 0
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def gpus(self) -> bool:
        return self.gpu_count > 0

    def describe(self) -> str:
        """One phrase for logs and errors: ``n1-standard-4 + 1 x nvidia-tesla-t4, 100 GB``."""
        text = self.machine_type
        if self.gpus:
            text += f" + {self.gpu_count} x {self.gpu_type}"
        if self.disk_gb:
            text += f", {self.disk_gb} GB disk"
        if self.labels:
            text += ", labels " + ",".join(f"{k}={v}" for k, v in self.labels)
        return text

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {"machine_type": self.machine_type, "gpu_type": self.gpu_type,
                                  "gpu_count": self.gpu_count, "disk_gb": self.disk_gb}
        if self.labels:
            out["labels"] = dict(self.labels)
        return out


@dataclass(frozen=True)
class ShapeSize:
    """What a worker of a shape holds for its jobs: CPU slots and memory (0: not tracked)."""

    slots: int
    mem_mb: int = 0


def shape_order(shape: Shape | None) -> tuple:
    """A total order over shapes with the run's own (None) first: every round scales the
    shapes in the same order."""
    return (0,) if shape is None else (1, shape.machine_type, shape.gpu_type or "",
                                       shape.gpu_count, shape.disk_gb, shape.labels)


@dataclass(frozen=True)
class Misfit:
    """A job no worker can hold: what it asks for of which resource, and what workers have."""

    resource: str  # "cpus" or "mem_mb"
    needed: int
    have: int


def find_misfit(cpus: int, mem_mb: int, slots: int, worker_mem_mb: int) -> Misfit | None:
    """Whether a job of ``cpus`` and ``mem_mb`` fits a worker of ``slots`` CPUs and
    ``worker_mem_mb`` (0: memory not tracked); None when it does."""
    if cpus > slots:
        return Misfit("cpus", cpus, slots)
    if worker_mem_mb and mem_mb > worker_mem_mb:
        return Misfit("mem_mb", mem_mb, worker_mem_mb)
    return None
