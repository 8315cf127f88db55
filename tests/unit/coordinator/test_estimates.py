"""The live estimate of what is left with the learned model (coordinator/estimates.py, picked
by runtime_models.ModelBook.estimate): drawn from the model as it is now, recomputed when it
refits, and in between the last figure less what the running jobs have spent since."""

from __future__ import annotations

from pathlib import Path

from expo_executor.coordinator.estimates import DrawnEstimate
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.requests import JobRequest
from expo_executor.coordinator.runtime_models import ModelBook, factory_of
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec, RuntimeObservation
from expo_executor.core.scheduler import Task
from expo_executor.frontends.base import job_request

DEADLINE = 1000.0
FAMILY = FamilyRef("/wf/Snakefile", "solve", "n", DEADLINE)
SPEC = HardnessSpec.parse("n", "test")


def _request(instance: int) -> JobRequest:
    params = {"n": "1", "instance": str(instance)}
    task = Task(f"j{instance}", f"solve {{instance={instance}}}", family=FAMILY.key,
                point=SPEC.point(params, "test"), params=params, deadline_s=DEADLINE)
    return job_request(task, ["true"], None, {}, DEADLINE, family=FAMILY,
                       model_spec=ModelSpec(("instance",)))


def _book(tmp_path: Path) -> ModelBook:
    """The real learned model; the recompute run at once, in this thread, so the test waits
    on nothing."""
    learned = factory_of("learned")
    assert learned is not None
    return ModelBook(learned, StateDir(tmp_path), Persister(print),
                     drawn=DrawnEstimate(run=lambda work: work(), every_s=30.0))


def _fitted(tmp_path: Path) -> tuple[ModelBook, dict[str, JobRequest], dict[str, float | None]]:
    """A book whose model has fitted on 20 jobs of 50 s, and the 80 others left, queued."""
    book = _book(tmp_path)
    requests = {r.task.key: r for r in map(_request, range(100))}
    for request in requests.values():
        book.take_in(request)
    model = book.models[FAMILY.key]
    for i in range(20):
        model.observe(RuntimeObservation(dict(requests[f"j{i}"].task.params), 50.0, True))
    return book, requests, {key: None for key in list(requests)[20:]}


def test_the_estimate_follows_the_model_after_it_refits(tmp_path: Path) -> None:
    book = _book(tmp_path)
    requests = {r.task.key: r for r in map(_request, range(200))}
    models = {book.take_in(r) for r in requests.values()}
    (model,) = models
    left = {key: None for key in list(requests)[40:]}  # 160 queued
    assert book.estimate(left, requests, slots=10, slot_hour_usd=0.0, now=0.0) is None
    for i in range(20):  # quick ones: the first fit
        model.observe(RuntimeObservation(dict(requests[f"j{i}"].task.params), 2.0, True))
    quick = book.estimate(left, requests, slots=10, slot_hour_usd=0.0, now=30.0)
    assert quick is not None and quick.jobs == 160
    assert 160 * 1.0 / 10 < quick.wall_s < 160 * 4.0 / 10
    version = model.version
    for i in range(20, 40):  # slow ones: a refit moves every prediction up
        model.observe(RuntimeObservation(dict(requests[f"j{i}"].task.params), 200.0, True))
    assert model.version > version
    too_soon = book.estimate(left, requests, slots=10, slot_hour_usd=0.0, now=40.0)
    assert too_soon == quick  # at most one recompute every 30 s
    slow = book.estimate(left, requests, slots=10, slot_hour_usd=0.0, now=60.0)
    assert slow is not None and slow.wall_low_s > 4 * quick.wall_high_s
    assert book.drawn.recomputes == 2


def test_between_refits_the_running_jobs_time_is_taken_off(tmp_path: Path) -> None:
    book, requests, left = _fitted(tmp_path)
    left["j20"] = left["j21"] = 0.0
    first = book.estimate(left, requests, slots=1, slot_hour_usd=3600.0, now=100.0)
    left["j20"] = left["j21"] = 10.0  # ten seconds on, no refit: the same draws, less 20 s
    later = book.estimate(left, requests, slots=1, slot_hour_usd=3600.0, now=110.0)
    assert first is not None and later is not None and book.drawn.recomputes == 1
    assert abs((first.cost_usd - later.cost_usd) - 20.0) < 1e-6
    assert abs((first.wall_low_s - later.wall_low_s) - 20.0) < 1e-6


def test_a_tenth_of_the_jobs_done_calls_for_new_draws(tmp_path: Path) -> None:
    book, requests, left = _fitted(tmp_path)
    assert book.estimate(left, requests, slots=1, slot_hour_usd=0.0, now=0.0) is not None
    for key in list(requests)[20:24]:  # 4 of 80 done: no refit, not a tenth
        del left[key]
    book.estimate(left, requests, slots=1, slot_hour_usd=0.0, now=100.0)
    assert book.drawn.recomputes == 1
    for key in list(requests)[24:32]:  # 12 of 80 done
        del left[key]
    fewer = book.estimate(left, requests, slots=1, slot_hour_usd=0.0, now=200.0)
    assert book.drawn.recomputes == 2 and fewer is not None and fewer.jobs == 68
