"""Messages through the bucket: versioned JSON, bounded in size, checked against a schema.

Never pickle: whoever can write to the bucket must not be able to run code by writing a message.
Assignments additionally carry an HMAC with a per-run key that reaches workers out of band (the
environment locally, instance metadata on GCE), so write access to the bucket alone cannot make
a worker run a command.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

VERSION = 1
MAX_BYTES = 4 * 1024 * 1024

# kind -> field -> accepted types; every listed field is required.
SCHEMAS: dict[str, dict[str, tuple[type, ...]]] = {
    "inbox": {"seq": (int,), "jobs": (dict,), "cancel": (list,), "drain": (bool,)},
    "job": {"argv": (list,), "cwd": (str, type(None)), "env": (dict,), "deadline_s": (float, int, type(None)),
            "cpus": (int,)},
    "status": {"worker": (str,), "seq_seen": (int,), "time": (float, int), "running": (list,),
               "slots": (int,), "state": (str,)},
    "result": {"key": (str,), "worker": (str,), "outcome": (str,), "returncode": (int, type(None)),
               "started": (float, int), "ended": (float, int), "reason": (str, type(None)),
               "log_tail": (str,)},
}
RESULT_OUTCOMES = ("ok", "failed", "timeout", "cancelled", "preempted")


class MessageError(ValueError):
    """A message that is not ours: malformed, too large, of another version, or forged."""


def check(kind: str, body: Any) -> dict:
    """Raise MessageError unless ``body`` has every field of ``kind`` with an accepted type."""
    if not isinstance(body, dict):
        raise MessageError(f"{kind}: not an object")
    for name, types in SCHEMAS[kind].items():
        if name not in body:
            raise MessageError(f"{kind}: missing field {name!r}")
        value = body[name]
        if isinstance(value, bool) and bool not in types:
            raise MessageError(f"{kind}: field {name!r} has the wrong type")
        if not isinstance(value, types):
            raise MessageError(f"{kind}: field {name!r} has the wrong type")
    if kind == "inbox":
        for job in body["jobs"].values():
            check("job", job)
            if not all(isinstance(a, str) for a in job["argv"]) or not job["argv"]:
                raise MessageError("job: argv must be a non-empty list of strings")
            if not isinstance(job.get("stage", {}), dict):  # optional: a staged command (CWL)
                raise MessageError("job: field 'stage' has the wrong type")
    if kind == "result" and body["outcome"] not in RESULT_OUTCOMES:
        raise MessageError(f"result: unknown outcome {body['outcome']!r}")
    return body


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode(kind: str, body: dict, key: bytes | None = None) -> bytes:
    """Serialise a checked message; signed when a run key is given."""
    check(kind, body)
    envelope: dict[str, Any] = {"v": VERSION, "kind": kind, "body": body}
    if key is not None:
        envelope["mac"] = hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()
    data = json.dumps(envelope, separators=(",", ":")).encode()
    if len(data) > MAX_BYTES:
        raise MessageError(f"{kind}: {len(data)} bytes exceeds the {MAX_BYTES} byte limit")
    return data


def decode(kind: str, data: bytes, key: bytes | None = None) -> dict:
    """Parse and check a message; with a key, reject anything not signed with it."""
    if len(data) > MAX_BYTES:
        raise MessageError(f"{kind}: {len(data)} bytes exceeds the {MAX_BYTES} byte limit")
    try:
        envelope = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessageError(f"{kind}: not JSON ({exc})") from None
    if not isinstance(envelope, dict) or envelope.get("v") != VERSION or envelope.get("kind") != kind:
        raise MessageError(f"{kind}: wrong version or kind")
    body = check(kind, envelope.get("body"))
    if key is not None:
        expected = hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()
        mac = envelope.get("mac")
        if not isinstance(mac, str) or not hmac.compare_digest(mac, expected):
            raise MessageError(f"{kind}: bad signature")
    return body
