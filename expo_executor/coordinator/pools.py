"""The health of a run's pools as the coordinator watches it: failed creates (retry later, or
stop growing), VMs that never report ready, and pools out of capacity for too long (the queued
work that pools which cannot grow strand is ``core.one_round.round_of``'s, through its ``strand``).

Every decision is the core's (:mod:`expo_executor.core.pool_health`); this module keeps the
run's :class:`~expo_executor.core.pool_health.PoolHealth` and says each change once, in the log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Callable

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.core import pool_health
from expo_executor.core.fleet import Booting
from expo_executor.core.pool_health import CAPACITY_RETRY, PoolHealth, Transition
from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape, shape_order
from expo_executor.engines.base import CreateFailed


class PoolWatch:
    """One run's pool health per shape (None: the run's own pools), moved on by what the
    engine and the workers say. A shape's pools stop, hold back and strand on their own: a GPU
    quota stops only the GPU shape's pools."""

    def __init__(self, config: CoordinatorConfig, log: Callable[[str], None]) -> None:
        self.config = config
        self.log = log
        self.healths: dict[Shape | None, PoolHealth] = {None: PoolHealth()}
        # told of every pool stopped for the run: its pool, machine and why (notices)
        self.on_stop: Callable[[str, str, str], None] = lambda pool, machine, why: None

    @property
    def health(self) -> PoolHealth:
        """The run's own pools' health."""
        return self.healths[None]

    @health.setter
    def health(self, value: PoolHealth) -> None:
        self.healths[None] = value

    def of(self, shape: Shape | None) -> PoolHealth:
        return self.healths.get(shape, PoolHealth())

    def create_failed(self, failure: CreateFailed, now: float, alive: int) -> None:
        """A create call failed: its pool stops for good, or waits ``CAPACITY_RETRY`` s, or
        (a full quota) until one of the run's ``alive`` VMs ends."""
        shape = failure.shape
        if failure.quota:
            held = alive > 0 and failure.pool not in self.of(shape).stopped
            self._apply(shape, pool_health.quota_full(self.of(shape), failure.pool, alive,
                                                      failure.message))
            if held:
                self.log(f"expocloud: {failure.message}; {failure.pool.value} VMs wait until one "
                         f"of the run's {alive} VMs ends and frees some")
            return
        retry = not failure.stop_growth and failure.pool not in self.of(shape).stopped
        self._apply(shape, pool_health.failed_create(self.of(shape), failure.pool, now,
                                                     failure.stop_growth, failure.message))
        if retry:
            self.log(f"expocloud: {failure.message}; asking again in {CAPACITY_RETRY:g} s")

    def vm_ended(self) -> None:
        """One of the run's VMs ended: pools of every shape held by a full quota try again
        (a region's quota is shared by all of them)."""
        self.healths = {shape: pool_health.vm_ended(h) for shape, h in self.healths.items()}

    def vm_ready(self, pool: Pool, shape: Shape | None = None) -> None:
        self.healths[shape] = pool_health.vm_ready(self.of(shape), pool)

    def startup_failed(self, pool: Pool, shape: Shape | None, boot_log: str) -> None:
        """A VM powered off before it was ready: one more failed boot of its pool."""
        self._apply(shape, pool_health.startup_failed(self.of(shape), pool, boot_log))

    def check_boots(self, booting: Sequence[Booting], now: float) -> tuple[str, ...]:
        """The VMs that did not come up in time, to delete (the fleet replaces them while
        their pool may grow); a pool whose VMs keep failing to come up stops."""
        timeout = self.config.boot_timeout
        timed_out: list[str] = []
        for shape in sorted({None, *(b.shape for b in booting)}, key=shape_order):
            transition = pool_health.boot_round(
                self.of(shape), [b for b in booting if b.shape == shape], now, timeout)
            for name in transition.timed_out:
                self.log(f"expocloud: worker {name} did not report ready within {timeout:g} s "
                         "of its creation (--expocloud-boot-timeout); deleting it (replaced "
                         "while its pool may grow)")
            self._apply(shape, transition)
            timed_out += transition.timed_out
        return tuple(timed_out)

    def check_capacity(self, ready: Mapping[Shape | None, frozenset[Pool]], now: float) -> None:
        """Stop a pool with no ready VM that has met stockouts for ``capacity_timeout`` s."""
        for shape in sorted({*self.healths, *ready}, key=shape_order):
            machines = self.config.machine_types if shape is None else \
                {pool: shape.describe() for pool in (Pool.SPOT, Pool.ON_DEMAND)}
            self._apply(shape, pool_health.capacity_round(
                self.of(shape), ready.get(shape, frozenset()), now,
                self.config.capacity_timeout, machines))

    def _apply(self, shape: Shape | None, transition: Transition) -> None:
        self.healths[shape] = transition.health
        of = "" if shape is None else f" of {shape.describe()}"
        for pool, why in transition.stopped:
            self.log(f"expocloud: no more {pool.value} VMs{of} this run: {why}")
            machine = shape.describe() if shape is not None else \
                self.config.machine_types.get(pool, "the run's workers")
            self.on_stop(pool.value, machine, why)
