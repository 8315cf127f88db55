"""The run's estimate of what is left, from models that draw it whole (the learned one:
``core.runtime_model.DrawsRemaining``): the estimate the replay validated, recomputed off the
coordinator's thread.

Drawing 50,000 jobs 200 times, after a refit of a copy of the model that has seen the running
jobs, takes seconds of CPU (bench/RESULTS.md, "Issue 32: the live estimate"): far too much for
a status interval. So it is recomputed in a thread of its own, when a model has refitted
(its ``version`` moved), new jobs have come in or a tenth of those left are done, at most every
:data:`EVERY_S`; in between, the last figure is shown with the CPU-seconds the running jobs
have spent since taken off. The thread shares the coordinator's process (and interpreter
lock): while it draws, the coordinator's rounds run a little slower, never blocked.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass

from expo_executor.core.remaining import Remaining, from_draws
from expo_executor.core.runtime_model import Pending

log = logging.getLogger(__name__)
EVERY_S = 30.0  # at most one recompute this often
DRAWS = 200


@dataclass(frozen=True)
class FamilyLeft:
    """One family's undecided jobs, for its model to draw: each job's CPUs are the family's."""

    model: object  # a DrawsRemaining
    jobs: tuple[Pending, ...]
    deadline_s: float
    cpus: int
    skip_above: float | None = None


def _in_a_thread(work: Callable[[], None]) -> None:
    threading.Thread(target=work, name="expocloud-estimate", daemon=True).start()


class DrawnEstimate:
    """The last drawn totals of CPU-seconds left, and when they were asked for."""

    def __init__(self, run: Callable[[Callable[[], None]], None] = _in_a_thread,
                 every_s: float = EVERY_S) -> None:
        self._run, self.every_s = run, every_s
        self._lock = threading.Lock()
        self._busy = False
        self._asked: Hashable = None  # what the last recompute was asked for
        self._asked_at = -float("inf")
        self._totals: list[float] | None = None
        self._at = 0.0  # the clock when the last totals were asked for
        self.recomputes = 0

    def wanted(self, key: Hashable, now: float) -> bool:
        """Whether a recompute for ``key`` (the models' versions and the jobs taken in) should
        start now: it differs from the last, none is under way, and the last is old enough."""
        with self._lock:
            return key != self._asked and not self._busy and (
                self._totals is None or now - self._asked_at >= self.every_s)

    def recompute(self, key: Hashable, now: float, families: Sequence[FamilyLeft]) -> None:
        """Draw every family's jobs (in a thread, unless ``run`` says otherwise) and sum the
        draws: one total per draw, each family's draws independent of the others'."""
        with self._lock:
            self._busy, self._asked, self._asked_at = True, key, now

        def work() -> None:
            try:
                totals, drawn = [0.0] * DRAWS, False
                for family in families:
                    draws = family.model.remaining_draws(  # type: ignore[attr-defined]
                        family.jobs, family.deadline_s, family.skip_above, DRAWS)
                    drawn = drawn or bool(draws)  # none: its model has not fitted yet
                    for i, value in enumerate(draws):
                        totals[i] += family.cpus * value
                with self._lock:
                    if drawn:
                        self._totals, self._at = totals, now
                        self.recomputes += 1
            except Exception:  # a bug here must not stop the run: the last figure stays
                log.exception("the estimate of what is left could not be drawn")
            finally:
                with self._lock:
                    self._busy = False

        self._run(work)

    def current(self, jobs: int, running: Mapping[str, tuple[float, int]], now: float,
                slots: int, slot_hour_usd: float) -> Remaining | None:
        """The last totals, less what the ``running`` jobs (key -> (seconds run, CPUs)) have
        spent since they were drawn; None before the first."""
        with self._lock:
            totals, at = self._totals, self._at
        if totals is None:
            return None
        spent = sum(cpus * min(elapsed, max(0.0, now - at)) for elapsed, cpus in running.values())
        return from_draws([max(0.0, total - spent) for total in totals], jobs, slots,
                          slot_hour_usd)
