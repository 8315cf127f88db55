"""The run's runtime models (coordinator/runtime_models.py): the factory a setting names, one
model per family built from its saved state, each job's prediction as it was taken in, the
models saved for the next run, and the estimate of what is left; and how a model skip reads
(coordinator/outcomes.py)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from expo_executor.coordinator import outcomes
from expo_executor.coordinator.persist import Persister
from expo_executor.coordinator.requests import JobRequest
from expo_executor.coordinator.runtime_models import ModelBook, factory_of
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec, RuntimePrediction
from expo_executor.core.scheduler import ModelSkipped, Outcome, SkipRule, Task
from expo_executor.frontends.base import job_request

from tests.runtime_model_double import HOPELESS, ThresholdModel, factory

FAMILY = FamilyRef("/wf/Snakefile", "solve", "n", 30.0)
SPEC = HardnessSpec.parse("n", "test")


def _request(n: int, family: FamilyRef | None = FAMILY) -> JobRequest:
    task = Task(f"j{n}", f"solve {{n={n}}}", family=family.key if family else None,
                point=SPEC.point({"n": str(n)}, "test") if family else None,
                params={"n": str(n)}, deadline_s=30.0 if family else None)
    return job_request(task, ["true"], None, {}, 30.0, family=family,
                       model_spec=ModelSpec(("seed",), HardnessSpec.parse("n")))


def test_none_means_no_model_and_a_name_of_ones_own_is_loaded() -> None:
    assert factory_of("none") is None
    assert factory_of("tests.runtime_model_double:factory") is factory
    with pytest.raises(ExpoError, match="--expocloud-hardness-model: cannot load"):
        factory_of("tests.runtime_model_double:nothing_here")
    with pytest.raises(ExpoError, match="is not callable"):
        factory_of("tests.runtime_model_double:HOPELESS")


def test_one_model_per_family_from_its_saved_state_and_saved_again(tmp_path: Path) -> None:
    state = StateDir(tmp_path)
    state.save_model(FAMILY, {"observed": 4})
    book = ModelBook(factory, state, Persister(print), skip_above=0.99)
    model = book.take_in(_request(1))
    assert isinstance(model, ThresholdModel) and model.earlier == 4
    assert model.spec == ModelSpec(("seed",), HardnessSpec.parse("n"))
    assert book.take_in(_request(5)) is model
    assert book.take_in(_request(2, family=None)) is None  # no family: no model
    assert book.predictions["j5"].p_exceed == HOPELESS and "j2" not in book.predictions
    book.save()
    assert state.load_model(FAMILY)["observed"] == 4
    model.observe(object())  # type: ignore[arg-type]  # the double only counts
    book.save(now=100.0)  # the first save of the run's clock
    assert state.load_model(FAMILY)["observed"] == 5
    model.observe(object())  # type: ignore[arg-type]
    book.save(now=130.0)  # too soon after the last
    assert state.load_model(FAMILY)["observed"] == 5
    book.save(now=160.0)
    assert state.load_model(FAMILY)["observed"] == 6


def test_the_estimate_counts_only_what_is_left_and_predicted(tmp_path: Path) -> None:
    book = ModelBook(factory, StateDir(tmp_path), Persister(print))
    requests = {r.task.key: r for r in (_request(2), _request(4))}
    for request in requests.values():
        book.take_in(request)
    assert book.estimate({}, requests, slots=2, slot_hour_usd=0.0) is None
    estimate = book.estimate({"j2": None, "j4": 1.0}, requests, slots=2, slot_hour_usd=0.0)
    assert estimate is not None and estimate.jobs == 2
    assert 0 < estimate.wall_low_s < estimate.wall_s < estimate.wall_high_s


def test_a_model_skip_reads_as_its_own_outcome_with_the_setting_and_the_way_back() -> None:
    prediction = RuntimePrediction(4000.0, 2000.0, 8000.0, 0.995)
    report = outcomes.model_skipped(ModelSkipped("j5", 0.995, prediction, SkipRule(0.99)),
                                    _request(5))
    assert report.outcome is Outcome.MODEL_SKIPPED and report.runtime_s is None
    assert report.message == (
        "model-skipped: 99.5% likely to run past its deadline of 30 s (predicted 4000 s, 90% "
        "2000 to 8000 s), at or above --expocloud-skip-above 0.99; not run (a rerun with a "
        "higher --expocloud-skip-above, or without it, runs it)")
    record = outcomes.job_record(report, _request(5), None, None, None, 0, 1.0,
                                 prediction=prediction)
    assert (record["outcome"], record["p_exceed"], record["predicted_s"]) == \
        ("model-skipped", 0.995, 4000.0)
    never = RuntimePrediction(math.inf, 9000.0, math.inf, 0.9999)  # the learned model's hopeless
    report = outcomes.model_skipped(ModelSkipped("j5", 0.9999, never, SkipRule(0.99)),
                                    _request(5))
    assert "(predicted unbounded, 90% 9000 to unbounded), at or above" in report.message
    record = outcomes.job_record(report, _request(5), None, None, None, 0, 1.0, prediction=never)
    assert (record["predicted_s"], record["predicted_low_s"], record["predicted_high_s"]) == \
        (None, 9000.0, None)  # JSON has no infinity


def test_a_model_skip_by_a_tools_hint_names_the_hint() -> None:
    rule = SkipRule(0.95, "expo:Hardness skipAbove of solve")
    report = outcomes.model_skipped(
        ModelSkipped("j5", 0.97, RuntimePrediction(90.0, 40.0, 200.0, 0.97), rule), _request(5))
    assert "at or above expo:Hardness skipAbove of solve 0.95; not run (a rerun with a higher " \
        "expo:Hardness skipAbove of solve, or without it, runs it)" in report.message
    assert "--expocloud-skip-above" not in report.message


def test_learned_is_the_real_model_and_a_rerun_starts_from_the_saved_one() -> None:
    """'learned' names expo_executor.learned's model_factory: a fresh LearnedModel, or the
    saved one read under this run's spec; a saved state it cannot read starts afresh."""
    from expo_executor.core.runtime_model import RuntimeObservation
    from expo_executor.learned.model import LearnedModel

    made = factory_of("learned")
    spec = ModelSpec(("seed",), HardnessSpec.parse("n"))
    first = made(spec, None)
    assert isinstance(first, LearnedModel) and first.observations == 0
    assert math.isnan(first.predict({"n": "1", "seed": "0"}, 30.0).median_s)  # knows nothing
    for seed in range(25):
        first.observe(RuntimeObservation({"n": "1", "seed": str(seed)}, 2.0 + seed % 3, True))
    again = made(spec, first.to_dict())
    assert again.observations == 25 and again.spec == spec
    # refitted on load from the same observations (the first was fitted at 20 of them)
    assert again.predict({"n": "1", "seed": "99"}, 30.0).median_s == pytest.approx(
        first.predict({"n": "1", "seed": "99"}, 30.0).median_s, rel=0.05)
    assert made(spec, {"kind": "something else"}).observations == 0


def test_a_prediction_of_nothing_known_is_not_kept(tmp_path: Path) -> None:
    """Before its first fit the learned model's median is NaN: the book keeps no prediction
    (the estimate and the job's record have nothing to show yet)."""
    book = ModelBook(factory_of("learned"), StateDir(tmp_path), Persister(print))
    assert book.take_in(_request(1)) is not None and "j1" not in book.predictions
