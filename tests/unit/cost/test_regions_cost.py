"""The cost of a run across regions: GCS egress of staged files by where the bucket and the VM
are (cost/egress.py), what a region weighs for placement (cost/region_weight.py), and the cost
report's rows per region (cost/cost_report.py)."""

from __future__ import annotations

import pytest

from expo_executor.core.scheduler import Pool
from expo_executor.cost import egress, prices
from expo_executor.cost.cost_report import summarize
from expo_executor.cost.preemption_fit import Models, region_key
from expo_executor.cost.region_weight import RegionWeights

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("bucket, region, usd", [
    ("US-CENTRAL1", "us-central1", 0.0),        # the bucket's own region
    ("US", "us-east1", 0.0),                    # a region of its multi-region
    ("US-CENTRAL1", "us-east1", 0.02),          # same continent, North America
    ("EUROPE-WEST1", "europe-west4", 0.02),
    ("ASIA-EAST1", "asia-southeast1", 0.08),
    ("US-CENTRAL1", "europe-west1", 0.08),      # between continents
    ("EU", "us-central1", 0.08),
    ("US-CENTRAL1", "australia-southeast1", 0.15),
    ("", "europe-west1", 0.0),                  # location unknown: not priced
])
def test_egress_is_priced_by_the_buckets_location_and_the_vms_region(
        bucket: str, region: str, usd: float) -> None:
    assert egress.usd_per_gb(bucket, region) == usd
    assert egress.egress_usd(2e9, bucket, region) == pytest.approx(2 * usd)


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


def test_the_cost_report_has_a_row_per_region_and_the_egress() -> None:
    vm = {"pool": "spot", "machine_type": "e2-standard-2", "created": 0.0, "ended": 3600.0,
          "end": "deleted", "hourly": 0.02, "on_demand_hourly": 0.07}
    records = [{**vm, "zone": "us-central1-a", "region": "us-central1", "egress_usd": 0.0},
               {**vm, "hourly": 0.03, "zone": "europe-west1-b", "region": "europe-west1",
                "egress_usd": 0.004}]
    report = summarize(records, [], "prices: test", now=3600.0)
    assert [(r.region, r.cost_usd) for r in report.rows] == \
        [("europe-west1", pytest.approx(0.03)), ("us-central1", pytest.approx(0.02))]
    assert report.egress_usd == pytest.approx(0.004)
    lines = report.lines()
    assert any("spot e2-standard-2 in europe-west1: 1 VM(s)" in line for line in lines)
    assert any("$0.0040 egress of staged files" in line for line in lines)
    assert "e2-standard-2 in us-central1" in report.to_markdown()
