"""A bucket's IAM policy in the GCS emulator, as Cloud Storage keeps and applies it.

gcp-storage-emulator stores a policy and answers ``testIamPermissions`` with every permission
asked for. These handlers replace its three (installed by ``gcs.py``'s wrapper, in the
emulator's process): ``getIamPolicy`` answers GCS's default policy for a bucket no one set one
on (the project's owners and editors own it, its viewers read it), ``setIamPolicy`` stores the
bindings, and ``testIamPermissions`` answers only what the policy grants the caller (the fake
caller of ``catalogue.py``, who owns the project: the owner and editor convenience members
include it), through the roles' permissions in the catalogue. Each request is first checked
against Cloud Storage's discovery document. Conditions and project-level grants are not
applied here (the doctor reads those from the project's policy).
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from expo_executor.emulator import catalogue
from expo_executor.emulator.discovery import check_body, check_query

STORAGE_PERMISSION_PREFIX = "storage."


def _error(response: Any, status: HTTPStatus, reason: str, message: str) -> None:
    response.status = status
    response.json({"error": {"code": status.value, "message": message,
                             "errors": [{"message": message, "domain": "global",
                                         "reason": reason}]}})


def _problems(method_id: str, request: Any, body: Any = None) -> list[str]:
    """The discovery document's problems with the query (each value of a repeated parameter
    checked) and the body."""
    pairs = [{name: value} for name, values in request.query.items() for value in values]
    return [p for pair in pairs for p in check_query(method_id, pair)] + \
        check_body(method_id, body)


def _policy(storage: Any, name: str) -> dict:
    stored = storage.get_bucket_iam_policy(name)
    bindings = stored.get("bindings") if stored else None
    if not bindings:
        bindings = catalogue.default_bucket_policy(catalogue.PROJECT)
    return {"kind": "storage#policy", "resourceId": f"projects/_/buckets/{name}",
            "version": (stored or {}).get("version", 1), "etag": (stored or {}).get(
                "etag", "CAE="), "bindings": bindings}


def _bucket(request: Any, response: Any, storage: Any, method_id: str,
            body: Any = None) -> str | None:
    """The bucket a valid request names, or None once the answer (400, 404) is given."""
    problems = _problems(method_id, request, body)
    if problems:
        _error(response, HTTPStatus.BAD_REQUEST, "invalid", problems[0])
        return None
    name = request.params.get("bucket_name")
    if not name or name not in storage.buckets:
        _error(response, HTTPStatus.NOT_FOUND, "notFound", "The specified bucket does not exist.")
        return None
    return name


def get_iam_policy(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> None:
    """GET /storage/v1/b/{bucket}/iam."""
    name = _bucket(request, response, storage, "storage.buckets.getIamPolicy")
    if name is not None:
        response.json(_policy(storage, name))


def set_iam_policy(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> None:
    """PUT /storage/v1/b/{bucket}/iam: the bindings replace the bucket's."""
    body = request.data if isinstance(request.data, dict) else {}
    name = _bucket(request, response, storage, "storage.buckets.setIamPolicy", body)
    if name is None:
        return
    storage.set_bucket_iam_policy(name, {"version": body.get("version", 1), "etag": "CAI=",
                                         "bindings": body.get("bindings") or []})
    response.json(_policy(storage, name))


def test_iam_permissions(request: Any, response: Any, storage: Any, *args: Any,
                         **kwargs: Any) -> None:
    """GET /storage/v1/b/{bucket}/iam/testPermissions?permissions=...: what the policy grants
    the caller, of what was asked (400 for a permission that is not a bucket's)."""
    name = _bucket(request, response, storage, "storage.buckets.testIamPermissions")
    if name is None:
        return
    asked = request.query.get("permissions") or []
    unknown = [p for p in asked if not p.startswith(STORAGE_PERMISSION_PREFIX)
               or p not in catalogue.KNOWN_PERMISSIONS]
    if unknown:
        _error(response, HTTPStatus.BAD_REQUEST, "invalid",
               f"Permission '{unknown[0]}' is not valid for a bucket.")
        return
    held = catalogue.granted(_policy(storage, name)["bindings"])
    answer: dict = {"kind": "storage#testIamPermissionsResponse"}
    if any(p in held for p in asked):
        answer["permissions"] = [p for p in asked if p in held]
    response.json(answer)


REPLACING = {"get_iam_policy": get_iam_policy, "set_iam_policy": set_iam_policy,
             "test_iam_permissions": test_iam_permissions}
