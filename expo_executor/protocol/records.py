"""The messages of the bucket channel as typed records: an inbox and its jobs (each its front
end's :class:`JobSpec`, as it was built), the fleet's pulse, a worker's status, one attempt's result, a batch of
one worker's results.

Each record turns into a signed message (:mod:`messages` checks the schema, signs and seals)
and back; nothing else in the package builds or reads these messages as dicts. The key is
always one worker's own (:func:`~expo_executor.protocol.worker_keys.worker_key`): the inbox's
receiver, the status's or result's sender; the pulse carries one tag per worker, each made with
that worker's key.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from expo_executor.core.hardness import HardnessPoint
from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.protocol import messages


@dataclass(frozen=True)
class PrunePoint:
    """Where a job's timeout prunes at once: its family (one frontier each) and its place in
    the partial order. The coordinator's scheduler and a worker holding prefetched jobs decide
    dominance over it with the same rule, ``core.hardness`` (``Frontier.dominator``)."""

    family: str
    point: HardnessPoint

    def to_wire(self) -> dict[str, Any]:
        return {"family": self.family, "scope": list(self.point.scope),
                "vector": list(self.point.vector)}

    @classmethod
    def of(cls, family: str | None, point: HardnessPoint | None) -> PrunePoint | None:
        """A task's prune point (``core.scheduler.Task``'s family and point); None when its
        timeout prunes nothing."""
        return None if family is None or point is None else cls(family, point)

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> PrunePoint:
        """From a body :func:`messages.check` has validated (the "prune" schema)."""
        return cls(body["family"], HardnessPoint(tuple(body["scope"]),
                                                 tuple(float(x) for x in body["vector"])))


@dataclass(frozen=True)
class JobSpec:
    """What a worker needs to run one job: the job's one shape from its front end to the
    process its worker starts. Built once by its front end (``frontends.base.job_request``,
    its prune point from its task's), carried unchanged in the coordinator's ``JobRequest``,
    the job's place on its worker and its inbox, and opened once by the worker
    (``worker/job_starts.py``, :meth:`opened`), which runs it and keeps it for the job's life
    (``worker/running_jobs.py`` ``RunningJob.spec``).

    On the wire the command, its environment and the secrets to blank out of its reports
    (``redact``) travel only sealed for the worker: :meth:`to_wire` seals them (``argv`` then
    says ``messages.SEALED_ARGV``, ``env`` is empty), and a spec read from the wire holds them
    still sealed (``sealed``) until :meth:`opened`."""

    argv: list[str]
    cwd: str | None  # None: the worker's own disk (no shared file system)
    env: dict[str, str]
    deadline_s: float | None
    cpus: int = 1
    stage: dict | None = None  # a staged command's files and streams (worker/staged_job.py)
    # the job's own log files (a Snakemake rule's log:), relative to its working directory:
    # saved with its output when it fails or times out
    logs: tuple[str, ...] = ()
    redact: tuple[str, ...] = ()  # secret values the worker blanks out of what it reports
    # where its timeout prunes at once (its family, hardness scope and vector); None: it
    # does not. A worker holding prefetched jobs starts none its own timeouts dominate.
    prune: PrunePoint | None = None
    sealed: str | None = None  # as read from the wire: argv, env and redact, still sealed

    def to_wire(self, key: bytes, job_key: str) -> dict[str, Any]:
        """The inbox's "job" body: argv, env and redact sealed with ``key`` for ``job_key``
        (a spec read from the wire keeps the sealed part it came with)."""
        sealed = self.sealed if self.sealed is not None else \
            messages.seal(self.argv, self.env, key, job_key, self.redact)
        body: dict[str, Any] = {"argv": list(messages.SEALED_ARGV), "cwd": self.cwd, "env": {},
                                "deadline_s": self.deadline_s, "cpus": self.cpus,
                                "sealed": sealed}
        if self.stage is not None:
            body["stage"] = self.stage
        if self.logs:
            body["logs"] = list(self.logs)
        if self.prune is not None:
            body["prune"] = self.prune.to_wire()
        return body

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> JobSpec:
        """From a "job" body :func:`messages.check` has validated; still sealed."""
        return cls(list(body["argv"]), body["cwd"], dict(body["env"]), body["deadline_s"],
                   int(body["cpus"]), body.get("stage"), tuple(body.get("logs", ())),
                   prune=PrunePoint.from_wire(body["prune"]) if "prune" in body else None,
                   sealed=body.get("sealed"))

    def opened(self, key: bytes, job_key: str) -> JobSpec:
        """This spec with its sealed command, environment and secrets opened with ``key``
        (itself when nothing is sealed); raises MessageError when they do not open."""
        if self.sealed is None:
            return self
        argv, env, redact = messages.unseal(self.sealed, key, job_key)
        return replace(self, argv=argv, env=env, redact=tuple(redact), sealed=None)


@dataclass(frozen=True)
class Inbox:
    """What the coordinator wants of one worker now: its jobs (running or to start), the
    keys to cancel, and the held jobs to give back unstarted (``release``: another worker's
    free slot runs them; each with its request's number, ``core.scheduler.Release``: the
    worker's status answers that number, so a job asked back again is answered again, and a
    stale answer is never taken for a newer request's). ``seq`` grows with every write, so a
    worker can tell a new inbox."""

    seq: int
    to: str  # the worker it is for, under the signature: a copied inbox is refused elsewhere
    jobs: dict[str, JobSpec] = field(default_factory=dict)
    cancel: list[str] = field(default_factory=list)
    release: dict[str, int] = field(default_factory=dict)

    def encode(self, key: bytes) -> bytes:
        """Signed and every job sealed with ``key``, the receiving worker's own."""
        body: dict[str, Any] = {
            "seq": self.seq, "to": self.to, "cancel": list(self.cancel),
            "jobs": {name: job.to_wire(key, name) for name, job in self.jobs.items()}}
        if self.release:  # optional: absent in most inboxes
            body["release"] = dict(self.release)
        return messages.encode("inbox", body, key)

    @classmethod
    def decode(cls, data: bytes, key: bytes) -> Inbox:
        body = messages.decode("inbox", data, key)
        return cls(body["seq"], body.get("to", ""),
                   {key: JobSpec.from_wire(job) for key, job in body["jobs"].items()},
                   [str(key) for key in body["cancel"]],
                   dict(body.get("release", {})))


@dataclass(frozen=True)
class Pulse:
    """The coordinator alive at ``seq``, for each worker of ``tags`` (name -> tag made with
    that worker's key, :func:`messages.pulse_tag`). One object for the whole fleet, written
    every heartbeat instead of every worker's inbox; ``seq`` only grows, across a crashed
    coordinator and its successor too, so a worker can tell a new pulse from a replay."""

    seq: int
    tags: dict[str, str] = field(default_factory=dict)

    @classmethod
    def make(cls, seq: int, keys: dict[str, bytes]) -> Pulse:
        """A pulse for the workers of ``keys`` (name -> that worker's key)."""
        return cls(seq, {name: messages.pulse_tag(key, seq, name)
                         for name, key in sorted(keys.items())})

    def proves(self, worker: str, key: bytes) -> bool:
        """Whether this pulse carries a tag for ``worker`` made with its ``key``."""
        tag = self.tags.get(worker)
        return tag is not None and messages.pulse_tag_valid(key, self.seq, worker, tag)

    def encode(self) -> bytes:
        return messages.encode("pulse", {"seq": self.seq, "tags": dict(self.tags)})

    @classmethod
    def decode(cls, data: bytes) -> Pulse:
        """Checked against the schema only: each tag is checked by its worker (:meth:`proves`)."""
        body = messages.decode("pulse", data)
        return cls(body["seq"], dict(body["tags"]))


@dataclass(frozen=True)
class WorkerStatus:
    """A worker's heartbeat: its state, the inbox it has seen, its running jobs, the
    storage operations it has made (for the run's request budget), and the jobs of its
    inbox's ``release`` it gave back unstarted (they will never start there), each with the
    number of the request it answers."""

    worker: str
    seq_seen: int
    time: float
    running: list[str]
    slots: int
    state: WorkerState
    ops: dict[str, int] = field(default_factory=dict)
    released: dict[str, int] = field(default_factory=dict)

    def encode(self, key: bytes) -> bytes:
        body: dict[str, Any] = {
            "worker": self.worker, "seq_seen": self.seq_seen, "time": self.time,
            "running": list(self.running), "slots": self.slots, "state": self.state.value,
            "ops": dict(self.ops)}
        if self.released:  # optional
            body["released"] = dict(self.released)
        return messages.encode("status", body, key)

    @classmethod
    def decode(cls, data: bytes, key: bytes) -> WorkerStatus:
        body = messages.decode("status", data, key)
        return cls(body["worker"], body["seq_seen"], float(body["time"]),
                   [str(k) for k in body["running"]], body["slots"],
                   WorkerState(body["state"]), _ops(body),
                   dict(body.get("released", {})))


def _ops(body: dict[str, Any]) -> dict[str, int]:
    """A message's optional storage-operation counts (price class -> count); what is not a
    count is left out."""
    ops = body.get("ops")
    return {str(k): v for k, v in ops.items() if isinstance(v, int) and not isinstance(v, bool)} \
        if isinstance(ops, dict) else {}


@dataclass(frozen=True)
class SavedLog:
    """One log a worker saved to the bucket for a failed or timed-out attempt: the job's
    captured stdout and stderr (``path`` None) or one of its ``log:`` files (``path`` as the
    job gave it); the key it is under, its size and SHA-256 there (the object is not signed,
    the result is: a bucket writer cannot swap a log unnoticed), and whether it was cut."""

    path: str | None
    key: str
    size: int
    sha256: str
    truncated: bool = False

    def to_wire(self) -> dict[str, Any]:
        return {"path": self.path, "key": self.key, "size": self.size, "sha256": self.sha256,
                "truncated": self.truncated}

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> SavedLog:
        return cls(body["path"], body["key"], body["size"], body["sha256"], body["truncated"])


@dataclass(frozen=True)
class StagedBytes:
    """What one attempt moved between its VM and the bucket: its inputs read (``down``) and
    its outputs written (``up``), in bytes. A result's optional "staged" field (absent: none,
    as from a worker older than it)."""

    down: int = 0
    up: int = 0

    @property
    def total(self) -> int:
        return self.down + self.up

    def to_wire(self) -> dict[str, int]:
        return {"down": self.down, "up": self.up}

    @classmethod
    def from_wire(cls, body: Any) -> StagedBytes:
        """From a body :func:`messages.check` has validated (or None: nothing moved)."""
        return cls(body["down"], body["up"]) if isinstance(body, dict) else cls()


@dataclass(frozen=True)
class WorkerResult:
    """How one attempt of a job ended on one worker."""

    key: str
    worker: str
    end: AttemptEnd
    returncode: int | None  # the command's exit code, when it ran to its end
    started: float
    ended: float
    reason: str | None = None
    log_tail: str = ""
    logs: tuple[SavedLog, ...] = ()  # what it saved of its logs (failed or timed out)
    # seconds its command ran (worker/command_clock.py); None: it left no stamps, so only its
    # whole runtime is known
    command_s: float | None = None
    # the worker's storage operations so far, this result's write included: a worker writes
    # its status only as a heartbeat, so its results carry its counts to the request budget
    ops: dict[str, int] = field(default_factory=dict)
    # False: a held job cancelled before it started (its times are the cancel's, not a run's)
    ran: bool = True
    # bytes the job read from the bucket (its staged inputs) and wrote to it (its outputs):
    # the egress a VM outside the bucket's region pays (cost/cost_report.py)
    staged: StagedBytes = field(default_factory=lambda: StagedBytes())

    @property
    def runtime_s(self) -> float:
        return self.ended - self.started

    @property
    def timed_s(self) -> float:
        """The seconds its deadline timed: the command's own, or the whole job's when the
        command left no stamps (what a timeout reports, and a runtime model learns)."""
        return self.command_s if self.command_s is not None else self.runtime_s

    @property
    def overhead_s(self) -> float | None:
        """Start-up and file staging: the runtime outside its command."""
        return None if self.command_s is None else max(0.0, self.runtime_s - self.command_s)

    def encode(self, key: bytes) -> bytes:
        return messages.encode("result", self.to_wire(), key)

    @classmethod
    def decode(cls, data: bytes, key: bytes) -> WorkerResult:
        return cls.from_wire(messages.decode("result", data, key))

    def to_wire(self) -> dict[str, Any]:
        return {
            "key": self.key, "worker": self.worker, "outcome": self.end.value,
            "returncode": self.returncode, "started": self.started, "ended": self.ended,
            "reason": self.reason, "log_tail": self.log_tail,
            **({"logs": [log.to_wire() for log in self.logs]} if self.logs else {}),
            **({"command_s": self.command_s} if self.command_s is not None else {}),
            **({"ops": dict(self.ops)} if self.ops else {}),
            **({} if self.ran else {"ran": False}),
            **({"staged": self.staged.to_wire()} if self.staged.total else {})}

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> WorkerResult:
        return cls(body["key"], body["worker"], AttemptEnd(body["outcome"]), body["returncode"],
                   float(body["started"]), float(body["ended"]), body["reason"],
                   body["log_tail"], tuple(SavedLog.from_wire(log)
                                           for log in body.get("logs", ())),
                   body.get("command_s"), _ops(body), body.get("ran", True),
                   StagedBytes.from_wire(body.get("staged")))


@dataclass(frozen=True)
class ResultBatch:
    """Results of one worker in one object (``result_key`` of its first job), signed once:
    a worker holding prefetched jobs reports several at a time, one class A write for all
    (worker/result_reports.py says when). One result travels as the plain "result" message, as a
    worker without prefetch has always written it; :meth:`decode` takes either."""

    worker: str
    results: tuple[WorkerResult, ...]

    def __post_init__(self) -> None:
        if not self.results or any(r.worker != self.worker for r in self.results):
            raise ValueError(f"a result batch holds one or more results of {self.worker!r} "
                             "only")

    @property
    def first(self) -> str:
        """The job the batch's object is named for."""
        return self.results[0].key

    def encode(self, key: bytes) -> bytes:
        if len(self.results) == 1:
            return self.results[0].encode(key)
        return messages.encode("results", {
            "worker": self.worker, "results": [r.to_wire() for r in self.results]}, key)

    @classmethod
    def decode(cls, data: bytes, key: bytes) -> ResultBatch:
        kind, body = messages.decode_either(("result", "results"), data, key)
        if kind == "result":
            result = WorkerResult.from_wire(body)
            return cls(result.worker, (result,))
        return cls(body["worker"], tuple(WorkerResult.from_wire(r) for r in body["results"]))
