"""The fake Compute Engine's HTTP side: the request handler every route shares, and the
answer to a payload the discovery document refuses. It knows nothing of the routes: it hands
each request (verb, path, JSON body, headers) to the fake's ``handle`` and writes its answer.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler
from typing import Any

from expo_executor.emulator.api_error import ApiError

# FakeCompute.handle: (verb, path with query, JSON body or None, headers) -> (status, JSON body)
Handle = Callable[[str, str, Any, Mapping[str, str]], tuple[int, Any]]


def payload_error(message: str) -> tuple[int, dict]:
    """A request the discovery document refuses, answered as Google's front end answers a
    payload it cannot parse: reason ``invalid``, status INVALID_ARGUMENT, no domain."""
    return 400, {"error": {"code": 400, "message": message,
                           "errors": [{"message": message, "reason": "invalid"}],
                           "status": "INVALID_ARGUMENT"}}


def handler_class(handle: Handle) -> type[BaseHTTPRequestHandler]:
    """A request handler answering each request with ``handle``'s (status, JSON body); a
    body that is not JSON is Google's 400 parseError, a bug of the fake a loud 500."""
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw.strip() else None
            except ValueError:
                self._answer(400, ApiError(400, "parseError", "Parse Error").body())
                return
            try:
                status, answer = handle(self.command, self.path, body, self.headers)
            except Exception as err:  # noqa: BLE001 - a fake's bug answers 500, loudly
                traceback.print_exc()
                status, answer = 500, ApiError(500, "backendError", f"fake: {err}").body()
            self._answer(status, answer)

        def _answer(self, status: int, answer: Any) -> None:
            data = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=UTF-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _serve  # noqa: N815 - http.server's names

        def log_message(self, *args: object) -> None:
            pass

    return Handler
