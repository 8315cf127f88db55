"""What the fake Compute Engine offers and allows, read-only: the regions and their zones (any
other is refused, as Google refuses it), machine and accelerator types per zone, each region's
own quotas, its Cloud Routers (and their NATs).

The API side answers ``machineTypes.get``/``list``, ``acceleratorTypes.get``, ``regions.get``
and ``routers.list`` as Compute Engine does (the resources' JSON, 404 for a type a zone does not
have), from the catalogue (``catalogue.py``). A type the fake Compute withholds in a zone
(``FakeCompute.withhold``, which also refuses inserts of it there) is absent here too, so a
check and an insert agree. The control side lets a test break each thing: ``set_quota`` lowers
a limit or raises a usage, ``add_nat`` gives a region a Cloud Router with a NAT,
``remove_routers`` takes them away. Quotas are what ``regions.get`` reports: inserts are not
refused by them (``FakeCompute.fail_next('quota')`` does that).
"""

from __future__ import annotations

import copy
import threading
import zlib
from collections.abc import Callable

from expo_executor.emulator import catalogue
from expo_executor.emulator.api_error import ApiError, not_found

GOOGLE = "https://www.googleapis.com/compute/v1/"
CREATED = "1969-12-31T16:00:00.000-08:00"  # what the real API gives long-standing types
NAT_RANGES = ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES",
              "LIST_OF_SUBNETWORKS")


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


class ComputeCatalogue:
    """Machine and accelerator types, quotas and routers of the fake (thread-safe).

    ``withheld(zone)``: the types the fake Compute withholds in ``zone``."""

    def __init__(self, withheld: Callable[[str], set[str]]) -> None:
        self._withheld = withheld
        self._lock = threading.Lock()
        self._quotas: dict[str, dict[str, list[float]]] = {}  # region -> metric -> [limit, usage]
        self._routers: dict[str, list[dict]] = {}  # region -> routers

    # -- control ------------------------------------------------------------------------------
    def set_quota(self, region: str, metric: str, limit: float | None = None,
                  usage: float | None = None) -> None:
        """Set a quota's limit and/or usage in ``region`` (a metric the catalogue lacks is
        added: regions.get then lists it)."""
        with self._lock:
            entry = self._region_quotas(region).setdefault(metric, [0.0, 0.0])
            if limit is not None:
                entry[0] = float(limit)
            if usage is not None:
                entry[1] = float(usage)

    def add_nat(self, region: str, network: str = "default", name: str = "nat-router",
                subnetworks: list[str] | None = None) -> None:
        """A Cloud Router in ``region`` whose NAT covers every subnetwork of ``network``, or
        only ``subnetworks`` (names) when given."""
        nat: dict = {"name": f"{name}-nat", "natIpAllocateOption": "AUTO_ONLY",
                     "sourceSubnetworkIpRangesToNat": NAT_RANGES[0]}
        if subnetworks:
            nat["sourceSubnetworkIpRangesToNat"] = NAT_RANGES[2]
            nat["subnetworks"] = [{"name": f"{GOOGLE}projects/-/regions/{region}/subnetworks/"
                                           f"{sub}", "sourceIpRangesToNat": ["ALL_IP_RANGES"]}
                                  for sub in subnetworks]
        router = {"kind": "compute#router", "id": str(zlib.crc32(f"{region}/{name}".encode())),
                  "name": name, "region": f"{GOOGLE}projects/-/regions/{region}",
                  "network": f"{GOOGLE}projects/-/global/networks/{network}", "nats": [nat]}
        with self._lock:
            self._routers.setdefault(region, []).append(router)

    def remove_routers(self, region: str) -> None:
        with self._lock:
            self._routers.pop(region, None)

    # -- the API --------------------------------------------------------------------------------
    def machine_type(self, project: str, zone: str, name: str) -> dict:
        found = catalogue.machine_type(name)
        if found is None or name in self._withheld(zone):
            raise not_found(project, f"zones/{zone}", "machineTypes", name)
        return self._machine_resource(project, zone, name, found)

    def machine_types(self, project: str, zone: str) -> dict:
        withheld = self._withheld(zone)
        items = [self._machine_resource(project, zone, name, catalogue.machine_type(name) or {})
                 for name in catalogue.machine_type_names() if name not in withheld]
        return {"kind": "compute#machineTypeList", "id": f"projects/{project}/zones/{zone}/"
                "machineTypes", "items": items,
                "selfLink": f"{GOOGLE}projects/{project}/zones/{zone}/machineTypes"}

    def accelerator_type(self, project: str, zone: str, name: str) -> dict:
        if name not in catalogue.ACCELERATOR_TYPES or name in self._withheld(zone):
            raise not_found(project, f"zones/{zone}", "acceleratorTypes", name)
        description, most = catalogue.ACCELERATOR_TYPES[name]
        zone_url = f"{GOOGLE}projects/{project}/zones/{zone}"
        return {"kind": "compute#acceleratorType", "id": str(10000 + len(name)),
                "creationTimestamp": CREATED, "name": name, "description": description,
                "zone": zone_url, "maximumCardsPerInstance": most,
                "selfLink": f"{zone_url}/acceleratorTypes/{name}"}

    def region(self, project: str, region: str) -> dict:
        """``regions.get``: its quotas (each region its own) and zones; 404 for a region
        Google does not have."""
        zones = catalogue.zones_of(region)
        if not zones:
            raise ApiError(404, "notFound", f"The resource 'projects/{project}/regions/{region}' "
                           "was not found")
        with self._lock:
            quotas = [{"metric": metric, "limit": limit, "usage": usage}
                      for metric, (limit, usage) in sorted(self._region_quotas(region).items())]
        url = f"{GOOGLE}projects/{project}/regions/{region}"
        return {"kind": "compute#region", "id": str(1000 + len(region)),
                "creationTimestamp": CREATED, "name": region, "description": region,
                "status": "UP", "quotas": quotas, "selfLink": url,
                "zones": [f"{GOOGLE}projects/{project}/zones/{zone}" for zone in zones]}

    def routers(self, project: str, region: str) -> dict:
        with self._lock:
            items = copy.deepcopy(self._routers.get(region, []))
        for router in items:
            for key in ("region", "network"):
                router[key] = router[key].replace("projects/-/", f"projects/{project}/")
            for nat in router["nats"]:
                for sub in nat.get("subnetworks", []):
                    sub["name"] = sub["name"].replace("projects/-/", f"projects/{project}/")
        return {"kind": "compute#routerList", "id": f"projects/{project}/regions/{region}/"
                "routers", "items": items,
                "selfLink": f"{GOOGLE}projects/{project}/regions/{region}/routers"}

    @staticmethod
    def check_zone(project: str, api: str, zone: str) -> None:
        """A zone Google does not have: an insert is refused as invalid (400, as Google words
        it), any other call of the zone finds nothing (404)."""
        if catalogue.zone_exists(zone):
            return
        if api in ("insert", "bulkInsert"):
            raise ApiError(400, "invalid", f"Invalid value for field 'zone': '{zone}'. "
                           "Unknown zone.")
        raise ApiError(404, "notFound", f"The resource 'projects/{project}/zones/{zone}' was "
                       "not found")

    # -- helpers ----------------------------------------------------------------------------------
    def _region_quotas(self, region: str) -> dict[str, list[float]]:
        """The region's quotas, created from the catalogue's defaults (lock held)."""
        return self._quotas.setdefault(region, {metric: [limit, 0.0] for metric, limit
                                                in catalogue.DEFAULT_QUOTAS.items()})

    @staticmethod
    def _machine_resource(project: str, zone: str, name: str, found: dict) -> dict:
        zone_url = f"{GOOGLE}projects/{project}/zones/{zone}"
        gib = found.get("memoryMb", 0) / 1024
        return {"kind": "compute#machineType", "id": str(zlib.crc32(name.encode())),
                "creationTimestamp": CREATED, "name": name,
                "description": f"{found.get('guestCpus', 0)} vCPUs, {gib:g} GB RAM",
                "guestCpus": found.get("guestCpus", 0), "memoryMb": found.get("memoryMb", 0),
                "imageSpaceGb": 0, "maximumPersistentDisks": 128,
                "maximumPersistentDisksSizeGb": "263168", "zone": zone, "isSharedCpu":
                found.get("isSharedCpu", False), "selfLink": f"{zone_url}/machineTypes/{name}",
                **({"accelerators": found["accelerators"]} if "accelerators" in found else {})}
