"""The front end's process exit: the collector frozen, every other exit handler still run (a
subprocess each: only a process's real exit shows it)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from tests.helpers import REPO

PROBE = textwrap.dedent("""
    import atexit, gc
    # registered first, so it runs after the front end's handler (atexit runs in reverse)
    atexit.register(lambda: print("at exit:", gc.isenabled(), gc.get_freeze_count() > 0,
                                  flush=True))
    from expo_executor.frontends.exit_collection import skip_exit_collection
    {calls}
    print("before exit:", gc.isenabled(), gc.get_freeze_count() > 0, flush=True)
""")


def _run(calls: str) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", PROBE.format(calls=calls)], cwd=REPO,
                          capture_output=True, text=True, timeout=60, check=True)
    return proc.stdout.splitlines()


def test_the_collector_is_frozen_only_at_exit_and_later_handlers_still_run() -> None:
    assert _run("skip_exit_collection(); skip_exit_collection()") == [
        "before exit: True False", "at exit: False True"]


def test_a_process_that_never_starts_a_run_keeps_the_interpreters_exit() -> None:
    assert _run("pass") == ["before exit: True False", "at exit: True False"]
