"""The GCE engine: a run's workers as Compute Engine VMs, Spot or on-demand.

Built on the real ``google.cloud.compute_v1`` REST client, imported lazily so that loading the
plugin stays cheap, and only as far as the engine uses it (``compute_lib``). What it
guarantees, and why:

- Every VM carries ``scheduling.max_run_duration`` (termination action DELETE): a coordinator
  that dies cannot leave VMs billing forever. Spot VMs are SPOT / DELETE / TERMINATE / no restart.
- Labels ``expocloud-run``, ``expocloud-pool``, ``expocloud-slots`` let ``list()``, ``close()`` and
  ``expocloud cleanup`` find the run's VMs from the cloud's own records, not from memory.
- Every insert, bulk insert and delete carries a fresh ``request_id`` that its retries reuse, so a
  retried call whose first answer was lost is not applied twice.
- Rate limits (403 rateLimitExceeded, 429) and transient errors (``errors.classify_error``) back
  off with full jitter (``config.CallPolicy``, over ``retry.retry_call``); a stockout moves on
  to the next zone, and the zone is avoided for a while by that pool (Spot and on-demand
  capacity run out separately), its region tried after the others (``placement``); a quota
  error moves on to another region if the run has one, else holds the pool with a message
  naming the quota, the region and the fix.
- ``op.result()`` is never called: for an unfinished operation it polls through an operations
  client built without our ``client_options``, i.e. against Google itself. Unfinished inserts are
  tracked and checked (without blocking) by ``list()``, which re-places a late stockout.
- Metadata values (the run key among them) are never logged.

Its parts, one idea each: ``config`` (GceConfig, Ask, labels, the retry defaults), ``vm_bodies``
(what an insert sends) and ``inserts`` (sending it), ``placement`` (which zone first, across
regions), ``insert_errors`` (what a failed insert means), ``preemptions``,
``listing`` (the run's VMs, ``find_instances``), ``teardown`` (deleting VMs until they are gone:
close(), ``expocloud cleanup`` and a crashed run's stop) and ``answers`` (reading operations).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from expo_executor.core.scheduler import Pool
from expo_executor.core.shapes import Shape
from expo_executor.engines.base import CreateFailed, Instance
from expo_executor.engines.gce.answers import is_done, one_line, op_errors
from expo_executor.engines.gce.clients import delete_call, make_clients
from expo_executor.engines.gce.config import POOL_LABEL_VALUES, Ask, Call, GceConfig
from expo_executor.gcp.errors import SUMMARY_CODES, classify_codes, classify_error
from expo_executor.engines.gce.insert_errors import call_failed, group_errors, quota_failed
from expo_executor.engines.gce.listing import is_ours, locate, run_instances, to_instance
from expo_executor.engines.gce.inserts import submit
from expo_executor.engines.gce.placement import Placement, RegionWeight
from expo_executor.engines.gce.preemptions import Preemptions
from expo_executor.engines.gce.references import region_of
from expo_executor.engines.gce.teardown import Teardown
from expo_executor.engines.gce.vm_bodies import VmBodies

log = logging.getLogger(__name__)


@dataclass
class _Pending:
    """An insert (or bulk insert) whose operation was not DONE when we last looked."""

    zone: str
    op: str
    names: list[str]
    ask: Ask
    tried: list[str]
    doomed: list[str] = field(default_factory=list)  # deleted meanwhile: delete once created


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
        self._call: Call = config.calls.caller(sleep, rand)
        self._clock = clock
        self._instances, self._operations = make_clients(config.endpoint)
        self._bodies = VmBodies(config)
        # across regions: which zone first (the cheapest region not cooled down)
        self._placement = Placement(config.zones, config.region_weight, config.exhausted_ttl_s)
        self._preemptions = Preemptions(self._operations, config.project, self._call,
                                        config.call_timeout_s)
        self._teardown = Teardown(self._instances, self._operations, config.project,
                                  self._call, config.call_timeout_s)
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
        self._deleted: set[str] = set()  # names whose delete Compute Engine accepted
        self._closed = False
        self.key_grantor: Any = None  # answers its workers' key requests (launch.build_engine)
        self.staged_bytes = 0  # what each VM reads from the bucket at boot (launch.build_engine)

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
            zone = locate(self._instances, self._call, self.config, name)
            if zone is None:
                return
        delete_call(self._instances, self.config.project, zone, name,
                    self.config.call_timeout_s, self._call)
        with self._lock:
            self._deleted.add(name)

    def weigh_regions(self, weight: RegionWeight | None) -> None:
        """Order the regions by ``weight`` from now on (the coordinator's prices)."""
        with self._lock:
            self._placement.weight = weight

    def zone_of(self, name: str) -> str | None:
        """The zone VM ``name`` was created in (None: not known to this engine)."""
        with self._lock:
            return self._zone_of.get(name)

    def list(self) -> list[Instance]:
        self._check_pending()
        out = []
        for zone, inst in run_instances(self._instances, self._call, self.config):
            self._remember(inst.name, zone, inst.id)
            found = to_instance(inst, zone)
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
            ids, created_at = set(self._ids), dict(self._created_at)
        return self._preemptions.since_last(zones, ids, created_at)

    def close(self) -> None:
        """Delete every VM labelled for the run (not only ours) and wait until none is left.

        What a listing shows is not enough: a VM whose insert is young is not listed yet, so
        every VM this engine created is deleted by name too, until its delete is done or it is
        found gone (``teardown.Teardown``, which ``expocloud cleanup`` runs too). Bounded by
        ``close_timeout_s`` of real time; what is left then is logged with the fix.
        """
        with self._lock:
            self._closed = True
            self._pending.clear()
            unconfirmed = {name: zone for name, zone in self._zone_of.items()
                           if name not in self._deleted}
        left = self._teardown.until_gone(unconfirmed, self.config.close_timeout_s,
                                         listed=self._list_quietly, gone=self._confirm_deleted)
        if left is not None:
            names = ", ".join(n for _z, n in left) or "unknown (listing fails)"
            log.error("VMs of run %s still exist after %.0f s: %s; fix: run "
                      "`expocloud cleanup` for this run", self.config.run_label,
                      self.config.close_timeout_s, names)

    def _confirm_deleted(self, name: str) -> None:
        """``name`` is gone: a later close() does not delete it again."""
        with self._lock:
            self._deleted.add(name)

    def _list_quietly(self) -> list[tuple[str, str]] | None:
        """(zone, name) of the run's VMs; None if listing failed even after retries."""
        try:
            return [(zone, inst.name) for zone, inst in run_instances(self._instances, self._call, self.config)]
        except Exception as err:  # noqa: BLE001 - close() keeps trying until its deadline
            log.warning("listing the run's VMs failed: %s", one_line(str(err)))
            return None

    # -- placing VMs ------------------------------------------------------------------------
    def _place(self, names: list[str], ask: Ask, tried: list[str]) -> None:
        """Create ``names`` in the first zones with capacity; raise CreateFailed if none has
        (for good if every zone refuses what it is asked for)."""
        left = names
        # asked again after each zone: a stockout there cools its region down (placement.py)
        while left and (candidates := self._candidate_zones(tried, ask)):
            tried = [*tried, candidates[0]]
            left = self._try_zone(candidates[0], left, ask, tried, bulk=True)
        if not left:
            return
        what, kind = self._bodies.what(ask), POOL_LABEL_VALUES[ask.pool]
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

    def _candidate_zones(self, tried: list[str], ask: Ask) -> list[str]:
        """The zones left to try for ``ask``, in the order to try them (``placement``)."""
        now = self._clock()
        with self._lock:
            left = [z for z in self.config.zones if z not in tried
                    and (z, ask.pool, ask.shape) not in self._refused
                    and self._exhausted.get((z, ask.pool, ask.shape), 0.0) <= now]
            return self._placement.order(left, ask.pool, ask.shape, now)

    def _quota_elsewhere(self, zone: str, ask: Ask, tried: list[str], message: str) -> bool:
        """A full quota in ``zone``'s region: when another region is left to try, avoid this
        one's zones for a while and say so (True); else the pool waits (False)."""
        region = region_of(zone)
        if not any(region_of(z) != region for z in self._candidate_zones(tried, ask)):
            return False
        with self._lock:
            until = self._clock() + self.config.exhausted_ttl_s
            for other in self.config.zones:
                if region_of(other) == region:
                    self._exhausted[(other, ask.pool, ask.shape)] = until
            self._placement.cool(zone, ask.pool, ask.shape, self._clock())
        log.warning("GCE quota full in %s for %s VMs, trying another region: %s", region,
                    POOL_LABEL_VALUES[ask.pool], one_line(message))
        return True

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
                said = getattr(err, "message", None) or str(err)
                if kind in ("stockout", "zonal"):
                    self._move_on(zone, ask, kind, said)
                    return rest
                if kind == "quota" and self._quota_elsewhere(zone, ask, tried, said):
                    return rest
                if kind == "conflict" and use_bulk:  # someone holds a name: one by one
                    return self._try_zone(zone, rest, ask, tried, bulk=False)
                if kind == "conflict" and is_ours(self._instances, self._call, self.config,
                                                  zone, batch[0]):
                    self._remember(batch[0], zone)
                    continue
                raise call_failed(err, kind, zone, rest, ask, self.config.project) from err
            self._remember_all(batch, zone, op)
            if self._outcome(zone, op, rest, ask, tried) == "next zone":
                return rest
            if not is_done(op):
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
            self._refused[(zone, ask.pool, ask.shape)] = one_line(message)[:300]
            self._placement.cool(zone, ask.pool, ask.shape, self._clock())
        log.warning("GCE refuses %s VMs of %s in %s, trying the next zone: %s",
                    POOL_LABEL_VALUES[ask.pool], self._bodies.what(ask), zone, one_line(message))

    def _outcome(self, zone: str, op: Any, names: list[str], ask: Ask,
                 tried: list[str]) -> str:
        """ok, running or next zone (a stockout, or a refusal of this zone's) for an insert
        operation; quota and other errors raise. A bulk insert's summary code is resolved
        from the operations of its instances."""
        if not is_done(op):
            return "running"
        codes, text = op_errors(op)
        if not codes:
            return "ok"
        if codes & SUMMARY_CODES:
            codes, text = group_errors(self._operations, self.config.project, zone, op,
                                       self._call, self.config.call_timeout_s) or (codes, text)
        kind = classify_codes(codes)
        if kind in ("stockout", "zonal"):
            self._move_on(zone, ask, kind, text)
            return "next zone"
        if kind == "quota" and self._quota_elsewhere(zone, ask, tried, text):
            return "next zone"
        if kind == "quota":
            raise quota_failed(text, zone, names, ask, self.config.project)
        if kind == "later":
            raise ask.failed(names, f"GCE could not create VMs in {zone} just now ({text}); "
                                    "trying again later", stop_growth=False)
        raise ask.failed(names, f"GCE could not create VMs in {zone}: {text}; fix the "
                                "--expocloud GCE settings", stop_growth=True)

    def _mark_exhausted(self, zone: str, ask: Ask) -> None:
        with self._lock:
            self._exhausted[(zone, ask.pool, ask.shape)] = \
                self._clock() + self.config.exhausted_ttl_s
            self._placement.cool(zone, ask.pool, ask.shape, self._clock())

    def _submit(self, zone: str, names: list[str], ask: Ask, bulk: bool) -> Any:
        """One logical insert or bulk insert: every retry reuses its request_id."""
        return submit(self._instances, self._bodies, self._call, zone, names, ask, bulk)

    # -- watching ---------------------------------------------------------------------------
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
            if is_done(op):
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
            outcome = self._outcome(entry.zone, op, names, entry.ask, entry.tried)
            if outcome == "ok":
                for name in doomed:
                    self._teardown.delete_quietly((entry.zone, name))
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
