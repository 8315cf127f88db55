"""The faults the fake Compute Engine serves when a test arms them, and the errors they answer.

A fault is armed for the next ``count`` matching calls (or instances): by kind, zone, API method
and Spot. Operation faults end an insert's operation with the real error codes (stockout, quota,
Spot unsupported, a partial bulk insert); HTTP faults answer a request with the real status and
body (rate limit, unavailable, a stockout said in a 503's message alone, a lost response); boot
faults mark an instance at its insert (never boots, no worker, a failing startup script).
``FakeCompute.fail_next`` documents each kind.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

OP_FAULTS = ("stockout", "stockout_details", "quota", "spot_unsupported")
BULK_FAULTS = ("bulk_partial",)  # bulkInsert only
HTTP_FAULTS = ("rate_limit", "unavailable", "lost_response", "stockout_http")
# Per instance, taken when it is inserted: ``never_boot`` stays PROVISIONING forever (nothing
# billed, no worker); ``silent_worker`` boots to RUNNING (billed) but no worker starts, as with
# a broken image or startup script, so its status never appears in the bucket.
BOOT_FAULTS = ("never_boot", "silent_worker", "startup_fails", "startup_fails_silently")
FAULT_KINDS = OP_FAULTS + BULK_FAULTS + HTTP_FAULTS + BOOT_FAULTS
CAUSES = ("stockout", "quota")  # what a bulk_partial fault fails its first instance with


@dataclass
class Fault:
    """One armed fault: what it is, how many calls it still fails, and which calls it meets."""

    kind: str
    count: int
    zone: str | None
    op: str | None  # only requests of this API method (insert, get, list, ...)
    http_status: int | None
    quota_metric: str
    spot: bool | None = None  # insert faults: only Spot (True) or only on-demand (False) VMs
    cause: str = "stockout"  # bulk_partial: what fails the instance (stockout or quota)


class FaultBook:
    """The armed faults and how many of each were served (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._armed: list[Fault] = []
        self._served: dict[str, int] = {}  # fault kind -> faults actually served

    def arm(self, fault: Fault) -> None:
        """Arm ``fault``; a kind, cause or count no fault has is a ValueError."""
        if fault.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {fault.kind!r}; one of {FAULT_KINDS}")
        if fault.cause not in CAUSES:
            raise ValueError(f"unknown cause {fault.cause!r}; stockout or quota")
        if fault.count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._armed.append(fault)

    def take(self, kinds: tuple[str, ...], zone: str | None, op: str,
             spot: bool | None = None, explicit: bool = False) -> Fault | None:
        """The next armed fault for this call, if any. A fault armed for no method reaches the
        instance and operation methods only: the reads the doctor makes (the catalogue, the
        project's APIs) only meet faults armed for their own method (``explicit``)."""
        with self._lock:
            for fault in self._armed:
                if (fault.kind in kinds and fault.zone in (None, zone)
                        and (fault.op == op or (fault.op is None and not explicit))
                        and fault.spot in (None, spot)):
                    fault.count -= 1
                    if fault.count <= 0:
                        self._armed.remove(fault)
                    self._served[fault.kind] = self._served.get(fault.kind, 0) + 1
                    return fault
        return None

    def take_boot(self, zone: str) -> str | None:
        """The next boot fault armed for an instance inserted in ``zone``, if any."""
        fault = self.take(BOOT_FAULTS, zone, "boot")
        return fault.kind if fault else None

    def served(self) -> dict[str, int]:
        """Fault kind -> how many were actually served (a request failed, an instance hung)."""
        with self._lock:
            return dict(self._served)


def operation_error(fault: Fault, project: str, zone: str, machine: str) -> dict:
    """The error an operation fault ends an insert's operation with: its HTTP status and
    message, and the error detail (code, message, quota info) as Compute Engine words it."""
    if fault.kind == "spot_unsupported":
        return {"http": 400, "http_message": "BAD REQUEST", "detail": {
            "code": "UNSUPPORTED_OPERATION",
            "message": f"The SPOT provisioning model is not supported for machine type "
                       f"'{machine}' in zone '{zone}'."}}
    if fault.kind == "quota":
        region = zone.rsplit("-", 1)[0]
        metric = fault.quota_metric
        return {"http": 403, "http_message": "FORBIDDEN", "detail": {
            "code": "QUOTA_EXCEEDED",
            "message": f"Quota '{metric}' exceeded.  Limit: 24.0 in region {region}.",
            "errorDetails": [{"quotaInfo": {
                "metricName": f"compute.googleapis.com/{metric.lower()}",
                "limitName": f"{metric}-per-project-region",
                "dimensions": {"region": region}, "limit": 24}}]}}
    code = ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" if fault.kind == "stockout_details"
            else "ZONE_RESOURCE_POOL_EXHAUSTED")
    return {"http": 503, "http_message": "SERVICE UNAVAILABLE", "detail": {
        "code": code,
        "message": f"The zone 'projects/{project}/zones/{zone}' does not have enough "
                   f"resources available to fulfill the request.  '(resource type:"
                   f"compute)'. Try a different zone, or try again later. ({machine})"}}


def http_fault(fault: Fault, project: str, zone: str | None) -> tuple[int, dict]:
    """The status and body an HTTP fault answers a request with."""
    if fault.kind == "stockout_http":  # the cause in the message alone
        message = (f"The zone 'projects/{project}/zones/{zone}' does not have enough resources "
                   "available to fulfill the request.  Try a different zone, or try again later.")
        return 503, {"error": {"code": 503, "message": message, "errors": [
            {"message": message, "domain": "global", "reason": "backendError"}]}}
    if fault.kind == "rate_limit":
        status = fault.http_status or 403
        message = ("Rate Limit Exceeded" if status == 403 else
                   "Quota exceeded for quota metric 'Queries' and limit 'Queries per minute' "
                   "of service 'compute.googleapis.com'.")
        return status, {"error": {"code": status, "message": message, "errors": [
            {"message": message, "domain": "usageLimits", "reason": "rateLimitExceeded"}]}}
    status = fault.http_status or 503
    return status, {"error": {"code": status, "message": "The service is currently unavailable.",
                              "errors": [{"message": "The service is currently unavailable.",
                                          "domain": "global", "reason": "backendError"}]}}
