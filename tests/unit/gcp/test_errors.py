"""The GCE provider's error classifier (engines/gce/errors.py): which failures of a Compute
Engine, Cloud Storage or metadata-server call are worth another attempt."""

from __future__ import annotations

import urllib.error

import pytest

from expo_executor.gcp.errors import (classify_codes, classify_error, is_transient,
                                      is_transient_metadata, is_transient_storage)

gexc = pytest.importorskip("google.api_core.exceptions")


def test_storage_errors_classified() -> None:
    from google.resumable_media.common import DataCorruption

    for err in (gexc.TooManyRequests("x"), gexc.InternalServerError("x"), gexc.BadGateway("x"),
                gexc.ServiceUnavailable("x"), gexc.GatewayTimeout("x"), ConnectionResetError(),
                TimeoutError(), DataCorruption(None, "checksum mismatch")):
        assert is_transient_storage(err), err
    for err in (gexc.Forbidden("x"), gexc.NotFound("x"), gexc.PreconditionFailed("x"),
                gexc.BadRequest("x"), ValueError()):
        assert not is_transient_storage(err), err


def _api_error(cls: type, *reasons: str, message: str = "x") -> Exception:
    return cls(message, errors=[{"reason": reason} for reason in reasons])


def test_compute_errors_classified() -> None:
    import requests

    cases = {
        "transient": [_api_error(gexc.TooManyRequests),
                      _api_error(gexc.Forbidden, "rateLimitExceeded"),
                      _api_error(gexc.Forbidden, "userRateLimitExceeded"),
                      _api_error(gexc.ServiceUnavailable), _api_error(gexc.InternalServerError),
                      _api_error(gexc.BadRequest, "resourceNotReady"),
                      ConnectionResetError(), TimeoutError(), requests.ConnectionError()],
        "stockout": [_api_error(gexc.ServiceUnavailable,
                                message="ZONE_RESOURCE_POOL_EXHAUSTED in us-central1-a"),
                     # a 503 whose message alone says it (no code)
                     _api_error(gexc.ServiceUnavailable, "backendError", message=(
                         "The zone 'projects/p/zones/us-central1-a' does not have enough "
                         "resources available to fulfill the request.  Try a different zone, "
                         "or try again later."))],
        "zonal": [_api_error(gexc.BadRequest, "invalid", message=(
                      "Invalid value for field 'resource.machineType': 'zones/us-central1-f/"
                      "machineTypes/a2-highgpu-1g'. Machine type with name 'a2-highgpu-1g' does "
                      "not exist in zone 'us-central1-f'.")),
                  _api_error(gexc.BadRequest, message="UNSUPPORTED_OPERATION: Spot in zone")],
        "quota": [_api_error(gexc.Forbidden, "quotaExceeded"),
                  _api_error(gexc.BadRequest, message="QUOTA_EXCEEDED: Quota 'CPUS' exceeded.")],
        "notfound": [_api_error(gexc.NotFound)],
        "conflict": [_api_error(gexc.Conflict)],
        "fatal": [_api_error(gexc.Forbidden), _api_error(gexc.BadRequest), ValueError()],
    }
    for kind, errors in cases.items():
        for err in errors:
            assert classify_error(err) == kind, err
            assert is_transient(err) == (kind == "transient"), err


def test_insert_operation_codes_classified() -> None:
    """A finished insert's error codes; a bulk insert's summary alone is for later (its
    instances' operations say more: the engine reads them first)."""
    assert classify_codes({"ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"}) == "stockout"
    assert classify_codes({"QUOTA_EXCEEDED"}) == "quota"
    assert classify_codes({"UNSUPPORTED_OPERATION"}) == "zonal"
    assert classify_codes({"VM_MIN_COUNT_NOT_REACHED"}) == "later"
    assert classify_codes({"RESOURCE_OPERATION_RATE_EXCEEDED"}) == "later"
    assert classify_codes({"INVALID_USAGE"}) == "fatal"
    # the most telling code wins
    assert classify_codes({"VM_MIN_COUNT_NOT_REACHED", "QUOTA_EXCEEDED"}) == "quota"


def test_the_services_differ_where_they_answer_differently() -> None:
    """A 403 rate limit is retried on Compute Engine only; a body cut short, on storage only."""
    import requests

    rate_limited = _api_error(gexc.Forbidden, "rateLimitExceeded")
    assert is_transient(rate_limited) and not is_transient_storage(rate_limited)
    cut_short = requests.exceptions.ChunkedEncodingError()
    assert is_transient_storage(cut_short) and not is_transient(cut_short)


def test_metadata_errors_classified() -> None:
    def http_error(code: int) -> urllib.error.HTTPError:
        return urllib.error.HTTPError("http://metadata/x", code, "x", None, None)  # type: ignore[arg-type]

    for err in (http_error(500), http_error(503), http_error(429), urllib.error.URLError("down"),
                TimeoutError(), ConnectionRefusedError()):
        assert is_transient_metadata(err), err
    for err in (http_error(404), http_error(403), ValueError()):
        assert not is_transient_metadata(err), err
