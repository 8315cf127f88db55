"""The runner's half of staging: a CWL job's files up to the bucket, its outputs back.

Every path of a job (its output directory, temporary directory and staged inputs) lies under
one root on this machine; a worker rebuilds that tree under its own disk (``staged_job.py``).
Inputs are content-addressed, so an input shared by a thousand scatter elements is uploaded
once. Files stream between disk and the bucket (``Bucket.upload_from``/``download_to``) and are
hashed a chunk at a time, so a multi-gigabyte input takes no more memory than a small one.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from expo_executor.protocol import messages
from expo_executor.protocol.bucket import Bucket, PreconditionFailed
from expo_executor.worker.staged_checks import file_sha256, safe_relative

STAGE_PREFIX = "stage/"


class Staging:
    """Moves the files of jobs rooted at ``root`` through ``bucket``."""

    def __init__(self, bucket: Bucket, root: Path) -> None:
        self.bucket = bucket
        self.root = root
        self._uploaded: set[str] = set()

    def manifest(self, key: str, mapped: list[tuple[str, bool]], outdir: str,
                 tmpdir: str) -> dict:
        """Upload what the job reads (following links) and say where each file goes.

        ``mapped``: cwltool's path mapper entries as (target, staged). Staged entries are
        what cwltool laid out for the job; an unstaged one is read where it lies, which the
        worker can only see when that is under the root (an earlier step's output).
        """
        inputs: dict[str, tuple[str, int]] = {}
        dirs = {self._relative(outdir), self._relative(tmpdir)}
        for target, staged in mapped:
            if staged or self._inside(target):
                self._collect(target, inputs, dirs)
        self._collect(outdir, inputs, dirs)  # InitialWorkDir entries are laid out there
        return {"root": str(self.root), "dirs": sorted(dirs),
                "inputs": [[rel, obj, mode] for rel, (obj, mode) in sorted(inputs.items())],
                "upload": f"{STAGE_PREFIX}out/{key}/"}

    def _inside(self, path: str) -> bool:
        return os.path.abspath(path).startswith(str(self.root) + os.sep)

    def _relative(self, path: str) -> str:
        rel = os.path.relpath(os.path.abspath(path), self.root)
        try:
            return safe_relative(rel)
        except ValueError:
            raise ValueError(f"{path} lies outside the job root {self.root}: staging through the "
                             "bucket needs every job path under it (do not set "
                             "--tmpdir-prefix or --tmp-outdir-prefix with bucket staging)") from None

    def _collect(self, path: str, inputs: dict[str, tuple[str, int]], dirs: set[str]) -> None:
        if os.path.isdir(path):
            for current, _, names in os.walk(path, followlinks=True):
                dirs.add(self._relative(current))  # empty ones too (writable InitialWorkDir)
                for name in names:
                    self._collect(os.path.join(current, name), inputs, dirs)
            return
        if not os.path.isfile(path):
            return  # an unstaged or dangling entry: nothing the command can read
        rel = self._relative(path)
        obj = f"{STAGE_PREFIX}in/{file_sha256(path)}"  # hashed and sent a chunk at a time
        if obj not in self._uploaded:
            try:
                self.bucket.upload_from(obj, path, if_generation_match=0)
            except PreconditionFailed:
                pass  # the same content is there already
            self._uploaded.add(obj)
        inputs[rel] = (obj, os.stat(path).st_mode & 0o777)

    def fetch(self, upload_prefix: str, worker: str, outdir: str) -> None:
        """Replace ``outdir`` with what the worker left in its output directory."""
        prefix = f"{upload_prefix}{worker}/"
        blob = self.bucket.read(f"{prefix}manifest.json")
        if blob is None:
            raise FileNotFoundError(f"worker {worker} uploaded no outputs ({prefix}manifest.json)")
        manifest = _checked_manifest(blob.data, worker)
        links = {rel: self._checked_link(rel, link, outdir)
                 for rel, link in manifest["links"].items()}
        shutil.rmtree(outdir, ignore_errors=True)
        base = Path(outdir)
        base.mkdir(parents=True, exist_ok=True)
        for rel in manifest["dirs"]:
            (base / safe_relative(rel)).mkdir(parents=True, exist_ok=True)
        for rel, mode in manifest["files"].items():
            target = base / safe_relative(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            # streamed to disk: an output may be larger than this machine's memory
            if self.bucket.download_to(f"{prefix}files/{rel}", target) is None:
                raise FileNotFoundError(f"output {rel} of worker {worker} is missing")
            target.chmod(int(mode) & 0o777)
        for rel, link in links.items():
            target = base / safe_relative(rel)
            target.parent.mkdir(parents=True, exist_ok=True)
            os.symlink(link, target)

    def _checked_link(self, rel: str, link: str, outdir: str) -> str:
        """A link the job made may point into its own tree (the run's staging root), never
        elsewhere on this machine: a forged manifest must not turn an output into, say, a
        private key that the next step would upload to the bucket."""
        where = os.path.dirname(os.path.join(outdir, safe_relative(rel)))
        resolved = os.path.normpath(os.path.join(where, link))
        root = os.path.normpath(str(self.root))
        if os.path.commonpath([resolved, root]) != root:
            raise ValueError(f"output link {rel} -> {link} points outside the run's staging "
                             "root")
        return link


def _checked_manifest(data: bytes, worker: str) -> dict:
    """An output manifest from the bucket: JSON of the expected shape, bounded in size (it is
    a message like any other: whoever can write to the bucket could have written it)."""
    manifest = messages.load(data, f"the output manifest of worker {worker}")
    ok = (isinstance(manifest, dict)
          and isinstance(manifest.get("dirs"), list)
          and all(isinstance(d, str) for d in manifest["dirs"])
          and isinstance(manifest.get("files"), dict)
          and all(isinstance(k, str) and type(v) is int for k, v in manifest["files"].items())
          and isinstance(manifest.get("links"), dict)
          and all(isinstance(k, str) and isinstance(v, str)
                  for k, v in manifest["links"].items()))
    if not ok:
        raise ValueError(f"the output manifest of worker {worker} is malformed")
    return manifest
