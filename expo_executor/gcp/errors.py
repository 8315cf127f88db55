"""How a Google Cloud call failed, decided in one place for every GCE, GCS and metadata call.

Three services answer differently, so there are three rules, side by side:

- **Compute Engine and the Cloud Billing Catalog** (``classify_error``, ``is_transient``): an
  API error is a rate limit (429, or 403 ``rateLimitExceeded``/``userRateLimitExceeded``:
  transient), a stockout (by its code, or by its message alone, as a 503 may say it), a quota
  error, a zonal refusal (a machine type, GPU or provisioning model this zone does not offer:
  another zone may), a 5xx or 400 ``resourceNotReady`` (transient), 404 (``notfound``), 409
  (``conflict``) or fatal; a dropped connection or timeout is transient.
- **Cloud Storage** (``is_transient_storage``): any error with an HTTP code is transient only for
  429, 500, 502, 503 and 504 (a 403 never is); dropped connections, timeouts, a body cut short
  and a download failing its CRC32C check (``DataCorruption``: read it again) are transient.
- **The metadata server** (``is_transient_metadata``, plain urllib): a 5xx or 429 answer, or no
  answer at all (the server may be slow just after boot), is transient; a 404 is not.

The SDKs (google-api-core, google-auth, requests, google-resumable-media) are imported inside
the functions, so this module imports without the ``gce`` extra.
"""

from __future__ import annotations

import re
import urllib.error

TRANSIENT_HTTP = frozenset({429, 500, 502, 503, 504})
RATE_LIMIT_REASONS = frozenset({"rateLimitExceeded", "userRateLimitExceeded"})
STOCKOUT_CODES = frozenset({"ZONE_RESOURCE_POOL_EXHAUSTED",
                            "ZONE_RESOURCE_POOL_EXHAUSTED_WITH_DETAILS"})
QUOTA_CODES = frozenset({"QUOTA_EXCEEDED"})
# The real API says a stockout in the message only at times (a 503 with no code).
STOCKOUT_TEXT = "does not have enough resources available"
# What one zone does not offer: a machine type or GPU that does not exist there, Spot not
# supported for the request there. Another zone may; every zone refusing is the user's to fix.
ZONAL_CODES = frozenset({"UNSUPPORTED_OPERATION"})
ZONAL_TEXT = re.compile(r"(does not exist|is not available|is not supported|not found|"
                        r"not offered) in (the )?zone", re.IGNORECASE)
# A bulk insert's summary: the causes are in the operations of its operationGroupId.
SUMMARY_CODES = frozenset({"VM_MIN_COUNT_NOT_REACHED"})
LATER_CODES = frozenset({"INTERNAL_ERROR", "RESOURCE_OPERATION_RATE_EXCEEDED",
                         "RATE_LIMIT_EXCEEDED"})  # operation errors worth a later attempt


def _reasons(err: BaseException) -> set[str]:
    return {str(e.get("reason", "")) for e in getattr(err, "errors", None) or []
            if isinstance(e, dict)}


def is_connection_error(err: BaseException) -> bool:
    """The request got no answer: the connection failed or dropped, or it timed out."""
    import requests
    from google.auth.exceptions import TransportError

    return isinstance(err, (ConnectionError, TimeoutError, requests.ConnectionError,
                            requests.Timeout, TransportError))


def classify_error(err: BaseException) -> str:
    """stockout, quota, zonal, transient, notfound, conflict or fatal, for an API call's
    exception."""
    from google.api_core import exceptions as gexc

    if not isinstance(err, gexc.GoogleAPICallError):
        return "transient" if is_connection_error(err) else "fatal"
    reasons = _reasons(err)
    text = f"{' '.join(reasons)} {err.message} {err.errors}"
    code = err.code
    if code == 429 or (code == 403 and reasons & RATE_LIMIT_REASONS):
        return "transient"
    if any(c in text for c in STOCKOUT_CODES) or STOCKOUT_TEXT in text:
        return "stockout"
    if "QUOTA_EXCEEDED" in text or "quotaExceeded" in reasons:
        return "quota"
    if code == 400 and (ZONAL_TEXT.search(text) or any(c in text for c in ZONAL_CODES)):
        return "zonal"
    if code in TRANSIENT_HTTP or (code == 400 and "resourceNotReady" in reasons):
        return "transient"
    return {404: "notfound", 409: "conflict"}.get(code or 0, "fatal")


def classify_codes(codes: set[str]) -> str:
    """stockout, quota, zonal, later or fatal, for the error codes of a finished insert
    operation (a bulk insert's summary codes resolved to its instances' first)."""
    for kind, known in (("stockout", STOCKOUT_CODES), ("quota", QUOTA_CODES),
                        ("zonal", ZONAL_CODES), ("later", LATER_CODES | SUMMARY_CODES)):
        if codes & known:
            return kind
    return "fatal"


def is_transient(err: BaseException) -> bool:
    """A Compute Engine or Billing call worth retrying with backoff: rate limits, 5xx,
    connection errors, not-ready resources."""
    return classify_error(err) == "transient"


def _is_garbled_download(err: BaseException) -> bool:
    """The answer came but broken: its body cut short, or failing its checksum."""
    import requests

    try:
        from google.resumable_media.common import DataCorruption  # storage's own subclasses it
    except ImportError:  # pragma: no cover - google-cloud-storage without google-resumable-media
        return isinstance(err, requests.exceptions.ChunkedEncodingError)
    return isinstance(err, (requests.exceptions.ChunkedEncodingError, DataCorruption))


def is_transient_storage(err: BaseException) -> bool:
    """A Cloud Storage call worth retrying: throttling, server errors, broken connections,
    timeouts, corrupted downloads."""
    code = getattr(err, "code", None)
    if isinstance(code, int) and not isinstance(code, bool):
        return code in TRANSIENT_HTTP
    return is_connection_error(err) or _is_garbled_download(err)


def is_transient_metadata(err: BaseException) -> bool:
    """A metadata-server request (urllib) worth retrying: 5xx, 429, or no answer."""
    if isinstance(err, urllib.error.HTTPError):
        return err.code >= 500 or err.code == 429
    return isinstance(err, (urllib.error.URLError, TimeoutError, ConnectionError))
