"""GcsBucket keeps the bucket contract against a GCS emulator made faithful to preconditions,
and the retry helper backs off as documented. Everything stays on loopback."""

from __future__ import annotations
import pytest

pytest.importorskip("google.cloud.storage")
pytest.importorskip("gcp_storage_emulator")

from expo_executor.protocol.gcs_bucket import is_transient, parse_gs_url
from expo_executor.engines.gce.retry import retry_call


# -- GCS specifics (the shared contract, with the race, is in test_bucket.py) --------------------


# -- retries through GcsBucket ----------------------------------------------------------------


def test_errors_classified() -> None:
    from google.api_core import exceptions as gexc
    from google.resumable_media.common import DataCorruption

    for err in (gexc.TooManyRequests("x"), gexc.InternalServerError("x"), gexc.BadGateway("x"),
                gexc.ServiceUnavailable("x"), gexc.GatewayTimeout("x"), ConnectionResetError(),
                TimeoutError(), DataCorruption(None, "checksum mismatch")):
        assert is_transient(err), err
    for err in (gexc.Forbidden("x"), gexc.NotFound("x"), gexc.PreconditionFailed("x"),
                gexc.BadRequest("x"), ValueError()):
        assert not is_transient(err), err


def test_parse_gs_url() -> None:
    assert parse_gs_url("gs://b") == ("b", "")
    assert parse_gs_url("gs://b/") == ("b", "")
    assert parse_gs_url("gs://b/x/y/") == ("b", "x/y/")
    for bad in ("s3://b/x", "gs:///x"):
        with pytest.raises(ValueError):
            parse_gs_url(bad)


# -- the retry helper, deterministic ----------------------------------------------------------


class Transient(Exception):
    pass


class Fatal(Exception):
    pass


def _failing(errors: list[Exception], result: str = "ok"):  # type: ignore[no-untyped-def]
    calls = []

    def fn() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return result

    return fn, calls


def _transient(err: BaseException) -> bool:
    return isinstance(err, Transient)


def test_retry_delays_grow_and_are_capped() -> None:
    sleeps: list[float] = []
    fn, calls = _failing([Transient() for _ in range(7)])
    assert retry_call(fn, is_transient=_transient, attempts=8, base=0.1, cap=1.0,
                      sleep=sleeps.append, rand=lambda: 1.0) == "ok"
    assert len(calls) == 8
    assert sleeps == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_retry_full_jitter_scales_the_ceiling() -> None:
    sleeps: list[float] = []
    fn, _ = _failing([Transient(), Transient(), Transient()])
    draws = iter([0.5, 0.0, 0.25])
    retry_call(fn, is_transient=_transient, attempts=5, base=0.1, cap=30,
               sleep=sleeps.append, rand=lambda: next(draws))
    assert sleeps == pytest.approx([0.05, 0.0, 0.1])


def test_non_transient_raises_at_once() -> None:
    sleeps: list[float] = []
    fn, calls = _failing([Fatal("403")])
    with pytest.raises(Fatal):
        retry_call(fn, is_transient=_transient, attempts=5, base=0.1, cap=30,
                   sleep=sleeps.append, rand=lambda: 1.0)
    assert len(calls) == 1 and sleeps == []


def test_attempt_bound_holds() -> None:
    sleeps: list[float] = []
    errors = [Transient(str(i)) for i in range(10)]
    fn, calls = _failing(errors)
    with pytest.raises(Transient) as info:
        retry_call(fn, is_transient=_transient, attempts=3, base=0.1, cap=30,
                   sleep=sleeps.append, rand=lambda: 1.0)
    assert len(calls) == 3 and str(info.value) == "2" and len(sleeps) == 2
    with pytest.raises(ValueError):
        retry_call(fn, is_transient=_transient, attempts=0)
