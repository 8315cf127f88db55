"""The scheduler's runtime-model hooks as the coordinator relies on them: a submitted task its
family's model judges hopeless (at least ``skip_above``) is model-skipped, with its probability;
below it, or without ``skip_above``, it runs; a family's own threshold (``Task.skip``, a CWL
tool's hint) overrides the run's for that family's tasks alone; a finished task teaches the model (a timeout as
censored at its deadline). The double needs no learning, so it is trusted at once
(``trust_after=0``)."""

from __future__ import annotations

import pytest

from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec
from expo_executor.core.scheduler import ModelSkipped, Outcome, Scheduler, SkipRule, Task

from tests.runtime_model_double import HOPELESS, ThresholdModel

SPEC = HardnessSpec.parse("n", "test")


HINT = SkipRule(0.99, "expo:Hardness skipAbove of hinted")


def _task(n: int, family: str = "f", skip: SkipRule | None = None) -> Task:
    return Task(f"{family}{n}", f"{family} n={n}", family=family,
                point=SPEC.point({"n": str(n)}, "test"), params={"n": str(n)}, deadline_s=10.0,
                skip=skip)


def test_a_hopeless_task_is_model_skipped_with_its_probability() -> None:
    scheduler = Scheduler(models={"f": ThresholdModel(ModelSpec())}, skip_above=0.99,
                          trust_after=0)
    assert scheduler.submit(_task(1)) == []
    events = scheduler.submit(_task(5))
    assert [type(e) for e in events] == [ModelSkipped]
    assert events[0].probability == HOPELESS
    assert events[0].rule == SkipRule(0.99, "--expocloud-skip-above")
    assert scheduler.outcomes["f5"] is Outcome.MODEL_SKIPPED
    assert scheduler.counts()["model-skipped"] == 1


def test_without_skip_above_nothing_is_model_skipped() -> None:
    scheduler = Scheduler(models={"f": ThresholdModel(ModelSpec())})
    assert scheduler.submit(_task(5)) == []
    assert "f5" not in scheduler.outcomes


def test_a_familys_own_threshold_skips_its_tasks_alone() -> None:
    """No run-wide setting: the hinted family's hopeless task is skipped, naming the hint; the
    other family's equally hopeless task runs."""
    models = {f: ThresholdModel(ModelSpec()) for f in ("hinted", "plain")}
    scheduler = Scheduler(models=models, trust_after=0)
    events = scheduler.submit(_task(5, "hinted", HINT))
    assert [(e.key, e.rule.text) for e in events] == [
        ("hinted5", "expo:Hardness skipAbove of hinted 0.99")]
    assert scheduler.submit(_task(5, "plain")) == []
    assert "plain5" not in scheduler.outcomes


def test_a_familys_threshold_overrides_the_runs_either_way() -> None:
    """The run skips at 0.99; one family's hint asks for more certainty than the model has
    (0.999: not skipped), another's for the run's default (none given: skipped by the run's)."""
    models = {f: ThresholdModel(ModelSpec()) for f in ("strict", "plain")}
    scheduler = Scheduler(models=models, skip_above=0.99, trust_after=0)
    assert scheduler.submit(_task(5, "strict", SkipRule(0.999, "hint"))) == []
    (event,) = scheduler.submit(_task(5, "plain"))
    assert event.rule == SkipRule(0.99)


def test_a_refit_skips_by_the_familys_own_threshold() -> None:
    """A task queued before its model was trusted is skipped once it is, by its family's rule."""
    model = ThresholdModel(ModelSpec())
    scheduler = Scheduler(models={"hinted": model}, trust_after=1)
    for n in (1, 5):
        assert scheduler.submit(_task(n, "hinted", HINT)) == []
    scheduler.add_worker("w", 1)
    assert [a.key for a in scheduler.assign()] == ["hinted1"]
    model.version += 1  # a refit: every queued task of the family is asked again
    events = scheduler.finish("hinted1", Outcome.SOLVED, runtime_s=1.0)
    skips = [e for e in events if isinstance(e, ModelSkipped)]
    assert [(e.key, e.rule) for e in skips] == [("hinted5", HINT)]


def test_a_threshold_outside_0_1_is_refused() -> None:
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="hint"):
            SkipRule(bad, "hint")


def test_finished_tasks_teach_the_model_timeouts_censored_at_the_deadline() -> None:
    model = ThresholdModel(ModelSpec())
    scheduler = Scheduler(models={"f": model}, skip_above=0.999, trust_after=0)
    for n in (1, 2):
        scheduler.submit(_task(n))
    scheduler.add_worker("w", 2)
    assert len(scheduler.assign()) == 2
    scheduler.finish("f1", Outcome.SOLVED, runtime_s=1.5)
    scheduler.finish("f2", Outcome.TIMEOUT, runtime_s=10.4)
    seen = [(o.params["n"], o.seconds, o.finished) for o in model.seen]
    assert seen == [("1", 1.5, True), ("2", 10.0, False)]
