"""What a group job's own snakemake is told beyond Snakemake's remote command: its members'
``pipe()`` and ``service()`` outputs are files it must never store.

Without a shared file system, Snakemake's remote job (``--mode remote``) stores its outputs
only once all its jobs are done (``DAG.store_storage_outputs``), and that step uploads every
storage output that exists locally: pipe and service outputs included, which are FIFOs or
sockets. Reading a FIFO whose writer has gone blocks forever, so a pipe group hung on its
worker after its rules had finished (under any remote executor: cluster-generic does the same).
In the main process and on the local engine Snakemake never stores them (``DAG.handle_storage``
skips them, and a group's are removed once it is done). Snakemake's remote command already
names files the job must not store: ``--unneeded-temp-files`` ("not uploaded to storage and
deleted after job or group job completion"), its temp files no outside job needs. The group's
pipe and service outputs join that list, which is then exactly what Snakemake does with them
elsewhere.
"""

from __future__ import annotations

from collections.abc import Iterable

from snakemake.io import is_flagged
from snakemake_interface_executor_plugins.utils import format_cli_arg, join_cli_args

UNNEEDED = "--unneeded-temp-files"
TRANSIENT_FLAGS = ("pipe", "service")


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
    return join_cli_args([args, format_cli_arg(UNNEEDED, files)])

