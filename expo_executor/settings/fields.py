"""The settings every engine reads, as one typed dataclass: each field becomes
``--expocloud-<field>`` on Snakemake's command line and ``expocloud-<field>`` in a profile.

An engine's own fields live in its package (``engines.local_settings``, ``engines.gce.settings``)
and the coordinator puts them together (``coordinator.settings.ExecutorSettings``). No
``from __future__ import annotations`` here: Snakemake and ``coordinator.profile_settings`` read
the fields' types as types, not strings.
"""

from dataclasses import dataclass, field
from typing import Optional

from snakemake_interface_executor_plugins.settings import ExecutorSettingsBase

from expo_executor.core.notices import SECRET_ENV, STALL_AFTER
from expo_executor.core.pool_health import CAPACITY_TIMEOUT
from expo_executor.core.records import EngineName
from expo_executor.settings.engine_defaults import GCE, HOLD_S, LOCAL, MAX_DEPTH

ON_SKIP_CHOICES = ("error", "placeholder")
ENGINE_CHOICES = tuple(name.value for name in EngineName)
BUDGET_ACTIONS = ("drain", "cancel")
HARDNESS_MODELS = ("none", "learned")  # or a factory of your own, as module:attribute
DEFAULT_PLACEHOLDER = '{"expocloud_outcome": "$outcome"}\n'


def option(help: str, **extra) -> dict:
    """A setting's metadata: its help, and ``type`` or ``choices`` for its parser."""
    return {"help": help, "env_var": False, "required": False, **extra}


@dataclass
class Settings(ExecutorSettingsBase):
    """What every engine's run reads: where workers run, how many, how the coordinator and
    the workers pace themselves, what Snakemake sees of a skip, the pools and the budget."""

    engine: str = field(default="local", metadata=option(
        "Where workers run: 'local' (processes on this machine standing in for VMs) or 'gce' "
        "(Google Compute Engine VMs; see docs/gce.md).", choices=list(ENGINE_CHOICES)))
    slots_per_worker: Optional[int] = field(default=None, metadata=option(
        "Job slots (cores) per worker (default: local, one worker with every core of this "
        "machine, so one job may use them all; GCE, 1, or the vCPUs of an 'auto' machine "
        "type).",
        type=int))
    max_workers: Optional[int] = field(default=None, metadata=option(
        "Most workers at once, of every machine shape together. Required on GCE (it bounds "
        "what a run can cost); local default: one holding every core, or with slots per "
        "worker set, as many as fit in this machine's cores.",
        type=int))
    idle_timeout: float = field(default=5.0, metadata=option(
        "Seconds an idle worker is kept before it is deleted.", type=float))
    poll_interval: Optional[float] = field(default=None, metadata=option(
        f"Seconds between the coordinator's rounds and the workers' inbox reads (default "
        f"{LOCAL.poll:g} local, {GCE.poll:g} on GCE, where each read is billed).", type=float))
    slow_poll_interval: Optional[float] = field(default=None, metadata=option(
        f"GCE: seconds between a worker's inbox reads while its slots are all busy or nothing "
        f"has changed for a while (default {GCE.slow_poll:g}); the fast rate resumes after "
        f"each change. Inbox reads dominate a large fleet's storage bill.", type=float))
    prefetch: Optional[int] = field(default=None, metadata=option(
        "Jobs per slot a busy worker holds beyond what it runs, to start the moment a slot "
        "frees (default 1 local; on GCE, where a busy worker reads its inbox only every slow "
        f"poll, sized to the jobs' length: about {HOLD_S:g} s of work per slot, 1 to "
        f"{MAX_DEPTH} jobs); a held job is cancelled like a running one when a timeout "
        "dominates it. With 2 or more a worker is refilled only when it runs low, and reports "
        "the jobs it solved meanwhile in one result object (fewer billed writes).",
        type=int))
    heartbeat_grace: Optional[float] = field(default=None, metadata=option(
        f"A worker that hears nothing from the coordinator for this many seconds kills its jobs "
        f"and deletes its VM (default {LOCAL.grace:g} local, {GCE.grace:g} on GCE).", type=float))
    boot_timeout: Optional[str] = field(default=None, metadata=option(
        f"A new worker that has not reported ready this long after its VM was asked for (90s, "
        f"10m, ...) is deleted and replaced; 3 such failures in a row in a pool where none came "
        f"up stop that pool (default {LOCAL.boot_timeout:g} s local, {GCE.boot_timeout:g} s on "
        f"GCE: a boot plus the startup script's installation)."))
    capacity_timeout: Optional[str] = field(default=None, metadata=option(
        f"GCE: how long a pool with no VM may find every zone out of capacity (stockouts) "
        f"before it stops growing for the run (its work moves to the other pool, or fails with "
        f"the reason if no VM can run it); 'never' waits for capacity however long (default "
        f"{CAPACITY_TIMEOUT / 60:g}m)."))
    on_skip: str = field(default="error", metadata=option(
        "What Snakemake sees for skipped and timed-out jobs: 'error', or 'placeholder' (their "
        "outputs are written with the placeholder text and reported as success, so an unchanged "
        "aggregate rule still runs).", choices=list(ON_SKIP_CHOICES)))
    placeholder_text: str = field(default=DEFAULT_PLACEHOLDER, metadata=option(
        "Content of placeholder outputs; $outcome, $rule, $reason and the job's wildcards as "
        "$name are substituted."))
    status_interval: float = field(default=10.0, metadata=option(
        "Seconds between progress lines.", type=float))
    confirm_timeouts: bool = field(default=False, metadata=option(
        "Re-run a family's timeout once on another, idle worker before it prunes anything; a "
        "re-run that is solved prunes nothing (a slow worker, recorded as such), one that "
        "times out again prunes, and the family's later timeouts prune at once. Needs a "
        "second worker: with only one, timeouts prune as without it."))
    skip_above: Optional[float] = field(default=None, metadata=option(
        "Skip a job whose runtime model gives it at least this probability (0 < P < 1, e.g. "
        "0.99) of running past its deadline: it is recorded as 'model-skipped' with its "
        "probability and never runs; a rerun without it (or with a higher P) runs it. Off by "
        "default; it turns on the learned runtime model unless --expocloud-hardness-model "
        "says otherwise.", type=float))
    hardness_model: Optional[str] = field(default=None, metadata=option(
        "The runtime model of each rule with a hardness and a deadline: 'learned' (fitted "
        "from the run's finished jobs, timeouts as censored; it orders the queue, estimates "
        "what is left, and with --expocloud-skip-above skips the hopeless) or 'none' (the "
        "declared order only). Default: 'learned' when --expocloud-skip-above is given, else "
        "'none', so a run without either behaves as before. A model of your own: "
        "module:attribute, a callable (ModelSpec, saved dict or None) -> RuntimeModel."))
    model_trust_after: int = field(default=50, metadata=option(
        "Finished jobs of a rule its runtime model must have seen before it may skip any "
        "(--expocloud-skip-above): below that it knows too little. Lower it only for a small "
        "sweep you watch (0: from the first job, for a model of your own that needs no "
        "learning).", type=int))
    hardness_noise: Optional[str] = field(default=None, metadata=option(
        "Wildcards (or CWL inputs) that the runtime model treats as noise, comma-separated, "
        "e.g. 'seed,instance': a seed or an instance names a repetition, not a harder or "
        "easier job. A rule's own 'hardness_noise' resource (set-resources) overrides it."))
    no_adopt: bool = field(default=False, metadata=option(
        "A rerun after a crash stops the crashed run's workers (their jobs in flight run "
        "again) instead of adopting them and using their results: for a rerun after changing "
        "a rule's code or inputs."))
    keep_bucket: bool = field(default=False, metadata=option(
        "Keep the run's objects in its coordination bucket (GCE) or run directory (local) "
        "when it ends, for a look at what the workers wrote; by default they are deleted "
        "(a crashed run's stay for the rerun either way; 'expocloud cleanup' removes them)."))
    run_id: Optional[str] = field(default=None, metadata=option(
        "Name of the run directory under .expocloud/runs (default: a time stamp)."))
    state_dir: str = field(default=".expocloud", metadata=option(
        "Where runs, frontiers and placeholder records are kept, relative to the workdir."))
    # -- pools (GCE) ---------------------------------------------------------------------------
    # (booleans default to False: Snakemake cannot name a default-True flag of a plugin)
    on_demand_only: bool = field(default=False, metadata=option(
        "GCE: no Spot VMs; every job runs on on-demand VMs."))
    spot_attempts: int = field(default=2, metadata=option(
        "GCE: a job preempted this many times runs on on-demand VMs from then on.", type=int))
    on_demand_min: int = field(default=0, metadata=option(
        "GCE: on-demand VMs kept while work is left, a reliable core.", type=int))
    max_on_demand: Optional[int] = field(default=None, metadata=option(
        "GCE: most on-demand VMs at once, of every machine shape together (default: a quarter of --expocloud-max-workers, at "
        "least 1 and at least --expocloud-on-demand-min).", type=int))
    budget: Optional[float] = field(default=None, metadata=option(
        "GCE: spending cap in USD for the run's VMs, priced from the price snapshot "
        "('expocloud prices'): near it no VM is created; at it the run drains or cancels "
        "(--expocloud-budget-action); the run never knowingly overspends it.", type=float))
    budget_action: str = field(default="drain", metadata=option(
        "GCE: at the budget, 'drain' (running jobs may finish, queued ones do not run; all "
        "stops if even that would overrun) or 'cancel' (everything stops at once).",
        choices=list(BUDGET_ACTIONS)))
    no_straggler_rule: bool = field(default=False, metadata=option(
        "GCE: turn off the straggler rule (once the remaining work fits the on-demand pool, "
        "queued jobs go there, so preemptions cannot hold the end of a sweep hostage)."))
    worker_requirements: Optional[str] = field(default=None, metadata=option(
        "A requirements file of your own Python packages for the jobs: exact pins only "
        "(name==version, optionally with --hash=sha256:...; list dependencies too, nothing "
        "is resolved). GCE 'pip' workers install them once per VM into the worker's venv "
        "(with --require-hashes when hashed); 'image' workers must already have them. The "
        "local engine installs nothing: jobs use this machine's environment."))
    # -- notifications (docs/notifications.md) -----------------------------------------------
    notify: Optional[str] = field(default=None, metadata=option(
        "An HTTPS URL that gets a small JSON document, POSTed and signed (HMAC-SHA256 under "
        f"the secret in ${SECRET_ENV} or --expocloud-notify-secret-file, in the "
        "X-Expocloud-Signature header), at the run's end, a budget phase change, the first "
        "failed job, a stalled run and a pool stopped for the run; http:// only to localhost; "
        "env:NAME reads the URL from the environment variable NAME (Snakemake logs its "
        "command line). Sending never slows or fails the run."))
    notify_command: Optional[str] = field(default=None, metadata=option(
        "A command run with each notification's JSON on its stdin (split like a shell "
        "line, but run without a shell: nothing of the payload is interpreted)."))
    notify_secret_file: Optional[str] = field(default=None, metadata=option(
        f"A file holding the secret that signs --expocloud-notify's POSTs (default: the "
        f"environment variable {SECRET_ENV}); never the run key, never logged."))
    stall_after: Optional[str] = field(default=None, metadata=option(
        f"A run is stalled, and notified as such once, when no job started or ended for this "
        f"long (90s, 30m, ...) while workers are alive (billed on GCE); 'never' turns it off "
        f"(default {STALL_AFTER / 60:g}m)."))
