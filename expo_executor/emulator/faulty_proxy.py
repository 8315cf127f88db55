"""A fault-injecting HTTP proxy in front of the GCS emulator: storage faults on demand.

Real Cloud Storage throttles (429), has bad moments (503) and loses connections, sometimes
after it has applied a request: a create-only write (``ifGenerationMatch=0``) whose response
was lost meets 412 on its retry although the first attempt won. The emulator never does any of
this, so this proxy does, on a seeded random fraction of the storage requests it forwards:

- ``503-before`` / ``429-before``: answered at once, the request never reaches the emulator;
- ``drop-before``: the request is read, then the connection is closed without an answer;
- ``503-after`` / ``429-after`` / ``drop-after``: the request is applied by the emulator, and
  its answer replaced by the error (or by a closed connection).

``corrupt`` (only when asked for: by :meth:`FaultyProxy.inject_next` or ``kinds``) flips one
byte of a whole-object download's body and keeps its ``x-goog-hash`` header: a bit flipped on
the way, which only the client's checksum can catch. Other requests it lets through untouched,
uncounted.

It counts the storage requests it sees by kind (:attr:`FaultyProxy.calls`, see
:func:`call_kind`: listings, metadata reads, downloads, uploads, ...), for tests and benchmarks
that count a client's calls. It also refuses chosen requests permanently (:meth:`FaultyProxy.refuse`, e.g. 403 for every
upload under an object prefix), for tests of what a run does when outputs cannot be stored,
and slows chosen ones down (:meth:`FaultyProxy.slow_down`: a slow link to the bucket).

The proxy reads each request whole (``Content-Length`` or chunked), forwards it on a fresh
connection with the client's ``Host`` header (so the emulator's resumable-upload ``Location``
points back at the proxy), and answers with the whole response, keeping the client's
connection alive (HTTP/1.1). It serves on loopback from threads of this process, so a test
reads :attr:`FaultyProxy.injected` directly; ``expocloud emulator --storage-fault-rate`` puts
one in front of the emulator it serves.
"""

from __future__ import annotations

import http.client
import json
import random
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import BinaryIO
from urllib.parse import unquote, urlsplit

KINDS = ("503-before", "429-before", "drop-before", "503-after", "429-after", "drop-after")
CORRUPT = "corrupt"  # not among the random defaults: Snakemake's storage plugin does not retry it
# Only the storage API is faulted; the health check and the emulator's /wipe are not.
FAULTED_PREFIXES = ("/storage/", "/upload/", "/download/", "/batch/")
HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-connection", "transfer-encoding",
                        "te", "trailer", "upgrade", "content-length"})
MESSAGES = {503: ("backendError", "We encountered an internal error. Please try again."),
            429: ("rateLimitExceeded", "The rate of change requests to the object is too high."),
            403: ("forbidden", "Access denied by the fault-injecting proxy.")}


@dataclass(frozen=True)
class Request:
    """What a refusal rule sees of a request: the path and query decoded, and the body."""

    method: str
    target: str  # unquoted path and query, e.g. /upload/storage/v1/b/b/o?uploadType=multipart
    body: bytes


Rule = tuple[Callable[[Request], bool], int]


def error_body(status: int, message: str | None = None) -> bytes:
    """GCS's JSON error shape, so the google clients raise the matching exception."""
    reason, default = MESSAGES.get(status, ("error", http.client.responses.get(status, "error")))
    text = message or default
    return json.dumps({"error": {"code": status, "message": text,
                                 "errors": [{"domain": "global", "reason": reason,
                                             "message": text}]}}).encode()


def uploads_under(object_prefix: str) -> Callable[[Request], bool]:
    """A predicate: the request uploads an object whose name starts with ``object_prefix``."""
    def is_upload(request: Request) -> bool:
        if request.method not in ("POST", "PUT") or not request.target.startswith("/upload/"):
            return False
        # the name is in the query (media), the multipart metadata or the resumable
        # initiation's JSON body
        return (f"name={object_prefix}" in request.target
                or f'"name": "{object_prefix}'.encode() in request.body[:65536]
                or f'"name":"{object_prefix}'.encode() in request.body[:65536])

    return is_upload


def call_kind(request: Request) -> str:
    """What a storage request is, for counting: ``list`` (a listing of a bucket's objects),
    ``object`` (one object's metadata), ``bucket`` (a bucket's metadata), ``download``,
    ``upload``, ``delete`` or ``other``."""
    path, _, query = request.target.partition("?")
    if request.method == "DELETE":
        return "delete"
    if path.startswith("/upload/") or request.method in ("POST", "PUT", "PATCH"):
        return "upload"
    if path.startswith("/download/") or "alt=media" in query:
        return "download"
    parts = path.removeprefix("/storage/v1/").split("/")
    if parts[0] == "b" and len(parts) == 2:
        return "bucket"
    if parts[0] == "b" and len(parts) == 3 and parts[2] == "o":
        return "list"
    if parts[0] == "b" and len(parts) > 3 and parts[2] == "o":
        return "object"
    return "other"


def _query_value(target: str, name: str) -> str:
    """One parameter of a request's (unquoted) query, "" when absent."""
    for pair in target.partition("?")[2].split("&"):
        key, _, value = pair.partition("=")
        if key == name:
            return value
    return ""


def _whole_download(request: Request) -> bool:
    """A GET of an object's media without a range (the emulator sends its hash then)."""
    return request.method == "GET" and ("alt=media" in request.target
                                        or request.target.startswith("/download/"))


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that hangs up on a kept-alive connection is normal, not worth a trace."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class FaultyProxy:
    """Forward to ``upstream`` (``http://host:port``), faulting a ``rate`` fraction of calls."""

    def __init__(self, upstream: str, rate: float = 0.1, seed: int = 0,
                 kinds: Iterable[str] = KINDS, port: int = 0,
                 upstream_timeout: float = 120.0) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError(f"fault rate must be between 0 and 1, not {rate}")
        self.kinds = tuple(kinds)
        unknown = set(self.kinds) - {*KINDS, CORRUPT}
        if unknown or not self.kinds:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}; known: "
                             f"{', '.join((*KINDS, CORRUPT))}")
        parts = urlsplit(upstream if "://" in upstream else f"http://{upstream}")
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.rate = rate
        self.upstream_timeout = upstream_timeout
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self.injected: Counter[str] = Counter()  # faults by kind
        self.refused: Counter[int] = Counter()  # permanent refusals by status
        self.forwarded = 0  # requests that reached the emulator
        self.requests = 0  # storage requests seen (faulted or not)
        self.calls: Counter[str] = Counter()  # storage requests seen, by call_kind
        self.listings: Counter[str] = Counter()  # listings seen, by their prefix
        self._rules: list[Rule] = []
        self._spared: list[Callable[[Request], bool]] = []
        self._delays: list[tuple[Callable[[Request], bool], float]] = []
        self._script: list[str] = []  # faults for the next storage requests, in order
        self._server = _Server(("127.0.0.1", port), self._handler_class())
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread: threading.Thread | None = None

    # -- control -----------------------------------------------------------------------------
    def start(self) -> FaultyProxy:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.1},
                                        name="faulty-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def __enter__(self) -> FaultyProxy:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    def set_rate(self, rate: float) -> None:
        with self._lock:
            self.rate = rate

    def inject_next(self, *kinds: str) -> None:
        """Fault the next storage requests with these kinds, in order, before any random
        fault: for tests that need one exact fault (a lost create-only write)."""
        unknown = set(kinds) - {*KINDS, CORRUPT}
        if unknown:
            raise ValueError(f"unknown fault kinds {sorted(unknown)}")
        with self._lock:
            self._script.extend(kinds)

    def refuse(self, predicate: Callable[[Request], bool], status: int = 403) -> None:
        """Answer ``status`` to every request ``predicate`` accepts, before forwarding: a
        permanent refusal (a missing permission, a policy), not a fault that retries cure."""
        with self._lock:
            self._rules.append((predicate, status))

    def refuse_uploads(self, object_prefix: str, status: int = 403) -> None:
        """Refuse every upload of an object whose name starts with ``object_prefix``."""
        self.refuse(uploads_under(object_prefix), status)

    def spare(self, predicate: Callable[[Request], bool]) -> None:
        """Never fault a request ``predicate`` accepts: for a call a test knows its client
        cannot survive a fault of (a third party's, documented as such)."""
        with self._lock:
            self._spared.append(predicate)

    def slow_down(self, predicate: Callable[[Request], bool], seconds: float) -> None:
        """Hold every request ``predicate`` accepts for ``seconds`` before forwarding it."""
        with self._lock:
            self._delays.append((predicate, seconds))

    def _delay(self, request: Request) -> float:
        with self._lock:
            return sum(seconds for predicate, seconds in self._delays if predicate(request))

    @property
    def total_injected(self) -> int:
        return sum(self.injected.values())

    def _decide(self, request: Request) -> tuple[str | None, int | None]:
        """(fault kind or None, refusal status or None) for one request, under the lock."""
        with self._lock:
            self.requests += 1
            call = call_kind(request)
            self.calls[call] += 1
            if call == "list":
                self.listings[_query_value(request.target, "prefix")] += 1
            for predicate, status in self._rules:
                if predicate(request):
                    self.refused[status] += 1
                    return None, status
            if any(predicate(request) for predicate in self._spared):
                return None, None
            whole = _whole_download(request)
            if self._script and (self._script[0] != CORRUPT or whole):
                kind = self._script.pop(0)
            elif self.rate and self._random.random() < self.rate:
                kind = self._random.choice(self.kinds)
            else:
                return None, None
            if kind == CORRUPT and not whole:
                return None, None  # nothing to corrupt here: not a fault
            self.injected[kind] += 1
            return kind, None

    def _note_forwarded(self) -> None:
        with self._lock:
            self.forwarded += 1

    # -- serving -----------------------------------------------------------------------------
    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        return type("Handler", (_ProxyHandler,), {"proxy": self})


def _read_chunked(rfile: BinaryIO) -> bytes:
    """A chunked request body, trailers skipped."""
    chunks = []
    while True:
        size = int(rfile.readline().split(b";")[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline() not in (b"\r\n", b"\n", b""):
                pass
            return b"".join(chunks)
        chunks.append(rfile.read(size))
        rfile.readline()


def _flip_middle_byte(data: bytes) -> bytes:
    """``data`` with one bit of its middle byte flipped: corrupted on the way (an empty body,
    a 304 to a read whose object is unchanged, has nothing to flip)."""
    if not data:
        return data
    flip = len(data) // 2
    return data[:flip] + bytes([data[flip] ^ 0x01]) + data[flip + 1:]


class _ProxyHandler(BaseHTTPRequestHandler):
    """One client connection of a FaultyProxy (``proxy``, set by the subclass each proxy makes)."""

    protocol_version = "HTTP/1.1"
    proxy: FaultyProxy

    def log_message(self, *_: object) -> None:  # quiet: tests read the counters
        pass

    def _body(self) -> bytes:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return _read_chunked(self.rfile)
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _drop(self) -> None:
        self.close_connection = True
        try:
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
        self.send_response(status)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, status: int, message: str | None = None) -> None:
        self._answer(status, [("Content-Type", "application/json; charset=UTF-8")],
                     error_body(status, message))

    def _fault(self, kind: str | None, when: str) -> bool:
        """Serve ``kind`` if it is a fault that strikes ``when`` ("before" or "after"
        forwarding): a dropped connection or an error answer."""
        if kind is None or not kind.endswith(f"-{when}"):
            return False
        if kind.startswith("drop-"):
            self._drop()
        else:
            self._error(int(kind[:3]))
        return True

    def _handle(self) -> None:
        body = self._body()
        target = self.path
        faulted = target.startswith(FAULTED_PREFIXES)
        request = Request(self.command, unquote(target), body)
        kind, refusal = self.proxy._decide(request) if faulted else (None, None)
        delay = self.proxy._delay(request) if faulted else 0.0
        if delay:
            time.sleep(delay)
        if refusal is not None:
            self._error(refusal)
            return
        if self._fault(kind, "before"):
            return
        try:
            status, headers, answer = self._forward(body)
        except OSError as exc:  # the emulator is gone or stuck: say so, as a 502
            self._error(502, f"the proxy could not reach the emulator: {exc}")
            return
        if self._fault(kind, "after"):
            return
        if kind == CORRUPT and status == 200 and answer:
            answer = _flip_middle_byte(answer)
        self._answer(status, headers, answer)

    def _forward(self, body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(*self.proxy.upstream,
                                          timeout=self.proxy.upstream_timeout)
        try:
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if body or self.command in ("POST", "PUT", "PATCH"):
                headers["Content-Length"] = str(len(body))
            conn.request(self.command, self.path, body=body or None, headers=headers)
            response = conn.getresponse()
            answer = response.read()
            kept = [(k, v) for k, v in response.getheaders() if k.lower() not in HOP_BY_HOP]
            self.proxy._note_forwarded()
            return response.status, kept, answer
        finally:
            conn.close()

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = _handle
