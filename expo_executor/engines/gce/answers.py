"""Reading what Compute Engine answers: whether an operation is done and its errors, a name
from a resource link, a timestamp, and a quota error made into one line that names the quota,
the region and the fix.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from expo_executor.core.scheduler import Pool
from expo_executor.engines.gce.config import POOL_LABEL_VALUES, QUOTA_RE


def one_line(text: str) -> str:
    return " ".join(str(text).split())


def region_of(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def quota_message(raw: str, project: str, pool: Pool, zone: str) -> str:
    """One line naming the quota, the region and the fix."""
    match = QUOTA_RE.search(raw)
    if match:
        quota, limit, region = match.groups()
        what = f"GCE quota {quota} exceeded in region {region} (limit {limit})"
    else:
        what = f"GCE quota exceeded in region {region_of(zone)} ({one_line(raw)})"
    return (f"{what} while creating {POOL_LABEL_VALUES[pool]} VMs; fix: request a quota "
            f"increase (https://console.cloud.google.com/iam-admin/quotas?project={project}) "
            "or lower --expocloud-max-workers")


def is_done(op: Any) -> bool:
    return op.status == type(op).Status.DONE


def op_errors(op: Any) -> tuple[set[str], str]:
    """The error codes of a finished operation and their messages (empty: it succeeded)."""
    errors = list(op.error.errors) if op.error else []
    codes = {e.code for e in errors}
    text = "; ".join(f"{e.code}: {e.message}" for e in errors) or op.http_error_message
    return codes, one_line(text)


def name_of(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[-1]


def epoch(rfc3339: str) -> float | None:
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None
