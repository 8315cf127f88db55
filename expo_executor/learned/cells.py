"""A model's cells: the fixed effects' levels, and the declared order over them.

A cell is what a job is apart from its noise: every parameter but the noise columns, or, with a
declared order, only the order's dimensions and the scope's non-noise columns (so that a cell's
mean is all the queue's rank depends on, and two jobs the order compares are two cells it
compares). With an order, the cells' means are made monotone along each dimension (weighted
pool-adjacent-violators over each chain of cells that differ in that dimension alone, then a
running maximum, which leaves them monotone in every dimension at once), except across the
edges where the data disagrees with the order beyond doubt: those edges are cut and reported.
Pure Python: cells are few (the parameter grid, not the jobs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

from expo_executor.core.hardness import HardnessSpec
from expo_executor.core.runtime_model import ModelSpec, OrderDisagreement

DOUBT = 3.0  # standard errors by which a harder cell must be faster to dispute the order
Key = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Edge:
    """Two observed cells next to each other along ``dim`` (``easier`` declared <= ``harder``)."""

    dim: int
    easier: int
    harder: int


class CellBook:
    """The cells seen so far, their coordinates in the declared order, and its chains."""

    def __init__(self, spec: ModelSpec):
        self.spec = spec
        self.keys: list[Key] = []
        self.index: dict[Key, int] = {}
        self._coords: list[tuple[float, ...]] = []
        self._slices: list[Key] = []
        self.cut: set[Edge] = set()

    @property
    def ordered(self) -> HardnessSpec | None:
        return self.spec.ordered

    def key(self, params: Mapping[str, str]) -> Key:
        noise = set(self.spec.noise)
        if self.ordered is None:
            return tuple(sorted((k, str(v)) for k, v in params.items() if k not in noise))
        names = [n for n in self.ordered.names if n not in noise]
        return tuple((n, str(params.get(n, ""))) for n in names)

    def cell(self, params: Mapping[str, str]) -> int:
        """The index of ``params``' cell, added when new."""
        key = self.key(params)
        found = self.index.get(key)
        if found is not None:
            return found
        self.index[key] = len(self.keys)
        self.keys.append(key)
        coords, slice_ = self._place(key)
        self._coords.append(coords)
        self._slices.append(slice_)
        return len(self.keys) - 1

    def _place(self, key: Key) -> tuple[tuple[float, ...], Key]:
        if self.ordered is None:
            return (), key
        values = dict(key)
        coords = tuple(d.rank(values[d.name], "hardness") for d in self.ordered.dimensions)
        dims = {d.name for d in self.ordered.dimensions}
        return coords, tuple(kv for kv in key if kv[0] not in dims)

    def chains(self) -> list[tuple[int, list[int]]]:
        """(dimension, cells along it, easiest first) for every line of cells that differ in
        that dimension alone."""
        if self.ordered is None:
            return []
        out: list[tuple[int, list[int]]] = []
        for dim in range(len(self.ordered.dimensions)):
            lines: dict[tuple, list[int]] = {}
            for cell, coords in enumerate(self._coords):
                rest = coords[:dim] + coords[dim + 1:]
                lines.setdefault((self._slices[cell], rest), []).append(cell)
            for cells in lines.values():
                out.append((dim, sorted(cells, key=lambda c: self._coords[c][dim])))
        return out

    def disputes(self, mu: Sequence[float], var: Sequence[float]) -> set[Edge]:
        """Edges whose harder cell's free mean is below the easier one's by more than DOUBT
        standard errors."""
        found: set[Edge] = set()
        for dim, cells in self.chains():
            for easier, harder in zip(cells, cells[1:]):
                gap = mu[easier] - mu[harder]
                if gap > DOUBT * math.sqrt(var[easier] + var[harder]):
                    found.add(Edge(dim, easier, harder))
        return found

    def project(self, mu: Sequence[float], weight: Sequence[float]) -> list[float]:
        """Monotone means along every chain, cut at ``self.cut``."""
        out = list(mu)
        chains = [(dim, seg) for dim, cells in self.chains() for seg in self._segments(dim, cells)]
        for _ in range(3):
            for _dim, seg in chains:
                for cell, value in zip(seg, _pava([out[c] for c in seg], [weight[c] for c in seg])):
                    out[cell] = value
        for _ in range(len(self.keys) + 1):  # a running max: terminates, values only rise
            moved = False
            for _dim, seg in chains:
                for a, b in zip(seg, seg[1:]):
                    if out[b] < out[a]:
                        out[b], moved = out[a], True
            if not moved:
                break
        return out

    def _segments(self, dim: int, cells: list[int]) -> list[list[int]]:
        segments, current = [], [cells[0]] if cells else []
        for a, b in zip(cells, cells[1:]):
            if Edge(dim, a, b) in self.cut:
                segments.append(current)
                current = []
            current.append(b)
        return segments + ([current] if current else [])

    def disputed(self, cell: int) -> bool:
        """Is ``cell`` at or beyond (in the declared order, same slice) the harder end of a
        cut edge?"""
        coords, slice_ = self._coords[cell], self._slices[cell]
        return any(self._slices[e.harder] == slice_
                   and all(a <= b for a, b in zip(self._coords[e.harder], coords))
                   for e in self.cut)

    def below(self, key: Key, mu: Sequence[float]) -> float | None:
        """For a cell the last fit did not see: the highest mean of the fitted cells declared
        as easy as it (so its rank stays monotone), else the lowest of its slice; None with no
        order."""
        if self.ordered is None:
            return None
        coords, slice_ = self._place(key)
        same = [c for c in range(min(len(self.keys), len(mu))) if self._slices[c] == slice_]
        easier = [mu[c] for c in same if all(a <= b for a, b in zip(self._coords[c], coords))]
        if easier:
            return max(easier)
        return min((mu[c] for c in same), default=min(mu, default=0.0))

    def record(self, edge: Edge, mu: Sequence[float]) -> OrderDisagreement:
        assert self.ordered is not None
        return OrderDisagreement(self.ordered.dimensions[edge.dim].name,
                                 dict(self.keys[edge.easier]), dict(self.keys[edge.harder]),
                                 math.exp(mu[edge.easier]), math.exp(mu[edge.harder]))


def _pava(values: list[float], weights: list[float]) -> list[float]:
    """Weighted isotonic (non-decreasing) regression of a sequence: pool adjacent violators."""
    blocks: list[list[float]] = []  # [mean, weight, count]
    for value, weight in zip(values, weights):
        blocks.append([value, max(weight, 1e-9), 1])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, w2, n2 = blocks.pop()
            m1, w1, n1 = blocks.pop()
            blocks.append([(m1 * w1 + m2 * w2) / (w1 + w2), w1 + w2, n1 + n2])
    out: list[float] = []
    for mean, _weight, count in blocks:
        out.extend([mean] * int(count))
    return out
