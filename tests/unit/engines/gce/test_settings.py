"""A GCE run across regions, as its settings say it (engines/gce/settings.py, settings_checks.py
and references.py): zones of several regions, or regions whose zones the catalogue
(gcp/zones.py) gives, and the one-line errors of a zone that does not exist, a region with no
zone and a subnetwork that does not resolve in a region, before any VM."""

from __future__ import annotations

import pytest

from expo_executor.core.errors import ExpoError
from expo_executor.engines.gce.references import subnetwork_url
from expo_executor.engines.gce.settings import GceSettings, regions, zones
from expo_executor.engines.gce.settings_checks import check_run

pytestmark = pytest.mark.unit


def _settings(**given: object) -> GceSettings:
    base: dict = {"gce_project": "p", "max_workers": 2, "heartbeat_grace": 600.0,
                  "gce_service_account": "default"}
    return GceSettings(**{**base, **given})


def _refusal(settings: GceSettings) -> str:
    with pytest.raises(ExpoError) as caught:
        check_run(settings)
    message = str(caught.value)
    assert "\n" not in message and "fix:" in message, message
    return message


def test_zones_of_several_regions_are_taken_in_their_order() -> None:
    settings = _settings(gce_zones="us-central1-a,europe-west1-b,us-central1-b")
    check_run(settings)
    assert zones(settings) == ["us-central1-a", "europe-west1-b", "us-central1-b"]
    assert regions(settings) == ["us-central1", "europe-west1"]


def test_regions_give_their_zones_after_the_zones_named() -> None:
    settings = _settings(gce_zones="europe-west1-c", gce_regions="us-central1,europe-west1")
    check_run(settings)
    assert zones(settings) == ["europe-west1-c", "us-central1-a", "us-central1-b",
                               "us-central1-c", "us-central1-f", "europe-west1-b",
                               "europe-west1-d"]
    assert regions(settings) == ["europe-west1", "us-central1"]


@pytest.mark.parametrize("given, words", [
    ({"gce_zones": "us-central1-z"}, "--expocloud-gce-zones: zone us-central1-z does not exist "
                                     "(zones of us-central1: us-central1-a, us-central1-b"),
    ({"gce_zones": "mars-north1-a"}, "zone mars-north1-a does not exist (zones of mars-north1: "
                                     "none: no such region)"),
    ({"gce_regions": "us-central1,mars-north1"}, "--expocloud-gce-regions: region "
                                                 "'mars-north1' has no zone"),
    ({}, "--expocloud-gce-zones: no zone or region given"),
    ({"gce_zones": "us-central1-a", "gce_subnetwork":
      "projects/p/regions/us-central1/subnetworks/s", "gce_regions": "europe-west4"},
     "--expocloud-gce-subnetwork: subnetwork 'projects/p/regions/us-central1/subnetworks/s' "
     "is in region us-central1, but zone europe-west4-a is in europe-west4"),
])
def test_bad_placement_is_refused_in_one_line_before_any_vm(given: dict, words: str) -> None:
    assert words in _refusal(_settings(**given))


def test_a_subnetwork_resolves_per_region() -> None:
    east = "projects/host/regions/europe-west1/subnetworks/eu"
    both = f"projects/host/regions/us-central1/subnetworks/us,{east}"
    assert subnetwork_url(both, "p", "europe-west1-c") == east
    assert subnetwork_url(both, "p", "us-central1-a").endswith("us-central1/subnetworks/us")
    # a bare name is completed in each zone's region; a region's own URL wins over it
    assert subnetwork_url(f"shared,{east}", "p", "us-central1-f") == \
        "projects/p/regions/us-central1/subnetworks/shared"
    assert subnetwork_url(f"shared,{east}", "p", "europe-west1-b") == east
    with pytest.raises(ValueError, match="no subnetwork of .* is in region asia-east1"):
        subnetwork_url(both, "p", "asia-east1-a")
    check_run(_settings(gce_regions="us-central1,europe-west1", gce_subnetwork=both))
