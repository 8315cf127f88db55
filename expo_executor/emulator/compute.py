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
instance powers it off with ``processes.sessions.power_off``; a worker that exits on its own leaves the
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

Its parts, one idea each: ``compute_routes`` (the one route table: path, discovery method,
permission, answering call), ``compute_instances`` (insert, bulkInsert, get, list, delete),
``compute_power`` (boot, power-off, preemption, expiry, chaos), ``compute_operations``,
``compute_faults``, ``compute_validation``, ``compute_filter`` (list filters and paging),
``compute_vm`` (one instance), ``compute_control`` (the ``/_fake/`` routes), ``compute_http``
(the request handler) and ``timers``.

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
import itertools
import signal
import sys
import threading
import time
from collections.abc import Mapping
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from expo_executor.emulator import project_apis
from expo_executor.emulator.api_error import ApiError, permission_denied
from expo_executor.emulator.compute_catalogue import ComputeCatalogue
from expo_executor.emulator.compute_control import control
from expo_executor.emulator.compute_faults import HTTP_FAULTS, Fault, FaultBook, http_fault
from expo_executor.emulator.compute_http import handler_class, payload_error
from expo_executor.emulator.compute_instances import InstanceApi
from expo_executor.emulator.compute_operations import Operations
from expo_executor.emulator.compute_power import CommandFn, VmPower
from expo_executor.emulator.compute_routes import DISCOVERY_IDS, Request, find_route
from expo_executor.emulator.compute_vm import Vm
from expo_executor.emulator.discovery import check_request, document
from expo_executor.emulator.identity import CERTS_PATH, IdentityIssuer
from expo_executor.emulator.partial_response import field_tree, partial_response
from expo_executor.emulator.timers import Timers

__all__ = ["DISCOVERY_IDS", "FakeCompute", "main"]

LIST_DELAY_S = 1.0  # a new instance is listed this long after its insert (a realistic default)
REQUEST_LOG_MAX = 50_000  # a long emulated run polls for hours: the oldest half is dropped


# -- the server -----------------------------------------------------------------------------
class FakeCompute(VmPower, InstanceApi):
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
        self._vms: dict[tuple[str, str, str], Vm] = {}
        self._ledger: list[Vm] = []  # every instance ever inserted, for ledger()
        self.operations = Operations(self._op_changed, lambda: self._stopped)
        self.faults = FaultBook()
        self._withheld: dict[str, set[str]] = {}  # zone -> machine and accelerator types
        # the project's APIs and identities, and what Compute offers (both served here too)
        self.project = project_apis.FakeProjectApis()
        self.catalogue = ComputeCatalogue(self._withheld_in)
        # Google's signer of instance identity tokens: every instance's metadata server mints
        # with it, and its certificates are served at Google's path (/oauth2/v1/certs)
        self.identity = IdentityIssuer()
        self._requests: list[dict] = []
        self._uids = itertools.count(1)
        self._chaos: tuple[float, int, int] | None = None  # mean life, seed, generation
        self._chaos_gen = itertools.count(1)
        self._timers = Timers()
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
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler_class(self.handle))
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
        self.faults.arm(Fault(kind, count, zone, op, http_status, quota_metric, spot, cause))

    def withhold(self, zone: str, *names: str) -> None:
        """``zone`` does not offer these machine types or accelerator types: inserts asking
        for them there are refused with the real API's 400 (another zone may offer them), and
        ``machineTypes.get``/``acceleratorTypes.get`` there answer 404, as the real API's do."""
        with self._lock:
            self._withheld.setdefault(zone, set()).update(names)

    def _withheld_in(self, zone: str) -> set[str]:
        with self._lock:
            return set(self._withheld.get(zone, set()))

    def faults_served(self) -> dict[str, int]:
        """Fault kind -> how many were actually served (a request failed, an instance hung)."""
        return self.faults.served()

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

    # -- HTTP dispatch ---------------------------------------------------------------------
    def handle(self, method: str, raw_path: str, body: Any,
               headers: Mapping[str, str] | None = None) -> tuple[int, Any]:
        """(status, JSON body) for one request; a field mask (the ``fields`` parameter or the
        ``X-Goog-FieldMask`` header) cuts a successful answer to the fields it names."""
        url = urlsplit(raw_path)
        path = unquote(url.path)
        query = {k: v[0] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        if path.startswith("/_fake/"):
            return control(self, method, path[len("/_fake/"):], body or {})
        if method == "GET" and path == CERTS_PATH:
            return 200, self.identity.certs()
        other = project_apis.route(method, path)
        if other is not None:
            return self._handle_project_api(method, path, query, body, other)
        found = find_route(method, path)
        if found is None:
            return 404, ApiError(404, "notFound", f"The requested URL {path} was not found on "
                                                  "this server.").body()
        route, args = found
        zone = args.get("zone")
        problems = check_request(route.discovery_id, args, query, body)
        mask = query.get("fields") or (headers or {}).get("X-Goog-FieldMask")
        try:
            fields = field_tree(mask) if mask else None
        except ValueError as err:
            problems.append(f"Invalid field selection: {err}")
        with self._lock:
            self._log(method, path, route.api, zone, query, body, problems, mask)
            if problems:
                return payload_error(problems[0])
            fault = self.faults.take(HTTP_FAULTS, zone, route.api, explicit=route.catalogue)
        if fault is not None and fault.kind != "lost_response":
            return http_fault(fault, args.get("project", ""), zone)
        try:
            if zone:
                self.catalogue.check_zone(args.get("project", ""), route.api, zone)
            self._allowed(route.permission, args, path)
            answer = route.answer(self, Request(args, body or {}, query))
        except ApiError as err:
            return err.code, err.body()
        if fault is not None:  # applied, but the client never hears of it
            return http_fault(fault, args.get("project", ""), zone)
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

    def _allowed(self, needed: str, args: dict[str, str], path: str) -> None:
        """The project's side of a Compute call: 403 SERVICE_DISABLED while the Compute API is
        disabled, 403 when the caller was denied the permission the call needs."""
        disabled = self.project.disabled_error(args.get("project", ""), "compute.googleapis.com")
        if disabled is not None:
            raise disabled
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
                return payload_error(problems[0])
            fault = self.faults.take(HTTP_FAULTS, None, method_id, explicit=True)
        if fault is not None:
            return http_fault(fault, "", None)
        project = params.get("name", params.get("resource", "")).split("/")[1:2]
        try:
            disabled = self.project.disabled_error(project[0] if project else "", service)
            if disabled is not None:
                raise disabled
            return 200, self.project.call(method_id, params, body)
        except ApiError as err:
            return err.code, err.body()


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
