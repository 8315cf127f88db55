"""An in-memory bucket whose readers can be made to see the past, for tests that drive the
protocol's real parts in one process (tests/protocol_model.py, run by
tests/unit/protocol/test_protocol.py).

:class:`MemoryBucket` keeps the objects and the truth: every write gets the next generation,
preconditions (``if_generation_match``, 0: create only) are checked against the newest
version, as GCS checks them. Each party (the coordinator, each worker) reads and writes through
a :class:`BucketView` of its own, which keeps the bucket contract
(``expo_executor.protocol.bucket_contract.Bucket``) and counts its operations like the real
backends (``ops``). A view can be told to lag: :meth:`BucketView.hold` freezes what it sees
under a prefix at that moment, so its reads and listings there keep showing the older
generations (or no object at all) while other parties write, until :meth:`BucketView.catch_up`.
That is a slow read, and, since other prefixes move on meanwhile, reads seen out of the order
they were written in. A view always sees its own writes and deletes (the frozen copy takes
them), and never goes back in time: a prefix is frozen at the newest versions, and released to
the newest.
"""

from __future__ import annotations

from collections import Counter

from expo_executor.protocol.bucket_contract import (MAX_READ_BYTES, Blob, ObjectTooLarge,
                                                  PreconditionFailed)


class MemoryBucket:
    """The objects, their generations, and one view per reader (:meth:`view`)."""

    def __init__(self) -> None:
        self.url = "memory://model"
        self.objects: dict[str, Blob] = {}
        self._generation = 0

    def view(self) -> BucketView:
        return BucketView(self)

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        current = self.objects.get(key)
        if if_generation_match is not None and \
                (current.generation if current is not None else 0) != if_generation_match:
            raise PreconditionFailed(key)
        self._generation += 1
        self.objects[key] = Blob(bytes(data), self._generation)
        return self._generation

    def under(self, prefix: str) -> dict[str, Blob]:
        return {key: blob for key, blob in self.objects.items() if key.startswith(prefix)}


class BucketView:
    """One party's window on a :class:`MemoryBucket` (the bucket contract), which may lag."""

    def __init__(self, store: MemoryBucket) -> None:
        self.store = store
        self.url = store.url
        self.ops: Counter[str] = Counter()
        self._held: dict[str, dict[str, Blob]] = {}  # prefix -> what it showed when held

    # -- lagging ---------------------------------------------------------------------------
    def hold(self, prefix: str) -> None:
        """From now on, show ``prefix`` as it is now (a prefix already held stays as it was)."""
        if not any(prefix.startswith(held) for held in self._held):
            self._held[prefix] = self.store.under(prefix)

    def catch_up(self) -> None:
        """Show everything as it is now."""
        self._held.clear()

    def lags_on(self, key: str) -> bool:
        """Whether ``key`` is under a prefix this view holds."""
        return self._frozen(key) is not None

    def _frozen(self, key: str) -> dict[str, Blob] | None:
        return next((snap for prefix, snap in self._held.items() if key.startswith(prefix)),
                    None)

    # -- the bucket contract ---------------------------------------------------------------
    def read(self, key: str, limit: int | None = MAX_READ_BYTES,
             if_generation_not_match: int | None = None) -> Blob | None:
        """As the bucket contract: an unchanged generation is not read again, and an object
        over ``limit`` is refused (``ObjectTooLarge``) rather than handed out."""
        self.ops["B"] += 1
        frozen = self._frozen(key)
        blob = frozen.get(key) if frozen is not None else self.store.objects.get(key)
        if blob is None:
            return None
        if blob.generation == if_generation_not_match:
            return Blob(b"", blob.generation, unchanged=True)
        if limit is not None and len(blob.data) > limit:
            raise ObjectTooLarge(key, len(blob.data), limit, blob.generation)
        return blob

    def write(self, key: str, data: bytes, if_generation_match: int | None = None) -> int:
        self.ops["A"] += 1
        generation = self.store.write(key, data, if_generation_match)
        frozen = self._frozen(key)
        if frozen is not None:
            frozen[key] = self.store.objects[key]
        return generation

    def list(self, prefix: str) -> dict[str, int]:
        self.ops["A"] += 1
        seen = {key: blob.generation for key, blob in self.store.under(prefix).items()
                if self._frozen(key) is None}
        for held, snap in self._held.items():
            seen.update({key: blob.generation for key, blob in snap.items()
                         if key.startswith(prefix)})
        return seen

    def delete(self, key: str) -> None:
        self.ops["free"] += 1
        self.store.objects.pop(key, None)
        frozen = self._frozen(key)
        if frozen is not None:
            frozen.pop(key, None)
