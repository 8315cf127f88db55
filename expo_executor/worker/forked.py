"""The agent's side of the job runner's zygote (worker/zygote.py): which jobs it can run, and
the handle of a job process it forked.

A Snakemake job's command is a shell line the front end built (frontends/snakemake):
``ANNOUNCE; [cd DIR &&] [PY -m snakemake --deploy-sources ... &&] PY -m
expo_executor.worker.command_clock -m snakemake ARGS``. When that line is plain words joined by
``&&`` (nothing the shell would expand, redirect or run otherwise) and ``PY`` is this worker's
own interpreter, the zygote runs the same steps in a forked process, and the job costs a fork
instead of an interpreter and Snakemake's imports. A CWL staged job's wrapper
(worker/staged_job.py) is forked too. Any other command (a conda deployment under a lock, a
user's own) runs as before, in a fresh process.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from expo_executor.worker import command_clock, staged_job

ZYGOTE_ENV = "EXPOCLOUD_JOB_ZYGOTE"  # "0": every job in a fresh interpreter, as before
MAX_STARTS = 3  # a zygote that keeps dying is not started again: jobs run as before
# How long jobs wait for a starting zygote before they run as before, in fresh interpreters.
# Its start-up costs about what one fresh job costs (both import Snakemake): a job started
# meanwhile would only take the CPU from it, and pay that again for itself.
STARTUP_WAIT_S = 30.0
# how long the templates of a zygote that has gone get to end by themselves
HELPERS_END_S = 5.0
# outside quotes: what the shell would treat as more than a plain word (or a newline)
SHELL_SPECIAL = ";&|<>()$`\\*?[]{}~#!\n"
# what is never (a character of) a word outside quotes: a special character, a quote that is
# not closed, a blank the shell would not split at
NOT_A_WORD = SHELL_SPECIAL + "'\"\r\f\v"
# A shell line's tokens, in order: blanks, ``&&``, words (plain characters and quoted
# strings, adjacent: one word; no ``$``, backquote or backslash inside double quotes) and any
# other single character (one of NOT_A_WORD, as a lone ``&``)
TOKEN = re.compile(r"""[ \t]+|&&|(?:[^ \t""" + re.escape(NOT_A_WORD)
                   + r"""]+|'[^']*'|"[^"$`\\]*")+|.""", re.DOTALL)
UNQUOTE = re.compile("'([^']*)'|\"([^\"]*)\"")  # a quoted string: its text
PYTHON_NAME = re.compile(r"python[0-9.]*")


def zygote_wanted() -> bool:
    return os.environ.get(ZYGOTE_ENV, "1") != "0"


def split_and(line: str) -> list[list[str]] | None:
    """The words of each ``&&``-joined part of a shell line, or None when the line holds
    anything else the shell would act on (an expansion, a redirection, another operator, a
    glob, a blank other than a space or a tab): then only a shell runs it faithfully. Quoted
    text is taken as the shell takes it.

    One regular-expression pass (:data:`TOKEN`): the agent reads every Snakemake job's line
    of about 1,000 characters, and reading it a character at a time (and with ``shlex``) took
    about 3 ms of the agent's CPU per job, the largest part of its own work per job."""
    parts: list[list[str]] = [[]]
    for token in TOKEN.findall(line):
        if token == "&&":
            parts.append([])
        elif token[0] in " \t":
            continue
        elif len(token) == 1 and token in NOT_A_WORD:
            return None
        elif "'" in token or '"' in token:
            parts[-1].append(UNQUOTE.sub(_unquoted, token))
        else:
            parts[-1].append(token)
    return None if any(not words for words in parts) else parts


def _unquoted(match: re.Match[str]) -> str:
    single, double = match.group(1), match.group(2)
    return single if single is not None else double


def job_chain(argv: list[str], path: str) -> list[list[str]] | None:
    """The zygote's steps for a job's command (worker/zygote.run_chain): a Snakemake job's,
    or a staged job's (``PY -m expo_executor.worker.staged_job SPEC``, as the agent starts
    it); None: it runs as before. ``path``: the job's PATH."""
    if argv[:3] == [sys.executable, "-m", staged_job.__name__] and len(argv) == 4:
        return [["staged", argv[3]]]
    return snakemake_chain(argv, path)


def snakemake_chain(argv: list[str], path: str) -> list[list[str]] | None:
    """The zygote's steps for a job whose command is the front end's Snakemake line (see
    worker/zygote.run_chain), or None: it runs as before. ``path``: the job's PATH."""
    prefix = command_clock.ANNOUNCE + "; "
    if len(argv) != 3 or argv[0] not in ("/bin/sh", "sh") or argv[1] != "-c" \
            or not argv[2].startswith(prefix):
        return None
    parts = split_and(argv[2][len(prefix):])
    if parts is None:
        return None
    chain = [_step(words, path) for words in parts]
    if any(step is None for step in chain) or chain[-1][0] != "clock":
        return None
    return chain  # type: ignore[return-value]


def _step(words: list[str], path: str) -> list[str] | None:
    if words[0] == "cd" and len(words) == 2:
        return words
    if not _our_python(words[0], path):
        return None
    if words[1:3] == ["-m", "snakemake"]:
        return ["snakemake", *words[3:]]
    if words[1:5] == ["-m", command_clock.__name__, "-m", "snakemake"]:
        return ["clock", *words[5:]]
    return None


def _our_python(word: str, path: str) -> bool:
    """``word`` names this worker's interpreter (its environment's bin directory): the zygote
    runs the job in that one."""
    found = word if "/" in word else shutil.which(word, path=path)
    return bool(found) and PYTHON_NAME.fullmatch(os.path.basename(found)) is not None \
        and os.path.dirname(os.path.abspath(found)) == os.path.dirname(sys.executable)


class ForkedJob:
    """A job process the zygote forked as our child: ``subprocess.Popen``'s pid, poll and
    wait, with its real exit status (negative: the signal that killed it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self.returncode = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        return self.returncode


class Zygote:
    """The worker's zygote, started with the worker (or on first use). ``spawn`` never waits
    for its start-up (a job asked for before it is ready runs as before): the agent holds its
    jobs back while ``starting`` says so. A dead one is started again, up to ``MAX_STARTS``
    times."""

    def __init__(self, env: dict[str, str], name: str = "worker") -> None:
        self.env = env  # the zygote's own: its jobs' /proc environ shows it (processes.sessions.vm_mark)
        self.name = name
        self.proc: subprocess.Popen | None = None
        self.ready = False
        self.starts = 0
        self.started_at = 0.0  # monotonic time of the last start
        self.refused: str | None = None  # why it will not be used again
        self.helpers: set[int] = set()  # its workflow templates: our children too

    def spawn(self, chain: list[list[str]], cwd: str, env: dict[str, str],
              log: Path) -> ForkedJob | None:
        """Fork one job (its environment goes over the pipe, to the job only); None: run it
        as before."""
        if not self._usable():
            return None
        request = {"chain": chain, "cwd": cwd, "env": env, "log": str(log)}
        reply = self._ask(request)
        if reply is None:
            return None
        self._news(reply)
        if "pid" in reply:
            return ForkedJob(int(reply["pid"]))
        self._refuse(str(reply.get("error")))
        return None

    def start(self) -> None:
        """Start it now rather than at the first job."""
        self._usable()

    def starting(self) -> int | None:
        """While it starts (for at most ``STARTUP_WAIT_S``), the descriptor that becomes
        readable once it is ready: jobs wait for it. None: it is ready, or given up on."""
        if self._usable() or self.proc is None:
            return None
        if time.monotonic() - self.started_at >= STARTUP_WAIT_S:
            return None
        return self.proc.stdout.fileno()

    def wait_ready(self, timeout: float) -> bool:
        """Start the zygote if need be and wait up to ``timeout`` seconds for it: for tests and
        benchmarks (the agent never waits for it)."""
        deadline = time.monotonic() + timeout
        while not self._usable():
            remaining = deadline - time.monotonic()
            if self.proc is None or remaining <= 0:
                return False
            select.select([self.proc.stdout], [], [], remaining)
        return True

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def _news(self, reply: dict) -> None:
        """Templates it started (worker/workflow_template.py: we reap them), lines to log; and
        the templates that have ended since, reaped."""
        self.helpers.update(int(pid) for pid in reply.get("helpers", ()))
        for note in reply.get("notes", ()):
            print(f"{self.name}: {note}", file=sys.stderr, flush=True)
        self._reap_helpers(kill=False)

    def _reap_helpers(self, kill: bool) -> None:
        """Reap the templates that have ended (``kill``: end them first: they hold no job)."""
        for pid in list(self.helpers):
            try:
                if kill:
                    os.kill(pid, signal.SIGKILL)
                done, _ = os.waitpid(pid, 0 if kill else os.WNOHANG)
            except ChildProcessError:
                done = pid  # reaped already
            if done:
                self.helpers.discard(pid)

    def _end_helpers(self) -> None:
        """Once the zygote has gone its templates end too (their socket to it closes) and
        clean up their scratch: a few seconds for that, then they are killed."""
        deadline = time.monotonic() + HELPERS_END_S
        while self.helpers and time.monotonic() < deadline:
            self._reap_helpers(kill=False)
            if self.helpers:
                time.sleep(0.01)
        self._reap_helpers(kill=True)

    def close(self) -> None:
        """The zygote ends when its stdin closes; its jobs (our children) are not its, its
        templates end with it."""
        proc, self.proc, self.ready = self.proc, None, False
        if proc is not None:
            for stream in (proc.stdin, proc.stdout):
                try:
                    stream.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._end_helpers()

    def _usable(self) -> bool:
        if self.refused is not None:
            return False
        if self.proc is not None and self.proc.poll() is not None:
            self._lost(f"exited with {self.proc.returncode}")
        if self.proc is None:
            self._start()
            return False
        if not self.ready:
            if not select.select([self.proc.stdout], [], [], 0)[0]:
                return False
            self.ready = self._read() == {"ready": True}
            if not self.ready:
                self._lost("did not start")
        return self.ready

    def _start(self) -> None:
        if self.starts >= MAX_STARTS:
            self._refuse(f"it died {self.starts} times")
            return
        self.starts += 1
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen([sys.executable, "-m", "expo_executor.worker.zygote"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     env=self.env)

    def _ask(self, request: dict) -> dict | None:
        try:
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
        except OSError:
            self._lost("stopped reading")
            return None
        reply = self._read()
        if reply is None:
            self._lost("died")
        return reply

    def _read(self) -> dict | None:
        try:
            line = self.proc.stdout.readline()
            return json.loads(line) if line else None
        except (OSError, ValueError):
            return None

    def _lost(self, why: str) -> None:
        print(f"{self.name}: the job zygote {why}; starting another (jobs run as before "
              "meanwhile)", file=sys.stderr, flush=True)
        self.close()

    def _refuse(self, why: str) -> None:
        print(f"{self.name}: not using the job zygote ({why}); every job starts a fresh "
              "interpreter", file=sys.stderr, flush=True)
        self.refused = why
        self.close()
