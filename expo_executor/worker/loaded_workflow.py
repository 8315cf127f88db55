"""A Snakemake workflow loaded once by a job runner's template process, and adopted by each job
forked from it (the process side: worker/workflow_template.py).

A job's own ``snakemake --mode remote`` process parses its arguments, loads the workflow
(compiles the Snakefile, runs its top-level code, registers its rules), then builds a one-job
DAG and runs the job. Only the last two depend on the job: Snakemake loads the workflow before
it is given the DAG, execution and group settings (``DAGApi.__post_init__`` sets them after
``WorkflowApi._workflow`` has loaded it), and of the job's own arguments (:data:`JOB_ONLY`) only
``--unneeded-temp-files`` reaches the settings the load sees, which read it only in the DAG.

So :func:`load` runs Snakemake's command line for a first job until its workflow is loaded and
keeps that workflow; :func:`install` then makes each job forked from this process run
Snakemake's command line unchanged, except that a job whose arguments equal the loaded ones in
everything but :data:`JOB_ONLY` adopts the loaded workflow instead of loading it again
(:func:`adopt`); any other job loads it itself, after one line in its log. The fork gives each
job its own copy of everything: nothing a job changes reaches the template or another job.

What the load read (the Snakefile, its includes and configuration, a module it imported, a
profile, a directory it listed) is recorded with :mod:`sys`'s audit hook and checked before
each fork (:func:`stale`): a changed file means a new source version, loaded afresh.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import stat
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable

from expo_executor.worker.job_arguments import Spare, reparse, split

# Snakemake's argument names that say which job runs, not what the workflow is: they reach only
# the DAG, execution and group settings (see the module), or --unneeded-temp-files
JOB_ONLY = frozenset({"target_jobs", "allowed_rules", "local_groupid", "attempt",
                      "force_use_threads", "unneeded_temp_files", "wait_for_files"})
# the WorkflowApi's settings the loaded workflow was made with, adopted with it
SETTINGS = ("config_settings", "resource_settings", "storage_settings", "workflow_settings",
            "deployment_settings", "storage_provider_settings")
# what a load reads that is not the workflow's: the Python installation, the kernel's files
NOT_WATCHED = tuple(p for p in {sys.prefix, sys.base_prefix, sys.exec_prefix, "/proc", "/sys",
                                "/dev"} if p != os.sep)
READ_ONLY_MODES = set("rbt")
MAX_DEPTH = 6  # how deep an argument's objects are compared (a cycle ends there)


class LoadFailed(Exception):
    """Snakemake did not load the workflow: its jobs load it themselves."""


class _Captured(BaseException):
    """Unwinds Snakemake's command line once the workflow is loaded (BaseException: Snakemake
    catches every Exception there and prints it)."""

    def __init__(self, workflow_api: Any) -> None:
        super().__init__()
        self.workflow_api = workflow_api


@dataclass(frozen=True)
class Watched:
    """A file or directory the load read, as it was then."""

    path: str
    signature: tuple[int, int, int]


@dataclass
class Loaded:
    """The workflow a template loaded, with what it takes to tell whether a job may adopt it
    (``key``: its arguments but the job's own) and whether it is still current."""

    key: dict[str, Any]
    workflow: Any  # snakemake.workflow.Workflow
    argv: list[str] = field(default_factory=list)  # the first job's Snakemake arguments
    watched: list[Watched] = field(default_factory=list)


def key_of(args: argparse.Namespace) -> dict[str, Any]:
    """What of Snakemake's parsed arguments makes the workflow: all but :data:`JOB_ONLY`, as
    values (:func:`canonical`), taken before Snakemake's command line changes them."""
    return {k: canonical(v) for k, v in vars(args).items() if k not in JOB_ONLY}


def canonical(value: Any, depth: int = 0) -> Any:
    """A parsed argument as plain, comparable values: equal when the arguments are. An object
    compares by its type and attributes (argparse's values include Snakemake's own classes,
    which have no equality, and ``dataclasses.MISSING``); anything else by its repr, which
    for an object of no better kind holds its identity: never equal, so never adopted."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return value
    if value is dataclasses.MISSING:
        return ("missing",)
    kind = type(value).__qualname__
    if isinstance(value, enum.Enum):
        return (kind, value.name)
    if isinstance(value, os.PathLike):
        return (kind, os.fspath(value))
    if isinstance(value, (list, tuple)):
        return (kind, tuple(canonical(v, depth + 1) for v in value))
    if isinstance(value, (set, frozenset)):
        return (kind, tuple(sorted(repr(canonical(v, depth + 1)) for v in value)))
    if isinstance(value, dict):
        return (kind, tuple(sorted((repr(canonical(k, depth + 1)), canonical(v, depth + 1))
                                   for k, v in value.items())))
    if hasattr(value, "__dict__") and depth < MAX_DEPTH:
        return (kind, canonical(vars(value), depth + 1))
    return (kind, repr(value))


def differences(key: dict[str, Any], loaded: dict[str, Any]) -> list[str]:
    """The arguments (``--`` names) in which two keys differ."""
    names = sorted(k for k in key.keys() | loaded.keys() if key.get(k) != loaded.get(k))
    return ["--" + name.replace("_", "-") for name in names]


def load(argv: list[str]) -> Loaded:
    """Run Snakemake's command line for ``argv`` until its workflow is loaded; raises
    LoadFailed when it ends otherwise (bad arguments, a broken Snakefile: the job's own load
    will say so in its log)."""
    from snakemake import api, cli

    reads = _Reads()
    sys.addaudithook(reads.hook)
    reads.on = True
    original = api.WorkflowApi._workflow

    def capture(workflow_api: Any) -> Any:
        original.fget(workflow_api)  # Snakemake's own load and check
        raise _Captured(workflow_api)

    api.WorkflowApi._workflow = property(capture)
    try:
        parser, args = cli.parse_args(argv)
        key = key_of(args)
        cli.args_to_api(args, parser)
    except _Captured as captured:
        workflow = captured.workflow_api._workflow_store
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - any of Snakemake's own errors
        raise LoadFailed(f"Snakemake did not load the workflow ({type(exc).__name__}: "
                         f"{exc})") from None
    else:
        raise LoadFailed("Snakemake ended before loading the workflow")
    finally:
        reads.on = False
        api.WorkflowApi._workflow = original
    cache = workflow._sourcecache.runtime_cache
    if cache is not None:  # no job forked from here may remove it as it exits: :func:`release`
        cache._finalizer.detach()
    return Loaded(key, workflow, list(argv), reads.watched(_own_paths(workflow)))


class _Reads:
    """The paths an audit hook saw opened for reading or listed while ``on``."""

    def __init__(self) -> None:
        self.on = False
        self.paths: dict[str, None] = {}

    def hook(self, event: str, args: tuple) -> None:
        if not self.on:
            return
        if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)):
            mode, flags = args[1], args[2]
            reading = set(mode) <= READ_ONLY_MODES if isinstance(mode, str) else \
                not (flags or 0) & (os.O_WRONLY | os.O_RDWR)
            if reading:
                self.paths[os.fsdecode(args[0])] = None
        elif event in ("os.listdir", "os.scandir") and isinstance(args[0], (str, bytes,
                                                                            os.PathLike)):
            self.paths[os.fsdecode(args[0])] = None

    def watched(self, own: tuple[str, ...]) -> list[Watched]:
        found = []
        for raw in self.paths:
            path = os.path.abspath(raw)
            if _under(path, NOT_WATCHED + own):
                continue
            sig = signature(path)
            if sig is not None:
                found.append(Watched(path, sig))
        return found


def _own_paths(workflow: Any) -> tuple[str, ...]:
    """Snakemake's own caches and scratch, which it writes itself as it loads."""
    paths = [str(workflow.source_cache_path), workflow._snakemake_tmp_dir.name]
    return tuple(os.path.abspath(p) for p in paths)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root.rstrip(os.sep) + os.sep) for root in roots)


def signature(path: str) -> tuple[int, int, int] | None:
    """What changes when a file or directory is rewritten, replaced or listed anew."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
        return None
    return st.st_mtime_ns, st.st_size, st.st_ino


def stale(loaded: Loaded) -> str | None:
    """Why the loaded workflow is no longer what a job would load (a file it read changed),
    or None."""
    for item in loaded.watched:
        if signature(item.path) != item.signature:
            return f"{item.path} changed"
    return None


def install(loaded: Loaded, say: Callable[[str], None]) -> None:
    """In the template, before it forks any job: each job's Snakemake adopts ``loaded`` when
    its arguments allow (``say``: the one line a job that cannot writes to its log). A job
    whose words are the template's but its own options takes its arguments from a parse made
    here (worker/job_arguments.py); any other is parsed whole and compared by value."""
    from snakemake import api, cli

    parse_args, original = cli.parse_args, api.WorkflowApi._workflow
    state: dict[str, bool] = {"match": False}
    spare = _spare(parse_args, loaded.argv)

    def parsed(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace]:
        if spare:
            kept = spare.pop()
            args = reparse(kept, argv, JOB_ONLY)
            if args is not None:
                state["match"] = True
                return kept.parser, args
        parser, args = parse_args(argv)
        try:
            differ = differences(key_of(args), loaded.key)
        except Exception as exc:  # noqa: BLE001 - an argument that cannot be copied: load it
            differ = [f"({type(exc).__name__}: {exc})"]
        state["match"] = not differ
        if differ:
            say(f"expocloud: this job's Snakemake arguments differ from the loaded workflow's "
                f"({', '.join(differ[:3])}): it loads the workflow itself")
        return parser, args

    def workflow(workflow_api: Any) -> Any:
        if workflow_api._workflow_store is None and state.pop("match", False):
            adopt(workflow_api, loaded.workflow)
        return original.fget(workflow_api)

    cli.parse_args = parsed
    api.WorkflowApi._workflow = property(workflow)
    _parser_built(cli)


def _spare(parse_args: Callable[..., Any], argv: list[str]) -> list[Spare]:
    """The template's own parse, for its forks (none when its words cannot be split)."""
    try:
        parser, args = parse_args(argv)
    except (Exception, SystemExit):  # noqa: BLE001 - then every job parses its own
        return []
    parts = split(argv, parser, JOB_ONLY)
    return [Spare(parser, args, parts[1])] if parts is not None else []


def _parser_built(cli: Any) -> None:
    """Snakemake's argument parser, built here once for every job forked from this process
    (building it, which registers every plugin's arguments, was a fifth of a trivial job's
    CPU). Each fork uses its copy once, for its first parse; a parser for profiles is built
    as before. It is built with the jobs' environment (this process has it), which some of
    its defaults read."""
    get_argument_parser = cli.get_argument_parser
    built = [get_argument_parser()]

    def prebuilt(profiles: Any = None) -> Any:
        if profiles is None and built:
            return built.pop()
        return get_argument_parser(profiles=profiles)

    cli.get_argument_parser = prebuilt


def adopt(workflow_api: Any, workflow: Any) -> None:
    """Make ``workflow`` (loaded with arguments equal to this job's but its own) the one
    ``workflow_api`` would have loaded: the same objects shared as after Snakemake's own load
    (its settings, the command line's output settings and logger), the job's
    ``--unneeded-temp-files``, and what a process holds of its own (scratch directories, the
    async runners, the start time, the Snakefile's ``workdir:``)."""
    workflow.storage_settings.unneeded_temp_files = \
        workflow_api.storage_settings.unneeded_temp_files
    for name in SETTINGS:
        setattr(workflow_api, name, getattr(workflow, name))
    workflow.output_settings = workflow_api.snakemake_api.output_settings
    workflow.logger_manager = workflow_api.snakemake_api.logger_manager
    _own_scratch(workflow)
    if workflow._workdir_handler is not None:  # the Snakefile's workdir: as its load did
        workflow._workdir_handler.change_to()
    workflow_api._workflow_store = workflow


def _own_scratch(workflow: Any) -> None:
    """What ``Workflow.__post_init__`` makes for its process: the template's are the
    template's (torn down as its command line ended, or removed when it ends)."""
    workflow._snakemake_tmp_dir = tempfile.TemporaryDirectory(prefix="snakemake")
    workflow._async_runners = {}
    workflow._async_executor = ThreadPoolExecutor()
    workflow._async_lock = threading.Lock()
    workflow.start_time = datetime.now()
    cache = workflow._sourcecache
    if cache.runtime_cache is not None:  # the template's stays the template's (see load)
        cache.runtime_cache = tempfile.TemporaryDirectory(
            dir=Path(cache.runtime_cache.name).parent, ignore_cleanup_errors=True)


def release(loaded: Loaded) -> None:
    """In the template as it ends: remove its source cache's scratch."""
    cache = loaded.workflow._sourcecache
    if cache.runtime_cache is not None:
        cache.runtime_cache.cleanup()
