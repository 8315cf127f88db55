"""Before a new run starts anything: a crashed run's workers are stopped, then what they
finished after the crash is harvested.

A coordinator killed mid-run (SIGKILL, a host that died, a laptop that slept past the
workers' grace) leaves workers that run on until their dead man's switch fires, on the same
outputs a rerun is about to produce. A new run on the same working directory finds such runs
through their host-side state (:mod:`run_state`), deletes their VMs (GCE, by the run's label)
or powers off their worker processes (local engine), and waits until they are gone before
it starts: no job of the old run can then write an output the rerun writes too.

Then, with no result of the old run still to come, it harvests what the old workers finished
after the crash (:mod:`harvest`, with the run key the crash left behind): timeouts join their
frontier, solved jobs are handed to the new run, whose front end reports each one solved
without running it when Snakemake submits it again (``--rerun-incomplete``) and its outputs
exist. Snakemake does not delete such a job's outputs before our executor sees it: a remote
executor's job removes its stale outputs in its own process on the worker (``Job.prepare``
runs in Snakemake's local executor only), so outputs a finished job uploaded are still there.

Adopting the old run (taking over its live workers and in-flight jobs) is not built: jobs
still running when the rerun stopped their workers run again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from expo_executor.coordinator.harvest import harvest
from expo_executor.coordinator.requests import Harvested
from expo_executor.coordinator.run_files import RunFiles
from expo_executor.coordinator.run_state import KEY, HeldRun, RunState, crashed_runs
from expo_executor.coordinator.state import StateDir
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName
from expo_executor.protocol.bucket import open_bucket

#: How long a rerun waits for a crashed run's VMs to be gone before it refuses to start.
GONE_TIMEOUT_S = 300.0


def stop_crashed_runs(state_root: Path, run_dir: Path, log: Callable[[str], None],
                      gone_timeout: float = GONE_TIMEOUT_S) -> dict[str, Harvested]:
    """Stop the workers of every crashed run of this host (not ``run_dir``, the new run), one
    line each, then harvest their results (one line each); returns the solved jobs, by stable
    identity. Raises ExpoError when a crashed run's VMs are still there after
    ``gone_timeout`` seconds."""
    found: dict[str, Harvested] = {}
    for held in crashed_runs(state_root, skip=run_dir):
        try:
            state = held.state
            try:
                stopped = _stop(state, held.dir, gone_timeout)
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
            found.update(_harvest(held, StateDir(state_root), run_dir.name, log))
            held.end()
        finally:
            held.release()
    return found


def _harvest(held: HeldRun, state: StateDir, by_run: str,
             log: Callable[[str], None]) -> dict[str, Harvested]:
    """The crashed run's results, its workers gone; a failure to read them is one line (its
    finished jobs then run again), never a reason to keep the new run from starting."""
    run_key = held.key()
    if run_key is None:
        return {}
    try:
        return harvest(held.dir, open_bucket(held.state.bucket_url), run_key, state, by_run,
                       log)
    except Exception as exc:  # noqa: BLE001 - the bucket, its credentials, a bad record
        log(f"expocloud: could not read the results of run {held.state.run_id} "
            f"({type(exc).__name__}: {exc}); the jobs it finished after its coordinator died "
            "run again")
        return {}


def _stop(state: RunState, run_dir: Path, gone_timeout: float) -> int:
    if state.engine == EngineName.GCE:
        return _stop_gce(state, gone_timeout)
    from expo_executor.engines.local import stop_workers

    return stop_workers(run_dir / "vms")


def _stop_gce(state: RunState, gone_timeout: float) -> int:
    """Delete every VM labelled with the run's label, and wait until none is listed."""
    from expo_executor.engines.gce.engine import delete_instances, find_instances

    def listed() -> list[dict]:
        return find_instances(state.project, list(state.zones), endpoint=state.endpoint,
                              run_label=state.label)

    found = listed()
    if found:
        delete_instances(state.project, found, endpoint=state.endpoint, timeout_s=gone_timeout)
    deadline = time.monotonic() + gone_timeout
    while (left := listed()):
        if time.monotonic() > deadline:
            raise ExpoError("--expocloud-run-id", f"{len(left)} VMs of the crashed run "
                            f"{state.run_id} (label {state.label}) are still listed",
                            f"delete them (expocloud cleanup --run {state.run_id}) and rerun")
        time.sleep(2.0)
    return len(found)
