"""The coordinator's side of adopted runs (:mod:`.adopt`): a submitted job in flight on a
crashed run's worker is claimed (not run again), the domino effect cancels it there, each
adopted run is kept alive one round at a time, and what its jobs ended with is taken in as any
result, or kept for a later submission. Part of :class:`~.loop.Coordinator`.
"""

from __future__ import annotations

from typing import Callable

from expo_executor.coordinator.adopt import Adoption, Ended
from expo_executor.coordinator.config import CoordinatorConfig
from expo_executor.coordinator.harvest import record_timeout
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.reports import Reporter
from expo_executor.coordinator.requests import Harvested, JobRequest
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core import one_round
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.records import AttemptEnd
from expo_executor.core.scheduler import Cancel, Scheduler


class AdoptedRuns:
    """Crashed runs whose live workers and jobs in flight this run took over."""

    # set by Coordinator.__init__ (loop.py)
    adopted: list[Adoption]
    harvested: dict[str, Harvested]
    config: CoordinatorConfig
    scheduler: Scheduler
    reporter: Reporter
    persist: Persister
    state: StateDir
    log: Callable[[str], None]

    def _claim(self, request: JobRequest) -> str | None:
        """The scheduler's id of the adopted worker running this very job, if one is."""
        for adoption in self.adopted:
            worker = adoption.claim(request.identity, request.task.key)
            if worker is not None:
                self.reporter.adopted_from[request.task.key] = adoption.run_id
                self.log(f"expocloud: {request.task.label} is in flight on worker "
                         f"{worker} of the adopted run: its result is used")
                return worker
        return None

    def _cancel_adopted(self, event: Cancel) -> None:
        for adoption in self.adopted:
            if adoption.cancel(event):
                return

    def _adopted_round(self, now: float) -> Exception | None:
        """One round of each adopted run: its workers kept alive, its ended jobs taken in.
        An error is returned (the round then fails), not raised: this run's own work goes on."""
        error = None
        for adoption in list(self.adopted):
            try:
                for end in adoption.round(now):
                    self._adopted_end(adoption, end)
                adoption.settle(now, self.config.heartbeat / 2)  # as the run's own
                if not self.persist.pending():
                    adoption.channel.delete_taken()
            except Exception as exc:  # noqa: BLE001 - raised again at the end of the round
                error = error or exc
                continue
            if adoption.done:
                self.log(f"expocloud: every adopted worker of run {adoption.run_id} is done")
                adoption.close(gone_timeout=0.0)
                self.adopted.remove(adoption)
        return error

    def _adopted_end(self, adoption: Adoption, end: Ended) -> None:
        """An adopted job ended: as any result, when a job of this run stands for it. Its
        place in the scheduler (:meth:`Adoption.place`, its alone) goes with it."""
        key, result = end.job.claimed_by, end.result
        if key is None:
            self._unclaimed_end(adoption, end)
            return
        place = adoption.place(end.job)
        if result is None:  # its worker went away, or gave it back: it runs again here
            self.reporter.handle(self.scheduler.remove_worker(place, preempted=True))
        elif result.end is AttemptEnd.CANCELLED:  # a cancel this run did not ask for (one
            # not started for a timeout of the old worker's own that does not prune here)
            # runs it again here: the core's rule for any worker (one_round.take_cancelled)
            cancelled = one_round.Cancelled(key, place, result.ran)
            self.reporter.handle(one_round.take_cancelled(self.scheduler, cancelled), result)
        else:
            outcome = result.end.outcome
            assert outcome is not None
            self.reporter.handle(self.scheduler.finish(key, outcome, runtime_s=result.timed_s),
                                 result)
        self.reporter.handle(self.scheduler.remove_worker(place))  # nothing left there

    def _unclaimed_end(self, adoption: Adoption, end: Ended) -> None:
        """An adopted job no job of this run stands for (yet): its solution waits for a
        submission of it, its timeout joins the frontier (as a harvested one would)."""
        job, result = end.job, end.result
        if result is None:
            return
        if result.end is AttemptEnd.SOLVED and job.identity:
            self.harvested[job.identity] = Harvested(adoption.run_id, job.key, result.worker,
                                                     result.runtime_s, result.command_s)
        elif result.end is AttemptEnd.TIMEOUT and not self.scheduler.confirm_timeouts:
            record_timeout(RunFiles(adoption.held.dir), self.state, job.submitted, result,
                           self.config.run_id)
            family, point = job.submitted.get("family"), job.submitted.get("point")
            key = FamilyRef(**family).key if family else None
            if key in self.scheduler.frontiers and point is not None:
                self.reporter.handle(self.scheduler.add_timeout(
                    key, HardnessPoint(tuple(point["scope"]), tuple(point["vector"])),
                    job.submitted.get("label", job.key)))
