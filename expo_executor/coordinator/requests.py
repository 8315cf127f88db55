"""What crosses between a front end and the coordinator: a job handed over (``JobRequest``) and
how it ended (``JobReport``). A request carries its front end's ``JobSpec`` (what its worker
runs) as it was built. Both front ends (Snakemake, cwltool) build the one and read the
other; the coordinator's loop never shows them anything else.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from expo_executor.coordinator.state import FamilyRef
from expo_executor.core.records import JobMeta
from expo_executor.core.runtime_model import ModelSpec
from expo_executor.core.scheduler import Outcome, Task
from expo_executor.protocol.records import JobSpec, PrunePoint


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
    """A job as the front end hands it over: what to run (its ``spec``, built once here and
    carried unchanged to its worker), and how it ranks (its ``task``)."""

    task: Task
    spec: JobSpec  # what its worker needs to run it; its cpus and prune point are the task's
    family: FamilyRef | None = None
    meta: JobMeta = field(default_factory=lambda: JobMeta(""))  # for the run record
    # the names users know the spec's log files by (a Snakemake rule's log:), for the copies
    # of a failed or timed-out job's logs: {the path it writes, from its working directory:
    # its name}; a path not here keeps its own
    log_names: dict[str, str] = field(default_factory=dict)
    # what names the same job in a later run (a Snakemake job: its rules and output files;
    # None: nothing stable), so that a rerun can use a crashed run's result of it (harvest.py)
    identity: str | None = None
    # set by the front end when a crashed run solved this very job and its outputs exist:
    # the coordinator reports it solved without running it
    harvested: Harvested | None = None
    # what its family's runtime model is built from (noise columns, ordered dimensions)
    model_spec: ModelSpec | None = None

    def __post_init__(self) -> None:
        if self.spec.cpus != self.task.cpus:
            raise ValueError(f"job {self.task.key}: its spec asks for {self.spec.cpus} CPUs, "
                             f"its task for {self.task.cpus}")
        if self.spec.prune != PrunePoint.of(self.task.family, self.task.point):
            raise ValueError(f"job {self.task.key}: its spec prunes at {self.spec.prune}, "
                             f"its task at {self.task.family} {self.task.point}")

    def ended(self) -> JobRequest:
        """What the coordinator keeps of the job once it has ended and its report is out: its
        task, meta and family, and its spec's deadline, CPUs and prune point (the status, the
        outcome map and the records read these). The command, its environment, its stage and
        its logs go: its worker ran it, and no inbox lists it again. Kept, they were a quarter
        of what the coordinator held per ended job (1.4 of 5.6 KB with a 1,048-character
        Snakemake command: 69 MB of a 50,000-job sweep; bench/RESULTS.md, "Issue 31:
        sweeps")."""
        spec = replace(self.spec, argv=[], cwd=None, env={}, stage=None, logs=(), redact=(),
                       sealed=None)
        return replace(self, spec=spec, log_names={}, identity=None, harvested=None)


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
