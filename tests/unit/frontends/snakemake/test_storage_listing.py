"""The pure parts of the GCS listing that answers Snakemake's existence checks, and its refusal
to touch a plugin version it does not know. (Against the emulator and a real Snakemake dry run:
tests/e2e/test_storage_listing_dry_run.py.)"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import pytest

from expo_executor.frontends.snakemake import storage_listing
from expo_executor.frontends.snakemake.storage_listing import (Listed, list_prefix, listing_root,
                                                               with_folders)


@pytest.mark.parametrize("query, prefix, root", [
    ("gs://b/wf/results/1.txt", "gs://b/wf", "wf/"),
    ("gs://b/wf/results/1.txt", "gs://b/wf/", "wf/"),
    ("gs://b/wf/results/1.txt", "gcs://b/wf", "wf/"),
    ("gs://b/a/b/x.txt", "gs://b/a/b", "a/b/"),
    ("gs://b/x.txt", "gs://b", ""),
    ("gs://b/wfx/1.txt", "gs://b/wf", None),  # a sibling that shares the prefix's letters
    ("gs://other/wf/1.txt", "gs://b/wf", None),  # another bucket
    ("gs://b/wf/1.txt", None, None),  # no default storage
    ("gs://b/wf/1.txt", "s3://b/wf", None),
])
def test_listing_root_is_the_default_prefix_as_an_object_name_prefix(query, prefix, root):
    assert listing_root(query, prefix) == root


def test_folders_count_as_existing_with_their_newest_entry_time():
    objects = [Listed("wf/results/0/a.txt", 10.0, 3), Listed("wf/results/0/b.txt", 30.0, 4),
               Listed("wf/results/1/c.txt", 20.0, 5), Listed("wf/top.txt", 5.0, 1)]
    shown = {item.name: item for item in with_folders(objects, "wf/")}
    assert shown["wf/results/0"] == Listed("wf/results/0", 30.0, 0)
    assert shown["wf/results/1"] == Listed("wf/results/1", 20.0, 0)
    assert shown["wf/results"] == Listed("wf/results", 30.0, 0)
    assert shown["wf/results/0/a.txt"] == objects[0]
    # the prefix itself and what lies above it are not folders of the workflow
    assert set(shown) == {item.name for item in objects} | {
        "wf/results/0", "wf/results/1", "wf/results"}


def test_a_whole_bucket_root_counts_top_level_folders():
    shown = {item.name for item in with_folders([Listed("results/a/1.txt", 1.0, 1)], "")}
    assert shown == {"results/a/1.txt", "results/a", "results"}


@dataclass
class _Blob:
    """What a listing page holds of each object, as google-cloud-storage's Blob carries it."""

    name: str
    updated: datetime
    size: int | None


def _pages(count: int, per_page: int) -> list[list[_Blob]]:
    when = datetime(2026, 11, 27, tzinfo=timezone.utc)
    return [[_Blob(f"wf/{page}/{i}.txt", when, i) for i in range(per_page)]
            for page in range(count)]


def test_listing_reads_every_page_into_records():
    listing = list_prefix(iter(_pages(3, 2)))
    assert listing.complete and listing.pages == 3
    assert [item.name for item in listing.objects] == [
        "wf/0/0.txt", "wf/0/1.txt", "wf/1/0.txt", "wf/1/1.txt", "wf/2/0.txt", "wf/2/1.txt"]
    assert listing.objects[1] == Listed("wf/0/1.txt", datetime(
        2026, 11, 27, tzinfo=timezone.utc).timestamp(), 1)


def test_listing_stops_after_the_page_that_spends_its_time():
    ticks = iter([0.0, 4.0, 9.0, 15.0])  # the clock at the start and after each page
    listing = list_prefix(iter(_pages(5, 1)), budget_s=8.0, clock=lambda: next(ticks))
    assert not listing.complete
    assert listing.pages == 2  # the second page took the time past 8 s: no third call
    assert [item.name for item in listing.objects] == ["wf/0/0.txt", "wf/1/0.txt"]


def test_an_unknown_plugin_version_is_left_alone_in_one_line(monkeypatch):
    from snakemake_storage_plugin_gcs import StorageObject

    before = (StorageObject.inventory, StorageObject.get_inventory_parent)
    monkeypatch.setattr(storage_listing, "KNOWN_VERSIONS", frozenset({"0.0.1"}))
    monkeypatch.setattr(storage_listing, "_state", {})
    line = storage_listing.install()
    assert line is not None and "\n" not in line
    assert "snakemake-storage-plugin-gcs 1.1.4" in line and "0.0.1" in line
    assert (StorageObject.inventory, StorageObject.get_inventory_parent) == before
    assert storage_listing.install() == line  # decided once per process


def test_the_known_version_is_the_installed_one():
    """The installed plugin is one this module was checked against: a bump of the plugin must
    come with a new look at its StorageObject (and a new entry in KNOWN_VERSIONS)."""
    from importlib import metadata

    assert metadata.version("snakemake-storage-plugin-gcs") in storage_listing.KNOWN_VERSIONS
