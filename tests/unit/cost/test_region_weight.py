"""What a region weighs for placement across regions (cost/region_weight.py): its price, the
egress of what every VM reads from a bucket elsewhere, and for Spot the rework of the region's
own fitted preemption model."""

from __future__ import annotations

import pytest

from expo_executor.core.scheduler import Pool
from expo_executor.cost import prices
from expo_executor.cost.preemption_fit import Models, region_key
from expo_executor.cost.region_weight import RegionWeights

pytestmark = pytest.mark.unit


def _weights(**given: object) -> RegionWeights:
    tables = {r: prices.load(r, cache=None) for r in ("us-central1", "europe-west1")}
    base: dict = {"tables": tables, "machine_types": {Pool.SPOT: "e2-standard-2",
                                                      Pool.ON_DEMAND: "e2-standard-2"}}
    return RegionWeights(**{**base, **given})


def test_a_regions_weight_is_its_price_plus_the_egress_of_what_a_vm_reads() -> None:
    weights = _weights(bucket_location="US-CENTRAL1", staged_bytes=5e9)
    us = prices.load("us-central1").hourly("e2-standard-2", spot=True)
    eu = prices.load("europe-west1").hourly("e2-standard-2", spot=True)
    assert weights("us-central1", Pool.SPOT, None) == pytest.approx(us)
    assert weights("europe-west1", Pool.SPOT, None) == pytest.approx(eu + 5 * 0.08)
    assert weights("asia-east1", Pool.SPOT, None) is None  # no table: unpriced


def test_spot_weighs_the_rework_of_the_regions_own_fitted_model() -> None:
    fitted = {"tau1": 0.05, "tau2": 0.4, "b": 0.5, "A": 0.9, "cap_h": 24.0, "fitted": True}
    models = Models({region_key("e2-standard-2", "europe-west1"): fitted})
    weights = _weights(models=models, job_h=1.0)
    assert weights.rework("e2-standard-2", "europe-west1", Pool.SPOT) > \
        weights.rework("e2-standard-2", "us-central1", Pool.SPOT) >= 1.0
    assert weights.rework("e2-standard-2", "europe-west1", Pool.ON_DEMAND) == 1.0
