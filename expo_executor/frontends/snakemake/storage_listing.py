"""Snakemake's existence and modification-time answers for the GCS default storage, from one
listing of the default storage prefix, as many calls as pages, not as files.

Why: before its first job, Snakemake asks its IOCache whether each output and input exists in
storage and when it changed. snakemake-storage-plugin-gcs 1.1.4 fills that cache in
``StorageObject.inventory``, but it lists only the folder of the object it is asked about, and
records nothing that says so: every object that listing did not show (every output of a fresh
sweep) costs a bucket check and another listing, then its existence check calls the bucket, the
object and the folder again (5,000 outputs: 45 s on the emulator, hours at real GCS latency;
snakemake#3816).

How: :func:`install` (called when Snakemake builds our executor settings: the main process of a
run with ``--executor expocloud``, before any storage object exists) replaces two methods of the
plugin's ``StorageObject``, once, and only for plugin versions in ``KNOWN_VERSIONS`` (any other
version keeps the plugin's own behaviour, said in one log line). For an object under the default
storage prefix (read from its provider, which the wrapped ``StorageRegistry`` marks), the first
``inventory`` lists the whole prefix, paged (``PAGE_SIZE``, names, times and sizes only), and
records in the IOCache every object, every folder above one (the plugin counts a folder with
entries as existing, its time the newest entry's) and the prefix itself as inventoried
(``has_inventory``), so every other file under the prefix is answered "absent" with no call.
Snakemake's ``--max-inventory-time`` bounds the listing as it bounds its local one: when time
runs out, what was listed is kept and the rest is asked file by file. Objects elsewhere (another
bucket or prefix), a worker's Snakemake, and a Snakemake without ``has_inventory`` take the
plugin's own path.

Why it stays correct: Snakemake reads the IOCache only while it builds the DAG; before the first
job of a real run it deactivates and clears it, and from then on asks storage directly, so an
object a job writes later is seen (Workflow.execute: "deactivate IOCache such that from now on
we always get updated size, existence and mtime information"). Nothing here keeps state outside
that cache but the prefix on the provider.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from importlib import metadata
from typing import Any

KNOWN_VERSIONS = frozenset({"1.1.4"})  # the versions whose StorageObject this was checked against
PAGE_SIZE = 1000  # GCS's largest page
FIELDS = "items(name,updated,size),nextPageToken"  # a partial response: what the cache needs
PREFIX_ATTR = "expocloud_listing_prefix"  # set on the default provider of the main process
_state: dict[str, Any] = {}  # what install() did, once per process


@dataclass(frozen=True)
class Listed:
    """One object (or folder) the listing showed: its name in the bucket, its time (seconds
    since the epoch) and its size in bytes (0 for a folder)."""

    name: str
    mtime: float
    size: int


@dataclass(frozen=True)
class Listing:
    """A prefix's objects; ``complete`` is False when the time ran out before the last page."""

    objects: tuple[Listed, ...]
    complete: bool
    pages: int


def listing_root(query: str, default_prefix: str | None) -> str | None:
    """The object-name prefix to list for ``query`` (``wf/`` for ``gs://b/wf/x`` under the
    default prefix ``gs://b/wf``; ``""`` for a whole-bucket prefix), or None when ``query`` is
    not under the default prefix."""
    if not default_prefix:
        return None
    prefix = default_prefix.replace("gcs://", "gs://", 1).rstrip("/")
    if not prefix.startswith("gs://") or not query.startswith(prefix + "/"):
        return None
    path = prefix.removeprefix("gs://").partition("/")[2]
    return f"{path}/" if path else ""


def with_folders(objects: Iterable[Listed], root: str) -> list[Listed]:
    """``objects`` and each folder above one below ``root`` (as the plugin's ``exists`` counts a
    folder with entries): a folder's time is its newest entry's, its size 0."""
    objects = list(objects)
    folders: dict[str, float] = {}
    for obj in objects:
        name = obj.name.rstrip("/")
        while "/" in name:
            name = name.rsplit("/", 1)[0]
            if len(name) < len(root) or not (name + "/").startswith(root):
                break
            folders[name] = max(folders.get(name, obj.mtime), obj.mtime)
    return objects + [Listed(name, mtime, 0) for name, mtime in folders.items()]


def list_prefix(pages: Iterator[Iterable[Any]], budget_s: float | None = None,
                clock: Callable[[], float] = time.monotonic) -> Listing:
    """Read a listing page by page (each page one call) into ``Listed`` records, stopping after
    the page that spends ``budget_s`` seconds (None: no limit)."""
    start = clock()
    found: list[Listed] = []
    read = 0
    for page in pages:
        read += 1
        found += [Listed(blob.name, blob.updated.timestamp(), int(blob.size or 0))
                  for blob in page]
        if budget_s is not None and clock() - start >= budget_s:
            return Listing(tuple(found), False, read)
    return Listing(tuple(found), True, read)


def install() -> str | None:
    """Replace the GCS plugin's inventory, once per process. Returns a line to log when it is
    left as it is (an unknown plugin version), else None."""
    if "result" in _state:
        return _state["result"]
    try:
        version = metadata.version("snakemake-storage-plugin-gcs")
    except metadata.PackageNotFoundError:
        _state["result"] = None  # no GCS plugin: nothing to speed up, nothing to say
        return None
    if version not in KNOWN_VERSIONS:
        _state["result"] = (
            f"expocloud: snakemake-storage-plugin-gcs {version} is not a version whose "
            f"inventory expocloud knows ({', '.join(sorted(KNOWN_VERSIONS))}); Snakemake's "
            "existence checks in the bucket go one call per file")
        return _state["result"]
    from snakemake import storage as snakemake_storage
    from snakemake_storage_plugin_gcs import StorageObject, StorageProvider

    _mark_default_provider(snakemake_storage.StorageRegistry, StorageProvider)
    _replace_inventory(StorageObject)
    _state["result"] = None
    return None


def _mark_default_provider(registry_cls: type, provider_cls: type) -> None:
    """Wrap ``StorageRegistry.__init__`` so that the main process's default GCS provider
    carries the default storage prefix: its objects are made from it (``prefix/path``)."""
    original = registry_cls.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        provider = getattr(self, "_default_storage_provider", None)
        workflow = getattr(self, "workflow", None)
        if isinstance(provider, provider_cls) and getattr(workflow, "is_main_process", False):
            setattr(provider, PREFIX_ATTR, workflow.storage_settings.default_storage_prefix)

    registry_cls.__init__ = __init__


def _root_of(obj: Any) -> tuple[str, str] | None:
    """The listed prefix ``obj`` falls under and its IOCache key, or None (memoised on the
    object by its query: Snakemake asks for the key at every existence check)."""
    memo = obj.__dict__.get("_expocloud_root")
    if memo is not None and memo[0] == obj.query:
        return memo[1]
    found = None
    if obj._overwrite_local_path is None:
        root = listing_root(obj.query, getattr(obj.provider, PREFIX_ATTR, None))
        if root is not None:
            found = (root, obj.cache_key(f"{obj.bucket_name}/{root}"))
    obj.__dict__["_expocloud_root"] = (obj.query, found)
    return found


def _replace_inventory(object_cls: type) -> None:
    """Replace ``inventory`` and ``get_inventory_parent`` of the plugin's ``StorageObject``."""
    own_inventory = object_cls.inventory
    own_parent = object_cls.get_inventory_parent

    def get_inventory_parent(self: Any) -> str | None:
        found = _root_of(self)
        return own_parent(self) if found is None else found[1]

    async def inventory(self: Any, cache: Any) -> None:
        found = _root_of(self)
        inventoried = getattr(cache.exists_in_storage, "has_inventory", None)
        budget = getattr(cache, "remaining_wait_time", None)
        if found is None or inventoried is None or (budget is not None and budget <= 0):
            return await own_inventory(self, cache)
        root, parent = found
        if parent in inventoried:
            return None
        start = time.monotonic()
        listing = _list(self, root, budget)
        _record(self, cache, listing, root)
        if listing.complete:
            inventoried.add(parent)
        if budget is not None:
            cache.remaining_wait_time = budget - (time.monotonic() - start)
        return None

    object_cls.get_inventory_parent = get_inventory_parent
    object_cls.inventory = inventory


def _list(obj: Any, root: str, budget: float | None) -> Listing:
    """The listing of ``root`` in ``obj``'s bucket (a missing bucket: nothing in it)."""
    from google.api_core.exceptions import NotFound

    blobs = obj.client.list_blobs(obj.bucket_name, prefix=root, page_size=PAGE_SIZE,
                                  fields=FIELDS)
    try:
        return list_prefix(iter(blobs.pages), budget)
    except NotFound:
        return Listing((), True, 1)


def _record(obj: Any, cache: Any, listing: Listing, root: str) -> None:
    """What the listing showed, into Snakemake's IOCache, keyed as the plugin keys it."""
    from snakemake_interface_storage_plugins.io import Mtime

    shown = with_folders(listing.objects, root) if listing.complete else listing.objects
    for item in shown:
        key = obj.cache_key(obj._local_suffix_from_key(item.name))
        cache.exists_in_storage[key] = True
        cache.mtime[key] = Mtime(storage=item.mtime)
        cache.size[key] = item.size
