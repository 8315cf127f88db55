"""The run's live status: ``status.json`` and the run page (``run.html``) every status interval,
and the progress line in the log whenever it says something new (the cost meter and the runtime
model's estimate of what is left ride along with it, but alone they are no news).
"""

from __future__ import annotations

from typing import Callable

from expo_executor.coordinator import run_page
from expo_executor.runs.files import RunFiles
from expo_executor.core.run_status import RunStatus, cost_phrase, counts_line


class Progress:
    """Writes the status at most every ``interval`` s, unless forced."""

    def __init__(self, files: RunFiles, interval: float, log: Callable[[str], None]) -> None:
        self.files = files
        self.interval = interval
        self.log = log
        self._last = 0.0
        self._last_text = ""

    def due(self, now: float) -> bool:
        return now - self._last >= self.interval

    def report(self, status: RunStatus, force: bool = False) -> None:
        """Write ``status.json`` and ``run.html``, and log the line if it changed (or
        ``force``)."""
        text = (f"expocloud: {counts_line(status)} | {status.workers} workers"
                f"{f' (+{status.booting} booting)' if status.booting else ''}, "
                f"{status.slots} slots")
        changed = text != self._last_text
        self._last_text = text
        if status.cost_usd is not None:
            text += f" | {cost_phrase(status.cost_usd, status.budget_usd)}"
        if status.estimate is not None and not status.finished:
            text += f" | {status.estimate.line()}"
        self.files.write_status(status.to_dict())
        self.files.write_page(run_page.render(status, self.files.run_id, status.time))
        if force or changed:
            self.log(text)
        self._last = status.time
