"""Every decoder of a bucket object rejects hostile bytes in one line (a MessageError), and
nothing else escapes: deep nesting (once a RecursionError), huge numbers, wrong types, bytes
that are not UTF-8 JSON, oversized bodies. Whoever can write to the bucket can plant any of
these; the run must go on (issue 30)."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from expo_executor.protocol import messages
from expo_executor.protocol.records import Inbox, Pulse, ResultBatch, WorkerResult, WorkerStatus

KEY = b"k" * 32


def _decoders() -> dict[str, object]:
    return {"inbox": lambda data: Inbox.decode(data, KEY),
            "status": lambda data: WorkerStatus.decode(data, KEY),
            "result": lambda data: WorkerResult.decode(data, KEY),
            "results": lambda data: ResultBatch.decode(data, KEY),
            "pulse": Pulse.decode}


DECODERS = _decoders()


def _rejected(decode: object, data: bytes) -> str:
    with pytest.raises(messages.MessageError) as caught:
        decode(data)  # type: ignore[operator]
    text = str(caught.value)
    assert text and "\n" not in text, "a rejection is one line"
    return text


def _nested(depth: int) -> bytes:
    return b'{"v":2,"kind":"pulse","body":' + b"[" * depth + b"]" * depth + b"}"


@pytest.mark.parametrize("kind", sorted(DECODERS))
def test_deep_nesting_is_a_malformed_message_not_a_recursion_error(kind: str) -> None:
    assert "nested" in _rejected(DECODERS[kind], _nested(200_000))


def test_nesting_past_the_depth_limit_is_refused_even_when_it_parses() -> None:
    assert "nested" in _rejected(Pulse.decode, _nested(messages.MAX_DEPTH + 1))


@pytest.mark.parametrize("number", [b"1" * 5000, b"1e999", b"-1e999", b"NaN", b"Infinity"])
def test_huge_or_non_finite_numbers_are_refused(number: bytes) -> None:
    data = b'{"v":2,"kind":"pulse","body":{"seq":' + number + b',"tags":{}}}'
    _rejected(Pulse.decode, data)


@pytest.mark.parametrize("data", [
    "{\"v\":2}".encode("utf-16"), b"\xff\xfe\x00", b'{"v":2,"kind":"pulse","body":"\xc3"}',
    b"", b"null", b"[]", b'"x"', b"\x00" * 10,
])
def test_other_encodings_and_shapes_are_refused(data: bytes) -> None:
    for decode in DECODERS.values():
        _rejected(decode, data)


def test_oversized_bodies_are_refused_before_parsing() -> None:
    data = b'{"v":2,"kind":"pulse","body":{"seq":1,"tags":{},"pad":"' + \
        b"x" * messages.MAX_BYTES + b'"}}'
    assert "limit" in _rejected(Pulse.decode, data)


def test_a_bool_is_not_a_number_and_a_number_not_a_name() -> None:
    _rejected(Pulse.decode, b'{"v":2,"kind":"pulse","body":{"seq":true,"tags":{}}}')
    _rejected(Pulse.decode, b'{"v":2,"kind":"pulse","body":{"seq":1,"tags":{"w":1}}}')


def _json_values() -> st.SearchStrategy[object]:
    scalars = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8)
    return st.recursive(scalars, lambda inner: st.lists(inner, max_size=4)
                        | st.dictionaries(st.text(max_size=6), inner, max_size=4), max_leaves=20)


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(kind=st.sampled_from(sorted(DECODERS)), data=st.binary(max_size=300))
def test_random_bytes_never_escape_as_another_exception(kind: str, data: bytes) -> None:
    try:
        DECODERS[kind](data)  # type: ignore[operator]
    except messages.MessageError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(kind=st.sampled_from(sorted(DECODERS)), body=_json_values(),
       depth=st.integers(min_value=0, max_value=3000))
def test_random_json_in_a_valid_envelope_is_rejected_in_one_line(kind: str, body: object,
                                                                 depth: int) -> None:
    wrapped = "[" * depth + json.dumps(body) + "]" * depth
    envelope = f'{{"v":2,"kind":"{kind}","body":{wrapped},"mac":"00"}}'.encode()
    _rejected(DECODERS[kind], envelope)


# -- the bucket objects that are not messages: a key request, a key grant, an output manifest --
def _other_decoders() -> dict[str, object]:
    from expo_executor.engines.gce.key_channel import KeyGrantor
    from expo_executor.frontends.cwl.staging import _checked_manifest
    from expo_executor.protocol.worker_keys import grant_verify_key, new_key_pair, open_grant

    private, _ = new_key_pair()
    grantor = KeyGrantor(KEY, "proj", "gs://b/p", lambda name: "zone-a", "http://127.0.0.1:9/")
    return {"key request": lambda data: grantor.answer("w-1", data),
            "key grant": lambda data: open_grant(data, "w-1", private, grant_verify_key(KEY)),
            "output manifest": lambda data: _checked_manifest(data, "w-1")}


OTHERS = _other_decoders()


def _refused(name: str, data: bytes) -> str:
    from expo_executor.engines.gce.key_channel import KeyRefused

    with pytest.raises((messages.MessageError, KeyRefused, ValueError)) as caught:
        OTHERS[name](data)  # type: ignore[operator]
    text = str(caught.value)
    assert text and "\n" not in text, "a refusal is one line"
    return text


@pytest.mark.parametrize("name", sorted(OTHERS))
def test_the_other_bucket_objects_refuse_deep_nesting_in_one_line(name: str) -> None:
    _refused(name, b"[" * 200_000 + b"]" * 200_000)
    _refused(name, b'{"public":' + b"[" * 100 + b"]" * 100 + b"}")


@FUZZ
@given(name=st.sampled_from(sorted(OTHERS)), data=st.binary(max_size=200) | st.builds(
    lambda value: json.dumps(value).encode(), _json_values()))
def test_the_other_bucket_objects_refuse_random_bytes_in_one_line(name: str,
                                                                  data: bytes) -> None:
    _refused(name, data)
