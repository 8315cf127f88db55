"""One record per job per worker (coordinator/places.py): every move of a job's place, and the
inbox's lists derived from it and from the scheduler's Place of the job (core/placing.py), as
the coordinator's round and an adopted run use them."""

from __future__ import annotations

from functools import partial

from expo_executor.coordinator.places import Places
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.scheduler import Cancel, Outcome, Release, Scheduler, Stage, Task
from expo_executor.protocol.records import JobSpec

JOB = JobSpec(["true"], None, {}, None)


def _lists(places: Places) -> tuple[list[str], list[str], list[str]]:
    return list(places.jobs()), places.cancels(), list(places.releases())


def test_an_assigned_job_is_listed_in_assignment_order_and_marks_the_inbox_due() -> None:
    places = Places()
    places.dirty = False
    places.assign("b", JOB)
    places.assign("a", JOB)
    assert _lists(places) == (["b", "a"], [], []) and places.dirty
    assert places.has_jobs() and set(places) == {"a", "b"}


def _held_on_a() -> tuple[Scheduler, Places]:
    """One-slot worker ``a`` runs x1 and holds x2 (prefetch); its places read the scheduler's
    releases, as the coordinator's VM fleet wires them."""
    sched = Scheduler(prefetch=1)
    sched.add_worker("a", 1)
    for key, hardness in (("x1", 1.0), ("x2", 2.0), ("x3", 3.0)):
        sched.submit(Task(key, key, "f", HardnessPoint((), (hardness,))))
    assert [x.key for x in sched.assign()] == ["x1", "x2"]
    places = Places({"x1": JOB, "x2": JOB})
    places.placed = partial(sched.place_on, worker_id="a")
    return sched, places


def test_a_held_job_asked_back_leaves_the_jobs_for_the_scheduler_s_release_until_answered() -> None:
    sched, places = _held_on_a()
    sched.add_worker("b", 1)
    sched.assign()  # b's free slot asks x2 back: its place in the scheduler holds the request
    assert sched.take_releases() == [Release("x2", "a", 1)]
    places.dirty = False
    assert places.ask_back("x2") and not places.ask_back("zz")
    assert _lists(places) == (["x1"], [], ["x2"]) and places.dirty
    assert places.releases() == {"x2": 1}
    assert "x2" in places  # its result, should the worker have started it, is still read
    places.dirty = False
    assert places.given_back({"x2": 3}) == [], "an answer to an older request"
    assert not places.dirty
    assert places.given_back({"x2": 1, "x1": 1, "zz": 8}) == [("x2", 1)]
    assert _lists(places) == (["x1"], [], []) and "x2" not in places
    assert sched.released("x2", "a", 1)


def test_a_job_asked_back_then_cancelled_keeps_its_release_listed_until_the_answer() -> None:
    sched, places = _held_on_a()
    sched.add_worker("b", 1)
    sched.assign()
    places.ask_back("x2")
    for event in sched.finish("x1", Outcome.TIMEOUT):  # the domino effect meanwhile
        if isinstance(event, Cancel):
            places.scheduler_cancels(event.key)
    places.ended("x1", here=True)
    assert sched.state("x2") == "cancelling"
    assert _lists(places) == ([], ["x2"], ["x2"]) and places.releases() == {"x2": 1}
    assert places.given_back({"x2": 1}) == [("x2", 1)]
    assert _lists(places) == ([], [], []) and len(places) == 0


def test_the_scheduler_s_cancel_is_listed_from_its_place_until_the_worker_reports() -> None:
    sched, places = _held_on_a()
    places.dirty = False
    events = sched.finish("x1", Outcome.TIMEOUT)  # x2, held behind it, is as hard or harder
    places.ended("x1", here=True)
    assert [e.key for e in events if isinstance(e, Cancel)] == ["x2"]
    places.scheduler_cancels("x2")
    assert _lists(places) == (["x2"], ["x2"], []) and places.dirty
    assert places.asked_to_cancel("x2") and sched.place("x2").stage is Stage.CANCELLING
    places.ended("x2", here=True)  # the worker reports it (the round then tells the scheduler)
    assert _lists(places) == ([], [], []) and len(places) == 0
    sched.cancelled("x2", ran=False)
    assert _lists(places) == ([], [], [])


def test_a_cancel_after_the_job_s_result_was_read_here_stays_listed() -> None:
    """A cancelled result waits for the round: the scheduler may cancel the job meanwhile."""
    sched, places = _held_on_a()
    places.ended("x2", here=True)  # x2's result, cancelled by its worker, read
    sched.finish("x1", Outcome.TIMEOUT)
    places.ended("x1", here=True)
    places.scheduler_cancels("x2")
    sched.cancelled("x2", ran=False)  # the round takes x2's result in
    assert _lists(places) == ([], ["x2"], [])


def test_an_adopted_worker_lists_the_old_coordinator_s_releases_until_answered() -> None:
    """Its requests are no request of this scheduler's: the record keeps them."""
    places = Places({"a": JOB}, release={"b": 7})
    assert _lists(places) == (["a"], [], ["b"]) and places.releases() == {"b": 7}
    assert places.given_back({"b": 6}) == [] and places.given_back({"b": 7}) == [("b", 7)]
    places.cancel("b")
    assert _lists(places) == (["a"], ["b"], [])


def test_a_cancelled_job_stays_listed_until_its_result_and_then_leaves_every_list() -> None:
    places = Places({"a": JOB})
    places.cancel("a")
    assert _lists(places) == (["a"], ["a"], [])
    places.dirty = False
    places.ended("a", here=True)
    assert _lists(places) == ([], [], []) and not places.dirty  # said with the next write


def test_a_copy_whose_first_result_came_from_elsewhere_is_killed_here() -> None:
    places = Places({"a": JOB})
    places.dirty = False
    places.ended("a", here=False)
    assert _lists(places) == ([], ["a"], []) and places.dirty
    places.ended("zz", here=False)  # nothing of it here: nothing changes
    assert _lists(places) == ([], ["a"], [])


def test_a_withdrawn_job_leaves_the_jobs_with_the_next_write_an_adopted_one_at_once() -> None:
    places = Places({"a": JOB, "b": JOB}, cancel=["c"])
    assert _lists(places) == (["a", "b"], ["c"], [])
    places.dirty = False
    places.withdraw("a")
    assert _lists(places) == (["b"], ["c"], []) and not places.dirty
    assert places.asked_to_cancel("c") and not places.asked_to_cancel("b")
    places.forget("c")
    assert _lists(places) == (["b"], [], []) and places.dirty and len(places) == 1
