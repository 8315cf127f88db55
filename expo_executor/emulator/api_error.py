"""The error every fake Google API answers with: an HTTP status and Google's JSON error body.

Compute Engine's bodies carry ``errors[].reason``; the newer APIs (Service Usage, Resource
Manager, IAM) carry ``status`` and, for a disabled API, an ``ErrorInfo`` detail whose reason is
``SERVICE_DISABLED``. One type holds both, so each fake raises it and its server answers it.
"""

from __future__ import annotations

ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
STATUS_NAMES = {400: "INVALID_ARGUMENT", 403: "PERMISSION_DENIED", 404: "NOT_FOUND",
                409: "ALREADY_EXISTS", 429: "RESOURCE_EXHAUSTED", 503: "UNAVAILABLE"}


class ApiError(Exception):
    """An HTTP error answered with a Google API's JSON error body."""

    def __init__(self, code: int, reason: str, message: str, *, domain: str = "global",
                 details: list[dict] | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.domain = domain
        self.details = details

    def body(self) -> dict:
        error: dict = {"code": self.code, "message": self.message,
                       "errors": [{"message": self.message, "domain": self.domain,
                                   "reason": self.reason}]}
        if self.details is not None:
            error["status"] = STATUS_NAMES.get(self.code, "UNKNOWN")
            error["details"] = self.details
        return {"error": error}


def service_disabled(service: str, title: str, project_number: str) -> ApiError:
    """What every Google API answers when ``service`` is not enabled in the project."""
    url = f"https://console.developers.google.com/apis/api/{service}/overview?project={project_number}"
    message = (f"{title} has not been used in project {project_number} before or it is "
               f"disabled. Enable it by visiting {url} then retry. If you enabled this API "
               "recently, wait a few minutes for the action to propagate to our systems and "
               "retry.")
    return ApiError(403, "accessNotConfigured", message, domain="usageLimits", details=[
        {"@type": ERROR_INFO, "reason": "SERVICE_DISABLED", "domain": "googleapis.com",
         "metadata": {"service": service, "consumer": f"projects/{project_number}"}}])


def permission_denied(permission: str, resource: str) -> ApiError:
    """The 403 of a call whose caller lacks ``permission`` on ``resource``."""
    return ApiError(403, "forbidden", f"Required '{permission}' permission for '{resource}'",
                    details=[{"@type": ERROR_INFO, "reason": "IAM_PERMISSION_DENIED",
                              "domain": "iam.googleapis.com",
                              "metadata": {"permission": permission}}])


def int_field(value: object, what: str) -> int:
    """An integer field of a request (int64s come as strings), or the API's 400 naming it."""
    try:
        return int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError):
        raise ApiError(400, "invalid", f"Invalid value for field '{what}': '{value}'.") from None


def not_found(project: str, where: str, kind: str, name: str) -> ApiError:
    """The 404 of a Compute resource: ``where`` is ``zones/Z`` or ``regions/R``."""
    return ApiError(404, "notFound", f"The resource 'projects/{project}/{where}/{kind}/{name}' "
                                     "was not found")
