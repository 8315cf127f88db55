"""What crosses between a front end and the coordinator: a job handed over (``JobRequest``) and
how it ended (``JobReport``). Both front ends (Snakemake, cwltool) build the one and read the
other; the coordinator's loop never shows them anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from expo_executor.coordinator.state import FamilyRef
from expo_executor.core.records import JobMeta
from expo_executor.core.scheduler import Outcome, Task


@dataclass(frozen=True)
class Harvested:
    """A job a crashed run's worker solved after the crash: what the rerun reports of it."""

    run_id: str  # the crashed run
    key: str  # the job's key in that run
    worker: str
    runtime_s: float
    command_s: float | None = None


@dataclass
class JobRequest:
    """A job as the front end hands it over: what to run, and how it ranks."""

    task: Task
    argv: list[str]
    cwd: str | None  # None: the worker's own disk (no shared file system)
    env: dict[str, str]
    deadline_s: float | None
    family: FamilyRef | None = None
    meta: JobMeta = field(default_factory=lambda: JobMeta(""))  # for the run record
    stage: dict | None = None  # a staged command: files and streams (worker/staged_job.py)
    # the job's own log files (a Snakemake rule's log:), saved with its output should it fail
    # or time out: {the path it writes, from its working directory: the name users know it by}
    logs: dict[str, str] = field(default_factory=dict)
    # secret values its worker blanks out of what it reports (the command and environment
    # travel sealed whatever this says: docs/security.md)
    redact: list[str] = field(default_factory=list)
    # what names the same job in a later run (a Snakemake job: its rules and output files;
    # None: nothing stable), so that a rerun can use a crashed run's result of it (harvest.py)
    identity: str | None = None
    # set by the front end when a crashed run solved this very job and its outputs exist:
    # the coordinator reports it solved without running it
    harvested: Harvested | None = None


@dataclass
class JobReport:
    """How a job ended, with the sentence a user should read."""

    key: str
    outcome: Outcome
    message: str
    runtime_s: float | None = None
    worker: str | None = None
    log_tail: str = ""
    killed: bool = False
    returncode: int | None = None  # the command's exit code, when it ran to its end
    logs_dir: Path | None = None  # where its saved logs are (it failed or timed out)
    # the worker its first run timed out on, when that timeout was re-run to confirm it
    # (--expocloud-confirm-timeouts): solved now, that worker was slow, not the job hard
    first_timeout_on: str | None = None
