"""The VMs' lives as the coordinator acts on them: what the engine says (creates that failed,
VMs preempted, gone, or halted before they were ready), boots that time out, the plan's
creates and deletes, and the fast poll while the first VMs boot; a VM that goes gives its jobs
back to the queue, and its end is recorded once. Part of :class:`~.loop.Coordinator`.
"""

from __future__ import annotations

import time
from typing import Callable

from expo_executor.coordinator.channel import Channel
from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.crashed_workers import ALIVE
from expo_executor.coordinator.meter import Meter
from expo_executor.coordinator.pools import PoolWatch
from expo_executor.coordinator.reports import Reporter
from expo_executor.coordinator.vms import VmFleet
from expo_executor.core.records import VmEnd
from expo_executor.core.scaling import ScalePlan
from expo_executor.core.scheduler import Pool, Scheduler
from expo_executor.core.shapes import Shape
from expo_executor.engines.base import CreateFailed, Engine

HALTING = ("STOPPING", "SUSPENDING")
FIRST_BOOT_POLL_S = 0.25  # the coordinator's poll until its first VM is ready (poll_now)


class VmLife:
    """Creates, deletes and losses of the run's VMs."""

    # set by Coordinator.__init__ (loop.py)
    config: CoordinatorConfig
    engine: Engine
    channel: Channel
    vms: VmFleet
    pools: PoolWatch
    meter: Meter
    scheduler: Scheduler
    reporter: Reporter
    log: Callable[[str], None]
    _read_results: Callable[..., None]

    def poll_now(self) -> float:
        """The wait before the next round: the poll, or at most ``FIRST_BOOT_POLL_S`` while
        the run's first VMs boot (created, none ready yet). Then a worker's key request and its
        ready status are answered within a fraction of a second, not a poll each, on the first
        job's way; the cost is a few more bucket listings, once per run."""
        if len(self.vms) and not self.vms.ready_count():
            return min(self.config.poll, FIRST_BOOT_POLL_S)
        return self.config.poll

    def _watch_engine(self, now: float) -> Exception | None:
        """What the engine says of the VMs, and the boots that timed out. Its error is
        returned, not raised: while Compute Engine does not answer, the round still assigns
        and writes the pulse through the bucket, so the workers carry on (the round then fails)."""
        try:
            self._check_instances(now)
            self._check_boots(now)
        except Exception as exc:  # noqa: BLE001 - raised again at the end of the round
            return exc
        return None

    def _check_instances(self, now: float) -> None:
        """What the engine says: creates that failed, VMs preempted, VMs gone. A VM is gone
        only once a listing showed it (a new VM is listed some time after its insert) or after
        ``listing_grace``; one powered off before it was ready failed its startup."""
        for failure in self.engine.failures():
            self._create_failed(failure, time.time())
        for name in sorted(self.engine.preempted()):
            self._lose(name, VmEnd.PREEMPTED, "was preempted")
        listed = {i.name: i for i in self.engine.list()}
        status = {name: i.status for name, i in listed.items()}
        for vm in self.vms:
            now_status = status.get(vm.name)
            if vm.name in listed and listed[vm.name].zone:
                vm.zone = listed[vm.name].zone  # where it runs prices it (its region's)
            if now_status in ALIVE:
                vm.listed = True
            elif now_status in HALTING and not vm.ready:
                continue  # powering off: preempted (seen soon) or its startup failed
            elif now_status is not None and not vm.ready:
                self._startup_failed(vm.name, now_status)
            elif vm.listed or now_status is not None \
                    or now - vm.created >= self.config.listing_grace:
                self._lose(vm.name, VmEnd.LOST, "was lost")

    def _startup_failed(self, name: str, status: str) -> None:
        """VM ``name`` is listed but down (``status``) before its worker said ready: its
        startup script halted it. That counts as a failed boot of its pool, with the last
        lines of its startup log, which the script leaves in the bucket."""
        vm = self.vms[name]
        boot_log = self.channel.boot_log(name)
        self.log(f"expocloud: worker {name} is {status} before it reported ready: its startup "
                 f"failed{'; its log ends: ' + boot_log if boot_log else ''}")
        self.pools.startup_failed(vm.pool, vm.shape, boot_log)
        self._drop_unready(name)

    def _lose(self, name: str, end: VmEnd, how: str) -> None:
        """A VM went away under us (preempted, crashed, deleted): its jobs go back to the queue,
        first in line; on Spot, a preemption (not a crash: LOST) counts as one of each job
        it ran."""
        if name not in self.vms:
            return
        # What it reported before it went stands: a job whose result object was written just
        # before its VM died (after this round's listing, too) ended, and must not be
        # re-queued and run a second time.
        self._read_results({name}, unlisted=True)
        if name not in self.vms:  # its last breath said "preempted": handled already
            return
        self.log(f"expocloud: worker {name} {how}; its jobs go back to the queue first")
        self.reporter.handle(self.scheduler.remove_worker(
            name, preempted=end is VmEnd.PREEMPTED))
        self._end_vm(name, end)
        self.engine.delete(name)

    def _create_failed(self, failure: CreateFailed, now: float) -> None:
        for name in failure.names:
            self._end_vm(name, VmEnd.NOT_CREATED)
        self.pools.create_failed(failure, now, alive=len(self.vms))

    def _check_boots(self, now: float) -> None:
        """Delete VMs that did not come up in time (the fleet replaces them); the pool watch
        stops a pool whose VMs keep failing to come up."""
        for name in self.pools.check_boots(self.vms.booting(), now):
            self._drop_unready(name)

    def _drop_unready(self, name: str) -> None:
        """Delete a VM that never reported ready (it holds no jobs): it ends "never ready"."""
        self.reporter.handle(self.scheduler.remove_worker(name))
        self._end_vm(name, VmEnd.NEVER_READY)
        self.engine.delete(name)

    def _act(self, plan: ScalePlan, now: float) -> None:
        for growth in plan.pools:
            for name in growth.delete:
                self._delete(name)
            if growth.create:
                self._create(growth.pool, growth.create, now, growth.shape)
        for name in [n for n in self.vms.names() if n in plan.drain]:
            self._delete(name)

    def _create(self, pool: Pool, count: int, now: float, shape: Shape | None = None) -> None:
        names = self.vms.add(pool, count, now, shape)
        try:
            if shape is None:  # the run's own: engines without per-rule machines take this
                self.engine.create(names, pool, self.config.slots_per_worker)
            else:
                self.engine.create(names, pool, self.config.size(shape).slots, shape=shape)
        except CreateFailed as failure:
            self._create_failed(failure, now)
        self.channel.write_inboxes(self.vms, now)  # after the call, long before they boot

    def _delete(self, name: str) -> None:
        """Delete a VM the run no longer needs; its jobs (if any) go back to the queue."""
        self.reporter.handle(self.scheduler.remove_worker(name))
        self.engine.delete(name)
        self._end_vm(name, VmEnd.DELETED)

    def _end_vm(self, name: str, end: VmEnd) -> None:
        """Stop tracking a VM: its inbox goes, its record is written, its cost is final."""
        ended = time.time()
        vm = self.vms.end(name, end, ended)
        if vm is None:
            return
        self.channel.delete_inbox(name)
        if end is not VmEnd.NOT_CREATED:
            self.meter.vm_ended(vm, ended - vm.created)
            self.pools.vm_ended()
