"""Hardness: a partial order over parameter combinations, and the frontier of timed-out ones.

A spec such as ``"variant:heuristic<bnb<brute, n_tasks, n_agents; scope: dataset"`` names ordered
dimensions over wildcards (numeric values compare as numbers, categorical ones by the declared
order) and an optional scope: wildcards whose values partition the frontier, so that a timeout on
one dataset says nothing about another. ``a`` is as easy as ``b`` when they share a scope and every
coordinate of ``a`` is <= ``b``'s: one consistent partial order (the original ExpoCloud mixed a
lexicographic ``<`` with a Pareto ``<=``). Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

from expo_executor.core.errors import ExpoError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass(frozen=True)
class Dimension:
    """One ordered coordinate: numeric when ``order`` is None, else ranked by ``order``."""

    name: str
    order: tuple[str, ...] | None = None

    def rank(self, value: str, setting: str) -> float:
        """The coordinate of ``value``: its number, or its position in the declared order."""
        if self.order is not None:
            try:
                return float(self.order.index(value))
            except ValueError:
                raise _error(
                    setting,
                    f"value '{value}' of '{self.name}' is missing from its declared order "
                    f"{'<'.join(self.order)}",
                    f"add it, e.g. '{self.name}:{'<'.join(self.order)}<{value}'",
                ) from None
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):  # inf + -inf in one vector would make sort_key NaN
            raise _error(
                setting,
                f"'{self.name}' has the value '{value}', which is not a finite number, and no "
                "declared order",
                f"declare one, e.g. '{self.name}:{value}<other'",
            )
        return number

    def text(self) -> str:
        return self.name if self.order is None else f"{self.name}:{'<'.join(self.order)}"


@dataclass(frozen=True, order=True)
class HardnessPoint:
    """A task's place in the partial order: its scope (partition) and its coordinates."""

    scope: tuple[str, ...]
    vector: tuple[float, ...]

    def as_easy_as(self, other: HardnessPoint) -> bool:
        """True when every coordinate is <= ``other``'s within the same scope (Pareto order)."""
        return (
            self.scope == other.scope
            and len(self.vector) == len(other.vector)
            and all(a <= b for a, b in zip(self.vector, other.vector))
        )

    def sort_key(self) -> tuple[float, tuple[float, ...]]:
        """A linear extension of the partial order: coordinate sum, then the tuple itself.

        If ``a`` <= ``b`` coordinate-wise and ``a != b`` then ``sum(a) < sum(b)``, so sorting by
        this key never places a harder task before an easier one.
        """
        return (sum(self.vector), self.vector)


@dataclass(frozen=True)
class HardnessSpec:
    """Parsed hardness annotation, validated once before any job runs."""

    dimensions: tuple[Dimension, ...]
    scope: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        """Canonical text: the frontier is stored per spec, so equal specs must print equal."""
        dims = ", ".join(d.text() for d in self.dimensions)
        return dims + (f"; scope: {', '.join(self.scope)}" if self.scope else "")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(d.name for d in self.dimensions) + self.scope

    @classmethod
    def parse(cls, text: object, setting: str = "hardness") -> HardnessSpec:
        """Parse ``"dim[:a<b<c], dim, ...[; scope: w, ...]"``, raising ExpoError on any defect."""
        example = "e.g. 'variant:heuristic<bnb<brute, n_tasks, n_agents'"
        if not isinstance(text, str) or not text.strip():
            raise _error(setting, f"hardness spec {text!r} is empty or not a string",
                         f"give ordered dimensions, {example}")
        dims_text, _, scope_text = text.partition(";")
        scope: tuple[str, ...] = ()
        if scope_text.strip():
            key, sep, names = scope_text.strip().partition(":")
            if not sep:
                key, sep, names = scope_text.strip().partition("=")
            if key.strip() != "scope" or not sep:
                raise _error(setting, f"cannot read '{scope_text.strip()}' after ';'",
                             "write '; scope: wildcard1, wildcard2'")
            scope = tuple(_checked_name(n.strip(), setting) for n in names.split(","))
        dimensions = tuple(_parse_dimension(d.strip(), setting) for d in dims_text.split(","))
        seen: set[str] = set()
        for name in [d.name for d in dimensions] + list(scope):
            if name in seen:
                raise _error(setting, f"'{name}' appears twice in the hardness spec",
                             "name each wildcard once, either as a dimension or in the scope")
            seen.add(name)
        return cls(dimensions, scope)

    def check_wildcards(self, wildcards: Iterable[str], setting: str) -> None:
        """Reject a spec naming a wildcard the rule does not have."""
        known = set(wildcards)
        for name in self.names:
            if name not in known:
                have = ", ".join(sorted(known)) or "none"
                raise _error(setting, f"the hardness spec names the unknown wildcard '{name}' "
                             f"(the rule's wildcards: {have})",
                             "use the rule's own wildcard names")

    def point(self, wildcards: Mapping[str, str], setting: str = "hardness") -> HardnessPoint:
        """Map a job's wildcard values to its place in the partial order."""
        self.check_wildcards(wildcards.keys(), setting)
        vector = tuple(d.rank(str(wildcards[d.name]), setting) for d in self.dimensions)
        return HardnessPoint(tuple(str(wildcards[s]) for s in self.scope), vector)

    def describe(self, wildcards: Mapping[str, str]) -> str:
        """``{variant=bnb, n_tasks=9, n_agents=9}``: how users see a point in messages."""
        return "{" + ", ".join(f"{n}={wildcards.get(n)}" for n in self.names) + "}"


def _error(setting: str, problem: str, fix: str) -> ExpoError:
    """An ExpoError whose message stays on one line even when user text holds line breaks."""
    return ExpoError(setting, _one_line(problem), _one_line(fix))


def _one_line(text: str) -> str:
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _checked_name(name: str, setting: str) -> str:
    if not name:
        raise _error(setting, "a wildcard name is empty (a stray comma, or nothing around ';')",
                     "use names like n_tasks, separated by commas")
    if not _NAME.fullmatch(name):
        raise _error(setting, f"'{name}' is not a wildcard name",
                     "use names like n_tasks, separated by commas")
    return name


def _parse_dimension(text: str, setting: str) -> Dimension:
    name, sep, order_text = text.partition(":")
    name = _checked_name(name.strip(), setting)
    if not sep:
        return Dimension(name)
    order = tuple(v.strip() for v in order_text.split("<"))
    if any(not v for v in order) or len(set(order)) != len(order):
        raise _error(setting, f"the declared order '{order_text.strip()}' of '{name}' has an "
                     "empty or repeated value", f"list each value once, e.g. '{name}:a<b<c'")
    return Dimension(name, order)


def parse_duration(value: object, setting: str) -> float:
    """Seconds from ``90``, ``"90s"``, ``"5m"``, ``"1h30m"``: positive and finite, else ExpoError."""
    fix = "give a positive duration such as 90s, 5m or 1h"
    if isinstance(value, bool):
        raise _error(setting, f"{value!r} is not a duration", fix)
    if isinstance(value, (int, float)):
        try:
            seconds = float(value)
        except OverflowError:  # an int beyond the float range
            seconds = math.inf
    elif isinstance(value, str):
        text = value.strip().lower()
        try:
            seconds = float(text)
        except ValueError:
            parts = _DURATION.findall(text)
            if not parts or _DURATION.sub("", text).strip():
                raise _error(setting, f"cannot read the duration {value!r}", fix) from None
            seconds = sum(float(n) * _UNIT_SECONDS[u] for n, u in parts)
    else:
        raise _error(setting, f"{value!r} is not a duration", fix)
    if not math.isfinite(seconds) or seconds <= 0:
        raise _error(setting, f"the duration {value!r} is not a positive, finite time", fix)
    return seconds


@dataclass(frozen=True)
class FrontierPoint:
    """A timed-out point, with the label users see when it dominates another task."""

    point: HardnessPoint
    label: str


@dataclass
class Frontier:
    """The minimal timed-out points: an antichain, so checks stay cheap as timeouts pile up."""

    points: list[FrontierPoint] = field(default_factory=list)

    def dominator(self, point: HardnessPoint) -> FrontierPoint | None:
        """The timed-out point that makes ``point`` hopeless, if any."""
        for entry in self.points:
            if entry.point.as_easy_as(point):
                return entry
        return None

    def add(self, point: HardnessPoint, label: str) -> bool:
        """Record a timeout; returns False when an easier timeout already covers it."""
        if self.dominator(point) is not None:
            return False
        self.points = [e for e in self.points if not point.as_easy_as(e.point)]
        self.points.append(FrontierPoint(point, label))
        return True
