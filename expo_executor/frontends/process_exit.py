"""A front end's process ends promptly: Ctrl-C interrupts it at once, and it exits without
collecting its garbage one last time. Issue 31 asks that Ctrl-C stop a run within 10 s at any
phase; at 50,000 points neither held before.

**The last collection.** As the interpreter shuts down it runs a cyclic garbage collection over
everything still alive. For Snakemake's main process at 50,000 jobs that is its whole DAG: a
dry run of the 50,000-point sweep (bench/sweep_workflow.py) took 19.8 s from its last
``atexit`` handler to the process's end, 0.5 s with the collector's objects frozen at exit
(``gc.freeze``, then no collection). Ctrl-C at 50,000 points on the local engine, side by side
on a loaded machine, while jobs ran: SIGINT to the process's exit 24.2 s before, 2.3 s after.
The memory goes back to the system with the process, as it would anyway. Every ``atexit``
handler still runs (logging's flush, the coordinator's last-resort stop), in its usual order,
and so does every cleanup that reference counting does; what no longer runs is the finalizer
of an object only a reference cycle kept alive, which the interpreter never promised at exit
(our files and processes are closed by the explicit shutdown paths, not by finalizers).

**Ctrl-C inside Snakemake's asyncio sections.** Snakemake builds its DAG inside
``asyncio.run``, and since Python 3.11 ``asyncio.Runner`` turns SIGINT into a cancellation of
its main task, which takes effect only at the task's next ``await``: Snakemake's DAG update
runs for tens of seconds between two at 50,000 jobs, so one Ctrl-C waited 16-42 s
(bench/ctrl_c.py, phase local-dag). The Runner does this only while SIGINT has Python's own
handler (``signal.default_int_handler``); with a handler of our own that raises
KeyboardInterrupt as that one does, the interrupt comes where the program is, as it did
before Python 3.11 and as it does outside asyncio. Snakemake installs no SIGINT handler of
its own and catches KeyboardInterrupt where it stops a run.

**Ctrl-C while Snakemake logs.** Snakemake's log handler (``snakemake.logging``,
``ColorizingTextHandler.emit``) catches KeyboardInterrupt and drops it. A Ctrl-C that came while
the main thread wrote a log line was lost, and the run went on as if nothing had been asked: a
sweep that hands over hundreds of jobs at once logs each one, and a SIGINT sent then left
Snakemake selecting jobs for as long as one waited, with no word (once in a fresh-clone CI
run; bench/ctrl_c_handover.py, three runs at a time on 2 cores: 3 of 9 runs still ran 20 s
after their SIGINT, 0 of 9 with the deferral below, each ending in 0.9-1.2 s). Plain Snakemake
drops it the same way. So the handler raises only outside Snakemake's logging code: inside it,
the same SIGINT comes back to the main thread a moment later (:data:`REDELIVER_S`), until it
lands where Snakemake honours it. One Ctrl-C is still one KeyboardInterrupt.
"""

from __future__ import annotations

import atexit
import gc
import signal
import threading
from types import FrameType

_registered = False
SWALLOWING_MODULES = frozenset({"snakemake.logging"})  # code that drops a KeyboardInterrupt
REDELIVER_S = 0.05  # how soon a deferred Ctrl-C comes back


def skip_exit_collection() -> None:
    """Freeze the garbage collector once the process exits (once per process). Registered
    when a front end starts a run, so a plain ``snakemake`` run in the same environment (our
    plugin is imported to list its settings) keeps the interpreter's own exit."""
    global _registered
    if not _registered:
        atexit.register(_freeze)
        _registered = True


def _freeze() -> None:
    gc.disable()
    gc.freeze()


def interrupt_at_once() -> None:
    """Ctrl-C raises KeyboardInterrupt where the main thread is, also inside ``asyncio.run``.
    Only where SIGINT still has Python's own handler: a handler someone chose stays."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupt)


def _interrupt(signum: int, frame: FrameType | None) -> None:
    """Raise KeyboardInterrupt where the main thread is, unless that is code that would drop
    it: then the signal comes back to the main thread shortly, to land after that code."""
    if _in_swallowing_code(frame):
        redeliver = threading.Timer(REDELIVER_S, signal.pthread_kill,
                                    (threading.main_thread().ident, signum))
        redeliver.daemon = True
        redeliver.start()
        return
    raise KeyboardInterrupt


def _in_swallowing_code(frame: FrameType | None) -> bool:
    while frame is not None:
        if frame.f_globals.get("__name__") in SWALLOWING_MODULES:
            return True
        frame = frame.f_back
    return False
