"""How a GCE worker gets its key: only code on the VM itself can ask for it.

Instance metadata is readable by anyone with ``compute.instances.get`` (roles/viewer and
roles/compute.viewer included), so nothing secret goes there. Instead, at boot the worker

1. makes an ephemeral X25519 key pair;
2. asks its metadata server for an instance identity token (a JWT Google signs, whose
   ``google.compute_engine`` claims name the VM's project, zone and instance) with an audience
   that binds the run's bucket prefix and the SHA-256 of its public key (:func:`audience`);
3. writes both to ``workers/<vm>/key-request.json`` and waits for ``workers/<vm>/key.json``,
   which it takes only when signed with the run's grant key (its public half comes with the
   worker's settings in metadata: whoever can write to the bucket cannot answer in its place).

The coordinator (:class:`KeyGrantor`, from the channel's round) verifies the token with
google-auth's ``verify_token`` (Google's signature, audience, expiry), checks the issuer and that
the claims name the VM it created in its project and zone, then writes the worker's key
encrypted to that public key (:mod:`~expo_executor.protocol.worker_keys`). A bucket reader sees
a token bound to a public key whose private half never left the VM, and ciphertext; a metadata
reader sees nothing secret; another VM's token names another instance. Emulated runs verify
against the fake Compute's certificates (``<endpoint>/oauth2/v1/certs``), as real runs do
against Google's.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from expo_executor.gcp.retry import backoff_delay, retry_call
from expo_executor.protocol.bucket import Bucket
from expo_executor.protocol.keys import key_grant_key, key_request_key
from expo_executor.protocol.messages import MessageError, load
from expo_executor.protocol.worker_keys import (grant, new_key_pair, open_grant,
                                                public_key_digest, worker_key)

GOOGLE_CERTS_URL = "https://www.googleapis.com/oauth2/v1/certs"
ISSUERS = ("https://accounts.google.com", "accounts.google.com")
CERTS_TTL_S = 300.0  # Google rotates its keys over days; a miss refetches at once
MAX_REQUEST_BYTES = 16 * 1024
# The worker's first looks for its grant: the coordinator answers in its next round (every
# 0.25 s while its first VMs boot), and nothing runs on the VM before the key comes. A look
# every 0.1 s takes the grant within 0.1 s of that round's write (20 billed reads a VM, in
# its first 2 s). Then the looks thin out to the slow poll: a few reads more per VM than
# looking at the poll.
FIRST_KEY_POLL_S = 0.1
FAST_KEY_LOOKS = 20  # 2 s of looks every FIRST_KEY_POLL_S


def audience(bucket_url: str, public: bytes) -> str:
    """The identity token's audience: this run's bucket prefix and this public key, so that a
    token copied from a key request is worth nothing for another key pair or run."""
    return (f"https://expocloud.invalid/key-request?run={quote(bucket_url, safe='')}"
            f"&key={public_key_digest(public)}")


class KeyRefused(Exception):
    """A key request that gets no key: forged, for another VM, run or project, or malformed."""


class KeyNotYet(Exception):
    """A key request that cannot be checked yet (the VM's zone not known): looked at again."""


# -- the worker's side --------------------------------------------------------------------------
def obtain_key(bucket: Bucket, name: str, bucket_url: str, verify_key: bytes,
               identity: Callable[[str], str], give_up_after: float, poll: float,
               slow_poll: float,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], object] = time.sleep) -> bytes:
    """Ask the coordinator for worker ``name``'s key through the bucket and wait for it.

    ``identity(audience)`` is the metadata server's identity token (retried there). Bucket calls
    that fail are tried again with backoff; after ``give_up_after`` s without a key (the
    coordinator gone, or it refused this VM) this raises TimeoutError: the worker stops as it
    does when its coordinator falls silent. It looks for the grant as often as
    :func:`key_wait` says."""
    private, public = new_key_pair()
    request = json.dumps({"v": 1, "worker": name,
                          "public": base64.b64encode(public).decode(),
                          "token": identity(audience(bucket_url, public))}).encode()
    deadline = clock() + give_up_after
    sent, attempt, last = False, 0, None
    while clock() < deadline:
        try:
            if not sent:
                bucket.write(key_request_key(name), request)
                sent = True
            try:
                blob = bucket.read(key_grant_key(name), limit=MAX_REQUEST_BYTES)
                if blob is not None:
                    return open_grant(blob.data, name, private, verify_key)
            except MessageError as exc:  # an answer to an earlier request of this VM
                last = str(exc)  # (ours comes next), or a forgery: never taken
        except Exception as exc:  # noqa: BLE001 - the bucket layer retried already; wait more
            print(f"worker {name}: asking for its key (trying again): {type(exc).__name__}: "
                  f"{exc}", file=sys.stderr, flush=True)
        sleep(key_wait(attempt, poll, slow_poll))
        attempt += 1
    raise TimeoutError(f"no answer from the coordinator within "
                       f"{give_up_after:.0f} s" + (f" (last answer refused: {last})"
                                                   if last else ""))


def key_wait(attempt: int, poll: float, slow_poll: float) -> float:
    """The wait before the worker's look number ``attempt + 1`` for its grant: every
    ``FIRST_KEY_POLL_S`` for ``FAST_KEY_LOOKS`` looks, then doubling up to the slow poll."""
    fast = min(poll, FIRST_KEY_POLL_S)
    if attempt < FAST_KEY_LOOKS:
        return fast
    return backoff_delay(attempt - FAST_KEY_LOOKS + 1, base=fast, cap=max(poll, slow_poll),
                         rand=lambda: 1.0)


# -- the coordinator's side ---------------------------------------------------------------------
class KeyGrantor:
    """Answers the key requests of the run's VMs (the coordinator's channel calls it)."""

    def __init__(self, run_key: bytes, project: str, bucket_url: str,
                 zone_of: Callable[[str], str | None], certs_url: str = GOOGLE_CERTS_URL,
                 request: Any = None) -> None:
        self.run_key = run_key
        self.project = project
        self.bucket_url = bucket_url
        self.zone_of = zone_of
        self.certs_url = certs_url
        self._request = _CachedCerts(request, certs_url)

    def answer(self, name: str, data: bytes) -> bytes:
        """The grant for VM ``name``'s request ``data``; raises KeyRefused (one line: why)."""
        public, token = _parse(name, data)
        claims = self._verify(token, audience(self.bucket_url, public))
        engine = (claims.get("google") or {}).get("compute_engine") or {}
        if claims.get("iss") not in ISSUERS:
            raise KeyRefused(f"its token was issued by {claims.get('iss')!r}, not Google")
        zone = self.zone_of(name)
        if zone is None:  # its create answer lost: a listing finds it soon
            raise KeyNotYet(f"the zone of {name} is not known yet")
        expected = {"project_id": self.project, "instance_name": name, "zone": zone}
        for claim, value in expected.items():
            if engine.get(claim) != value:
                raise KeyRefused(f"its token names {claim} {engine.get(claim)!r}, not {value!r}")
        return grant(worker_key(self.run_key, name), name, public, self.run_key)

    def _verify(self, token: str, wanted: str) -> dict:
        """google-auth's check (Google's signature, audience, expiry); a miss with certificates
        from the cache is tried once more with fresh ones (Google rotates its keys)."""
        from google.auth import exceptions
        from google.oauth2 import id_token

        for fresh in (False, True):
            if fresh:
                if not self._request.cached:
                    break
                self._request.forget()
            try:
                return dict(id_token.verify_token(token, self._request, audience=wanted,
                                                  certs_url=self.certs_url,
                                                  clock_skew_in_seconds=30))
            except exceptions.TransportError:
                raise  # Google's certificates out of reach: the request is looked at again
            except (ValueError, exceptions.GoogleAuthError) as exc:
                reason = " ".join(str(exc).split())[:200]
        raise KeyRefused(f"its identity token does not verify: {reason}")


def _parse(name: str, data: bytes) -> tuple[bytes, str]:
    if len(data) > MAX_REQUEST_BYTES:
        raise KeyRefused(f"its request is {len(data)} bytes")
    try:
        body = load(data, "its request", MAX_REQUEST_BYTES)
        public = base64.b64decode(body["public"], validate=True)
        token, worker = body["token"], body["worker"]
    except (ValueError, KeyError, TypeError):
        raise KeyRefused("its request is malformed") from None
    if worker != name or len(public) != 32 or not isinstance(token, str):
        raise KeyRefused("its request is malformed or names another worker")
    return public, token


class _CachedCerts:
    """A google-auth transport that keeps the certificates a while and retries fetching them
    with backoff: a thousand VMs booting cost one fetch, not a thousand."""

    def __init__(self, inner: Any, certs_url: str) -> None:
        self._inner = inner
        self._url = certs_url
        self._cached: tuple[float, Any] | None = None
        self.cached = False  # the last answer came from the cache

    def forget(self) -> None:
        self._cached = None

    def __call__(self, url: str, method: str = "GET", **kwargs: Any) -> Any:
        from google.auth import exceptions

        if url == self._url and self._cached is not None \
                and time.monotonic() - self._cached[0] < CERTS_TTL_S:
            self.cached = True
            return self._cached[1]
        if self._inner is None:
            from google.auth.transport.requests import Request
            self._inner = Request()

        def fetch() -> Any:
            response = self._inner(url, method=method, timeout=10, **kwargs)
            if response.status >= 500 or response.status == 429:
                raise exceptions.TransportError(f"{url}: HTTP {response.status}")
            return response

        response = retry_call(fetch, is_transient=lambda e: isinstance(
            e, exceptions.TransportError), attempts=4, base=0.5, cap=4.0)
        self.cached = False
        if url == self._url and response.status == 200:
            self._cached = (time.monotonic(), response)
        return response
