"""What the doctor's checks share: the :class:`Check` each returns, the run's :class:`Plan`
they check, and the :class:`Context` they read from (one read per question however many checks
ask it). Kept apart from the checks so that ``doctor_access`` and ``doctor_fleet`` and the
``doctor`` that runs them all import one definition.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from expo_executor.engines.gce import quota_plan
from expo_executor.engines.gce.google_apis import GoogleApis, disabled_service
from expo_executor.engines.gce.references import region_of


# -- records --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One check's outcome: its name, whether the run may go on, what was found and, for a
    failure, the fix. A warning passes but is worth a line."""

    name: str
    ok: bool
    found: str
    fix: str = ""
    warning: bool = False

    @property
    def line(self) -> str:
        return f"{self.name}: {self.found}" + (f"; fix: {self.fix}" if self.fix else "")


def passed(name: str, found: str, *, warning: bool = False, fix: str = "") -> Check:
    return Check(name, True, found, fix, warning)


def failed(name: str, found: str, fix: str) -> Check:
    return Check(name, False, found, fix)


@dataclass(frozen=True)
class Plan:
    """What a run will ask of the project: everything the checks need, read from the run's
    settings (``launch.doctor_plan``) so that the doctor checks what a run would do."""

    project: str
    zones: tuple[str, ...]
    bucket: str
    worker: str  # the workers' service account email, or "default"
    machine_types: tuple[str, ...]  # every type the run may create ('auto' left out)
    gpus: tuple[tuple[str, int], ...]  # accelerators attached to N1 VMs: (type, count)
    fleet: quota_plan.FleetPlan
    network: str
    subnetwork: str | None
    images: tuple[str, ...]
    worker_software: str  # pip or image
    pip_index_url: str | None = None
    endpoint: str | None = None  # the fake Compute (and the fakes of the other APIs)
    storage_endpoint: str | None = None  # the GCS emulator
    emulated: bool = False  # anonymous credentials: the fakes are all there is
    auto: bool = False  # a machine type is 'auto' (chosen from the jobs: checked at the run)

    @property
    def region(self) -> str:
        """The first region (the one a single-region run has)."""
        return region_of(self.zones[0])

    @property
    def regions(self) -> tuple[str, ...]:
        """Every region of the run's zones, in the zones' order."""
        return tuple(dict.fromkeys(region_of(zone) for zone in self.zones))


# -- context ---------------------------------------------------------------------------------------
@dataclass
class Context:
    """What every check reads from: the plan, the APIs, the caller and the project number (once
    known), and the machine types already read (one read per zone and type for every check)."""

    plan: Plan
    apis: GoogleApis
    account: str
    number: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _memo: dict[tuple, Future] = field(default_factory=dict)

    @property
    def member(self) -> str:
        kind = "serviceAccount" if self.account.endswith(".gserviceaccount.com") else "user"
        return f"{kind}:{self.account}"

    def once(self, key: tuple, fetch: Callable[[], Any]) -> Any:
        """``fetch()``'s result, read once per key however many checks ask (exceptions too)."""
        with self._lock:
            future = self._memo.get(key)
            mine = future is None
            if mine:
                future = self._memo[key] = Future()
        assert future is not None
        if mine:
            try:
                future.set_result(fetch())
            except Exception as err:  # noqa: BLE001 - handed to every asker
                future.set_exception(err)
        return future.result()

    def offered(self, zone: str, machine_type: str) -> dict | None:
        """The machine type as ``zone`` offers it, or None (a 404: not there)."""
        return self.once(("machine", zone, machine_type),
                         lambda: or_none(lambda: self.apis.machine_type(
                             self.plan.project, zone, machine_type)))

    def region(self, region: str) -> dict | None:
        """``regions.get`` of ``region`` (its quotas and zones), or None (a 404: no such
        region), read once for every check."""
        return self.once(("region", region), lambda: or_none(
            lambda: self.apis.region(self.plan.project, region)))

    def worker_email(self) -> str | None:
        """The workers' account; 'default' is the project's Compute Engine default account
        (None while the project number is unknown)."""
        if self.plan.worker != "default":
            return self.plan.worker
        return f"{self.number}-compute@developer.gserviceaccount.com" if self.number else None


def or_none(fetch: Callable[[], Any]) -> Any:
    """``fetch()``, or None on a 404."""
    from google.api_core.exceptions import NotFound

    try:
        return fetch()
    except NotFound:
        return None


def forbidden(err: BaseException) -> bool:
    return getattr(err, "code", None) == 403 and disabled_service(err) is None


def enable_command(service: str, project: str) -> str:
    return f"gcloud services enable {service} --project {project}"
