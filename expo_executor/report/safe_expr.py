"""Safe expressions over a job's numbers, for ``report --filter`` and ``report --best``.

Users type these on a command line and may paste them from anywhere, so they are parsed with :mod:`ast` and
run by walking a whitelist of node types: never ``eval``/``exec``, so an expression cannot reach attributes,
imports or files, and the integer operations that could exhaust memory (huge powers, huge ``round`` digits)
are bounded.

Semantics chosen for result tables, where rows differ in which columns they have:

* a missing value (``None``) makes the expression "no value" (``None``) rather than an error, so a filter on
  ``cost`` drops failed jobs instead of crashing; ``and``/``or`` follow three-valued logic, so
  ``cost < 1 or variant == "bnb"`` still keeps a failed ``bnb`` row;
* data-dependent arithmetic failures (division by zero, overflow, ``log(0)``, ``sqrt(-1)``) also give ``None``;
* strings that look like numbers (wildcards are strings: ``"7"``) are numbers, in the values and in the text.

This module holds what callers share (the limits, :class:`Expression`, :class:`ExpressionError`,
``as_number``); ``safe_expr_compile`` turns text into an :class:`Expression`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from expo_executor.core.errors import ExpoError

MAX_TEXT_CHARS = 2000
"""Longer expressions are refused: nobody types them, and they could make the parser recurse deeply."""
MAX_INT_BITS = 4096
"""Integer results beyond this many bits are refused: they cost memory and cannot be printed (4300-digit limit)."""
MAX_ROUND_DIGITS = 100
"""round(x, n) with |n| beyond this is refused: round(5, -10**8) would build 10**(10**8)."""
FUNCTION_NAMES = ("abs", "min", "max", "round", "sqrt", "log", "exp")

ALLOWED = (
    "use only column names, numbers, \"strings\", + - * / // % **, comparisons (< <= == != >= >), "
    "and/or/not, parentheses and abs/min/max/round/sqrt/log/exp"
)

_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INT_RE = re.compile(r"[+-]?\d+")
_MAX_INT_DIGITS = 1000

Value = object
Evaluator = Callable[[Mapping[str, Value]], Value]


class ExpressionError(ExpoError, ValueError):
    """A filter or criterion that cannot be parsed, is not allowed, or does not fit the data.

    A ValueError (callers validating input expect one) and an ExpoError (the CLI prints those as one line).
    """

    def __init__(self, text: str, problem: str, fix: str = ALLOWED) -> None:
        super().__init__(f"expression {shorten(text)!r}", problem, fix)
        self.text = text


def as_number(value: Value) -> Value:
    """Return a number for a numeric-looking string ("7", "-2.5e3"), else the value unchanged.

    Wildcards are always strings; without this ``n_tasks >= 5`` would compare a string with a number.
    "nan", "inf" and "1_000" stay strings: they are more likely names than numbers in a wildcard.
    """
    if not isinstance(value, str):
        return value
    text = value.strip()
    if not _NUMBER_RE.fullmatch(text):
        return value
    if _INT_RE.fullmatch(text) and len(text) <= _MAX_INT_DIGITS:
        return int(text)
    return float(text)


def is_number(value: Value) -> bool:
    """True for int/float/bool: the values arithmetic accepts."""
    return isinstance(value, (int, float))


@dataclass(frozen=True)
class Expression:
    """A validated expression; evaluate it once per row."""

    text: str
    names: frozenset[str]
    _run: Evaluator = field(repr=False, compare=False)

    def evaluate(self, values: Mapping[str, Value]) -> Value:
        """Evaluate over ``values``; None means "no value" (a name's value is None, or the arithmetic failed).

        A name absent from ``values`` is an error rather than None: it is almost always a typo.
        """
        unknown = sorted(name for name in self.names if name not in values)
        if unknown:
            raise ExpressionError(
                self.text, f"unknown name {unknown[0]!r}", f"use one of the columns: {_list_names(values)}"
            )
        coerced = {name: as_number(values[name]) for name in self.names}
        try:
            return self._run(coerced)
        except RecursionError:
            raise ExpressionError(self.text, "too deeply nested", "simplify the expression") from None


def shorten(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit`` characters for an error message."""
    one_line = " ".join(text.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 3] + "..."


def _list_names(values: Mapping[str, Value], limit: int = 25) -> str:
    names = sorted(str(name) for name in values)
    if not names:
        return "(none: the table is empty)"
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names)} in all)" if len(names) > limit else "")
