"""``expocloud prices --refresh`` end to end: the real google-cloud-billing REST client against a
fake Cloud Billing Catalog on 127.0.0.1 serving recorded SKU records (tests/data/
billing_skus.json), in pages, with transient errors. (Shapes, the parser, the snapshot and the
cache, in process: tests/unit/cost/test_prices.py.)
"""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from datetime import date
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from expo_executor.cost import price_catalog, prices, prices_command
from expo_executor.core.errors import ExpoError
from tests.prices_fixtures import SKUS, prices_cli, private_cache  # noqa: F401  (autouse)

SKUS_PATH = "/v1/services/6F81-5844-456A/skus"


# -- --refresh against a fake Cloud Billing Catalog ------------------------------------------------
def _public(record: dict) -> dict:
    """The record as the API serves it: without our _source notes."""
    return {k: v for k, v in record.items() if not k.startswith("_")}


FAULTS: list[int] = []  # HTTP statuses the fake Catalog answers first, one per request


@pytest.fixture
def catalog() -> Iterator[tuple[str, list[str]]]:
    """A fake Catalog serving the recorded SKUs in two pages; yields (endpoint, requests)."""
    FAULTS.clear()
    pages = [[_public(r) for r in SKUS[:8]], [_public(r) for r in SKUS[8:]]]
    seen: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            url = urlsplit(self.path)
            seen.append(self.path)
            if FAULTS:
                status = FAULTS.pop(0)
                self._send(status, {"error": {"code": status, "message": "try again",
                                              "status": "UNAVAILABLE"}})
                return
            token = parse_qs(url.query).get("pageToken", [""])[0]
            if url.path != SKUS_PATH or token not in ("", "page-2"):
                self._send(404, {"error": {"code": 404, "message": f"no {self.path}",
                                           "status": "NOT_FOUND"}})
                return
            body: dict = {"skus": copy.deepcopy(pages[1 if token else 0])}
            if not token:
                body["nextPageToken"] = "page-2"
            self._send(200, body)

        def _send(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def test_refresh_end_to_end(catalog: tuple[str, list[str]], private_cache: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    endpoint, seen = catalog
    assert prices_command.run(prices_cli("--refresh", "--endpoint", endpoint, "--family", "n2")) == 0
    out = capsys.readouterr().out.splitlines()
    # Both pages were read, the second by its token.
    assert [urlsplit(p).path for p in seen] == [SKUS_PATH, SKUS_PATH]
    assert "pageToken" not in seen[0] and "pageToken=page-2" in seen[1]
    today = date.today().isoformat()
    assert out[0].startswith(f"refreshed prices: snapshot {today} from the Cloud Billing")
    assert "from 9 SKUs (8 skipped)" in out[0] and str(private_cache) in out[0]
    assert out[-1] == f"prices: snapshot {today} (refreshed), us-central1"
    row = next(line.split() for line in out if line.startswith("n2-standard-4 "))
    # 0.194236 on demand (as above); Spot 4 x 0.00976 + 16 x 0.001307 = 0.059952.
    assert row == ["n2-standard-4", "4", "16.00", "0.1942", "0.0600", "0.31"]
    cached = json.loads(private_cache.read_text())
    assert (cached["snapshot"], cached["source"]) == (today, "Cloud Billing Catalog API")
    assert cached["families"]["n2d"]["europe-west4"]["on_demand"]["vcpu_hour"] == \
        pytest.approx(0.030278)
    # The refreshed prices are what cost figures use from now on, for the regions they hold.
    table = prices.load("us-central1")
    assert table.origin == "refreshed" and table.hourly("n2-standard-4", spot=True) == \
        pytest.approx(0.059952)
    assert prices.load("asia-southeast1").origin == "bundled"


def test_refresh_with_a_given_client(catalog: tuple[str, list[str]], tmp_path: Path) -> None:
    summary = price_catalog.refresh(cache=tmp_path / "p.json",
                                    client=price_catalog.catalog_client(catalog[0]))
    # regions: us-central1, us-east1, us-west1, europe-west4, europe-west6, us-east4
    assert (summary.used, summary.skipped, summary.regions) == (9, 8, 6)
    assert summary.families == ("c2", "e2", "n1", "n2", "n2d")
    assert prices.load("us-east4", cache=tmp_path / "p.json").origin == "refreshed"


def test_refresh_retries_a_transient_error(catalog: tuple[str, list[str]],
                                           private_cache: Path) -> None:
    endpoint, seen = catalog
    FAULTS.extend([503, 429])  # the first page fails twice, then the listing starts again
    summary = price_catalog.refresh(private_cache, client=price_catalog.catalog_client(endpoint))
    assert summary.used == 9 and len(seen) == 4
    FAULTS.extend([403])  # a refusal is not transient: one request, one line
    with pytest.raises(ExpoError, match="--refresh.*refused"):
        price_catalog.refresh(private_cache, client=price_catalog.catalog_client(endpoint))
    assert len(seen) == 5
