"""A job's temp outputs: its own snakemake uploads every one the main process waits for.

Snakemake tells a remote job which of its temp outputs no other job needs
(``--unneeded-temp-files``, from ``DAG.get_unneeded_temp_files``): the job's snakemake deletes
them and does not upload them. Yet the main process, with no shared file system, waits for
every output of a single job in storage once the job ends (``Job.postprocess``) and fails it
with MissingOutputException when one is missing. So a rule with a temp output that no job reads
(``temp(expand(...))`` of which one file is consumed; Snakemake's test_temp_expand) failed
through any storage-backed remote executor, where plain Snakemake with the same storage writes
the file, uploads it and then removes it as a temp file.

A single job's snakemake therefore gets no ``--unneeded-temp-files``: it keeps and uploads all
its outputs; the main process finds them and removes the unneeded ones from storage
(``DAG.handle_temp``), as plain Snakemake does. A group job keeps the argument: its main process
does not wait for outputs when any may be missing (``GroupJob.postprocess`` passes the list of
temp files needed by no job outside the group, and a non-empty list skips the wait), so one
member's intermediate temp files rightly stay on the worker.
"""

from __future__ import annotations

from typing import Iterable, Protocol

from snakemake_interface_executor_plugins.utils import format_cli_arg

FLAG = "--unneeded-temp-files"


class TempOutputs(Protocol):
    """What is read of Snakemake's DAG: the temp outputs of a job no other job needs."""

    def get_unneeded_temp_files(self, job) -> Iterable[str]: ...


def upload_awaited(job_args: str, job, dag: TempOutputs) -> str:
    """Snakemake's arguments for the job's own snakemake (``get_job_args``), without
    ``--unneeded-temp-files`` when the main process waits for those files (a single job)."""
    if job.is_group():
        return job_args
    unneeded = list(dag.get_unneeded_temp_files(job))
    if not unneeded:
        return job_args
    # the very text Snakemake's RealExecutor.get_job_args added (the same call)
    added = format_cli_arg(FLAG, unneeded)
    if added not in job_args:
        raise ValueError(f"{FLAG} is not in the job's arguments as Snakemake formats it: "
                         f"{job_args!r}")
    return job_args.replace(added, "")
