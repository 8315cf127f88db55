"""The job runner's zygote: one process per worker that has imported Snakemake once and forks
one job process per request, so that a short job does not pay the interpreter's start-up and
Snakemake's imports (about 1 s of CPU) every time.

The agent (worker/forked.py) starts it as ``python -m expo_executor.worker.zygote`` and talks
to it over its stdin and stdout, one JSON object a line (no pickle on the wire):

- the zygote says ``{"ready": true}`` once its imports are done;
- the agent asks ``{"chain": [...], "cwd": ..., "env": {...}, "log": ...}`` (see
  :func:`run_chain`), the zygote answers ``{"pid": N}`` or ``{"error": why}`` (then the agent
  runs that job as before, in a fresh interpreter); either may hold ``"helpers"``, the pids of
  workflow templates it started (the agent's children too, which the agent reaps), and
  ``"notes"``, lines for the agent's log.

Each job process is forked with ``CLONE_PARENT``: its parent is the agent, not the zygote. The
agent reaps it with its real exit status, kills its session on a timeout or cancel as it kills
any job's, and a zygote that dies takes no running job with it. The job process leads a
session of its own, opens its own log, sets its own environment and directory, and runs
Snakemake's command line (``snakemake.cli.main``, what ``python -m snakemake`` runs) under the
command clock, or a CWL staged job's wrapper (worker/staged_job.py), then ``os._exit`` with its
status: nothing of the zygote's state goes on.

The zygote forks only while it has no other thread (a fork copies one thread, and any lock
another held stays locked in the child): it refuses a request otherwise. It holds no job and
grows with none: its children are the agent's. It ends when the agent closes its stdin.

A Snakemake job whose workflow has a template ready (worker/workflow_template.py: a process
that has loaded that workflow once, forked from the workflow's first job) is forked from the
template instead, and does not load its workflow again (worker/loaded_workflow.py).
"""

from __future__ import annotations

import ctypes
import gc
import importlib
import io
import json
import os
import platform
import sys
import tempfile
import tokenize
from pathlib import Path
from typing import IO, Any, Callable

from expo_executor.processes.private_files import private_output
from expo_executor.worker import command_clock, staged_job
from expo_executor.worker.sibling_fork import exit_with, spawn_sibling
from expo_executor.worker.workflow_template import JobRunner, Templates

TEST_ENTRY = "expocloud-test-exit"  # a chain step that exits at once (memory tests)
# where OpenBLAS reads its thread count at load, in this order
BLAS_ENV = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")
BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads",
                "openblas_set_num_threads64_", "openblas_set_num_threads")
_blas_setter: Callable[[int], Any] | None = None  # found once, after preload


# What a job's snakemake imports, found by diffing ``sys.modules`` around a forked job:
# smart_open alone (imported by the source cache to parse the Snakefile's path) was a seventh
# of a trivial job's CPU before it was preloaded.
PRELOADED = ("snakemake.cli", "snakemake.api", "snakemake.workflow", "snakemake.dag",
             "snakemake.parser", "snakemake.executors.local", "snakemake.storage",
             "smart_open", "graphlib", "getpass", "termios", "ftplib",
             "expo_executor.protocol.gcs_bucket")


def preload() -> None:
    """What every job's snakemake imports and looks up at start-up, done once here.

    Building Snakemake's argument parser instantiates its plugin registries, which import
    every installed plugin: after the imports themselves, most of a short job's start-up.
    Tokenizing once compiles the tokenizer's pattern (cached by ``tokenize``): each job's
    parse of its Snakefile would compile it again, about a twentieth of a trivial job's CPU.
    ``platform.platform()``, which every job's "Workflow has started" record asks for, runs
    ``uname -p`` in a process of its own the first time it is called (then cached): here,
    once per worker."""
    for module in PRELOADED:
        try:
            importlib.import_module(module)
        except ImportError:  # an optional one (a platform's termios, a plugin's extra)
            pass
    try:  # a staged job's bucket on GCE
        importlib.import_module("google.cloud.storage")
    except ImportError:
        pass
    from snakemake.cli import get_argument_parser

    get_argument_parser()
    for _ in tokenize.generate_tokens(io.StringIO("rule a:\n    shell: 'x'\n").readline):
        pass
    platform.platform()


def quiet_blas() -> None:
    """Snakemake's report plugins import numpy, whose OpenBLAS starts a thread pool when it
    loads: the zygote would have threads, and must not fork then. It loads with one thread
    here; each job process sets the count a fresh process would have taken from the job's
    environment (:func:`restore_blas`)."""
    os.environ[BLAS_ENV[0]] = "1"


def find_blas_setter() -> None:
    """OpenBLAS's ``set_num_threads``, when a loaded library has it (numpy's names it its way)."""
    global _blas_setter
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = {line.split()[-1] for line in maps
                     if "openblas" in line.lower() and ".so" in line}
    except OSError:
        return
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for name in BLAS_SETTERS:
            if hasattr(lib, name):
                _blas_setter = getattr(lib, name)
                return


def restore_blas(env: dict[str, str]) -> None:
    """In a job process: OpenBLAS's threads as many as it would have started in a fresh one."""
    if _blas_setter is None:
        return
    cpus = os.cpu_count() or 1
    wanted = cpus
    for name in BLAS_ENV:
        try:
            count = int(env.get(name, ""))
        except ValueError:
            continue
        if count > 0:
            wanted = min(count, cpus)
            break
    if wanted > 1:
        _blas_setter(wanted)


def spawn(request: dict[str, Any], channel: tuple[int, int],
          templates: Templates) -> dict[str, Any]:
    """Fork the job process of one request, from the loaded workflow of a template when one
    is ready for it (worker/workflow_template.py), else from here; the answer for the agent
    (with the pids of templates started and any line for the agent's log)."""
    reply = templates.spawn(request)
    if reply is None:
        reply = spawn_sibling(JOB, request, (*channel, *templates.fds()))
    return {**reply, **templates.news()}


def enter_job(request: dict[str, Any]) -> None:
    """A forked job's first step: its own session, stdio, directory and environment, and the
    word its shell's announcement would say (its command is clocked: a first job's load of its
    workflow, which comes next, is start-up, not the rule's body); its chain of commands comes
    after that (:func:`run_job_chain`)."""
    os.setsid()
    _redirect(request["log"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # found again from the job's own TMPDIR
    os.chdir(request["cwd"])
    command_clock.stamp(os.environ.get(command_clock.STAMPS_ENV), hooked=True)


def run_job_chain(chain: list[list[str]]) -> int:
    """A forked job's second step, once it has entered: OpenBLAS's threads as the job's own
    process would have them (started only now: a first job forks its workflow's template
    before, which it may not with other threads), then its chain of commands."""
    restore_blas(os.environ)
    return run_chain(chain)


def _redirect(log: str) -> None:
    """stdin from /dev/null, stdout and stderr to the job's log (created 0600 or emptied), as
    the agent's ``Popen`` of a job does."""
    out = private_output(Path(log))
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)


def run_chain(chain: list[list[str]]) -> int:
    """Steps joined as by the shell's ``&&``: ``["cd", DIR]``, ``["snakemake", ARGS...]`` (a
    plain snakemake, e.g. Snakemake's ``--deploy-sources`` precommand, in a child of its own)
    and, last, ``["clock", ARGS...]``: Snakemake under the command clock, in this process;
    or ``["staged", SPEC]`` alone: a staged job (worker/staged_job.py)."""
    path = os.environ.get(command_clock.STAMPS_ENV)
    for step in chain:
        kind, args = step[0], step[1:]
        if kind == "cd":
            os.chdir(args[0])
            continue
        if kind == "staged":
            return staged_job.main(args)
        if kind == TEST_ENTRY:
            return int(args[0]) if args else 0
        if kind == "snakemake" and step is not chain[-1]:
            code = _in_child(args)
        else:
            if kind == "clock":
                command_clock.hook_job(path)
            code = _snakemake(args)
        if code != 0:
            return code
    return 0


def _in_child(args: list[str]) -> int:
    """A snakemake run before the job's own, in a process of the job's session."""
    pid = os.fork()
    if pid == 0:
        exit_with(_snakemake, args)
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return 128 - code if code < 0 else code  # killed by a signal: the shell's status


def _snakemake(args: list[str]) -> int:
    """Snakemake's command line, as ``python -m snakemake ARGS`` runs it; its exit status."""
    from snakemake.cli import main

    as_main(args)
    try:
        main(args)
    except SystemExit as exc:
        return _exit_code(exc.code)
    return 0


def as_main(args: list[str]) -> None:
    """``sys.argv`` and ``sys.path`` as ``python -m snakemake ARGS`` leaves them."""
    sys.argv = [_main_path(), *args]  # as runpy leaves it for ``-m snakemake``
    sys.path[0] = os.getcwd()  # what ``python -m`` puts first


def _main_path() -> str:
    import snakemake  # not snakemake.__main__: importing that runs Snakemake

    return os.path.join(os.path.dirname(snakemake.__file__), "__main__.py")


JOB = JobRunner(enter_job, run_job_chain, as_main)  # a job's life in the process forked for it


def _exit_code(code: object) -> int:
    """``sys.exit``'s argument as the interpreter turns it into a status."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def serve(requests: IO[bytes], replies: IO[bytes]) -> None:
    """Answer requests until the agent closes its end."""
    channel = (requests.fileno(), replies.fileno())
    templates = Templates(channel, JOB)
    _say(replies, {"ready": True})
    for line in requests:
        try:
            request = json.loads(line)
        except ValueError as exc:
            _say(replies, {"error": f"not a request: {exc}"})
            continue
        _say(replies, spawn(request, channel, templates))


def _say(replies: IO[bytes], message: dict[str, Any]) -> None:
    replies.write(json.dumps(message).encode() + b"\n")
    replies.flush()


def main() -> None:
    # The channel moves off fds 0 and 1: those are what a job process's stdio replaces.
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    os.close(null)
    sys.stdin = open(0, closefd=False)
    quiet_blas()
    preload()
    find_blas_setter()
    # Out of the collector's sight: a job process's collections would otherwise walk (and so
    # copy, page by page) every object the zygote loaded: about 7 ms of a trivial job's 0.11 s.
    gc.freeze()
    try:
        serve(requests, replies)
    except BrokenPipeError:  # the agent has gone (a worker stopping as its zygote started)
        os._exit(0)  # nothing to flush to it


if __name__ == "__main__":
    main()
