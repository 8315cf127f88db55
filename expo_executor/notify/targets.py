"""Where a notification goes: an HTTPS POST to the user's URL (:class:`Webhook`) or the user's
command with the JSON on its stdin (:class:`Command`). One call each, bounded by a timeout; the
retries are the sender's.

What they say of themselves (:attr:`name`, and a failure's message) is what the log may show:
a webhook's scheme and host only (a Slack webhook's path is its secret), a command's program
only; never the body, the secret or the receiver's answer.
"""

from __future__ import annotations

import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Protocol

from expo_executor.core.notices import SECRET_ENV
from expo_executor.notify.signing import HEADER, sign

RETRY_STATUSES = frozenset({408, 425, 429})  # a 4xx that may pass later; every 5xx may too


class SendFailed(Exception):
    """One call failed: ``retry`` says whether another attempt may do better. The message
    names no secret (see the module's docstring)."""

    def __init__(self, message: str, retry: bool = True) -> None:
        super().__init__(message)
        self.retry = retry


class Target(Protocol):
    """Something a notification body is sent to, in one bounded call."""

    name: str

    def send(self, body: bytes, timeout: float) -> None:
        """Deliver ``body`` within ``timeout`` s, or raise :class:`SendFailed`."""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is not followed: it could send the body elsewhere, or over plain HTTP."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # type: ignore[no-untyped-def]
        return None


def public_name(url: str) -> str:
    """What the log shows of a notification URL: its scheme and host (and port)."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or ''}" + (f":{parts.port}" if parts.port else "")


@dataclass(frozen=True)
class Webhook:
    """POSTs the body to ``url``, signed with ``secret``."""

    url: str
    secret: bytes = field(repr=False)

    @property
    def name(self) -> str:
        return public_name(self.url)

    def send(self, body: bytes, timeout: float) -> None:
        request = urllib.request.Request(self.url, data=body, method="POST", headers={
            "Content-Type": "application/json", "User-Agent": "expocloud-notify",
            HEADER: sign(body, self.secret)})
        opener = urllib.request.build_opener(_NoRedirect)
        try:
            with opener.open(request, timeout=timeout) as answer:
                answer.read(4096)
        except urllib.error.HTTPError as exc:
            retry = exc.code >= 500 or exc.code in RETRY_STATUSES
            raise SendFailed(f"HTTP {exc.code}", retry) from None
        except (OSError, ValueError) as exc:  # refused, unreachable, timed out, TLS
            reason = getattr(exc, "reason", exc)
            raise SendFailed(type(reason).__name__ if not isinstance(reason, str)
                             else reason) from None


@dataclass(frozen=True)
class Command:
    """Runs ``argv`` (no shell: nothing of the payload is ever interpreted) with the body on its
    stdin; a non-zero exit is a failure. The signing secret is not in its environment."""

    argv: tuple[str, ...]

    @property
    def name(self) -> str:
        return os.path.basename(self.argv[0])

    def send(self, body: bytes, timeout: float) -> None:
        env = {k: v for k, v in os.environ.items() if k != SECRET_ENV}
        try:
            done = subprocess.run(self.argv, input=body, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=timeout, env=env,
                                  check=False)
        except subprocess.TimeoutExpired:
            raise SendFailed(f"no exit within {timeout:g} s") from None
        except OSError as exc:
            raise SendFailed(f"cannot run it ({exc.strerror or type(exc).__name__})",
                             retry=False) from None
        if done.returncode != 0:
            raise SendFailed(f"exit status {done.returncode}")
