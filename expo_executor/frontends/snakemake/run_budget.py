"""The request budget of a finished GCE run, from its own counts (``requests.json``): what its
storage operations and VM time would cost at scale (``cost.request_budget.at_scale``), written
to the run's files and said in one line. No figure is a warning, never a failed run: the run is
over by then.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from expo_executor.coordinator.loop import Coordinator
from expo_executor.cost.request_budget import at_scale
from expo_executor.runs.files import REQUESTS, RunFiles


def log_request_budget(run_files: RunFiles, coordinator: Coordinator, slots_per_worker: int,
                       info: Callable[[str], None], warning: Callable[[str], None]) -> None:
    """The request budget figure, from this run's own counts (requests.json)."""
    try:
        record = run_files.read_json(REQUESTS)
        if not isinstance(record, dict):
            raise ValueError(f"{REQUESTS} is missing or unreadable")
        seconds = sum(record["vm_seconds"].values())
        config = coordinator.config
        if config.pool not in config.hourly:
            raise ValueError(f"{config.machine_types.get(config.pool)} is not priced")
        counts = coordinator.scheduler.counts()
        budget = at_scale(record["workers"], seconds, record["coordinator"],
                          record["coordinator_lists"], record["run_seconds"],
                          counts["solved"] + counts["failed"] + counts["timeout"],
                          slots_per_worker,
                          config.hourly[config.pool],
                          coordinator_heartbeats=record.get("coordinator_heartbeats", 0))
    except (ValueError, KeyError) as exc:
        warning(f"expocloud: no request budget figure: {exc}")
        return
    run_files.write_request_budget(
        {**dataclasses.asdict(budget), "ratio": budget.ratio,
         "overhead_ratio": budget.overhead_ratio,
         "break_even_job_s": budget.break_even_job_s})
    info(f"expocloud: {budget.line()} ({config.prices_label})")
