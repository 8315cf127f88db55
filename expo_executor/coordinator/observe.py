"""What the workers say, taken in: a status (ready: a slot holder of the scheduler; held jobs
given back), a result (the job's place on every worker moves, and the scheduler hears how it
ended; a cancelled one waits for the round's decisions, ``core.one_round.round_of``). Part of
:class:`~.loop.Coordinator`.
"""

from __future__ import annotations

from typing import Callable

from expo_executor.coordinator.channel import Channel
from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.pools import PoolWatch
from expo_executor.coordinator.prefetch_depth import PrefetchDepth
from expo_executor.coordinator.reports import Reporter
from expo_executor.coordinator.vms import Vm, VmFleet
from expo_executor.core import one_round
from expo_executor.core.records import AttemptEnd, VmEnd, WorkerState
from expo_executor.core.scheduler import Outcome, Release, Scheduler
from expo_executor.protocol.records import WorkerResult


class Observe:
    """Worker statuses and results, into the scheduler and the jobs' places."""

    # set by Coordinator.__init__ (loop.py)
    config: CoordinatorConfig
    channel: Channel
    vms: VmFleet
    pools: PoolWatch
    scheduler: Scheduler
    reporter: Reporter
    prefetch_depth: PrefetchDepth | None
    _cancels: list[WorkerResult]  # the cancelled results the next round takes in
    _lose: Callable[[str, VmEnd, str], None]

    def _read_statuses(self, now: float) -> None:
        """Take in changed worker statuses: a worker that says it is ready becomes a slot
        holder of the scheduler. So does one granted its key this round (only a GCE worker
        asks for one): it says READY next, with nothing in between, and its jobs assigned in
        this round are in its inbox when it first reads it, a round sooner than after its
        status."""
        for vm, status in self.channel.statuses(self.vms):
            if status is not None and vm.places.releases():
                self._take_released(vm, status.released)
            if status is not None and status.state is WorkerState.READY and not vm.ready:
                self._vm_ready(vm, now)
        for vm in self.vms:
            if vm.keyed and not vm.ready:
                self._vm_ready(vm, now)

    def _vm_ready(self, vm: Vm, now: float) -> None:
        vm.ready, vm.ready_at = True, now
        self.pools.vm_ready(vm.pool, vm.shape)
        vm.idle_since = now
        size = self.config.size(vm.shape)
        self.scheduler.add_worker(vm.name, size.slots, size.mem_mb, pool=vm.pool,
                                  shape=vm.shape)

    def _take_released(self, vm: Vm, answers: dict[str, int]) -> None:
        """Held jobs its worker says it gave back unstarted, answering the requests it names:
        queued again (or skipped, when the domino effect cancelled one meanwhile), and gone
        from its inbox."""
        for key, request in vm.places.given_back(answers):
            if self.scheduler.state(key) == "cancelling":
                self.reporter.handle(self.scheduler.cancelled(key, ran=False))
            else:
                self.scheduler.released(key, vm.name, request)

    def _give_back(self, release: Release) -> None:
        """Ask a held job back from its worker: out of its inbox's jobs (its release is listed
        from the scheduler's record of it, ``Scheduler.place_on``)."""
        vm = self.vms.get(release.worker_id)
        if vm is not None:
            vm.places.ask_back(release.key)

    def _read_results(self, workers: set[str], unlisted: bool = False) -> None:
        """Take in the results the round's listing showed (``unlisted``: or not, see
        ``Channel.results``) of the jobs assigned to (or cancelled on) ``workers``."""
        wanted = {(k, vm.name) for vm in self.vms if vm.name in workers for k in vm.places}
        for result in self.channel.results(wanted, unlisted):
            self._take_result(result)

    def _take_result(self, result: WorkerResult) -> None:
        """One attempt ended: the job leaves its VMs' inboxes, and the scheduler hears how."""
        key = result.key
        # A finished job leaves its worker's inbox with the next write (an assignment or a
        # cancel): the worker never runs a key twice, and every write is billed.
        # A re-queued copy still running elsewhere is killed: the first result stands; one
        # asked back that its worker started before it knew ends as any other.
        for vm in self.vms:
            vm.places.ended(key, here=vm.name == result.worker)
        if result.end is AttemptEnd.PREEMPTED:
            self._lose(result.worker, VmEnd.PREEMPTED, "was preempted (its last breath)")
            return
        if result.end is AttemptEnd.LOST:  # the worker crashed: not the job's doing
            self._lose(result.worker, VmEnd.LOST, f"failed ({result.reason})")
            return
        outcome = result.end.outcome
        if outcome is None:  # cancelled: the round takes it in (core.one_round.round_of)
            if one_round.unasked(self.scheduler, key):
                # Looking again reads every other result of the worker (results are read in
                # key order): a timeout there may be what it was not started for (a held job
                # its worker's own timeout dominates), or a job that ended before the worker
                # stopped.
                self._read_results({result.worker}, unlisted=True)
            self._cancels.append(result)
            return
        events = self.scheduler.finish(key, outcome, runtime_s=result.timed_s)
        if outcome is Outcome.SOLVED and self.prefetch_depth is not None:
            self.prefetch_depth.observe(result.ended - result.started)
        self.reporter.handle(events, result)
