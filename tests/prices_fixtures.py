"""What both tiers of the price tests share: the recorded Cloud Billing SKUs
(tests/data/billing_skus.json), a private price cache (autouse once imported into a test module),
and ``expocloud prices`` arguments parsed as the command line parses them."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from expo_executor.cost import prices_command
from tests.helpers import REPO

SKUS = json.loads((REPO / "tests" / "data" / "billing_skus.json").read_text())["skus"]


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Never read or write the real ~/.cache: the price cache lives under tmp_path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "expocloud" / "prices.json"


def prices_cli(*argv: str) -> argparse.Namespace:
    """``expocloud prices ARGV`` as parsed arguments."""
    parser = argparse.ArgumentParser(prog="expocloud")
    prices_command.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["prices", *argv])
