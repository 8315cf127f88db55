"""What a GCE worker shares with this machine: no file system, and the workflow's sources
only as Snakemake ships them, those below its working directory.

A job on a worker that shares no sources with this machine unpacks Snakemake's source archive
(``Workflow.upload_sources``) and runs its own snakemake on the Snakefile in it. That archive
holds the sources by their paths relative to the working directory, and Snakemake leaves out,
with a warning, every file above it (``../``). So a ``workdir:`` directive or ``--directory``
that moves the working directory below the Snakefile leaves the Snakefile out, and every job
fails on its VM with ``Snakefile "../Snakefile" not found``: on the GCE path, after a VM was
paid for. The same holds for Snakemake's other remote executors (snakemake#2572). This check
says so before anything is provisioned.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from snakemake_interface_executor_plugins.settings import SharedFSUsage

from expo_executor.core.errors import ExpoError


def check_gce_sharing(workflow: Any) -> None:
    """Raise ExpoError, before any VM, when the run counts on a file system shared with the
    workers, or when its jobs could not load the workflow from Snakemake's source archive."""
    sharing = workflow.storage_settings.shared_fs_usage
    if SharedFSUsage.INPUT_OUTPUT in sharing:
        raise ExpoError("shared-fs-usage", "GCE workers share no file system with this "
                        "machine", "set shared-fs-usage: none, default-storage-provider: "
                        "gcs and default-storage-prefix: gs://BUCKET/PREFIX "
                        "(profiles/gce-spot)")
    if SharedFSUsage.SOURCES not in sharing:
        check_shipped(workflow.main_snakefile, included_paths(workflow), os.getcwd())


def outside_workdir(sources: Iterable[str], workdir: str) -> list[str]:
    """The local ``sources`` that lie above ``workdir``, as paths relative to it."""
    found = []
    for source in sources:
        if "://" in source:  # a URL (a remote include): not the archive's
            continue
        relative = os.path.relpath(os.path.abspath(source), workdir)
        if relative == ".." or relative.startswith(".." + os.sep):
            found.append(relative)
    return found


def check_shipped(main_snakefile: str, included: Iterable[str], workdir: str) -> None:
    """Raise ExpoError when the workflow's Snakefile or an included file lies above the
    working directory, which Snakemake's source archive leaves out."""
    outside = outside_workdir(dict.fromkeys([main_snakefile, *included]), workdir)
    if outside:
        shown = ", ".join(outside[:3]) + (f" and {len(outside) - 3} more" if len(outside) > 3
                                          else "")
        raise ExpoError(
            "workdir: / --directory",
            f"the working directory {workdir} lies below the workflow's sources ({shown}); "
            "Snakemake ships remote jobs only the sources below it (snakemake#2572), so each "
            "job would fail on its VM",
            "keep the Snakefile, its includes and config files below the working directory "
            "(e.g. snakemake -s DIR/Snakefile with workdir: DIR), or drop workdir: and "
            "--directory")


def included_paths(workflow: object) -> list[str]:
    """The files the workflow included (its Snakefile among them): absolute paths, or URLs,
    as Snakemake lists them for its archive (``DAG.get_sources``)."""
    paths = []
    for source in getattr(workflow, "included", ()):
        paths.append(source.get_path_or_uri(secret_free=True)
                     if hasattr(source, "get_path_or_uri") else str(source))
    return paths
