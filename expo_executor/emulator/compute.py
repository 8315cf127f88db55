"""A fake Compute Engine REST server on a loopback port, for the real ``google-cloud-compute`` client.

It speaks the JSON the real API speaks (camelCase, int64 as strings, Operation objects, the
``{"error": {"code", "message", "errors": [{"reason"}]}}`` bodies), so what it catches are the
mistakes a mock of our own code cannot: wrong URLs, wrong field names, a missing ``requestId``,
an operation polled through the client's hidden Google-bound operations client. Every request
is first checked against Google's published discovery document (``discovery``: unknown fields
and parameters, wrong JSON types, unknown enum values), then against what the document cannot
say (``validate_instance``: machine types, labels, Spot rules, GPUs).

An instance is a worker process in its own session: PROVISIONING -> (boot delay) -> RUNNING
starts a ``FakeMetadata`` server for it and launches the worker pointed at it through
``GCE_METADATA_HOST``. Deleting, preempting or expiring (``scheduling.maxRunDuration``) an
instance powers it off with ``procs.power_off``; a worker that exits on its own leaves the
instance TERMINATED, as a guest poweroff does.

Tests and a separate process steer it through a control API, both as methods and as HTTP routes
under ``/_fake/``: ``preempt`` (the metadata notice and an ACPI soft-off), ``withhold`` (a zone
without a machine or GPU type), ``fail_next`` (stockout, quota, Spot unsupported, a partial bulk
insert, rate limit, unavailable, a stockout said in a 503's message, a lost response, an
instance that never boots, one whose worker never reports, one whose startup script fails),
``faults`` (how many of each were served), ``chaos`` (seeded exponential Spot lifetimes),
``requests`` (the request log) and ``instances()``. It is strict by default (the document's
checks; new instances listed ``list_delay`` s after their insert, as on the real API).
Instance identity tokens are signed by ``.identity`` (emulator/identity.py), whose
certificates it serves at Google's ``/oauth2/v1/certs``.
``python -m expo_executor.emulator.compute --port P --scratch DIR`` serves it until SIGTERM/SIGINT.

The same server answers what ``expocloud doctor`` reads before a run: Compute's catalogue
(``machineTypes``, ``acceleratorTypes``, ``regions`` with their quotas, ``routers``:
``compute_catalogue.py``, steered through ``.catalogue`` and ``withhold``) and the project's
other APIs under their real paths (Service Usage, Resource Manager, IAM, tokeninfo:
``project_apis.py``, steered through ``.project``; ``/_fake/project`` and ``/_fake/catalogue``
from another process). While the project's Compute API is disabled every Compute call answers
403 SERVICE_DISABLED, and a permission ``project.deny`` takes away refuses the calls needing it.
"""

from __future__ import annotations

import argparse
import copy
import fnmatch
import heapq
import itertools
import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from expo_executor.emulator import project_apis
from expo_executor.emulator.api_error import ApiError, permission_denied
from expo_executor.emulator.compute_catalogue import ComputeCatalogue
from expo_executor.emulator.discovery import check_request, document
from expo_executor.emulator.identity import CERTS_PATH, IdentityIssuer
from expo_executor.emulator.metadata import FakeMetadata
from expo_executor.emulator.partial_response import field_tree, partial_response
from expo_executor.processes.sessions import power_off

GOOGLE = "https://www.googleapis.com/compute/v1/"
API_PREFIX = "/compute/v1/projects/"
WAIT_CAP_S = 30.0  # operations.wait answers after this long even if the operation is not DONE
MAX_RESULTS = 500
LIST_DELAY_S = 1.0  # a new instance is listed this long after its insert (a realistic default)
REQUEST_LOG_MAX = 50_000  # a long emulated run polls for hours: the oldest half is dropped
NAME_RE = re.compile(r"[a-z]([-a-z0-9]{0,61}[a-z0-9])?")
LABEL_KEY_RE = re.compile(r"[a-z][a-z0-9_-]{0,62}")
LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{0,63}")
METADATA_KEY_RE = re.compile(r"[a-zA-Z0-9_-]{1,128}")
METADATA_MAX_BYTES = 512 * 1024
OP_FAULTS = ("stockout", "stockout_details", "quota", "spot_unsupported")
BULK_FAULTS = ("bulk_partial",)  # bulkInsert only
HTTP_FAULTS = ("rate_limit", "unavailable", "lost_response", "stockout_http")
# Per instance, taken when it is inserted: ``never_boot`` stays PROVISIONING forever (nothing
# billed, no worker); ``silent_worker`` boots to RUNNING (billed) but no worker starts, as with
# a broken image or startup script, so its status never appears in the bucket.
BOOT_FAULTS = ("never_boot", "silent_worker", "startup_fails", "startup_fails_silently")
FAULT_KINDS = OP_FAULTS + BULK_FAULTS + HTTP_FAULTS + BOOT_FAULTS

CommandFn = Callable[[str, str, Path], list[str]]


def _now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _zone_url(project: str, zone: str) -> str:
    return f"{GOOGLE}projects/{project}/zones/{zone}"


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def _int(value: Any, what: str) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ApiError(400, "invalid", f"Invalid value for field '{what}': '{value}'.") from None


# -- filters -----------------------------------------------------------------------------------
_TOKEN_RE = re.compile(r"""\s*(?:(\()|(\))|"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|(!=|>=|<=|=|>|<|:|~)|([^\s()=!<>:~"']+))""")


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs: ( ) str op word."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"unexpected character at {pos}")
        pos = match.end()
        lpar, rpar, dq, sq, op, word = match.groups()
        if lpar:
            out.append(("(", lpar))
        elif rpar:
            out.append((")", rpar))
        elif dq is not None or sq is not None:
            out.append(("str", dq if dq is not None else sq))
        elif op:
            out.append(("op", op))
        elif word:
            out.append(("word", word))
    return out


def _lookup(resource: dict, path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _compare(value: Any, op: str, literal: str) -> bool:
    if op == ":":
        if literal == "*":
            return value is not None
        if isinstance(value, list):
            return any(_text(v) == literal for v in value)
        return value is not None and literal in _text(value)
    if op in ("eq", "ne"):
        found = value is not None and re.fullmatch(literal, _text(value)) is not None
        return found if op == "eq" else not found
    if value is None:
        return op == "!="
    text = _text(value)
    if op in ("=", "!="):
        equal = fnmatch.fnmatchcase(text, literal) if "*" in literal else text == literal
        return equal if op == "=" else not equal
    try:
        left, right = float(text), float(literal)
    except ValueError:
        left, right = text, literal  # type: ignore[assignment]
    return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right}[op]


class _FilterParser:
    """AIP-160 as Compute uses it: ``(a = "x") (b:*)``, AND/OR/NOT, and the legacy
    ``field eq regex`` / ``field ne regex`` form."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.pos = 0

    def parse(self) -> Callable[[dict], bool]:
        if not self.toks:
            return lambda _r: True
        expr = self._and()
        if self.pos != len(self.toks):
            raise ValueError(f"unexpected {self.toks[self.pos][1]!r}")
        return expr

    def _peek(self) -> tuple[str, str] | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def _next(self) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            raise ValueError("unexpected end of filter")
        self.pos += 1
        return tok

    def _and(self) -> Callable[[dict], bool]:
        parts = [self._or()]
        while (tok := self._peek()) is not None and tok[0] != ")":
            if tok == ("word", "AND"):
                self.pos += 1
            parts.append(self._or())
        return lambda r: all(p(r) for p in parts)

    def _or(self) -> Callable[[dict], bool]:
        parts = [self._unary()]
        while self._peek() == ("word", "OR"):
            self.pos += 1
            parts.append(self._unary())
        return lambda r: any(p(r) for p in parts)

    def _unary(self) -> Callable[[dict], bool]:
        tok = self._next()
        if tok == ("word", "NOT"):
            inner = self._unary()
            return lambda r: not inner(r)
        if tok[0] == "(":
            inner = self._and()
            if self._next()[0] != ")":
                raise ValueError("missing )")
            return inner
        if tok[0] != "word":
            raise ValueError(f"expected a field name, got {tok[1]!r}")
        path = tok[1]
        op_tok = self._next()
        if op_tok[0] == "op" and op_tok[1] != "~":
            op = op_tok[1]
        elif op_tok in (("word", "eq"), ("word", "ne")):
            op = op_tok[1]
        else:
            raise ValueError(f"expected an operator after {path}")
        literal = self._next()
        if literal[0] not in ("str", "word"):
            raise ValueError(f"expected a value after {path} {op}")
        return lambda r: _compare(_lookup(r, path), op, literal[1])


def compile_filter(text: str) -> Callable[[dict], bool]:
    """A predicate over resource JSON; a filter the API would reject raises ApiError 400."""
    try:
        return _FilterParser(text).parse()
    except (ValueError, re.error) as err:
        raise ApiError(400, "invalid", f"Invalid value for field 'filter': '{text}'. "
                                       f"Invalid list filter expression: {err}.") from None


def _page(items: list, query: dict[str, str]) -> tuple[list, str | None]:
    """One page of ``items`` and the token of the next one."""
    size = _int(query.get("maxResults", MAX_RESULTS), "maxResults")
    size = max(1, min(size, MAX_RESULTS))
    token = query.get("pageToken", "")
    start = 0
    if token:
        if not token.startswith("pg-"):
            raise ApiError(400, "invalid", f"Invalid value for field 'pageToken': '{token}'.")
        start = _int(token[3:], "pageToken")
    chunk = items[start:start + size]
    nxt = f"pg-{start + size}" if start + size < len(items) else None
    return chunk, nxt


# -- request validation --------------------------------------------------------------------------
def _validate_labels(labels: dict) -> None:
    if len(labels) > 64:
        raise ApiError(400, "invalid", "Invalid value for field 'resource.labels': too many labels.")
    for key, value in labels.items():
        if not LABEL_KEY_RE.fullmatch(str(key)) or not LABEL_VALUE_RE.fullmatch(str(value)):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.labels': "
                                           f"'{key}'='{value}'. Label keys and values may only "
                                           "contain lowercase letters, digits, '_' and '-'.")


def _validate_metadata(metadata: dict) -> None:
    items = metadata.get("items") or []
    keys = [item.get("key", "") for item in items]
    if len(set(keys)) != len(keys):
        raise ApiError(400, "invalid", "Invalid value for field 'resource.metadata': duplicate keys.")
    for key in keys:
        if not METADATA_KEY_RE.fullmatch(key):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.metadata': "
                                           f"key '{key}'.")
    size = sum(len(item.get("key", "")) + len(item.get("value", "")) for item in items)
    if size > METADATA_MAX_BYTES:
        raise ApiError(400, "invalid", "Metadata exceeds the 512 KB limit.")


def _validate_scheduling(scheduling: dict) -> None:
    model = scheduling.get("provisioningModel", "STANDARD")
    if model not in ("STANDARD", "SPOT"):
        raise ApiError(400, "invalid", f"Invalid value for field "
                                       f"'resource.scheduling.provisioningModel': '{model}'.")
    spot = model == "SPOT" or scheduling.get("preemptible") is True
    if spot and scheduling.get("automaticRestart") is True:
        raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                       "automaticRestart': 'true'. Spot and preemptible "
                                       "instances cannot be automatically restarted.")
    if spot and scheduling.get("onHostMaintenance", "TERMINATE") != "TERMINATE":
        raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                       "onHostMaintenance': Spot and preemptible instances "
                                       "must use TERMINATE.")
    action = scheduling.get("instanceTerminationAction")
    if action not in (None, "STOP", "DELETE"):
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.scheduling."
                                       f"instanceTerminationAction': '{action}'.")
    if "maxRunDuration" in scheduling:
        seconds = _int(scheduling["maxRunDuration"].get("seconds", 0),
                       "resource.scheduling.maxRunDuration.seconds")
        if not 30 <= seconds <= 120 * 86400:
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.scheduling."
                                           f"maxRunDuration': '{seconds}s'.")
        if action is None:
            raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                           "instanceTerminationAction': ''. "
                                           "instanceTerminationAction must be specified when "
                                           "maxRunDuration or terminationTime is set.")


def _validate_machine_type(machine_type: str, zone: str, bulk: bool) -> str:
    """The machine type's name; insert wants a (partial) URL, bulkInsert a bare name."""
    if not machine_type:
        raise ApiError(400, "required", "Required field 'resource.machineType' not specified")
    if bulk:
        if "/" in machine_type:
            raise ApiError(400, "invalid", f"Invalid value for field 'instanceProperties."
                                           f"machineType': '{machine_type}'. This field only "
                                           "accepts a machine type name.")
        return machine_type
    match = re.search(r"(?:^|/)zones/([^/]+)/machineTypes/([^/]+)$", machine_type)
    if match is None:
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.machineType': "
                                       f"'{machine_type}'. The URL is malformed.")
    if match.group(1) != zone:
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.machineType': "
                                       f"'{machine_type}'. Machine type zone must match the "
                                       f"instance zone '{zone}'.")
    return match.group(2)


# Accelerator types of the fake's zones, with the counts N1 takes and its most vCPUs per count;
# L4 and A100 exist but come only with their machine types (g2, a2), never as guest accelerators.
N1_ACCELERATORS = {"nvidia-tesla-t4": {1: 24, 2: 48, 4: 96},
                   "nvidia-tesla-v100": {1: 12, 2: 24, 4: 48, 8: 96},
                   "nvidia-tesla-p4": {1: 24, 2: 48, 4: 96},
                   "nvidia-tesla-p100": {1: 16, 2: 32, 4: 96}}
ACCELERATOR_TYPES = frozenset({*N1_ACCELERATORS, "nvidia-l4", "nvidia-tesla-a100"})
GPU_MACHINE_FAMILIES = ("a2", "a3", "g2")  # they come with GPUs


def _accelerator_name(value: str, zone: str, bulk: bool, field: str) -> str:
    """The accelerator type's name; insert wants a (partial) URL, bulkInsert a bare name."""
    if bulk:
        if "/" in value:
            raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{value}'. This "
                                           "field only accepts an accelerator type name.")
        return value
    match = re.search(r"(?:^|/)zones/([^/]+)/acceleratorTypes/([^/]+)$", value)
    if match is None:
        raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{value}'. The URL "
                                       "is malformed.")
    if match.group(1) != zone:
        raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{value}'. "
                                       f"Accelerator type zone must match the instance zone "
                                       f"'{zone}'.")
    return match.group(2)


def _validate_accelerators(body: dict, zone: str, machine: str, bulk: bool) -> None:
    """GPUs only where Compute Engine has them: known types, on N1 in its counts and vCPU
    limits; and no live migration for a VM with GPUs (its own or its machine type's)."""
    accelerators = body.get("guestAccelerators") or []
    for index, acc in enumerate(accelerators):
        field = f"resource.guestAccelerators[{index}].acceleratorType"
        name = _accelerator_name(acc.get("acceleratorType", ""), zone, bulk, field)
        count = _int(acc.get("acceleratorCount", 0), f"resource.guestAccelerators[{index}]."
                                                     "acceleratorCount")
        if name not in ACCELERATOR_TYPES:
            raise ApiError(404, "notFound", f"The resource 'projects/-/zones/{zone}/"
                                            f"acceleratorTypes/{name}' was not found")
        family = machine.split("-", 1)[0]
        limits = N1_ACCELERATORS.get(name, {}) if family == "n1" else {}
        if not limits:
            raise ApiError(400, "invalid", f"Invalid value for field '{field}': '{name}'. "
                                           f"Accelerator type {name} is not supported with "
                                           f"machine type {machine}.")
        vcpus = re.fullmatch(r"n1-[a-z]+-(\d+)", machine)
        if count not in limits or (vcpus and int(vcpus.group(1)) > limits[count]):
            raise ApiError(400, "invalid", f"Invalid value for field 'resource.guestAccelerators"
                                           f"[{index}].acceleratorCount': '{count}'. "
                                           f"{machine} cannot take {count} x {name}.")
    gpus = bool(accelerators) or machine.split("-", 1)[0] in GPU_MACHINE_FAMILIES
    maintenance = (body.get("scheduling") or {}).get("onHostMaintenance", "MIGRATE")
    if gpus and maintenance != "TERMINATE":
        raise ApiError(400, "invalid", "Invalid value for field 'resource.scheduling."
                                       "onHostMaintenance': 'MIGRATE'. Instances with guest "
                                       "accelerators do not support live migration.")


_API_ROOT = r"(?:https://www\.googleapis\.com/compute/v1/)?(?:projects/[^/]+/)?"
_NETWORK_URL = re.compile(rf"{_API_ROOT}global/networks/[^/]+")
_SUBNETWORK_URL = re.compile(rf"{_API_ROOT}regions/(?P<region>[^/]+)/subnetworks/[^/]+")


def _validate_network_interfaces(body: dict, zone: str) -> None:
    """Networks and subnetworks are URLs, full or partial: a bare name is malformed (what the
    real API answers), and a subnetwork must be in the VM's region."""
    for i, nic in enumerate(body.get("networkInterfaces") or []):
        for key, pattern in (("network", _NETWORK_URL), ("subnetwork", _SUBNETWORK_URL)):
            value = nic.get(key)
            if value is not None and not pattern.fullmatch(value):
                raise ApiError(400, "invalid", f"Invalid value for field 'resource."
                                               f"networkInterfaces[{i}].{key}': '{value}'. "
                                               "The URL is malformed.")
        match = _SUBNETWORK_URL.fullmatch(nic.get("subnetwork") or "")
        if match and match["region"] != zone.rsplit("-", 1)[0]:
            raise ApiError(400, "invalid", f"Invalid value for field 'resource."
                                           f"networkInterfaces[{i}].subnetwork': "
                                           f"'{nic['subnetwork']}'. The subnetwork must be in "
                                           "the instance's region.")


def validate_instance(body: dict, zone: str, bulk: bool = False) -> str:
    """Reject what the real API rejects; return the machine type's name."""
    name = body.get("name", "")
    if not NAME_RE.fullmatch(name or ""):
        raise ApiError(400, "invalid", f"Invalid value for field 'resource.name': '{name}'. "
                                       "Must be a match of regex '(?:[a-z](?:[-a-z0-9]{0,61}"
                                       "[a-z0-9])?)'")
    machine = _validate_machine_type(body.get("machineType", ""), zone, bulk)
    disks = body.get("disks") or []
    boot = [d for d in disks if d.get("boot")]
    if len(boot) != 1 or not (boot[0].get("source")
                               or (boot[0].get("initializeParams") or {}).get("sourceImage")):
        raise ApiError(400, "invalid", "Invalid value for field 'resource.disks': exactly one "
                                       "boot disk with a source or initializeParams.sourceImage "
                                       "is required.")
    if not body.get("networkInterfaces"):
        raise ApiError(400, "invalid", "Invalid value for field 'resource.networkInterfaces': "
                                       "At least one network interface is required.")
    _validate_network_interfaces(body, zone)
    _validate_labels(body.get("labels") or {})
    _validate_metadata(body.get("metadata") or {})
    _validate_scheduling(body.get("scheduling") or {})
    _validate_accelerators(body, zone, machine, bulk)
    return machine


# -- state -----------------------------------------------------------------------------------
@dataclass
class _Vm:
    project: str
    zone: str
    name: str
    id: str
    uid: int
    body: dict
    machine: str
    created: str
    scratch: Path
    status: str = "PROVISIONING"
    pending_op: str | None = None  # the insert operation, while it is not DONE
    boot_fault: str | None = None  # one of BOOT_FAULTS, injected at insert
    stopping: str | None = None  # why we are powering it off: delete, preempt, max-run, guest
    proc: subprocess.Popen | None = None
    meta: FakeMetadata | None = None
    powered_off: bool = False
    power_lock: threading.Lock = field(default_factory=threading.Lock)
    # The ledger (epoch seconds): insert accepted, booted (GCE bills from here), powered off.
    inserted_at: float = field(default_factory=time.time)
    listed_from: float = 0.0  # time.monotonic() from which list and aggregatedList show it
    running_at: float | None = None
    ended_at: float | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.project, self.zone, self.name)

    @property
    def scheduling(self) -> dict:
        return self.body.get("scheduling") or {}

    @property
    def spot(self) -> bool:
        return (self.scheduling.get("provisioningModel") == "SPOT"
                or self.scheduling.get("preemptible") is True)

    @property
    def attributes(self) -> dict[str, str]:
        items = (self.body.get("metadata") or {}).get("items") or []
        return {item["key"]: item.get("value", "") for item in items}

    def termination_action(self) -> str:
        return self.scheduling.get("instanceTerminationAction") or (
            "DELETE" if self.spot else "STOP")

    def resource(self) -> dict:
        """The instance as ``instances.get`` returns it."""
        out = copy.deepcopy(self.body)
        zone_url = _zone_url(self.project, self.zone)
        metadata = out.get("metadata") or {}
        metadata.update(kind="compute#metadata", fingerprint="ZmFrZQ==")
        out.update(
            kind="compute#instance", id=self.id, name=self.name, zone=zone_url,
            status=self.status, creationTimestamp=self.created,
            machineType=f"{zone_url}/machineTypes/{self.machine}",
            selfLink=f"{zone_url}/instances/{self.name}",
            labels=out.get("labels") or {}, labelFingerprint="ZmFrZQ==", metadata=metadata,
            scheduling=out.get("scheduling") or {"onHostMaintenance": "MIGRATE",
                                                  "automaticRestart": True,
                                                  "provisioningModel": "STANDARD"},
        )
        return out


@dataclass
class _Fault:
    kind: str
    count: int
    zone: str | None
    op: str | None  # only requests of this API method (insert, get, list, ...)
    http_status: int | None
    quota_metric: str
    spot: bool | None = None  # insert faults: only Spot (True) or only on-demand (False) VMs
    cause: str = "stockout"  # bulk_partial: what fails the instance (stockout or quota)


class _Timers:
    """One thread runs every delayed action (boots, operation completions, expiries)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name="fake-compute-timers", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def call_later(self, delay: float, fn: Callable[[], None]) -> None:
        with self._cond:
            heapq.heappush(self._heap, (time.monotonic() + max(0.0, delay), next(self._seq), fn))
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._stopped:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        break
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
                if self._stopped:
                    return
                fn = heapq.heappop(self._heap)[2]
            try:
                fn()
            except Exception:  # noqa: BLE001 - a fake's bug must not stop its clock
                traceback.print_exc()


def _service_account(body: dict) -> str:
    """The email of the service account an instance was created with (its first)."""
    accounts = body.get("serviceAccounts") or [{}]
    return accounts[0].get("email") or "default"


def _spawn(fn: Callable[..., object], *args: object) -> None:
    threading.Thread(target=fn, args=args, daemon=True).start()


# -- the server -----------------------------------------------------------------------------
class FakeCompute:
    """The fake Compute Engine (thread-safe). ``start()``, point a client at ``endpoint``, ``stop()``.

    ``op_delay``: when > 0, insert and bulkInsert answer a RUNNING operation that turns DONE
    (or fails) that many seconds later, catching clients that treat RUNNING as success.
    ``command(name, metadata_host, scratch) -> argv`` replaces the worker command line.
    ``max_run_scale`` shrinks ``maxRunDuration`` (validated, as by GCE, to be >= 30 s) so that a
    test can see it enforced in a fraction of a second. ``list_delay``: as on the real API, a
    new instance appears in ``list`` and ``aggregatedList`` only that many seconds after its
    insert was accepted (``get`` and ``delete`` find it at once); 0 only where a test asks.
    """

    def __init__(self, scratch_root: Path, *, port: int = 0, boot_delay: float = 0.0,
                 notice_s: float = 1.0, python: str = sys.executable,
                 command: CommandFn | None = None, op_delay: float = 0.0,
                 max_run_scale: float = 1.0, list_delay: float = LIST_DELAY_S) -> None:
        self.scratch_root = Path(scratch_root)
        self.port = port
        self.boot_delay = boot_delay
        self.notice_s = notice_s
        self.python = python
        self.command = command
        self.op_delay = op_delay
        self.max_run_scale = max_run_scale
        self.list_delay = list_delay
        self._lock = threading.RLock()
        self._op_changed = threading.Condition(self._lock)
        self._vms: dict[tuple[str, str, str], _Vm] = {}
        self._ledger: list[_Vm] = []  # every instance ever inserted, for ledger()
        self._ops: dict[tuple[str, str], dict[str, dict]] = {}  # (project, zone) -> name -> op
        self._by_request_id: dict[tuple[str, str], tuple[str, str]] = {}
        self._faults: list[_Fault] = []
        self._withheld: dict[str, set[str]] = {}  # zone -> machine and accelerator types
        # the project's APIs and identities, and what Compute offers (both served here too)
        self.project = project_apis.FakeProjectApis()
        self.catalogue = ComputeCatalogue(self._withheld_in)
        # Google's signer of instance identity tokens: every instance's metadata server mints
        # with it, and its certificates are served at Google's path (/oauth2/v1/certs)
        self.identity = IdentityIssuer()
        self._served: dict[str, int] = {}  # fault kind -> faults actually served
        self._requests: list[dict] = []
        self._uids = itertools.count(1)
        self._chaos: tuple[float, int, int] | None = None  # mean life, seed, generation
        self._chaos_gen = itertools.count(1)
        self._timers = _Timers()
        self._server: ThreadingHTTPServer | None = None
        self._stopped = False
        self._meta_stoppers: list[threading.Thread] = []

    # -- lifecycle -------------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        assert self._server is not None, "start() first"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeCompute:
        document()  # a missing discovery document fails here, with its fix, not as a 500 later
        self.scratch_root.mkdir(parents=True, exist_ok=True)
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), _handler_class(self))
        self._server.daemon_threads = True
        self._timers.start()
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                         name="fake-compute", daemon=True).start()
        return self

    def stop(self) -> None:
        """Power off every instance (they end TERMINATED) and stop serving; safe twice."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._chaos = None
            vms = list(self._vms.values())
            for vm in vms:
                vm.stopping = vm.stopping or "shutdown"
            self._op_changed.notify_all()
        self._timers.stop()
        threads = [threading.Thread(target=self._power_off, args=(vm,)) for vm in vms]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with self._lock:
            for vm in vms:
                vm.status = "TERMINATED"
            stoppers = list(self._meta_stoppers)
        for stopper in stoppers:
            stopper.join()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()

    # -- control API -----------------------------------------------------------------------
    @property
    def requests(self) -> list[dict]:
        """Every Compute API request so far: method, path, op, zone, query, json, time, and
        the problems the discovery document found in it (answered 400; [] for a valid one)."""
        with self._lock:
            return copy.deepcopy(self._requests)

    def ledger(self) -> list[dict]:
        """Every instance ever inserted, with when it was inserted, booted and powered off
        (``ended`` None while it runs): what a bill would be computed from."""
        with self._lock:
            return [{"name": vm.name, "zone": vm.zone, "machineType": vm.machine,
                     "spot": vm.spot, "labels": dict(vm.body.get("labels") or {}),
                     "inserted": vm.inserted_at, "running": vm.running_at,
                     "ended": vm.ended_at} for vm in self._ledger]

    def clear_requests(self) -> None:
        with self._lock:
            self._requests.clear()

    def instances(self) -> dict[str, dict]:
        """name -> zone, status, labels, scheduling, machineType, metadata (key -> value)."""
        with self._lock:
            return {vm.name: {"project": vm.project, "zone": vm.zone, "status": vm.status,
                              "id": vm.id, "labels": dict(vm.body.get("labels") or {}),
                              "scheduling": copy.deepcopy(vm.scheduling),
                              "machineType": vm.machine, "metadata": vm.attributes}
                    for vm in self._vms.values()}

    def fail_next(self, kind: str, count: int = 1, zone: str | None = None, *,
                  op: str | None = None, http_status: int | None = None,
                  quota_metric: str = "CPUS", spot: bool | None = None,
                  cause: str = "stockout") -> None:
        """Make the next ``count`` matching calls (or instances) fail.

        stockout / stockout_details / quota / spot_unsupported: the next insert or bulkInsert
        operations in ``zone`` (any zone if None) end with
        ZONE_RESOURCE_POOL_EXHAUSTED[_WITH_DETAILS], QUOTA_EXCEEDED or UNSUPPORTED_OPERATION.
        bulk_partial: the next bulkInsert ends with the summary VM_MIN_COUNT_NOT_REACHED alone,
        its first instance's operation with ``cause`` (stockout or quota). rate_limit (403
        rateLimitExceeded, or ``http_status=429``), unavailable (503), stockout_http (503
        whose message alone says the zone is out of resources) and lost_response (the request
        is applied, then answered 503): the
        next API requests in ``zone``, of API method ``op`` (insert, bulkInsert, get, list,
        delete, aggregatedList, operations.get, operations.list, operations.wait) if given.
        never_boot / silent_worker / startup_fails / startup_fails_silently: the next
        ``count`` instances inserted in ``zone`` (one each, bulk inserts too) never leave
        PROVISIONING, or run with no worker, or fail their startup script (it leaves its log's
        end in the bucket, or nothing, then powers the VM off: TERMINATED). ``spot``
        (True or False) limits a fault on inserts to Spot or to on-demand instances, as a
        stockout of Spot capacity alone.
        """
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; one of {FAULT_KINDS}")
        if cause not in ("stockout", "quota"):
            raise ValueError(f"unknown cause {cause!r}; stockout or quota")
        if count < 1:
            raise ValueError("count must be at least 1")
        with self._lock:
            self._faults.append(_Fault(kind, count, zone, op, http_status, quota_metric, spot,
                                       cause))

    def withhold(self, zone: str, *names: str) -> None:
        """``zone`` does not offer these machine types or accelerator types: inserts asking
        for them there are refused with the real API's 400 (another zone may offer them), and
        ``machineTypes.get``/``acceleratorTypes.get`` there answer 404, as the real API's do."""
        with self._lock:
            self._withheld.setdefault(zone, set()).update(names)

    def _withheld_in(self, zone: str) -> set[str]:
        with self._lock:
            return set(self._withheld.get(zone, set()))

    def _check_offered(self, zone: str, body: dict, machine: str, bulk: bool) -> None:
        """The real API's 400 for a machine type or GPU that ``zone`` does not offer."""
        withheld = self._withheld.get(zone, set())
        field = "instanceProperties" if bulk else "resource"
        if machine in withheld:
            raise ApiError(400, "invalid", f"Invalid value for field '{field}.machineType': "
                                           f"'{body['machineType']}'. Machine type with name "
                                           f"'{machine}' does not exist in zone '{zone}'.")
        for i, accelerator in enumerate(body.get("guestAccelerators") or []):
            link = accelerator.get("acceleratorType", "")
            if link.rsplit("/", 1)[-1] in withheld:
                raise ApiError(400, "invalid", f"Invalid value for field '{field}."
                                               f"guestAccelerators[{i}].acceleratorType': "
                                               f"'{link}'. Accelerator type "
                                               f"'{link.rsplit('/', 1)[-1]}' does not exist in "
                                               f"zone '{zone}'.")

    def faults_served(self) -> dict[str, int]:
        """Fault kind -> how many were actually served (a request failed, an instance hung)."""
        with self._lock:
            return dict(self._served)

    def chaos(self, spot_mean_life_s: float, seed: int) -> None:
        """Preempt each RUNNING Spot instance after an exponential life (mean
        ``spot_mean_life_s``) drawn from ``Random(f"{seed}:{name}")``; <= 0 turns chaos off."""
        with self._lock:
            if spot_mean_life_s <= 0:
                self._chaos = None
                return
            self._chaos = (float(spot_mean_life_s), int(seed), next(self._chaos_gen))
            for vm in self._vms.values():
                if vm.status == "RUNNING" and vm.spot:
                    self._arm_chaos(vm)

    def preempt(self, name: str, action: str | None = None, *, zone: str | None = None,
                project: str | None = None) -> bool:
        """Preempt an instance as GCE does: the metadata notice and an ACPI soft-off (the
        worker gets SIGTERM, as services do when the guest shuts down), ``notice_s`` of grace,
        power off, then TERMINATED or deleted per ``action`` (default: the instance's
        instanceTerminationAction; DELETE for Spot, STOP otherwise); a zone operation
        ``compute.instances.preempted`` records it. False if it was already stopping."""
        with self._lock:
            vm = self._find(name, zone, project)
            if vm is None:
                raise KeyError(f"no instance {name!r}")
            return self._preempt_vm(vm, action)

    # -- instance lifecycle ----------------------------------------------------------------
    def _find(self, name: str, zone: str | None, project: str | None) -> _Vm | None:
        for vm in self._vms.values():
            if vm.name == name and zone in (None, vm.zone) and project in (None, vm.project):
                return vm
        return None

    def _current(self, vm: _Vm) -> bool:
        return self._vms.get(vm.key) is vm

    def _preempt_vm(self, vm: _Vm, action: str | None) -> bool:
        """Called with the lock held; drops it while the notice runs."""
        if vm.stopping is not None or vm.status == "TERMINATED":
            return False
        action = (action or vm.termination_action()).upper()
        vm.stopping, vm.status = "preempt", "STOPPING"
        op = self._new_op(vm.project, vm.zone, "compute.instances.preempted", vm.name,
                          target_id=vm.id, done=False, user="system")
        meta, proc = vm.meta, vm.proc
        self._lock.release()
        try:
            if meta is not None:
                meta.preempt()
            if proc is not None and proc.poll() is None:
                # ACPI soft-off: the guest shuts down and its services get SIGTERM, then the
                # power goes ``notice_s`` later (about 30 s on GCE)
                proc.send_signal(signal.SIGTERM)
            time.sleep(self.notice_s)
            self._power_off(vm)
        finally:
            self._lock.acquire()
        if self._current(vm):
            if action == "DELETE":
                del self._vms[vm.key]
            else:
                vm.status = "TERMINATED"
        self._finish_op(op)
        return True

    def _power_off(self, vm: _Vm) -> None:
        """Pull the plug (idempotent): the worker and every job session die, metadata stops."""
        with vm.power_lock:
            if vm.powered_off:
                return
            vm.powered_off = True
            vm.ended_at = vm.ended_at or time.time()
            if vm.proc is not None:
                power_off(vm.proc, vm.scratch)
            if vm.meta is not None:  # its shutdown takes up to half a second: not in our way
                stopper = threading.Thread(target=vm.meta.stop, daemon=True)
                stopper.start()
                with self._lock:
                    self._meta_stoppers.append(stopper)

    def _argv(self, vm: _Vm, host: str) -> list[str]:
        if vm.boot_fault in ("startup_fails", "startup_fails_silently"):
            # the real script leaves its log's end in the bucket, then powers the VM off
            return [self.python, "-m", "expo_executor.emulator.failing_startup",
                    *(["--silent"] if vm.boot_fault == "startup_fails_silently" else [])]
        if self.command is not None:
            return list(self.command(vm.name, host, vm.scratch))
        return [self.python, "-m", "expo_executor.worker.agent", "--from-metadata",
                "--scratch", str(vm.scratch)]

    def _boot(self, vm: _Vm) -> None:
        """PROVISIONING -> RUNNING: metadata server up, worker launched (timer thread)."""
        with self._lock:
            if not self._current(vm) or vm.stopping is not None or vm.status != "PROVISIONING":
                return
            vm.scratch.mkdir(parents=True, exist_ok=True)
            (vm.scratch / "sessions").unlink(missing_ok=True)  # a new VM has a fresh disk
            if vm.boot_fault == "silent_worker":  # booted (and billed), but no worker runs
                vm.status, vm.running_at = "RUNNING", time.time()
                self._arm_expiry(vm)
                return
            vm.meta = FakeMetadata(project=vm.project, zone=vm.zone, name=vm.name,
                                   attributes=vm.attributes, instance_id=int(vm.id),
                                   service_account=_service_account(vm.body),
                                   identity=self.identity).start()
            env = {**os.environ, "GCE_METADATA_HOST": vm.meta.host}
            with open(vm.scratch / "worker.log", "ab") as log:
                vm.proc = subprocess.Popen(self._argv(vm, vm.meta.host), env=env, stdout=log,
                                           stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                           start_new_session=True)
            vm.status, vm.running_at = "RUNNING", time.time()
            _spawn(self._watch, vm)
            self._arm_expiry(vm)
            if self._chaos is not None and vm.spot:
                self._arm_chaos(vm)

    def _arm_expiry(self, vm: _Vm) -> None:
        if "maxRunDuration" in vm.scheduling:
            seconds = int(vm.scheduling["maxRunDuration"].get("seconds", 0))
            self._timers.call_later(seconds * self.max_run_scale,
                                    lambda: _spawn(self._expire, vm))

    def _watch(self, vm: _Vm) -> None:
        """A worker that exits on its own leaves its instance TERMINATED (guest poweroff)."""
        assert vm.proc is not None
        vm.proc.wait()
        with self._lock:
            if vm.stopping is not None:
                return
            vm.stopping, vm.status = "guest", "STOPPING"
        self._power_off(vm)
        with self._lock:
            if self._current(vm):
                vm.status = "TERMINATED"

    def _expire(self, vm: _Vm) -> None:
        """``scheduling.maxRunDuration`` reached: stop or delete per instanceTerminationAction."""
        with self._lock:
            if not self._current(vm) or vm.stopping is not None:
                return
            vm.stopping, vm.status = "max-run", "STOPPING"
        self._power_off(vm)
        with self._lock:
            if self._current(vm):
                if vm.termination_action() == "DELETE":
                    del self._vms[vm.key]
                else:
                    vm.status = "TERMINATED"

    def _arm_chaos(self, vm: _Vm) -> None:
        assert self._chaos is not None
        mean, seed, gen = self._chaos
        life = random.Random(f"{seed}:{vm.name}").expovariate(1.0 / mean)

        def fire() -> None:
            with self._lock:
                if self._chaos is None or self._chaos[2] != gen or not self._current(vm):
                    return
                if vm.status == "RUNNING":
                    _spawn(self._preempt_locked, vm)

        self._timers.call_later(life, fire)

    def _preempt_locked(self, vm: _Vm) -> None:
        with self._lock:
            self._preempt_vm(vm, None)

    # -- operations ------------------------------------------------------------------------
    def _new_op(self, project: str, zone: str, op_type: str, target: str, *,
                target_id: str | None = None, done: bool = True, user: str = "fake@example.com",
                error: dict | None = None, group: str | None = None) -> dict:
        stamp = _now_rfc3339()
        name = f"operation-{int(time.time() * 1000)}-{secrets.token_hex(6)}-{secrets.token_hex(4)}"
        zone_url = _zone_url(project, zone)
        op: dict[str, Any] = {
            "kind": "compute#operation", "id": str(secrets.randbits(63)), "name": name,
            "zone": zone_url, "operationType": op_type,
            "targetLink": f"{zone_url}/instances/{target}" if target else f"{zone_url}/instances",
            "status": "RUNNING", "user": user, "progress": 0, "insertTime": stamp,
            "startTime": stamp, "selfLink": f"{zone_url}/operations/{name}",
        }
        if target_id is not None:
            op["targetId"] = target_id
        if group is not None:
            op["operationGroupId"] = group
        self._ops.setdefault((project, zone), {})[name] = op
        if done:
            self._finish_op(op, error)
        return op

    def _finish_op(self, op: dict, error: dict | None = None) -> None:
        op.update(status="DONE", progress=100, endTime=_now_rfc3339())
        if error is not None:
            op["error"] = {"errors": [error["detail"]]}
            op["httpErrorStatusCode"] = error["http"]
            op["httpErrorMessage"] = error["http_message"]
        self._op_changed.notify_all()

    def _op_fault_error(self, fault: _Fault, project: str, zone: str, machine: str) -> dict:
        if fault.kind == "spot_unsupported":
            return {"http": 400, "http_message": "BAD REQUEST", "detail": {
                "code": "UNSUPPORTED_OPERATION",
                "message": f"The SPOT provisioning model is not supported for machine type "
                           f"'{machine}' in zone '{zone}'."}}
        if fault.kind == "quota":
            region = _region(zone)
            return {"http": 403, "http_message": "FORBIDDEN", "detail": {
                "code": "QUOTA_EXCEEDED",
                "message": f"Quota '{fault.quota_metric}' exceeded.  Limit: 24.0 in region "
                           f"{region}.",
                "errorDetails": [{"quotaInfo": {"metricName":
                                                f"compute.googleapis.com/{fault.quota_metric.lower()}",
                                                "limitName": f"{fault.quota_metric}-per-project-region",
                                                "dimensions": {"region": region}, "limit": 24}}]}}
        code = ("ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS" if fault.kind == "stockout_details"
                else "ZONE_RESOURCE_POOL_EXHAUSTED")
        return {"http": 503, "http_message": "SERVICE UNAVAILABLE", "detail": {
            "code": code,
            "message": f"The zone 'projects/{project}/zones/{zone}' does not have enough "
                       f"resources available to fulfill the request.  '(resource type:"
                       f"compute)'. Try a different zone, or try again later. ({machine})"}}

    def _take_fault(self, kinds: tuple[str, ...], zone: str | None, op: str,
                    spot: bool | None = None, explicit: bool = False) -> _Fault | None:
        """The next armed fault for this call, if any. A fault armed for no method reaches the
        instance and operation methods only: the reads the doctor makes (CATALOGUE_OPS, the
        project's APIs) only meet faults armed for their own method (``explicit``)."""
        explicit = explicit or op in CATALOGUE_OPS
        for fault in self._faults:
            if (fault.kind in kinds and fault.zone in (None, zone)
                    and (fault.op == op or (fault.op is None and not explicit))
                    and fault.spot in (None, spot)):
                fault.count -= 1
                if fault.count <= 0:
                    self._faults.remove(fault)
                self._served[fault.kind] = self._served.get(fault.kind, 0) + 1
                return fault
        return None

    def _take_boot_faults(self, vms: list[_Vm]) -> None:
        """Mark each new instance with the next boot fault of its zone, if one is armed."""
        for vm in vms:
            fault = self._take_fault(BOOT_FAULTS, vm.zone, "boot")
            vm.boot_fault = fault.kind if fault else None

    def _remember_request(self, project: str, request_id: str | None) -> dict | None:
        if not request_id:
            return None
        hit = self._by_request_id.get((project, request_id))
        if hit is None:
            return None
        return self._ops.get((project, hit[0]), {}).get(hit[1])

    def _record_request(self, project: str, zone: str, request_id: str | None, op: dict) -> None:
        if request_id:
            self._by_request_id[(project, request_id)] = (zone, op["name"])

    # -- API methods (called with parsed requests) ------------------------------------------
    def api_insert(self, project: str, zone: str, body: dict, query: dict) -> dict:
        request_id = query.get("requestId")
        with self._lock:
            seen = self._remember_request(project, request_id)
            if seen is not None:
                return seen
            machine = validate_instance(body, zone)
            self._check_offered(zone, body, machine, bulk=False)
            self._check_free(project, zone, [body["name"]])
            vm = self._make_vm(project, zone, body, machine)
            fault = self._take_fault(OP_FAULTS, zone, "insert", vm.spot)
            if fault is None:
                self._take_boot_faults([vm])
            op = self._new_op(project, zone, "insert", vm.name, target_id=vm.id, done=False)
            self._record_request(project, zone, request_id, op)
            self._launch([vm], op, fault)
            return op

    def api_bulk_insert(self, project: str, zone: str, body: dict, query: dict) -> dict:
        request_id = query.get("requestId")
        with self._lock:
            seen = self._remember_request(project, request_id)
            if seen is not None:
                return seen
            if body.get("sourceInstanceTemplate"):
                raise ApiError(400, "invalid", "The fake supports instanceProperties only.")
            props = body.get("instanceProperties")
            if not props:
                raise ApiError(400, "required", "Required field 'instanceProperties' not specified")
            names = self._bulk_names(project, zone, body)
            bodies = [{**copy.deepcopy(props), "name": name} for name in names]
            machines = [validate_instance(b, zone, bulk=True) for b in bodies]
            self._check_offered(zone, props, machines[0], bulk=True)
            self._check_free(project, zone, names)
            vms = [self._make_vm(project, zone, b, m) for b, m in zip(bodies, machines)]
            fault = self._take_fault(OP_FAULTS + BULK_FAULTS, zone, "bulkInsert", vms[0].spot)
            if fault is None:
                self._take_boot_faults(vms)
            op = self._new_op(project, zone, "bulkInsert", "", done=False,
                              group=f"group-{secrets.token_hex(8)}")
            op["instancesBulkInsertOperationMetadata"] = {"perLocationStatus": {
                f"zones/{zone}": {"targetVmCount": len(vms),
                                  "createdVmCount": 0, "status": "CREATING"}}}
            self._record_request(project, zone, request_id, op)
            self._launch(vms, op, fault)
            return op

    def _bulk_names(self, project: str, zone: str, body: dict) -> list[str]:
        count = _int(body.get("count", 0), "count")
        min_count = _int(body.get("minCount", count), "minCount")
        if count < 1 or not 1 <= min_count <= count:
            raise ApiError(400, "invalid", f"Invalid value for field 'count'/'minCount': "
                                           f"{count}/{min_count}.")
        names = list((body.get("perInstanceProperties") or {}).keys())[:count]
        pattern = body.get("namePattern", "")
        if len(names) < count and "#" not in pattern:
            raise ApiError(400, "invalid", "Invalid value for field 'namePattern': a pattern "
                                           "with '#' is required when perInstanceProperties "
                                           "does not name every instance.")
        index = 0
        while len(names) < count:
            index += 1
            candidate = re.sub(r"#+", lambda m: str(index).zfill(len(m.group())), pattern, count=1)
            if (project, zone, candidate) not in self._vms and candidate not in names:
                names.append(candidate)
        return names

    def _check_free(self, project: str, zone: str, names: list[str]) -> None:
        for name in names:
            if (project, zone, name) in self._vms:
                raise ApiError(409, "alreadyExists", f"The resource 'projects/{project}/zones/"
                                                     f"{zone}/instances/{name}' already exists")

    def _make_vm(self, project: str, zone: str, body: dict, machine: str) -> _Vm:
        vm = _Vm(project=project, zone=zone, name=body["name"], id=str(secrets.randbits(62)),
                 uid=next(self._uids), body=copy.deepcopy(body), machine=machine,
                 created=_now_rfc3339(), scratch=self.scratch_root / body["name"])
        vm.listed_from = time.monotonic() + self.list_delay
        self._vms[vm.key] = vm
        self._ledger.append(vm)
        return vm

    def _listed(self) -> list[_Vm]:
        """The instances a listing shows now: not the ones inserted less than
        ``list_delay`` s ago."""
        now = time.monotonic()
        return [vm for vm in self._vms.values() if vm.listed_from <= now]

    def _launch(self, vms: list[_Vm], op: dict, fault: _Fault | None) -> None:
        """Finish the insert operation now or after ``op_delay``; boot the VMs if it succeeded.

        A bulk insert also gets one ``insert`` operation per instance in its
        ``operationGroupId``, as on the real API: a ``bulk_partial`` fault fails the first
        instance's (stockout, or the fault's quota) and the bulk operation only with the summary
        ``VM_MIN_COUNT_NOT_REACHED``; minCount is the count, so every instance is rolled back."""
        first, *_ = vms
        error = cause = None
        if fault is not None and fault.kind == "bulk_partial":
            cause = self._op_fault_error(replace(fault, kind=fault.cause), first.project,
                                         first.zone, first.machine)
            error = {"http": 503, "http_message": "SERVICE UNAVAILABLE", "detail": {
                "code": "VM_MIN_COUNT_NOT_REACHED",
                "message": f"Requested minimum count of {len(vms)} VMs could not be created."}}
        elif fault is not None:
            error = self._op_fault_error(fault, first.project, first.zone, first.machine)

        def finish() -> None:
            with self._lock:
                for vm in vms:
                    vm.pending_op = None
                    if error is not None and self._current(vm):
                        del self._vms[vm.key]
                        vm.ended_at = vm.inserted_at  # never ran: nothing billed
                status = op.get("instancesBulkInsertOperationMetadata", {}).get(
                    "perLocationStatus", {}).get(f"zones/{first.zone}")
                if status is not None:
                    status.update(createdVmCount=0 if error else len(vms), status="DONE")
                    for i, vm in enumerate(vms):
                        self._new_op(vm.project, vm.zone, "insert", vm.name, target_id=vm.id,
                                     group=op["operationGroupId"],
                                     error=cause if i == 0 else None)
                self._finish_op(op, error)
            if error is None:
                for vm in vms:
                    if vm.boot_fault != "never_boot":  # else PROVISIONING until deleted
                        self._timers.call_later(self.boot_delay, lambda vm=vm: self._boot(vm))

        if self.op_delay > 0:
            for vm in vms:
                vm.pending_op = op["name"]
            self._timers.call_later(self.op_delay, finish)
        else:
            finish()

    def api_get(self, project: str, zone: str, name: str) -> dict:
        with self._lock:
            vm = self._vms.get((project, zone, name))
            if vm is None:
                raise self._not_found(project, zone, "instances", name)
            return vm.resource()

    def api_list(self, project: str, zone: str, query: dict) -> dict:
        with self._lock:
            keep = compile_filter(query.get("filter", ""))
            items = [vm.resource() for vm in self._listed()
                     if vm.project == project and vm.zone == zone]
        items = [item for item in items if keep(item)]
        page, nxt = _page(items, query)
        out: dict[str, Any] = {"kind": "compute#instanceList", "id": f"projects/{project}/zones/"
                               f"{zone}/instances", "items": page,
                               "selfLink": f"{_zone_url(project, zone)}/instances"}
        if nxt:
            out["nextPageToken"] = nxt
        return out

    def api_aggregated_list(self, project: str, query: dict) -> dict:
        with self._lock:
            keep = compile_filter(query.get("filter", ""))
            vms = sorted((vm for vm in self._listed() if vm.project == project),
                         key=lambda v: (v.zone, v.uid))
            items = [(vm.zone, vm.resource()) for vm in vms]
            zones = sorted({z for (p, z) in self._ops if p == project} | {z for z, _ in items})
        items = [(zone, item) for zone, item in items if keep(item)]
        page, nxt = _page(items, query)
        grouped: dict[str, dict] = {f"zones/{z}": {"warning": {
            "code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope "
            f"'zones/{z}' on this page.", "data": [{"key": "scope", "value": f"zones/{z}"}]}}
            for z in zones}
        for zone, item in page:
            grouped[f"zones/{zone}"] = grouped.get(f"zones/{zone}", {})
            grouped[f"zones/{zone}"].pop("warning", None)
            grouped[f"zones/{zone}"].setdefault("instances", []).append(item)
        out: dict[str, Any] = {"kind": "compute#instanceAggregatedList",
                               "id": f"projects/{project}/aggregated/instances", "items": grouped,
                               "selfLink": f"{GOOGLE}projects/{project}/aggregated/instances"}
        if nxt:
            out["nextPageToken"] = nxt
        return out

    def api_delete(self, project: str, zone: str, name: str, query: dict) -> dict:
        request_id = query.get("requestId")
        with self._lock:
            seen = self._remember_request(project, request_id)
            if seen is not None:
                return seen
            vm = self._vms.get((project, zone, name))
            if vm is None:
                raise self._not_found(project, zone, "instances", name)
            if vm.pending_op is not None:
                raise ApiError(400, "resourceNotReady", f"The resource 'projects/{project}/"
                                                        f"zones/{zone}/instances/{name}' is not "
                                                        "ready")
            op = self._new_op(project, zone, "delete", name, target_id=vm.id, done=False)
            self._record_request(project, zone, request_id, op)
            vm.stopping = vm.stopping or "delete"
            if vm.status != "TERMINATED":
                vm.status = "STOPPING"
        self._power_off(vm)
        with self._lock:
            if self._current(vm):
                del self._vms[vm.key]
            self._finish_op(op)
            return op

    def api_op_get(self, project: str, zone: str, name: str) -> dict:
        with self._lock:
            op = self._ops.get((project, zone), {}).get(name)
            if op is None:
                raise self._not_found(project, zone, "operations", name)
            return op

    def api_op_wait(self, project: str, zone: str, name: str) -> dict:
        deadline = time.monotonic() + WAIT_CAP_S
        with self._lock:
            op = self.api_op_get(project, zone, name)
            while op["status"] != "DONE" and not self._stopped:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._op_changed.wait(left)
            return op

    def api_op_list(self, project: str, zone: str, query: dict) -> dict:
        with self._lock:
            keep = compile_filter(query.get("filter", ""))
            items = [op for op in self._ops.get((project, zone), {}).values() if keep(op)]
            page, nxt = _page(items, query)
            out: dict[str, Any] = {"kind": "compute#operationList",
                                   "id": f"projects/{project}/zones/{zone}/operations",
                                   "items": page,
                                   "selfLink": f"{_zone_url(project, zone)}/operations"}
            if nxt:
                out["nextPageToken"] = nxt
            return out

    @staticmethod
    def _not_found(project: str, zone: str, kind: str, name: str) -> ApiError:
        return ApiError(404, "notFound", f"The resource 'projects/{project}/zones/{zone}/"
                                         f"{kind}/{name}' was not found")

    # -- HTTP dispatch ---------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, body: Any,
               headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """(status, JSON body) for one request; a field mask (the ``fields`` parameter or the
        ``X-Goog-FieldMask`` header) cuts a successful answer to the fields it names."""
        url = urlsplit(raw_path)
        path = unquote(url.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if path.startswith("/_fake/"):
            return self._control(method, path[len("/_fake/"):], body or {})
        if method == "GET" and path == CERTS_PATH:
            return 200, self.identity.certs()
        other = project_apis.route(method, path)
        if other is not None:
            return self._handle_project_api(method, path, query, body, other)
        route = _route(method, path)
        if route is None:
            return 404, ApiError(404, "notFound", f"The requested URL {path} was not found on "
                                                  "this server.").body()
        api, args = route
        zone = args.get("zone")
        problems = check_request(DISCOVERY_IDS[api], args, query, body)
        mask = query.get("fields") or (headers or {}).get("X-Goog-FieldMask")
        try:
            fields = field_tree(mask) if mask else None
        except ValueError as err:
            problems.append(f"Invalid field selection: {err}")
        with self._lock:
            self._log(method, path, api, zone, query, body, problems, mask)
            if problems:
                return _payload_error(problems[0])
            fault = self._take_fault(HTTP_FAULTS, zone, api)
        if fault is not None and fault.kind != "lost_response":
            return _http_fault(fault, args.get("project", ""), zone)
        try:
            self._allowed(api, args, path)
            answer = self._call(api, args, body or {}, query)
        except ApiError as err:
            return err.code, err.body()
        if fault is not None:  # applied, but the client never hears of it
            return _http_fault(fault, args.get("project", ""), zone)
        with self._lock:
            answer = copy.deepcopy(answer)
        return 200, answer if fields is None else partial_response(answer, fields)

    def _log(self, method: str, path: str, api: str, zone: str | None, query: dict,
             body: Any, problems: list[str], field_mask: str | None = None) -> None:
        """Append to the request log (lock held)."""
        self._requests.append({"method": method, "path": path, "op": api, "zone": zone,
                               "query": dict(query), "json": copy.deepcopy(body),
                               "problems": problems, "field_mask": field_mask,
                               "time": time.time()})
        if len(self._requests) > REQUEST_LOG_MAX:
            del self._requests[:REQUEST_LOG_MAX // 2]

    def _allowed(self, api: str, args: dict[str, str], path: str) -> None:
        """The project's side of a Compute call: 403 SERVICE_DISABLED while the Compute API is
        disabled, 403 when the caller was denied the permission the call needs."""
        disabled = self.project.disabled_error(args.get("project", ""), "compute.googleapis.com")
        if disabled is not None:
            raise disabled
        needed = PERMISSIONS[api]
        if self.project.denied(needed):
            raise permission_denied(needed, path[len("/compute/v1/"):])

    def _handle_project_api(self, method: str, path: str, query: dict, body: Any,
                            found: tuple[str, str, dict[str, str]]) -> tuple[int, Any]:
        """A Service Usage, Resource Manager, IAM or tokeninfo request (project_apis.py):
        checked against its discovery document, logged, answered 403 while its API is
        disabled. HTTP faults reach it only when armed for its method id."""
        method_id, service, params = found
        problems = check_request(method_id, params, query, body)
        with self._lock:
            self._log(method, path, method_id, None, query, body, problems)
            if problems:
                return _payload_error(problems[0])
            fault = self._take_fault(HTTP_FAULTS, None, method_id, explicit=True)
        if fault is not None:
            return _http_fault(fault, "", None)
        project = params.get("name", params.get("resource", "")).split("/")[1:2]
        try:
            disabled = self.project.disabled_error(project[0] if project else "", service)
            if disabled is not None:
                raise disabled
            return 200, self.project.call(method_id, params, body)
        except ApiError as err:
            return err.code, err.body()

    def _call(self, api: str, args: dict[str, str], body: dict, query: dict) -> dict:
        project, zone = args.get("project", ""), args.get("zone", "")
        name = args.get("instance", args.get("operation", ""))
        if api == "insert":
            return self.api_insert(project, zone, body, query)
        if api == "bulkInsert":
            return self.api_bulk_insert(project, zone, body, query)
        if api == "get":
            return self.api_get(project, zone, name)
        if api == "list":
            return self.api_list(project, zone, query)
        if api == "delete":
            return self.api_delete(project, zone, name, query)
        if api == "aggregatedList":
            return self.api_aggregated_list(project, query)
        if api == "operations.get":
            return self.api_op_get(project, zone, name)
        if api == "operations.wait":
            return self.api_op_wait(project, zone, name)
        if api in CATALOGUE_OPS:
            return self._call_catalogue(api, args)
        return self.api_op_list(project, zone, query)

    def _call_catalogue(self, api: str, args: dict[str, str]) -> dict:
        project, zone, region = args["project"], args.get("zone", ""), args.get("region", "")
        if api == "machineTypes.get":
            return self.catalogue.machine_type(project, zone, args["machineType"])
        if api == "machineTypes.list":
            return self.catalogue.machine_types(project, zone)
        if api == "acceleratorTypes.get":
            return self.catalogue.accelerator_type(project, zone, args["acceleratorType"])
        if api == "regions.get":
            return self.catalogue.region(project, region)
        return self.catalogue.routers(project, region)

    def _steer(self, what: str, body: dict) -> tuple[int, Any]:
        """``POST /_fake/project`` or ``/_fake/catalogue`` with ``{"call": NAME, "args": [...],
        "kwargs": {...}}``: one of their control methods, from another process."""
        target = self.project if what == "project" else self.catalogue
        allowed = STEERING[what]
        if body["call"] not in allowed:
            raise ValueError(f"no control call {body['call']!r}; one of {sorted(allowed)}")
        getattr(target, body["call"])(*body.get("args", []), **body.get("kwargs", {}))
        return 200, {}

    def _control(self, method: str, what: str, body: dict) -> tuple[int, Any]:
        """The ``/_fake/`` routes: the control API for another process."""
        try:
            if method == "GET" and what == "instances":
                return 200, self.instances()
            if method == "GET" and what == "requests":
                return 200, self.requests
            if method == "GET" and what == "faults":
                return 200, self.faults_served()
            if method == "POST" and what == "preempt":
                done = self.preempt(body["name"], body.get("action"), zone=body.get("zone"))
                return 200, {"preempted": done}
            if method == "POST" and what == "fail_next":
                self.fail_next(body["kind"], int(body.get("count", 1)), body.get("zone"),
                               op=body.get("op"), http_status=body.get("http_status"),
                               quota_metric=body.get("quota_metric", "CPUS"),
                               cause=body.get("cause", "stockout"))
                return 200, {}
            if method == "POST" and what == "withhold":
                self.withhold(body["zone"], *body["names"])
                return 200, {}
            if method == "POST" and what == "chaos":
                self.chaos(float(body["spot_mean_life_s"]), int(body.get("seed", 0)))
                return 200, {}
            if method == "POST" and what in ("project", "catalogue"):
                return self._steer(what, body)
            if method == "POST" and what == "config":
                if "op_delay" in body:
                    self.op_delay = float(body["op_delay"])
                if "boot_delay" in body:
                    self.boot_delay = float(body["boot_delay"])
                if "list_delay" in body:
                    self.list_delay = float(body["list_delay"])
                return 200, {}
        except KeyError as err:
            return 404, {"error": {"code": 404, "message": str(err)}}
        except (ValueError, TypeError) as err:
            return 400, {"error": {"code": 400, "message": str(err)}}
        return 404, {"error": {"code": 404, "message": f"no control route {method} {what}"}}


_ROUTES: list[tuple[str, re.Pattern[str], str]] = [
    ("POST", re.compile(r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/bulkInsert"),
     "bulkInsert"),
    ("POST", re.compile(r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances"), "insert"),
    ("GET", re.compile(r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances"), "list"),
    ("GET", re.compile(
        r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/(?P<instance>[^/]+)"), "get"),
    ("DELETE", re.compile(
        r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/instances/(?P<instance>[^/]+)"), "delete"),
    ("GET", re.compile(r"(?P<project>[^/]+)/aggregated/instances"), "aggregatedList"),
    ("GET", re.compile(r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/operations"), "operations.list"),
    ("GET", re.compile(
        r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/operations/(?P<operation>[^/]+)"),
     "operations.get"),
    ("POST", re.compile(
        r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/operations/(?P<operation>[^/]+)/wait"),
     "operations.wait"),
    ("GET", re.compile(r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/machineTypes"),
     "machineTypes.list"),
    ("GET", re.compile(
        r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/machineTypes/(?P<machineType>[^/]+)"),
     "machineTypes.get"),
    ("GET", re.compile(
        r"(?P<project>[^/]+)/zones/(?P<zone>[^/]+)/acceleratorTypes/(?P<acceleratorType>[^/]+)"),
     "acceleratorTypes.get"),
    ("GET", re.compile(r"(?P<project>[^/]+)/regions/(?P<region>[^/]+)"), "regions.get"),
    ("GET", re.compile(r"(?P<project>[^/]+)/regions/(?P<region>[^/]+)/routers"), "routers.list"),
]
# The control calls of the project's APIs and of the catalogue that /_fake/ serves.
STEERING = {"project": frozenset({"disable", "enable", "deny", "deny_act_as",
                                  "remove_service_account", "set_caller", "bind", "unbind"}),
            "catalogue": frozenset({"set_quota", "add_nat", "remove_routers"})}
# The read-only methods of compute_catalogue.py, which the doctor calls before a run.
CATALOGUE_OPS = frozenset({"machineTypes.list", "machineTypes.get", "acceleratorTypes.get",
                           "regions.get", "routers.list"})

# Each route's method in the discovery document; the routes' groups bear its parameters' names.
DISCOVERY_IDS = {"insert": "compute.instances.insert",
                 "bulkInsert": "compute.instances.bulkInsert",
                 "list": "compute.instances.list", "get": "compute.instances.get",
                 "delete": "compute.instances.delete",
                 "aggregatedList": "compute.instances.aggregatedList",
                 "operations.list": "compute.zoneOperations.list",
                 "operations.get": "compute.zoneOperations.get",
                 "operations.wait": "compute.zoneOperations.wait",
                 **{op: f"compute.{op}" for op in CATALOGUE_OPS}}
# The IAM permission each route needs of its caller (what FakeProjectApis.deny takes away).
PERMISSIONS = {"insert": "compute.instances.create", "bulkInsert": "compute.instances.create",
               "list": "compute.instances.list", "get": "compute.instances.get",
               "delete": "compute.instances.delete",
               "aggregatedList": "compute.instances.list",
               "operations.list": "compute.zoneOperations.list",
               "operations.get": "compute.zoneOperations.get",
               "operations.wait": "compute.zoneOperations.get",
               "machineTypes.list": "compute.machineTypes.list",
               "machineTypes.get": "compute.machineTypes.get",
               "acceleratorTypes.get": "compute.acceleratorTypes.get",
               "regions.get": "compute.regions.get", "routers.list": "compute.routers.list"}


def _route(method: str, path: str) -> tuple[str, dict[str, str]] | None:
    if not path.startswith(API_PREFIX):
        return None
    rest = path[len(API_PREFIX):]
    for verb, pattern, api in _ROUTES:
        match = pattern.fullmatch(rest)
        if verb == method and match is not None:
            return api, match.groupdict()
    return None


def _payload_error(message: str) -> tuple[int, dict]:
    """A request the discovery document refuses, answered as Google's front end answers a
    payload it cannot parse: reason ``invalid``, status INVALID_ARGUMENT, no domain."""
    return 400, {"error": {"code": 400, "message": message,
                           "errors": [{"message": message, "reason": "invalid"}],
                           "status": "INVALID_ARGUMENT"}}


def _http_fault(fault: _Fault, project: str, zone: str | None) -> tuple[int, dict]:
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


def _handler_class(fake: FakeCompute) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                self._answer(400, ApiError(400, "parseError", "Parse Error").body())
                return
            try:
                status, answer = fake.handle(self.command, self.path, body, self.headers)
            except Exception as err:  # noqa: BLE001 - a fake's bug answers 500, loudly
                traceback.print_exc()
                status, answer = 500, ApiError(500, "backendError", f"fake: {err}").body()
            self._answer(status, answer)

        def _answer(self, status: int, answer: Any) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m expo_executor.emulator.compute",
                                     description="A fake Compute Engine REST server.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--scratch", type=Path, required=True,
                        help="directory holding each instance's local disk")
    parser.add_argument("--boot-delay", type=float, default=0.0)
    parser.add_argument("--notice", type=float, default=1.0,
                        help="seconds between a preemption notice and the power-off")
    parser.add_argument("--op-delay", type=float, default=0.0,
                        help="insert operations stay RUNNING this long")
    parser.add_argument("--chaos-spot-mean-life", type=float, default=0.0)
    parser.add_argument("--chaos-seed", type=int, default=0)
    args = parser.parse_args(argv)
    fake = FakeCompute(args.scratch, port=args.port, boot_delay=args.boot_delay,
                       notice_s=args.notice, op_delay=args.op_delay).start()
    if args.chaos_spot_mean_life > 0:
        fake.chaos(args.chaos_spot_mean_life, args.chaos_seed)
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    print(fake.endpoint, flush=True)
    while not done.wait(1.0):
        pass
    fake.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
