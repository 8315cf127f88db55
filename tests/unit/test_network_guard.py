"""The network guard (tests/conftest.py) must bite, or every other test's 'offline' claim is
hollow: a connection off loopback is refused, a remote name does not resolve. (Loopback stays
open, for the local servers: tests/e2e/test_network_guard_loopback.py.)"""

import socket

import pytest


def test_non_loopback_connection_is_refused() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        with pytest.raises(ConnectionRefusedError):
            sock.connect(("192.0.2.1", 80))  # TEST-NET-1: never routed


def test_remote_name_lookup_fails() -> None:
    with pytest.raises(socket.gaierror):
        socket.getaddrinfo("storage.googleapis.com", 443)
