"""Messages through the bucket: versioned JSON, bounded in size, checked against a schema.

Never pickle: whoever can write to the bucket must not be able to run code by writing a message.
Every message carries an HMAC with the key of the worker it is for or from
(:mod:`worker_keys`: derived from the run key per worker, reaching the worker out of band), so
write access to the bucket alone cannot make a worker run a command, and a worker cannot forge
another worker's report. Every job's command line and environment (a Snakefile's ``envvars:``,
a storage plugin's secrets, a CWL job's command with cwltool's secrets filled in) are sealed:
encrypted with AES-256-GCM under a key derived from that worker's key and bound to the job, so
the bucket holds only ciphertext of them (see docs/security.md).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import math
import os
from typing import Any, NamedTuple

from expo_executor.core.records import AttemptEnd, WorkerState
from expo_executor.protocol import bounded_json
from expo_executor.protocol.bounded_json import MAX_DEPTH  # noqa: F401  (the limit, said here too)

VERSION = 2  # 2: one outcome vocabulary (a result says "solved", not "ok"); no inbox drain
MAX_BYTES = 4 * 1024 * 1024

# kind -> field -> accepted types; every listed field is required.
SCHEMAS: dict[str, dict[str, tuple[type, ...]]] = {
    "inbox": {"seq": (int,), "jobs": (dict,), "cancel": (list,)},
    "job": {"argv": (list,), "cwd": (str, type(None)), "env": (dict,), "deadline_s": (float, int, type(None)),
            "cpus": (int,)},
    "status": {"worker": (str,), "seq_seen": (int,), "time": (float, int), "running": (list,),
               "slots": (int,), "state": (str,)},
    "result": {"key": (str,), "worker": (str,), "outcome": (str,), "returncode": (int, type(None)),
               "started": (float, int), "ended": (float, int), "reason": (str, type(None)),
               "log_tail": (str,)},
    # several results of one worker in one object, signed once (records.ResultBatch): each
    # item a "result" body of that worker
    "results": {"worker": (str,), "results": (list,)},
    # the fleet's liveness: a sequence number and one tag per worker (records.Pulse); not
    # signed as a whole (no one key would do), each tag is
    "pulse": {"seq": (int,), "tags": (dict,)},
    # a job's optional "prune": where its timeout prunes at once (records.PrunePoint)
    "prune": {"family": (str,), "scope": (list,), "vector": (list,)},
    # a result's optional "staged": bytes it read from and wrote to the bucket
    # (records.StagedBytes)
    "staged": {"down": (int,), "up": (int,)},
    # one entry of a result's optional "logs": a log the worker saved (records.SavedLog)
    "saved_log": {"path": (str, type(None)), "key": (str,), "size": (int,), "sha256": (str,),
                  "truncated": (bool,)},
}
RESULT_OUTCOMES = tuple(end.value for end in AttemptEnd)
WORKER_STATES = tuple(state.value for state in WorkerState)


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
        # optional "to": the worker it is for, under the signature, so that a signed inbox
        # copied to another worker's inbox is refused there (the coordinator always sets it)
        if not isinstance(body.get("to", ""), str):
            raise MessageError("inbox: field 'to' has the wrong type")
        for job in body["jobs"].values():
            check("job", job)
            if not all(isinstance(a, str) for a in job["argv"]) or not job["argv"]:
                raise MessageError("job: argv must be a non-empty list of strings")
            if not isinstance(job.get("stage", {}), dict):  # optional: a staged command (CWL)
                raise MessageError("job: field 'stage' has the wrong type")
            if not isinstance(job.get("sealed", ""), str):  # optional: the sealed command
                raise MessageError("job: field 'sealed' has the wrong type")
            _check_optional_list("job", job, "logs", lambda path: isinstance(path, str))
            if "prune" in job:
                _check_prune(job["prune"])
    if kind == "inbox" and not all(isinstance(key, str) for key in body["cancel"]):
        raise MessageError("inbox: field 'cancel' must list job keys")
    if kind == "inbox":  # optional: held jobs to give back unstarted, with their requests
        _check_requests("inbox", body, "release")
    if kind == "status":  # optional: the held jobs it gave back, with the requests answered
        _check_requests("status", body, "released")
    if kind == "result" and body["outcome"] not in RESULT_OUTCOMES:
        raise MessageError(f"result: unknown outcome {body['outcome']!r}")
    if kind == "result":
        _check_optional_list("result", body, "logs", lambda log: bool(check("saved_log", log)))
        command_s = body.get("command_s")  # optional: seconds its command ran
        if command_s is not None and (isinstance(command_s, bool)
                                      or not isinstance(command_s, (int, float))):
            raise MessageError("result: field 'command_s' has the wrong type")
        if not isinstance(body.get("ran", True), bool):  # optional: False, never started
            raise MessageError("result: field 'ran' has the wrong type")
        if "staged" in body:  # optional: bytes moved to and from the bucket
            check("staged", body["staged"])
            if any(body["staged"][way] < 0 for way in ("down", "up")):
                raise MessageError("result: field 'staged' counts negative bytes")
    if kind == "results":
        if not body["results"]:
            raise MessageError("results: field 'results' is empty")
        for item in body["results"]:
            if check("result", item)["worker"] != body["worker"]:
                raise MessageError("results: a result of another worker")
    if kind == "pulse" and not all(isinstance(name, str) and isinstance(tag, str)
                                   for name, tag in body["tags"].items()):
        raise MessageError("pulse: field 'tags' must map worker names to tags")
    if kind == "status" and body["state"] not in WORKER_STATES:
        raise MessageError(f"status: unknown state {body['state']!r}")
    return body


def _check_prune(prune: Any) -> None:
    """A job's optional "prune" (records.PrunePoint): its family, its scope's values (text)
    and its coordinates (finite numbers: JSON can say NaN, and no coordinate is NaN)."""
    try:
        check("prune", prune)
    except MessageError:
        raise MessageError("job: field 'prune' has the wrong type") from None
    if not (all(isinstance(part, str) for part in prune["scope"])
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
                    for x in prune["vector"])):
        raise MessageError("job: field 'prune' has the wrong type")


def _check_optional_list(kind: str, body: dict, name: str, valid: Any) -> None:
    """An optional field that, when present, is a list whose every item is ``valid``."""
    items = body.get(name, [])
    if not isinstance(items, list) or not all(valid(item) for item in items):
        raise MessageError(f"{kind}: field {name!r} has the wrong type")


def _check_requests(kind: str, body: dict, name: str) -> None:
    """An optional field that, when present, maps job keys to release request numbers
    (positive integers: ``core.scheduler.Release.request``)."""
    requests = body.get(name, {})
    if not isinstance(requests, dict) or not all(
            isinstance(n, int) and not isinstance(n, bool) and n > 0 for n in requests.values()):
        raise MessageError(f"{kind}: field {name!r} must map job keys to request numbers")


def _canonical(body: dict) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def encode(kind: str, body: dict, key: bytes | None = None) -> bytes:
    """Serialise a checked message; signed when a key is given."""
    check(kind, body)
    envelope: dict[str, Any] = {"v": VERSION, "kind": kind, "body": body}
    if key is not None:
        envelope["mac"] = hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()
    data = json.dumps(envelope, separators=(",", ":")).encode()
    if len(data) > MAX_BYTES:
        raise MessageError(f"{kind}: {len(data)} bytes exceeds the {MAX_BYTES} byte limit")
    return data


def load(data: bytes, what: str, max_bytes: int = MAX_BYTES) -> Any:
    """``data`` as JSON, bounded in size, depth and numbers (:mod:`bounded_json`); anything
    else is a MessageError of one line. Every decoder of a bucket object parses with this."""
    try:
        return bounded_json.loads(data, what, max_bytes)
    except bounded_json.JsonRefused as exc:
        raise MessageError(str(exc)) from None


def decode(kind: str, data: bytes, key: bytes | None = None) -> dict:
    """Parse and check a message; with a key, reject anything not signed with it."""
    return decode_either((kind,), data, key)[1]


def decode_either(kinds: tuple[str, ...], data: bytes,
                  key: bytes | None = None) -> tuple[str, dict]:
    """:func:`decode` of a message of any of ``kinds``: returns its kind and body."""
    kind = "/".join(kinds)
    envelope = load(data, kind)
    if not isinstance(envelope, dict) or envelope.get("v") != VERSION \
            or envelope.get("kind") not in kinds:
        raise MessageError(f"{kind}: wrong version or kind")
    kind = envelope["kind"]
    body = check(kind, envelope.get("body"))
    if key is not None:
        expected = hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()
        mac = envelope.get("mac")
        if not isinstance(mac, str) or not hmac.compare_digest(mac, expected):
            raise MessageError(f"{kind}: bad signature")
    return kind, body


_PULSE_INFO = b"expocloud v1 pulse\0"
PULSE_TAG_CHARS = 32  # HMAC-SHA256 cut to 128 bits: ~60 bytes a worker in the pulse


def pulse_tag(key: bytes, seq: int, worker: str) -> str:
    """The proof, made with ``worker``'s own key, that the coordinator was alive at pulse
    ``seq``: bound to the sequence number (an old pulse cannot pass for a new one) and to the
    worker's name (another worker's tag does not count). Only the coordinator and the worker
    hold that key, so neither the bucket nor another worker can make it."""
    message = _PULSE_INFO + str(seq).encode() + b"\0" + worker.encode()
    return hmac.new(key, message, hashlib.sha256).hexdigest()[:PULSE_TAG_CHARS]


def pulse_tag_valid(key: bytes, seq: int, worker: str, tag: str) -> bool:
    return hmac.compare_digest(tag.encode(), pulse_tag(key, seq, worker).encode())


# -- sealed parts of an assignment -----------------------------------------------------------
SEALED_ARGV = ["expocloud-sealed"]  # what argv says in the bucket while the real one is sealed
_SEAL_INFO = b"expocloud v1: sealed assignment parts"


def _seal_key(key: bytes) -> bytes:
    """A key of its own for encryption (HKDF-SHA256 of the worker's key), not the HMAC key
    itself."""
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.kdf.hkdf import HKDF

    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_SEAL_INFO).derive(key)


class Sealed(NamedTuple):
    """What a sealed part holds: the real command, its environment, and the secret values a
    worker must blank out of anything it reports (a failed job's log tail, its reason)."""
    argv: list[str]
    env: dict[str, str]
    redact: list[str]


REDACTED = "********"


def redacted(text: str | None, secrets: list[str]) -> str | None:
    """``text`` with every secret blanked out, longest first (one secret may contain another)."""
    if text is None:
        return None
    for secret in sorted(secrets, key=len, reverse=True):
        if secret:
            text = text.replace(secret, REDACTED)
    return text


def seal(argv: list[str], env: dict[str, str], key: bytes, job_key: str,
         redact: list[str] | tuple[str, ...] = ()) -> str:
    """``argv``, ``env`` and the secrets to ``redact`` encrypted for the worker holding ``key``
    (AES-256-GCM, bound to the job key, so a sealed part cannot be moved to another job);
    base64 text for the JSON message."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    nonce = os.urandom(12)
    plain = json.dumps({"argv": argv, "env": env, "redact": list(redact)},
                       separators=(",", ":")).encode()
    sealed = AESGCM(_seal_key(key)).encrypt(nonce, plain, job_key.encode())
    return base64.b64encode(nonce + sealed).decode()


def unseal(text: str, key: bytes, job_key: str) -> Sealed:
    """What :func:`seal` sealed; raises MessageError unless sealed with ``key`` for this job."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    try:
        raw = base64.b64decode(text.encode(), validate=True)
        plain = AESGCM(_seal_key(key)).decrypt(raw[:12], raw[12:], job_key.encode())
        body = load(plain, f"job {job_key}: its sealed part")
    except (ValueError, InvalidTag):
        raise MessageError(f"job {job_key}: its sealed part does not open with this worker's key") \
            from None
    body = body if isinstance(body, dict) else {}
    argv, env, redact = body.get("argv"), body.get("env"), body.get("redact", [])
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
            and isinstance(env, dict)
            and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
            and isinstance(redact, list) and all(isinstance(r, str) for r in redact)):
        raise MessageError(f"job {job_key}: its sealed part is malformed")
    return Sealed(argv, env, redact)
