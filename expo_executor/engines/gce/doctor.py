"""Is this project ready for a run? The checks ``expocloud doctor`` makes, and every GCE run
before its first VM.

A first real run fails in ways seconds of reading can tell beforehand: an API not enabled, no
credentials, a permission the coordinator lacks, a worker account it may not attach or that
cannot write the bucket, a machine type or GPU the zones do not offer, a fleet larger than the
quotas, a worker image whose Python is not this machine's, workers without an external IP and
no NAT to reach the package index. Each check returns a :class:`Check`: one line, and for a
failure the fix (a command or a setting). The judging is pure (``quota_plan``,
``bucket_access``, ``image_python``, ``nat_covers``); the reads are ``google_apis``. Checks that
need only the credentials run in parallel, so the whole takes about a second against Google.

What is not checked (the doctor cannot see it from here): the workers' own compute permission
to delete their VM (``expocloudSelfDelete``), Private Google Access, organisation policies,
and whether a zone has capacity right now.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from expo_executor.engines.gce import bucket_access, quota_plan
from expo_executor.gcp.errors import is_connection_error
from expo_executor.engines.gce.google_apis import (CLOUD_PLATFORM, GoogleApis, Roots, brief,
                                                   disabled_service)
from expo_executor.engines.gce.references import region_of

REQUIRED_APIS = ("compute.googleapis.com", "storage.googleapis.com")
CREDENTIALS_FIX = ("run 'gcloud auth application-default login', or point "
                   "GOOGLE_APPLICATION_CREDENTIALS at a service-account key file")
SKIP_FIX = "or, if this check is wrong about your project, --expocloud-gce-skip-doctor"
DOCS = "docs/gce.md, 'Service accounts and IAM'"
# Public images' Python 3 by family (the image name starts with the family's name).
IMAGE_PYTHON = ((re.compile(r"debian-13\b"), "3.13"), (re.compile(r"debian-12\b"), "3.11"),
                (re.compile(r"debian-11\b"), "3.9"),
                (re.compile(r"ubuntu-(minimal-)?2404\b"), "3.12"),
                (re.compile(r"ubuntu-(minimal-)?2204\b"), "3.10"),
                (re.compile(r"ubuntu-(minimal-)?2004\b"), "3.8"))
PUBLIC_IMAGE_PROJECTS = ("debian-cloud", "ubuntu-os-cloud")
NAT_ALL = ("ALL_SUBNETWORKS_ALL_IP_RANGES", "ALL_SUBNETWORKS_ALL_PRIMARY_IP_RANGES")


# -- records --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Check:
    """One check's outcome: its name, whether the run may go on, what was found and, for a
    failure, the fix. A warning passes but is worth a line."""

    name: str
    ok: bool
    found: str
    fix: str = ""
    warning: bool = False

    @property
    def line(self) -> str:
        return f"{self.name}: {self.found}" + (f"; fix: {self.fix}" if self.fix else "")


def passed(name: str, found: str, *, warning: bool = False, fix: str = "") -> Check:
    return Check(name, True, found, fix, warning)


def failed(name: str, found: str, fix: str) -> Check:
    return Check(name, False, found, fix)


@dataclass(frozen=True)
class Plan:
    """What a run will ask of the project: everything the checks need, read from the run's
    settings (``launch.doctor_plan``) so that the doctor checks what a run would do."""

    project: str
    zones: tuple[str, ...]
    bucket: str
    worker: str  # the workers' service account email, or "default"
    machine_types: tuple[str, ...]  # every type the run may create ('auto' left out)
    gpus: tuple[tuple[str, int], ...]  # accelerators attached to N1 VMs: (type, count)
    fleet: quota_plan.FleetPlan
    network: str
    subnetwork: str | None
    images: tuple[str, ...]
    worker_software: str  # pip or image
    pip_index_url: str | None = None
    endpoint: str | None = None  # the fake Compute (and the fakes of the other APIs)
    storage_endpoint: str | None = None  # the GCS emulator
    emulated: bool = False  # anonymous credentials: the fakes are all there is
    auto: bool = False  # a machine type is 'auto' (chosen from the jobs: checked at the run)

    @property
    def region(self) -> str:
        return region_of(self.zones[0])


# -- context ---------------------------------------------------------------------------------------
@dataclass
class Context:
    """What every check reads from: the plan, the APIs, the caller and the project number (once
    known), and the machine types already read (one read per zone and type for every check)."""

    plan: Plan
    apis: GoogleApis
    account: str
    number: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _memo: dict[tuple, Future] = field(default_factory=dict)

    @property
    def member(self) -> str:
        kind = "serviceAccount" if self.account.endswith(".gserviceaccount.com") else "user"
        return f"{kind}:{self.account}"

    def once(self, key: tuple, fetch: Callable[[], Any]) -> Any:
        """``fetch()``'s result, read once per key however many checks ask (exceptions too)."""
        with self._lock:
            future = self._memo.get(key)
            mine = future is None
            if mine:
                future = self._memo[key] = Future()
        assert future is not None
        if mine:
            try:
                future.set_result(fetch())
            except Exception as err:  # noqa: BLE001 - handed to every asker
                future.set_exception(err)
        return future.result()

    def offered(self, zone: str, machine_type: str) -> dict | None:
        """The machine type as ``zone`` offers it, or None (a 404: not there)."""
        return self.once(("machine", zone, machine_type),
                         lambda: _or_none(lambda: self.apis.machine_type(
                             self.plan.project, zone, machine_type)))

    def worker_email(self) -> str | None:
        """The workers' account; 'default' is the project's Compute Engine default account
        (None while the project number is unknown)."""
        if self.plan.worker != "default":
            return self.plan.worker
        return f"{self.number}-compute@developer.gserviceaccount.com" if self.number else None


def _or_none(fetch: Callable[[], Any]) -> Any:
    """``fetch()``, or None on a 404."""
    from google.api_core.exceptions import NotFound

    try:
        return fetch()
    except NotFound:
        return None


def _forbidden(err: BaseException) -> bool:
    return getattr(err, "code", None) == 403 and disabled_service(err) is None


def _enable(service: str, project: str) -> str:
    return f"gcloud services enable {service} --project {project}"


# -- credentials and project ------------------------------------------------------------------------
def load_credentials(plan: Plan) -> tuple[Any | None, Check | None]:
    """Anonymous ones for the fakes, else Application Default Credentials; (None, failure)
    when there are none."""
    if plan.emulated:
        from google.auth.credentials import AnonymousCredentials
        return AnonymousCredentials(), None
    import google.auth
    from google.auth.exceptions import DefaultCredentialsError

    try:
        credentials, _project = google.auth.default(scopes=[CLOUD_PLATFORM])
    except DefaultCredentialsError as exc:
        detail = " ".join(str(exc).split())[:160]
        return None, failed("credentials", f"no Application Default Credentials ({detail})",
                            CREDENTIALS_FIX)
    return credentials, None


def check_identity(apis: GoogleApis) -> tuple[str | None, Check]:
    """Whose credentials these are (they work: a token was had for them)."""
    try:
        account = apis.identity()
    except Exception as err:  # noqa: BLE001 - expired, revoked, unreachable: said in one line
        return None, failed("credentials", f"the credentials do not work ({brief(err)})",
                            CREDENTIALS_FIX)
    if not account:
        return None, failed("credentials", "Google does not say whose the credentials are",
                            CREDENTIALS_FIX + " (with the userinfo.email scope)")
    return account, passed("credentials", account)


def check_project(ctx: Context) -> Check:
    """The project exists, is active and is the caller's to see (its number names the default
    service account)."""
    project = ctx.plan.project
    try:
        found = ctx.apis.project(project)
    except Exception as err:  # noqa: BLE001 - a 403 may be a missing permission only
        service = disabled_service(err)
        if service:
            return passed("project", f"cannot read project {project}: {service} is disabled",
                          warning=True, fix=_enable(service, project))
        if getattr(err, "code", None) == 403:
            return passed("project", f"cannot read project {project} ({brief(err)}); if it "
                          "does not exist, the checks below fail", warning=True)
        raise
    ctx.number = str(found.get("name", "")).rsplit("/", 1)[-1] or None
    if found.get("state", "ACTIVE") != "ACTIVE":
        return failed("project", f"project {project} is {found.get('state')}",
                      "use an active project (--expocloud-gce-project)")
    return passed("project", f"{project} (number {ctx.number})")


# -- APIs and the coordinator's permissions ------------------------------------------------------------
def check_apis(ctx: Context) -> Check:
    """Compute Engine and Cloud Storage are enabled (Service Usage says so)."""
    project, off = ctx.plan.project, []
    for service in REQUIRED_APIS:
        try:
            state = ctx.apis.service(project, service).get("state")
        except Exception as err:  # noqa: BLE001 - reading it needs a permission of its own
            if _forbidden(err) or disabled_service(err):
                return passed("APIs", f"cannot read which APIs are enabled ({brief(err)}): the "
                              "checks below fail if Compute Engine is off", warning=True)
            raise
        if state != "ENABLED":
            off.append(service)
    if off:
        return failed("APIs", f"{', '.join(off)} not enabled in project {project}",
                      _enable(" ".join(off), project))
    return passed("APIs", ", ".join(REQUIRED_APIS) + " enabled")


def coordinator_permissions(plan: Plan) -> tuple[str, ...]:
    """What the engine's calls need of the coordinator on the project (engine.py: insert and
    bulkInsert with metadata, labels, a service account, a boot disk from an image and a NIC;
    get, delete, aggregatedList and list; zone operations get, wait and list)."""
    needed = ["compute.instances.create", "compute.instances.delete", "compute.instances.get",
              "compute.instances.list", "compute.instances.setMetadata",
              "compute.instances.setLabels", "compute.instances.setServiceAccount",
              "compute.disks.create", "compute.zoneOperations.get", "compute.zoneOperations.list"]
    if not _other_project(plan.subnetwork, plan.project):  # Shared VPC: the host project's
        needed.append("compute.subnetworks.use")
        if plan.fleet.external_ip:
            needed.append("compute.subnetworks.useExternalIp")
    if any(not _other_project(image, plan.project) and "/images/" in image
           for image in plan.images):
        needed.append("compute.images.useReadOnly")
    return tuple(needed)


def _other_project(url: str | None, project: str) -> bool:
    match = re.search(r"projects/([^/]+)/", url or "")
    return match is not None and match.group(1) != project


def check_permissions(ctx: Context) -> Check:
    """The coordinator may create, list, watch and delete the run's VMs."""
    plan = ctx.plan
    needed = coordinator_permissions(plan)
    held = ctx.apis.project_permissions(plan.project, needed)
    missing = [p for p in needed if p not in held]
    if missing:
        return failed("permissions", f"{ctx.account} lacks {', '.join(missing)} on project "
                      f"{plan.project}", f"gcloud projects add-iam-policy-binding "
                      f"{plan.project} --member={ctx.member} "
                      "--role=roles/compute.instanceAdmin.v1")
    return passed("permissions", f"{ctx.account} may create and delete VMs "
                  f"({len(needed)} permissions)")


def check_worker_account(ctx: Context) -> Check:
    """The worker account exists and the coordinator may attach it to VMs (actAs)."""
    from google.api_core.exceptions import NotFound

    plan, email = ctx.plan, ctx.worker_email()
    if email is None:
        return passed("worker account", "the project number is unknown, so the default "
                      "account's actAs is not checked", warning=True)
    try:
        allowed = ctx.apis.may_act_as(email)
    except NotFound:
        name = email.split("@", 1)[0]
        return failed("worker account", f"service account {email} does not exist",
                      f"gcloud iam service-accounts create {name} --project {plan.project} "
                      f"({DOCS}), or name another with --expocloud-gce-service-account")
    if not allowed:
        return failed("worker account", f"{ctx.account} may not act as {email} "
                      "(iam.serviceAccounts.actAs)", f"gcloud iam service-accounts "
                      f"add-iam-policy-binding {email} --member={ctx.member} "
                      f"--role=roles/iam.serviceAccountUser --project {plan.project}")
    return passed("worker account", f"{ctx.account} may attach {email}")


# -- the bucket ------------------------------------------------------------------------------------------
def check_bucket(ctx: Context) -> Check:
    """The coordinator may read and write the run's bucket (what GCS answers for the caller)."""
    from google.api_core.exceptions import NotFound

    plan, needed = ctx.plan, bucket_access.WORKER_NEEDS
    try:
        held = ctx.apis.bucket_permissions(plan.bucket, needed)
    except NotFound:
        return failed("bucket", f"gs://{plan.bucket} does not exist",
                      f"gcloud storage buckets create gs://{plan.bucket} --project "
                      f"{plan.project} --location={plan.region} --uniform-bucket-level-access")
    missing = [p for p in needed if p not in held]
    if missing:
        return failed("bucket", f"{ctx.account} lacks {', '.join(missing)} on gs://{plan.bucket}",
                      f"gcloud storage buckets add-iam-policy-binding gs://{plan.bucket} "
                      f"--member={ctx.member} --role=projects/{plan.project}/roles/"
                      f"expocloudStorage ({DOCS})")
    return passed("bucket", f"{ctx.account} may read and write gs://{plan.bucket}")


def _policy_or_none(read: Callable[[], dict]) -> dict | None:
    """A policy, or None when the caller may not read it (a 403)."""
    try:
        return read()
    except Exception as err:  # noqa: BLE001 - unreadable is an answer here
        if getattr(err, "code", None) in (403, 404):
            return None
        raise


def _role_reader(ctx: Context) -> Callable[[str], Iterable[str] | None]:
    def read(role: str) -> Iterable[str] | None:
        try:
            return ctx.once(("role", role), lambda: ctx.apis.role_permissions(role))
        except Exception:  # noqa: BLE001 - a role we may not read: the table, or unknown
            return bucket_access.KNOWN_ROLES.get(role)
    return read


def check_worker_bucket(ctx: Context) -> Check:
    """The workers' account holds read and write on the bucket, by the bucket's or the
    project's policy (read from both; their roles expanded)."""
    plan, email = ctx.plan, ctx.worker_email()
    name = "worker's bucket access"
    if email is None:
        return passed(name, "the default account's email is unknown: not checked", warning=True)
    policies = {"bucket": _policy_or_none(lambda: ctx.apis.bucket_policy(plan.bucket)),
                "project": _policy_or_none(lambda: ctx.apis.project_policy(plan.project))}
    grants = bucket_access.grants([p for p in policies.values() if p is not None],
                                  f"serviceAccount:{email}", _role_reader(ctx))
    if not grants.missing:
        return passed(name, f"{email} may read and write gs://{plan.bucket} "
                      f"({', '.join(grants.roles)})")
    fix = (f"gcloud storage buckets add-iam-policy-binding gs://{plan.bucket} "
           f"--member=serviceAccount:{email} --role=projects/{plan.project}/roles/"
           f"expocloudStorage ({DOCS})")
    unsure = [f"the {what} policy is not readable by {ctx.account}"
              for what, policy in policies.items() if policy is None]
    unsure += [f"role {r} is not readable" for r in grants.unresolved]
    unsure += [f"groups or domains hold {', '.join(grants.indirect)}"] if grants.indirect else []
    found = (f"{email} lacks {', '.join(grants.missing)} on gs://{plan.bucket}"
             + (f" (its roles: {', '.join(grants.roles)})" if grants.roles else ""))
    if unsure:
        return passed(name, f"not confirmed: {found} as far as can be seen ({'; '.join(unsure)})",
                      warning=True, fix=fix)
    return failed(name, found, fix)


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
    found = ctx.once(("gpu", zone, gpu), lambda: _or_none(
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


def check_quotas(ctx: Context) -> Check:
    """The fleet at its largest fits the region's quotas (limit minus usage)."""
    plan = ctx.plan
    quotas = quota_plan.quotas_of(ctx.apis.region(plan.project, plan.region))
    needs = quota_plan.needs(plan.fleet, _vcpus(ctx), quotas)
    short = quota_plan.shortfalls(needs, quotas)
    if short:
        said = "; ".join(quota_plan.describe(need, quota) for need, quota in short)
        metrics = ", ".join(need.metric for need, _ in short)
        return failed("quotas", f"in {plan.region}, {said}", "lower --expocloud-max-workers "
                      "or --expocloud-max-on-demand, or ask for more "
                      f"(https://console.cloud.google.com/iam-admin/quotas?project="
                      f"{plan.project}: {metrics} in {plan.region})")
    fits = ", ".join(f"{n.metric} {n.amount:g} of {quotas[n.metric].free:g} free"
                     for n in needs if n.metric in quotas)
    return passed("quotas", f"the fleet at its largest fits in {plan.region} ({fits})")


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
    in their region (GCS itself they reach by Private Google Access, or the NAT)."""
    plan = ctx.plan
    if plan.fleet.external_ip:
        return passed("network", "workers get external IPs")
    if plan.worker_software == "image":
        return passed("network", "no external IPs; image mode installs nothing")
    if plan.pip_index_url:
        return passed("network", f"no external IPs; workers install from {plan.pip_index_url} "
                      "(not checked: it must be reachable from the subnetwork)", warning=True)
    network = plan.network.rstrip("/").rsplit("/", 1)[-1]
    subnetwork = (plan.subnetwork or network).rstrip("/").rsplit("/", 1)[-1]
    if nat_covers(ctx.apis.routers(plan.project, plan.region), network, subnetwork):
        return passed("network", f"no external IPs; Cloud NAT serves {subnetwork} in "
                      f"{plan.region}")
    return failed("network", f"workers have no external IP (--expocloud-gce-internal-ip-only) "
                  f"and install from PyPI, but no Cloud NAT in {plan.region} serves subnetwork "
                  f"{subnetwork} of network {network}", f"gcloud compute routers create "
                  f"expocloud-nat --network {network} --region {plan.region} --project "
                  f"{plan.project} && gcloud compute routers nats create expocloud-nat "
                  f"--router expocloud-nat --region {plan.region} --project {plan.project} "
                  "--auto-allocate-nat-external-ips --nat-all-subnet-ip-ranges; or give the "
                  "workers external IPs, or --expocloud-gce-worker-software image")


# -- running them ------------------------------------------------------------------------------------------
PARALLEL: tuple[tuple[str, Callable[[Context], Check]], ...] = (
    ("APIs", check_apis), ("permissions", check_permissions),
    ("worker account", check_worker_account), ("bucket", check_bucket),
    ("worker's bucket access", check_worker_bucket), ("machine types", check_machine_types),
    ("quotas", check_quotas), ("network", check_network))


def _guarded(name: str, check: Callable[[Context], Check], ctx: Context) -> Check:
    """A check whose read failed says so in its one line, with the fix the error suggests."""
    try:
        return check(ctx)
    except Exception as err:  # noqa: BLE001 - every failure becomes a line, never a traceback
        service = disabled_service(err)
        if service:
            return failed(name, f"{service} is not enabled in project {ctx.plan.project}",
                          _enable(service, ctx.plan.project))
        if _forbidden(err):  # not a problem of the run's: of the check's, said as a warning
            return passed(name, f"not checked: {ctx.account} may not read what this check "
                          f"needs ({brief(err)})", warning=True,
                          fix="grant the permission the message names to have it checked "
                          "(docs/gce.md, 'expocloud doctor')")
        if is_connection_error(err):
            return failed(name, f"Google's API could not be reached ({brief(err)})",
                          "check this machine's network and proxy, then run again")
        return failed(name, f"could not check ({type(err).__name__}: {brief(err)})",
                      f"see the message; {SKIP_FIX}")


def run_checks(plan: Plan, host_python: str, workers: int = 8) -> list[Check]:
    """Every check, in a fixed order: credentials and the project first (the others need
    them), then the rest in parallel. Stops after the credentials if they do not work."""
    credentials, failure = load_credentials(plan)
    if credentials is None:
        return [failure] if failure else []
    apis = GoogleApis(credentials, Roots.for_run(plan.endpoint, plan.storage_endpoint))
    account, identity = check_identity(apis)
    if account is None:
        return [identity]
    ctx = Context(plan, apis, account)
    project = _guarded("project", check_project, ctx)
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="doctor") as pool:
        rest = list(pool.map(lambda item: _guarded(item[0], item[1], ctx), PARALLEL))
    return [identity, project, *rest, check_python(plan, host_python)]


def summary(plan: Plan, checks: list[Check], seconds: float) -> str:
    """One line for a run that may go on."""
    account = next((c.found for c in checks if c.name == "credentials"), "?")
    fleet = plan.fleet
    return (f"project {plan.project} is ready: {len(checks)} checks passed in {seconds:.1f} s "
            f"(as {account}; {fleet.spot} Spot + {fleet.on_demand} on-demand VMs in "
            f"{', '.join(plan.zones)}; bucket gs://{plan.bucket}; workers as {plan.worker})")


def host_python() -> str:
    """This machine's Python major.minor, as the startup script compares it."""
    import sys

    return f"{sys.version_info.major}.{sys.version_info.minor}"


def storage_endpoint() -> str | None:
    return os.environ.get("STORAGE_EMULATOR_HOST") or None
