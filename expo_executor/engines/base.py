"""The contract every engine honours (local processes now, GCE next)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..scheduler import Pool


@dataclass(frozen=True)
class Instance:
    """A VM of the run as the engine sees it.

    ``status`` follows GCE's words: PROVISIONING, RUNNING, STOPPING, TERMINATED.
    """

    name: str
    pool: Pool
    slots: int
    status: str


class Engine(Protocol):
    def create(self, name: str, pool: Pool, slots: int) -> None:
        """Start a VM that runs ``expocloud-worker`` for this run with ``slots`` slots."""

    def delete(self, name: str) -> None:
        """Delete a VM and everything running on it; unknown or gone is success."""

    def list(self) -> list[Instance]:
        """The run's VMs that still exist (gone ones are absent, as a deleted VM is)."""

    def close(self) -> None:
        """Delete every VM of the run; safe to call twice."""
