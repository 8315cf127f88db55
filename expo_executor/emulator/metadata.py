"""A fake GCE metadata server for one instance, on a loopback port.

Answers what a worker asks a real VM's metadata server: its name, zone and project, the
metadata attributes it was created with, an access token, an identity token (signed by the
fake Compute's :class:`~expo_executor.emulator.identity.IdentityIssuer`), and the preemption notice
(``instance/preempted``, with ``?wait_for_change=true`` long-polls). Like the real one it
insists on the ``Metadata-Flavor: Google`` header. Point a process at it with
``GCE_METADATA_HOST=127.0.0.1:PORT`` (google-auth and our worker both read it).
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from expo_executor.emulator.identity import IdentityIssuer

PREFIX = "/computeMetadata/v1/"
LONG_POLL_CAP = 30.0  # seconds a wait_for_change request is held at most


class FakeMetadata:
    """Metadata of one fake instance; ``preempt()`` raises its preemption notice."""

    def __init__(self, *, project: str, zone: str, name: str, attributes: dict[str, str],
                 instance_id: int = 1, service_account: str = "default",
                 identity: IdentityIssuer | None = None) -> None:
        self.project = project
        self.zone = zone
        self.name = name
        self.attributes = dict(attributes)
        self.instance_id = instance_id
        self.service_account = service_account
        self.identity = identity  # None: no identity tokens (404, as without a service account)
        self.requests = 0
        self._preempted = threading.Event()
        self._changed = threading.Condition()
        self._server: ThreadingHTTPServer | None = None

    @property
    def host(self) -> str:
        """``127.0.0.1:PORT``, the value for ``GCE_METADATA_HOST``."""
        assert self._server is not None, "start() first"
        return f"127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> FakeMetadata:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                fake.requests += 1
                status, body, content_type = fake.answer(self.path, dict(self.headers))
                data = body.encode()
                self.send_response(status)
                self.send_header("Metadata-Flavor", "Google")
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the VM went away during a long poll, as a preempted one does

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, args=(0.05,),
                         name=f"metadata-{self.name}",
                         daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self.preempt_release()
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def preempt(self) -> None:
        """The preemption notice: ``instance/preempted`` turns TRUE, long polls return."""
        self._preempted.set()
        self.preempt_release()

    def preempt_release(self) -> None:
        with self._changed:
            self._changed.notify_all()

    @property
    def preempted(self) -> bool:
        return self._preempted.is_set()

    # -- the answers -------------------------------------------------------------------------
    def answer(self, raw_path: str, headers: dict[str, str]) -> tuple[int, str, str]:
        """(status, body, content type) for a GET of ``raw_path``."""
        if headers.get("Metadata-Flavor", headers.get("metadata-flavor")) != "Google":
            return HTTPStatus.FORBIDDEN, "Missing Metadata-Flavor:Google header.", "text/plain"
        url = urlsplit(raw_path)
        if not url.path.startswith(PREFIX):
            return HTTPStatus.NOT_FOUND, "not found", "text/plain"
        path = url.path[len(PREFIX):].rstrip("/")
        query = parse_qs(url.query)
        if path == "instance/preempted":
            if query.get("wait_for_change", ["false"])[0].lower() == "true":
                timeout = min(float(query.get("timeout_sec", [LONG_POLL_CAP])[0]), LONG_POLL_CAP)
                with self._changed:
                    if not self._preempted.is_set():
                        self._changed.wait(timeout)
            return HTTPStatus.OK, "TRUE" if self.preempted else "FALSE", "text/plain"
        values = {
            "instance/name": self.name,
            "instance/hostname": f"{self.name}.c.{self.project}.internal",
            "instance/id": str(self.instance_id),
            "instance/zone": f"projects/123456789/zones/{self.zone}",
            "instance/maintenance-event": "NONE",
            "project/project-id": self.project,
            "project/numeric-project-id": "123456789",
            "instance/service-accounts/default/email": self.service_account,
            "instance/service-accounts/default/scopes":
                "https://www.googleapis.com/auth/devstorage.read_write",
            "instance/attributes": "\n".join(sorted(self.attributes)),
        }
        if path == "instance/service-accounts/default/token":
            token = {"access_token": f"fake-token-{self.name}", "expires_in": 3599,
                     "token_type": "Bearer"}
            return HTTPStatus.OK, json.dumps(token), "application/json"
        if path == "instance/service-accounts/default/identity":
            return self._identity(query)
        if path.startswith("instance/attributes/"):
            key = path[len("instance/attributes/"):]
            if key in self.attributes:
                return HTTPStatus.OK, self.attributes[key], "text/plain"
            return HTTPStatus.NOT_FOUND, "not found", "text/plain"
        if path in values:
            return HTTPStatus.OK, values[path], "text/plain"
        return HTTPStatus.NOT_FOUND, "not found", "text/plain"

    def _identity(self, query: dict[str, list[str]]) -> tuple[int, str, str]:
        """A Google-signed (here: the issuer-signed) JWT for ``audience``, as GCE mints one."""
        audience = query.get("audience", [""])[0]
        if self.identity is None:
            return HTTPStatus.NOT_FOUND, "not found", "text/plain"
        if not audience:
            return HTTPStatus.BAD_REQUEST, "non-empty audience parameter required", "text/plain"
        token = self.identity.token(
            audience, project=self.project, zone=self.zone, name=self.name,
            instance_id=self.instance_id, service_account=self.service_account,
            full=query.get("format", ["standard"])[0] == "full")
        return HTTPStatus.OK, token, "text/plain"
