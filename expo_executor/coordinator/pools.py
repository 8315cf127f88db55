"""The health of a run's pools as the coordinator watches it: failed creates (retry later, or
stop growing), VMs that never report ready, pools out of capacity for too long, and queued work
stranded by pools that cannot grow.

Every decision is the core's (:mod:`expo_executor.core.pool_health`); this module keeps the
run's :class:`~expo_executor.core.pool_health.PoolHealth` and says each change once, in the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Callable

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.core import pool_health
from expo_executor.core.fleet import Booting, FleetConfig
from expo_executor.core.pool_health import CAPACITY_RETRY, PoolHealth, Stranding, Transition
from expo_executor.core.scheduler import Pool
from expo_executor.engines.base import CreateFailed


class PoolWatch:
    """One run's pool health, moved on by what the engine and the workers say."""

    def __init__(self, config: CoordinatorConfig, log: Callable[[str], None]) -> None:
        self.config = config
        self.log = log
        self.health = PoolHealth()

    def create_failed(self, failure: CreateFailed, now: float) -> None:
        """A create call failed: its pool stops for good, or waits ``CAPACITY_RETRY`` s."""
        retry = not failure.stop_growth and failure.pool not in self.health.stopped
        self._apply(pool_health.failed_create(self.health, failure.pool, now,
                                              failure.stop_growth, failure.message))
        if retry:
            self.log(f"expocloud: {failure.message}; asking again in {CAPACITY_RETRY:g} s")

    def vm_ready(self, pool: Pool) -> None:
        self.health = pool_health.vm_ready(self.health, pool)

    def check_boots(self, booting: Sequence[Booting], now: float) -> tuple[str, ...]:
        """The VMs that did not come up in time, to delete (the fleet replaces them while
        their pool may grow); a pool whose VMs keep failing to come up stops."""
        timeout = self.config.boot_timeout
        transition = pool_health.boot_round(self.health, booting, now, timeout)
        for name in transition.timed_out:
            self.log(f"expocloud: worker {name} did not report ready within {timeout:g} s of "
                     "its creation (--expocloud-boot-timeout); deleting it (replaced while its "
                     "pool may grow)")
        self._apply(transition)
        return transition.timed_out

    def check_capacity(self, ready_pools: frozenset[Pool], now: float) -> None:
        """Stop a pool with no ready VM that has met stockouts for ``capacity_timeout`` s."""
        self._apply(pool_health.capacity_round(self.health, ready_pools, now,
                                               self.config.capacity_timeout,
                                               self.config.machine_types))

    def stranding(self, queued: Mapping[Pool, int], alive: Mapping[Pool, int],
                  fleets: Mapping[Pool, FleetConfig]) -> Stranding | None:
        """Queued work that can never run, with the reasons; None while it all may run."""
        return pool_health.strand_check(self.health, queued, alive, fleets)

    def _apply(self, transition: Transition) -> None:
        self.health = transition.health
        for pool, why in transition.stopped:
            self.log(f"expocloud: no more {pool.value} VMs this run: {why}")
