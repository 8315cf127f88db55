"""What a failed insert means, said once: the ``CreateFailed`` of an insert call that raised
(quota, transient, a name clash, a refusal to fix in the settings), and the real errors behind
a bulk insert's summary code, read from the operations of its instances.
"""

from __future__ import annotations

import logging
from typing import Any

from expo_executor.engines.base import CreateFailed
from expo_executor.engines.gce.answers import is_done, one_line, op_errors, quota_message
from expo_executor.engines.gce.compute_lib import compute_types
from expo_executor.engines.gce.config import Ask, Call
from expo_executor.gcp.errors import SUMMARY_CODES

log = logging.getLogger(__name__)


def call_failed(err: BaseException, kind: str, zone: str, names: list[str], ask: Ask,
                project: str) -> CreateFailed:
    """The CreateFailed for an insert call that raised."""
    raw = one_line(getattr(err, "message", None) or str(err))
    if kind == "quota":
        return quota_failed(raw, zone, names, ask, project)
    if kind == "transient":
        return ask.failed(names, f"the Compute API kept failing in {zone} ({raw}); "
                                 "trying again later", stop_growth=False)
    if kind == "conflict":
        return ask.failed(names, f"an instance named {names[0]} already exists in {zone} "
                                 "and is not this run's", stop_growth=False)
    return ask.failed(names, f"GCE refused to create VMs in {zone}: {raw}; fix the "
                             "--expocloud GCE settings (image, network, service account, "
                             "machine type, GPUs)", stop_growth=True)

def quota_failed(raw: str, zone: str, names: list[str], ask: Ask, project: str) -> CreateFailed:
    """A quota is full: the pool waits until one of the run's VMs ends and frees some
    (the coordinator stops it if none is alive to free any)."""
    return ask.failed(names, quota_message(raw, project, ask.pool, zone),
                      stop_growth=False, quota=True)


def group_errors(operations: Any, project: str, zone: str, op: Any, call: Call,
                 timeout: float) -> tuple[set[str], str] | None:
    """The error codes and messages of the instance operations of a bulk insert (its
    ``operationGroupId``); None if they cannot be read or say nothing more."""
    compute = compute_types()

    group = getattr(op, "operation_group_id", "")
    if not group:
        return None
    request = compute.ListZoneOperationsRequest(
        project=project, zone=zone, filter=f'operationGroupId = "{group}"')
    try:
        ops = call(lambda: list(operations.list(request=request, retry=None,
                                                timeout=timeout)))
    except Exception as err:  # noqa: BLE001 - the summary is all we know then
        log.warning("could not read the operations of bulk insert %s: %s", op.name,
                    one_line(str(err)))
        return None
    found = [op_errors(o) for o in ops if o.name != op.name and is_done(o) and o.error]
    codes = {c for cs, _t in found for c in cs} - SUMMARY_CODES
    return (codes, "; ".join(sorted({t for _c, t in found}))) if codes else None
