"""GCS egress of staged files to a VM in another region than the bucket's (cost/egress.py): by
where the bucket is (a region, a multi- or dual-region) and where the VM is."""

from __future__ import annotations

import pytest

from expo_executor.cost import egress

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
