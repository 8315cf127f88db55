"""Shared fixtures and the tiers. No test may reach beyond this machine: connections are
refused unless they go to loopback, and name lookups of anything but localhost fail.

Tiers are folders, and each test is marked by its folder: ``tests/unit`` (pure and
in-process, guarded by its own conftest; the default of ``python -m pytest``), ``tests/e2e``
(real snakemake, cwltool, workers, local servers) and ``tests/faults`` (fault injection).
``python -m pytest tests`` runs every tier; ``-m unit``/``-m e2e``/``-m faults`` picks one.
"""

from __future__ import annotations

import ipaddress
import socket
from pathlib import Path

import pytest

_real_connect = socket.socket.connect
_real_getaddrinfo = socket.getaddrinfo


def _is_loopback(host: object) -> bool:
    if host in ("localhost", "", None):
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _guarded_connect(sock: socket.socket, address):  # type: ignore[no-untyped-def]
    if sock.family in (socket.AF_INET, socket.AF_INET6) and not _is_loopback(address[0]):
        raise ConnectionRefusedError(f"test tried to reach {address[0]}: only loopback is allowed")
    return _real_connect(sock, address)


def _guarded_getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    if not _is_loopback(host):
        raise socket.gaierror(f"test tried to resolve {host!r}: only loopback is allowed")
    return _real_getaddrinfo(host, *args, **kwargs)


TIERS = ("unit", "e2e", "faults")
_TESTS = Path(__file__).resolve().parent


# The order tiers run in: the longest tests first, so that over several processes (.ci/run's
# pytest-xdist) the short unit tests fill the gaps at the end instead of two fault-injection
# runs of minutes each finishing alone (CI saw the last 4 minutes spent on them).
RUN_ORDER = ("faults", "e2e", "unit")


def _tier_of(item: pytest.Item) -> str | None:
    """The test's tier: the first folder under tests/, however deep the file lies."""
    try:
        parts = item.path.resolve().relative_to(_TESTS).parts
    except ValueError:
        return None
    return parts[0] if len(parts) > 1 and parts[0] in TIERS else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test with its tier, read off its folder, and run the tiers longest first
    (a stable sort: a file's tests stay together, in their order)."""
    tiers = {item.nodeid: _tier_of(item) for item in items}
    items.sort(key=lambda item: RUN_ORDER.index(tiers[item.nodeid] or "unit"))
    for item in items:
        tier = tiers[item.nodeid]
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


@pytest.fixture(autouse=True)
def no_internet(monkeypatch: pytest.MonkeyPatch) -> None:
    """Applies to every test in this process; subprocesses get no proxy and no route out."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket, "getaddrinfo", _guarded_getaddrinfo)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(var, raising=False)
