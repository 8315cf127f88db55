"""Is this project ready for a run? The checks ``expocloud doctor`` makes, and every GCE run
before its first VM.

A first real run fails in ways seconds of reading can tell beforehand: an API not enabled, no
credentials, a permission the coordinator lacks, a worker account it may not attach or that
cannot write the bucket, a machine type or GPU the zones do not offer, a fleet larger than the
quotas, a worker image whose Python is not this machine's, workers without an external IP and
no NAT to reach the package index. Each check returns a :class:`Check`: one line, and for a
failure the fix (a command or a setting): the checks of access are ``doctor_access``, those of
the fleet ``doctor_fleet``, their records ``doctor_context``; this module runs them. The
judging is pure (``quota_plan``, ``bucket_access``, ``image_python``, ``nat_covers``); the reads
are ``google_apis``. Checks that need only the credentials run in parallel, so the whole takes
about a second against Google.

What is not checked (the doctor cannot see it from here): the workers' own compute permission
to delete their VM (``expocloudSelfDelete``), Private Google Access, organisation policies,
and whether a zone has capacity right now.
"""


from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from expo_executor.engines.gce.doctor_access import (check_apis, check_bucket, check_identity,
                                                     check_permissions, check_project,
                                                     check_worker_account, check_worker_bucket,
                                                     load_credentials)
from expo_executor.engines.gce.doctor_context import (Check, Context, Plan,
                                                      enable_command, failed, forbidden, passed)
from expo_executor.engines.gce.doctor_fleet import (check_machine_types, check_network,
                                                    check_python, check_quotas, check_zones)
from expo_executor.engines.gce.google_apis import GoogleApis, Roots, brief, disabled_service
from expo_executor.gcp.errors import is_connection_error

SKIP_FIX = "or, if this check is wrong about your project, --expocloud-gce-skip-doctor"


# -- running them ------------------------------------------------------------------------------------------
PARALLEL: tuple[tuple[str, Callable[[Context], Check]], ...] = (
    ("APIs", check_apis), ("permissions", check_permissions),
    ("worker account", check_worker_account), ("bucket", check_bucket),
    ("worker's bucket access", check_worker_bucket), ("machine types", check_machine_types),
    ("zones", check_zones), ("quotas", check_quotas), ("network", check_network))


def _guarded(name: str, check: Callable[[Context], Check], ctx: Context) -> Check:
    """A check whose read failed says so in its one line, with the fix the error suggests."""
    try:
        return check(ctx)
    except Exception as err:  # noqa: BLE001 - every failure becomes a line, never a traceback
        service = disabled_service(err)
        if service:
            return failed(name, f"{service} is not enabled in project {ctx.plan.project}",
                          enable_command(service, ctx.plan.project))
        if forbidden(err):  # not a problem of the run's: of the check's, said as a warning
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
