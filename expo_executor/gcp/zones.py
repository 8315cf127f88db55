"""Google's Compute Engine regions and their zones, as data, and the continent of each region.

Why a catalogue and not only the zones API: a zone that does not exist, or a region named with
``--expocloud-gce-regions``, is judged before anything is staged or any VM is asked for, even
without credentials (``engines.gce.settings_checks``), and a region's zones are known to every
module that reads the settings, in the same order. ``expocloud doctor`` then asks the real API
(``regions.get``) that each zone is there: the catalogue can only lag behind Google's (a region
opened since), and then the doctor, not a guess, says so. Kept as Google lists them (``gcloud
compute zones list``); the fake Compute Engine keeps its own copy (``emulator/catalogue.py``, which
may not import this), and tests/unit/emulator/test_catalogue.py holds the two equal.
"""

from __future__ import annotations

from collections.abc import Mapping

_ABC = "abc"
# region -> its zones' letters, as ``gcloud compute zones list`` shows them
ZONE_LETTERS: Mapping[str, str] = {
    "us-central1": "abcf", "us-east1": "bcd", "us-east4": _ABC, "us-east5": _ABC,
    "us-south1": _ABC, "us-west1": _ABC, "us-west2": _ABC, "us-west3": _ABC, "us-west4": _ABC,
    "northamerica-northeast1": _ABC, "northamerica-northeast2": _ABC,
    "northamerica-south1": _ABC, "southamerica-east1": _ABC, "southamerica-west1": _ABC,
    "europe-west1": "bcd", "europe-west2": _ABC, "europe-west3": _ABC, "europe-west4": _ABC,
    "europe-west6": _ABC, "europe-west8": _ABC, "europe-west9": _ABC, "europe-west10": _ABC,
    "europe-west12": _ABC, "europe-north1": _ABC, "europe-north2": _ABC,
    "europe-central2": _ABC, "europe-southwest1": _ABC,
    "asia-east1": _ABC, "asia-east2": _ABC, "asia-northeast1": _ABC, "asia-northeast2": _ABC,
    "asia-northeast3": _ABC, "asia-south1": _ABC, "asia-south2": _ABC,
    "asia-southeast1": _ABC, "asia-southeast2": _ABC, "australia-southeast1": _ABC,
    "australia-southeast2": _ABC, "me-west1": _ABC, "me-central1": _ABC, "me-central2": _ABC,
    "africa-south1": _ABC,
}
# a region's name starts with its multi-region area; the continent is what GCS's inter-region
# data transfer prices by (``cost.egress``)
CONTINENTS: Mapping[str, str] = {
    "us": "north-america", "northamerica": "north-america", "southamerica": "south-america",
    "europe": "europe", "asia": "asia", "australia": "oceania", "me": "middle-east",
    "africa": "africa",
}


def region_of(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    return zone.rsplit("-", 1)[0]


def zones_of(region: str) -> list[str]:
    """The region's zones in Google's order ([] for a region the catalogue does not know)."""
    return [f"{region}-{letter}" for letter in ZONE_LETTERS.get(region, "")]


def known_zone(zone: str) -> bool:
    return zone in zones_of(region_of(zone))


def continent_of(region: str) -> str:
    """``europe-west1`` -> ``europe``; an unknown area is its own continent."""
    area = region.split("-", 1)[0]
    return CONTINENTS.get(area, area)
