"""Direct jobs on the GCE path: a plain ``shell:`` job whose files all live in the GCS default
storage runs as its shell line alone, its files moved by its worker (worker/direct_staged.py).

Without a shared file system a remote job's own snakemake (on the worker) does four things
around the rule's shell line that the main process does not: it unpacks the workflow's sources
(``--deploy-sources``: the archive the main process uploaded to the default storage), retrieves
the job's storage inputs to their local copies (``.snakemake/storage/gcs/BUCKET/KEY``, the
paths the shell line names), removes the outputs' and logs' old objects before the job
(``Job.remove_existing_output``), and after it stores every output and log in its object
(``DAG.handle_storage``; only the logs when the job failed). The main process then only waits
for the outputs in storage (``Job.postprocess`` of a remote job). :func:`stage` lists exactly
those files, so the worker does the same without Snakemake: the same objects, the same bytes.

Eligibility (:func:`why_not_staged`, on top of :func:`direct_jobs.why_not`'s rule checks) is
strict: the default storage provider is ``gcs`` with a prefix, the main process does not share
the storage's local copies with the workers, and every input, output and log is a plain file
of that storage: no flag but its storage object (no temp, protected, touch, directory, ancient,
local or nodelocal file), one Snakemake retrieves, whose local copy is a relative path; and the
main process still works in the directory it started in. A ``workdir:`` directive (or
``--directory``) moves it: the line and the local copies are then formatted relative to the new
directory, while the job's own snakemake starts in the unpacked sources, with the Snakefile
named relative to the new directory (on the emulated GCE path it stops there: 'Snakefile
"../Snakefile" not found'); such a job keeps its own snakemake, with or without direct jobs. The
line (:func:`staged`) names no value the main process left to the worker (``<TBD>``) and no
absolute path of this machine (its working directory, ``{workflow.basedir}``): the job's own
snakemake would name its own. Its ``tmpdir`` is the worker's system one unless the job names
one, as a remote job's own snakemake evaluates it. Anything else runs in its own snakemake.
"""

from __future__ import annotations

import os
from typing import Any

from snakemake_interface_executor_plugins.settings import SharedFSUsage

from expo_executor.protocol.keys import COMMAND_ONLY_ENV
from expo_executor.worker.staged_checks import safe_relative

GCS_PLUGIN = "snakemake_storage_plugin_gcs"  # the storage objects a worker can store
# Snakemake's TBDString: what the main process leaves to a remote job's own snakemake
UNDECIDED = "<TBD>"
# the only flags a file of an eligible job carries: default storage sets both on every file
# (its storage object, and snakemake/path_modifier.py's mark that the path was rewritten)
PLAIN_FLAGS = frozenset({"storage_object", "path_modified"})


def why_not_staged(job: Any, workflow: Any) -> str | None:
    """Why the files of ``job`` (a single job, its rule already checked) keep it in its own
    snakemake on the GCE path; None: the worker can move them itself."""
    storage = workflow.storage_settings
    prefix = storage.default_storage_prefix or ""
    if storage.default_storage_provider != "gcs" or not prefix.startswith(("gs://", "gcs://")):
        return "not the GCS default storage"
    if storage.shared_fs_usage & {SharedFSUsage.INPUT_OUTPUT,
                                  SharedFSUsage.STORAGE_LOCAL_COPIES}:
        return "a shared file system"
    if workflow.overwrite_workdir is not None or os.getcwd() != workflow.workdir_init:
        # the line and its local copies were formatted relative to the moved directory
        return "a working directory moved by workdir: or --directory"
    for file in [*job.input, *job.output, *job.log]:
        reason = _file_reason(file)
        if reason:
            return reason
    return None


def _file_reason(file: Any) -> str | None:
    if not getattr(file, "is_storage", False):
        return "a file outside the default storage"
    if set(file.flags) - PLAIN_FLAGS:
        return "a flagged file (temp, protected, touch, directory, ancient...)"
    stored = file.storage_object
    if not type(stored).__module__.startswith(GCS_PLUGIN) \
            or not str(stored.query).startswith("gs://"):
        return "a file of another storage"
    if not stored.retrieve:
        return "a storage file Snakemake does not retrieve"
    try:
        safe_relative(str(file))
    except ValueError:
        return "a storage file whose local copy is not a relative path"
    return None


def stage(job: Any, workflow: Any) -> dict:
    """The job's files as its worker moves them (worker/direct_staged.py): each [local copy,
    ``gs://`` object] to fetch before the command, and to store after it (outputs when it
    succeeded, logs always), and the workflow's source archive [object, sha256] to unpack
    first. Raises AssertionError when Snakemake uploaded no source archive (the caller then
    runs the job in its own snakemake)."""
    archive = workflow.source_archive  # asserts it was uploaded

    def pairs(files: Any) -> list[list[str]]:
        seen: dict[str, str] = {}
        for file in files:
            seen.setdefault(str(file), str(file.storage_object.query))
        return [[path, query] for path, query in seen.items()]

    return {"direct": True, "host_env": True, "fetch": pairs(job.input),
            "outputs": pairs(job.output), "logs": pairs(job.log),
            "sources": [str(archive.query), str(archive.checksum)]}


def staged(argv: list[str], env: dict[str, str], job: Any, workflow: Any,
           tmpdir_names: tuple[str, ...]) -> tuple[list[str], dict[str, str], dict] | None:
    """A direct job's command, environment and stage on the GCE path, from its local command
    (``argv`` and ``env``, direct_jobs.command); None when its line names what only its
    worker knows, or Snakemake uploaded no source archive: it then runs in its own snakemake.
    The shell is found on the worker's PATH, as the job's own snakemake finds it there
    (``shell.get_executable``), unless the job names one (``shell_exec``)."""
    line = argv[-1]
    if not job.resources.get("shell_exec"):
        argv = [os.path.basename(argv[0]), *argv[1:]]
    if UNDECIDED in line or any(path in line for path in _this_machine(job, workflow)):
        return None
    try:
        spec = stage(job, workflow)
    except AssertionError:  # no source archive
        return None
    tmpdir = job.resources.get("tmpdir")
    if tmpdir is not None and (tmpdir or str(tmpdir) == UNDECIDED):
        # [the job's own, or None: the worker's system tmpdir (Snakemake's default, which the
        # job's own snakemake evaluates there)], and the variables shell sets to it
        spec["tmpdir"] = [str(tmpdir) if tmpdir else None, list(tmpdir_names)]
    # the worker's staged job stamps its command itself (worker/command_clock.py)
    env = {k: v for k, v in env.items() if k not in (COMMAND_ONLY_ENV, *tmpdir_names)}
    return argv, env, spec


def _this_machine(job: Any, workflow: Any) -> set[str]:
    """The absolute paths of this machine a line may name that a worker's are not: the
    working directory and the Snakefile's folder (``{workflow.basedir}``, ``basedir``)."""
    paths = {os.getcwd(), str(job.rule.basedir), str(workflow.basedir)}
    return {path for path in paths if os.path.isabs(path) and path != "/"}
