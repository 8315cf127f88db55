"""GCE machine types read from their names: vCPUs, memory and family.

Why from the name: memory checks and cost figures must work before anything is provisioned and
without credentials, so no Compute API call is made. Only shapes we know to be right are
returned; a name we cannot read gives None (callers then say so, or stop tracking memory)
rather than a guess.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from expo_executor.core.shapes import comes_with_gpus


@dataclass(frozen=True)
class Shape:
    """What GCE reports for a type: guest vCPUs and memory in MiB."""

    vcpus: int
    memory_mb: int


# GiB per vCPU of the predefined classes. The newer families mostly share these; n1 has its own
# older ratios, and several fourth-generation families give "highcpu" 2 GiB per vCPU, not 1.
_GIB_PER_VCPU = {"standard": 4.0, "highmem": 8.0, "highcpu": 1.0}
_FAMILY_GIB_PER_VCPU = {
    "n1": {"standard": 3.75, "highmem": 6.5, "highcpu": 0.9},
    "c2d": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
    "c3": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
    "c3d": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
    "c4a": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
    "n4": {"standard": 4.0, "highmem": 8.0, "highcpu": 2.0},
}
# Families whose class ratios we are not sure of: their names are not read (None), not guessed.
_UNREAD_FAMILIES = frozenset({"c4", "c4d"})
# The one predefined type off its class ratio among the families above.
_IRREGULAR_GIB = {"n2-highmem-128": 864.0}
# Shared-core E2: GCE reports 2 vCPUs for each (guestCpus, what the guest sees) but bills only a
# fraction of them: (memory GiB, billed vCPUs).
_SHARED_CORE = {"e2-micro": (1.0, 0.25), "e2-small": (2.0, 0.5), "e2-medium": (4.0, 1.0)}
_SHARED_CORE_VCPUS = 2
_PREDEFINED = re.compile(r"^([a-z][a-z0-9]*)-(standard|highmem|highcpu)-(\d+)$")
_CUSTOM = re.compile(r"^(?:([a-z][a-z0-9]*)-)?custom-(\d+)-(\d+)(?:-ext)?$")

CLASSES = ("standard", "highcpu", "highmem")
# The predefined sizes (vCPUs) of the families we price, as GCE offers them (e2 has no 1-vCPU
# predefined type, c2 starts at 4, c3 has 4/8/22/44/88/176). Variants (-lssd, -metal) and
# shared-core types are left out: they are not a plain vCPU/GiB price.
PREDEFINED_SIZES: dict[str, dict[str, tuple[int, ...]]] = {
    "e2": {"standard": (2, 4, 8, 16, 32), "highcpu": (2, 4, 8, 16, 32),
           "highmem": (2, 4, 8, 16)},
    "n1": {"standard": (1, 2, 4, 8, 16, 32, 64, 96), "highcpu": (2, 4, 8, 16, 32, 64, 96),
           "highmem": (2, 4, 8, 16, 32, 64, 96)},
    "n2": {"standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128),
           "highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96),
           "highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128)},
    "n2d": {"standard": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
            "highcpu": (2, 4, 8, 16, 32, 48, 64, 80, 96, 128, 224),
            "highmem": (2, 4, 8, 16, 32, 48, 64, 80, 96)},
    "c2": {"standard": (4, 8, 16, 30, 60)},
    "c2d": {cls: (2, 4, 8, 16, 32, 56, 112) for cls in CLASSES},
    "c3": {cls: (4, 8, 22, 44, 88, 176) for cls in CLASSES},
    "t2d": {"standard": (1, 2, 4, 8, 16, 32, 48, 60)},
}


def shape(machine_type: str) -> Shape | None:
    """vCPUs and MiB of a predefined, shared-core, accelerator-optimized (a2) or custom type;
    None if we cannot read it."""
    if machine_type in _A2:
        vcpus, gib, _gpus = _A2[machine_type]
        return Shape(vcpus, gib * 1024)
    if machine_type in _SHARED_CORE:
        return Shape(_SHARED_CORE_VCPUS, int(_SHARED_CORE[machine_type][0] * 1024))
    custom = _CUSTOM.match(machine_type)
    if custom:
        return Shape(int(custom.group(2)), int(custom.group(3)))
    match = _PREDEFINED.match(machine_type)
    if not match or match.group(1) in _UNREAD_FAMILIES:
        return None
    fam, kind, vcpus = match.group(1), match.group(2), int(match.group(3))
    gib = _IRREGULAR_GIB.get(machine_type)
    if gib is None:
        gib = _FAMILY_GIB_PER_VCPU.get(fam, _GIB_PER_VCPU)[kind] * vcpus
    return Shape(vcpus, int(gib * 1024))


def machine_memory_mb(machine_type: str) -> int | None:
    """A GCE machine type's memory in MiB, from its name; None for a type we cannot read."""
    found = shape(machine_type)
    return None if found is None else found.memory_mb


def billed_vcpus(machine_type: str) -> float | None:
    """The vCPUs GCE bills for: a fraction of 2 for shared-core E2, else all of them."""
    if machine_type in _SHARED_CORE:
        return _SHARED_CORE[machine_type][1]
    found = shape(machine_type)
    return None if found is None else float(found.vcpus)


def family(machine_type: str) -> str:
    """The machine family ("e2", "n2", ...): the name's first part; "n1" for a bare custom-."""
    custom = _CUSTOM.match(machine_type)
    if custom:
        return custom.group(1) or "n1"
    return machine_type.split("-", 1)[0]


def is_custom(machine_type: str) -> bool:
    """Custom types are billed at their own (higher) rates, not the predefined ones."""
    return _CUSTOM.match(machine_type) is not None


def predefined_types(fam: str) -> list[str]:
    """Every predefined type of a family we know the sizes of, by class then size."""
    sizes = PREDEFINED_SIZES.get(fam, {})
    return [f"{fam}-{cls}-{n}" for cls in CLASSES for n in sizes.get(cls, ())]


def holding(types: Iterable[str], threads: int, mem_mb: int) -> list[str]:
    """The types among ``types`` whose vCPUs and memory hold a job of ``threads`` and
    ``mem_mb`` (a type we cannot read holds nothing)."""
    return [t for t in types
            if (dims := shape(t)) is not None and dims.vcpus >= threads
            and dims.memory_mb >= mem_mb]


def standard_types() -> list[str]:
    """Every predefined type of the standard class (4 GiB per vCPU, n1 3.75) of the families
    we know the sizes of: what a job is given when no price table says which is cheapest."""
    return [t for fam in PREDEFINED_SIZES for t in predefined_types(fam) if "-standard-" in t]


def smallest(types: Iterable[str], prefer: str) -> str | None:
    """The smallest of ``types``: fewest vCPUs, family ``prefer`` first among equals, then
    least memory; None when ``types`` holds none we can read."""
    sized = [(dims.vcpus, family(t) != prefer, dims.memory_mb, t)
             for t in types if (dims := shape(t)) is not None]
    return min(sized)[3] if sized else None


def largest(types: Iterable[str], by_memory: bool = False) -> tuple[str, Shape] | None:
    """The type of most vCPUs (``by_memory``: of most memory) among ``types``, with its size:
    what the refusal of a job no type holds names; None when none can be read."""
    sized = [(dims, t) for t in types if (dims := shape(t)) is not None]
    if not sized:
        return None

    def size(item: tuple[Shape, str]) -> tuple[int, int, str]:
        dims, name = item
        return (dims.memory_mb, dims.vcpus, name) if by_memory else \
            (dims.vcpus, dims.memory_mb, name)

    dims, name = max(sized, key=size)
    return name, dims


# -- GPUs ------------------------------------------------------------------------------------------
# What Compute Engine lets a machine take (docs: "GPU machine types"): N1 takes T4, V100, P4 and
# P100 as guest accelerators, in these counts and up to these vCPUs per count; G2 comes with its
# L4s and A2 with its A100s (the type fixes the count); the other families that come with GPUs
# (core.shapes.GPU_MACHINE_FAMILIES) take none but their own; every other family takes none.
N1_GPUS: dict[str, dict[int, int]] = {  # GPU type -> {count: most vCPUs}
    "nvidia-tesla-t4": {1: 24, 2: 48, 4: 96},
    "nvidia-tesla-v100": {1: 12, 2: 24, 4: 48, 8: 96},
    "nvidia-tesla-p4": {1: 24, 2: 48, 4: 96},
    "nvidia-tesla-p100": {1: 16, 2: 32, 4: 96},
}
L4, A100 = "nvidia-l4", "nvidia-tesla-a100"
_A2 = {"a2-highgpu-1g": (12, 85, 1), "a2-highgpu-2g": (24, 170, 2), "a2-highgpu-4g": (48, 340, 4),
       "a2-highgpu-8g": (96, 680, 8), "a2-megagpu-16g": (96, 1360, 16)}  # vCPUs, GiB, A100s
_G2_L4S = {4: 1, 8: 1, 12: 1, 16: 1, 32: 1, 24: 2, 48: 4, 96: 8}  # g2-standard-N: its L4s
GPU_TYPES = tuple(sorted({*N1_GPUS, L4, A100}))


def attached_gpus(machine_type: str) -> tuple[str, int] | None:
    """The GPUs an accelerator-optimized type comes with (type, count); None for others."""
    if machine_type in _A2:
        return A100, _A2[machine_type][2]
    match = _PREDEFINED.match(machine_type)
    if match and match.group(1) == "g2" and match.group(2) == "standard":
        count = _G2_L4S.get(int(match.group(3)))
        return (L4, count) if count else None
    return None


def gpu_problem(machine_type: str, gpu_type: str, count: int) -> str | None:
    """Why ``machine_type`` cannot have ``count`` GPUs of ``gpu_type`` (as the Compute API
    would refuse it), or None when it can."""
    if gpu_type not in GPU_TYPES:
        return f"unknown GPU type {gpu_type!r} (known: {', '.join(GPU_TYPES)})"
    if count < 1:
        return f"{count} GPUs of {gpu_type} is not a GPU count"
    attached = attached_gpus(machine_type)
    if attached is not None:
        if attached != (gpu_type, count):
            return (f"{machine_type} comes with {attached[1]} x {attached[0]}, "
                    f"not {count} x {gpu_type}")
        return None
    if comes_with_gpus(machine_type):  # a3, a4, g4: their GPUs are none of GPU_TYPES
        return (f"{machine_type} comes with GPUs of its own ({family(machine_type)} is an "
                f"accelerator-optimized family), not {count} x {gpu_type}")
    if family(machine_type) != "n1":
        return (f"{machine_type} takes no GPUs ({family(machine_type)} machine types have none; "
                "T4, V100, P4 and P100 go on n1, L4 comes with g2, A100 with a2)")
    counts = N1_GPUS.get(gpu_type)
    if counts is None:
        return f"{gpu_type} does not attach to n1 ({_home(gpu_type)})"
    if count not in counts:
        return f"{gpu_type} attaches in counts of {', '.join(map(str, counts))}, not {count}"
    dims = shape(machine_type)
    if dims is not None and dims.vcpus > counts[count]:
        return (f"{count} x {gpu_type} allows at most {counts[count]} vCPUs; {machine_type} has "
                f"{dims.vcpus}")
    return None


def _home(gpu_type: str) -> str:
    return "it comes with g2 machine types" if gpu_type == L4 else "it comes with a2 machine types"


def gpu_machine(gpu_type: str, count: int, threads: int, mem_mb: int) -> str | None:
    """The smallest machine type that holds ``count`` GPUs of ``gpu_type`` and a job of
    ``threads`` and ``mem_mb``, for a rule that names GPUs but no machine type; None if none
    does (or the GPU type is unknown: ``gpu_problem`` says why)."""
    if gpu_type == A100:
        names = list(_A2)
    elif gpu_type == L4:
        names = [f"g2-standard-{n}" for n in sorted(_G2_L4S)]
    else:  # n1-standard: the balanced shape, as GCE's GPU examples use
        names = [t for t in predefined_types("n1") if "-standard-" in t]
    sized = sorted((dims.vcpus, dims.memory_mb, name) for name in names
                   if (dims := shape(name)) is not None)
    for vcpus, memory_mb, name in sized:
        if vcpus >= threads and memory_mb >= mem_mb and gpu_problem(name, gpu_type, count) is None:
            return name
    return None
