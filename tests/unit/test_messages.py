"""Messages are JSON, schema-checked, bounded, and assignments are signed with the run key."""

from __future__ import annotations

import json

import pytest

from expo_executor.protocol import messages

KEY = b"k" * 32
INBOX = {"seq": 1, "jobs": {"j1a1": {"argv": ["true"], "cwd": "/", "env": {},
                                     "deadline_s": None, "cpus": 1}},
         "cancel": []}


def test_round_trip_signed() -> None:
    assert messages.decode("inbox", messages.encode("inbox", INBOX, KEY), KEY) == INBOX


def test_forged_or_unsigned_assignments_are_rejected() -> None:
    data = messages.encode("inbox", INBOX, b"x" * 32)
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", data, KEY)
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", messages.encode("inbox", INBOX), KEY)
    tampered = json.loads(messages.encode("inbox", INBOX, KEY))
    tampered["body"]["jobs"]["j1a1"]["argv"] = ["rm", "-rf", "/"]
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", json.dumps(tampered).encode(), KEY)


@pytest.mark.parametrize("body,error", [
    ({**INBOX, "seq": "1"}, "wrong type"),
    ({k: v for k, v in INBOX.items() if k != "cancel"}, "missing field"),
    ({**INBOX, "cancel": [1]}, "job keys"),
    ({**INBOX, "jobs": {"j": {**INBOX["jobs"]["j1a1"], "argv": []}}}, "non-empty"),
    ({**INBOX, "jobs": {"j": {**INBOX["jobs"]["j1a1"], "argv": "rm -rf /"}}}, "wrong type"),
])
def test_schema_violations_are_rejected(body: dict, error: str) -> None:
    with pytest.raises(messages.MessageError, match=error):
        messages.encode("inbox", body)


def test_size_bound_and_garbage() -> None:
    with pytest.raises(messages.MessageError, match="exceeds"):
        messages.decode("inbox", b" " * (messages.MAX_BYTES + 1))
    for data in (b"\x80\x04pickle", b"[]", b'{"v": 1, "kind": "inbox", "body": {}}'):
        with pytest.raises(messages.MessageError):
            messages.decode("inbox", data)


def test_an_inbox_names_its_worker_under_the_signature() -> None:
    data = messages.encode("inbox", {**INBOX, "to": "w-1"}, KEY)
    assert messages.decode("inbox", data, KEY)["to"] == "w-1"
    moved = json.loads(data)
    moved["body"]["to"] = "w-2"
    with pytest.raises(messages.MessageError, match="bad signature"):
        messages.decode("inbox", json.dumps(moved).encode(), KEY)
    with pytest.raises(messages.MessageError, match="'to'"):
        messages.encode("inbox", {**INBOX, "to": 2})


def test_sealed_parts_open_only_with_their_run_key_and_job() -> None:
    sealed = messages.seal(["tool", "--password", "hunter2"], {"TOKEN": "t0k"}, KEY, "c1")
    assert "hunter2" not in sealed and "t0k" not in sealed
    assert messages.unseal(sealed, KEY, "c1") == (["tool", "--password", "hunter2"],
                                                 {"TOKEN": "t0k"}, [])
    with_secrets = messages.seal(["tool"], {}, KEY, "c1", ["hunter2", "t0k"])
    assert messages.unseal(with_secrets, KEY, "c1").redact == ["hunter2", "t0k"]
    assert messages.seal(["a"], {}, KEY, "c1") != messages.seal(["a"], {}, KEY, "c1")  # nonces
    for key, job, text in ((b"x" * 32, "c1", sealed), (KEY, "c2", sealed),
                           (KEY, "c1", "not base64!"), (KEY, "c1", sealed[:-8] + "AAAAAAA=")):
        with pytest.raises(messages.MessageError):
            messages.unseal(text, key, job)
    job = {**INBOX["jobs"]["j1a1"], "stage": {"sealed": 5}}
    with pytest.raises(messages.MessageError, match="'sealed'"):
        messages.encode("inbox", {**INBOX, "jobs": {"j": job}})


def test_redaction_blanks_every_secret_longest_first() -> None:
    text = "pw=hunter2 and hunter2x and t0k"
    assert messages.redacted(text, ["hunter2", "hunter2x", ""]) == \
        "pw=******** and ******** and t0k"
    assert messages.redacted(None, ["x"]) is None
    assert messages.redacted("nothing", []) == "nothing"


def test_records_round_trip_through_signed_messages() -> None:
    """The typed records are the only way the package builds or reads these messages."""
    from expo_executor.core.records import AttemptEnd, Outcome, WorkerState
    from expo_executor.protocol.records import Inbox, InboxJob, WorkerResult, WorkerStatus

    inbox = Inbox(3, "w-1", {"j": InboxJob(["true"], None, {"A": "1"}, 5.0, 2,
                                           {"sealed": "x"})}, ["k"])
    assert Inbox.decode(inbox.encode(KEY), KEY) == inbox
    status = WorkerStatus("w-1", 3, 1.5, ["j"], 2, WorkerState.READY, {"read": 4})
    assert WorkerStatus.decode(status.encode(KEY), KEY) == status
    result = WorkerResult("j", "w-1", AttemptEnd.TIMEOUT, None, 1.0, 4.5, "killed", "tail")
    back = WorkerResult.decode(result.encode(KEY), KEY)
    assert back == result and back.runtime_s == 3.5 and back.end.outcome is Outcome.TIMEOUT
    assert AttemptEnd.CANCELLED.outcome is None and AttemptEnd.PREEMPTED.outcome is None


@pytest.mark.parametrize("kind,body,error", [
    ("status", {"worker": "w", "seq_seen": 1, "time": 1.0, "running": [], "slots": 1,
                "state": "sleeping"}, "unknown state"),
    ("result", {"key": "j", "worker": "w", "outcome": "ok", "returncode": 0, "started": 1.0,
                "ended": 2.0, "reason": None, "log_tail": ""}, "unknown outcome"),
])
def test_words_outside_the_vocabulary_are_rejected(kind: str, body: dict, error: str) -> None:
    with pytest.raises(messages.MessageError, match=error):
        messages.encode(kind, body)
