"""A fully evaluated command, run on a worker with its files staged: CWL jobs, without cwltool.

The worker starts this module (``python -m expo_executor.worker.staged_job SPEC``) in the job's own
session. It lays out the job's directories under its own disk, fetches the input files from
the bucket, runs the command with the job's exact environment and standard streams, kills the
command's process group at its time limit, uploads the output directory, and leaves a verdict
(``ok``, ``failed``, ``timeout``) next to the spec for the worker to report.

The runner evaluated everything (argv, environment, paths) against its own job root; here that
root is replaced by ours, so the command never sees a path of the runner's machine. Without
``root`` (a shared file system) nothing is moved: the command runs where the runner put it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from expo_executor.core.records import AttemptEnd
from expo_executor.protocol.bucket import Bucket, PreconditionFailed, open_bucket
from expo_executor.worker import direct_staged
from expo_executor.worker.command_clock import STAMPS_ENV, stamp
from expo_executor.worker.failure_reason import worker_fault
from expo_executor.worker.staged_checks import file_sha256, one_line, safe_relative

GRACE_S = 2.0  # seconds between SIGTERM and SIGKILL at the time limit
EXIT_TIMEOUT = 124  # our own exit code when the command was killed at its limit
CWL_OUTPUT = "cwl.output.json"  # a tool's own account of its outputs, with paths in it
# The spec's name in the job's own directory, which holds all the job leaves on this disk (its
# verdict, its files under ``root``) and goes with it when the job ends
STAGED_SPEC = "job.json"


class Rebase:
    """Maps the runner's job root to ours in every string the command will see."""

    def __init__(self, root: str | None, local: Path) -> None:
        self.root = root.rstrip("/") if root else None
        self.local = str(local)

    def __call__(self, text: str) -> str:
        if self.root is None:
            return text
        return text.replace(self.root, self.local)

    def back(self, text: str) -> str:
        """Ours to the runner's: a link the command made must still resolve over there."""
        if self.root is None:
            return text
        return text.replace(self.local, self.root)


def materialise(bucket: Bucket, spec: dict, base: Path) -> int:
    """Create the job's directories and fetch its input files (content-addressed objects);
    returns the bytes read from the bucket (their egress, when the VM is in another region).
    Each file streams to disk (``Bucket.download_to``: a genome or a BAM may be larger than
    the VM's memory) under a temporary name, and takes its own only once its hash checks."""
    moved = 0
    for rel in spec.get("dirs", []):
        (base / safe_relative(rel)).mkdir(parents=True, exist_ok=True)
    for rel, obj, mode in spec.get("inputs", []):
        target = base / safe_relative(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        landing = target.with_name(f".{target.name}.unchecked")
        size = bucket.download_to(obj, landing)
        if size is None:
            raise FileNotFoundError(f"staged input {obj} is missing from the bucket")
        # inputs are content-addressed and their names come signed in the assignment: a
        # bucket writer who replaced one is caught here
        digest = obj.rsplit("/", 1)[-1]
        if len(digest) == 64 and file_sha256(landing) != digest:
            landing.unlink()
            raise ValueError(f"staged input {obj} does not match its content hash")
        landing.chmod(int(mode) & 0o777)
        os.replace(landing, target)
        moved += size
    return moved


def upload_outputs(bucket: Bucket, outdir: Path, prefix: str, rebase: Rebase) -> int:
    """Every file, directory and link under ``outdir``; the manifest goes last, so a manifest
    that exists names only objects that exist. Returns the bytes written to the bucket. Files
    stream from disk (``Bucket.upload_from``), except the tool's own small ``cwl.output.json``,
    whose paths are rewritten on the way."""
    moved = 0
    files: dict[str, int] = {}
    dirs: list[str] = []
    links: dict[str, str] = {}
    for current, subdirs, names in os.walk(outdir):
        rel_dir = os.path.relpath(current, outdir)
        for name in subdirs + names:
            path = os.path.join(current, name)
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if os.path.islink(path):
                links[rel] = rebase.back(os.readlink(path))
            elif os.path.isdir(path):
                dirs.append(rel)
            elif os.path.isfile(path):
                moved += _upload_file(bucket, path, f"{prefix}files/{rel}", rel, rebase)
                files[rel] = os.stat(path).st_mode & 0o777
    manifest = json.dumps({"files": files, "dirs": dirs, "links": links}).encode()
    try:
        bucket.write(f"{prefix}manifest.json", manifest, if_generation_match=0)
    except PreconditionFailed:
        pass  # a restarted agent: the first upload stands
    return moved + len(manifest)


def _upload_file(bucket: Bucket, path: str, key: str, rel: str, rebase: Rebase) -> int:
    """One output file into ``key``; returns the bytes written."""
    if rel == CWL_OUTPUT:  # the paths it names must be the runner's
        with open(path, "rb") as handle:
            data = rebase.back(handle.read().decode("utf-8")).encode("utf-8")
        bucket.write(key, data)
        return len(data)
    size = os.path.getsize(path)
    bucket.upload_from(key, path)
    return size


def run(spec: dict, here: Path) -> tuple[AttemptEnd, int | None, str | None]:
    """Stage, run and unstage one job; returns (outcome, exit code, reason)."""
    stage = spec["stage"]
    base = here / "root"
    if stage.get("direct"):  # a Snakemake shell job's line and its storage files
        return direct_staged.run(spec, base, lambda argv, cwd, env: _run_command(
            argv, cwd, env, {}, stage.get("timelimit")))
    rebase = Rebase(stage.get("root"), base)
    bucket = open_bucket(spec["bucket"]) if stage.get("root") else None
    if bucket is not None:
        try:
            # stamped for the worker, which reports it (worker/command_clock.py)
            stamp(os.environ.get(STAMPS_ENV), down=materialise(bucket, stage, base))
        except Exception as exc:  # noqa: BLE001 - the verdict names it; the log has the trace
            return AttemptEnd.FAILED, None, f"fetching inputs from the bucket failed: {one_line(exc)}"
    # a container runtime runs in this worker's environment (as cwltool runs it in its own:
    # PATH, CONTAINERS_CONF...); the job's own variables are its --env flags
    env = dict(os.environ) if stage.get("host_env") else {}
    env.pop(STAMPS_ENV, None)  # ours, not the command's
    env.update({k: rebase(v) for k, v in spec["env"].items()})
    # the worker's own Python first, as for every job (a VM has no runner's virtualenv)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    cwd = rebase(spec["cwd"])
    argv = [rebase(a) for a in spec["argv"]]
    streams = {}
    for name, mode in (("stdin", "rb"), ("stdout", "wb"), ("stderr", "wb")):
        path = stage.get(name)
        if path:
            path = rebase(path)
            if mode == "wb":
                os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            streams[name] = open(path, mode)
    outcome, code, reason = _run_command(argv, cwd, env, streams, stage.get("timelimit"))
    if outcome in (AttemptEnd.FAILED, AttemptEnd.LOST) and code is None:
        return outcome, code, reason  # it did not start
    if outcome is AttemptEnd.SOLVED and code not in stage.get("success_codes", [0]):
        outcome = AttemptEnd.FAILED
    # a timed-out command's outputs are not uploaded: the outcome is decided, and a slow
    # upload must not turn it into a staging overrun (worker/command_clock.py)
    if bucket is not None and outcome is not AttemptEnd.TIMEOUT:
        try:
            stamp(os.environ.get(STAMPS_ENV), up=upload_outputs(
                bucket, Path(rebase(stage["outdir"])), f"{stage['upload']}{spec['worker']}/",
                rebase))
        except Exception as exc:  # noqa: BLE001 - outputs that did not arrive fail the job
            print(f"staged job: uploading outputs failed: {exc!r}", file=sys.stderr, flush=True)
            why = f"uploading outputs to the bucket failed: {one_line(exc)}"
            return AttemptEnd.FAILED, code, f"{reason}; {why}" if reason else why
    return outcome, code, reason


def _run_command(argv: list[str], cwd: str, env: dict[str, str], streams: dict,
                 limit: float | None) -> tuple[AttemptEnd, int | None, str | None]:
    """Run the command in its own process group, killed at ``limit``; its start and end are
    stamped for the worker, whose deadline times the command alone (worker/command_clock.py)."""
    stamps = os.environ.get(STAMPS_ENV)
    stamp(stamps, start=time.monotonic())
    try:
        # its own process group: the limit kills the command and all it started, not us
        proc = subprocess.Popen(argv, cwd=cwd, env=env, close_fds=True, process_group=0,
                                stdin=streams.get("stdin", subprocess.DEVNULL),
                                stdout=streams.get("stdout"), stderr=streams.get("stderr"))
    except OSError as exc:
        stamp(stamps, end=time.monotonic())
        # this machine could not fork (EAGAIN, ENOMEM...): the worker's failure, which the
        # worker reports lost; a command not found or not executable is the job's
        outcome = AttemptEnd.LOST if worker_fault(exc) else AttemptEnd.FAILED
        return outcome, None, f"could not start {argv[0]!r}: {exc}"
    finally:
        for handle in streams.values():
            handle.close()
    outcome, reason = AttemptEnd.SOLVED, None
    try:
        code: int | None = proc.wait(timeout=limit if limit else None)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        code, outcome = None, AttemptEnd.TIMEOUT
        reason = f"killed at its time limit of {limit:g} s"
    stamp(stamps, end=time.monotonic())
    return outcome, code, reason


def _kill_group(proc: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue


def verdict_path(spec_path: Path) -> Path:
    return spec_path.with_suffix(".verdict.json")


def main(argv: list[str] | None = None) -> int:
    spec_path = Path((argv or sys.argv[1:])[0])
    spec = json.loads(spec_path.read_text())
    started = time.time()
    stamp(os.environ.get(STAMPS_ENV), hooked=True)  # it times its command itself, below
    if spec["stage"].get("direct"):
        # a direct job works in its directory as its own snakemake would, by the directory
        # itself, not its path: a command that moves it still finds its files there
        os.chdir(spec_path.parent)
        spec_path = Path(spec_path.name)
    try:
        outcome, code, reason = run(spec, spec_path.parent)
    except Exception as exc:  # the worker reports the reason; the log has the rest
        print(f"staged job: {exc}", file=sys.stderr, flush=True)
        outcome, code, reason = AttemptEnd.FAILED, None, f"staging failed: {exc}"
    verdict = {"outcome": outcome.value, "returncode": code, "reason": reason,
               "seconds": time.time() - started}
    try:
        verdict_path(spec_path).write_text(json.dumps(verdict))
    except OSError as exc:  # a full disk: the worker finds no verdict and says why
        print(f"staged job: cannot leave a verdict ({exc}); it was {verdict}", file=sys.stderr,
              flush=True)
        return 1
    if outcome is AttemptEnd.TIMEOUT:
        return EXIT_TIMEOUT
    if outcome is AttemptEnd.FAILED and not code:  # the command succeeded; its outputs did not
        # arrive
        return 1
    return code if code is not None else 1


if __name__ == "__main__":
    sys.exit(main())
