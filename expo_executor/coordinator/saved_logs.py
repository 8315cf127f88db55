"""A failed or timed-out job's saved logs, from the bucket into the run directory.

The worker saved them (``worker.saved_logs``) and listed them in its signed result; they are
copied to ``.expocloud/runs/<run>/logs/<job>/`` as soon as the result is read, before the job
is reported, so that Snakemake's error message can name a directory that exists, and the logs
outlive the VM that wrote them (and, on the local engine, the run's bucket directory).

``<job>`` says which job it was: its rule and wildcards (``solve.n_tasks=6,variant=a``), with
``.attempt<N>`` for a retry, or its key when it has no rule.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path, PurePosixPath
from typing import Callable, Mapping

from expo_executor.runs.files import RunFiles
from expo_executor.core.records import JobMeta
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.records import SavedLog, WorkerResult

OUTPUT_NAME = "output.log"  # the job's captured stdout and stderr, in its logs directory
MAX_NAME_CHARS = 120  # a directory name, well under every file system's limit
_UNSAFE = re.compile(r"[^A-Za-z0-9._,=+@-]")


def _safe(text: str) -> str:
    """``text`` as one path component: other characters become '_', never hidden or '..'."""
    text = _UNSAFE.sub("_", text)
    return f"_{text}" if text.startswith(".") or not text else text


def logs_dir_name(meta: JobMeta, key: str) -> str:
    """The directory of a job's saved logs under ``logs/``: ``rule.k=v,...`` (wildcards in
    their order), ``.attempt<N>`` after a first attempt; the key when the job has no rule or
    the name would be too long."""
    if not meta.rule:
        return _safe(key)
    name = meta.rule + ("." + ",".join(f"{k}={v}" for k, v in meta.wildcards.items())
                        if meta.wildcards else "")
    if meta.attempt is not None and meta.attempt > 1:
        name += f".attempt{meta.attempt}"
    name = _safe(name)
    return name if len(name) <= MAX_NAME_CHARS else f"{name[:MAX_NAME_CHARS]}.{_safe(key)}"


def local_name(path: str | None) -> str:
    """Where a saved log goes inside its job's directory: ``output.log`` for the job's output,
    a ``log:`` file under its own path (made relative, with no way out of the directory)."""
    if path is None:
        return OUTPUT_NAME
    parts = [_safe(p) for p in PurePosixPath(path).parts if p not in ("/", ".", "..")]
    return "/".join(parts) or "log"


class LogFetcher:
    """Copies the logs a worker saved for a job into the run directory."""

    def __init__(self, bucket: Bucket, files: RunFiles, log: Callable[[str], None]) -> None:
        self.bucket = bucket
        self.files = files
        self.log = log

    def fetch(self, result: WorkerResult, meta: JobMeta,
              names: Mapping[str, str] | None = None) -> Path | None:
        """The job's logs directory, with every saved log the bucket still holds intact (a log
        file under the name ``names`` gives its path, e.g. ``logs/a.log`` for the copy a
        storage plugin keeps under ``.snakemake/storage/...``); None when it saved none. A log
        that cannot be had is said in one line and left out."""
        if not result.logs:
            return None
        directory = self.files.new_logs_dir(logs_dir_name(meta, result.key), _safe(result.key))
        taken: set[str] = set()
        for saved in result.logs:
            data = self._read(result.key, saved)
            if data is None:
                continue
            name = local_name((names or {}).get(saved.path or "", saved.path))
            while name in taken:  # two paths that read alike once made safe
                name += ".again"
            taken.add(name)
            self.files.write_log(directory, name, data)
        return directory

    def _read(self, job: str, saved: SavedLog) -> bytes | None:
        what = f"expocloud: cannot copy the saved log {saved.path or OUTPUT_NAME} of {job}"
        try:
            blob = self.bucket.read(saved.key, limit=saved.size)  # what the worker saved
        except Exception as exc:  # noqa: BLE001 - one log lost must not stop the run
            self.log(f"{what}: {type(exc).__name__}: {exc}")
            return None
        if blob is None:
            self.log(f"{what}: it is not in the bucket")
            return None
        if len(blob.data) != saved.size or \
                hashlib.sha256(blob.data).hexdigest() != saved.sha256:
            self.log(f"{what}: it is not what the worker saved (changed in the bucket)")
            return None
        return blob.data
