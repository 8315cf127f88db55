"""The fake Compute Engine's one route table: each Compute API method it serves, written once
with its HTTP verb and path, its method in Google's discovery document, the IAM permission its
caller needs, whether it is a catalogue read (which meets only faults armed for it by name), and
the fake's method that answers it.

A route's path groups bear the discovery document's parameter names (``project``, ``zone``,
``instance``, ...), so the checked parameters and the answering call read the same ``args``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

API_PREFIX = "/compute/v1/projects/"
_ZONE = r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)"
_REGION = r"(?P<project>[^/]+)/regions/(?P<region>[^/]+)"


@dataclass(frozen=True)
class Request:
    """One parsed API request: the path's groups, the JSON body ({} if none), the query."""

    args: dict[str, str]
    body: dict
    query: dict[str, str]

    @property
    def project(self) -> str:
        return self.args.get("project", "")

    @property
    def zone(self) -> str:
        return self.args.get("zone", "")


# The answering call: the fake (a FakeCompute, which this module does not import) and the request.
Answer = Callable[[Any, Request], dict]


@dataclass(frozen=True)
class Route:
    """One Compute API method the fake serves."""

    verb: str
    pattern: re.Pattern[str]  # the path after API_PREFIX
    api: str  # the fake's name for it, as the request log and fault arming say it
    discovery_id: str  # its method in the discovery document
    permission: str  # what FakeProjectApis.deny takes away to refuse it
    answer: Answer
    catalogue: bool = False  # a read the doctor makes: meets only faults armed for it by name


def _route(verb: str, path: str, api: str, discovery_id: str, permission: str, answer: Answer,
           catalogue: bool = False) -> Route:
    return Route(verb, re.compile(path), api, discovery_id, permission, answer, catalogue)


def _catalogue(path: str, api: str, permission: str, answer: Answer) -> Route:
    return _route("GET", path, api, f"compute.{api}", permission, answer, catalogue=True)


ROUTES: tuple[Route, ...] = (
    _route("POST", rf"{_ZONE}/instances/bulkInsert", "bulkInsert",
           "compute.instances.bulkInsert", "compute.instances.create",
           lambda fake, r: fake.api_bulk_insert(r.project, r.zone, r.body, r.query)),
    _route("POST", rf"{_ZONE}/instances", "insert", "compute.instances.insert",
           "compute.instances.create",
           lambda fake, r: fake.api_insert(r.project, r.zone, r.body, r.query)),
    _route("GET", rf"{_ZONE}/instances", "list", "compute.instances.list",
           "compute.instances.list", lambda fake, r: fake.api_list(r.project, r.zone, r.query)),
    _route("GET", rf"{_ZONE}/instances/(?P<instance>[^/]+)", "get", "compute.instances.get",
           "compute.instances.get",
           lambda fake, r: fake.api_get(r.project, r.zone, r.args["instance"])),
    _route("DELETE", rf"{_ZONE}/instances/(?P<instance>[^/]+)", "delete",
           "compute.instances.delete", "compute.instances.delete",
           lambda fake, r: fake.api_delete(r.project, r.zone, r.args["instance"], r.query)),
    _route("GET", r"(?P<project>[^/]+)/aggregated/instances", "aggregatedList",
           "compute.instances.aggregatedList", "compute.instances.list",
           lambda fake, r: fake.api_aggregated_list(r.project, r.query)),
    _route("GET", rf"{_ZONE}/operations", "operations.list", "compute.zoneOperations.list",
           "compute.zoneOperations.list",
           lambda fake, r: fake.operations.list(r.project, r.zone, r.query)),
    _route("GET", rf"{_ZONE}/operations/(?P<operation>[^/]+)", "operations.get",
           "compute.zoneOperations.get", "compute.zoneOperations.get",
           lambda fake, r: fake.operations.get(r.project, r.zone, r.args["operation"])),
    _route("POST", rf"{_ZONE}/operations/(?P<operation>[^/]+)/wait", "operations.wait",
           "compute.zoneOperations.wait", "compute.zoneOperations.get",
           lambda fake, r: fake.operations.wait(r.project, r.zone, r.args["operation"])),
    _catalogue(rf"{_ZONE}/machineTypes", "machineTypes.list", "compute.machineTypes.list",
               lambda fake, r: fake.catalogue.machine_types(r.project, r.zone)),
    _catalogue(rf"{_ZONE}/machineTypes/(?P<machineType>[^/]+)", "machineTypes.get",
               "compute.machineTypes.get",
               lambda fake, r: fake.catalogue.machine_type(r.project, r.zone,
                                                           r.args["machineType"])),
    _catalogue(rf"{_ZONE}/acceleratorTypes/(?P<acceleratorType>[^/]+)", "acceleratorTypes.get",
               "compute.acceleratorTypes.get",
               lambda fake, r: fake.catalogue.accelerator_type(r.project, r.zone,
                                                               r.args["acceleratorType"])),
    _catalogue(_REGION, "regions.get", "compute.regions.get",
               lambda fake, r: fake.catalogue.region(r.project, r.args["region"])),
    _catalogue(rf"{_REGION}/routers", "routers.list", "compute.routers.list",
               lambda fake, r: fake.catalogue.routers(r.project, r.args["region"])),
)
# Each route's method in the discovery document, by the fake's name for it.
DISCOVERY_IDS = {route.api: route.discovery_id for route in ROUTES}


def find_route(method: str, path: str) -> tuple[Route, dict[str, str]] | None:
    """The route serving ``method path`` and its path's groups; None for no Compute route."""
    if not path.startswith(API_PREFIX):
        return None
    rest = path[len(API_PREFIX):]
    for route in ROUTES:
        match = route.pattern.fullmatch(rest)
        if route.verb == method and match is not None:
            return route, match.groupdict()
    return None
