"""The run's local records that must not be lost to a passing I/O error: kept, and tried again.

A job's end is handed to the front end in memory first (Snakemake must never wait for a report
that a full disk swallowed); recording it in ``jobs.jsonl`` and adding a timeout to its
frontier come after. A write that fails with an OSError is said loudly, kept in memory in its
order, and tried again at the start of later rounds with exponential backoff (``BASE`` s,
doubling up to ``CAP`` s); the writes after it wait behind it, so the records keep their order.
At the end of the run a write still failing is logged with what it would have written, so it is
never lost silently.
"""

from __future__ import annotations

import json
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

BASE = 1.0  # seconds before the first retry of a failed write
CAP = 60.0  # the longest wait between retries


@dataclass
class _Write:
    what: str  # e.g. "the record of job j in jobs.jsonl"
    write: Callable[[], None]
    record: Any  # what it writes, logged (as JSON) should it never succeed


class Persister:
    """Writes tried at once, and again later while they fail; ``retry`` is the loop's."""

    def __init__(self, log: Callable[[str], None], base: float = BASE, cap: float = CAP) -> None:
        self.log = log
        self.base = base
        self.cap = cap
        self._queue: deque[_Write] = deque()
        self._now = 0.0  # the time of the last round
        self._next = 0.0  # when the queue is tried again
        self._failures = 0  # in a row, for the backoff

    def write(self, what: str, write: Callable[[], None], record: Any = None) -> None:
        """Do ``write`` now, or after the writes still waiting (in order) once they succeed;
        ``record`` is what it writes, serialised only should it never succeed (this is the
        loop thread's path for every job)."""
        self._queue.append(_Write(what, write, record))
        if len(self._queue) == 1:
            self._drain()

    def retry(self, now: float) -> None:
        """The loop's call, every round: try the waiting writes again once their time is due."""
        self._now = now
        if self._queue and now >= self._next:
            self._drain()

    def pending(self) -> list[str]:
        return [w.what for w in self._queue]

    def flush(self) -> None:
        """At the end of the run: one last try, then every write still failing is logged with
        its content (the user can restore it from the log)."""
        self._drain()
        for waiting in self._queue:
            self.log(f"expocloud: ERROR: could not write {waiting.what}; it was: "
                     f"{json.dumps(waiting.record, default=str)}")

    def _drain(self) -> None:
        while self._queue:
            head = self._queue[0]
            try:
                head.write()
            except OSError as exc:
                delay = min(self.cap, self.base * 2 ** self._failures)
                self._failures += 1
                self._next = self._now + delay
                self.log(f"expocloud: ERROR: cannot write {head.what} ({exc}); kept, "
                         f"with {len(self._queue) - 1} more after it, and tried again in "
                         f"{delay:g} s")
                return
            self._queue.popleft()
            if self._failures:
                self.log(f"expocloud: wrote {head.what} after {self._failures} failed "
                         "attempt(s)")
                self._failures = 0
