"""The workers of a run whose coordinator died, as the host-side state it left reaches them:
which are alive, and stopping some or all of them. A rerun uses it both to adopt the run
(adopt.py: its live workers finish their jobs, each stopped once it has none) and to stop it
outright (recover.py).

GCE: the run's VMs are those listed with its run label (any status but gone); stopping one
deletes it. Local engine: its workers are processes of this host, found by the pid files
under the run's ``vms/`` directory; stopping one powers it off (its job sessions with it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from pathlib import Path

from expo_executor.coordinator.run_state import RunState
from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName

ALIVE = ("PROVISIONING", "STAGING", "RUNNING")  # instance statuses of a VM on its way or up


class CrashedWorkers:
    """One crashed run's workers (``run_dir``: its run directory, ``state``: its record)."""

    def __init__(self, state: RunState, run_dir: Path) -> None:
        self.state = state
        self.run_dir = run_dir

    def alive(self) -> set[str]:
        """The names of the run's workers that are up (or on their way up)."""
        if self.state.engine == EngineName.GCE:
            return {item["name"] for item in self._listed() if item["status"] in ALIVE}
        from expo_executor.engines.local import live_workers

        return set(live_workers(self.run_dir / "vms"))

    def stop(self, names: Collection[str] | None = None, gone_timeout: float = 0.0,
             waiting: Callable[[], None] | None = None) -> int:
        """Stop the workers of ``names`` (None: every one of the run); returns how many there
        were. GCE: with ``gone_timeout``, waits until none of them is listed and raises
        ExpoError if one still is after that many seconds; without, only starts the deletes
        (a coordinator round must not block on them). ``waiting`` is called at each look
        while it waits (every few seconds): a rerun keeps the runs it adopted alive meanwhile
        (recover.py). Local: waits for the processes (a few seconds at most)."""
        if self.state.engine != EngineName.GCE:
            from expo_executor.engines.local import stop_workers

            return stop_workers(self.run_dir / "vms", names)
        from expo_executor.engines.gce.teardown import delete_instances

        found = [item for item in self._listed() if names is None or item["name"] in names]
        if found:  # with ``waiting``, the deletes' end is waited for by looking (_wait_gone)
            delete_instances(self.state.project, found, endpoint=self.state.endpoint,
                             timeout_s=0.0 if waiting is not None else gone_timeout)
        if gone_timeout:
            self._wait_gone({item["name"] for item in found}, gone_timeout, waiting)
        return len(found)

    def _listed(self) -> list[dict]:
        from expo_executor.engines.gce.listing import find_instances

        state = self.state
        return find_instances(state.project, list(state.zones), endpoint=state.endpoint,
                              run_label=state.label)

    def _wait_gone(self, names: set[str], gone_timeout: float,
                   waiting: Callable[[], None] | None = None) -> None:
        from expo_executor.engines.gce.teardown import delete_instances

        deadline = time.monotonic() + gone_timeout
        while (left := [i for i in self._listed() if i["name"] in names]):
            if time.monotonic() > deadline:
                raise ExpoError("--expocloud-run-id", f"{len(left)} VMs of the crashed run "
                                f"{self.state.run_id} (label {self.state.label}) are still "
                                "listed", f"delete them (expocloud cleanup --run "
                                f"{self.state.run_id}) and rerun")
            if waiting is not None:
                waiting()
                # a VM whose delete did not take (the call failed) is still up: again
                stuck = [i for i in left if i["status"] in ALIVE]
                if stuck:
                    delete_instances(self.state.project, stuck, endpoint=self.state.endpoint,
                                     timeout_s=0.0)
            time.sleep(2.0)
