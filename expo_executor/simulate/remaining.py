"""The replay's check of the remaining-cost estimate: at 25% of the jobs decided, the model's
90% interval of the slot-seconds still to spend; at the end, whether the truth (what was spent
after that moment) lies in it.

Two estimates are taken, from the same moment's model: the one runs show
(``learned.remaining.informed_draws``, jobs drawn with their cell's and group's effects shared)
and, for comparison, the per-job one summed as independent (``core.remaining``, what a model
without draws gets), so that the replay says how far each can be trusted.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from expo_executor.core.remaining import JobLeft, quantiles, remaining
from expo_executor.core.runtime_model import Pending


class RemainingCheck:
    def __init__(self, jobs: int, share: float = 0.25):
        self.at = max(1, int(jobs * share))
        self.taken: dict[str, Any] | None = None
        self.spent_s = 0.0  # slot-seconds of the jobs ended so far

    def finished(self, seconds: float) -> None:
        self.spent_s += seconds

    def take(self, scheduler: Any, model: Any, rows: Sequence[Any],
             running: Mapping[str, tuple[float, str]], now: float, deadline_s: float) -> None:
        """The estimates now, from the undecided jobs (queued, and running for so long)."""
        from expo_executor.learned.remaining import informed_draws

        pending = [Pending(rows[int(key)].params) for key in scheduler.queued_keys()]
        for key, (start, _worker) in running.items():
            pending.append(Pending(rows[int(key)].params, now - start, True))
        draws = informed_draws(model, pending, deadline_s, scheduler.skip_above)
        low, median, high = quantiles(draws)
        ran = sum(now - start for start, _worker in running.values())
        self.taken = {"at_decided": len(scheduler.outcomes), "at_time_s": now,
                      "spent_s": self.spent_s + ran, "median_s": median,
                      "low_s": low, "high_s": high,
                      "independent": self._independent(model, pending, deadline_s)}

    @staticmethod
    def _independent(model: Any, pending: Sequence[Pending], deadline_s: float) -> dict:
        """The per-job estimate summed as independent, from the model's current predictions
        (the best such an estimate can do: a run's are taken when each job arrives)."""
        jobs = [JobLeft(model.predict(dict(job.params), deadline_s), deadline_s, 1,
                        job.elapsed_s) for job in pending]
        # one slot at one dollar a slot-hour: the wall bound is then the CPU-seconds
        estimate = remaining(jobs, 1, 3600.0)
        return {"median_s": estimate.cost_usd, "low_s": estimate.cost_low_usd,
                "high_s": estimate.cost_high_usd}

    def report(self, total_s: float) -> dict[str, Any]:
        if self.taken is None:
            return {"covered": None}
        truth = total_s - self.taken["spent_s"]
        independent = self.taken["independent"]
        independent = {**independent,
                       "covered": independent["low_s"] <= truth <= independent["high_s"]}
        return {**self.taken, "truth_s": truth, "independent": independent,
                "covered": self.taken["low_s"] <= truth <= self.taken["high_s"]}
