"""Per-worker keys, and how the coordinator hands one to a worker without a shared secret.

The coordinator holds the run key; each worker holds only its own key, HKDF-SHA256 of the run
key with the worker's name as info (:func:`worker_key`). A worker signs its statuses and results
with it and verifies (and unseals) its own inbox with it, so a worker, or a job on it, can
speak only for itself: it cannot pass off a result as another worker's, nor read or forge
another worker's assignments. The coordinator derives every worker's key on demand, so it keeps
needing only the run key (a restarted coordinator that recovers the run key can talk to the
workers it left behind).

A local worker is handed its key in its environment by the coordinator that spawns it. A GCE
worker asks for it through the bucket (:mod:`expo_executor.engines.gce.key_channel`): it sends
an ephemeral X25519 public key, and the coordinator answers with the worker key encrypted to it
(:func:`grant` / :func:`open_grant`: X25519, HKDF-SHA256, AES-256-GCM), so the bucket only ever
holds ciphertext of it. The answer is signed (Ed25519) with a key the coordinator derives from
the run key; the worker checks it against the public half, which comes with its settings in
instance metadata (public: anyone may read it). Without that signature anyone who can write to
the bucket could answer first, with a key of their own choosing, encrypted to the worker's
public key (which the request shows), and then sign assignments the worker would obey.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os

from expo_executor.protocol.messages import MessageError, load

_WORKER_INFO = b"expocloud v1 worker key:"
_GRANT_INFO = b"expocloud v1 key grant:"
_SIGNING_INFO = b"expocloud v1 coordinator grant signing"


def worker_key(run_key: bytes, worker: str) -> bytes:
    """Worker ``worker``'s own key: HKDF-SHA256 of the run key, the worker's name as info."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_WORKER_INFO + worker.encode()).derive(run_key)


def public_key_digest(public: bytes) -> str:
    """SHA-256 (hex) of a raw X25519 public key: what a key request's identity token binds."""
    return hashlib.sha256(public).hexdigest()


def new_key_pair() -> tuple[object, bytes]:
    """An ephemeral X25519 key pair: (private key object, raw 32-byte public key)."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PrivateKey

    private = X25519PrivateKey.generate()
    return private, private.public_key().public_bytes_raw()


def _wrap_key(shared: bytes, worker: str, recipient: bytes, sender: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    info = _GRANT_INFO + worker.encode() + b"\0" + recipient + sender
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(shared)


def _signing_key(run_key: bytes) -> object:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    seed = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
                info=_SIGNING_INFO).derive(run_key)
    return Ed25519PrivateKey.from_private_bytes(seed)


def grant_verify_key(run_key: bytes) -> bytes:
    """The public key (raw Ed25519, 32 bytes) that checks the run's key grants: not secret."""
    return _signing_key(run_key).public_key().public_bytes_raw()  # type: ignore[attr-defined]


def _signed_part(worker: str, recipient: bytes, sender: bytes, sealed: bytes) -> bytes:
    return b"\0".join([_GRANT_INFO, worker.encode(), recipient, sender, sealed])


def grant(key: bytes, worker: str, recipient: bytes, run_key: bytes) -> bytes:
    """``key`` encrypted to the X25519 public key ``recipient`` for worker ``worker``: a fresh
    sender key pair, the shared secret through HKDF, AES-256-GCM bound to the worker's name;
    signed with the run's grant signing key."""
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    private, sender = new_key_pair()
    shared = private.exchange(X25519PublicKey.from_public_bytes(recipient))  # type: ignore[attr-defined]
    nonce = os.urandom(12)
    sealed = nonce + AESGCM(_wrap_key(shared, worker, recipient, sender)).encrypt(
        nonce, key, worker.encode())
    signature = _signing_key(run_key).sign(  # type: ignore[attr-defined]
        _signed_part(worker, recipient, sender, sealed))
    return json.dumps({"v": 1, "worker": worker, "sender": _b64(sender),
                       "sealed": _b64(sealed), "signature": _b64(signature)}).encode()


def open_grant(data: bytes, worker: str, private: object, verify_key: bytes) -> bytes:
    """The key :func:`grant` encrypted to ``private``'s public key for ``worker`` and signed
    with the key ``verify_key`` checks; raises MessageError for anything else (malformed, for
    another worker or key pair, tampered, not signed by the run's coordinator)."""
    from cryptography.exceptions import InvalidSignature, InvalidTag
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
    from cryptography.hazmat.primitives.asymmetric.x25519 import X25519PublicKey
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        body = load(data, f"key grant for {worker}")
        sender = base64.b64decode(body["sender"], validate=True)
        raw = base64.b64decode(body["sealed"], validate=True)
        signature = base64.b64decode(body["signature"], validate=True)
        recipient = private.public_key().public_bytes_raw()  # type: ignore[attr-defined]
        Ed25519PublicKey.from_public_bytes(verify_key).verify(
            signature, _signed_part(worker, recipient, sender, raw))
        shared = private.exchange(X25519PublicKey.from_public_bytes(sender))  # type: ignore[attr-defined]
        return AESGCM(_wrap_key(shared, worker, recipient, sender)).decrypt(
            raw[:12], raw[12:], worker.encode())
    except InvalidSignature:
        raise MessageError(f"key grant for {worker}: not signed by this run's coordinator") \
            from None
    except (ValueError, KeyError, TypeError, InvalidTag):
        raise MessageError(f"key grant for {worker}: does not open with this worker's key "
                           "pair") from None


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
