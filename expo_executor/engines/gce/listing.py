"""Listing expocloud's VMs: by the run's label, in every zone at once (an aggregated list,
cut to the fields a round needs) or zone by zone, and ``find_instances`` for ``expocloud
cleanup`` and a crashed run's stop.
"""

from __future__ import annotations

from typing import Any

from expo_executor.engines.base import Instance
from expo_executor.engines.gce.answers import name_of
from expo_executor.engines.gce.clients import make_clients
from expo_executor.engines.gce.compute_lib import compute_types
from expo_executor.engines.gce.config import (CALLS, POOL_LABEL, POOLS_BY_LABEL, RUN_LABEL,
                                              SLOTS_LABEL, Call, GceConfig)

# What a round needs of each VM (name, id, status, labels); without it each listed VM
# carries its whole resource, its startup script and metadata included, every round.
RUN_LISTING_FIELDS = "items/*/instances(name,id,status,labels),nextPageToken"


def run_filter(run_label: str | None) -> str:
    return f'labels.{RUN_LABEL} = "{run_label}"' if run_label else f"labels.{RUN_LABEL}:*"


def aggregated(client: Any, project: str, flt: str, timeout: float,
               fields: str | None = None) -> list[tuple[str, Any]]:
    """(zone, instance) for every instance matching ``flt``, all zones, all pages; ``fields``:
    only these fields of each (a partial response, asked for with ``X-Goog-FieldMask``)."""
    compute = compute_types()

    request = compute.AggregatedListInstancesRequest(project=project, filter=flt)
    metadata = [("x-goog-fieldmask", fields)] if fields else []
    found = [(name_of(scope), inst)
             for scope, scoped in client.aggregated_list(request=request, retry=None,
                                                         timeout=timeout, metadata=metadata)
             for inst in scoped.instances]
    if fields and any(not inst.name or not inst.status for _, inst in found):
        # a mask the service read otherwise than we meant: every VM would look gone
        raise RuntimeError(f"the Compute listing came back without names or statuses for "
                           f"the field mask {fields!r}")
    return found


def zone_list(client: Any, project: str, zone: str, flt: str, timeout: float) -> list[Any]:
    compute = compute_types()

    request = compute.ListInstancesRequest(project=project, zone=zone, filter=flt)
    return list(client.list(request=request, retry=None, timeout=timeout))


def run_instances(client: Any, call: Call, config: GceConfig) -> list[tuple[str, Any]]:
    """(zone, instance) of every VM of ``config``'s run, cut to what a round needs."""
    return call(lambda: aggregated(client, config.project, run_filter(config.run_label),
                                   config.call_timeout_s, RUN_LISTING_FIELDS))


def locate(client: Any, call: Call, config: GceConfig, name: str) -> str | None:
    """The zone of the run's VM ``name`` (None: there is none)."""
    flt = f'({run_filter(config.run_label)}) (name = "{name}")'
    found = call(lambda: aggregated(client, config.project, flt, config.call_timeout_s))
    return found[0][0] if found else None


def is_ours(client: Any, call: Call, config: GceConfig, zone: str, name: str) -> bool:
    """Does the existing instance ``name`` in ``zone`` belong to ``config``'s run?"""
    try:
        inst = call(lambda: client.get(project=config.project, zone=zone, instance=name,
                                       retry=None, timeout=config.call_timeout_s))
    except Exception:  # noqa: BLE001 - cannot tell: not ours
        return False
    return dict(inst.labels).get(RUN_LABEL) == config.run_label


def to_instance(inst: Any, zone: str = "") -> Instance | None:
    """A listed VM as the Engine contract has it (pool and slots from its labels), in
    ``zone``."""
    labels = dict(inst.labels)
    pool = POOLS_BY_LABEL.get(labels.get(POOL_LABEL, ""))
    if pool is None:
        return None  # labelled for the run but not made by an engine: close() still deletes it
    try:
        slots = int(labels.get(SLOTS_LABEL, "1"))
    except ValueError:
        slots = 1
    return Instance(inst.name, pool, slots, inst.status, zone)


def find_instances(project: str, zones: list[str] | None, endpoint: str | None = None,
                   run_label: str | None = None) -> list[dict]:
    """expocloud's VMs (labelled ``expocloud-run``; one run's if ``run_label``) in ``zones``
    (every zone if empty): name, zone, status, labels, created."""
    client, _ops = make_clients(endpoint)
    call = CALLS.caller()
    flt = run_filter(run_label)
    if zones:
        found = [(zone, inst) for zone in zones
                 for inst in call(lambda z=zone: zone_list(client, project, z, flt,
                                                           CALLS.timeout_s))]
    else:
        found = call(lambda: aggregated(client, project, flt, CALLS.timeout_s))
    out = []
    for zone, inst in found:
        labels = dict(inst.labels)
        if RUN_LABEL not in labels or (run_label and labels[RUN_LABEL] != run_label):
            continue
        out.append({"name": inst.name, "zone": zone, "status": inst.status, "labels": labels,
                    "created": inst.creation_timestamp})
    return out
