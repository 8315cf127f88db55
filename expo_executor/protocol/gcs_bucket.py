"""The bucket contract over a ``gs://bucket/prefix`` URL, with google-cloud-storage.

google-cloud-storage is imported lazily (in the constructor), so importing expo_executor stays
cheap and works where the library is not installed.

Retries are ours, not the client's: every call passes ``retry=None`` and goes through
:func:`expo_executor.gcp.retry.retry_call` (exponential backoff, full jitter, its defaults),
and Google's error classifier decides (:func:`expo_executor.gcp.errors.is_transient_storage`).
Transient: 429, 500, 502, 503, 504, connection errors, timeouts, and a download whose body fails
the client's CRC32C check against ``x-goog-hash`` (corrupted on the way: read again). Not
transient: everything else (403, 404 on write, 412 ...).

The coordinator calls one bucket from several threads at once (``coordinator/channel.py``): the
operation counts are kept under a lock, and the HTTP session keeps enough connections open
(``CONNECTIONS``) that parallel calls reuse them. A listing asks only for what the contract
returns (``LIST_FIELDS``: each object's name and generation), not every object's metadata.

Reads are bounded (``bucket_contract``): a download streams into a sink that stops it past the
limit, so at most the limit and one chunk (8 KiB) of an oversized object is ever fetched, and
one GET still brings body, generation and the client's CRC32C check (a ranged GET would skip
that check; a metadata GET first would double every read's requests). A poll of an unchanged
object (``if_generation_not_match``) is answered 304 from its metadata, without a body.

Files (``download_to``, ``upload_from``: a job's inputs and outputs, which may be many GB on a
VM of a few GB of memory) stream between disk and storage in bounded memory, as Snakemake's
GCS storage plugin moves them: a download is one streamed GET written to disk as it comes
(with the client's CRC32C check over the whole body), an upload above ``MULTIPART_MAX`` is a
resumable session sent ``UPLOAD_CHUNK`` bytes per request from the file. A transient failure
retries the whole transfer, as any call is retried.

A conditional write whose response was lost may have landed: its retry then meets 412. When a
write had an earlier, transiently failed attempt and then gets 412, the object is read back;
if it holds exactly our bytes the write counts as ours (identical bytes from another writer
are indistinguishable, and the outcome is the same).
"""

from __future__ import annotations

import math
import os
import random
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from expo_executor.gcp.errors import is_transient_storage
from expo_executor.gcp.retry import DEFAULT as BACKOFF
from expo_executor.gcp.retry import retry_call
from expo_executor.protocol.bucket_contract import (MAX_READ_BYTES, Blob, ObjectTooLarge,
                                                    PreconditionFailed)

DEFAULT_TIMEOUT = (10.0, 60.0)  # (connect, read) seconds, per request
CONNECTIONS = 32  # kept open per host: more than the coordinator's parallel calls
LIST_FIELDS = "items(name,generation),nextPageToken"  # a listing's partial response
# Files: up to MULTIPART_MAX bytes go in one request (the client's own threshold); larger ones
# in a resumable session of UPLOAD_CHUNK-byte requests (a multiple of 256 KiB, as GCS requires;
# the client's default is 100 MiB, held in memory per request)
MULTIPART_MAX = 8 * 1024 * 1024
UPLOAD_CHUNK = 8 * 1024 * 1024


def parse_gs_url(url: str) -> tuple[str, str]:
    """``gs://bucket/some/prefix`` -> ("bucket", "some/prefix/") (prefix "" for the bucket root)."""
    if not url.startswith("gs://"):
        raise ValueError(f"not a gs:// URL: {url!r}")
    rest = url[len("gs://"):]
    name, _, prefix = rest.partition("/")
    if not name:
        raise ValueError(f"no bucket name in {url!r}")
    prefix = prefix.strip("/")
    return name, (prefix + "/") if prefix else ""


class GcsBucket:
    """A GCS prefix; keys are relative to it. Same contract as :class:`LocalBucket`."""

    def __init__(
        self,
        url: str,
        *,
        project: str | None = None,
        endpoint: str | None = None,
        client: Any = None,
        attempts: int = BACKOFF.attempts,
        base: float = BACKOFF.base,
        cap: float = BACKOFF.cap,
        timeout: float | tuple[float, float] = DEFAULT_TIMEOUT,
        page_size: int | None = None,
        sleep: Callable[[float], object] = time.sleep,
        rand: Callable[[], float] = random.random,
    ) -> None:
        from google.api_core import exceptions as gexc
        from google.cloud import storage

        self._gexc = gexc
        self.url = url
        self.bucket_name, self.prefix = parse_gs_url(url)
        if client is None:
            endpoint = endpoint or os.environ.get("STORAGE_EMULATOR_HOST") or None
            if endpoint:
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(
                    project=project or "expocloud-test",
                    credentials=AnonymousCredentials(),
                    client_options={"api_endpoint": endpoint},
                )
            else:
                client = storage.Client(project=project)
        self.client = client
        _widen_connection_pool(client)
        self._bucket = client.bucket(self.bucket_name)
        self._retry = {"is_transient": is_transient_storage, "attempts": attempts, "base": base,
                       "cap": cap, "sleep": sleep, "rand": rand}
        self.timeout = timeout
        self.page_size = page_size  # None: the server's default (1000 objects per page on GCS)
        # storage operations by GCS price class, one per HTTP attempt (retries cost too)
        self.ops: Counter[str] = Counter()
        self._ops_lock = threading.Lock()

    # -- helpers -------------------------------------------------------------------------

    @property
    def requests(self) -> int:
        return sum(self.ops.values())

    def _count(self, price_class: str, n: int = 1) -> None:
        with self._ops_lock:
            self.ops[price_class] += n

    def _name(self, key: str) -> str:
        if not key or key.startswith("/") or ".." in key.split("/"):
            raise ValueError(f"bad bucket key {key!r}")
        return self.prefix + key

    def _call(self, fn: Callable[[], Any]) -> Any:
        return retry_call(fn, **self._retry)

    def _download(self, name: str, limit: int | None = MAX_READ_BYTES,
                  unless: int | None = None) -> Blob | None:
        """One attempt: data and generation in one GET (the generation comes from headers).

        Bounded: the body streams into a :class:`_BoundedSink`, which stops the download (the
        response is closed, the rest never read) once it passes ``limit``; the object's size
        and generation then come from its metadata, for the error. ``unless``: sent as
        ``ifGenerationNotMatch``, so an object still at that generation is answered 304 from
        its metadata, with no body."""
        blob = self._bucket.blob(name)
        self._count("B")
        sink = _BoundedSink(limit)
        try:
            blob.download_to_file(sink, retry=None, timeout=self.timeout,
                                  if_generation_not_match=unless)
        except self._gexc.NotFound:
            return None
        except self._gexc.NotModified:
            return Blob(b"", int(unless or 0), unchanged=True)
        except _OverLimit:
            return self._too_large(name, limit or 0)
        if blob.generation is None:
            # A server that does not send x-goog-generation (real GCS does): pin the generation
            # from the metadata, then fetch exactly that generation.
            return self._download_pinned(name, limit, unless)
        return Blob(sink.data(), int(blob.generation))

    def _too_large(self, name: str, limit: int) -> Blob | None:
        """Raise ObjectTooLarge for object ``name``, with its size and generation from its
        metadata (one more class B request, only for an object that should not be there)."""
        self._count("B")
        meta = self._bucket.get_blob(name, retry=None, timeout=self.timeout)
        if meta is None:
            return None
        raise ObjectTooLarge(name[len(self.prefix):], int(meta.size or 0), limit,
                             int(meta.generation))

    def _download_pinned(self, name: str, limit: int | None,
                         unless: int | None) -> Blob | None:
        while True:
            self._count("B")
            meta = self._bucket.get_blob(name, retry=None, timeout=self.timeout)
            if meta is None:
                return None
            generation = int(meta.generation)
            if generation == unless:
                return Blob(b"", generation, unchanged=True)
            if limit is not None and int(meta.size or 0) > limit:
                raise ObjectTooLarge(name[len(self.prefix):], int(meta.size), limit, generation)
            self._count("B")
            sink = _BoundedSink(limit)
            try:
                self._bucket.blob(name, generation=generation).download_to_file(
                    sink, retry=None, timeout=self.timeout)
            except self._gexc.NotFound:
                continue  # replaced or deleted in between: look again
            except _OverLimit:  # the metadata said otherwise: not a GCS we know
                raise ObjectTooLarge(name[len(self.prefix):], None, limit or 0,
                                     generation) from None
            return Blob(sink.data(), generation)

    def _upload(self, name: str, data: bytes, if_generation_match: int | None) -> int:
        """One upload attempt; returns the new generation. Separate so tests can inject faults."""
        blob = self._bucket.blob(name)
        self._count("A")
        blob.upload_from_string(
            data,
            content_type="application/octet-stream",
            if_generation_match=if_generation_match,
            retry=None,
            timeout=self.timeout,
        )
        return int(blob.generation)

    # -- the contract ----------------------------------------------------------------------

    def read(self, key: str, limit: int | None = MAX_READ_BYTES,
             if_generation_not_match: int | None = None) -> Blob | None:
        name = self._name(key)
        return self._call(lambda: self._download(name, limit, if_generation_not_match))

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        name = self._name(key)
        data = bytes(data)
        tries = 0

        def attempt() -> int:
            nonlocal tries
            tries += 1
            try:
                return self._upload(name, data, if_generation_match)
            except self._gexc.PreconditionFailed:
                if if_generation_match is not None and tries > 1:
                    # An earlier attempt failed transiently; it may have landed.
                    try:
                        current = self._download(name, limit=len(data))
                    except ObjectTooLarge:  # longer than ours: not ours
                        current = None
                    if current is not None and current.data == data:
                        return current.generation
                raise PreconditionFailed(key) from None

        return self._call(attempt)

    def download_to(self, key: str, path: str | os.PathLike[str]) -> int | None:
        """Object ``key`` into file ``path`` (its folder must exist), streamed to disk in
        chunks (never whole in memory); returns its size, or None when absent. The file
        appears whole or not at all: it lands in a temporary file beside it first."""
        name, path = self._name(key), Path(path)

        def attempt() -> int | None:
            self._count("B")
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
            try:
                with os.fdopen(fd, "wb") as handle:
                    self._bucket.blob(name).download_to_file(handle, retry=None,
                                                             timeout=self.timeout)
                    size = handle.tell()
                os.replace(tmp, path)
                return size
            except self._gexc.NotFound:
                return None
            finally:
                if os.path.exists(tmp):
                    os.unlink(tmp)

        return self._call(attempt)

    def upload_from(self, key: str, path: str | os.PathLike[str],
                    if_generation_match: int | None = None) -> int:
        """File ``path`` into object ``key``, read from disk a chunk at a time; returns the new
        generation. Each attempt counts the requests a whole transfer takes: one, or a
        resumable session's start and one per ``UPLOAD_CHUNK``. A precondition that fails
        raises PreconditionFailed, also after a lost answer to an attempt that landed (no read
        back, unlike ``write``: a create-only file is content-addressed, there either way)."""
        name, path = self._name(key), str(path)

        def attempt() -> int:
            size = os.path.getsize(path)
            self._count("A", 1 if size <= MULTIPART_MAX else 1 + math.ceil(size / UPLOAD_CHUNK))
            blob = self._bucket.blob(name, chunk_size=UPLOAD_CHUNK)
            try:
                blob.upload_from_filename(path, content_type="application/octet-stream",
                                          if_generation_match=if_generation_match,
                                          retry=None, timeout=self.timeout)
            except self._gexc.PreconditionFailed:
                raise PreconditionFailed(key) from None
            return int(blob.generation)

        return self._call(attempt)

    def list(self, prefix: str) -> dict[str, int]:
        if prefix and (prefix.startswith("/") or ".." in prefix.split("/")):
            raise ValueError(f"bad bucket prefix {prefix!r}")
        full = self.prefix + prefix

        def attempt() -> dict[str, int]:
            found: dict[str, int] = {}
            iterator = self.client.list_blobs(
                self._bucket, prefix=full or None, page_size=self.page_size,
                fields=LIST_FIELDS, retry=None, timeout=self.timeout,
            )
            pages = iterator.pages
            while True:
                self._count("A")
                try:
                    page = next(pages)
                except StopIteration:
                    self._count("A", -1)  # the end of the pages costs no request
                    break
                for blob in page:
                    found[blob.name[len(self.prefix):]] = int(blob.generation)
            return found

        return self._call(attempt)

    def delete(self, key: str) -> None:
        name = self._name(key)

        def attempt() -> None:
            self._count("free")
            try:
                self._bucket.blob(name).delete(retry=None, timeout=self.timeout)
            except self._gexc.NotFound:
                pass

        self._call(attempt)


class _OverLimit(Exception):
    """A download passed its limit (raised by the sink, inside the client's download)."""


class _BoundedSink:
    """Where a download's body goes: kept while it is at most ``limit`` bytes (None: no
    limit); the chunk that passes the limit raises, which ends the download there."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0

    def write(self, chunk: bytes) -> int:
        self.size += len(chunk)
        if self.limit is not None and self.size > self.limit:
            self.parts = []
            raise _OverLimit()
        self.parts.append(bytes(chunk))
        return len(chunk)

    def data(self) -> bytes:
        return b"".join(self.parts)


def _widen_connection_pool(client: Any) -> None:
    """Keep ``CONNECTIONS`` connections per host in the client's session (requests keeps 10:
    more parallel calls would open and drop a connection each time)."""
    session = getattr(client, "_http", None)
    if not hasattr(session, "mount"):
        return
    from requests.adapters import HTTPAdapter

    for scheme in ("https://", "http://"):
        session.mount(scheme, HTTPAdapter(pool_connections=CONNECTIONS,
                                          pool_maxsize=CONNECTIONS))
