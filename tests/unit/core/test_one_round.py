"""A round's decisions (core/one_round.py) at the budget's drain, on the real scheduler: what
the drain takes back, and what becomes queued after it (a held job given back, a preempted
VM's job), which no slot will ever start."""

from __future__ import annotations

from expo_executor.core import one_round
from expo_executor.core.budget import Phase, PhaseChange, Withdraw
from expo_executor.core.scheduler import Outcome, Scheduler, Task

FLEET = one_round.Fleet({}, {}, {}, {})


def _drain(sched: Scheduler, change: PhaseChange | None) -> one_round.Decided:
    return one_round.decide(sched, ["x1", "x2"], change, Phase.LIMIT, FLEET, frozenset(), 0.0)


def test_a_job_given_back_during_the_drain_is_withdrawn_and_frees_the_room_kept_for_it() -> None:
    """Issue 30's suspicion, confirmed: x2, held on a and asked back for idle b just before
    the drain, was given back after it: it stayed queued for good (the drain takes back what
    is queued at its start only), and b's room kept for it made b look busy."""
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    sched.submit(Task("x1", "x1"))
    sched.submit(Task("x2", "x2"))
    assert [x.key for x in sched.assign()] == ["x1", "x2"]  # a runs x1, holds x2
    sched.add_worker("b", 1)
    assert sched.assign() == [] and [r.key for r in sched.take_releases()] == ["x2"]
    assert sched.workers()["b"] == (1, 0), "b's room waits for x2"
    drained = _drain(sched, PhaseChange(Phase.LIMIT, Withdraw.QUEUED))
    assert drained.withdrawn == () and drained.assignments == (), "a held job is its worker's"
    assert sched.released("x2", "a", 1)  # a gives it back: queued, and no slot will start it
    assert _drain(sched, None).withdrawn == (one_round.Withdrawn("x2", None),)
    assert sched.state("x2") == Outcome.FAILED.value
    assert sched.workers()["b"] == (1, 1), "b waits for nothing: it is idle"
    assert sched.counts()["queued"] == 0
