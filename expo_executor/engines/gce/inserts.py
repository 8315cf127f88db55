"""One insert or bulk insert of the GCE engine's VMs, as one logical call: a fresh
``request_id`` that every retry reuses, so a retried call whose first answer was lost is not
applied twice. Apart from the engine, which decides where and when to call it.
"""

from __future__ import annotations

import uuid
from typing import Any

from expo_executor.engines.gce.compute_lib import compute_types
from expo_executor.engines.gce.config import Ask, Call
from expo_executor.engines.gce.vm_bodies import VmBodies


def submit(instances: Any, bodies: VmBodies, call: Call, zone: str, names: list[str], ask: Ask,
           bulk: bool) -> Any:
    """Insert ``names`` in ``zone`` (one bulk insert when ``bulk``); the operation back."""
    compute = compute_types()

    project, timeout = bodies.config.project, bodies.config.call_timeout_s
    request_id = str(uuid.uuid4())
    if bulk:
        per_instance = compute.BulkInsertInstanceResourcePerInstanceProperties
        resource = compute.BulkInsertInstanceResource(
            count=len(names), min_count=len(names),
            per_instance_properties={n: per_instance(name=n) for n in names},
            instance_properties=bodies.properties(ask, zone))
        request = compute.BulkInsertInstanceRequest(
            project=project, zone=zone, bulk_insert_instance_resource_resource=resource,
            request_id=request_id)
        return call(lambda: instances.bulk_insert_unary(request=request, retry=None,
                                                         timeout=timeout))
    insert = compute.InsertInstanceRequest(
        project=project, zone=zone, instance_resource=bodies.instance(names[0], zone, ask),
        request_id=request_id)
    return call(lambda: instances.insert_unary(request=insert, retry=None, timeout=timeout))
