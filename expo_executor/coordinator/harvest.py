"""What a crashed run's workers finished after its coordinator died: read back, not recomputed.

A coordinator killed mid-run leaves results in its bucket that it never read: jobs that ended
between the crash and the rerun (recover.py). The rerun reads them before it starts anything
(again after stopping the workers, when it stops them: no result can come any more then):

- each job of the run was recorded at submission in the run directory's ``submitted.jsonl``
  (:func:`submission`): its key, a *stable identity* (what names the same job in a later run:
  a Snakemake job's rule and output files, the front end's :attr:`JobRequest.identity`), its
  frontier (family and hardness point) and label, so that a result can be acted on without
  the request that made it;
- every result object of the run (one result, or a batch of one worker's results named for
  its first job) is verified with the key of the worker it names (derived from the run key
  the crash left behind, :mod:`worker_keys`): an object signed with any other key, or
  naming another first job or worker than its key, is ignored; so is the result of a job from
  a worker it was never given to (``assigned.jsonl``, written by the coordinator before the
  worker's inbox): a worker signs as itself, but could sign a result of any job, e.g. a
  timeout that would poison the frontier;
- a job already in the run's ``jobs.jsonl`` was handled by the coordinator before it died;
  of the others, a timeout joins its family's frontier (kept: later runs skip what it
  dominates; with --expocloud-confirm-timeouts only one timed out on two workers, else the
  job runs again) and is recorded in the dead run's ``jobs.jsonl``; a solved result goes into the
  harvest, by stable identity, for the rerun's front end: a job it submits with that identity
  whose outputs exist is reported solved without running (Coordinator._intake).

Jobs with no final result yet are in flight: adopted with their workers (adopt.py), or run
again once those workers are stopped (recover.py).
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple

from expo_executor.coordinator.requests import Harvested, JobRequest
from expo_executor.runs.files import RUN, RunFiles
from expo_executor.coordinator.state import FamilyRef, StateDir
from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.records import AttemptEnd
from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import WORKERS_PREFIX, parse_result_key
from expo_executor.protocol.records import ResultBatch, WorkerResult
from expo_executor.protocol.worker_keys import worker_key


def submission(request: JobRequest) -> dict[str, Any]:
    """The ``submitted.jsonl`` line of a job: what a later process needs to act on its result
    (its frontier, hardness point and label) and to recognise it (its stable identity)."""
    task, family = request.task, request.family
    point = task.point if family is not None else None
    return {"v": 1, "key": task.key, "identity": request.identity, "label": task.label,
            "family": dataclasses.asdict(family) if family is not None else None,
            "point": {"scope": list(point.scope), "vector": list(point.vector)}
            if point is not None else None,
            "deadline_s": request.spec.deadline_s, "meta": request.meta.to_dict()}


class Harvest(NamedTuple):
    """What a harvest found: the solved jobs by stable identity, and the keys of every job
    that has a final result (solved, timed out, failed): none of those is in flight."""

    solved: dict[str, Harvested]
    ended: set[str]


def harvest(run_dir: Path, bucket: Bucket, run_key: bytes, state: StateDir, by_run: str,
            log: Callable[[str], None]) -> Harvest:
    """Read the results of the crashed run in ``run_dir`` from ``bucket`` (its workers gone,
    or adopted: adopt.py takes what they report later): its timeouts join their frontiers,
    its solved jobs are returned by stable identity. One line says what was found;
    ``by_run`` is the rerun doing it."""
    files = RunFiles(run_dir)
    done = {record.get("key") for record in files.jobs()}
    submitted = {record["key"]: record for record in files.submitted() if "key" in record}
    given = {(record.get("key"), record.get("worker")) for record in files.assigned()}
    settings = (files.read_json(RUN) or {}).get("settings") or {}
    confirm = bool(settings.get("confirm_timeouts")) if isinstance(settings, dict) else False
    found: dict[str, Harvested] = {}
    timeouts = 0
    pending = {pair for pair in given if pair[0] not in done}  # the others it handled itself
    finals = _final_results(bucket, run_key, pending, log)
    for key, results in sorted(finals.items()):
        record = submitted.get(key)
        if record is None:
            continue
        ends = {result.end: result for result in results}
        if AttemptEnd.SOLVED in ends and record.get("identity"):
            result = ends[AttemptEnd.SOLVED]
            found[record["identity"]] = Harvested(run_dir.name, key, result.worker,
                                                  result.runtime_s, result.command_s)
        elif AttemptEnd.SOLVED not in ends and AttemptEnd.TIMEOUT in ends:
            timed_out = [r for r in results if r.end is AttemptEnd.TIMEOUT]
            if confirm and len(timed_out) < 2:
                continue  # unconfirmed (--expocloud-confirm-timeouts): it runs again
            record_timeout(files, state, record, ends[AttemptEnd.TIMEOUT], by_run)
            timeouts += 1
    log(f"expocloud: harvested {len(found) + timeouts} results of run {run_dir.name}: "
        f"{len(found)} solved, {timeouts} timeouts")
    return Harvest(found, set(finals) | done)


def _final_results(bucket: Bucket, run_key: bytes, given: set[tuple[str, str]],
                   log: Callable[[str], None]) -> dict[str, list[WorkerResult]]:
    """Each job's final results (solved, timed out, failed; one per worker: a timeout may have
    been re-run on another worker, --expocloud-confirm-timeouts) among the run's result
    objects that verify with their worker's key, from a worker the job was ``given`` to. Only
    the objects of workers with a ``given`` pair are read: a long run's results are mostly of
    jobs its coordinator read itself (and deleted). An object may hold several results of its
    worker (a ResultBatch, named for its first job), each taken on its own."""
    chosen: dict[str, list[WorkerResult]] = {}
    workers = {worker for _, worker in given}
    for name in sorted(bucket.list(WORKERS_PREFIX)):
        pair = parse_result_key(name)
        if pair is None or pair[1] not in workers:
            continue
        for result in _object_results(bucket, name, pair, run_key, log):
            if (result.key, result.worker) in given and result.end.outcome is not None:
                chosen.setdefault(result.key, []).append(result)
    return chosen


def _object_results(bucket: Bucket, name: str, pair: tuple[str, str], run_key: bytes,
                    log: Callable[[str], None]) -> tuple[WorkerResult, ...]:
    """The results in result object ``name`` (``pair``: its job and worker) when it verifies
    with its worker's key and names its first job and its worker; none otherwise."""
    key, worker = pair
    try:
        blob = bucket.read(name)  # bounded: ObjectTooLarge is a MessageError
        if blob is None:
            return ()
        batch = ResultBatch.decode(blob.data, worker_key(run_key, worker))
    except messages.MessageError as exc:
        log(f"expocloud: ignoring a result of {key} that does not verify: {exc}")
        return ()
    if batch.worker != worker or batch.first != key:
        return ()
    return batch.results


def record_timeout(files: RunFiles, state: StateDir, record: dict[str, Any],
                 result: WorkerResult, by_run: str) -> None:
    """A timeout the crashed coordinator never read: to its frontier (when the job had one)
    and to the crashed run's ``jobs.jsonl``."""
    family, point = record.get("family"), record.get("point")
    if family is not None and point is not None:
        state.add_timeout(FamilyRef(**family), HardnessPoint(tuple(point["scope"]),
                                                             tuple(point["vector"])),
                          record["label"], files.run_id)
    ran = result.timed_s
    files.append_job({
        "v": 1, "key": result.key, **record.get("meta", {}), "outcome": "timeout",
        "killed": False, "runtime_s": result.runtime_s, "worker": result.worker,
        "started": result.started, "ended": time.time(), "command_s": result.command_s,
        "overhead_s": round(result.overhead_s, 3) if result.overhead_s is not None else None,
        "deadline_s": record.get("deadline_s"),
        "reason": f"timed out after {ran:.0f} s (read after the coordinator died, by run "
                  f"{by_run})",
        "dominator": None, "pool": None, "preemptions": 0, "first_timeout_on": None,
        "logs_dir": None, "harvested_by": by_run})
