"""A simulation across regions (simulate/regions.py): a create call tries the cheapest region
with capacity, its VMs are billed at that region's prices, and ``expocloud simulate
--regions`` compares the first region alone with all of them."""

from __future__ import annotations

import argparse

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.core.scheduler import Pool
from expo_executor.simulate import command
from expo_executor.simulate.policies import SimConfig, policy
from expo_executor.simulate.regions import RegionSet, SimRegion
from expo_executor.simulate.simulation import simulate
from expo_executor.simulate.workload import BootDelay, FixedPrices, SimJob, Workload

pytestmark = pytest.mark.unit

CHEAP = SimRegion("us-central1", FixedPrices(spot=1.0, on_demand=3.0), stockout=0.9)
DEAR = SimRegion("europe-west1", FixedPrices(spot=2.0, on_demand=4.0), stockout=0.0)
CONFIG = policy("spot-naive", SimConfig(max_workers=2, slots=1, poll=1.0, dispatch_s=0.0,
                                        boot=BootDelay(10.0)))


def _jobs(n: int) -> Workload:
    return Workload("sweep", tuple(SimJob(f"j{i}", f"j{i}", 100.0) for i in range(n)))


def test_the_cheapest_region_goes_first_and_a_stockout_there_moves_to_the_next() -> None:
    assert [r.name for r in RegionSet((DEAR, CHEAP)).order("e2-standard-2", Pool.SPOT)] == \
        ["us-central1", "europe-west1"]
    alone = simulate(_jobs(6), CONFIG, RegionSet((CHEAP,)), seed=1)
    both = simulate(_jobs(6), CONFIG, RegionSet((CHEAP, DEAR)), seed=1)
    assert alone.stockouts > both.stockouts == 0  # europe-west1 always has capacity
    assert both.makespan_s < alone.makespan_s
    assert set(both.outcomes.values()) == {"solved"}


def test_a_vm_is_billed_at_the_prices_of_the_region_that_had_capacity() -> None:
    never = SimRegion("us-central1", FixedPrices(spot=1.0, on_demand=3.0), stockout=0.999999)
    result = simulate(_jobs(1), CONFIG, RegionSet((never, DEAR)), seed=0)
    # one VM of 100 s + 10 s boot, at europe-west1's $2/h (GCE bills a minute at least)
    assert result.cost_usd == pytest.approx(2.0 * 110 / 3600)


def _args(**given: object) -> argparse.Namespace:
    base = {"regions": "us-central1,europe-west1", "region_stockouts": None, "stockout": 0.0}
    return argparse.Namespace(**{**base, **given})


def test_the_regions_and_their_stockouts_are_read_with_one_line_errors() -> None:
    regions = command._regions(_args(region_stockouts="0.9,0"), lambda name: name)
    assert [(r.name, r.stockout) for r in regions] == [("us-central1", 0.9),
                                                       ("europe-west1", 0.0)]
    for given, words in ((dict(region_stockouts="0.9"), "1 probabilities for 2 regions"),
                         (dict(region_stockouts="a,b"), "is not a list of numbers"),
                         (dict(region_stockouts="1,0"), r"not in \[0, 1\)"),
                         (dict(regions=" , "), "no region given")):
        with pytest.raises(ExpoError, match=words):
            command._regions(_args(**given), lambda name: name)
