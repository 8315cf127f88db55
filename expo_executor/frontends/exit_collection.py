"""A front end's process ends without collecting its garbage one last time.

As the interpreter shuts down it runs a last cyclic garbage collection over everything still
alive. For Snakemake's main process at 50,000 jobs that is its whole DAG: a dry run of the
50,000-point sweep (bench/sweep_workflow.py) took 19.8 s from its last ``atexit`` handler to
the process's end, 0.5 s with the collector's objects frozen at exit (``gc.freeze``, then no
collection). Ctrl-C at 50,000 points on the local engine, side by side on a loaded machine:
SIGINT to the process's exit 18.9 s before, 2.2 s after, while Snakemake built the DAG; 24.2 s
before, 2.3 s after, while jobs ran. The memory goes back to the system with the process, as
it would anyway.

What still runs: every ``atexit`` handler (logging's flush, the coordinator's last-resort
stop), in their usual order, and every object's cleanup that reference counting does. What no
longer runs is the finalizer of an object that only a reference cycle kept alive; the
interpreter never promised to run those at exit, and our own files and processes are closed
by the explicit shutdown paths, not by finalizers.
"""

from __future__ import annotations

import atexit
import gc

_registered = False


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
