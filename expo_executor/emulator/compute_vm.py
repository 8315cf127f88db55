"""One instance of the fake Compute Engine: what it was created with, where it is in its life
(PROVISIONING, RUNNING, STOPPING, TERMINATED), its worker process and metadata server, and the
ledger of when it was inserted, booted and powered off (what a bill is computed from).
"""

from __future__ import annotations

import copy
import subprocess
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from expo_executor.emulator.metadata import FakeMetadata

GOOGLE = "https://www.googleapis.com/compute/v1/"


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def zone_url(project: str, zone: str) -> str:
    return f"{GOOGLE}projects/{project}/zones/{zone}"


@dataclass
class Vm:
    """An instance: its key (project, zone, name), the body it was inserted with, its state,
    its worker and metadata server while it runs, and its ledger."""

    project: str
    zone: str
    name: str
    id: str
    uid: int
    body: dict
    machine: str
    created: str
    scratch: Path
    status: str = "PROVISIONING"
    pending_op: str | None = None  # the insert operation, while it is not DONE
    boot_fault: str | None = None  # one of BOOT_FAULTS, injected at insert
    stopping: str | None = None  # why we are powering it off: delete, preempt, max-run, guest
    proc: subprocess.Popen | None = None
    meta: FakeMetadata | None = None
    powered_off: bool = False
    power_lock: threading.Lock = field(default_factory=threading.Lock)
    # The ledger (epoch seconds): insert accepted, booted (GCE bills from here), powered off.
    inserted_at: float = field(default_factory=time.time)
    listed_from: float = 0.0  # time.monotonic() from which list and aggregatedList show it
    running_at: float | None = None
    ended_at: float | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.project, self.zone, self.name)

    @property
    def scheduling(self) -> dict:
        return self.body.get("scheduling") or {}

    @property
    def spot(self) -> bool:
        return (self.scheduling.get("provisioningModel") == "SPOT"
                or self.scheduling.get("preemptible") is True)

    @property
    def attributes(self) -> dict[str, str]:
        items = (self.body.get("metadata") or {}).get("items") or []
        return {item["key"]: item.get("value", "") for item in items}

    def termination_action(self) -> str:
        return self.scheduling.get("instanceTerminationAction") or (
            "DELETE" if self.spot else "STOP")

    def resource(self) -> dict:
        """The instance as ``instances.get`` returns it."""
        out = copy.deepcopy(self.body)
        url = zone_url(self.project, self.zone)
        metadata = out.get("metadata") or {}
        metadata.update(kind="compute#metadata", fingerprint="ZmFrZQ==")
        out.update(
            kind="compute#instance", id=self.id, name=self.name, zone=url,
            status=self.status, creationTimestamp=self.created,
            machineType=f"{url}/machineTypes/{self.machine}",
            selfLink=f"{url}/instances/{self.name}",
            labels=out.get("labels") or {}, labelFingerprint="ZmFrZQ==", metadata=metadata,
            scheduling=out.get("scheduling") or {"onHostMaintenance": "MIGRATE",
                                                  "automaticRestart": True,
                                                  "provisioningModel": "STANDARD"},
        )
        return out


    @property
    def service_account(self) -> str:
        """The email of the service account the instance was created with (its first)."""
        accounts = self.body.get("serviceAccounts") or [{}]
        return accounts[0].get("email") or "default"
