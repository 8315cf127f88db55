"""Direct jobs: a plain ``shell:`` job's worker runs only its shell line (on the GCE path, with
its storage files moved by the worker: staged_direct.py).

A job's own snakemake (forked from the worker's template, worker/forked.py) costs about
40-60 ms of CPU per job: a one-job DAG, its scheduler, logging, postprocessing. For a trivial
job of a sweep that is most of its cost, and plain Snakemake pays none of it: its local
executor prepares the job and formats the rule's shell command in its main process
(``snakemake/executors/local.py``: ``job_args_and_prepare`` calls ``job.prepare()``, then
``run_wrapper`` calls the rule's function, which calls ``snakemake.shell.shell``), and its
scheduler postprocesses the job there too. A *direct job* does the same: the main process
prepares it (:meth:`DirectJobs.prepare`) and formats its command as ``shell`` does
(:func:`command`), the worker runs that line in a fresh shell, and Snakemake's scheduler
postprocesses it as for any job of ours (with the input/output shared file system of the local
engine, that is the local executor's postprocessing: logs, touch, output checks, storage,
protected outputs, metadata).

Eligibility is strict (:func:`why_not`): anything this path does not reproduce exactly runs as
before, in a job's own snakemake. ``EXPOCLOUD_DIRECT_JOBS=0`` turns the path off.

The command mirrors ``shell.__new__`` in Snakemake 9 and reads its private
``shell._get_process_prefix`` and ``shell._process_suffix``: a Snakemake without them makes
no job direct (:func:`command` returns None), never a broken job.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from snakemake.io import is_flagged
from snakemake_interface_executor_plugins.settings import SharedFSUsage

from expo_executor.frontends.snakemake import staged_direct
from expo_executor.protocol.keys import COMMAND_ONLY_ENV

DIRECT_ENV = "EXPOCLOUD_DIRECT_JOBS"  # "0": every job in its own snakemake, as before
# Snakemake's shell writes a longer line to a script file first (shell.MAX_ARG_LEN): such a
# job runs in its own snakemake instead
MAX_LINE = 16 * 4096 - 1
# what shell.__new__ sets to the job's threads
THREAD_VARIABLES = ("OMP_NUM_THREADS", "GOTO_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")
TMPDIR_VARIABLES = ("TMPDIR", "TMP", "TEMPDIR", "TEMP")  # set to resources.tmpdir


@dataclass(frozen=True)
class DirectCommand:
    """What the worker runs for a direct job: ``argv`` (a shell, ``-c``, the line) with
    ``env`` on top of the job's environment."""

    argv: list[str]
    env: dict[str, str]
    # on the GCE path, the files its worker moves (staged_direct.stage; JobSpec.stage)
    stage: dict | None = None


def enabled() -> bool:
    return os.environ.get(DIRECT_ENV, "1") != "0"


def why_not(job: Any, workflow: Any, local_engine: bool, cpus: int) -> str | None:
    """Why ``job`` is not a direct job (None: it is). ``cpus``: what its worker gives it; a
    job of more threads runs in its own snakemake, which scales its threads down. On the GCE
    path (not ``local_engine``) its files must be ones its worker can move itself
    (staged_direct.py)."""
    reason = _rule_reason(job)
    if reason:
        return reason
    files = [*job.input, *job.output, *job.log]
    if any(is_flagged(f, flag) for f in files for flag in ("pipe", "service")) \
            or any(job.is_pipe_or_service_input(f) for f in job.input):
        return "a pipe, service or storage file"
    if any(is_flagged(f, "update") for f in job.output):
        return "an update output"
    reason = _local_reason(files, workflow.storage_settings) if local_engine else \
        staged_direct.why_not_staged(job, workflow)
    if reason:
        return reason
    if workflow.workflow_settings.cache is not None and job.rule.cache:
        return "a cached rule"
    if workflow.execution_settings.debug:
        return "debug mode"
    if int(job.threads) > cpus:
        return "more threads than its worker gives"
    return None


def _rule_reason(job: Any) -> str | None:
    """What of the job's rule only its own snakemake does."""
    if job.is_group():
        return "a group job"
    rule = job.rule
    if rule.shellcmd is None or not rule.is_shell:
        return "not a shell rule"
    if rule.is_template_engine or rule.is_handover or job.is_checkpoint:
        return "a template engine, handover or checkpoint rule"
    if job.is_shadow:
        return "a shadow rule"
    if rule.conda_env or rule.container_img or rule.env_modules:
        return "a conda, container or env-modules rule"
    if job.benchmark is not None:
        return "a benchmark"
    return None


def _local_reason(files: list[Any], storage: Any) -> str | None:
    """What keeps a job of the local engine in its own snakemake: any storage."""
    if any(is_flagged(f, "storage_object") or getattr(f, "is_storage", False) for f in files):
        return "a pipe, service or storage file"
    if storage.default_storage_provider is not None:
        return "a default storage provider"
    if SharedFSUsage.INPUT_OUTPUT not in storage.shared_fs_usage:
        # the main process's postprocessing is then a remote job's, not the local executor's
        return "no shared file system for inputs and outputs"
    return None


def command(job: Any) -> DirectCommand | None:
    """The job's shell line, environment and shell, as ``snakemake.shell.shell`` would run
    them in plain Snakemake's local executor; None when this Snakemake's ``shell`` lacks what
    it reads, the line does not format (the job's own snakemake then reports that as it
    always has), or it is longer than Snakemake passes on a command line."""
    from snakemake.shell import shell

    try:
        prefix_of, suffix = shell._get_process_prefix, shell._process_suffix  # private
        executable = job.resources.get("shell_exec") or shell.get_executable()
        # the rule function's globals (the Snakefile's, or its module's) and its arguments
        line = _formatted(job.rule.shellcmd,
                          {**job.rule.run_func.__globals__, **_rule_locals(job)})
        line = " ".join((prefix_of(executable), line, suffix)).strip()
    except Exception:  # noqa: BLE001 - a surprise in Snakemake's internals or the command
        return None
    if len(line.replace("'", r"'\''")) + 2 > MAX_LINE:
        return None
    threads = str(job.threads)
    env = {COMMAND_ONLY_ENV: "1", **{name: threads for name in THREAD_VARIABLES}}
    tmpdir = job.resources.get("tmpdir")
    if tmpdir:
        env.update({name: str(tmpdir) for name in TMPDIR_VARIABLES})
    return DirectCommand([executable or "/bin/sh", "-c", line], env)


def _formatted(pattern: str, variables: dict[str, Any]) -> str:
    """``pattern`` formatted as ``shell`` formats it (``snakemake.utils.format``, which also
    reads its caller's names: this function's two, and this module's, below the rule's)."""
    from snakemake.utils import format as snakemake_format

    return snakemake_format(pattern, stepout=1, **variables)


def _rule_locals(job: Any) -> dict[str, Any]:
    """The names a rule's function gives its ``shell`` call's formatting (the rule function's
    signature in ``snakemake/parser.py``, ``Run.start``), with the values plain Snakemake's
    local executor passes (``job_args_and_prepare``) for the job's files, params, wildcards,
    threads, resources, rule and id; the deployment and source-cache ones, which an eligible
    job does not use, as None or empty."""
    return dict(input=job.input._plainstrings(), output=job.output._plainstrings(),
                params=job.params, wildcards=job.wildcards, threads=job.threads,
                resources=job.resources, log=job.log._plainstrings(), rule=job.rule.name,
                conda_env=None, container_img=None, singularity_args="",
                use_singularity=False, env_modules=None, bench_record=None,
                jobid=job.jobid, is_shell=True, bench_iteration=None,
                cleanup_scripts=True, shadow_dir=None, edit_notebook=None,
                conda_base_path=None, basedir=job.rule.basedir, sourcecache_path=None,
                runtime_sourcecache_path=None, runtime_paths=None)


class DirectJobs:
    """The direct jobs of one run: which jobs are, their commands, their preparation."""

    def __init__(self, workflow: Any, local_engine: bool, slots: int) -> None:
        self.workflow = workflow
        self.local_engine = local_engine
        self.slots = slots  # CPUs of every worker
        self.on = enabled()
        self.count = 0  # jobs run directly so far

    def command(self, job: Any) -> DirectCommand | None:
        """The job's command when it is a direct job, else None (it runs as before)."""
        if not self.on:
            return None
        try:
            if why_not(job, self.workflow, self.local_engine, self.slots):
                return None
        except AttributeError:  # a Snakemake whose jobs or settings differ: none is direct
            return None
        found = command(job)
        if found is None or self.local_engine:
            return found
        try:
            staged = staged_direct.staged(found.argv, found.env, job, self.workflow,
                                          TMPDIR_VARIABLES)
        except AttributeError:  # a Snakemake whose jobs or workflow differ
            return None
        return DirectCommand(*staged) if staged else None

    def prepare(self, job: Any) -> None:
        """What plain Snakemake's local executor does before it runs the job, in its main
        process (``job_args_and_prepare``): check protected outputs, remove old ones, make
        directories, wait for the inputs. Only once the job's request is built: a job whose
        annotations are refused must not lose its old outputs. On the GCE path the main
        process prepares nothing, as for any remote job: its worker removes the old objects
        (staged_direct.py)."""
        if self.local_engine:
            self.workflow.async_run(job.prepare())
        self.count += 1

    def summary(self) -> str | None:
        """The run's line on them, for the end of the run; None when none ran."""
        if not self.count:
            return None
        how = "prepared and postprocessed here as plain Snakemake does" if self.local_engine \
            else "their storage files moved by their workers as Snakemake's would move them"
        return (f"expocloud: {self.count} jobs ran directly (their shell lines, {how}; "
                f"{DIRECT_ENV}=0 turns this off)")
