"""One record per job per worker (coordinator/places.py): every move of a job's place, and the
inbox's lists derived from it, as the coordinator's round and an adopted run use them."""

from __future__ import annotations

from expo_executor.coordinator.places import Places
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


def test_a_held_job_asked_back_leaves_the_jobs_for_the_releases_until_the_answer() -> None:
    places = Places({"a": JOB, "b": JOB})
    places.dirty = False
    assert places.ask_back("b", 7) and not places.ask_back("zz", 8)
    assert _lists(places) == (["a"], [], ["b"]) and places.dirty
    assert places.releases() == {"b": 7}
    assert "b" in places  # its result, should the worker have started it, is still read
    places.cancel("b")  # the domino effect meanwhile
    assert places.given_back({"b": 3}) == [], "an answer to an older request"
    assert places.given_back({"b": 7, "a": 7, "zz": 8}) == [("b", 7)]
    assert _lists(places) == (["a"], [], []) and "b" not in places


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
