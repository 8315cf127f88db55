"""The contract every engine honours (local processes, GCE)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape


@dataclass(frozen=True)
class Instance:
    """A VM of the run as the engine sees it.

    ``status`` follows GCE's words: PROVISIONING, STAGING, RUNNING, STOPPING, TERMINATED;
    ``zone``: where it runs (empty: an engine without zones), which prices it by region.
    """

    name: str
    pool: Pool
    slots: int
    status: str
    zone: str = ""


class CreateFailed(Exception):
    """VMs could not be created in ``pool``.

    ``stop_growth``: for the rest of the run (the settings ask for what GCE refuses: the
    message says what to fix); otherwise try again later (every zone is out of capacity just
    now). ``quota``: a quota is full: try again once one of the run's VMs has ended and freed
    some of it. ``names``: the VMs that will not come; ``shape``: theirs (None: the run's own).
    """

    def __init__(self, pool: Pool, names: list[str], message: str, stop_growth: bool,
                 shape: Shape | None = None, quota: bool = False) -> None:
        super().__init__(message)
        self.pool = pool
        self.shape = shape
        self.names = list(names)
        self.message = message
        self.stop_growth = stop_growth
        self.quota = quota


class Engine(Protocol):
    def create(self, names: list[str], pool: Pool, slots: int,
               shape: Shape | None = None) -> None:
        """Start VMs that each run ``expocloud-worker`` for this run with ``slots`` slots, of
        ``shape`` (None: the run's own machine; only engines with per-rule machines take one).

        May raise ``CreateFailed`` at once; failures found later come from ``failures()``.
        """

    def delete(self, name: str) -> None:
        """Delete a VM and everything running on it; unknown or gone is success."""

    def list(self) -> list[Instance]:
        """The run's VMs that still exist (gone ones are absent, as a deleted VM is)."""

    def failures(self) -> list[CreateFailed]:
        """Creations that failed after ``create`` returned (drained: each is reported once)."""

    def preempted(self) -> set[str]:
        """VMs the cloud preempted since the last call (drained)."""

    def close(self) -> None:
        """Delete every VM of the run; safe to call twice."""
