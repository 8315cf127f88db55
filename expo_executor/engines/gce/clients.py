"""Compute Engine clients, and the one instance delete that the engine, ``expocloud cleanup``
and a worker deleting its own VM all make.

google-cloud-compute is imported inside the functions, so this module imports without the
``gce`` extra. ``endpoint`` set means a local fake, reached with anonymous credentials.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from expo_executor.engines.gce.compute_lib import client_classes, compute_types
from expo_executor.gcp.errors import classify_error

T = TypeVar("T")


def make_clients(endpoint: str | None) -> tuple[Any, Any]:
    """An InstancesClient and the ZoneOperationsClient that goes to the same place."""
    instances, operations = client_classes()
    kwargs: dict[str, Any] = {}
    if endpoint:
        from google.auth.credentials import AnonymousCredentials
        kwargs = {"client_options": {"api_endpoint": endpoint},
                  "credentials": AnonymousCredentials()}
    return instances(**kwargs), operations(**kwargs)


def delete_call(client: Any, project: str, zone: str, name: str, timeout: float,
                call: Callable[[Callable[[], T]], T]) -> Any | None:
    """One logical delete (one request_id for all its retries); None if already gone."""
    compute = compute_types()

    request = compute.DeleteInstanceRequest(project=project, zone=zone, instance=name,
                                            request_id=str(uuid.uuid4()))
    try:
        return call(lambda: client.delete_unary(request=request, retry=None, timeout=timeout))
    except Exception as err:
        if classify_error(err) == "notfound":
            return None
        raise
