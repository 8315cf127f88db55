"""Before a new run starts anything: the runs of this host whose coordinator died are adopted,
or their workers stopped; what they finished after the crash is harvested either way.

A coordinator killed mid-run (SIGKILL, a host that died, a laptop that slept) leaves workers
that run on until their dead man's switch fires, on the same outputs a rerun is about to
produce. A new run on the same working directory finds such runs through their host-side
state (:mod:`run_state`) and first harvests what their workers finished after the crash
(:mod:`harvest`, with the run key the crash left behind): timeouts join their frontier, solved
jobs are handed to the new run, whose front end reports each one solved without running it
when Snakemake submits it again (``--rerun-incomplete``) and its outputs exist. Snakemake does
not delete such a job's outputs before our executor sees it: a remote executor's job removes
its stale outputs in its own process on the worker (``Job.prepare`` runs in Snakemake's local
executor only), so outputs a finished job uploaded are still there.

Then, while some of its workers live with jobs in flight, the run is adopted (:mod:`adopt`):
those jobs' results are used, not recomputed. Otherwise (nothing in flight, or the adoption
failed: its bucket or engine does not answer) its workers are stopped, and the rerun waits
until they are gone: no job of the old run can then write an output the rerun writes too.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from expo_executor.coordinator.adopt import Adoption
from expo_executor.coordinator.crashed_workers import CrashedWorkers
from expo_executor.coordinator.harvest import Harvest, harvest
from expo_executor.coordinator.requests import Harvested
from expo_executor.runs.files import RunFiles
from expo_executor.coordinator.run_state import KEY, HeldRun, crashed_runs
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.protocol.bucket import open_bucket


@dataclass
class Recovery:
    """What a new run takes from the crashed runs before it starts: their solved jobs by
    stable identity, and the runs it adopted."""

    harvested: dict[str, Harvested] = field(default_factory=dict)
    adopted: list[Adoption] = field(default_factory=list)


#: How long a rerun waits for a crashed run's VMs to be gone before it refuses to start.
GONE_TIMEOUT_S = 300.0


def recover(state_root: Path, run_dir: Path, log: Callable[[str], None],
            gone_timeout: float = GONE_TIMEOUT_S, adopt: bool = True) -> Recovery:
    """Adopt every crashed run of this host (not ``run_dir``, the new run) that has jobs in
    flight, or else stop its workers; harvest each one's results either way (one line each). Raises ExpoError when a crashed run's VMs are still
    there after ``gone_timeout`` seconds."""
    recovery = Recovery()
    for held in crashed_runs(state_root, skip=run_dir):
        adoption = None
        state = StateDir(state_root)
        try:
            if adopt:
                found = _harvest(held, state, run_dir.name, log)
                adoption = _adopt(held, found, log)
            if adoption is None:
                _stop(held, run_dir, gone_timeout, log)
                found = _harvest(held, state, run_dir.name, log)  # no result can come now
                held.end()
            recovery.harvested.update(found.solved)
        finally:
            if adoption is None:
                held.release()
        if adoption is not None:
            recovery.adopted.append(adoption)
    return recovery


def _stop(held: HeldRun, run_dir: Path, gone_timeout: float, log: Callable[[str], None]) -> None:
    state = held.state
    try:
        stopped = CrashedWorkers(state, held.dir).stop(gone_timeout=gone_timeout)
    except ExpoError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure: the same one line and fix
        raise ExpoError("--expocloud-state-dir", f"the workers of the crashed run "
                        f"{state.run_id} could not be stopped ({exc})",
                        f"stop them (expocloud cleanup --run {state.run_id}), then "
                        f"delete {held.dir / KEY}") from None
    RunFiles(held.dir).stopped_by(run_dir.name, stopped)
    log(f"expocloud: run {state.run_id}'s coordinator died before the run ended: "
        f"stopped {stopped} of its workers before this run starts")


def _adopt(held: HeldRun, found: Harvest, log: Callable[[str], None]) -> Adoption | None:
    """The crashed run adopted, or None when nothing of it is in flight (or it cannot be
    reached: one line, and its workers are stopped instead)."""
    run_key, state = held.key(), held.state
    if run_key is None:
        return None
    adoption = None
    try:
        adoption = Adoption(held, CrashedWorkers(state, held.dir),
                            open_bucket(state.bucket_url), run_key, log)
        in_flight = adoption.take_over(found, time.time())
    except Exception as exc:  # noqa: BLE001 - the bucket, the engine: stop it instead
        log(f"expocloud: cannot adopt run {state.run_id} ({type(exc).__name__}: {exc}); "
            "its workers are stopped instead")
        if adoption is not None:
            adoption.channel.close()
        return None
    if not in_flight:
        adoption.channel.close()
        return None
    log(f"expocloud: run {state.run_id}'s coordinator died before the run ended: adopted "
        f"{in_flight} job(s) in flight on {len(adoption.vms)} of its workers; their results "
        "are used, and each worker is deleted once it holds nothing more")
    return adoption


def _harvest(held: HeldRun, state: StateDir, by_run: str,
             log: Callable[[str], None]) -> Harvest:
    """The crashed run's results so far; a failure to read them is one line (its finished
    jobs then run again), never a reason to keep the new run from starting."""
    run_key = held.key()
    if run_key is None:
        return Harvest({}, set())
    try:
        return harvest(held.dir, open_bucket(held.state.bucket_url), run_key, state, by_run,
                       log)
    except Exception as exc:  # noqa: BLE001 - the bucket, its credentials, a bad record
        log(f"expocloud: could not read the results of run {held.state.run_id} "
            f"({type(exc).__name__}: {exc}); the jobs it finished after its coordinator died "
            "run again")
        return Harvest({}, set())
