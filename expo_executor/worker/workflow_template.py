"""Workflow templates: a process per loaded Snakemake workflow that forks that workflow's jobs
so that none of them loads it again (worker/loaded_workflow.py says what is loaded and how a
job adopts it).

A trivial job forked from the job runner's zygote (worker/zygote.py) still spent most of its CPU
in Snakemake: parsing its arguments, compiling the Snakefile and running its top-level code,
before building its one-job DAG. The zygote keeps :class:`Templates`, one per job directory and
environment (a worker runs one workflow's jobs).

**The template is born in its workflow's first job.** The zygote forks that job as a *first
job* (:func:`first_job_process`): it takes on the job's session, log, environment and
directory, loads the workflow with the job's arguments, forks the template from itself, and
then runs as the job, adopting the workflow it loaded. So the Snakefile's top-level code runs
once for that job, in its process, before the job prepares its outputs, exactly where the job's
own ``snakemake`` would run it (and its output is in the job's log). A template that loaded
beside the job instead ran the top-level code again at a moment of its own: after the job had
removed its old outputs, code that recreates a missing file when the workflow loads (Snakemake's
test_protected_symlink_output) undid the removal, and the job failed now and then. Every job
asked for while the first one loads is forked from the zygote as before and loads itself, as a
job of any remote executor does; once the template is ready, each job is forked from it. A
template:

- is forked with ``CLONE_PARENT`` like a job (worker/sibling_fork.py), so that it and the jobs
  it forks are the agent's children; it leaves the first job's session at once (a timeout or
  cancel of that job ends its session), and the zygote tells the agent its pid
  (``"helpers"``), and the agent reaps it;
- before each fork checks that nothing the load read has changed: a changed Snakefile (a new
  source version) ends it, and the job that finds it so is the first job of another, at most
  :data:`MAX_LOADS` times per workflow;
- talks to the zygote over a socket pair, one JSON object a line: ``{"ready": true, "pid": N}``
  once forked (or the first job's ``{"failed": why}``), then for each request ``{"pid": N}``,
  ``{"error": why}`` or ``{"stale": why}`` (it ends after that one);
- ends when the zygote closes its end (or goes).

Anything that goes wrong makes the job run as before (a first job whose load fails runs its
command line whole, which says why in its log): the zygote gives the agent one line for its
log when it gives up on a workflow's template. ``EXPOCLOUD_LOADED_WORKFLOW=0`` in the worker's
environment turns templates off.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import select
import socket
import sys
from dataclasses import dataclass
from typing import Any, Callable

from expo_executor.worker.command_clock import STAMPS_ENV
from expo_executor.worker.loaded_workflow import (LoadFailed, Loaded, install, load,
                                                    release, stale)
from expo_executor.worker.sibling_fork import single_threaded, spawn_sibling

LOADED_ENV = "EXPOCLOUD_LOADED_WORKFLOW"  # "0": every job loads its workflow itself
MAX_TEMPLATES = 2  # alive at once: the oldest goes first
MAX_LOADS = 4  # per workflow: one whose files keep changing is not loaded again
ENDED = "ended"  # a template's state when its first job ended before the template was born


@dataclass(frozen=True)
class JobRunner:
    """How the zygote runs a job in the process it forked (worker/zygote.py), in two steps, so
    that a first job can load its workflow between them (:func:`first_job_process`)."""

    enter: Callable[[dict[str, Any]], None]  # the job's session, log, environment, directory
    run: Callable[[list[list[str]]], int]  # its chain of commands; its exit status
    as_main: Callable[[list[str]], None]  # sys.argv, sys.path as ``python -m snakemake``

    def __call__(self, request: dict[str, Any]) -> int:
        """A job's whole life in its forked process: its exit status."""
        self.enter(request)
        return self.run(request["chain"])


def template_key(request: dict[str, Any]) -> str | None:
    """Which template may fork the job of a zygote request: its directory (after the chain's
    ``cd`` steps) and its environment but its stamps file. None: its chain is not directory
    changes and Snakemake's own command line alone (a precommand, such as Snakemake's
    ``--deploy-sources`` on a VM, fetches the workflow within the job)."""
    chain = request.get("chain") or []
    if not chain or chain[-1][0] != "clock" or any(step[0] != "cd" for step in chain[:-1]):
        return None
    cwd = request["cwd"]
    for step in chain[:-1]:
        cwd = os.path.join(cwd, step[1])
    env = sorted((k, v) for k, v in request["env"].items() if k != STAMPS_ENV)
    return json.dumps([os.path.normpath(cwd), env])


class Template:
    """The zygote's handle of one template, from its first job's fork on."""

    def __init__(self, key: str, sock: socket.socket) -> None:
        self.key = key
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.state: bool | str | None = None  # True: ready; a string: why it failed
        self.pid: int | None = None  # known once it is ready
        self.told = False  # the agent was told its pid (it reaps the template)

    def poll(self) -> bool | str | None:
        """Whether it is ready, without waiting: None while its first job loads, ENDED when
        that job ended first (killed by its timeout or a cancel, say)."""
        if self.state is None and select.select([self.sock], [], [], 0)[0]:
            reply = self._read()
            if reply is None:
                self.state = ENDED
            elif reply.get("ready"):
                self.state, self.pid = True, int(reply["pid"])
            else:
                self.state = str(reply.get("failed"))
        return self.state

    def ask(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """Its answer to a job's request; None: it has gone."""
        try:
            self.sock.sendall(json.dumps(request).encode() + b"\n")
        except OSError:
            return None
        return self._read()

    def _read(self) -> dict[str, Any] | None:
        try:
            line = self.reader.readline()
            return json.loads(line) if line else None
        except (OSError, ValueError):
            return None

    def close(self) -> None:
        """It ends when its end of the socket closes."""
        for part in (self.reader, self.sock):
            try:
                part.close()
            except OSError:
                pass


class Templates:
    """The zygote's templates, by :func:`template_key`. ``channel``: the zygote's own
    descriptors, which no template keeps; ``runner``: a job's life in its fork."""

    def __init__(self, channel: tuple[int, ...], runner: JobRunner) -> None:
        self.channel = channel
        self.runner = runner
        self.wanted = os.environ.get(LOADED_ENV, "1") != "0"
        self.by_key: dict[str, Template] = {}
        self.loads: dict[str, int] = {}
        self.refused: set[str] = set()
        self.helpers: list[int] = []
        self.notes: list[str] = []

    def spawn(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The job forked by its workflow's ready template, or forked as the first job of a
        new one; None: fork it as before (its workflow has no template, or one still in its
        first job's load)."""
        key = template_key(request) if self.wanted else None
        if key is None or key in self.refused:
            return None
        template = self.by_key.get(key)
        if template is None:
            return self._first_job(key, request)
        state = template.poll()
        if state is None:
            return None
        if state == ENDED:  # not the workflow's fault: this job loads it again
            self._drop(template, None)
            return self._first_job(key, request)
        if state is not True:
            self._drop(template, f"not using a loaded workflow (could not load it: {state}): "
                       "its jobs load the workflow themselves", refuse=True)
            return None
        self._tell_pid(template)
        reply = template.ask(request)
        if reply is None or "stale" in reply:
            self._drop(template, f"loading the workflow again: {reply['stale']}" if reply
                       else "a workflow template ended; loading the workflow again")
            return self._first_job(key, request)  # the new version, loaded by this job
        return reply if "pid" in reply else None

    def fds(self) -> list[int]:
        """The templates' sockets: a job forked from the zygote closes them."""
        return [t.sock.fileno() for t in self.by_key.values()]

    def news(self) -> dict[str, list]:
        """What the agent must learn with this reply: templates started, lines to log."""
        news = {name: items for name, items in (("helpers", self.helpers),
                                                ("notes", self.notes)) if items}
        self.helpers, self.notes = [], []
        return news

    def _first_job(self, key: str, request: dict[str, Any]) -> dict[str, Any] | None:
        """Fork the job as its workflow's first job, which loads the workflow and forks the
        template from itself; None when it may not (then it is forked as before)."""
        self.loads[key] = self.loads.get(key, 0) + 1
        if self.loads[key] > MAX_LOADS:
            self.refused.add(key)
            self.notes.append(f"its workflow was loaded for a template {MAX_LOADS} times (its "
                              "files kept changing): its jobs load the workflow themselves "
                              "from now on")
            return None
        while len(self.by_key) >= MAX_TEMPLATES:
            self._drop(next(iter(self.by_key.values())), None)
        ours, theirs = socket.socketpair()
        body = functools.partial(first_job_process, theirs, runner=self.runner)
        inherited = (*self.channel, *self.fds(), ours.fileno())
        reply = spawn_sibling(body, request, inherited)
        theirs.close()
        if "pid" not in reply:
            ours.close()
            self.notes.append(f"could not start a workflow template ({reply.get('error')}): "
                              "jobs load the workflow themselves")
            self.refused.add(key)
            return None
        self.by_key[key] = Template(key, ours)
        return reply

    def _tell_pid(self, template: Template) -> None:
        """The agent reaps a template it has been told of (once), as its child."""
        if template.poll() is True and template.pid is not None and not template.told:
            self.helpers.append(template.pid)
            template.told = True

    def _drop(self, template: Template, note: str | None, refuse: bool = False) -> None:
        self._tell_pid(template)
        template.close()
        del self.by_key[template.key]
        if refuse:
            self.refused.add(template.key)
        if note:
            self.notes.append(note)


def first_job_process(sock: socket.socket, request: dict[str, Any], *,
                      runner: JobRunner) -> int:
    """A workflow's first job: it loads the workflow as the job, forks the template from
    itself, then runs as the job with the workflow it loaded; its exit status."""
    runner.enter(request)  # its session, log, environment and directory, as any job's
    home = os.getcwd()
    chain = request["chain"]
    for step in chain[:-1]:
        os.chdir(step[1])
    args = chain[-1][1:]
    runner.as_main(args)
    try:
        loaded = load(args)  # its output is the job's: the job's log
    except LoadFailed as exc:
        _say(sock, {"failed": str(exc)})
        sock.close()
        os.chdir(home)
        return runner.run(chain)  # its own command line says what went wrong
    born = spawn_sibling(functools.partial(template_process, sock, runner=runner), loaded, ())
    if "pid" not in born:
        _say(sock, {"failed": born.get("error")})
    sock.close()  # the template's, from now on
    install(loaded, _to_job_log)
    os.chdir(home)
    return runner.run(chain)


def template_process(sock: socket.socket, loaded: Loaded, *, runner: JobRunner) -> int:
    """A template's life, forked from its first job once that job loaded the workflow: leave
    the job (its session, its log, its stamps), then fork jobs."""
    os.setsid()
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.environ.pop(STAMPS_ENV, None)
    try:
        install(loaded, _to_job_log)
        gc.collect()
        gc.freeze()  # as in the zygote: a job's collections do not walk (and copy) the load
        if not single_threaded():
            _say(sock, {"failed": "loading the workflow started threads: forking is not safe"})
            return 0
        _say(sock, {"ready": True, "pid": os.getpid()})
        _serve(sock, loaded, runner)
    finally:
        release(loaded)
    return 0


def _say(sock: socket.socket, message: dict[str, Any]) -> None:
    sock.sendall(json.dumps(message).encode() + b"\n")


def _serve(sock: socket.socket, loaded: Loaded, runner: JobRunner) -> None:
    """Fork a job per request, while what the workflow's load read is unchanged."""
    for line in sock.makefile("rb"):
        try:
            request = json.loads(line)
        except ValueError as exc:
            reply: dict[str, Any] = {"error": f"not a request: {exc}"}
        else:
            why = stale(loaded)
            if why is not None:
                _say(sock, {"stale": why})
                return
            reply = spawn_sibling(runner, request, (sock.fileno(),))
        _say(sock, reply)


def _to_job_log(line: str) -> None:
    """A line for the log of the job running in this process."""
    print(line, file=sys.stderr, flush=True)
