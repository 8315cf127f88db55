"""The network guard (tests/conftest.py) lets loopback through: the local servers the e2e tests
start stay reachable. (What it refuses: tests/unit/test_network_guard.py.)"""

import socket


def test_loopback_is_allowed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        with socket.create_connection(server.getsockname(), timeout=2):
            pass
