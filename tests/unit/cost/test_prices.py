"""Prices for cost figures, in process: machine shapes, the SKU parser on recorded records, the
bundled snapshot, the cache, and --refresh refused without credentials or with a lone
--endpoint. (--refresh against a fake Cloud Billing Catalog: tests/e2e/test_prices_refresh.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from expo_executor.cost import machines
from expo_executor.cost import price_catalog, prices, prices_command
from expo_executor.core.errors import ExpoError
from expo_executor.cost.machines import Shape
from tests.prices_fixtures import SKUS, prices_cli, private_cache  # noqa: F401  (autouse)


# -- machines --------------------------------------------------------------------------------------
@pytest.mark.parametrize("machine_type, expected", [
    ("n2-standard-4", Shape(4, 16384)),
    ("e2-highcpu-8", Shape(8, 8192)),
    ("c2d-highmem-16", Shape(16, 131072)),
    ("c3-highcpu-88", Shape(88, 180224)),        # 2 GiB per vCPU in the 4th generation
    ("n2-highmem-128", Shape(128, 864 * 1024)),  # off its class ratio
    ("n1-standard-1", Shape(1, 3840)),           # n1's own ratios: 3.75, 6.5, 0.9 GiB
    ("n1-highmem-4", Shape(4, 26624)),
    ("n1-highcpu-2", Shape(2, 1843)),
    ("e2-micro", Shape(2, 1024)),                # shared-core: GCE reports 2 vCPUs
    ("e2-medium", Shape(2, 4096)),
    ("custom-4-16384", Shape(4, 16384)),
    ("n2-custom-6-20480", Shape(6, 20480)),
    ("n2d-custom-8-65536-ext", Shape(8, 65536)),
    ("a3-megagpu-8g", None), ("c3-standard-4-lssd", None), ("c4d-standard-8", None),
    ("e2-standard", None), ("nonsense", None),
])
def test_machine_shape_from_the_name(machine_type: str, expected: Shape | None) -> None:
    assert machines.shape(machine_type) == expected
    assert machines.machine_memory_mb(machine_type) == (expected and expected.memory_mb)


def test_family_billed_vcpus_and_custom() -> None:
    assert [machines.family(t) for t in ("e2-micro", "n2d-highcpu-2", "custom-2-4096",
                                         "n2-custom-2-4096", "c3-standard-22")] == \
        ["e2", "n2d", "n1", "n2", "c3"]
    # Shared-core E2 bills a fraction of its 2 vCPUs.
    assert [machines.billed_vcpus(t) for t in ("e2-micro", "e2-small", "e2-medium",
                                               "e2-standard-2", "nonsense")] == \
        [0.25, 0.5, 1.0, 2.0, None]
    assert machines.is_custom("n2-custom-6-20480") and not machines.is_custom("n2-standard-4")


# -- the SKU parser ------------------------------------------------------------------------------
def test_parser_on_recorded_records() -> None:
    parsed = price_catalog.parse_skus(SKUS)
    families = parsed["families"]
    # By hand from the records (nanos / 1e9):
    # n2 in the three "Americas" regions: on-demand 31611000 and 4237000 nanos; Spot from the
    # "Spot Preemptible" SKUs, 9760000 and 1307000, which win over the older "Preemptible N2
    # Instance Core" record (6980000) listed before them.
    for region in ("us-central1", "us-east1", "us-west1"):
        n2 = families["n2"][region]
        assert n2["on_demand"] == {"vcpu_hour": pytest.approx(0.031611),
                                   "gb_hour": pytest.approx(0.004237)}
        assert n2["spot"] == {"vcpu_hour": pytest.approx(0.00976),
                              "gb_hour": pytest.approx(0.001307)}
    assert families["n2d"] == {
        "europe-west4": {"on_demand": {"vcpu_hour": pytest.approx(0.030278)}}}
    assert families["n1"] == {"europe-west6": {"on_demand": {"gb_hour": pytest.approx(0.005928)}}}
    assert families["e2"] == {"us-east4": {"spot": {"vcpu_hour": pytest.approx(0.007370235)}}}
    assert families["c2"] == {"us-central1": {"on_demand": {"vcpu_hour": pytest.approx(0.03398)}}}
    # Skipped: a commitment, custom extended, custom, a licence, storage, a tiered network SKU,
    # sole tenancy (n1 in us-central1 must stay unpriced) and a GPU.
    assert (parsed["used"], parsed["skipped"]) == (9, 8)
    assert "us-central1" not in families["n1"]


def _tiered(nanos: list[int], description: str = "E2 Instance Core running in Americas",
            **price: str) -> dict:
    return {"description": description,
            "category": {"resourceFamily": "Compute", "resourceGroup": "CPU",
                         "usageType": "OnDemand"},
            "serviceRegions": ["us-central1"],
            "pricingInfo": [
                {"pricingExpression": {"usageUnit": "h", "tieredRates": [
                    {"unitPrice": {"currencyCode": "USD", "nanos": 99000000}}]}},  # superseded
                {"pricingExpression": {"usageUnit": "h", "tieredRates": [
                    {"startUsageAmount": 100 * i, "unitPrice": {"currencyCode": "USD",
                                                               "units": "0", "nanos": n, **price}}
                    for i, n in enumerate(nanos)]}}]}


def test_parser_reads_the_current_price_s_first_tier_and_per_gb_memory() -> None:
    # The last pricingInfo is the current one; of its tiers, the one from usage 0.
    tiered = _tiered([21811000, 15000000])
    tiered["pricingInfo"][-1]["pricingExpression"]["tieredRates"].reverse()
    ram = {"description": "Spot Preemptible E2 Instance Ram running in Americas",
           "category": {"resourceFamily": "Compute", "usageType": "Preemptible"},
           "geoTaxonomy": {"regions": ["us-central1"]},  # no serviceRegions: the taxonomy's
           "pricingInfo": [{"pricingExpression": {"usageUnit": "GBy.h", "tieredRates": [
               {"unitPrice": {"units": "0", "nanos": 1000000}}]}}]}
    euros = _tiered([20000000], "E2 Instance Core running in Frankfurt", currencyCode="EUR")
    parsed = price_catalog.parse_skus([tiered, ram, euros])
    e2 = parsed["families"]["e2"]["us-central1"]
    assert e2["on_demand"]["vcpu_hour"] == pytest.approx(0.021811)
    # 0.001 USD per GB (10^9 bytes) = 0.001 * 2^30 / 10^9 = 0.001073741824 per GiB.
    assert e2["spot"]["gb_hour"] == pytest.approx(0.001073741824)
    assert (parsed["used"], parsed["skipped"]) == (2, 1)


# -- the bundled snapshot ----------------------------------------------------------------------
def test_hourly_prices_by_hand() -> None:
    table = prices.load("us-central1")
    # n2-standard-4 = 4 vCPUs x 0.031611 + 16 GiB x 0.004237 = 0.126444 + 0.067792
    assert table.hourly("n2-standard-4", spot=False) == pytest.approx(0.194236)
    # Spot: 4 x 0.00976 + 16 x 0.001307 = 0.03904 + 0.020912
    assert table.hourly("n2-standard-4", spot=True) == pytest.approx(0.059952)
    # e2-micro bills 0.25 vCPU: 0.25 x 0.02181159 + 1 GiB x 0.00292353
    assert table.hourly("e2-micro", spot=False) == pytest.approx(0.0083764275)
    # n1-standard-1 = 0.031611 + 3.75 x 0.004237
    assert table.hourly("n1-standard-1", spot=False) == pytest.approx(0.04749975)
    # c3-highcpu-88 = 88 x 0.03465 + 176 x 0.003938 = 3.0492 + 0.693088
    assert table.hourly("c3-highcpu-88", spot=False) == pytest.approx(3.742288)
    europe = prices.load("europe-west1")
    # n2d-standard-16 = 16 x 0.030253 + 64 x 0.004055 = 0.484048 + 0.25952
    assert europe.hourly("n2d-standard-16", spot=False) == pytest.approx(0.743568)


@pytest.mark.parametrize("machine_type, problem", [
    ("m3-megamem-64", "cannot read"),
    ("a3-highgpu-8g", "cannot read"),
    ("n4-standard-4", "no on-demand price for the n4 family in us-central1"),
    ("n2-custom-6-20480", "custom type"),
])
def test_unpriced_types_raise_one_line_naming_the_setting(machine_type: str, problem: str) -> None:
    table = prices.load("us-central1")
    with pytest.raises(ExpoError) as caught:
        table.hourly(machine_type, spot=False)
    message = str(caught.value)
    assert caught.value.setting == "--expocloud-gce-machine-type"
    assert message.startswith("--expocloud-gce-machine-type: ") and "fix: " in message
    assert problem in message and "\n" not in message
    assert not table.priced(machine_type)


def test_the_bundled_snapshot_prices_every_candidate() -> None:
    for region in ("us-central1", "europe-west1", "asia-southeast1"):
        table = prices.load(region)
        assert table.origin == "bundled"
        assert table.label() == f"prices: snapshot {table.snapshot} (bundled), {region}"
        assert set(table.rates) >= {"e2", "n1", "n2", "n2d", "c2", "c2d", "c3", "t2d"}
        names = table.candidates()
        assert names and all(table.priced(n) for n in names)
        for name in names:
            assert 0 < table.hourly(name, spot=True) < table.hourly(name, spot=False)
    names = prices.load("us-central1").candidates()
    assert "e2-standard-2" in names and not any(n.startswith("e2-") and n.endswith("-1")
                                                for n in names)
    assert "c2-standard-4" in names and "c2-standard-2" not in names
    assert "c3-standard-22" in names and "c3-standard-44" not in names  # above 32 vCPUs
    assert "e2-micro" not in names  # shared-core: not a plain vCPU price
    assert prices.load("us-central1").candidates(min_vcpus=60, max_vcpus=60) == [
        "c2-standard-60", "t2d-standard-60"]


def test_a_region_outside_the_snapshot_names_the_zones_setting() -> None:
    with pytest.raises(ExpoError) as caught:
        prices.load("me-central2")
    assert caught.value.setting == "--expocloud-gce-zones"
    assert "--refresh" in caught.value.fix and "\n" not in str(caught.value)


def test_region_of_a_zone() -> None:
    assert prices.region_of("us-central1-a") == "us-central1"
    assert prices.region_of("europe-west1-b") == "europe-west1"
    with pytest.raises(ExpoError, match="--expocloud-gce-zones"):
        prices.region_of("us-central1")


# -- the cache ------------------------------------------------------------------------------------
def test_default_cache_follows_xdg_then_home(tmp_path: Path, private_cache: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    assert prices.default_cache() == private_cache
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert prices.default_cache() == tmp_path / "home" / ".cache" / "expocloud" / "prices.json"


def test_the_refreshed_cache_overrides_the_bundle(private_cache: Path) -> None:
    private_cache.parent.mkdir(parents=True)
    rates = {"on_demand": {"vcpu_hour": 0.05, "gb_hour": 0.005},
             "spot": {"vcpu_hour": 0.01, "gb_hour": 0.001}}
    private_cache.write_text(json.dumps({"snapshot": "2031-01-02", "source": "test",
                                         "families": {"n2": {"us-central1": rates}}}))
    table = prices.load("us-central1")
    assert table.label() == "prices: snapshot 2031-01-02 (refreshed), us-central1"
    assert table.hourly("n2-standard-4", spot=False) == pytest.approx(4 * 0.05 + 16 * 0.005)
    assert not table.priced("e2-standard-2")  # the cache is the whole truth for its regions
    # A region the cache does not hold still comes from the bundle; so does a broken cache.
    assert prices.load("europe-west1").origin == "bundled"
    private_cache.write_text("{not json")
    assert prices.load("us-central1").origin == "bundled"


# -- --refresh without credentials, and its options ---------------------------------------------


def test_refresh_without_credentials_is_one_line(tmp_path: Path, private_cache: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GOOGLE_APPLICATION_CREDENTIALS", str(tmp_path / "missing.json"))
    with pytest.raises(ExpoError) as caught:
        prices_command.run(prices_cli("--refresh"))
    message = str(caught.value)
    assert "\n" not in message and "no Google Cloud credentials" in message
    assert "gcloud auth application-default login" in caught.value.fix
    assert "bundled snapshot" in message
    assert not private_cache.exists()


def test_endpoint_needs_refresh() -> None:
    with pytest.raises(ExpoError, match="--endpoint"):
        prices_command.run(prices_cli("--endpoint", "http://127.0.0.1:1"))


def test_gpu_machines_and_gpus_are_priced_as_the_snapshots_source_prices_them() -> None:
    """a2 and g2 types come with their GPUs: machine plus GPUs reproduce pricing.yml's totals
    (us-central1, 2025-03-06); an n1 VM pays its GPUs on top."""
    table = prices.load("us-central1")
    for machine_type, on_demand, spot in (("g2-standard-4", 0.706832255, 0.279932),
                                          ("g2-standard-24", 2.000832574, 0.787192),
                                          ("a2-highgpu-1g", 3.673385, 1.293355),
                                          ("a2-megagpu-16g", 55.739504, 19.48024)):
        assert table.hourly(machine_type, spot=False) == pytest.approx(on_demand, abs=1e-5)
        assert table.hourly(machine_type, spot=True) == pytest.approx(spot, abs=1e-5)
    n1 = table.hourly("n1-standard-4", spot=False)
    assert table.shape_hourly("n1-standard-4", "nvidia-tesla-t4", 2, spot=False) == \
        pytest.approx(n1 + 2 * table.gpu_hourly("nvidia-tesla-t4", spot=False))
    # the L4 of a g2 type is not paid twice
    assert table.shape_hourly("g2-standard-4", "nvidia-l4", 1, spot=True) == \
        table.hourly("g2-standard-4", spot=True)
    for gpu in ("nvidia-tesla-t4", "nvidia-l4", "nvidia-tesla-v100", "nvidia-tesla-a100"):
        assert 0 < table.gpu_hourly(gpu, spot=True) < table.gpu_hourly(gpu, spot=False)


def test_an_unpriced_gpu_is_one_line_naming_the_resource() -> None:
    with pytest.raises(ExpoError) as info:
        prices.load("europe-west1").gpu_hourly("nvidia-tesla-t4", spot=True)
    assert "resource 'gpu_type'" in str(info.value) and "\n" not in str(info.value)
