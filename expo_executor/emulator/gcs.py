"""gcp-storage-emulator in a subprocess, made faithful to GCS preconditions.

The stock emulator ignores ``ifGenerationMatch``, ``ifGenerationNotMatch``,
``ifMetagenerationMatch`` and ``ifMetagenerationNotMatch``: a second create-only write
overwrites. Run as a script, this module wraps the emulator's object handlers (insert,
resumable upload chunks, XML upload, patch, delete) so that a request whose precondition does
not hold gets HTTP 412 with GCS's JSON error body (reason ``conditionNotMet``). The emulator
serves one request at a time, so the check and the write are atomic. Downloads also get the
``x-goog-generation``/``x-goog-metageneration`` headers that real GCS sends and its read
preconditions (304 Not Modified for a failed ``ifGenerationNotMatch``), and listings
honour ``maxResults``/``pageToken`` (the stock emulator returns everything in one page) and
``fields`` (a partial response: only the fields named, as GCS answers), and a
bucket's IAM policy is kept and applied as GCS does (``gcs_iam.py``: the stock emulator grants
every permission asked about).

``--bare`` runs the stock emulator (no wrapper), for tests that show the wrapper matters.
It lives in the package, not the tests, because ``expocloud emulator`` (profiles/gce-emulated)
serves it too. ``EmulatorProcess`` runs it in a child process; ``fresh_bucket(endpoint)``
creates a new bucket, set up as docs/gce.md sets one up (the emulated worker account holds the
``expocloudStorage`` role on it), and returns its name.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Any

from expo_executor.emulator.catalogue import PROJECT, WORKER, default_bucket_policy
from expo_executor.emulator.partial_response import field_tree, partial_response

Handler = Callable[..., Any]  # one of the emulator's request handlers
PRECONDITIONS = ("ifGenerationMatch", "ifGenerationNotMatch",
                 "ifMetagenerationMatch", "ifMetagenerationNotMatch")


def precondition_failure(query: dict, current: dict | None) -> str | None:
    """Why the request's preconditions fail against the live object ``current`` (None: absent)."""
    for param in PRECONDITIONS:
        values = query.get(param)
        if not values:
            continue
        try:
            wanted = int(values[0])
        except ValueError:
            return f"invalid {param} {values[0]!r}"
        field = "generation" if "Generation" in param else "metageneration"
        actual = int(current[field]) if current is not None else None
        if param.endswith("NotMatch"):
            # GCS: with no live object a NotMatch precondition fails.
            if actual is None or actual == wanted:
                return f"{param}={wanted} failed: current {field} is {actual}"
        else:
            # ifGenerationMatch=0 means "no live object"; ifMetagenerationMatch needs one.
            if wanted == 0 and field == "generation":
                if actual is not None:
                    return f"{param}=0 failed: object exists with generation {actual}"
            elif actual != wanted:
                return f"{param}={wanted} failed: current {field} is {actual}"
    return None


# -- the wrapper: runs inside the emulator's process ----------------------------------------------


def _current_object(storage: Any, bucket_name: str, object_name: str) -> dict | None:
    """The live object's metadata, or None when absent."""
    from gcp_storage_emulator.exceptions import NotFound

    try:
        return storage.get_file_obj(bucket_name, object_name)
    except NotFound:
        return None


def _insert_target(request: Any) -> tuple[str, str] | None:
    """The bucket and object an insert (simple, multipart or resumable start) writes."""
    bucket = request.params.get("bucket_name")
    if "upload_id" in request.query:
        return None  # a resumable chunk sent with POST: checked in upload_partial
    kind = (request.query.get("uploadType") or [""])[0]
    if "name" in request.query:
        return bucket, request.query["name"][0]
    if kind == "multipart":
        return bucket, (request.data.get("meta") or {}).get("name")
    if kind == "resumable" and request.data:
        return bucket, request.data.get("name")
    return None


def _target_of(request: Any, storage: Any, handler_name: str) -> tuple[str, str] | None:
    """The bucket and object a request to ``handler_name`` would change, if it can be told."""
    if handler_name == "insert":
        return _insert_target(request)
    bucket = request.params.get("bucket_name")
    if handler_name == "upload_partial":
        upload_id = (request.query.get("upload_id") or [None])[0]
        try:
            return bucket, storage.get_resumable_file_obj(upload_id)["name"]
        except Exception:  # noqa: BLE001 - let the handler answer for unknown uploads
            return None
    return bucket, request.params.get("object_id")


def _answer_precondition_failed(response: Any, why: str) -> None:
    """HTTP 412 with the JSON error body GCS sends (reason ``conditionNotMet``)."""
    response.status = HTTPStatus.PRECONDITION_FAILED
    response.json({"error": {
        "code": 412,
        "message": f"At least one of the pre-conditions you specified did not hold. ({why})",
        "errors": [{"domain": "global", "reason": "conditionNotMet",
                    "message": "Precondition Failed",
                    "locationType": "header", "location": "If-Match"}],
    }})


def _guard(handler: Handler, handler_name: str) -> Handler:
    """``handler``, answering 412 instead when the request's preconditions do not hold."""
    def guarded(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        if any(p in request.query for p in PRECONDITIONS):
            target = _target_of(request, storage, handler_name)
            if target and target[1]:
                why = precondition_failure(request.query, _current_object(storage, *target))
                if why is not None:
                    _answer_precondition_failed(response, why)
                    return None
        return handler(request, response, storage, *args, **kwargs)

    guarded.__name__ = f"faithful_{handler_name}"
    return guarded


def _with_generation_headers(handler: Handler) -> Handler:
    """A download handler that also sends ``x-goog-generation``/``x-goog-metageneration`` and
    honours preconditions as GCS does on a read: a failed ``ifGenerationNotMatch`` (or
    ``ifMetagenerationNotMatch``) is 304 Not Modified with no body, a failed ``...Match`` 412."""
    def download(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        if request.params.get("object_id") and any(p in request.query for p in PRECONDITIONS):
            current = _current_object(storage, request.params["bucket_name"],
                                      request.params["object_id"])
            why = precondition_failure(request.query, current) if current is not None else None
            if why is not None and "NotMatch" in why.split("=")[0]:
                response.status = HTTPStatus.NOT_MODIFIED
                return None
            if why is not None:
                _answer_precondition_failed(response, why)
                return None
        result = handler(request, response, storage, *args, **kwargs)
        if response.status == HTTPStatus.OK and request.params.get("object_id"):
            obj = _current_object(storage, request.params["bucket_name"],
                                  request.params["object_id"])
            if obj is not None:
                response["x-goog-generation"] = str(obj["generation"])
                response["x-goog-metageneration"] = str(obj["metageneration"])
        return result

    return download


def page_of(body: dict, limit: int, token: str | None) -> dict:
    """One page of a listing's ``body``: at most ``limit`` items by name after ``token``, and
    ``nextPageToken`` when more follow, as GCS pages."""
    items = sorted(body.get("items") or [], key=lambda item: item["name"])
    if token:
        items = [item for item in items if item["name"] > token]
    limit = max(1, limit)
    if len(items) > limit:
        items = items[:limit]
        body["nextPageToken"] = items[-1]["name"]
    body["items"] = items
    return body


def _with_paging(handler: Handler) -> Handler:
    """A listing handler that honours ``maxResults``/``pageToken`` and ``fields`` (the stock
    one ignores them)."""
    def ls(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        result = handler(request, response, storage, *args, **kwargs)
        limit = (request.query.get("maxResults") or [None])[0]
        fields = (request.query.get("fields") or [None])[0]
        if response.status != HTTPStatus.OK or not (limit or fields):
            return result
        body = json.loads(response._content)
        if limit:
            token = (request.query.get("pageToken") or [None])[0]
            body = page_of(body, int(limit), token)
        if fields:
            try:
                body = partial_response(body, field_tree(fields))
            except ValueError as exc:
                response.status = HTTPStatus.BAD_REQUEST
                body = {"error": {"code": 400, "message": str(exc),
                                  "errors": [{"reason": "invalidParameter",
                                              "message": str(exc)}]}}
        response.json(body)
        return result

    return ls


def _install_wrapper() -> None:
    """Swap the emulator's object handlers for the faithful ones, in its routing table too."""
    from gcp_storage_emulator import server
    from gcp_storage_emulator.handlers import buckets, objects

    from expo_executor.emulator.gcs_iam import REPLACING

    originals = {name: getattr(objects, name)
                 for name in ("insert", "upload_partial", "xml_upload", "patch", "delete")}
    replacements = {fn: _guard(fn, name) for name, fn in originals.items()}
    replacements[objects.download] = _with_generation_headers(objects.download)
    replacements[objects.ls] = _with_paging(objects.ls)
    replacements.update({getattr(buckets, name): fn for name, fn in REPLACING.items()})
    # The routing table holds the functions themselves; the Router also falls back to
    # ``objects.insert`` by attribute, so patch both.
    for _regex, handlers in server.HANDLERS:
        for method, fn in list(handlers.items()):
            if fn in replacements:
                handlers[method] = replacements[fn]
    objects.insert = replacements[originals["insert"]]
    # ``get?alt=media`` calls ``download`` by module name.
    objects.download = replacements[objects.download]


def _not_a_missing_object(record: Any) -> bool:
    """False for the stock emulator's two ERROR lines on every read of a missing object: a 404
    is an answer, not an error (a new worker looks for its key ten times a second until it is
    granted), and the lines buried the emulator's real errors in its terminal."""
    return record.funcName != "get_file"


def _serve(bare: bool, port: int = 0) -> None:  # runs inside the emulator's process
    import logging
    import signal
    import time
    from http import server as http_server

    from gcp_storage_emulator.server import create_server

    logging.getLogger("gcp_storage_emulator").setLevel(logging.ERROR)
    logging.getLogger("gcp_storage_emulator.storage").addFilter(_not_a_missing_object)
    http_server.HTTPServer.request_queue_size = 128  # many racing clients, one thread
    if not bare:
        _install_wrapper()
    srv = create_server("127.0.0.1", port, in_memory=True)
    srv.start()
    port = srv._api._httpd.server_address[1]
    print(f"PORT {port}", flush=True)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    try:
        while not stop:
            time.sleep(0.1)
    finally:
        srv.stop()


class EmulatorProcess:
    """The emulator in a child process on a free loopback port, in memory."""

    def __init__(self, bare: bool = False, port: int = 0, stderr: int | None = None) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "expo_executor.emulator.gcs",
             "--bare" if bare else "--faithful", "--port", str(port)],
            stdout=subprocess.PIPE, stderr=stderr, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line.startswith("PORT "):
            self.stop()
            raise RuntimeError(f"gcp-storage-emulator did not start (said {line!r})")
        self.endpoint = f"http://127.0.0.1:{int(line.split()[1])}"
        with urllib.request.urlopen(self.endpoint + "/", timeout=10) as answer:
            assert answer.read() == b"OK"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()


def fresh_bucket(endpoint: str, name: str | None = None, worker: str | None = WORKER) -> str:
    """Create a bucket (with a new name unless given) on the emulator and return the name.

    ``worker`` (the emulated profile's worker account by default; None: nobody) gets the
    ``expocloudStorage`` role on it, as docs/gce.md's one-time setup grants it."""
    name = name or f"b-{uuid.uuid4().hex[:16]}"
    _send(endpoint, "POST", "/storage/v1/b?project=expocloud-test", {"name": name})
    if worker is not None:
        bindings = [*default_bucket_policy(PROJECT),
                    {"role": f"projects/{PROJECT}/roles/expocloudStorage",
                     "members": [f"serviceAccount:{worker}"]}]
        _send(endpoint, "PUT", f"/storage/v1/b/{name}/iam", {"bindings": bindings})
    return name


def _send(endpoint: str, method: str, path: str, body: dict) -> None:
    request = urllib.request.Request(endpoint + path, data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"},
                                     method=method)
    with urllib.request.urlopen(request, timeout=10) as answer:
        answer.read()


if __name__ == "__main__":
    _args = sys.argv[1:]
    _serve(bare="--bare" in _args,
           port=int(_args[_args.index("--port") + 1]) if "--port" in _args else 0)
