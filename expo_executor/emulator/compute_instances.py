"""The fake Compute Engine's instance methods: insert, bulkInsert, get, list, aggregatedList
and delete, answered from parsed requests as the real API answers them.

An insert is checked (``compute_validation``, then what the zone offers), recorded as an
instance PROVISIONING and an operation, and finished now or ``op_delay`` later: failed by an
armed operation fault (the instance rolled back, nothing billed), or booted ``boot_delay`` after
(``compute_power``). A new instance is listed only ``list_delay`` after its insert, as on the
real API, while ``get`` and ``delete`` find it at once.
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from expo_executor.emulator import catalogue
from expo_executor.emulator.api_error import ApiError, int_field, not_found
from expo_executor.emulator.compute_faults import (BULK_FAULTS, OP_FAULTS, Fault, FaultBook,
                                                   operation_error)
from expo_executor.emulator.compute_filter import compile_filter, page
from expo_executor.emulator.compute_operations import Operations
from expo_executor.emulator.compute_validation import validate_instance
from expo_executor.emulator.compute_vm import GOOGLE, Vm, now_rfc3339, zone_url
from expo_executor.emulator.timers import Timers


class InstanceApi:
    """The instance methods of ``FakeCompute`` (a mixin: its state is the fake's, declared
    here), each called with the parsed request and answering the resource or operation."""

    scratch_root: Path
    boot_delay: float
    op_delay: float
    list_delay: float
    faults: FaultBook
    operations: Operations
    _lock: threading.RLock
    _vms: dict[tuple[str, str, str], Vm]
    _ledger: list[Vm]
    _withheld: dict[str, set[str]]
    _uids: Any  # itertools.count
    _timers: Timers
    # from compute_power.VmPower
    _current: Callable[[Vm], bool]
    _boot: Callable[[Vm], None]
    _power_off: Callable[[Vm], None]

    def api_insert(self, project: str, zone: str, body: dict, query: dict) -> dict:
        request_id = query.get("requestId")
        with self._lock:
            seen = self.operations.remembered(project, request_id)
            if seen is not None:
                return seen
            machine = validate_instance(body, zone)
            self._check_offered(zone, body, machine, bulk=False)
            self._check_free(project, zone, [body["name"]])
            vm = self._make_vm(project, zone, body, machine)
            fault = self.faults.take(OP_FAULTS, zone, "insert", vm.spot)
            if fault is None:
                self._take_boot_faults([vm])
            op = self.operations.new(project, zone, "insert", vm.name, target_id=vm.id, done=False)
            self.operations.remember(project, zone, request_id, op)
            self._launch([vm], op, fault)
            return op

    def api_bulk_insert(self, project: str, zone: str, body: dict, query: dict) -> dict:
        request_id = query.get("requestId")
        with self._lock:
            seen = self.operations.remembered(project, request_id)
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
            fault = self.faults.take(OP_FAULTS + BULK_FAULTS, zone, "bulkInsert", vms[0].spot)
            if fault is None:
                self._take_boot_faults(vms)
            op = self.operations.new(project, zone, "bulkInsert", "", done=False,
                                     group=f"group-{secrets.token_hex(8)}")
            op["instancesBulkInsertOperationMetadata"] = {"perLocationStatus": {
                f"zones/{zone}": {"targetVmCount": len(vms),
                                  "createdVmCount": 0, "status": "CREATING"}}}
            self.operations.remember(project, zone, request_id, op)
            self._launch(vms, op, fault)
            return op

    def _take_boot_faults(self, vms: list[Vm]) -> None:
        """Mark each new instance with the next boot fault of its zone, if one is armed."""
        for vm in vms:
            vm.boot_fault = self.faults.take_boot(vm.zone)

    def _check_offered(self, zone: str, body: dict, machine: str, bulk: bool) -> None:
        """The real API's 400 for a machine type or GPU that ``zone`` does not offer: one it
        withholds, or one Compute Engine has in no zone (the same answer on the real API)."""
        withheld = self._withheld.get(zone, set())
        field = "instanceProperties" if bulk else "resource"
        if machine in withheld or catalogue.machine_type(machine) is None:
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

    def _bulk_names(self, project: str, zone: str, body: dict) -> list[str]:
        count = int_field(body.get("count", 0), "count")
        min_count = int_field(body.get("minCount", count), "minCount")
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

    def _make_vm(self, project: str, zone: str, body: dict, machine: str) -> Vm:
        vm = Vm(project=project, zone=zone, name=body["name"], id=str(secrets.randbits(62)),
                 uid=next(self._uids), body=copy.deepcopy(body), machine=machine,
                 created=now_rfc3339(), scratch=self.scratch_root / body["name"])
        vm.listed_from = time.monotonic() + self.list_delay
        self._vms[vm.key] = vm
        self._ledger.append(vm)
        return vm

    def _listed(self) -> list[Vm]:
        """The instances a listing shows now: not the ones inserted less than
        ``list_delay`` s ago."""
        now = time.monotonic()
        return [vm for vm in self._vms.values() if vm.listed_from <= now]

    def _launch(self, vms: list[Vm], op: dict, fault: Fault | None) -> None:
        """Finish the insert operation now or after ``op_delay``; boot the VMs if it succeeded.

        A bulk insert also gets one ``insert`` operation per instance in its
        ``operationGroupId``, as on the real API: a ``bulk_partial`` fault fails the first
        instance's (stockout, or the fault's quota) and the bulk operation only with the summary
        ``VM_MIN_COUNT_NOT_REACHED``; minCount is the count, so every instance is rolled back."""
        first, *_ = vms
        error = cause = None
        if fault is not None and fault.kind == "bulk_partial":
            cause = operation_error(replace(fault, kind=fault.cause), first.project,
                                    first.zone, first.machine)
            error = {"http": 503, "http_message": "SERVICE UNAVAILABLE", "detail": {
                "code": "VM_MIN_COUNT_NOT_REACHED",
                "message": f"Requested minimum count of {len(vms)} VMs could not be created."}}
        elif fault is not None:
            error = operation_error(fault, first.project, first.zone, first.machine)

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
                        self.operations.new(vm.project, vm.zone, "insert", vm.name,
                                            target_id=vm.id, group=op["operationGroupId"],
                                            error=cause if i == 0 else None)
                self.operations.finish(op, error)
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
                raise not_found(project, f"zones/{zone}", "instances", name)
            return vm.resource()

    def api_list(self, project: str, zone: str, query: dict) -> dict:
        with self._lock:
            keep = compile_filter(query.get("filter", ""))
            items = [vm.resource() for vm in self._listed()
                     if vm.project == project and vm.zone == zone]
        items = [item for item in items if keep(item)]
        chunk, nxt = page(items, query)
        out: dict[str, Any] = {"kind": "compute#instanceList", "id": f"projects/{project}/zones/"
                               f"{zone}/instances", "items": chunk,
                               "selfLink": f"{zone_url(project, zone)}/instances"}
        if nxt:
            out["nextPageToken"] = nxt
        return out

    def api_aggregated_list(self, project: str, query: dict) -> dict:
        with self._lock:
            keep = compile_filter(query.get("filter", ""))
            vms = sorted((vm for vm in self._listed() if vm.project == project),
                         key=lambda v: (v.zone, v.uid))
            items = [(vm.zone, vm.resource()) for vm in vms]
            zones = sorted(self.operations.zones(project) | {z for z, _ in items})
        items = [(zone, item) for zone, item in items if keep(item)]
        chunk, nxt = page(items, query)
        grouped: dict[str, dict] = {f"zones/{z}": {"warning": {
            "code": "NO_RESULTS_ON_PAGE", "message": "There are no results for scope "
            f"'zones/{z}' on this page.", "data": [{"key": "scope", "value": f"zones/{z}"}]}}
            for z in zones}
        for zone, item in chunk:
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
            seen = self.operations.remembered(project, request_id)
            if seen is not None:
                return seen
            vm = self._vms.get((project, zone, name))
            if vm is None:
                raise not_found(project, f"zones/{zone}", "instances", name)
            if vm.pending_op is not None:
                raise ApiError(400, "resourceNotReady", f"The resource 'projects/{project}/"
                                                        f"zones/{zone}/instances/{name}' is not "
                                                        "ready")
            op = self.operations.new(project, zone, "delete", name, target_id=vm.id, done=False)
            self.operations.remember(project, zone, request_id, op)
            vm.stopping = vm.stopping or "delete"
            if vm.status != "TERMINATED":
                vm.status = "STOPPING"
        self._power_off(vm)
        with self._lock:
            if self._current(vm):
                del self._vms[vm.key]
            self.operations.finish(op)
            return op
