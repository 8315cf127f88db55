"""The doctor's checks of the fleet: the machine types and GPUs the zones offer, the quotas
the fleet needs, the worker image's Python and the workers' route to the package index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from expo_executor.engines.gce import quota_plan
from expo_executor.engines.gce.doctor_context import Check, Context, Plan, failed, or_none, passed
from expo_executor.engines.gce.references import region_of, subnetwork_url

# Public images' Python 3 by family (the image name starts with the family's name).
IMAGE_PYTHON = ((re.compile(r"debian-13\b"), "3.13"), (re.compile(r"debian-12\b"), "3.11"),
                (re.compile(r"debian-11\b"), "3.9"),
                (re.compile(r"ubuntu-(minimal-)?2404\b"), "3.12"),
                (re.compile(r"ubuntu-(minimal-)?2204\b"), "3.10"),
                (re.compile(r"ubuntu-(minimal-)?2004\b"), "3.8"))
PUBLIC_IMAGE_PROJECTS = ("debian-cloud", "ubuntu-os-cloud")
NAT_ALL = ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES")


# -- machine types, GPUs and quotas ------------------------------------------------------------------------
def check_machine_types(ctx: Context) -> Check:
    """Each machine type and GPU of the run is offered in at least one of its zones (a zone
    without it is skipped by the run: said as a warning)."""
    plan = ctx.plan
    missing: dict[str, list[str]] = {}
    for machine_type in plan.machine_types:
        missing[machine_type] = [z for z in plan.zones if ctx.offered(z, machine_type) is None]
    for gpu, count in plan.gpus:
        missing[f"{count} x {gpu}"] = [z for z in plan.zones if not _takes(ctx, z, gpu, count)]
    nowhere = [what for what, zones in missing.items() if len(zones) == len(plan.zones)]
    zones = ", ".join(plan.zones)
    if nowhere:
        return failed("machine types", f"{', '.join(nowhere)} offered in none of {zones}",
                      "--expocloud-gce-zones with zones that offer it (gcloud compute "
                      f"machine-types list --filter=name={nowhere[0].split(' x ')[-1]}; "
                      "accelerator-types list for GPUs), or another machine type or GPU")
    some = {what: gone for what, gone in missing.items() if gone}
    checked = ", ".join([*plan.machine_types, *(g for g, _ in plan.gpus)])
    note = "; 'auto' machine types are chosen at the run" if plan.auto else ""
    if some:
        said = "; ".join(f"{what} not in {', '.join(gone)}" for what, gone in some.items())
        return passed("machine types", f"{said}: the run skips those zones for it{note}",
                      warning=True)
    return passed("machine types", f"{checked or 'none named'} offered in {zones}{note}")


def _takes(ctx: Context, zone: str, gpu: str, count: int) -> bool:
    found = ctx.once(("gpu", zone, gpu), lambda: or_none(
        lambda: ctx.apis.accelerator_type(ctx.plan.project, zone, gpu)))
    return found is not None and count <= int(found.get("maximumCardsPerInstance", count))


def _vcpus(ctx: Context) -> dict[str, int]:
    """Each machine type's vCPUs, from the first zone that offers it."""
    found = {}
    for machine_type in ctx.plan.machine_types:
        for zone in ctx.plan.zones:
            offered = ctx.offered(zone, machine_type)
            if offered is not None:
                found[machine_type] = int(offered.get("guestCpus", 0))
                break
    return found


def check_zones(ctx: Context) -> Check:
    """Each zone of the run is one its region lists (``regions.get``): the settings' catalogue
    (``gcp.zones``) may lag behind Google's, and this is the truth."""
    plan = ctx.plan
    missing = []
    for region in plan.regions:
        found = ctx.region(region)
        listed = {str(url).rsplit("/", 1)[-1] for url in (found or {}).get("zones") or []}
        missing += [z for z in plan.zones if region_of(z) == region and z not in listed]
    if missing:
        return failed("zones", f"{', '.join(missing)} not in project {plan.project}'s regions",
                      "--expocloud-gce-zones or --expocloud-gce-regions with zones that exist "
                      "(gcloud compute zones list)")
    return passed("zones", f"{len(plan.zones)} zone(s) in {', '.join(plan.regions)}")


def check_quotas(ctx: Context) -> Check:
    """The fleet at its largest fits the quotas (limit minus usage) of each region: placement
    may put it all in any one of them. Across regions a region too small for the whole fleet is
    a warning when the regions together hold it (the run fills it, then moves on), and a
    failure when they do not."""
    plan = ctx.plan
    vcpus = _vcpus(ctx)
    short: dict[str, list[tuple[quota_plan.Need, quota_plan.Quota]]] = {}
    free: dict[str, float] = {}
    fits = []
    for region in plan.regions:
        quotas = quota_plan.quotas_of(ctx.region(region) or {})
        needs = quota_plan.needs(plan.fleet, vcpus, quotas)
        short[region] = quota_plan.shortfalls(needs, quotas)
        for need in needs:
            free[need.metric] = free.get(need.metric, 0.0) + max(
                0.0, quotas.get(need.metric, quota_plan.Quota(0.0, 0.0)).free)
        fits += [f"{n.metric} {n.amount:g} of {quotas[n.metric].free:g} free in {region}"
                 for n in needs if n.metric in quotas]
    lacking = {r: s for r, s in short.items() if s}
    if not lacking:
        return passed("quotas", f"the fleet at its largest fits in each region "
                      f"({', '.join(fits)})")
    said = "; ".join(f"in {r}, " + "; ".join(quota_plan.describe(n, q) for n, q in s)
                     for r, s in lacking.items())
    if all(free.get(n.metric, 0.0) >= n.amount for s in lacking.values() for n, _ in s):
        return passed("quotas", f"{said}: the run fills those regions, then uses the others",
                      warning=True)
    metrics = ", ".join(dict.fromkeys(n.metric for s in lacking.values() for n, _ in s))
    return failed("quotas", said, "lower --expocloud-max-workers or --expocloud-max-on-demand, "
                  "or ask for more (https://console.cloud.google.com/iam-admin/quotas?project="
                  f"{plan.project}: {metrics} in {', '.join(lacking)}), or add a region "
                  "(--expocloud-gce-regions)")


# -- the worker's Python and the way to the package index ------------------------------------------------
def image_python(image: str) -> str | None:
    """The Python 3 of a public image family (``.../family/debian-12`` -> ``3.11``); None for
    an image we do not know (a custom one may have any)."""
    project = re.search(r"projects/([^/]+)/", image)
    if project is not None and project.group(1) not in PUBLIC_IMAGE_PROJECTS:
        return None
    name = image.rstrip("/").rsplit("/", 1)[-1]
    return next((version for pattern, version in IMAGE_PYTHON if pattern.match(name)), None)


def check_python(plan: Plan, host: str) -> Check:
    """In pip mode the workers install this machine's exact versions, which need this
    machine's Python major.minor on the image (the startup script stops a VM otherwise)."""
    name = "worker Python"
    if plan.worker_software == "image":
        return passed(name, "image mode: the image's own worker runs (its startup script "
                      "checks the versions)")
    unknown = []
    for image in plan.images:
        version = image_python(image)
        if version is None:
            unknown.append(image)
        elif version != host:
            return failed(name, f"image {image} has Python {version}, this machine {host} "
                          "(pip mode installs this machine's exact versions)",
                          f"an image with Python {host} (--expocloud-gce-image), or run from a "
                          f"Python {version} environment here, or a prepared image with "
                          "--expocloud-gce-worker-software image")
    if unknown:
        return passed(name, f"cannot tell the Python of {', '.join(unknown)}: its startup "
                      f"script stops a VM whose Python is not {host}", warning=True)
    return passed(name, f"Python {host} here and on {', '.join(plan.images)}")


def nat_covers(routers: Iterable[dict], network: str, subnetwork: str) -> bool:
    """Does a Cloud NAT of these routers serve ``subnetwork`` (a name) of ``network``?"""
    for router in routers:
        if not str(router.get("network", "")).endswith(f"/networks/{network}"):
            continue
        for nat in router.get("nats") or []:
            if nat.get("sourceSubnetworkIpRangesToNat") in NAT_ALL:
                return True
            if any(str(sub.get("name", "")).endswith(f"/subnetworks/{subnetwork}")
                   for sub in nat.get("subnetworks") or []):
                return True
    return False


def check_network(ctx: Context) -> Check:
    """Workers without an external IP that install from the package index need a Cloud NAT
    in each of their regions (GCS itself they reach by Private Google Access, or the NAT)."""
    plan = ctx.plan
    if plan.fleet.external_ip:
        return passed("network", "workers get external IPs")
    if plan.worker_software == "image":
        return passed("network", "no external IPs; image mode installs nothing")
    if plan.pip_index_url:
        return passed("network", f"no external IPs; workers install from {plan.pip_index_url} "
                      "(not checked: it must be reachable from the subnetwork)", warning=True)
    network = plan.network.rstrip("/").rsplit("/", 1)[-1]
    served = []
    for region in plan.regions:
        subnetwork = _subnetwork_in(plan, region, network)
        if not nat_covers(ctx.apis.routers(plan.project, region), network, subnetwork):
            return failed("network", "workers have no external IP (--expocloud-gce-internal-"
                          f"ip-only) and install from PyPI, but no Cloud NAT in {region} serves "
                          f"subnetwork {subnetwork} of network {network}", f"gcloud compute "
                          f"routers create expocloud-nat --network {network} --region {region} "
                          f"--project {plan.project} && gcloud compute routers nats create "
                          f"expocloud-nat --router expocloud-nat --region {region} --project "
                          f"{plan.project} --auto-allocate-nat-external-ips "
                          "--nat-all-subnet-ip-ranges; or give the workers external IPs, or "
                          "--expocloud-gce-worker-software image")
        served.append(f"{subnetwork} in {region}")
    return passed("network", f"no external IPs; Cloud NAT serves {', '.join(served)}")


def _subnetwork_in(plan: Plan, region: str, network: str) -> str:
    """The name of the subnetwork the run's VMs of ``region`` use (the network's name when
    none is given: an auto-mode network's subnetworks bear it)."""
    if not plan.subnetwork:
        return network
    zone = next(z for z in plan.zones if region_of(z) == region)
    return subnetwork_url(plan.subnetwork, plan.project, zone).rstrip("/").rsplit("/", 1)[-1]
