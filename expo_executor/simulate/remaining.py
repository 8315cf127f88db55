"""The replay's check of the remaining-cost estimate: at 25% of the jobs decided, the model's
90% interval of the slot-seconds still to spend (``learned.remaining``); at the end, whether the
truth (what was spent after that moment) lies in it."""

from __future__ import annotations

from typing import Any, Mapping, Sequence


class RemainingCheck:
    def __init__(self, jobs: int, share: float = 0.25):
        self.at = max(1, int(jobs * share))
        self.taken: dict[str, Any] | None = None
        self.spent_s = 0.0  # slot-seconds of the jobs ended so far

    def finished(self, seconds: float) -> None:
        self.spent_s += seconds

    def take(self, scheduler: Any, model: Any, rows: Sequence[Any],
             running: Mapping[str, tuple[float, str]], now: float, deadline_s: float) -> None:
        """The estimate now, from the undecided jobs (queued, and running for so long). The
        running jobs are observations too, censored at what they have run so far: the jobs
        decided this early are the quick ones, and a model of them alone would think every
        job quick."""
        from expo_executor.core.runtime_model import RuntimeObservation
        from expo_executor.learned.model import model_from_dict
        from expo_executor.learned.remaining import Pending, remaining_cost

        model = model_from_dict(model.to_dict())
        for key, (start, _worker) in running.items():
            if now > start:
                model.observe(RuntimeObservation(rows[int(key)].params, now - start, False))
        model.refit()
        pending = [Pending(rows[int(key)].params) for key in scheduler.queued_keys()]
        for key, (start, _worker) in running.items():
            pending.append(Pending(rows[int(key)].params, now - start, True))
        estimate = remaining_cost(model, pending, deadline_s, scheduler.skip_above)
        ran = sum(now - start for start, _worker in running.values())
        self.taken = {"at_decided": len(scheduler.outcomes), "at_time_s": now,
                      "spent_s": self.spent_s + ran, "median_s": estimate.median_s,
                      "low_s": estimate.low_s, "high_s": estimate.high_s}

    def report(self, total_s: float) -> dict[str, Any]:
        if self.taken is None:
            return {"covered": None}
        truth = total_s - self.taken["spent_s"]
        return {**self.taken, "truth_s": truth,
                "covered": self.taken["low_s"] <= truth <= self.taken["high_s"]}
