"""The typed records that cross module borders: one vocabulary from worker to report.

A job's outcome, how one attempt of it ended on a worker, how a VM ended, which engine ran a run,
and what the run record says of a job (its rule, wildcards and hardness). Every module that
writes or reads these uses the names here; the strings are the ones in run records and bucket
messages, so old records stay readable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping


class Outcome(str, Enum):
    """How a job ended, as Snakemake, cwltool, the run record and the report see it. A
    preemption is not an outcome: the job is re-queued."""

    SOLVED = "solved"
    FAILED = "failed"
    TIMEOUT = "timeout"
    SKIPPED = "skipped"
    # not run: the runtime model gave it at least --expocloud-skip-above of running past its
    # deadline (a domino skip is SKIPPED: a timeout dominated it)
    MODEL_SKIPPED = "model-skipped"


class AttemptEnd(str, Enum):
    """How one attempt of a job ended on a worker: a final outcome (the same words as
    :class:`Outcome`), or a reason for the coordinator to look again (the job was cancelled, or
    its VM is going away, or its worker crashed: the job runs again elsewhere)."""

    SOLVED = "solved"
    FAILED = "failed"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"
    PREEMPTED = "preempted"
    LOST = "lost"  # the worker itself failed (crashed, its disk full): not the job's doing

    @property
    def outcome(self) -> Outcome | None:
        """The job's outcome when this attempt decides it; None for cancelled, preempted and
        lost."""
        return _FINAL.get(self)


_FINAL = {AttemptEnd.SOLVED: Outcome.SOLVED, AttemptEnd.FAILED: Outcome.FAILED,
          AttemptEnd.TIMEOUT: Outcome.TIMEOUT}


class VmEnd(str, Enum):
    """How a VM's life ended, in ``vms.jsonl`` (cost and the preemption model read it)."""

    ALIVE = "alive"  # not ended yet: a cost report taken while the run goes on
    DELETED = "deleted"  # by the coordinator: idle, drained, or the run ended
    PREEMPTED = "preempted"  # by Compute Engine (a Spot VM), or its last breath said so
    LOST = "lost"  # gone from the listing for another reason (crashed, deleted by hand)
    CAPPED = "capped"  # lost at its max_run_duration: Compute Engine's cap, not a preemption
    NEVER_READY = "never ready"  # did not report ready within the boot timeout
    NOT_CREATED = "not created"  # the insert failed: no VM-second was billed


class WorkerState(str, Enum):
    """What a worker's status says of the worker itself."""

    READY = "ready"
    PREEMPTED = "preempted"
    STOPPED = "stopped"


class EngineName(str, Enum):
    """Where a run's workers live."""

    LOCAL = "local"
    GCE = "gce"


@dataclass(frozen=True)
class HardnessMeta:
    """A job's place in its hardness order, for the report's outcome map."""

    spec: str
    dims: tuple[str, ...]
    vector: tuple[Any, ...]
    scope: tuple[Any, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"spec": self.spec, "dims": list(self.dims), "vector": list(self.vector),
                "scope": list(self.scope)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> HardnessMeta | None:
        if not data:
            return None
        return cls(str(data["spec"]), tuple(data["dims"]), tuple(data["vector"]),
                   tuple(data["scope"]))


@dataclass(frozen=True)
class JobMeta:
    """What the run record says of a job besides its outcome: where it came from (a
    Snakemake rule or a CWL tool), its wildcards (or a CWL job's simple inputs), its outputs
    and its hardness."""

    rule: str
    wildcards: Mapping[str, str] = field(default_factory=dict)
    outputs: tuple[str, ...] = ()
    hardness: HardnessMeta | None = None
    attempt: int | None = None  # Snakemake's attempt number
    job: str | None = None  # cwltool's job name
    placeholder: bool = False

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "rule": self.rule, "wildcards": dict(self.wildcards), "outputs": list(self.outputs),
            "hardness": self.hardness.to_dict() if self.hardness else None,
            "placeholder": self.placeholder}
        if self.attempt is not None:
            record["attempt"] = self.attempt
        if self.job is not None:
            record["job"] = self.job
        return record
