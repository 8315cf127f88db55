"""What reading a run's staged files from its bucket costs a VM in another region: Cloud
Storage's data transfer within Google Cloud, per GB, by where the bucket is and where the VM is.

Why it matters across regions: a Spot VM that is cheaper in europe-west4 reads every staged
file from a us-central1 bucket over the Atlantic, and that transfer is billed to the run; the
placement weighs it (``region_weight``) and the cost report shows it.

The rates are Cloud Storage's published "Data transfer within Google Cloud" prices
(https://cloud.google.com/storage/pricing#network-buckets), as read for the price snapshot of
2025: free within a location (a VM in the bucket's region, or in a region of its multi- or
dual-region); between locations on the same continent $0.02/GB in North America and Europe
and $0.08/GB in Asia (taken for the other continents too: approximate, see the page); between
continents $0.08/GB, $0.15/GB when one is Oceania. ``expocloud prices --refresh`` does not
refresh them (the Cloud Billing Catalog's Compute Engine service does not hold them).
"""

from __future__ import annotations

from expo_executor.gcp.zones import continent_of

RATES_SOURCE = "Cloud Storage data transfer within Google Cloud (cloud.google.com/storage/pricing)"
SAME_CONTINENT_USD_PER_GB = {"north-america": 0.02, "europe": 0.02, "asia": 0.08}
OTHER_SAME_CONTINENT_USD_PER_GB = 0.08
INTERCONTINENTAL_USD_PER_GB = 0.08
OCEANIA_USD_PER_GB = 0.15
# a multi-region or dual-region bucket location -> the continent of the regions it spans
MULTI_REGIONS = {"us": "north-america", "eu": "europe", "asia": "asia", "nam4": "north-america",
                 "eur4": "europe", "eur5": "europe", "eur7": "europe", "eur8": "europe",
                 "asia1": "asia"}
GB = 1e9  # GCS bills a GB as 10^9 bytes


def usd_per_gb(bucket_location: str, region: str) -> float:
    """USD per GB a VM in ``region`` pays to read from a bucket at ``bucket_location`` (GCS's
    ``location``: a region such as US-CENTRAL1, or US, EU, ASIA, NAM4...)."""
    location = bucket_location.strip().lower()
    if not location or location == region:
        return 0.0
    to = continent_of(region)
    source = MULTI_REGIONS.get(location) or continent_of(location)
    if location in MULTI_REGIONS and source == to:
        return 0.0
    if source == to:
        return SAME_CONTINENT_USD_PER_GB.get(to, OTHER_SAME_CONTINENT_USD_PER_GB)
    return OCEANIA_USD_PER_GB if "oceania" in (source, to) else INTERCONTINENTAL_USD_PER_GB


def egress_usd(nbytes: float, bucket_location: str, region: str) -> float:
    """USD of reading ``nbytes`` from the bucket in ``region``."""
    return nbytes / GB * usd_per_gb(bucket_location, region)
