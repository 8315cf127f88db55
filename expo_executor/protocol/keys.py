"""Every key of the bucket's layout, and the names under which a worker's key reaches it.

One place for the layout, so the coordinator, the workers, the CWL staging and the tools that
count storage operations cannot drift apart:

- ``workers/<worker>/inbox.json``: the coordinator's assignments to one worker (single writer:
  the coordinator);
- ``workers/<worker>/status.json``: the worker's heartbeat and state (single writer: the worker);
- ``pulse.json``: the fleet's liveness, rewritten by the coordinator every heartbeat instead of
  every worker's inbox: a growing sequence number and, for each live worker, a tag made with
  that worker's own key (single writer: the coordinator; records.Pulse). Outside
  ``workers/``, so that the coordinator's listing of the workers does not show it;
- ``workers/<worker>/key-request.json``: a GCE worker's ask for its key (an ephemeral public
  key and the VM's identity token; single writer: the worker) and ``workers/<worker>/key.json``
  the coordinator's answer, the worker's key encrypted to that public key (single writer: the
  coordinator; engines/gce/key_channel.py);
- ``workers/<worker>/results/<job>.json``: one attempt's result, or several of that worker's
  (a ResultBatch, named for its first job: a worker holding prefetched jobs reports several
  at once) (single writer: that worker; written once, first writer wins). Under the worker's
  prefix so that the coordinator's one
  listing of ``workers/`` a round shows new results as well as changed statuses: a worker
  need not rewrite its status to say a job ended (one class A write and one read less a job),
  and the coordinator deletes each object (deletes are free) once the records of its results
  are on disk, and every object under a VM's prefix once the VM ends (coordinator/dropped_vms.py),
  so that listing stays the size of the fleet;
- ``stage/in/<sha256>`` and ``stage/out/<job>/``: a CWL job's staged files (content-addressed
  inputs; outputs written by the job's worker);
- ``software/<digest>/<wheel>``: this package's wheel for GCE workers (content-addressed);
- ``logs/<job>/<worker>/<n>``: a failed or timed-out attempt's saved logs, capped and with its
  secrets blanked (single writer: that worker); its result lists them, the coordinator copies
  them into the run directory, so they outlive the VM;
- ``boot/<vm>.log``: the last lines of a VM's startup-script log, written by the startup script
  just before it powers off a VM whose setup failed (single writer: that VM), so the coordinator
  can say why a pool's VMs never came up.
"""

from __future__ import annotations

WORKERS_PREFIX = "workers/"
STAGE_PREFIX = "stage/"
SOFTWARE_PREFIX = "software"
LOGS_PREFIX = "logs/"
BOOT_PREFIX = "boot/"
PULSE_KEY = "pulse.json"

#: The environment variable that carries its own key to a local worker (hex; worker_keys).
WORKER_KEY_ENV = "EXPOCLOUD_WORKER_KEY"
#: The environment variable naming a worker's own directory for software its jobs deploy
#: (conda environments, apptainer images): it outlives each job's scratch directory.
DEPLOY_DIR_ENV = "EXPOCLOUD_DEPLOY_DIR"
#: "1" in a job's environment: its command is all it runs, no start-up or file staging around
#: it (a direct job: frontends/snakemake/direct_jobs.py), so its worker times it whole as its
#: command (command_clock.whole_command); the worker takes it out of the job's environment.
COMMAND_ONLY_ENV = "EXPOCLOUD_COMMAND_ONLY"
#: The instance metadata attribute of a GCE worker's settings (JSON; nothing secret: anyone
#: with compute.instances.get reads it).
WORKER_ATTRIBUTE = "expocloud-worker"


def inbox_key(worker_id: str) -> str:
    return f"{WORKERS_PREFIX}{worker_id}/inbox.json"


def status_key(worker_id: str) -> str:
    return f"{WORKERS_PREFIX}{worker_id}/status.json"


def key_request_key(worker_id: str) -> str:
    return f"{WORKERS_PREFIX}{worker_id}/key-request.json"


def key_grant_key(worker_id: str) -> str:
    return f"{WORKERS_PREFIX}{worker_id}/key.json"


def result_key(job_key: str, worker_id: str) -> str:
    """The result object of a job (or of a batch of results that starts with it) on one
    worker: each has a single writer, and a job re-run elsewhere (its first worker lost or
    stopped) reports afresh."""
    return f"{WORKERS_PREFIX}{worker_id}/results/{job_key}.json"


def parse_result_key(name: str) -> tuple[str, str] | None:
    """``(job, worker)`` of a key :func:`result_key` made; None for any other key."""
    worker, sep, rest = name.removeprefix(WORKERS_PREFIX).partition("/results/")
    if not name.startswith(WORKERS_PREFIX) or not sep or "/" in worker \
            or not rest.endswith(".json") or "/" in rest:
        return None
    return rest.removesuffix(".json"), worker


def saved_log_key(job_key: str, worker_id: str, index: int) -> str:
    """The ``index``-th log one attempt saved (numbered: a log's own path may hold any
    character; the result record names each one)."""
    return f"{LOGS_PREFIX}{job_key}/{worker_id}/{index}"


def boot_log_key(vm_name: str) -> str:
    """Where the startup script of VM ``vm_name`` leaves its last log lines when setup fails."""
    return f"{BOOT_PREFIX}{vm_name}.log"
