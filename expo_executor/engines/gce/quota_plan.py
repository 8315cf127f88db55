"""Does the planned fleet fit a region's quotas? Pure: the fleet, the machine types' vCPUs and
the region's ``quotas[]`` (what ``regions.get`` answers) in, the shortfalls out.

Why before a run: a quota error during a run only holds the pool that met it (the engine waits
for one of the run's VMs to end), so a fleet the project can never hold runs slower than
planned, without saying why up front. The fleet at its largest is every pool at its cap, each VM
of the pool's largest machine: ``expocloud-max-workers`` Spot VMs and
``expocloud-max-on-demand`` on-demand ones (per-rule machines share those caps).

Which quota a VM draws on: its family's CPU quota where the region lists one (``N2_CPUS``,
``C3_CPUS``...; E2 and N1 count in ``CPUS``), a Spot VM the preemptible one
(``PREEMPTIBLE_CPUS``) when its limit is above 0 and else the same as on-demand; GPUs
``NVIDIA_<TYPE>_GPUS`` (Spot: ``PREEMPTIBLE_NVIDIA_<TYPE>_GPUS`` likewise); an external IP one
``IN_USE_ADDRESSES`` each. A GPU quota the region does not list is 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PREEMPTIBLE = "PREEMPTIBLE_"
CPUS = "CPUS"
ADDRESSES = "IN_USE_ADDRESSES"
# families with a regional CPU quota of their own, when the region lists it
FAMILY_CPU_METRICS = {"n2": "N2_CPUS", "n2d": "N2D_CPUS", "c2": "C2_CPUS", "c2d": "C2D_CPUS",
                      "c3": "C3_CPUS", "a2": "A2_CPUS", "m1": "M1_CPUS", "m2": "M2_CPUS",
                      "m3": "M3_CPUS", "t2d": "T2D_CPUS", "t2a": "T2A_CPUS", "n2a": "N2A_CPUS"}


@dataclass(frozen=True)
class Machine:
    """One VM shape: its machine type and the GPUs attached to it (type and count)."""

    machine_type: str
    gpu_type: str | None = None
    gpu_count: int = 0


@dataclass(frozen=True)
class FleetPlan:
    """The fleet at its largest: how many VMs each pool may hold at once, of which shapes."""

    spot: int
    on_demand: int
    spot_machines: tuple[Machine, ...]
    on_demand_machines: tuple[Machine, ...]
    external_ip: bool


@dataclass(frozen=True)
class Quota:
    limit: float
    usage: float

    @property
    def free(self) -> float:
        return self.limit - self.usage


@dataclass(frozen=True)
class Need:
    """What the fleet may use of one quota, and why, in words."""

    metric: str
    amount: float
    why: str


def quotas_of(region: Mapping) -> dict[str, Quota]:
    """``regions.get``'s ``quotas[]`` by metric."""
    return {str(q["metric"]): Quota(float(q.get("limit", 0)), float(q.get("usage", 0)))
            for q in region.get("quotas") or []}


def gpu_metric(gpu_type: str) -> str:
    """``nvidia-tesla-t4`` -> ``NVIDIA_T4_GPUS``; ``nvidia-l4`` -> ``NVIDIA_L4_GPUS``."""
    name = gpu_type.removeprefix("nvidia-").removeprefix("tesla-")
    return f"NVIDIA_{name.upper().replace('-', '_')}_GPUS"


def cpu_metric(machine_type: str, quotas: Mapping[str, Quota]) -> str:
    family = FAMILY_CPU_METRICS.get(machine_type.split("-", 1)[0])
    return family if family in quotas else CPUS


def _spot(metric: str, quotas: Mapping[str, Quota]) -> str:
    """The quota a Spot VM draws on instead of ``metric``'s, when the project has one."""
    preemptible = PREEMPTIBLE + (metric if metric.startswith("NVIDIA_") else CPUS)
    quota = quotas.get(preemptible)
    return preemptible if quota is not None and quota.limit > 0 else metric


def _pool_needs(count: int, machines: tuple[Machine, ...], vcpus: Mapping[str, int],
                quotas: Mapping[str, Quota], spot: bool) -> list[Need]:
    """Per quota, ``count`` VMs of the pool's largest machine drawing on it."""
    kind = "Spot" if spot else "on-demand"
    largest: dict[str, tuple[float, str]] = {}
    for machine in machines:
        draws = []
        if machine.machine_type in vcpus:
            draws.append((cpu_metric(machine.machine_type, quotas), vcpus[machine.machine_type],
                          f"{machine.machine_type}, {vcpus[machine.machine_type]} vCPUs"))
        if machine.gpu_type and machine.gpu_count:
            draws.append((gpu_metric(machine.gpu_type), machine.gpu_count,
                          f"{machine.gpu_count} x {machine.gpu_type}"))
        for metric, amount, what in draws:
            metric = _spot(metric, quotas) if spot else metric
            if amount > largest.get(metric, (0.0, ""))[0]:
                largest[metric] = (float(amount), what)
    return [Need(metric, count * amount, f"{count} {kind} x {what}")
            for metric, (amount, what) in largest.items()] if count > 0 else []


def needs(fleet: FleetPlan, vcpus: Mapping[str, int],
          quotas: Mapping[str, Quota]) -> list[Need]:
    """Every quota the fleet at its largest draws on, the two pools added up."""
    found = _pool_needs(fleet.spot, fleet.spot_machines, vcpus, quotas, spot=True) + \
        _pool_needs(fleet.on_demand, fleet.on_demand_machines, vcpus, quotas, spot=False)
    if fleet.external_ip and fleet.spot + fleet.on_demand > 0:
        found.append(Need(ADDRESSES, fleet.spot + fleet.on_demand,
                          f"{fleet.spot + fleet.on_demand} VMs with an external IP"))
    total: dict[str, Need] = {}
    for need in found:
        seen = total.get(need.metric)
        total[need.metric] = need if seen is None else \
            Need(need.metric, seen.amount + need.amount, f"{seen.why} + {need.why}")
    return list(total.values())


def shortfalls(found: list[Need], quotas: Mapping[str, Quota]) -> list[tuple[Need, Quota]]:
    """The needs the quotas do not hold (a quota the region does not list holds nothing)."""
    return [(need, quotas.get(need.metric, Quota(0.0, 0.0))) for need in found
            if need.amount > quotas.get(need.metric, Quota(0.0, 0.0)).free]


def describe(need: Need, quota: Quota) -> str:
    """``CPUS: up to 110 (50 Spot x e2-standard-2, ...), but 24 - 2 in use leaves 22``."""
    return (f"{need.metric}: up to {need.amount:g} ({need.why}), but {quota.limit:g} - "
            f"{quota.usage:g} in use leaves {max(0.0, quota.free):g}")
