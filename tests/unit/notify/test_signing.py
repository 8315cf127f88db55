"""A notification's signature: what a receiver computes from the body and its secret."""

from __future__ import annotations

import hashlib
import hmac

from expo_executor.notify.signing import sign, verify


def test_the_signature_is_the_hmac_sha256_of_the_exact_body() -> None:
    body, secret = b'{"event":"run_end"}', b"s3cret"
    assert sign(body, secret) == "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    assert verify(body, secret, sign(body, secret))


def test_another_body_secret_or_no_header_does_not_verify() -> None:
    body, secret = b'{"event":"run_end"}', b"s3cret"
    header = sign(body, secret)
    assert not verify(body + b" ", secret, header)
    assert not verify(body, b"other", header)
    assert not verify(body, secret, None)
