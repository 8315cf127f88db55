"""The fake project around the fake Compute Engine: which APIs are enabled (Service Usage),
the project and what its caller may do (Resource Manager), the service accounts the caller may
act as and the roles (IAM), and whose credentials these are (OAuth2 tokeninfo).

Served by the fake Compute's HTTP server under the real APIs' paths (``/v1/projects/P/services/
S``, ``/v3/projects/P:testIamPermissions``, ``/v1/projects/-/serviceAccounts/E:
testIamPermissions``, ``/v1/roles/R``, ``/oauth2/v2/tokeninfo``...), so a client pointed at
that endpoint instead of ``https://serviceusage.googleapis.com`` and the rest reaches them.
Requests are checked against each API's discovery document first, as the fake Compute's are.

A good setup by default, which a test breaks one thing at a time: ``disable`` an API (its calls
then answer 403 SERVICE_DISABLED, Compute's too), ``deny`` the caller permissions on the project
(``testIamPermissions`` leaves them out; the fake Compute refuses the calls that need them),
``deny_act_as`` a service account, ``remove_service_account``, ``set_caller`` (None: the token
is not valid), ``bind``/``unbind`` project-level roles.
"""

from __future__ import annotations

import copy
import hashlib
import re
import threading
from typing import Any

from expo_executor.emulator import catalogue
from expo_executor.emulator.api_error import ApiError, permission_denied, service_disabled

ENABLED_BY_DEFAULT = ("compute.googleapis.com", "storage.googleapis.com", "iam.googleapis.com",
                      "cloudresourcemanager.googleapis.com", "serviceusage.googleapis.com",
                      "oslogin.googleapis.com")
TITLES = {"compute.googleapis.com": "Compute Engine API",
          "storage.googleapis.com": "Cloud Storage API",
          "iam.googleapis.com": "Identity and Access Management (IAM) API",
          "cloudresourcemanager.googleapis.com": "Cloud Resource Manager API",
          "serviceusage.googleapis.com": "Service Usage API"}
# (HTTP method, path, discovery method id, the service that answers it)
ROUTES: list[tuple[str, re.Pattern[str], str, str]] = [
    ("GET", re.compile(r"/v1/(?P<name>projects/[^/]+/services/[^/]+)"),
     "serviceusage.services.get", "serviceusage.googleapis.com"),
    ("GET", re.compile(r"/v3/(?P<name>projects/[^/:]+)"), "cloudresourcemanager.projects.get",
     "cloudresourcemanager.googleapis.com"),
    ("POST", re.compile(r"/v3/(?P<resource>projects/[^/:]+):testIamPermissions"),
     "cloudresourcemanager.projects.testIamPermissions", "cloudresourcemanager.googleapis.com"),
    ("POST", re.compile(r"/v3/(?P<resource>projects/[^/:]+):getIamPolicy"),
     "cloudresourcemanager.projects.getIamPolicy", "cloudresourcemanager.googleapis.com"),
    ("POST", re.compile(r"/v1/(?P<resource>projects/[^/]+/serviceAccounts/[^/:]+)"
                        r":testIamPermissions"),
     "iam.projects.serviceAccounts.testIamPermissions", "iam.googleapis.com"),
    ("GET", re.compile(r"/v1/(?P<name>roles/[^/]+)"), "iam.roles.get", "iam.googleapis.com"),
    ("GET", re.compile(r"/v1/(?P<name>projects/[^/]+/roles/[^/]+)"), "iam.projects.roles.get",
     "iam.googleapis.com"),
    ("POST", re.compile(r"/oauth2/v2/tokeninfo"), "oauth2.tokeninfo", ""),
]


def project_number(project: str) -> str:
    """A fake project's number, stable for its id (a number stands for itself)."""
    if project.isdigit():
        return project
    return str(10**11 + int(hashlib.sha256(project.encode()).hexdigest()[:9], 16))


def route(method: str, path: str) -> tuple[str, str, dict[str, str]] | None:
    """(discovery method id, service, path parameters) of a request these fakes serve."""
    for verb, pattern, method_id, service in ROUTES:
        match = pattern.fullmatch(path)
        if verb == method and match is not None:
            return method_id, service, match.groupdict()
    return None


class FakeProjectApis:
    """The project's APIs, identities and permissions (thread-safe; one state for every
    project id the clients name)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._enabled = set(ENABLED_BY_DEFAULT)
        self._denied: set[str] = set()
        self._no_act_as: set[str] = set()
        self._gone_accounts: set[str] = set()
        self._caller: str | None = catalogue.CALLER
        self._bindings: list[dict] = [
            {"role": "roles/owner", "members": [catalogue.CALLER_MEMBER]},
            {"role": f"projects/{catalogue.PROJECT}/roles/expocloudSelfDelete",
             "members": [f"serviceAccount:{catalogue.WORKER}"],
             "condition": {"title": "expocloud-vms", "expression":
                           'resource.name.extract("instances/{name}").startsWith("expo-")'}}]

    # -- control ------------------------------------------------------------------------------
    def disable(self, *services: str) -> None:
        with self._lock:
            self._enabled -= set(services)

    def enable(self, *services: str) -> None:
        with self._lock:
            self._enabled |= set(services)

    def deny(self, *permissions: str) -> None:
        """The caller lacks these permissions on the project from now on."""
        with self._lock:
            self._denied |= set(permissions)

    def deny_act_as(self, email: str) -> None:
        with self._lock:
            self._no_act_as.add(email)

    def remove_service_account(self, email: str) -> None:
        with self._lock:
            self._gone_accounts.add(email)

    def set_caller(self, email: str | None) -> None:
        with self._lock:
            self._caller = email

    def bind(self, role: str, member: str) -> None:
        with self._lock:
            self._bindings.append({"role": role, "members": [member]})

    def unbind(self, member: str) -> None:
        with self._lock:
            for binding in self._bindings:
                binding["members"] = [m for m in binding["members"] if m != member]

    # -- what the other fakes ask ---------------------------------------------------------------
    def disabled_error(self, project: str, service: str) -> ApiError | None:
        """The 403 SERVICE_DISABLED a call to ``service`` gets, or None when it is enabled."""
        with self._lock:
            if not service or service in self._enabled:
                return None
        return service_disabled(service, TITLES.get(service, service), project_number(project))

    def denied(self, permission: str) -> bool:
        with self._lock:
            return permission in self._denied

    # -- the API --------------------------------------------------------------------------------
    def call(self, method_id: str, params: dict[str, str], body: Any) -> dict:
        """One request's answer (raises ApiError)."""
        handlers = {"serviceusage.services.get": self._service,
                    "cloudresourcemanager.projects.get": self._project,
                    "cloudresourcemanager.projects.testIamPermissions": self._test_project,
                    "cloudresourcemanager.projects.getIamPolicy": self._project_policy,
                    "iam.projects.serviceAccounts.testIamPermissions": self._test_account,
                    "iam.roles.get": self._role, "iam.projects.roles.get": self._role,
                    "oauth2.tokeninfo": self._tokeninfo}
        return handlers[method_id](params, body or {})

    def _require(self, permission: str, resource: str) -> None:
        if self.denied(permission):
            raise permission_denied(permission, resource)

    def _service(self, params: dict[str, str], _body: dict) -> dict:
        project, _, service = params["name"].split("/", 3)[1:]
        self._require("serviceusage.services.get", f"projects/{project}")
        number = project_number(project)
        with self._lock:
            state = "ENABLED" if service in self._enabled else "DISABLED"
        return {"name": f"projects/{number}/services/{service}", "parent": f"projects/{number}",
                "state": state, "config": {"name": service, "title": TITLES.get(service, "")}}

    def _project(self, params: dict[str, str], _body: dict) -> dict:
        project = params["name"].split("/", 1)[1]
        self._require("resourcemanager.projects.get", f"projects/{project}")
        return {"name": f"projects/{project_number(project)}", "projectId": project,
                "state": "ACTIVE", "displayName": project, "parent": "organizations/1",
                "etag": "W/\"fake\""}

    def _test_project(self, params: dict[str, str], body: dict) -> dict:
        asked = list(body.get("permissions") or [])
        unknown = [p for p in asked if p not in catalogue.KNOWN_PERMISSIONS]
        if unknown:
            raise ApiError(400, "badRequest", f"Permission {unknown[0]} is not valid for this "
                                              "resource.", details=[])
        with self._lock:
            held = [p for p in asked if p not in self._denied]
        return {"permissions": held} if held else {}

    def _project_policy(self, params: dict[str, str], _body: dict) -> dict:
        self._require("resourcemanager.projects.getIamPolicy", params["resource"])
        with self._lock:
            return {"version": 3, "etag": "BwXfake=", "bindings": copy.deepcopy(self._bindings)}

    def _test_account(self, params: dict[str, str], body: dict) -> dict:
        email = params["resource"].rsplit("/", 1)[1]
        asked = list(body.get("permissions") or [])
        with self._lock:
            if email in self._gone_accounts or "@" not in email:
                raise ApiError(404, "notFound", f"Unknown service account {email}", details=[])
            held = [p for p in asked if p == "iam.serviceAccounts.actAs"
                    and email not in self._no_act_as and p not in self._denied]
        return {"permissions": held} if held else {}

    def _role(self, params: dict[str, str], _body: dict) -> dict:
        name = params["name"]
        if name.startswith("projects/"):
            self._require("iam.roles.get", name)
        permissions = catalogue.role_permissions(name)
        if permissions is None:
            raise ApiError(404, "notFound", f"The role named {name} was not found.", details=[])
        return {"name": name, "title": name.rsplit("/", 1)[1], "stage": "GA",
                "includedPermissions": list(permissions), "etag": "BwXfake="}

    def _tokeninfo(self, _params: dict[str, str], _body: dict) -> dict:
        with self._lock:
            caller = self._caller
        if caller is None:
            raise ApiError(400, "invalid_token", "Invalid Value", details=[])
        return {"issued_to": "fake.apps.googleusercontent.com", "audience":
                "fake.apps.googleusercontent.com", "user_id": "1",
                "scope": "https://www.googleapis.com/auth/cloud-platform openid "
                         "https://www.googleapis.com/auth/userinfo.email",
                "expires_in": 3599, "email": caller, "verified_email": True,
                "access_type": "offline"}
