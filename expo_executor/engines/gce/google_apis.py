"""The Google APIs a pre-run check reads, over plain REST: Compute's catalogue, Service Usage,
Resource Manager, IAM, Cloud Storage's bucket IAM and OAuth2's tokeninfo.

Plain ``AuthorizedSession`` requests rather than six client libraries: each check is one or two
GETs, and one session with one error type (google-api-core's, from the JSON error body, so
``errors.is_transient`` and the ErrorInfo reason ``SERVICE_DISABLED`` read as for every other
call) keeps them alike. Every call is retried on transient errors with the repo's backoff
(``retry.retry_call``), briefly: a check should take seconds. ``Roots.for_run`` points every API
at the local fakes when the run has ``--expocloud-gce-endpoint`` (they serve the real paths) and
Cloud Storage at ``STORAGE_EMULATOR_HOST``. The SDKs are imported inside the functions.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from expo_executor.gcp.errors import is_transient
from expo_executor.gcp.retry import retry_call

CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"
_SERVICE_URL = re.compile(r"apis/api/([a-z0-9.-]+\.googleapis\.com)")


@dataclass(frozen=True)
class Roots:
    """Where each API is reached (scheme and host, no path)."""

    compute: str = "https://compute.googleapis.com"
    serviceusage: str = "https://serviceusage.googleapis.com"
    resourcemanager: str = "https://cloudresourcemanager.googleapis.com"
    iam: str = "https://iam.googleapis.com"
    oauth2: str = "https://www.googleapis.com"
    storage: str = "https://storage.googleapis.com"

    @classmethod
    def for_run(cls, endpoint: str | None, storage_endpoint: str | None) -> Roots:
        """Google's hosts, or the fakes: every API on ``endpoint`` (the fake Compute serves
        them all) and Cloud Storage on ``storage_endpoint``."""
        base = cls()
        if endpoint:
            root = endpoint.rstrip("/")
            base = cls(root, root, root, root, root, base.storage)
        if storage_endpoint:
            base = cls(base.compute, base.serviceusage, base.resourcemanager, base.iam,
                       base.oauth2, storage_endpoint.rstrip("/"))
        return base


def disabled_service(err: BaseException) -> str | None:
    """The API a 403 says is not enabled (``compute.googleapis.com``), or None."""
    if getattr(err, "reason", None) == "SERVICE_DISABLED":
        service = (getattr(err, "metadata", None) or {}).get("service")
        if service:
            return str(service)
    match = _SERVICE_URL.search(str(getattr(err, "message", "")))
    if getattr(err, "code", None) == 403 and match and "has not been used" in str(err):
        return match.group(1)
    return None


def brief(err: BaseException) -> str:
    """An error in a few words for a one-line message: its status and Google's own message,
    without the URL the client puts in front."""
    code = getattr(err, "code", None)
    response = getattr(err, "response", None)
    text = str(err)
    try:
        text = response.json()["error"]["message"] if response is not None else text
    except (ValueError, KeyError, TypeError, AttributeError):
        pass
    text = " ".join(str(text).split())
    return f"{code} {text}"[:200] if code else text[:200]


class GoogleApis:
    """The calls the checks make, as plain methods returning JSON (raises google-api-core's
    GoogleAPICallError subclasses: NotFound, Forbidden, ...)."""

    def __init__(self, credentials: Any, roots: Roots, *, timeout: float = 20.0,
                 attempts: int = 4, sleep: Callable[[float], object] = time.sleep) -> None:
        from google.auth.transport.requests import AuthorizedSession

        self.credentials = credentials
        self.roots = roots
        self._session = AuthorizedSession(credentials)
        self._timeout = timeout
        self._attempts = attempts
        self._sleep = sleep

    # -- transport ----------------------------------------------------------------------------
    def _call(self, method: str, url: str, *, params: Any = None, body: Any = None) -> dict:
        return retry_call(lambda: self._once(method, url, params, body), is_transient=is_transient,
                          attempts=self._attempts, base=0.5, cap=4.0, sleep=self._sleep)

    def _once(self, method: str, url: str, params: Any, body: Any) -> dict:
        from google.api_core.exceptions import from_http_response

        response = self._session.request(method, url, params=params, json=body,
                                         timeout=self._timeout)
        if response.status_code >= 400:
            raise from_http_response(response)
        return response.json() if response.content else {}

    # -- who, and which project ---------------------------------------------------------------
    def identity(self) -> str | None:
        """The credentials' account, once a token was had for them (so they work): a service
        account's email, else what tokeninfo says."""
        token = self._token()
        email = getattr(self.credentials, "service_account_email", None)
        if isinstance(email, str) and "@" in email:
            return email
        data = self._call("POST", f"{self.roots.oauth2}/oauth2/v2/tokeninfo",
                          params={"access_token": token} if token else None)
        return data.get("email")

    def _token(self) -> str | None:
        """A fresh access token (None for the fakes' anonymous credentials)."""
        from google.auth.credentials import AnonymousCredentials
        from google.auth.transport.requests import Request

        if isinstance(self.credentials, AnonymousCredentials):
            return None
        retry_call(lambda: self.credentials.refresh(Request()), is_transient=is_transient,
                   attempts=self._attempts, base=0.5, cap=4.0, sleep=self._sleep)
        return getattr(self.credentials, "token", None)

    def project(self, project: str) -> dict:
        return self._call("GET", f"{self.roots.resourcemanager}/v3/projects/{project}")

    def service(self, project: str, service: str) -> dict:
        return self._call("GET", f"{self.roots.serviceusage}/v1/projects/{project}/services/"
                                 f"{service}")

    # -- IAM ------------------------------------------------------------------------------------
    def project_permissions(self, project: str, permissions: Iterable[str]) -> set[str]:
        """Which of ``permissions`` the caller holds on the project."""
        data = self._call("POST", f"{self.roots.resourcemanager}/v3/projects/{project}"
                                  ":testIamPermissions", body={"permissions": list(permissions)})
        return set(data.get("permissions") or [])

    def project_policy(self, project: str) -> dict:
        return self._call("POST", f"{self.roots.resourcemanager}/v3/projects/{project}"
                                  ":getIamPolicy", body={"options": {"requestedPolicyVersion": 3}})

    def may_act_as(self, email: str) -> bool:
        """May the caller attach the service account ``email`` to a VM (actAs)?"""
        data = self._call("POST", f"{self.roots.iam}/v1/projects/-/serviceAccounts/{email}"
                                  ":testIamPermissions",
                          body={"permissions": ["iam.serviceAccounts.actAs"]})
        return "iam.serviceAccounts.actAs" in (data.get("permissions") or [])

    def role_permissions(self, role: str) -> list[str]:
        """A role's permissions (``roles/...``, ``projects/P/roles/...``,
        ``organizations/O/roles/...``)."""
        return list(self._call("GET", f"{self.roots.iam}/v1/{role}").get("includedPermissions")
                    or [])

    # -- Cloud Storage --------------------------------------------------------------------------
    def bucket_policy(self, bucket: str) -> dict:
        return self._call("GET", f"{self.roots.storage}/storage/v1/b/{bucket}/iam",
                          params={"optionsRequestedPolicyVersion": "3"})

    def bucket_permissions(self, bucket: str, permissions: Iterable[str]) -> set[str]:
        data = self._call("GET", f"{self.roots.storage}/storage/v1/b/{bucket}/iam/"
                                 "testPermissions", params={"permissions": list(permissions)})
        return set(data.get("permissions") or [])

    # -- Compute's catalogue --------------------------------------------------------------------
    def _compute(self, project: str, rest: str) -> str:
        return f"{self.roots.compute}/compute/v1/projects/{project}/{rest}"

    def machine_type(self, project: str, zone: str, name: str) -> dict:
        return self._call("GET", self._compute(project, f"zones/{zone}/machineTypes/{name}"))

    def accelerator_type(self, project: str, zone: str, name: str) -> dict:
        return self._call("GET", self._compute(project, f"zones/{zone}/acceleratorTypes/{name}"))

    def region(self, project: str, region: str) -> dict:
        return self._call("GET", self._compute(project, f"regions/{region}"))

    def routers(self, project: str, region: str) -> list[dict]:
        """Every Cloud Router of the region, all pages."""
        items: list[dict] = []
        token = None
        while True:
            data = self._call("GET", self._compute(project, f"regions/{region}/routers"),
                              params={"pageToken": token} if token else None)
            items += data.get("items") or []
            token = data.get("nextPageToken")
            if not token:
                return items
