"""Network and subnetwork references completed for the Compute API (engines/gce/references.py):
a bare name becomes a URL (a subnetwork in the region of each VM's zone), a URL is kept, what
is neither is refused. (The request bodies that carry them: tests/e2e/test_gce_engine.py.)"""

from __future__ import annotations

import pytest

from expo_executor.engines.gce.references import network_interface, network_url, subnetwork_url

API = "https://www.googleapis.com/compute/v1/"


def test_a_bare_network_name_becomes_a_url_and_a_url_stays() -> None:
    assert network_url("my-vpc") == "global/networks/my-vpc"
    for url in ("global/networks/my-vpc", "projects/host-proj/global/networks/my-vpc",
                f"{API}projects/host-proj/global/networks/my-vpc"):
        assert network_url(url) == url


def test_a_bare_subnetwork_name_is_completed_in_the_region_of_each_zone() -> None:
    assert subnetwork_url("sub-1", "proj", "us-central1-a") == \
        "projects/proj/regions/us-central1/subnetworks/sub-1"
    assert subnetwork_url("sub-1", "proj", "europe-west4-b") == \
        "projects/proj/regions/europe-west4/subnetworks/sub-1"
    for url in ("projects/host-proj/regions/us-central1/subnetworks/shared",  # Shared VPC
                "regions/us-central1/subnetworks/sub-1",
                f"{API}projects/host-proj/regions/us-central1/subnetworks/shared"):
        assert subnetwork_url(url, "proj", "us-central1-f") == url


@pytest.mark.parametrize("value, problem", [
    ("My_Subnet", "neither a subnetwork name nor a subnetwork URL"),
    ("projects/p/global/networks/n", "neither a subnetwork name nor a subnetwork URL"),
    ("regions/us-central1/subnetworks/", "neither"),
    ("projects/p/regions/europe-west1/subnetworks/s", "is in region europe-west1, but zone "
                                                      "us-central1-a is in us-central1"),
])
def test_what_is_not_a_subnetwork_here_is_refused(value: str, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        subnetwork_url(value, "proj", "us-central1-a")


@pytest.mark.parametrize("value", ["default network", "regions/r/subnetworks/s",
                                   "networks/default", "-bad"])
def test_what_is_not_a_network_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="neither a network name nor a network URL"):
        network_url(value)


def test_with_a_subnetwork_the_default_network_is_left_to_gce() -> None:
    assert network_interface("global/networks/default", None, "p", "us-east1-b") == \
        {"network": "global/networks/default"}
    # a custom-mode VPC's subnetwork is not in "default": GCE takes the subnetwork's network
    assert network_interface("global/networks/default", "sub", "p", "us-east1-b") == \
        {"subnetwork": "projects/p/regions/us-east1/subnetworks/sub"}
    assert network_interface("vpc", "sub", "p", "us-east1-b") == \
        {"network": "global/networks/vpc",
         "subnetwork": "projects/p/regions/us-east1/subnetworks/sub"}
