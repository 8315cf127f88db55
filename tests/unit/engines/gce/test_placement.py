"""Which zone a create tries first across regions (engines/gce/placement.py): the cheapest
region not cooled down, then the order given; one region keeps the order given."""

from __future__ import annotations

import pytest

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.engines.gce.placement import Placement

pytestmark = pytest.mark.unit

ZONES = ["us-central1-a", "us-central1-b", "europe-west1-b", "europe-west1-c"]
PRICES = {"us-central1": 0.03, "europe-west1": 0.02}


def _weight(region: str, pool: Pool, shape: Shape | None) -> float | None:
    return PRICES.get(region)


def test_the_cheapest_region_goes_first_its_zones_in_the_order_given() -> None:
    placement = Placement(ZONES, _weight)
    assert placement.order(ZONES, Pool.SPOT, None, now=0.0) == \
        ["europe-west1-b", "europe-west1-c", "us-central1-a", "us-central1-b"]


def test_a_region_that_stocked_out_goes_last_until_its_cooldown_ends() -> None:
    placement = Placement(ZONES, _weight, cooldown_s=300.0)
    placement.cool("europe-west1-b", Pool.SPOT, None, now=10.0)
    assert placement.order(ZONES, Pool.SPOT, None, now=20.0)[:2] == \
        ["us-central1-a", "us-central1-b"]
    # only that pool and machine: on-demand still goes to the cheapest region
    assert placement.order(ZONES, Pool.ON_DEMAND, None, now=20.0)[0] == "europe-west1-b"
    assert placement.order(ZONES, Pool.SPOT, None, now=310.5)[0] == "europe-west1-b"


def test_an_unpriced_region_goes_after_the_priced_and_no_prices_keep_the_order() -> None:
    zones = ["asia-east1-a", *ZONES]
    assert Placement(zones, _weight).order(zones, Pool.SPOT, None, 0.0)[-1] == "asia-east1-a"
    assert Placement(zones).order(zones, Pool.SPOT, None, 0.0) == zones


def test_one_region_keeps_the_order_given_whatever_it_costs() -> None:
    zones = ["us-central1-f", "us-central1-a"]
    placement = Placement(zones, _weight)
    placement.cool("us-central1-f", Pool.SPOT, None, now=0.0)  # nowhere else to go
    assert placement.order(zones, Pool.SPOT, None, now=1.0) == zones
