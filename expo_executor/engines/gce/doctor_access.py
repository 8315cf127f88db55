"""The doctor's checks of access: the credentials, the project, its APIs, the coordinator's
permissions, the workers' account and the bucket (who may do what, read from IAM).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from expo_executor.engines.gce import bucket_access
from expo_executor.engines.gce.doctor_context import (Check, Context, Plan, enable_command,
                                                      failed, forbidden, passed)
from expo_executor.engines.gce.google_apis import (CLOUD_PLATFORM, GoogleApis, brief,
                                                   disabled_service)

REQUIRED_APIS = ("compute.googleapis.com", "storage.googleapis.com")
CREDENTIALS_FIX = ("run 'gcloud auth application-default login', or point "
                   "GOOGLE_APPLICATION_CREDENTIALS at a service-account key file")
DOCS = "docs/gce.md, 'Service accounts and IAM'"


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
                          warning=True, fix=enable_command(service, project))
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
            if forbidden(err) or disabled_service(err):
                return passed("APIs", f"cannot read which APIs are enabled ({brief(err)}): the "
                              "checks below fail if Compute Engine is off", warning=True)
            raise
        if state != "ENABLED":
            off.append(service)
    if off:
        return failed("APIs", f"{', '.join(off)} not enabled in project {project}",
                      enable_command(" ".join(off), project))
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
