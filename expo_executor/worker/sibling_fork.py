"""Forking a process whose parent is our parent: how the job runner's zygote
(worker/zygote.py) and its workflow templates (worker/workflow_template.py) start processes
that the agent, their parent, reaps with their real exit status.

Each is forked with ``CLONE_PARENT`` and only while the forking process has no other thread (a
fork copies one thread, and any lock another held stays locked in the child). The child runs
its body and exits with its status, whatever happens: it never returns into the loop it was
forked from.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import platform
import signal
import sys
import threading
import traceback
from typing import Any, Callable, Iterable

CLONE_PARENT = 0x00008000
SIGCHLD = 17
# the clone system call's number; its first argument is the flags on each of these
CLONE_SYSCALL = {"x86_64": 56, "aarch64": 220}


def single_threaded() -> bool:
    """No thread but this one, Python's or not (an extension's)."""
    try:
        tasks = len(os.listdir("/proc/self/task"))
    except OSError:
        tasks = 1
    return threading.active_count() == 1 and tasks == 1


def fork_sibling() -> int:
    """``os.fork`` whose child's parent is our parent (``clone(CLONE_PARENT)``): 0 in the child.

    Python's own fork bookkeeping (import lock, at-fork hooks, threading state) is run around
    the raw system call, as ``os.fork`` does."""
    number = CLONE_SYSCALL.get(platform.machine())
    if number is None:
        raise OSError(f"no clone system call known on {platform.machine()}")
    libc = ctypes.PyDLL(None, use_errno=True)  # PyDLL: the GIL stays held across the call
    libc.syscall.restype = ctypes.c_long
    api = ctypes.pythonapi
    api.PyOS_BeforeFork()
    pid = libc.syscall(ctypes.c_long(number), ctypes.c_ulong(CLONE_PARENT | SIGCHLD),
                       ctypes.c_void_p(0), ctypes.c_void_p(0), ctypes.c_void_p(0),
                       ctypes.c_void_p(0))
    if pid == 0:
        api.PyOS_AfterFork_Child()
        return 0
    err = ctypes.get_errno()
    api.PyOS_AfterFork_Parent()
    if pid < 0:
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid


def spawn_sibling(body: Callable[[dict[str, Any]], int], request: dict[str, Any],
                  inherited: Iterable[int]) -> dict[str, Any]:
    """Fork a sibling that runs ``body(request)`` after closing ``inherited`` (the forking
    process's channels: the agent must see their ends close when the forking process goes);
    the answer for whoever asked: ``{"pid": N}`` or ``{"error": why}``."""
    if not single_threaded():
        return {"error": "other threads are running: forking is not safe"}
    try:
        pid = fork_sibling()
    except OSError as exc:
        return {"error": str(exc)}
    if pid == 0:
        for fd in inherited:
            os.close(fd)
        exit_with(body, request)
    if parent_of(pid) not in (None, os.getppid()):  # the kernel ignored CLONE_PARENT: the
        # agent could not reap it, so it must not run (it has barely started)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        return {"error": "a forked process's parent is not the agent (clone ignored "
                         "CLONE_PARENT)"}
    return {"pid": pid}


def parent_of(pid: int) -> int | None:
    """The parent of ``pid`` (Linux /proc); None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as stat:
            return int(stat.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def exit_with(body: Callable[..., int], *args: Any) -> None:
    """Run a forked process's body and exit with its status, whatever happens: it never
    returns into the loop it was forked from (or, for a job's own child, into the job)."""
    code = 1
    try:
        code = body(*args)
    except BaseException:  # noqa: BLE001 - see above
        traceback.print_exc()
    finally:
        _shutdown()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - a full disk: the status still counts
                pass
        os._exit(code)


def _shutdown() -> None:
    """What the interpreter does before it exits, which ``os._exit`` would skip: wait for the
    process's other (non-daemon) threads, then run the exit handlers (logging's flush among
    them)."""
    try:
        threading._shutdown()  # type: ignore[attr-defined] - what Py_FinalizeEx calls
    except BaseException:  # noqa: BLE001 - the exit handlers still run
        traceback.print_exc()
    atexit._run_exitfuncs()
