"""The scheduler's runtime-model hooks, with the learned model fitted on synthetic sweeps: the
queue's order within the declared order, waves and the probe rule, the model skip (trusted
only, queued only), and the domino effect held back where the data disputes the order."""

from __future__ import annotations

from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec
from expo_executor.core.scheduler import (Finished, ModelSkipped, Outcome, Scheduler, Skipped,
                                          Task)
from expo_executor.learned.model import LearnedModel
from tests.helpers import runtime_sweep

DEADLINE = 1000.0
FAMILY = "rule"


def job(key: str, spec: HardnessSpec | None = None, **params: str) -> Task:
    point = spec.point(params) if spec is not None else None
    return Task(key, key, FAMILY, point, params=params, deadline_s=DEADLINE)


def run_one_by_one(sched: Scheduler) -> list[str]:
    """Start tasks one at a time on one one-CPU worker, solving each in 1 s."""
    sched.add_worker("w", 1)
    order = []
    while True:
        started = sched.assign()
        if not started:
            return order
        order.append(started[0].key)
        sched.finish(started[0].key, Outcome.SOLVED, 1.0)


def test_the_queue_follows_the_model_within_the_declared_order():
    """b is far faster than a: b's tasks go first, and within each, n stays ascending."""
    spec = HardnessSpec.parse("n; scope: algo")
    model = LearnedModel(ModelSpec(("instance", "rep"), spec))
    runtime_sweep(model, lambda p: (6.0 if p["algo"] == "a" else 1.0) + 0.3 * int(p["n"]),
                  groups=20, reps=1, algo=["a", "b"], n=["1", "2", "3"])
    sched = Scheduler(models={FAMILY: model})
    for algo in "ab":
        for n in "321":
            sched.submit(job(f"{algo}{n}", spec, algo=algo, n=n, instance="x", rep="0"))
    assert run_one_by_one(sched)[:6] == ["b1", "b2", "b3", "a1", "a2", "a3"]


def test_one_task_per_group_first_and_a_group_waits_for_its_probe():
    model = LearnedModel(ModelSpec(("instance", "rep")))
    runtime_sweep(model, lambda p: 3.0, groups=30, algo=["a"])
    sched = Scheduler(models={FAMILY: model})
    for instance in ("i", "j"):
        for rep in "012":
            sched.submit(job(f"{instance}{rep}", algo="a", instance=instance, rep=rep))
    sched.add_worker("w", 3)
    first = [a.key for a in sched.assign()]
    assert first == ["i0", "j0"]  # the third slot stays free: i1 and j1 wait for their probes
    sched.finish("i0", Outcome.SOLVED, 20.0)
    assert [a.key for a in sched.assign()] == ["i1", "i2"]


def trained_with_hopeless_instances() -> LearnedModel:
    model = LearnedModel(ModelSpec(("instance", "rep")))
    runtime_sweep(model, lambda p: 9.0 if int(p["instance"]) % 10 == 0 else 3.0, groups=200,
                  algo=["a"])
    return model


def test_a_probes_timeout_skips_its_queued_siblings_with_their_probability():
    sched = Scheduler(models={FAMILY: trained_with_hopeless_instances()}, skip_above=0.99,
                      trust_after=50)
    for rep in "0123":
        sched.submit(job(f"r{rep}", algo="a", instance="hard", rep=rep))
    sched.add_worker("w", 1)
    assert [a.key for a in sched.assign()] == ["r0"]
    events = sched.finish("r0", Outcome.TIMEOUT)
    assert events[0] == Finished("r0", Outcome.TIMEOUT)
    skips = events[1:]
    assert [e.key for e in skips] == ["r1", "r2", "r3"]
    assert all(isinstance(e, ModelSkipped) and e.probability >= 0.99 for e in skips)
    assert all(sched.outcomes[k] is Outcome.MODEL_SKIPPED for k in ("r1", "r2", "r3"))
    assert sched.assign() == []


def test_no_model_skip_before_trust_and_never_of_a_running_task():
    untrusted = Scheduler(models={FAMILY: trained_with_hopeless_instances()}, skip_above=0.99,
                          trust_after=10**6)
    untrusted.submit(job("r0", algo="a", instance="hard", rep="0"))
    untrusted.submit(job("r1", algo="a", instance="hard", rep="1"))
    untrusted.add_worker("w", 1)
    untrusted.assign()
    assert untrusted.finish("r0", Outcome.TIMEOUT) == [Finished("r0", Outcome.TIMEOUT)]

    trusted = Scheduler(models={FAMILY: trained_with_hopeless_instances()}, skip_above=0.99)
    for rep in "012":
        trusted.submit(job(f"r{rep}", algo="a", instance="hard", rep=rep))
    trusted.add_worker("w", 1)
    trusted.add_worker("v", 1)
    trusted.assign()  # r0 runs; r1 waits for it (the probe rule)
    trusted.finish("r0", Outcome.SOLVED, 5.0)  # a fast run: nothing to skip
    assert {a.key for a in trusted.assign()} == {"r1", "r2"}
    # r1 times out while r2 runs: r2 is running, so it is left to finish
    assert trusted.finish("r1", Outcome.TIMEOUT) == [Finished("r1", Outcome.TIMEOUT)]
    assert trusted.state("r2") == "running"


def test_the_domino_effect_spares_the_region_where_the_order_is_wrong():
    """Declared: n makes it harder. For algo b, n=1 is slow and n=2, 3 fast: a timeout of b's
    n=1 skips none of b's harder points, while a's n=1 timeout still skips a's."""
    spec = HardnessSpec.parse("n; scope: algo, instance")
    model = LearnedModel(ModelSpec(("instance", "rep"), spec))
    runtime_sweep(model, lambda p: (2.0 + int(p["n"])) if p["algo"] == "a"
                  else (7.5 if p["n"] == "1" else 2.0), groups=30, algo=["a", "b"],
                  n=["1", "2", "3"])
    assert [d.harder for d in model.disagreements()] == [{"algo": "b", "n": "2"}]
    sched = Scheduler(models={FAMILY: model})
    for algo in "ab":  # known timeouts of both n=1 points (a crashed run's, say)
        sched.add_timeout(FAMILY, spec.point({"algo": algo, "n": "1", "instance": "new"}),
                          f"{algo}1")
    events = [e for algo in "ab" for n in "23"
              for e in sched.submit(job(f"{algo}{n}", spec, algo=algo, n=n, instance="new",
                                        rep="0"))]
    assert [(e.key, type(e)) for e in events] == [("a2", Skipped), ("a3", Skipped)]
    assert run_one_by_one(sched) == ["b2", "b3"]


def test_where_the_order_is_disputed_the_data_orders_the_queue():
    spec = HardnessSpec.parse("n; scope: algo, instance")
    model = LearnedModel(ModelSpec(("instance", "rep"), spec))
    runtime_sweep(model, lambda p: 7.5 if p["n"] == "1" else 2.0, groups=30, algo=["b"],
                  n=["1", "2", "3"])
    sched = Scheduler(models={FAMILY: model})
    for n in "123":
        sched.submit(job(f"b{n}", spec, algo="b", n=n, instance="new", rep="0"))
    assert run_one_by_one(sched)[-1] == "b1"
