"""The unit tier: pure and in-process. No subprocess, no listening server, no sleep.

A guard wraps every phase of every test in this folder and its subfolders (the unit tier
mirrors the package: tests/unit/core/, tests/unit/engines/gce/, ...), fixture setup included, so
a session-scoped fixture that a unit test is first to request is caught too (the one teardown
left unguarded is the session's last, where other tiers' session fixtures end): a test that
starts a process, binds or listens on a socket, or sleeps fails with the reason, even when the
code under test swallows the exception. A slow or flaky test cannot drift into the fast tier
unnoticed: it belongs in tests/e2e/.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest

_PROCESS_CALLS = ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve")


class UnitTierViolation(RuntimeError):
    """Raised where a unit test reaches outside its process. Code under test may swallow it;
    the guard still fails the test, from its own record."""


@contextlib.contextmanager
def _guard() -> Iterator[list[str]]:
    violations: list[str] = []
    patch = pytest.MonkeyPatch()

    def refuse(what: str):  # type: ignore[no-untyped-def]
        def refused(*args, **kwargs):  # type: ignore[no-untyped-def]
            violations.append(what)
            raise UnitTierViolation(f"a unit test may not {what}: move it to tests/e2e/")
        return refused

    def no_sleep(seconds: float) -> None:
        if seconds > 0:
            violations.append("sleep")
            raise UnitTierViolation("a unit test may not sleep: inject the clock or move it "
                                    "to tests/e2e/")

    patch.setattr(subprocess.Popen, "__init__", refuse("start a process"))
    for name in _PROCESS_CALLS:
        if hasattr(os, name):
            patch.setattr(os, name, refuse(f"call os.{name}"))
    patch.setattr(multiprocessing.Process, "start", refuse("start a process"))
    patch.setattr(socket.socket, "bind", refuse("bind a socket (a server)"))
    patch.setattr(socket.socket, "listen", refuse("listen on a socket (a server)"))
    patch.setattr(time, "sleep", no_sleep)
    try:
        yield violations
    finally:
        patch.undo()


def _guarded():  # type: ignore[no-untyped-def]
    with _guard() as violations:
        result = yield
    if violations:
        raise UnitTierViolation(f"unit tier violated: {', '.join(sorted(set(violations)))}")
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item):  # type: ignore[no-untyped-def]
    return (yield from _guarded())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):  # type: ignore[no-untyped-def]
    return (yield from _guarded())


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):  # type: ignore[no-untyped-def]
    """Guarded, except after the session's last test: then pytest also tears down the
    session-scoped servers of the other tiers (the GCS emulator), which may wait on processes."""
    if nextitem is None:
        return (yield)
    return (yield from _guarded())
