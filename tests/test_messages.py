"""Messages are JSON, schema-checked, bounded, and assignments are signed with the run key."""

from __future__ import annotations

import json

import pytest

from expo_executor import messages

KEY = b"k" * 32
INBOX = {"seq": 1, "jobs": {"j1a1": {"argv": ["true"], "cwd": "/", "env": {},
                                     "deadline_s": None, "cpus": 1}},
         "cancel": [], "drain": False}


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
    ({**INBOX, "drain": 0}, "wrong type"),
    ({**INBOX, "jobs": {"j": {**INBOX["jobs"]["j1a1"], "argv": []}}}, "non-empty"),
    ({**INBOX, "jobs": {"j": {**INBOX["jobs"]["j1a1"], "argv": "rm -rf /"}}}, "wrong type"),
])
def test_schema_violations_are_rejected(body: dict, error: str) -> None:
    with pytest.raises(messages.MessageError, match=error):
        messages.encode("inbox", body)


def test_size_bound_and_garbage() -> None:
    with pytest.raises(messages.MessageError, match="exceeds"):
        messages.decode("inbox", b" " * (messages.MAX_BYTES + 1))
    for data in (b"\x80\x04pickle", b"[]", b'{"v": 2, "kind": "inbox", "body": {}}'):
        with pytest.raises(messages.MessageError):
            messages.decode("inbox", data)
