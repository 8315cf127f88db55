"""The checks of a GCE run's settings, before a VM exists: the project, zones, labels, bucket,
network, worker software and service account, and Google's credentials; each raises ExpoError
naming the setting and the fix.
"""

from __future__ import annotations

import json
import os
import re
from urllib.parse import urlsplit

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import parse_duration
from expo_executor.engines.gce.settings import (WORKER_SOFTWARE_CHOICES, GceSettings, labels,
                                                zones)
from expo_executor.gcp.zones import known_zone, region_of, zones_of
from expo_executor.settings.values import (heartbeat_grace, max_on_demand, slow_poll_interval,
                                           worker_requirements)

DEFAULT_SERVICE_ACCOUNT = "default"  # the Compute Engine default account, asked for by name
SERVICE_ACCOUNT_SETTING = "--expocloud-gce-service-account"
PIP_INDEX_SETTING = "--expocloud-gce-pip-index-url"
_ZONE = re.compile(r"[a-z]+-[a-z]+[0-9]+-[a-z]")


def check_run(settings: GceSettings) -> None:
    """Everything a GCE run needs, checked before a VM exists."""
    grace, slow = heartbeat_grace(settings), slow_poll_interval(settings)
    if grace < 5 * slow:
        raise ExpoError("--expocloud-heartbeat-grace",
                        f"{grace:g} s is too short for a slow poll interval of {slow:g} s",
                        "make it at least 5 slow poll intervals")
    _check_placement(settings)
    _check_vms(settings)
    _check_service_account(settings)
    pip_index_url(settings)


def pip_index_url(settings: GceSettings) -> str | None:
    """The package index the workers install from (None: PyPI), refused when it holds
    credentials (``https://user:token@host/``): the URL is rendered into the startup script,
    which is instance metadata every process on the VM and every viewer of the instance can
    read, and ``expocloud doctor`` prints it. The error does not repeat the URL."""
    url = settings.gce_pip_index_url
    if not url:
        return None
    try:
        parts = urlsplit(url)
        held = parts.username is not None or parts.password is not None
    except ValueError:
        held = "@" in url
    if held:
        raise ExpoError(PIP_INDEX_SETTING, "the URL holds credentials (user:password@), which "
                        "would land in the VMs' instance metadata and in doctor's output",
                        "give the URL without them: an index the workers' service account "
                        "may read (Artifact Registry, its keyring on a worker image), or "
                        "--expocloud-gce-worker-software image")
    return url


def _check_placement(settings: GceSettings) -> None:
    """The project, the cap on workers, the zones (of one region or several) and the
    labels."""
    if not settings.gce_project:
        raise ExpoError("--expocloud-gce-project", "the GCE engine needs a project",
                        "set expocloud-gce-project in the profile")
    if settings.max_workers is None:
        raise ExpoError("--expocloud-max-workers", "the GCE engine needs a cap on workers",
                        "set expocloud-max-workers (it bounds what a run can cost)")
    _check_zones(settings)
    labels(settings)  # Google's label rules, before any VM


def _check_zones(settings: GceSettings) -> None:
    """Each zone named exists (Google's catalogue, ``gcp.zones``) and each region named has
    zones; zones of several regions are allowed (docs/gce.md, 'Several regions')."""
    fix = ("set expocloud-gce-zones (e.g. us-central1-a,us-central1-b) or expocloud-gce-regions "
           "(e.g. us-central1,europe-west4)")
    if not settings.gce_zones and not settings.gce_regions:
        raise ExpoError("--expocloud-gce-zones", "no zone or region given", fix)
    for zone in [z.strip() for z in (settings.gce_zones or "").split(",") if z.strip()]:
        if not _ZONE.fullmatch(zone):
            raise ExpoError("--expocloud-gce-zones", f"{zone!r} is not a zone name",
                            "write zones like us-central1-a, comma separated")
        if not known_zone(zone):
            region = region_of(zone)
            has = ", ".join(zones_of(region)) or "none: no such region"
            raise ExpoError("--expocloud-gce-zones", f"zone {zone} does not exist (zones of "
                            f"{region}: {has})", "name existing zones (gcloud compute zones "
                            "list)")
    for region in [r.strip() for r in (settings.gce_regions or "").split(",") if r.strip()]:
        if not zones_of(region):
            raise ExpoError("--expocloud-gce-regions", f"region {region!r} has no zone "
                            "(no such region)", "name regions like us-central1 (gcloud "
                            "compute regions list), or the zones with --expocloud-gce-zones")
    if not zones(settings):
        raise ExpoError("--expocloud-gce-zones", "no zone given", fix)


def _check_vms(settings: GceSettings) -> None:
    """The bucket, the worker software and its pins, the disk, the VMs' life, the network and
    the on-demand pool."""
    if settings.bucket is not None:
        check_bucket_url(settings.bucket, "--expocloud-bucket")
    if settings.gce_worker_software not in WORKER_SOFTWARE_CHOICES:
        raise ExpoError("--expocloud-gce-worker-software",
                        f"unknown value {settings.gce_worker_software!r}",
                        f"use one of {', '.join(WORKER_SOFTWARE_CHOICES)}")
    if settings.gce_disk_gb is None or settings.gce_disk_gb < 10:
        raise ExpoError("--expocloud-gce-disk-gb", f"{settings.gce_disk_gb!r} is too small",
                        "give at least 10 (GB)")
    parse_duration(settings.gce_max_run_duration, "--expocloud-gce-max-run-duration")
    _check_network(settings)
    if settings.worker_requirements:  # before any VM: a pin the worker's own software breaks
        from expo_executor.engines.gce.startup import check_clashes
        check_clashes(worker_requirements(settings))
    if not settings.on_demand_only and max_on_demand(settings, settings.max_workers) == 0:
        raise ExpoError("--expocloud-max-on-demand", "0 leaves no VM for jobs preempted "
                        f"{settings.spot_attempts} times", "allow at least 1 on-demand VM")


def _check_service_account(settings: GceSettings) -> None:
    """The workers' identity is named, never assumed: left unset, GCE would attach the Compute
    Engine default account, which usually holds Editor on the whole project (docs/security.md).
    'default' asks for it explicitly."""
    account = (settings.gce_service_account or "").strip()
    fix = (f"set expocloud-gce-service-account: expocloud-worker@"
           f"{settings.gce_project or 'PROJECT'}.iam.gserviceaccount.com, created with least "
           "privilege as docs/gce.md says ('Service accounts and IAM'), or "
           f"'{DEFAULT_SERVICE_ACCOUNT}' for the Compute Engine default account")
    if not account:
        raise ExpoError(SERVICE_ACCOUNT_SETTING, "a GCE run needs the workers' service account "
                        "named", fix)
    if account != DEFAULT_SERVICE_ACCOUNT and not re.fullmatch(r"[^@\s]+@[^@\s]+\.[a-z]+",
                                                               account):
        raise ExpoError(SERVICE_ACCOUNT_SETTING, f"{account!r} is not a service account's "
                        "email", fix)


def _check_network(settings: GceSettings) -> None:
    """The network and subnetwork as names or URLs the Compute API takes, a subnetwork in the
    zones' region (a bare name is completed there, per zone)."""
    from expo_executor.engines.gce.references import network_url, subnetwork_url

    try:
        network_url(settings.gce_network)
    except ValueError as exc:
        raise ExpoError("--expocloud-gce-network", str(exc),
                        "give the network's name, e.g. default, or its URL") from None
    for zone in zones(settings) if settings.gce_subnetwork else []:
        try:
            subnetwork_url(settings.gce_subnetwork, settings.gce_project or "", zone)
        except ValueError as exc:
            raise ExpoError("--expocloud-gce-subnetwork", str(exc),
                            "give the subnetwork's name (completed in the zones' region) or "
                            "its URL projects/PROJECT/regions/REGION/subnetworks/NAME") from None


_BUCKET_CHARS = re.compile(r"[a-z0-9][a-z0-9._-]*[a-z0-9]")
_IPV4 = re.compile(r"[0-9]{1,3}(\.[0-9]{1,3}){3}")
_GOOGLE_LIKE = re.compile(r"g(o|0)(o|0)g(l|1)e")
BUCKET_FIX = ("name the bucket per GCS rules: 3-63 lowercase letters, digits, '-', '_' and '.', "
              "starting and ending with a letter or digit, as gs://BUCKET/PREFIX")
CREDENTIALS_SETTING = "GOOGLE_APPLICATION_CREDENTIALS"
CREDENTIALS_FIX = ("run 'gcloud auth application-default login', or point "
                   "GOOGLE_APPLICATION_CREDENTIALS at a valid service-account key file")


def bucket_name_problem(name: str) -> str | None:
    """Why ``name`` is not a valid GCS bucket name (None: it is), by GCS's naming rules.

    Checked here, before anything starts, because GCS would only refuse it at the first
    request, after staging had begun."""
    if not name:
        return "no bucket name"
    parts = name.split(".")
    if len(name) < 3 or len(name) > (222 if len(parts) > 1 else 63):
        return f"bucket name {name!r} has {len(name)} characters (GCS allows 3 to 63)"
    if not _BUCKET_CHARS.fullmatch(name):
        return (f"bucket name {name!r} has characters GCS refuses (only lowercase letters, "
                "digits, '-', '_' and '.', starting and ending with a letter or digit)")
    if any(not part or len(part) > 63 for part in parts):
        return f"bucket name {name!r} has an empty or over-long dot-separated part"
    if _IPV4.fullmatch(name):
        return f"bucket name {name!r} is an IP address, which GCS refuses"
    if name.startswith("goog") or _GOOGLE_LIKE.search(name):
        return f"bucket name {name!r} starts with 'goog' or contains 'google', which GCS refuses"
    return None


def check_bucket_url(url: str, setting: str) -> None:
    """Raise ExpoError naming ``setting`` unless ``url`` is gs://BUCKET[/PREFIX] with a valid
    bucket name."""
    if not url.startswith("gs://"):
        raise ExpoError(setting, f"{url!r} is not a gs:// URL", "write gs://BUCKET/PREFIX")
    problem = bucket_name_problem(url[len("gs://"):].split("/", 1)[0])
    if problem:
        raise ExpoError(setting, problem, BUCKET_FIX)


def check_credentials() -> None:
    """Raise a one-line ExpoError when Google's Application Default Credentials cannot load.

    Called before the bucket, staging or any VM is touched, so a bad key file is a clear error
    and not a traceback from deep inside google-auth after work began. A key file named by
    GOOGLE_APPLICATION_CREDENTIALS is read locally: failing needs no network call.
    """
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    path = os.environ.get(CREDENTIALS_SETTING)
    try:
        if path:
            if not os.path.isfile(path):
                raise ExpoError(CREDENTIALS_SETTING, f"{path!r} is not a file", CREDENTIALS_FIX)
            try:  # google-auth itself fails on some shapes with an AttributeError
                with open(path, encoding="utf-8") as handle:
                    info = json.load(handle)
            except (OSError, ValueError) as exc:
                raise DefaultCredentialsError(f"not readable JSON: {exc}") from None
            if not isinstance(info, dict):
                raise DefaultCredentialsError("not a JSON object")
            google.auth.load_credentials_from_file(path)
        else:
            google.auth.default()
    except DefaultCredentialsError as exc:
        detail = " ".join(str(exc).split())[:200]
        where = f"{path!r} is not a usable credentials file" if path else \
            "no Application Default Credentials were found"
        raise ExpoError(CREDENTIALS_SETTING, f"{where} ({detail})", CREDENTIALS_FIX) from None
