"""The fault-injection suite's switches and its figures.

By default (plain ``pytest``, and so ``.ci/run``) each fault test runs its quick size: a few
dozen jobs, a handful of faults. ``EXPOCLOUD_FAULTS=full`` runs the sizes the reliability
figures are quoted at (a 200-job sweep, ...). ``EXPOCLOUD_FAULTS_RECORD=PATH`` makes every
test append what it injected and what survived to ``PATH`` (JSON lines), which
``bench/reliability.py`` turns into the table of docs/RELIABILITY.md.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest

FULL = os.environ.get("EXPOCLOUD_FAULTS", "quick") == "full"


def size(quick: int, full: int) -> int:
    """A figure of the test's workload: ``quick`` by default, ``full`` under EXPOCLOUD_FAULTS=full."""
    return full if FULL else quick


@pytest.fixture
def fault_figures(request: pytest.FixtureRequest) -> Callable[..., None]:
    """Record one test's figures: ``kind`` (what was injected, in a few words), ``injected``
    (how many faults), ``survived`` (how many were handled as designed: the run came through, or
    the job failed with the reason and nothing hung), ``jobs`` (jobs in the
    run), ``jobs_lost`` and ``orphan_vms`` (both must be 0), and anything else worth a column
    (``detail``: one sentence). Recorded only when EXPOCLOUD_FAULTS_RECORD is set; the test's
    own assertions are what make it pass or fail."""
    path = os.environ.get("EXPOCLOUD_FAULTS_RECORD")

    def record(kind: str, *, injected: int, survived: int, jobs: int = 0, jobs_lost: int = 0,
               orphan_vms: int = 0, detail: str = "", **extra: object) -> None:
        if not path:
            return
        row = {"test": request.node.nodeid, "kind": kind, "mode": "full" if FULL else "quick",
               "injected": injected, "survived": survived, "jobs": jobs,
               "jobs_lost": jobs_lost, "orphan_vms": orphan_vms, "detail": detail,
               "time": time.time(), **extra}
        with open(Path(path), "a") as handle:
            handle.write(json.dumps(row) + "\n")

    return record
