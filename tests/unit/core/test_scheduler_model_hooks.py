"""The scheduler's runtime-model hooks as the coordinator relies on them: a submitted task its
family's model judges hopeless (at least ``skip_above``) is model-skipped, with its probability;
below it, or without ``skip_above``, it runs; a finished task teaches the model (a timeout as
censored at its deadline). The double needs no learning, so it is trusted at once
(``trust_after=0``)."""

from __future__ import annotations

from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec
from expo_executor.core.scheduler import ModelSkipped, Outcome, Scheduler, Task

from tests.runtime_model_double import HOPELESS, ThresholdModel

SPEC = HardnessSpec.parse("n", "test")


def _task(n: int) -> Task:
    return Task(f"t{n}", f"t n={n}", family="f", point=SPEC.point({"n": str(n)}, "test"),
                params={"n": str(n)}, deadline_s=10.0)


def test_a_hopeless_task_is_model_skipped_with_its_probability() -> None:
    scheduler = Scheduler(models={"f": ThresholdModel(ModelSpec())}, skip_above=0.99,
                          trust_after=0)
    assert scheduler.submit(_task(1)) == []
    events = scheduler.submit(_task(5))
    assert [type(e) for e in events] == [ModelSkipped]
    assert events[0].probability == HOPELESS
    assert scheduler.outcomes["t5"] is Outcome.MODEL_SKIPPED
    assert scheduler.counts()["model-skipped"] == 1


def test_without_skip_above_nothing_is_model_skipped() -> None:
    scheduler = Scheduler(models={"f": ThresholdModel(ModelSpec())})
    assert scheduler.submit(_task(5)) == []
    assert "t5" not in scheduler.outcomes


def test_finished_tasks_teach_the_model_timeouts_censored_at_the_deadline() -> None:
    model = ThresholdModel(ModelSpec())
    scheduler = Scheduler(models={"f": model}, skip_above=0.999, trust_after=0)
    for n in (1, 2):
        scheduler.submit(_task(n))
    scheduler.add_worker("w", 2)
    assert len(scheduler.assign()) == 2
    scheduler.finish("t1", Outcome.SOLVED, runtime_s=1.5)
    scheduler.finish("t2", Outcome.TIMEOUT, runtime_s=10.4)
    seen = [(o.params["n"], o.seconds, o.finished) for o in model.seen]
    assert seen == [("1", 1.5, True), ("2", 10.0, False)]
