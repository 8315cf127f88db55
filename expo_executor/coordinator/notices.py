"""A run's notifications, as the coordinator sees its events: each event goes through the core's
rule for it (:mod:`expo_executor.core.notices`: the first failure once, the stall once until
progress) and, when due, to the :class:`~expo_executor.notify.sender.Notifier`, which sends it
off this thread. Without ``--expocloud-notify`` or ``--expocloud-notify-command`` there is no
notifier and every call here costs a comparison.
"""

from __future__ import annotations

import time
from typing import Callable

from expo_executor.core import notices
from expo_executor.core.budget import BudgetConfig, Phase
from expo_executor.core.notices import Notice, RunEnd, Stalled, Watch
from expo_executor.core.run_status import RunStatus
from expo_executor.core.scheduler import Outcome
from expo_executor.coordinator.requests import JobReport
from expo_executor.notify.sender import Notifier

PHASES = {Phase.NO_GROWTH: "no_growth", Phase.LIMIT: "limit", Phase.STOP: "stop"}


class Notices:
    """One run's notices: ``notifier`` None sends nothing."""

    def __init__(self, run_id: str, notifier: Notifier | None, stall_after: float,
                 clock: Callable[[], float] = time.time) -> None:
        self.run_id = run_id
        self.clock = clock
        self.notifier = notifier
        self.stall_after = stall_after
        self.watch = Watch()
        self._ended = False

    def _post(self, notice: Notice) -> None:
        if self.notifier is not None:
            self.notifier.post(notice)

    def budget(self, phase: Phase, spent_usd: float, budget: BudgetConfig, now: float) -> None:
        """The budget moved to ``phase``."""
        if self.notifier is not None:
            self._post(notices.budget(self.run_id, now, notices.BudgetChange(
                PHASES.get(phase, phase.name.lower()), round(spent_usd, 6), budget.limit_usd,
                budget.action)))

    def reported(self, report: JobReport, label: str) -> None:
        """A job's report went to its front end: the run's first failure is notified."""
        if self.notifier is None or report.outcome is not Outcome.FAILED:
            return
        self.watch, due = notices.failure_due(self.watch)
        if due:
            self._post(notices.first_failure(self.run_id, self.clock(), label, report.message))

    def pool_stopped(self, pool: str, machine: str, why: str) -> None:
        """A pool may not grow for the rest of the run."""
        if self.notifier is not None:
            self._post(notices.pool_stopped(self.run_id, self.clock(), pool, machine, why))

    def status(self, status: RunStatus) -> None:
        """The run's status (every status interval): a stall is notified once it is due."""
        if self.notifier is None:
            return
        counts = status.counts
        ended = sum(n for state, n in counts.items() if state not in ("queued", "running"))
        running = counts.get("running", 0)
        workers = status.workers + status.booting
        self.watch, due = notices.stall_step(self.watch, (running + ended, ended), workers,
                                             status.time, self.stall_after)
        if due and self.watch.still_since is not None:
            self._post(notices.stalled(self.run_id, status.time, Stalled(
                round(status.time - self.watch.still_since, 1), workers,
                counts.get("queued", 0), running)))

    def run_end(self, summary: RunEnd, now: float) -> None:
        """The run is over: its summary is sent, and what is queued flushed (bounded)."""
        if self.notifier is None or self._ended:
            return
        self._ended = True
        self._post(notices.run_end(self.run_id, now, summary))
        self.notifier.close()
