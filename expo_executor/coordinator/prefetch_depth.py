"""How many jobs per slot a GCE worker holds when ``--expocloud-prefetch`` is not set: sized to
the jobs' own length, so that a slot holds about ``HOLD_S`` seconds of work.

Why: with a depth of 2 or more a worker is refilled only when it runs low and reports the jobs
it solved meanwhile in one object (core/held_jobs.py, the rule of the scheduler's
``_wants_refill`` and of the worker's ``_report_due``), so each inbox write and each result
object serve about ``depth - 1`` jobs. Both are billed class A operations: at one job per
write, storage alone is about 3% of a one-slot e2-standard-2 Spot VM's bill for 60-s jobs
(bench/RESULTS.md, Benchmark 4). Held work is also what the run's tail can grow by (the
scheduler spreads the queue's last jobs, ``Scheduler._hold``), and what a worker holds when a
timeout elsewhere dominates it (the cancel reaches it at its next inbox read, and it reads once
more before it starts a held job with a hardness point; it never starts one its own timeouts
dominate), so the depth is capped at ``HOLD_S`` of work and ``MAX_DEPTH`` jobs. Before any job
has ended it is 1, the depth of fixed prefetch.
"""

from __future__ import annotations

import math
import statistics
from collections import deque

from expo_executor.settings.engine_defaults import HOLD_S, MAX_DEPTH  # the GCE default's bounds

WINDOW = 64  # the last solved jobs whose length sets the depth


class PrefetchDepth:
    """The depth from the median length of the last ``WINDOW`` solved jobs."""

    def __init__(self, hold_s: float = HOLD_S, max_depth: int = MAX_DEPTH) -> None:
        self.hold_s = hold_s
        self.max_depth = max_depth
        self._lengths: deque[float] = deque(maxlen=WINDOW)

    def observe(self, seconds: float) -> None:
        """A job solved in ``seconds`` (on its worker, start-up included)."""
        self._lengths.append(max(0.0, seconds))

    def depth(self) -> int:
        if not self._lengths:
            return 1
        typical = max(statistics.median(self._lengths), 1e-3)
        return max(1, min(self.max_depth, math.ceil(self.hold_s / typical)))
