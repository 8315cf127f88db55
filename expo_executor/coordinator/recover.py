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

Every run with jobs in flight is taken over first (its workers hear from the rerun at once),
then the others are stopped. That wait can be long (deleting VMs on GCE: up to
``GONE_TIMEOUT_S`` a run) and the coordinator's loop, which keeps the adopted workers alive
every round, has not started: so the wait writes their pulse itself, every half
``heartbeat`` (as the loop does), and no wait outlasts their grace.
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
#: The pulse interval when the caller gives none (launch.py gives the run's own).
HEARTBEAT_S = 10.0


def recover(state_root: Path, run_dir: Path, log: Callable[[str], None],
            gone_timeout: float = GONE_TIMEOUT_S, adopt: bool = True,
            heartbeat: float = HEARTBEAT_S) -> Recovery:
    """Adopt every crashed run of this host (not ``run_dir``, the new run) that has jobs in
    flight, then stop the others' workers, keeping the adopted ones alive meanwhile (their
    pulse every half ``heartbeat``, the coordinator's pulse interval); harvest each one's
    results either way (one line each). Raises ExpoError when a crashed run's VMs are still
    there after ``gone_timeout`` seconds."""
    recovery = Recovery()
    state = StateDir(state_root)
    to_stop = crashed_runs(state_root, skip=run_dir)
    try:
        for held in list(to_stop):
            found = _harvest(held, state, run_dir.name, log) if adopt else None
            adoption = _adopt(held, found, log) if found is not None else None
            if adoption is not None:
                to_stop.remove(held)
                recovery.adopted.append(adoption)
                recovery.harvested.update(found.solved)
        keep = _keeper(recovery.adopted, heartbeat, log)
        while to_stop:
            held = to_stop[0]
            _stop(held, run_dir, gone_timeout, log, keep)
            found = _harvest(held, state, run_dir.name, log)  # no result can come now
            held.end()
            recovery.harvested.update(found.solved)
            held.release()
            to_stop.pop(0)
    except BaseException:
        for adoption in recovery.adopted:  # the rerun does not start: a later one adopts
            adoption.channel.close()
            adoption.held.release()
        raise
    finally:
        for held in to_stop:
            held.release()
    return recovery


def _keeper(adopted: list[Adoption], heartbeat: float,
            log: Callable[[str], None]) -> Callable[[], None]:
    """What a wait for a crashed run's VMs to go calls at each look: the adopted runs' pulse
    when due. A write that fails is said once, and tried again at the next look."""
    said: set[str] = set()

    def keep() -> None:
        for adoption in adopted:
            try:
                adoption.keep_alive(time.time(), heartbeat / 2)
            except Exception as exc:  # noqa: BLE001 - the bucket: the next look tries again
                if adoption.run_id not in said:
                    said.add(adoption.run_id)
                    log(f"expocloud: cannot write the pulse of adopted run {adoption.run_id} "
                        f"yet ({type(exc).__name__}: {exc}); trying again")
    return keep


def _stop(held: HeldRun, run_dir: Path, gone_timeout: float, log: Callable[[str], None],
          waiting: Callable[[], None] | None = None) -> None:
    state = held.state
    try:
        stopped = CrashedWorkers(state, held.dir).stop(gone_timeout=gone_timeout,
                                                       waiting=waiting)
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
