"""The unit tier: pure and in-process. No subprocess, no listening server, no sleep.

An autouse guard makes a test that starts a process, opens a listening socket or sleeps fail
with the reason (it is recorded even when the code under test swallows the exception), so a
slow or flaky test cannot drift into the fast tier unnoticed: it belongs in tests/e2e/.
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import subprocess
import time

import pytest


class UnitTierViolation(RuntimeError):
    """Raised where a unit test reaches outside its process. Code under test may swallow it;
    the guard still fails the test at teardown, from its own record."""


@pytest.fixture(autouse=True)
def in_process_only(monkeypatch: pytest.MonkeyPatch) -> object:
    violations: list[str] = []

    def refuse(what: str):  # type: ignore[no-untyped-def]
        def refused(*args, **kwargs):  # type: ignore[no-untyped-def]
            violations.append(what)
            raise UnitTierViolation(f"a unit test may not {what}: move it to tests/e2e/")
        return refused

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse("start a process"))
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system", "execv", "execve"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, refuse(f"call os.{name}"))
    monkeypatch.setattr(multiprocessing.Process, "start", refuse("start a process"))
    monkeypatch.setattr(socket.socket, "listen", refuse("open a listening socket"))
    monkeypatch.setattr(socket.socket, "bind", refuse("bind a socket"))

    real_sleep = time.sleep

    def no_sleep(seconds: float) -> None:
        if seconds > 0:
            violations.append(f"sleep {seconds} s")
            raise UnitTierViolation("a unit test may not sleep: inject the clock or move it "
                                    "to tests/e2e/")
        real_sleep(0)

    monkeypatch.setattr(time, "sleep", no_sleep)
    yield
    if violations:
        pytest.fail(f"unit tier violated: {', '.join(sorted(set(violations)))}", pytrace=False)
