"""The learned runtime model on synthetic data with a known answer: censoring honoured,
monotone where an order is declared, the order's wrong region found, persistence."""

from __future__ import annotations

import json
import math

import pytest

from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec, RuntimeObservation
from expo_executor.learned.model import LearnedModel, model_from_dict
from tests.helpers import runtime_sweep

DEADLINE = 1000.0


def sweep(model: LearnedModel, log_mean, **kw) -> None:
    runtime_sweep(model, log_mean, deadline=DEADLINE, **kw)


def test_recovers_known_means_and_spreads_despite_censoring():
    model = LearnedModel(ModelSpec(("instance", "rep")))
    means = {"a": 3.0, "b": 6.0}  # b: e^6 = 403 s, a third of its runs pass the deadline
    sweep(model, lambda p: means[p["algo"]], algo=["a", "b"])
    fit = model._fit
    free = dict(zip([dict(k)["algo"] for k in model._cells.keys], fit.mu_free))
    assert free["a"] == pytest.approx(3.0, abs=0.2)
    assert free["b"] == pytest.approx(6.0, abs=0.25)  # a naive mean of the cut data: ~5.7
    assert fit.sigma == pytest.approx(0.2, abs=0.05)
    assert fit.tau == pytest.approx(1.0, abs=0.15)


def test_a_timeout_is_censored_not_a_runtime():
    """A group seen only through one timeout lies past the deadline (taken as a runtime, the
    timeout would put it at the deadline, shrunk toward the cell: below it)."""
    model = LearnedModel(ModelSpec(("instance", "rep")))
    sweep(model, lambda p: 4.0, algo=["a"])
    params = {"algo": "a", "instance": "hard", "rep": "0"}
    model.observe(RuntimeObservation(params, DEADLINE, False))
    again = model.predict({**params, "rep": "1"}, DEADLINE)
    assert again.median_s > DEADLINE and again.p_exceed > 0.5
    fresh = model.predict({"algo": "a", "instance": "new", "rep": "0"}, DEADLINE)
    assert fresh.p_exceed < 0.05
    assert fresh.low_s < math.exp(4.0) < fresh.high_s


def test_hopeless_groups_are_learned_and_one_timeout_identifies_one():
    """One instance in ten never finishes, whatever the seed: the model learns that share,
    and after a new instance's first timeout gives its next seed > 99% of timing out."""
    model = LearnedModel(ModelSpec(("instance", "rep")))
    sweep(model, lambda p: 9.0 if int(p["instance"]) % 10 == 0 else 3.0, groups=200,
          algo=["a"])
    params = {"algo": "a", "instance": "new", "rep": "0"}
    before = model.predict(params, DEADLINE)
    assert 0.05 < before.p_exceed < 0.2
    model.observe(RuntimeObservation(params, DEADLINE, False))
    after = model.predict({**params, "rep": "1"}, DEADLINE)
    assert after.p_exceed > 0.99 and after.median_s == math.inf


def test_monotone_in_the_declared_order_and_rank_follows_it():
    """Noisy data, declared order n: the ranks never fall as n grows, seen cells or not."""
    spec = HardnessSpec.parse("n; scope: algo")
    model = LearnedModel(ModelSpec(("instance", "rep"), spec))
    sweep(model, lambda p: 3.0 + 0.02 * float(p["n"]), groups=4, reps=1, sd_group=1.5,
          algo=["a"], n=[str(n) for n in range(10)])
    ranks = [model.rank({"algo": "a", "n": str(n), "instance": "0", "rep": "0"})
             for n in [x / 2 for x in range(24)]]
    assert ranks == sorted(ranks)
    assert model.disagreements() == ()


def test_finds_where_the_data_disagrees_with_the_declared_order():
    """Declared: n makes it harder. True for algo a; for algo b, n=1 is slow and n>=2 fast:
    the model reports b's n=1 -> n=2 edge, and disputes b's n >= 2 only."""
    spec = HardnessSpec.parse("n; scope: algo")
    model = LearnedModel(ModelSpec(("instance", "rep"), spec))

    def log_mean(p):
        n = int(p["n"])
        if p["algo"] == "a":
            return 2.0 + n
        return 7.5 if n == 1 else 2.0

    sweep(model, log_mean, groups=30, algo=["a", "b"], n=["1", "2", "3"])
    found = model.disagreements()
    assert [(d.dimension, d.easier, d.harder) for d in found] == \
        [("n", {"algo": "b", "n": "1"}, {"algo": "b", "n": "2"})]
    assert found[0].harder_median_s < found[0].easier_median_s
    at = {(algo, n): model.disputes({"algo": algo, "n": n, "instance": "0", "rep": "0"})
          for algo in "ab" for n in "123"}
    assert at == {("a", "1"): False, ("a", "2"): False, ("a", "3"): False,
                  ("b", "1"): False, ("b", "2"): True, ("b", "3"): True}


def test_persists_as_json_and_loads_to_the_same_predictions():
    model = LearnedModel(ModelSpec(("instance", "rep"), HardnessSpec.parse("n")))
    sweep(model, lambda p: 2.0 + float(p["n"]), groups=10, n=["1", "2", "3"])
    loaded = model_from_dict(json.loads(json.dumps(model.to_dict())))
    assert loaded.observations == model.observations
    assert loaded.spec == model.spec
    loaded.refit()
    model.refit()
    for n in "123":
        params = {"n": n, "instance": "3", "rep": "9"}
        assert loaded.predict(params, DEADLINE).median_s == pytest.approx(
            model.predict(params, DEADLINE).median_s, rel=0.05)
    with pytest.raises(ValueError, match="not a saved runtime model"):
        model_from_dict({"kind": "something else"})


def test_refits_on_a_schedule_not_per_observation():
    model = LearnedModel(ModelSpec(("instance", "rep")))
    sweep(model, lambda p: 3.0, groups=400, reps=5, algo=["a"])  # 2,000 observations
    assert model.observations == 2000
    assert model.version <= math.ceil(math.log(2000 / 20) / math.log(1.2)) + 1
