"""Network and subnetwork references as the Compute API takes them, completed from bare names.

The API takes a VM's network and subnetwork as URLs, full or partial
(``projects/P/global/networks/N``, ``global/networks/N``,
``projects/P/regions/R/subnetworks/N``), and refuses a bare name with 400 "The URL is
malformed"; gcloud completes names on the client side, so users write them. A bare network
name becomes ``global/networks/NAME`` (the run's project); a bare subnetwork name, which is
regional, becomes ``projects/PROJECT/regions/REGION/subnetworks/NAME`` in the region of each
VM's zone. A URL is kept as given (another project's subnetwork is how Shared VPC is used),
but a subnetwork of another region than the zone's is refused before any VM. A run across
regions names one subnetwork URL per region (comma separated), or a bare name that each region
completes to its own.
"""

from __future__ import annotations

import re

DEFAULT_NETWORK = "global/networks/default"
API_ROOT = "https://www.googleapis.com/compute/v1/"
_NAME = re.compile(r"[a-z](?:[-a-z0-9]{0,61}[a-z0-9])?")
_PROJECT = r"(?:projects/[a-z][-a-z0-9.:]*/)"
_NETWORK = re.compile(rf"{_PROJECT}?global/networks/{_NAME.pattern}")
_SUBNETWORK = re.compile(
    rf"{_PROJECT}?regions/(?P<region>[a-z]+-[a-z]+[0-9]+)/subnetworks/{_NAME.pattern}")


def region_of(zone: str) -> str:
    """``us-central1-a`` -> ``us-central1``."""
    return zone.rsplit("-", 1)[0]


def _relative(value: str) -> str:
    return value.strip()[len(API_ROOT):] if value.strip().startswith(API_ROOT) else value.strip()


def network_url(value: str) -> str:
    """The network as the API takes it; raises ValueError on what is neither a name nor a
    network URL."""
    if _NAME.fullmatch(value.strip()):
        return f"global/networks/{value.strip()}"
    if _NETWORK.fullmatch(_relative(value)):
        return value.strip()
    raise ValueError(f"{value!r} is neither a network name nor a network URL "
                     "(global/networks/NAME or projects/PROJECT/global/networks/NAME)")


def subnetwork_url(value: str, project: str, zone: str) -> str:
    """The subnetwork for a VM in ``zone``, as the API takes it, from ``value``: one name or
    URL, or several comma separated (a run across regions: one URL per region, and/or a bare
    name completed in any region). A URL in the zone's region wins over a name. Raises
    ValueError on what is neither a name nor a subnetwork URL, or when nothing given resolves
    in the zone's region."""
    given = [v.strip() for v in value.split(",") if v.strip()]
    names, urls = [], {}
    for item in given:
        if _NAME.fullmatch(item):
            names.append(item)
            continue
        match = _SUBNETWORK.fullmatch(_relative(item))
        if match is None:
            raise ValueError(f"{item!r} is neither a subnetwork name nor a subnetwork URL "
                             "(projects/PROJECT/regions/REGION/subnetworks/NAME)")
        urls.setdefault(match["region"], item)
    region = region_of(zone)
    if region in urls:
        return urls[region]
    if names:
        return f"projects/{project}/regions/{region}/subnetworks/{names[0]}"
    if len(urls) == 1:
        (other, url), = urls.items()
        raise ValueError(f"subnetwork {url!r} is in region {other}, but zone {zone} is in "
                         f"{region}: a VM's subnetwork must be in its region")
    raise ValueError(f"no subnetwork of {value!r} is in region {region} (zone {zone}): a "
                     "VM's subnetwork must be in its region; add that region's URL")


def network_interface(network: str, subnetwork: str | None, project: str,
                      zone: str) -> dict[str, str]:
    """The ``network`` and ``subnetwork`` fields of a VM's interface in ``zone``. With a
    subnetwork and the network left at its default, the network is left out: GCE takes it from
    the subnetwork (which need not be in the default network)."""
    fields = {}
    if not subnetwork or network.strip() != DEFAULT_NETWORK:
        fields["network"] = network_url(network)
    if subnetwork:
        fields["subnetwork"] = subnetwork_url(subnetwork, project, zone)
    return fields
