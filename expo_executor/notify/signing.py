"""The signature of a notification: an HMAC-SHA256 of the exact body under the user's secret,
sent as ``X-Expocloud-Signature: sha256=<hex>``, so that a receiver can tell a notification of
theirs from anyone's POST to its URL.

Why a secret of the user's and not the run key: the run key is the root of the workers' trust
(each worker's key derives from it, and with it one could forge a worker's results or read its
sealed inbox), it is new for every run (a receiver could not know it in advance) and it is
gone when the run ends. The notification secret is shared with the receiver only, lasts across
runs, and can do nothing but sign notifications.
"""

from __future__ import annotations

import hashlib
import hmac

HEADER = "X-Expocloud-Signature"
PREFIX = "sha256="


def sign(body: bytes, secret: bytes) -> str:
    """The header's value for ``body``."""
    return PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()


def verify(body: bytes, secret: bytes, header: str | None) -> bool:
    """Whether ``header`` is ``body``'s signature under ``secret`` (what a receiver checks;
    compared in constant time)."""
    return header is not None and hmac.compare_digest(sign(body, secret), header.strip())
