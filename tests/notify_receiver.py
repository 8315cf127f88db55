"""A notification receiver on loopback for the tests: an HTTP server in a thread that records
every POST (its body, parsed, and whether its signature verifies under ``SECRET``), or answers
with a status, or hangs (accepts, reads, never answers) until the test ends. Plain HTTP:
``--expocloud-notify`` accepts http:// to localhost only."""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from expo_executor.notify.signing import HEADER, verify

SECRET = b"test-notify-secret-0123456789"


@dataclass
class Received:
    """What the receiver got: ``bodies`` parsed, each with its signature's verdict."""

    bodies: list[dict] = field(default_factory=list)
    signed: list[bool] = field(default_factory=list)
    status: int = 200  # what it answers
    hang: bool = False  # never answer (until the server closes)
    released: threading.Event = field(default_factory=threading.Event)
    arrived: threading.Event = field(default_factory=threading.Event)
    url: str = ""

    def events(self) -> list[str]:
        return [body["event"] for body in self.bodies]

    def of(self, event: str) -> list[dict]:
        return [body for body in self.bodies if body["event"] == event]


@contextmanager
def receiver(status: int = 200, hang: bool = False) -> Iterator[Received]:
    """A receiver at ``Received.url`` for the duration of the block."""
    got = Received(status=status, hang=hang)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            got.bodies.append(json.loads(body))
            got.signed.append(verify(body, SECRET, self.headers.get(HEADER)))
            got.arrived.set()
            if got.hang:
                got.released.wait(120)
                return
            self.send_response(got.status)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    got.url = f"http://127.0.0.1:{server.server_address[1]}/hook/SECRETPATH"
    try:
        yield got
    finally:
        got.released.set()
        server.shutdown()
        server.server_close()


def closed_port_url() -> str:
    """A loopback URL nothing listens on: a connection there is refused at once."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}/hook"
