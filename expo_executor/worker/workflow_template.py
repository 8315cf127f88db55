"""Workflow templates: a process per loaded Snakemake workflow, forked by the job runner's
zygote (worker/zygote.py), that forks that workflow's jobs so that none of them loads it again
(worker/loaded_workflow.py says what is loaded and how a job adopts it).

A trivial job forked from the zygote still spent most of its CPU in Snakemake: parsing its
arguments, compiling the Snakefile and running its top-level code, before building its one-job
DAG. The zygote keeps :class:`Templates`, one per job directory and environment (a worker runs
one workflow's jobs). The first job of a workflow starts its template and is forked from the
zygote as before, as is every job while the template loads; once it is ready, each job is
forked from it. A template:

- is forked with ``CLONE_PARENT`` like a job (worker/sibling_fork.py), so that the jobs it
  forks are the agent's children; the zygote tells the agent its pid (``"helpers"``), and the
  agent reaps it;
- loads the workflow with the first job's arguments, its output going nowhere (a job's own
  load, should it need one, reports in the job's log);
- before each fork checks that nothing the load read has changed: a changed Snakefile (a new
  source version) ends it, and the zygote starts another, at most :data:`MAX_LOADS` times per
  workflow;
- talks to the zygote over a socket pair, one JSON object a line: ``{"ready": true}`` or
  ``{"failed": why}`` once loaded, then for each request ``{"pid": N}``, ``{"error": why}`` or
  ``{"stale": why}`` (it ends after that one);
- ends when the zygote closes its end (or goes).

Anything that goes wrong makes the job run as before, forked from the zygote: the zygote
gives the agent one line for its log when it gives up on a workflow's template.
``EXPOCLOUD_LOADED_WORKFLOW=0`` in the worker's environment turns templates off.
"""

from __future__ import annotations

import functools
import gc
import json
import os
import select
import socket
import sys
import tempfile
from typing import Any, Callable

from expo_executor.worker.command_clock import STAMPS_ENV
from expo_executor.worker.loaded_workflow import LoadFailed, install, load, release, stale
from expo_executor.worker.sibling_fork import single_threaded, spawn_sibling

LOADED_ENV = "EXPOCLOUD_LOADED_WORKFLOW"  # "0": every job loads its workflow itself
MAX_TEMPLATES = 2  # alive at once: the oldest goes first
MAX_LOADS = 4  # per workflow: one whose files keep changing is not loaded again

JobBody = Callable[[dict[str, Any]], int]


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
    """The zygote's handle of one template process."""

    def __init__(self, key: str, pid: int, sock: socket.socket) -> None:
        self.key = key
        self.pid = pid
        self.sock = sock
        self.reader = sock.makefile("rb")
        self.state: bool | str | None = None  # True: ready; a string: why it failed

    def poll(self) -> bool | str | None:
        """Whether it is ready, without waiting: None while it loads."""
        if self.state is None and select.select([self.sock], [], [], 0)[0]:
            reply = self._read() or {"failed": "it ended while loading"}
            self.state = True if reply.get("ready") else str(reply.get("failed"))
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
    descriptors, which no template keeps; ``job_process``: a job's life in its fork;
    ``as_main``: ``sys.argv`` and ``sys.path`` as ``python -m snakemake ARGS`` has them."""

    def __init__(self, channel: tuple[int, ...], job_process: JobBody,
                 as_main: Callable[[list[str]], None]) -> None:
        self.channel = channel
        self.job_process = job_process
        self.as_main = as_main
        self.wanted = os.environ.get(LOADED_ENV, "1") != "0"
        self.by_key: dict[str, Template] = {}
        self.loads: dict[str, int] = {}
        self.refused: set[str] = set()
        self.helpers: list[int] = []
        self.notes: list[str] = []

    def spawn(self, request: dict[str, Any]) -> dict[str, Any] | None:
        """The job forked by its workflow's ready template; None: fork it as before (and
        start the template if there is none)."""
        key = template_key(request) if self.wanted else None
        if key is None or key in self.refused:
            return None
        template = self.by_key.get(key)
        if template is None:
            self._start(key, request)
            return None
        state = template.poll()
        if state is None:
            return None
        if state is not True:
            self._drop(template, f"not using a loaded workflow (could not load it: {state}): "
                       "its jobs load the workflow themselves", refuse=True)
            return None
        reply = template.ask(request)
        if reply is None or "stale" in reply:
            self._drop(template, f"loading the workflow again: {reply['stale']}" if reply
                       else "a workflow template ended; loading the workflow again")
            self._start(key, request)  # the new version, for the jobs after this one
            return None
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

    def _start(self, key: str, request: dict[str, Any]) -> None:
        self.loads[key] = self.loads.get(key, 0) + 1
        if self.loads[key] > MAX_LOADS:
            self.refused.add(key)
            self.notes.append(f"its workflow's files changed {MAX_LOADS} times: its jobs load "
                              "the workflow themselves from now on")
            return
        while len(self.by_key) >= MAX_TEMPLATES:
            self._drop(next(iter(self.by_key.values())), None)
        ours, theirs = socket.socketpair()
        body = functools.partial(template_process, theirs, job_process=self.job_process,
                                 as_main=self.as_main)
        inherited = (*self.channel, *self.fds(), ours.fileno())
        reply = spawn_sibling(body, request, inherited)
        theirs.close()
        if "pid" not in reply:
            ours.close()
            self.notes.append(f"could not start a workflow template ({reply.get('error')}): "
                              "jobs load the workflow themselves")
            self.refused.add(key)
            return
        self.by_key[key] = Template(key, reply["pid"], ours)
        self.helpers.append(reply["pid"])

    def _drop(self, template: Template, note: str | None, refuse: bool = False) -> None:
        template.close()
        del self.by_key[template.key]
        if refuse:
            self.refused.add(template.key)
        if note:
            self.notes.append(note)


def template_process(sock: socket.socket, request: dict[str, Any], *, job_process: JobBody,
                     as_main: Callable[[list[str]], None]) -> int:
    """A template's life: load the workflow of the first job's request, then fork jobs."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    os.environ.clear()
    os.environ.update({k: v for k, v in request["env"].items() if k != STAMPS_ENV})
    tempfile.tempdir = None
    os.chdir(request["cwd"])
    chain = request["chain"]
    for step in chain[:-1]:
        os.chdir(step[1])
    args = chain[-1][1:]
    as_main(args)

    def say(message: dict[str, Any]) -> None:
        sock.sendall(json.dumps(message).encode() + b"\n")

    try:
        loaded = load(args)
    except LoadFailed as exc:
        say({"failed": str(exc)})
        return 0
    try:
        install(loaded, _to_job_log)
        gc.collect()
        gc.freeze()  # as in the zygote: a job's collections do not walk (and copy) the load
        if not single_threaded():
            say({"failed": "loading the workflow started threads: forking is not safe"})
            return 0
        say({"ready": True})
        _serve(sock, loaded, job_process)
    finally:
        release(loaded)
    return 0


def _serve(sock: socket.socket, loaded: Any, job_process: JobBody) -> None:
    """Fork a job per request, while what the workflow's load read is unchanged."""
    for line in sock.makefile("rb"):
        try:
            request = json.loads(line)
        except ValueError as exc:
            reply: dict[str, Any] = {"error": f"not a request: {exc}"}
        else:
            why = stale(loaded)
            if why is not None:
                sock.sendall(json.dumps({"stale": why}).encode() + b"\n")
                return
            reply = spawn_sibling(job_process, request, (sock.fileno(),))
        sock.sendall(json.dumps(reply).encode() + b"\n")


def _to_job_log(line: str) -> None:
    """A line for the log of the job running in this process."""
    print(line, file=sys.stderr, flush=True)
