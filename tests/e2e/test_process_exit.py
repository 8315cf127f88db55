"""The front end's process ends promptly (frontends/process_exit.py): Ctrl-C interrupts a long
synchronous stretch inside ``asyncio.run`` at once, and at exit the collector is frozen while
every other exit handler still runs (a subprocess each: only a real process shows either)."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

from tests.helpers import REPO, interruptible

PROBE = textwrap.dedent("""
    import atexit, gc
    # registered first, so it runs after the front end's handler (atexit runs in reverse)
    atexit.register(lambda: print("at exit:", gc.isenabled(), gc.get_freeze_count() > 0,
                                  flush=True))
    from expo_executor.frontends.process_exit import skip_exit_collection
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


# A coroutine that computes without an await for up to LIMIT seconds, as Snakemake's DAG update
# does at 50,000 jobs; the test sends SIGINT once it is under way.
BUSY = textwrap.dedent("""
    import asyncio, sys, time
    from expo_executor.frontends.process_exit import interrupt_at_once
    if sys.argv[1] == "ours":
        interrupt_at_once()
    async def busy():
        end = time.monotonic() + float(sys.argv[2])
        try:
            print("busy", flush=True)  # inside the try: the test's SIGINT may come at once
            while time.monotonic() < end:
                pass
        except KeyboardInterrupt:
            print("interrupted while busy", flush=True)
            raise
        print("busy to the end", flush=True)
    asyncio.run(busy())
""")


def _interrupt_busy(handler: str, limit_s: float) -> tuple[list[str], int]:
    proc = subprocess.Popen([sys.executable, "-c", BUSY, handler, str(limit_s)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            preexec_fn=interruptible)
    assert proc.stdout is not None
    lines = [proc.stdout.readline().strip()]
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    return lines + out.splitlines(), proc.returncode


def test_ctrl_c_interrupts_a_busy_coroutine_at_once() -> None:
    lines, code = _interrupt_busy("ours", 100.0)
    assert lines[:2] == ["busy", "interrupted while busy"] and code == -signal.SIGINT


def test_without_it_asyncio_waits_for_the_coroutines_next_await() -> None:
    """The premise: Python's own handler lets the busy stretch run to its end."""
    lines, _ = _interrupt_busy("python", 2.0)
    assert lines[:2] == ["busy", "busy to the end"]


# Snakemake's own log handler writes a line; the Ctrl-C comes while it does (its stream raises
# SIGINT from inside the write, the moment a user's Ctrl-C may come at).
WHILE_LOGGING = textwrap.dedent("""
    import logging, signal, sys, time
    from snakemake.logging import ColorizingTextHandler
    from expo_executor.frontends.process_exit import interrupt_at_once
    if sys.argv[1] == "ours":
        interrupt_at_once()
    class Terminal:
        def write(self, text):  # the line, then its end
            sys.stdout.write(text)
            if text == "\\n":
                signal.raise_signal(signal.SIGINT)
        def flush(self):
            sys.stdout.flush()
    log = logging.getLogger("probe")
    log.propagate = False
    log.addHandler(ColorizingTextHandler(nocolor=True, stream=Terminal()))
    try:
        log.warning("a job's line")
        end = time.monotonic() + float(sys.argv[2])
        while time.monotonic() < end:
            time.sleep(0.01)
        print("never interrupted", flush=True)
    except KeyboardInterrupt:
        print("interrupted after the line", flush=True)
""")


def _interrupt_logging(handler: str, wait_s: float) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", WHILE_LOGGING, handler, str(wait_s)],
                          cwd=REPO, capture_output=True, text=True, timeout=120,
                          preexec_fn=interruptible)
    return proc.stdout.splitlines()


def test_ctrl_c_while_snakemake_logs_still_stops_the_run() -> None:
    assert _interrupt_logging("ours", 60.0) == ["a job's line", "interrupted after the line"]


def test_without_it_snakemakes_log_handler_drops_the_ctrl_c() -> None:
    """The premise: with Python's own handler the interrupt is lost inside the handler."""
    assert _interrupt_logging("python", 2.0) == ["a job's line", "never interrupted"]
