"""GCE machine types read from their names: vCPUs, memory and family.

Why from the name: memory checks and cost figures must work before anything is provisioned and
without credentials, so no Compute API call is made. Only shapes we know to be right are
returned; a name we cannot read gives None (callers then say so, or stop tracking memory)
rather than a guess.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


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
    """vCPUs and MiB of a predefined, shared-core or custom type; None if we cannot read it."""
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
