"""The run's live counts: ``status.json`` every status interval, and the progress line in the log
whenever it says something new (the cost meter alone is no news).
"""

from __future__ import annotations

from typing import Callable

from expo_executor.coordinator.run_files import RunFiles
from expo_executor.core.budget import BudgetConfig, meter_line


class Progress:
    """Writes the counts at most every ``interval`` s, unless forced."""

    def __init__(self, files: RunFiles, interval: float, slots_per_worker: int,
                 budget: BudgetConfig | None, log: Callable[[str], None]) -> None:
        self.files = files
        self.interval = interval
        self.slots_per_worker = slots_per_worker
        self.budget = budget
        self.log = log
        self._last = 0.0
        self._last_text = ""

    def due(self, now: float) -> bool:
        return now - self._last >= self.interval

    def report(self, now: float, counts: dict[str, int], ready: int, booting: int,
               spent: float | None, force: bool = False) -> None:
        """Write ``status.json`` and log the line if it changed (or ``force``). ``spent``:
        USD so far, when VMs are priced."""
        status = {**counts, "workers": ready, "booting": booting,
                  "slots": ready * self.slots_per_worker, "time": now}
        text = (f"expocloud: {counts['queued']} queued, {counts['running']} running, "
                f"{counts['solved']} solved, {counts['timeout']} timed out, "
                f"{counts['skipped']} skipped, {counts['failed']} failed | "
                f"{ready} workers{f' (+{booting} booting)' if booting else ''}, "
                f"{status['slots']} slots")
        changed = text != self._last_text
        self._last_text = text
        if spent is not None:
            status["cost_usd"] = spent
            text += f" | {meter_line(spent, self.budget)}"
        self.files.write_status(status)
        if force or changed:
            self.log(text)
        self._last = now
