"""The round's decisions, carried out: the meter read, then ``core.one_round.round_of`` (the
cancelled results, withdrawals, assignments into inboxes, held jobs asked back, one scaling
plan, the queued work stranded); and failing the jobs that will not run. Part of
:class:`~.loop.Coordinator`.
"""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import replace
from typing import Callable

from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.meter import Meter
from expo_executor.coordinator.notices import Notices
from expo_executor.coordinator.pools import PoolWatch
from expo_executor.coordinator.prefetch_depth import PrefetchDepth
from expo_executor.coordinator.reports import Reporter
from expo_executor.coordinator.requests import JobRequest
from expo_executor.coordinator.snapshot import StartTimes
from expo_executor.coordinator.vms import VmFleet
from expo_executor.core import one_round
from expo_executor.core.budget import Phase, PhaseChange
from expo_executor.core.records import VmEnd
from expo_executor.core.scaling import FleetSetup, ScalePlan
from expo_executor.core.scheduler import Assignment, Release, Scheduler
from expo_executor.core.shapes import Shape
from expo_executor.engines.base import Engine
from expo_executor.protocol.records import WorkerResult


class Decisions:
    """The round's decisions (``core.one_round``), acted on."""

    # set by Coordinator.__init__ (loop.py)
    config: CoordinatorConfig
    engine: Engine
    vms: VmFleet
    pools: PoolWatch
    meter: Meter
    notices: Notices
    scheduler: Scheduler
    reporter: Reporter
    setups: dict[Shape | None, FleetSetup]
    prefetch_depth: PrefetchDepth | None
    starts: StartTimes
    log: Callable[[str], None]
    _requests: dict[str, JobRequest]
    _stopping: threading.Event
    _stragglers: bool
    _spot_held: frozenset[Shape | None]
    _stranded: dict[Shape | None, str]
    _cancels: list[WorkerResult]
    _act: Callable[[ScalePlan, float], None]
    _end_vm: Callable[[str, VmEnd], None]
    _give_back: Callable[[Release], None]

    def _decide(self, now: float, blind: bool = False) -> one_round.Acts:
        """Read the meter, then the round (``core.one_round.round_of``; ``blind``: the engine
        could not be read), and carry out its decisions on the jobs: the cancelled results'
        events; fail what a budget phase change takes back (at ``STOP``, delete every VM);
        put what the scheduler assigns into the VMs' inboxes (a job given a free slot starts
        now, as the run's status sees it). Its plan and stranded work wait for ``_scale``."""
        change = None
        if self.meter.budget is not None:
            queued_work = sum(self.scheduler.queued_demand().values()) > 0
            change = self.meter.read(now, self.vms, queued_work)
            if change is not None:
                self.notices.budget(change.phase, self.meter.spent(now, self.vms),
                                    self.meter.budget, now)
        cancels, self._cancels = self._cancels, []
        acts = one_round.round_of(self.scheduler, self._seen(now, change, cancels, blind))
        for result, events in zip(cancels, acts.cancelled):
            self.reporter.handle(list(events), result)
        decided = acts.decided
        for taken in decided.withdrawn:
            vm = self.vms.get(taken.worker)
            if vm is not None:
                vm.places.withdraw(taken.key)
            self._fail_for_budget(taken.key)
        if change is not None and change.phase is Phase.STOP:
            for name in self.vms.names():
                self.engine.delete(name)
                self._end_vm(name, VmEnd.DELETED)
        for assignment in decided.assignments:
            self._place(assignment, now)
        for release in decided.releases:
            self._give_back(release)
        # timeouts whose re-run has no worker to run on prune now (--expocloud-confirm-timeouts)
        self.reporter.handle(list(decided.unconfirmed))
        if acts.plan is not None:
            self._stragglers, self._spot_held = acts.plan.stragglers, acts.plan.stragglers_in
        return acts

    def _seen(self, now: float, change: PhaseChange | None, cancels: list[WorkerResult],
              blind: bool) -> one_round.Seen:
        """The round's observations (``core.one_round.Seen``)."""
        depth = self.prefetch_depth.depth() if self.prefetch_depth is not None else None
        prices = {shape: {pool: self.config.price(pool, shape) for pool in setup.fleets}
                  for shape, setup in self.setups.items()}
        return one_round.Seen(
            self._requests.keys(),
            tuple(one_round.Cancelled(r.key, r.worker, r.ran) for r in cancels),
            change, self.meter.phase, self._fleet(), self.vms.alive_by_shape(),
            self.meter.money(self.vms), prices,
            lambda: self.vms.loads(self.scheduler.workers(), self.scheduler.queued_by_shape(),
                                   now),
            now, self._spot_held, frozenset(self._stranded), depth, self._stopping.is_set(),
            blind)

    def _place(self, assignment: Assignment, now: float) -> None:
        """An assignment goes into its VM's inbox: the request's spec as its front end built
        it (its prune point tells a worker holding prefetched jobs to start none its own
        timeouts dominate: the coordinator's cancel could come after it started them)."""
        request = self._requests[assignment.key]
        vm = self.vms[assignment.worker_id]
        self.reporter.assigned(assignment.key, assignment.worker_id)
        if self.scheduler.state(assignment.key) == "running":
            self.starts.started(assignment.key, now)
        spec = request.spec
        if self.scheduler.confirm_timeouts and spec.prune is not None:
            # its timeout prunes only once confirmed: its worker must not act on it alone
            spec = replace(spec, prune=None)
        vm.places.assign(assignment.key, spec)

    def _fleet(self) -> one_round.Fleet:
        """The VMs as the round's decisions see them (``core.one_round.Fleet``)."""
        booting: dict[Shape | None, int] = {}
        for vm in self.vms:
            if not vm.ready:
                booting[vm.shape] = booting.get(vm.shape, 0) + self.config.size(vm.shape).slots
        return one_round.Fleet(self.setups, self.pools.healths,
                               Counter(vm.pool for vm in self.vms), booting)

    def _scale(self, acts: one_round.Acts, now: float) -> None:
        """The round's plan: its deletes and creates; then the queued work it found stranded
        (no VM alive may run it, in pools that cannot grow) fails now, with the reason, rather
        than wait forever for capacity that will not come. With no VM of a shape and none of
        its pools left, the shape is stranded: its later jobs fail on arrival."""
        if acts.plan is not None:
            self._act(acts.plan, now)
        for stranded in acts.stranded:
            reason = stranded.stranding.reason
            if stranded.stranding.whole_run:
                self._stranded[stranded.shape] = reason
            self.log(f"expocloud: failing {len(stranded.keys)} queued job(s): {reason}")
            for key in stranded.keys:
                self._fail_unrunnable(key, reason)

    def _fail_unrunnable(self, key: str, reason: str | None = None) -> None:
        """Fail a job that will not run: the budget is spent, or no VM can be had."""
        if self.meter.spent_out:
            self._fail_for_budget(key)
            return
        self.reporter.fail(key, f"not run: {reason}")

    def _fail_for_budget(self, key: str) -> None:
        self.reporter.fail(key, self.meter.spent_message())
