"""What a job's own snakemake stores: Snakemake's ``--unneeded-temp-files``, the files a remote
job must not upload, adjusted for a storage-backed run without a shared file system.

Temp outputs. Snakemake tells a remote job which of its temp outputs no other job needs
(``--unneeded-temp-files``, from ``DAG.get_unneeded_temp_files``): the job's snakemake deletes
them and does not upload them. Yet the main process waits for every output of a single job in
storage once the job ends (``Job.postprocess``) and fails it with MissingOutputException when
one is missing. So a rule with a temp output that no job reads (``temp(expand(...))`` of which
one file is consumed; Snakemake's test_temp_expand) failed through any storage-backed remote
executor, where plain Snakemake with the same storage writes the file, uploads it and then
removes it as a temp file. A single job's snakemake therefore gets no ``--unneeded-temp-files``:
it uploads all its outputs; the main process finds them and removes the unneeded ones from
storage (``DAG.handle_temp``), as plain Snakemake does. A group job keeps the argument: its main
process does not wait for outputs when any may be missing (``GroupJob.postprocess``), so one
member's intermediate temp files rightly stay on the worker.

Pipes and services. A group's remote job stores its outputs only once all its jobs are done
(``DAG.store_storage_outputs``), and that step uploads every storage output that exists
locally: pipe and service outputs included, which are FIFOs or sockets. Reading a FIFO whose
writer has gone blocks forever, so a pipe group hung on its worker after its rules had finished
(under any remote executor: cluster-generic does the same). In the main process and on the
local engine Snakemake never stores them (``DAG.handle_storage`` skips them). So a group's pipe
and service outputs join its ``--unneeded-temp-files``, which is then exactly what Snakemake
does with them elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from snakemake.io import is_flagged
from snakemake_interface_executor_plugins.utils import format_cli_arg, join_cli_args

FLAG = "--unneeded-temp-files"
TRANSIENT_FLAGS = ("pipe", "service")


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


def transient_outputs(job) -> list[str]:
    """The ``pipe()`` and ``service()`` outputs of a group job's members (a lone job has none:
    Snakemake puts every pipe's or service's producer and consumer in one group)."""
    if not job.is_group():
        return []
    return sorted({str(f) for member in job.jobs for f in member.output
                   if any(is_flagged(f, flag) for flag in TRANSIENT_FLAGS)})


def with_transient_outputs(args: str, job, unneeded: Iterable[object]) -> str:
    """Snakemake's job arguments ``args`` (whose ``--unneeded-temp-files``, if any, lists
    ``unneeded``), with the group's pipe and service outputs added to that list. The flag is
    given again, whole: Snakemake's command line keeps its last occurrence."""
    transient = transient_outputs(job)
    if not transient:
        return args
    files = sorted({*map(str, unneeded), *transient})
    return join_cli_args([args, format_cli_arg(FLAG, files)])


def stored_outputs_args(job_args: str, job, dag: TempOutputs) -> str:
    """Snakemake's arguments for the job's own snakemake (``get_job_args``), with its
    ``--unneeded-temp-files`` as the module says: none for a single job, the group's pipe and
    service outputs added for a group."""
    if job.is_group():
        return with_transient_outputs(job_args, job, dag.get_unneeded_temp_files(job))
    return upload_awaited(job_args, job, dag)
