"""A direct job on the GCE path: its shell line, with its files moved as its own snakemake
would move them through Snakemake's GCS storage plugin (frontends/snakemake/staged_direct.py).

``staged_job`` hands a spec whose stage says ``direct`` here. In the job's own directory
(``root``, which stands for the working directory of the job's own snakemake) this unpacks the
workflow's sources (``--deploy-sources``: the archive, checked against its sha256, downloaded
once per VM: ``sources_archive``), fetches
each input object to its local copy, removes the outputs' and logs' old objects (as
``Job.remove_existing_output`` does), makes their directories, runs the line, and stores each
output (only when the command succeeded and left every one of them) and each log (always) in
its object, with the VM's own credentials. An output the command did not leave fails the job,
as Snakemake's missing-output check does, and nothing of it is stored. Files stream between
disk and storage in bounded memory (``GcsBucket.download_to``/``upload_from``), as the plugin
streams them (``download_to_filename``, ``upload_from_filename``): a job's genomes or BAMs may
be larger than its VM's memory; the sources archive too (it holds whatever git tracks).

Every local path is relative and stays inside ``root`` (``safe_relative``); every object name
came in the signed assignment.
"""

from __future__ import annotations

import os
import re
import sys
import tarfile
import tempfile
from collections.abc import Callable
from pathlib import Path

from expo_executor.core.records import AttemptEnd
from expo_executor.protocol.gcs_bucket import GcsBucket, parse_gs_url
from expo_executor.protocol.keys import DEPLOY_DIR_ENV
from expo_executor.worker.command_clock import STAMPS_ENV, stamp
from expo_executor.worker.staged_checks import file_sha256, one_line, safe_relative

Outcome = tuple[AttemptEnd, int | None, str | None]
SOURCES_CACHE = "sources"  # the workflow's sources archives, one per version (by sha256)


class Objects:
    """``gs://`` objects by URL, through one bucket client per bucket name."""

    def __init__(self) -> None:
        self.buckets: dict[str, GcsBucket] = {}

    def _at(self, url: str) -> tuple[GcsBucket, str]:
        url = "gs://" + url[len("gcs://"):] if url.startswith("gcs://") else url
        name, key = parse_gs_url(url)
        key = key.rstrip("/")
        if not key:
            raise ValueError(f"no object name in {url!r}")
        if name not in self.buckets:
            self.buckets[name] = GcsBucket(f"gs://{name}")
        return self.buckets[name], key

    def download_to(self, url: str, path: Path) -> int:
        """Object ``url`` into file ``path``, streamed; returns its size."""
        bucket, key = self._at(url)
        size = bucket.download_to(key, path)
        if size is None:
            raise FileNotFoundError(f"{url} is missing from storage")
        return size

    def upload_from(self, url: str, path: Path) -> int:
        """File ``path`` into object ``url``, streamed; returns its size."""
        bucket, key = self._at(url)
        size = path.stat().st_size
        bucket.upload_from(key, path)
        return size

    def delete(self, url: str) -> None:
        bucket, key = self._at(url)
        bucket.delete(key)

    def under(self, url: str) -> list[str]:
        """The URLs of the objects in folder ``url`` (the plugin's ``directory_entries``)."""
        bucket, key = self._at(url)
        url = url.rstrip("/")
        return [f"{url}/{name[len(key) + 1:]}" for name in sorted(bucket.list(key + "/"))]


class StoreFailed(Exception):
    """An output or log the storage did not take, named as the plugin's ``managed_store``
    names it (the object, then the storage's error): the job's reason says which."""


def local(base: Path, path: str) -> Path:
    """A local copy's path inside ``base``; raises ValueError for one that would leave it."""
    return base / safe_relative(path)


def before(objects: Objects, stage: dict, base: Path) -> int:
    """Sources, inputs and directories in place, old outputs gone; returns the bytes read."""
    query, checksum = stage["sources"]
    # the VM's deploy directory (one per VM) keeps each version of the sources; without one
    # (a job run alone), the job's own directory, removed with it
    cache = Path(os.environ.get(DEPLOY_DIR_ENV) or base.parent) / SOURCES_CACHE
    archive, moved = sources_archive(objects, query, checksum, cache)
    with tarfile.open(archive, mode="r") as tar:
        tar.extractall(base, filter="data")  # nothing outside base, no devices or links out
    for path, url in stage["fetch"]:
        moved += fetch(objects, base, path, url)
    for path, url in [*stage["outputs"], *stage["logs"]]:
        objects.delete(url)  # absent is fine
        local(base, path).parent.mkdir(parents=True, exist_ok=True)
    return moved


def sources_archive(objects: Objects, query: str, checksum: str,
                    cache: Path) -> tuple[Path, int]:
    """The workflow's sources archive ``query``, checked against its sha256 at each use, and
    the bytes read for it: from ``cache`` when it holds that version, else downloaded into it.
    A run's jobs share one version of the sources, so a VM downloads it once, not once a job
    (a billed read and its latency on every job's way). A copy that no longer matches (a job
    changed it: jobs run as the worker's user) is downloaded again; a download lands under its
    name only once whole and checked, so jobs beside it never read half of one."""
    if not re.fullmatch(r"[0-9a-f]{64}", checksum):
        raise ValueError(f"the workflow's sources {query} have no sha256 checksum "
                         f"({checksum!r})")
    cached = cache / f"{checksum}.tar"
    if cached.is_file() and file_sha256(cached) == checksum:
        return cached, 0
    cache.mkdir(mode=0o700, parents=True, exist_ok=True)
    part = cache / f"{checksum}.{os.getpid()}.part"
    try:
        moved = objects.download_to(query, part)
        if file_sha256(part) != checksum:
            raise ValueError(f"the workflow's sources {query} do not match their checksum")
        os.replace(part, cached)
    finally:
        part.unlink(missing_ok=True)
    return cached, moved


def fetch(objects: Objects, base: Path, path: str, url: str) -> int:
    """One input to its local copy: the object, or when there is none, the folder of that name
    (an upstream ``directory()`` output), as the plugin's ``retrieve_object`` does; returns the
    bytes read."""
    target = local(base, path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        return objects.download_to(url, target)
    except FileNotFoundError:
        entries = objects.under(url)
        if not entries:
            raise
    moved = 0
    for entry in entries:
        target = local(base, f"{path}/{entry[len(url) + 1:]}")
        target.parent.mkdir(parents=True, exist_ok=True)
        moved += objects.download_to(entry, target)
    return moved


def after(objects: Objects, stage: dict, base: Path, succeeded: bool) -> tuple[int, str | None]:
    """Store the outputs (when ``succeeded`` and all are there) and the logs that exist;
    returns the bytes written and why the job fails after all (a missing output)."""
    moved, why = 0, None
    outputs = stage["outputs"] if succeeded else []
    missing = [path for path, _ in outputs if not local(base, path).is_file()]
    if missing:
        why, outputs = f"missing output files: {', '.join(missing)}", []
    for path, url in [*outputs, *stage["logs"]]:
        source = local(base, path)
        if not source.is_file():
            continue  # a log the failed command never wrote
        try:
            moved += objects.upload_from(url, source)
        except Exception as exc:  # noqa: BLE001 - said as the plugin says it, then raised
            raise StoreFailed(f"Failed to store output in storage {url}: "
                              f"{one_line(exc)}") from exc
    return moved, why


def run(spec: dict, base: Path, command: Callable[[list[str], str, dict[str, str]], Outcome],
        objects: Objects | None = None) -> Outcome:
    """Stage, run (``command(argv, cwd, env)``: staged_job's, which stamps and times it) and
    store one direct job; ``objects``: storage (the VM's own credentials by default)."""
    stage = spec["stage"]
    stamps = os.environ.get(STAMPS_ENV)
    objects = objects if objects is not None else Objects()
    base.mkdir(parents=True, exist_ok=True)
    try:
        stamp(stamps, down=before(objects, stage, base))
    except Exception as exc:  # noqa: BLE001 - the verdict names it; the log has the trace
        print(f"direct job: fetching inputs failed: {exc!r}", file=sys.stderr, flush=True)
        return AttemptEnd.FAILED, None, f"fetching inputs from storage failed: {one_line(exc)}"
    env = dict(os.environ)
    env.pop(STAMPS_ENV, None)  # ours, not the command's
    env.update(spec["env"])
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    if stage.get("tmpdir"):  # the job's own, or this machine's (Snakemake's default)
        path, names = stage["tmpdir"]
        path = path or tempfile.gettempdir()
        os.makedirs(path, exist_ok=True)  # as Job.prepare makes it
        env.update({name: path for name in names})
    outcome, code, reason = command(spec["argv"], str(base), env)
    if code is None:
        return outcome, code, reason  # it did not start, or its limit killed it: nothing stored
    succeeded = outcome is AttemptEnd.SOLVED and code == 0
    if outcome is AttemptEnd.SOLVED and code != 0:
        outcome = AttemptEnd.FAILED
    try:
        up, why = after(objects, stage, base, succeeded)
        stamp(stamps, up=up)
    except Exception as exc:  # noqa: BLE001 - outputs that did not arrive fail the job
        print(f"direct job: storing outputs failed: {exc!r}", file=sys.stderr, flush=True)
        said = str(exc) if isinstance(exc, StoreFailed) else one_line(exc)
        why = f"storing outputs failed: {said}"
    if why:
        print(f"direct job: {why}", file=sys.stderr, flush=True)
        return AttemptEnd.FAILED, code, f"{reason}; {why}" if reason else why
    return outcome, code, reason
