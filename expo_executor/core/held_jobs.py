"""Prefetch's two rules for one worker's held jobs (assigned, not started), written once.

The coordinator's scheduler decides with them (``Scheduler._wants_refill``, ``_promote``), and
the worker agent follows the same decisions on its side (``worker/result_reports.py`` says
when its results go, ``worker/job_starts.py`` starts its held jobs): when the two disagree, a
worker waits for a refill the coordinator will not send, or the coordinator counts a slot busy
that the worker left idle. Pure: no I/O, no clock.
"""

from __future__ import annotations


def runs_low(held_cpus: int, cpus: int) -> bool:
    """A worker runs low once its held jobs need no more CPUs than it has: one held job per
    slot, the last ones it will start. With a prefetch of 0 or 1 it always does."""
    return held_cpus <= cpus


def wants_refill(prefetch: int, held_cpus: int, cpus: int) -> bool:
    """Refill on low: with ``prefetch`` 2 or more a worker gets held jobs only once it
    :func:`runs_low`, so that new jobs reach it in one inbox write, not one write per job it
    finishes (and its worker reports then, not after each job); with 0 or 1, whenever it has
    prefetch left."""
    return prefetch < 2 or runs_low(held_cpus, cpus)


def starts_now(job_cpus: int, free_cpus: int, busy: bool) -> bool:
    """Whether the next held job (in the coordinator's order: easiest first) starts as a slot
    frees: when it fits in the free CPUs, or when nothing runs (a job as wide as the worker).
    A job that does not fit stops the starts: none behind it overtakes it."""
    return not busy or job_cpus <= free_cpus
