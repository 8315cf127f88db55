"""The GCE engine: a run's workers as Compute Engine VMs, Spot or on-demand.

Built on the real ``google.cloud.compute_v1`` REST client, imported lazily so that loading the
plugin stays cheap. What it guarantees, and why:

- Every VM carries ``scheduling.max_run_duration`` (termination action DELETE): a coordinator
  that dies cannot leave VMs billing forever. Spot VMs are SPOT / DELETE / TERMINATE / no restart.
- Labels ``expocloud-run``, ``expocloud-pool``, ``expocloud-slots`` let ``list()``, ``close()`` and
  ``expocloud cleanup`` find the run's VMs from the cloud's own records, not from memory.
- Every insert, bulk insert and delete carries a fresh ``request_id`` that its retries reuse, so a
  retried call whose first answer was lost is not applied twice.
- Rate limits (403 rateLimitExceeded, 429) and transient errors (``errors.classify_error``) back
  off with full jitter (``retry.retry_call``); a stockout moves on to the next zone, and the zone is avoided for a
  while by that pool (Spot and on-demand capacity run out separately); a quota error stops
  growth with a message naming the quota, the region and the fix.
- ``op.result()`` is never called: for an unfinished operation it polls through an operations
  client built without our ``client_options``, i.e. against Google itself. Unfinished inserts are
  tracked and checked (without blocking) by ``list()``, which re-places a late stockout.
- Metadata values (the run key among them) are never logged.
"""

from __future__ import annotations

import json
import logging
import random
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape, comes_with_gpus
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.engines.gce.clients import delete_call, make_clients
from expo_executor.engines.gce.errors import (SUMMARY_CODES, classify_codes, classify_error,
                                              is_transient)
from expo_executor.engines.gce.references import DEFAULT_NETWORK, network_interface
from expo_executor.engines.gce.retry import retry_call
from expo_executor.protocol.keys import WORKER_ATTRIBUTE

log = logging.getLogger(__name__)
T = TypeVar("T")

RUN_LABEL = "expocloud-run"
POOL_LABEL = "expocloud-pool"
SLOTS_LABEL = "expocloud-slots"
POOL_LABEL_VALUES = {Pool.SPOT: "spot", Pool.ON_DEMAND: "on-demand"}
POOLS_BY_LABEL = {value: pool for pool, value in POOL_LABEL_VALUES.items()}
PREEMPTED_OP = "compute.instances.preempted"
DEFAULT_SCOPES = ("https://www.googleapis.com/auth/cloud-platform",)
LABEL_VALUE_RE = re.compile(r"[a-z0-9_-]{1,63}")
QUOTA_RE = re.compile(r"Quota '([^']+)' exceeded\.\s+Limit:\s*([0-9.]+)\s+in region ([a-z0-9-]+)")
PREEMPT_CLOCK_SLACK_S = 60.0  # a preemption this long before our insert can still be ours
# Deep Learning VM images install the NVIDIA driver at first boot when this metadata says so
# (a worker image built from one keeps that; other images ignore it).
GPU_DRIVER_ATTRIBUTE = "install-nvidia-driver"
GPU_DISK_GB = 50  # a Deep Learning VM image needs a boot disk of about this size


@dataclass
class GceConfig:
    """Where and how the run's VMs are created.

    ``zones`` in preference order; ``machine_types`` per pool (names, e.g. e2-standard-2) for
    the run's own VMs (a per-rule :class:`Shape` names its own); ``image`` a source image URL,
    ``gpu_image`` the one of VMs with GPUs (with the NVIDIA driver, or installing it), whose
    boot disk is at least ``gpu_disk_gb``; ``metadata`` goes on every VM (values never logged; the
    ``slots`` of its ``expocloud-worker`` JSON is set to each create()'s slots); ``endpoint``
    set means a local fake (anonymous credentials); ``bulk_min`` or more VMs at once go
    through one bulk insert; ``exhausted_ttl_s``: how long a stocked-out zone is avoided;
    ``retry_*``: backoff of rate-limited and transient calls (full jitter, bounded attempts).
    """

    project: str
    zones: list[str]
    machine_types: dict[Pool, str]
    image: str
    max_run_duration_s: int
    run_label: str
    metadata: dict[str, str] = field(default_factory=dict)
    disk_gb: int = 20
    gpu_image: str | None = None
    gpu_disk_gb: int = GPU_DISK_GB
    disk_type: str = "pd-balanced"
    network: str = DEFAULT_NETWORK
    subnetwork: str | None = None
    external_ip: bool = True
    service_account: str | None = None
    scopes: list[str] = field(default_factory=lambda: list(DEFAULT_SCOPES))
    labels: dict[str, str] = field(default_factory=dict)
    endpoint: str | None = None
    bulk_min: int = 2
    exhausted_ttl_s: float = 300.0
    retry_attempts: int = 8
    retry_base_s: float = 1.0
    retry_cap_s: float = 60.0
    call_timeout_s: float = 60.0
    close_timeout_s: float = 300.0

    def __post_init__(self) -> None:
        if not self.zones:
            raise ValueError("GceConfig.zones is empty: give at least one zone, e.g. us-central1-a")
        if int(self.max_run_duration_s) <= 0:
            raise ValueError("GceConfig.max_run_duration_s must be > 0: it caps every VM's life")
        if not LABEL_VALUE_RE.fullmatch(self.run_label):
            raise ValueError(f"GceConfig.run_label {self.run_label!r} is not a valid GCE label "
                             "value (lowercase letters, digits, '_' and '-', at most 63)")
        unknown = [p for p in self.machine_types if p not in POOL_LABEL_VALUES]
        if unknown or not self.machine_types:
            raise ValueError("GceConfig.machine_types needs Pool.SPOT and/or Pool.ON_DEMAND keys")
        if self.bulk_min < 1:
            raise ValueError("GceConfig.bulk_min must be at least 1")
        for zone in self.zones:  # raises ValueError on a malformed or misplaced reference
            network_interface(self.network, self.subnetwork, self.project, zone)


@dataclass(frozen=True)
class Ask:
    """What one create call makes: VMs of one pool and shape (None: the run's own machine
    type of the pool), each with ``slots`` job slots."""

    pool: Pool
    slots: int
    shape: Shape | None = None

    @property
    def gpus(self) -> bool:
        return self.shape is not None and self.shape.gpus

    def failed(self, names: list[str], message: str, stop_growth: bool,
               quota: bool = False) -> CreateFailed:
        return CreateFailed(self.pool, names, message, stop_growth, shape=self.shape,
                            quota=quota)


@dataclass
class _Pending:
    """An insert (or bulk insert) whose operation was not DONE when we last looked."""

    zone: str
    op: str
    names: list[str]
    ask: Ask
    tried: list[str]
    doomed: list[str] = field(default_factory=list)  # deleted meanwhile: delete once created


# -- messages and operations ---------------------------------------------------------------
def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _region(zone: str) -> str:
    return zone.rsplit("-", 1)[0]


def quota_message(raw: str, project: str, pool: Pool, zone: str) -> str:
    """One line naming the quota, the region and the fix."""
    match = QUOTA_RE.search(raw)
    if match:
        quota, limit, region = match.groups()
        what = f"GCE quota {quota} exceeded in region {region} (limit {limit})"
    else:
        what = f"GCE quota exceeded in region {_region(zone)} ({_one_line(raw)})"
    return (f"{what} while creating {POOL_LABEL_VALUES[pool]} VMs; fix: request a quota "
            f"increase (https://console.cloud.google.com/iam-admin/quotas?project={project}) "
            "or lower --expocloud-max-workers")


def _is_done(op: Any) -> bool:
    return op.status == type(op).Status.DONE


def _op_errors(op: Any) -> tuple[set[str], str]:
    """The error codes of a finished operation and their messages (empty: it succeeded)."""
    errors = list(op.error.errors) if op.error else []
    codes = {e.code for e in errors}
    text = "; ".join(f"{e.code}: {e.message}" for e in errors) or op.http_error_message
    return codes, _one_line(text)


def _name_of(link: str) -> str:
    return link.rstrip("/").rsplit("/", 1)[-1]


def _epoch(rfc3339: str) -> float | None:
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


# -- listing -----------------------------------------------------------------------------------
# What a round needs of each VM (name, id, status, labels); without it each listed VM
# carries its whole resource, its startup script and metadata included, every round.
RUN_LISTING_FIELDS = "items/*/instances(name,id,status,labels),nextPageToken"


def _run_filter(run_label: str | None) -> str:
    return f'labels.{RUN_LABEL} = "{run_label}"' if run_label else f"labels.{RUN_LABEL}:*"


def _aggregated(client: Any, project: str, flt: str, timeout: float,
                fields: str | None = None) -> list[tuple[str, Any]]:
    """(zone, instance) for every instance matching ``flt``, all zones, all pages; ``fields``:
    only these fields of each (a partial response, asked for with ``X-Goog-FieldMask``)."""
    from google.cloud import compute_v1

    request = compute_v1.AggregatedListInstancesRequest(project=project, filter=flt)
    metadata = [("x-goog-fieldmask", fields)] if fields else []
    found = [(_name_of(scope), inst)
             for scope, scoped in client.aggregated_list(request=request, retry=None,
                                                         timeout=timeout, metadata=metadata)
             for inst in scoped.instances]
    if fields and any(not inst.name or not inst.status for _, inst in found):
        # a mask the service read otherwise than we meant: every VM would look gone
        raise RuntimeError(f"the Compute listing came back without names or statuses for "
                           f"the field mask {fields!r}")
    return found


def _zone_list(client: Any, project: str, zone: str, flt: str, timeout: float) -> list[Any]:
    from google.cloud import compute_v1

    request = compute_v1.ListInstancesRequest(project=project, zone=zone, filter=flt)
    return list(client.list(request=request, retry=None, timeout=timeout))


def _default_call(fn: Callable[[], T]) -> T:
    return retry_call(fn, is_transient=is_transient, attempts=8, base=1.0, cap=60.0)


# -- the engine ---------------------------------------------------------------------------------
class GceEngine:
    """The Engine contract on Compute Engine (thread-safe: teardown may come from a signal).

    ``sleep`` and ``rand`` drive the retry backoff and ``clock`` the zone-exhaustion memory:
    tests inject them so that nothing waits for real. close() is bounded in real time.
    """

    def __init__(self, config: GceConfig, *, sleep: Callable[[float], object] = time.sleep,
                 rand: Callable[[], float] = random.random,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._sleep = sleep
        self._rand = rand
        self._clock = clock
        self._instances, self._operations = make_clients(config.endpoint)
        self._lock = threading.RLock()
        self._pending: list[_Pending] = []
        self._zone_of: dict[str, str] = {}
        self._created_at: dict[str, float] = {}  # wall-clock time of our insert, per name
        self._ids: set[int] = set()
        # (zone, pool, shape) -> clock() until which the pool avoids the zone
        self._exhausted: dict[tuple[str, Pool, Shape | None], float] = {}
        # (zone, pool, shape) -> why the zone does not offer it: not asked there again
        self._refused: dict[tuple[str, Pool, Shape | None], str] = {}
        self._failures: list[CreateFailed] = []
        self._seen_ops: set[str] = set()
        self._deleted: set[str] = set()  # names whose delete Compute Engine accepted
        self._closed = False
        self.key_grantor: Any = None  # answers its workers' key requests (launch.build_engine)

    # -- Engine ------------------------------------------------------------------------------
    def create(self, names: list[str], pool: Pool, slots: int,
               shape: Shape | None = None) -> None:
        if pool not in POOL_LABEL_VALUES or (shape is None
                                             and pool not in self.config.machine_types):
            raise ValueError(f"no machine type configured for pool {pool.value}")
        with self._lock:
            if self._closed:
                raise RuntimeError("the engine is closed: the run is ending")
        if names:
            self._place(list(names), Ask(pool, slots, shape), tried=[])

    def delete(self, name: str) -> None:
        with self._lock:
            for pending in self._pending:
                if name in pending.names:  # not created yet: delete it once it is
                    pending.names.remove(name)
                    pending.doomed.append(name)
                    return
            zone = self._zone_of.get(name)
        if zone is None:
            zone = self._locate(name)
            if zone is None:
                return
        delete_call(self._instances, self.config.project, zone, name,
                    self.config.call_timeout_s, self._call)
        with self._lock:
            self._deleted.add(name)

    def zone_of(self, name: str) -> str | None:
        """The zone VM ``name`` was created in (None: not known to this engine)."""
        with self._lock:
            return self._zone_of.get(name)

    def list(self) -> list[Instance]:
        self._check_pending()
        out = []
        for zone, inst in self._list_run():
            self._remember(inst.name, zone, inst.id)
            found = self._to_instance(inst)
            if found is not None:
                out.append(found)
        return out

    def failures(self) -> list[CreateFailed]:
        with self._lock:
            drained, self._failures = self._failures, []
        return drained

    def preempted(self) -> set[str]:
        with self._lock:
            zones = sorted(set(self._zone_of.values()))
        found: set[str] = set()
        for zone in zones:
            try:
                ops = self._call(lambda z=zone: self._preemption_ops(z))
            except Exception as err:  # noqa: BLE001 - look again at the next poll
                log.warning("could not list preemptions in %s: %s", zone, _one_line(str(err)))
                continue
            for op in ops:
                with self._lock:
                    if op.name in self._seen_ops:
                        continue
                    self._seen_ops.add(op.name)
                    if self._ours(op):
                        found.add(_name_of(op.target_link))
        return found

    def close(self) -> None:
        """Delete every VM labelled for the run (not only ours) and wait until none is left.

        What a listing shows is not enough: a VM whose insert is young is not listed yet, so
        every VM this engine created is deleted by name too, until its delete is done or it is
        found gone. Bounded by ``close_timeout_s`` of real time; what is left then is logged
        with the fix.
        """
        with self._lock:
            self._closed = True
            self._pending.clear()
            unconfirmed = {name: zone for name, zone in self._zone_of.items()
                           if name not in self._deleted}
        deadline = time.monotonic() + self.config.close_timeout_s
        issued: dict[str, tuple[str, str]] = {}  # name -> (zone, delete op) not seen DONE
        with ThreadPoolExecutor(max_workers=8, thread_name_prefix="gce-delete") as pool:
            while True:
                listed = self._list_quietly()
                left = sorted({*(listed or []), *((z, n) for n, z in unconfirmed.items())})
                if listed == [] and not unconfirmed:
                    return
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    names = ", ".join(n for _z, n in left) or "unknown (listing fails)"
                    log.error("VMs of run %s still exist after %.0f s: %s; fix: run "
                              "`expocloud cleanup` for this run", self.config.run_label,
                              self.config.close_timeout_s, names)
                    return
                todo = [(z, n) for z, n in left if n not in issued]
                for (zone, name), (op, gone) in zip(todo, self._delete_all(pool, todo)):
                    if gone:
                        self._confirm_deleted(name, unconfirmed)
                    elif op is not None:
                        issued[name] = (zone, op.name)
                for name in self._wait_deletes(issued, min(remaining, 60.0)):
                    self._confirm_deleted(name, unconfirmed)
                if not todo:  # nothing new to delete: let the running deletions progress
                    time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))

    def _delete_all(self, pool: ThreadPoolExecutor,
                    todo: list[tuple[str, str]]) -> list[tuple[Any | None, bool]]:
        """``_delete_quietly`` of each, in parallel; one at a time when the interpreter is
        shutting down (close() from an atexit hook), where no thread may start."""
        try:
            return list(pool.map(self._delete_quietly, todo))
        except RuntimeError:
            return [self._delete_quietly(target) for target in todo]

    def _confirm_deleted(self, name: str, unconfirmed: dict[str, str]) -> None:
        """``name`` is gone: neither this close() nor a later one deletes it again."""
        unconfirmed.pop(name, None)
        with self._lock:
            self._deleted.add(name)

    def _list_quietly(self) -> list[tuple[str, str]] | None:
        """(zone, name) of the run's VMs; None if listing failed even after retries."""
        try:
            return [(zone, inst.name) for zone, inst in self._list_run()]
        except Exception as err:  # noqa: BLE001 - close() keeps trying until its deadline
            log.warning("listing the run's VMs failed: %s", _one_line(str(err)))
            return None

    # -- placing VMs ------------------------------------------------------------------------
    def _place(self, names: list[str], ask: Ask, tried: list[str]) -> None:
        """Create ``names`` in the first zones with capacity; raise CreateFailed if none has
        (for good if every zone refuses what it is asked for)."""
        left = names
        for zone in self._candidate_zones(tried, ask):
            tried = [*tried, zone]
            left = self._try_zone(zone, left, ask, tried, bulk=True)
            if not left:
                return
        what, kind = self._what(ask), POOL_LABEL_VALUES[ask.pool]
        with self._lock:
            refusals = {z: self._refused[(z, ask.pool, ask.shape)] for z in self.config.zones
                        if (z, ask.pool, ask.shape) in self._refused}
        if len(refusals) == len(self.config.zones):
            raise ask.failed(left, f"no zone offers {kind} VMs of type {what}: "
                                   f"{'; '.join(f'{z}: {m}' for z, m in refusals.items())}; fix: "
                                   "--expocloud-gce-zones with zones that offer it, or another "
                                   "machine type or GPU", stop_growth=True)
        zones = ", ".join(tried or self.config.zones)
        raise ask.failed(left, f"no capacity for {len(left)} {kind} VM(s) of type {what} in "
                               f"zone(s) {zones} (resource pool exhausted); trying again later",
                         stop_growth=False)

    def _machine(self, ask: Ask) -> str:
        return ask.shape.machine_type if ask.shape else self.config.machine_types[ask.pool]

    def _what(self, ask: Ask) -> str:
        """The asked-for machine, for a message: the shape, or the pool's machine type."""
        return ask.shape.describe() if ask.shape else self._machine(ask)

    def _candidate_zones(self, tried: list[str], ask: Ask) -> list[str]:
        now = self._clock()
        with self._lock:
            return [z for z in self.config.zones if z not in tried
                    and (z, ask.pool, ask.shape) not in self._refused
                    and self._exhausted.get((z, ask.pool, ask.shape), 0.0) <= now]

    def _try_zone(self, zone: str, names: list[str], ask: Ask, tried: list[str],
                  bulk: bool) -> list[str]:
        """Insert ``names`` in ``zone``; return the names left for the next zone (a stockout,
        or a refusal of this zone's)."""
        use_bulk = bulk and len(names) >= self.config.bulk_min
        batches = [names] if use_bulk else [[n] for n in names]
        for i, batch in enumerate(batches):
            rest = [n for b in batches[i:] for n in b]
            with self._lock:
                for name in batch:
                    self._created_at[name] = time.time()
            try:
                op = self._submit(zone, batch, ask, use_bulk)
            except Exception as err:
                kind = classify_error(err)
                if kind in ("stockout", "zonal"):
                    self._move_on(zone, ask, kind, getattr(err, "message", None) or str(err))
                    return rest
                if kind == "conflict" and use_bulk:  # someone holds a name: one by one
                    return self._try_zone(zone, rest, ask, tried, bulk=False)
                if kind == "conflict" and self._is_ours(zone, batch[0]):
                    self._remember(batch[0], zone)
                    continue
                raise self._failed(err, kind, zone, rest, ask) from err
            self._remember_all(batch, zone, op)
            if self._outcome(zone, op, rest, ask) == "next zone":
                return rest
            if not _is_done(op):
                with self._lock:
                    self._pending.append(_Pending(zone, op.name, list(batch), ask, list(tried)))
        return []

    def _move_on(self, zone: str, ask: Ask, kind: str, message: str) -> None:
        """Leave ``zone`` to the next one: for a while (a stockout), or for the run (the zone
        does not offer what is asked)."""
        if kind == "stockout":
            self._mark_exhausted(zone, ask)
            return
        with self._lock:
            self._refused[(zone, ask.pool, ask.shape)] = _one_line(message)[:300]
        log.warning("GCE refuses %s VMs of %s in %s, trying the next zone: %s",
                    POOL_LABEL_VALUES[ask.pool], self._what(ask), zone, _one_line(message))

    def _failed(self, err: BaseException, kind: str, zone: str, names: list[str],
                ask: Ask) -> CreateFailed:
        """The CreateFailed for an insert call that raised."""
        raw = _one_line(getattr(err, "message", None) or str(err))
        if kind == "quota":
            return self._quota(raw, zone, names, ask)
        if kind == "transient":
            return ask.failed(names, f"the Compute API kept failing in {zone} ({raw}); "
                                     "trying again later", stop_growth=False)
        if kind == "conflict":
            return ask.failed(names, f"an instance named {names[0]} already exists in {zone} "
                                     "and is not this run's", stop_growth=False)
        return ask.failed(names, f"GCE refused to create VMs in {zone}: {raw}; fix the "
                                 "--expocloud GCE settings (image, network, service account, "
                                 "machine type, GPUs)", stop_growth=True)

    def _quota(self, raw: str, zone: str, names: list[str], ask: Ask) -> CreateFailed:
        """A quota is full: the pool waits until one of the run's VMs ends and frees some
        (the coordinator stops it if none is alive to free any)."""
        return ask.failed(names, quota_message(raw, self.config.project, ask.pool, zone),
                          stop_growth=False, quota=True)

    def _outcome(self, zone: str, op: Any, names: list[str], ask: Ask) -> str:
        """ok, running or next zone (a stockout, or a refusal of this zone's) for an insert
        operation; quota and other errors raise. A bulk insert's summary code is resolved
        from the operations of its instances."""
        if not _is_done(op):
            return "running"
        codes, text = _op_errors(op)
        if not codes:
            return "ok"
        if codes & SUMMARY_CODES:
            codes, text = self._group_errors(zone, op) or (codes, text)
        kind = classify_codes(codes)
        if kind in ("stockout", "zonal"):
            self._move_on(zone, ask, kind, text)
            return "next zone"
        if kind == "quota":
            raise self._quota(text, zone, names, ask)
        if kind == "later":
            raise ask.failed(names, f"GCE could not create VMs in {zone} just now ({text}); "
                                    "trying again later", stop_growth=False)
        raise ask.failed(names, f"GCE could not create VMs in {zone}: {text}; fix the "
                                "--expocloud GCE settings", stop_growth=True)

    def _group_errors(self, zone: str, op: Any) -> tuple[set[str], str] | None:
        """The error codes and messages of the instance operations of a bulk insert (its
        ``operationGroupId``); None if they cannot be read or say nothing more."""
        from google.cloud import compute_v1

        group = getattr(op, "operation_group_id", "")
        if not group:
            return None
        request = compute_v1.ListZoneOperationsRequest(
            project=self.config.project, zone=zone, filter=f'operationGroupId = "{group}"')
        try:
            ops = self._call(lambda: list(self._operations.list(
                request=request, retry=None, timeout=self.config.call_timeout_s)))
        except Exception as err:  # noqa: BLE001 - the summary is all we know then
            log.warning("could not read the operations of bulk insert %s: %s", op.name,
                        _one_line(str(err)))
            return None
        found = [_op_errors(o) for o in ops if o.name != op.name and _is_done(o) and o.error]
        codes = {c for cs, _t in found for c in cs} - SUMMARY_CODES
        return (codes, "; ".join(sorted({t for _c, t in found}))) if codes else None

    def _mark_exhausted(self, zone: str, ask: Ask) -> None:
        with self._lock:
            self._exhausted[(zone, ask.pool, ask.shape)] = \
                self._clock() + self.config.exhausted_ttl_s

    def _submit(self, zone: str, names: list[str], ask: Ask, bulk: bool) -> Any:
        """One logical insert or bulk insert: every retry reuses its request_id."""
        from google.cloud import compute_v1

        project, timeout = self.config.project, self.config.call_timeout_s
        request_id = str(uuid.uuid4())
        if bulk:
            resource = compute_v1.BulkInsertInstanceResource(
                count=len(names), min_count=len(names),
                per_instance_properties={n: compute_v1.BulkInsertInstanceResourcePerInstanceProperties(name=n)
                                         for n in names},
                instance_properties=self._properties(ask, zone))
            request = compute_v1.BulkInsertInstanceRequest(
                project=project, zone=zone, bulk_insert_instance_resource_resource=resource,
                request_id=request_id)
            return self._call(lambda: self._instances.bulk_insert_unary(
                request=request, retry=None, timeout=timeout))
        insert = compute_v1.InsertInstanceRequest(
            project=project, zone=zone, instance_resource=self._instance(names[0], zone, ask),
            request_id=request_id)
        return self._call(lambda: self._instances.insert_unary(
            request=insert, retry=None, timeout=timeout))

    # -- request bodies ----------------------------------------------------------------------
    def _labels(self, ask: Ask) -> dict[str, str]:
        return {**self.config.labels, RUN_LABEL: self.config.run_label,
                POOL_LABEL: POOL_LABEL_VALUES[ask.pool], SLOTS_LABEL: str(ask.slots)}

    def _metadata(self, ask: Ask) -> Any:
        from google.cloud import compute_v1

        values = worker_metadata(self.config.metadata, ask.slots)
        if ask.gpus:
            values[GPU_DRIVER_ATTRIBUTE] = "True"
        return compute_v1.Metadata(items=[compute_v1.Items(key=k, value=v)
                                          for k, v in values.items()])

    def _scheduling(self, ask: Ask) -> Any:
        """Spot or standard, capped at ``max_run_duration``. A VM with GPUs cannot live-migrate:
        the API wants TERMINATE on host maintenance for it, on-demand or not."""
        from google.cloud import compute_v1

        cap = compute_v1.Duration(seconds=int(self.config.max_run_duration_s))
        if ask.pool is Pool.SPOT:
            return compute_v1.Scheduling(provisioning_model="SPOT",
                                         instance_termination_action="DELETE",
                                         on_host_maintenance="TERMINATE",
                                         automatic_restart=False, max_run_duration=cap)
        return compute_v1.Scheduling(provisioning_model="STANDARD",
                                     instance_termination_action="DELETE",
                                     on_host_maintenance="TERMINATE" if ask.gpus else "MIGRATE",
                                     automatic_restart=False, max_run_duration=cap)

    def _disk(self, disk_type: str, ask: Ask) -> Any:
        """The boot disk: the shape's size (or the run's), from the GPU image for GPU VMs."""
        from google.cloud import compute_v1

        size = (ask.shape.disk_gb if ask.shape else 0) or self.config.disk_gb
        if ask.gpus:
            size = max(size, self.config.gpu_disk_gb)
            if self.config.gpu_image is None:  # the front ends refuse GPU rules without one
                raise ValueError("GceConfig.gpu_image is needed for VMs with GPUs")
        params = compute_v1.AttachedDiskInitializeParams(
            source_image=self.config.gpu_image if ask.gpus else self.config.image,
            disk_size_gb=int(size), disk_type=disk_type)
        return compute_v1.AttachedDisk(boot=True, auto_delete=True, type_="PERSISTENT",
                                       initialize_params=params)

    def _accelerators(self, ask: Ask, zone: str | None) -> list[Any]:
        """``guestAccelerators`` for GPUs attached to an N1 VM (a zonal URL for an insert, the
        bare name for a bulk insert, as for machine types); none where the machine type comes
        with its GPUs (a2, g2, ...)."""
        from google.cloud import compute_v1

        shape = ask.shape
        if shape is None or not shape.gpus or comes_with_gpus(shape.machine_type):
            return []
        name = f"zones/{zone}/acceleratorTypes/{shape.gpu_type}" if zone else shape.gpu_type
        return [compute_v1.AcceleratorConfig(accelerator_type=name,
                                             accelerator_count=shape.gpu_count)]

    def _nic(self, zone: str) -> Any:
        """The VM's interface in ``zone``: network and subnetwork as the API takes them (a bare
        subnetwork name completed in the zone's region), and an external IP unless told not."""
        from google.cloud import compute_v1

        nic = compute_v1.NetworkInterface(**network_interface(
            self.config.network, self.config.subnetwork, self.config.project, zone))
        if self.config.external_ip:
            nic.access_configs = [compute_v1.AccessConfig(name="External NAT",
                                                          type_="ONE_TO_ONE_NAT")]
        return nic

    def _service_accounts(self) -> list[Any]:
        from google.cloud import compute_v1

        return [compute_v1.ServiceAccount(email=self.config.service_account or "default",
                                          scopes=list(self.config.scopes))]

    def _instance(self, name: str, zone: str, ask: Ask) -> Any:
        """The body of a single insert: machine, disk and accelerator types as zonal URLs."""
        from google.cloud import compute_v1

        return compute_v1.Instance(
            name=name, machine_type=f"zones/{zone}/machineTypes/{self._machine(ask)}",
            labels=self._labels(ask), metadata=self._metadata(ask),
            disks=[self._disk(f"zones/{zone}/diskTypes/{self.config.disk_type}", ask)],
            guest_accelerators=self._accelerators(ask, zone),
            network_interfaces=[self._nic(zone)], service_accounts=self._service_accounts(),
            scheduling=self._scheduling(ask))

    def _properties(self, ask: Ask, zone: str) -> Any:
        """The body of a bulk insert: machine, disk and accelerator types as bare names (URLs
        are refused)."""
        from google.cloud import compute_v1

        return compute_v1.InstanceProperties(
            machine_type=self._machine(ask), labels=self._labels(ask),
            metadata=self._metadata(ask), disks=[self._disk(self.config.disk_type, ask)],
            guest_accelerators=self._accelerators(ask, None),
            network_interfaces=[self._nic(zone)], service_accounts=self._service_accounts(),
            scheduling=self._scheduling(ask))

    # -- watching ---------------------------------------------------------------------------
    def _call(self, fn: Callable[[], T]) -> T:
        cfg = self.config
        return retry_call(fn, is_transient=is_transient, attempts=cfg.retry_attempts,
                          base=cfg.retry_base_s, cap=cfg.retry_cap_s, sleep=self._sleep,
                          rand=self._rand)

    def _check_pending(self) -> None:
        """Look (without blocking) at unfinished inserts; re-place late stockouts."""
        with self._lock:
            pending = list(self._pending)
        for entry in pending:
            try:
                op = self._call(lambda e=entry: self._operations.get(
                    project=self.config.project, zone=e.zone, operation=e.op, retry=None,
                    timeout=self.config.call_timeout_s))
            except Exception as err:  # noqa: BLE001 - gone (forgotten by GCE) or look again later
                if classify_error(err) == "notfound":
                    self._drop_pending(entry)
                continue
            if _is_done(op):
                self._drop_pending(entry)
                self._settle_late(entry, op)

    def _drop_pending(self, entry: _Pending) -> None:
        with self._lock:
            if entry in self._pending:
                self._pending.remove(entry)

    def _settle_late(self, entry: _Pending, op: Any) -> None:
        with self._lock:
            names, doomed, closed = list(entry.names), list(entry.doomed), self._closed
        try:
            outcome = self._outcome(entry.zone, op, names, entry.ask)
            if outcome == "ok":
                for name in doomed:
                    self._delete_quietly((entry.zone, name))
            elif outcome == "next zone" and names and not closed:
                self._place(names, entry.ask, entry.tried)
        except CreateFailed as failed:
            with self._lock:
                self._failures.append(failed)

    def _remember(self, name: str, zone: str, instance_id: int | None = None) -> None:
        with self._lock:
            self._zone_of[name] = zone
            if instance_id:
                self._ids.add(int(instance_id))

    def _remember_all(self, names: Iterable[str], zone: str, op: Any) -> None:
        names = list(names)
        for name in names:
            self._remember(name, zone)
        if len(names) == 1 and op.target_id:
            self._remember(names[0], zone, op.target_id)

    def _list_run(self) -> list[tuple[str, Any]]:
        cfg = self.config
        return self._call(lambda: _aggregated(self._instances, cfg.project,
                                              _run_filter(cfg.run_label), cfg.call_timeout_s,
                                              RUN_LISTING_FIELDS))

    def _to_instance(self, inst: Any) -> Instance | None:
        labels = dict(inst.labels)
        pool = POOLS_BY_LABEL.get(labels.get(POOL_LABEL, ""))
        if pool is None:
            return None  # labelled for the run but not made by an engine: close() still deletes it
        try:
            slots = int(labels.get(SLOTS_LABEL, "1"))
        except ValueError:
            slots = 1
        return Instance(inst.name, pool, slots, inst.status)

    def _locate(self, name: str) -> str | None:
        cfg = self.config
        flt = f'({_run_filter(cfg.run_label)}) (name = "{name}")'
        found = self._call(lambda: _aggregated(self._instances, cfg.project, flt,
                                               cfg.call_timeout_s))
        return found[0][0] if found else None

    def _is_ours(self, zone: str, name: str) -> bool:
        """Does the existing instance ``name`` in ``zone`` belong to this run?"""
        try:
            inst = self._call(lambda: self._instances.get(
                project=self.config.project, zone=zone, instance=name, retry=None,
                timeout=self.config.call_timeout_s))
        except Exception:  # noqa: BLE001 - cannot tell: not ours
            return False
        return dict(inst.labels).get(RUN_LABEL) == self.config.run_label

    def _preemption_ops(self, zone: str) -> list[Any]:
        from google.cloud import compute_v1

        request = compute_v1.ListZoneOperationsRequest(
            project=self.config.project, zone=zone, filter=f'operationType = "{PREEMPTED_OP}"')
        return list(self._operations.list(request=request, retry=None,
                                          timeout=self.config.call_timeout_s))

    def _ours(self, op: Any) -> bool:
        """Is a preemption operation about one of our VMs (by id, else by name and time)?"""
        if op.target_id and int(op.target_id) in self._ids:
            return True
        created = self._created_at.get(_name_of(op.target_link))
        if created is None:
            return False
        when = _epoch(op.insert_time)
        return when is None or when >= created - PREEMPT_CLOCK_SLACK_S

    def _delete_quietly(self, target: tuple[str, str]) -> tuple[Any | None, bool]:
        """(the delete operation, False), or (None, True) if the VM is gone already, or
        (None, False) if the call failed (close() tries again)."""
        zone, name = target
        try:
            op = delete_call(self._instances, self.config.project, zone, name,
                             self.config.call_timeout_s, self._call)
        except Exception as err:  # noqa: BLE001 - close() lists again and retries
            log.warning("deleting %s in %s failed: %s", name, zone, _one_line(str(err)))
            return None, False
        return op, op is None

    def _wait_deletes(self, issued: dict[str, tuple[str, str]], bound: float) -> list[str]:
        """Wait (bounded) for our delete operations; forget and return the ones DONE."""
        deadline = time.monotonic() + bound
        done = []
        for name, (zone, op_name) in list(issued.items()):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                op = self._operations.wait(project=self.config.project, zone=zone,
                                           operation=op_name, retry=None, timeout=left + 5)
            except Exception:  # noqa: BLE001 - listed again shortly
                continue
            if _is_done(op):
                del issued[name]
                done.append(name)
        return done


def worker_metadata(metadata: dict[str, str], slots: int) -> dict[str, str]:
    """The caller's metadata with the worker settings' ``slots`` set to this VM's slots."""
    out = dict(metadata)
    raw = out.get(WORKER_ATTRIBUTE)
    if raw:
        try:
            settings = json.loads(raw)
        except ValueError:
            return out
        if isinstance(settings, dict):
            settings["slots"] = slots
            out[WORKER_ATTRIBUTE] = json.dumps(settings, separators=(",", ":"))
    return out


# -- expocloud cleanup -----------------------------------------------------------------------
def find_instances(project: str, zones: list[str] | None, endpoint: str | None = None,
                   run_label: str | None = None) -> list[dict]:
    """expocloud's VMs (labelled ``expocloud-run``; one run's if ``run_label``) in ``zones``
    (every zone if empty): name, zone, status, labels, created."""
    client, _ops = make_clients(endpoint)
    flt = _run_filter(run_label)
    if zones:
        found = [(zone, inst) for zone in zones
                 for inst in _default_call(lambda z=zone: _zone_list(client, project, z, flt, 60.0))]
    else:
        found = _default_call(lambda: _aggregated(client, project, flt, 60.0))
    out = []
    for zone, inst in found:
        labels = dict(inst.labels)
        if RUN_LABEL not in labels or (run_label and labels[RUN_LABEL] != run_label):
            continue
        out.append({"name": inst.name, "zone": zone, "status": inst.status, "labels": labels,
                    "created": inst.creation_timestamp})
    return out


def delete_instances(project: str, items: list[dict], endpoint: str | None = None,
                     timeout_s: float = 300.0) -> list[str]:
    """Delete ``items`` (dicts with name and zone, as ``find_instances`` returns) and wait,
    bounded, for the deletions; return the names deleted or already gone."""
    client, ops = make_clients(endpoint)
    started: list[tuple[dict, Any]] = []
    for item in items:
        op = delete_call(client, project, item["zone"], item["name"], 60.0, _default_call)
        started.append((item, op))
    deadline = time.monotonic() + timeout_s
    done = []
    for item, op in started:
        left = deadline - time.monotonic()
        if op is not None and not _is_done(op) and left > 0:
            try:
                op = ops.wait(project=project, zone=item["zone"], operation=op.name, retry=None,
                              timeout=left + 5)
            except Exception as err:  # noqa: BLE001 - reported as not deleted
                log.warning("waiting for the deletion of %s failed: %s", item["name"], err)
                continue
        if op is None or (_is_done(op) and not _op_errors(op)[0]):
            done.append(item["name"])
    return done
