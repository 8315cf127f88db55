"""List filters and paging of the fake Compute Engine, as ``instances.list``,
``aggregatedList`` and ``zoneOperations.list`` apply them.

A client's filter is parsed as the real API parses it (AIP-160 with Compute's legacy ``eq``/``ne``
form), so a filter the real API would refuse is refused here too (400), rather than silently
matching everything.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable
from typing import Any

from expo_executor.emulator.api_error import ApiError, int_field

MAX_RESULTS = 500

_TOKEN_RE = re.compile(r"""\s*(?:(\()|(\))|"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|(!=|>=|<=|=|>|<|:|~)|([^\s()=!<>:~"']+))""")


def _tokens(text: str) -> list[tuple[str, str]]:
    """(kind, text) pairs: ( ) str op word."""
    out: list[tuple[str, str]] = []
    pos = 0
    text = text.strip()
    while pos < len(text):
        match = _TOKEN_RE.match(text, pos)
        if match is None or match.end() == pos:
            raise ValueError(f"unexpected character at {pos}")
        pos = match.end()
        lpar, rpar, dq, sq, op, word = match.groups()
        if lpar:
            out.append(("(", lpar))
        elif rpar:
            out.append((")", rpar))
        elif dq is not None or sq is not None:
            out.append(("str", dq if dq is not None else sq))
        elif op:
            out.append(("op", op))
        elif word:
            out.append(("word", word))
    return out


def _lookup(resource: dict, path: str) -> Any:
    value: Any = resource
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _compare(value: Any, op: str, literal: str) -> bool:
    if op == ":":
        if literal == "*":
            return value is not None
        if isinstance(value, list):
            return any(_text(v) == literal for v in value)
        return value is not None and literal in _text(value)
    if op in ("eq", "ne"):
        found = value is not None and re.fullmatch(literal, _text(value)) is not None
        return found if op == "eq" else not found
    if value is None:
        return op == "!="
    text = _text(value)
    if op in ("=", "!="):
        equal = fnmatch.fnmatchcase(text, literal) if "*" in literal else text == literal
        return equal if op == "=" else not equal
    try:
        left, right = float(text), float(literal)
    except ValueError:
        left, right = text, literal  # type: ignore[assignment]
    return {">": left > right, "<": left < right, ">=": left >= right, "<=": left <= right}[op]


class _FilterParser:
    """AIP-160 as Compute uses it: ``(a = "x") (b:*)``, AND/OR/NOT, and the legacy
    ``field eq regex`` / ``field ne regex`` form."""

    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.pos = 0

    def parse(self) -> Callable[[dict], bool]:
        if not self.toks:
            return lambda _r: True
        expr = self._and()
        if self.pos != len(self.toks):
            raise ValueError(f"unexpected {self.toks[self.pos][1]!r}")
        return expr

    def _peek(self) -> tuple[str, str] | None:
        return self.toks[self.pos] if self.pos < len(self.toks) else None

    def _next(self) -> tuple[str, str]:
        tok = self._peek()
        if tok is None:
            raise ValueError("unexpected end of filter")
        self.pos += 1
        return tok

    def _and(self) -> Callable[[dict], bool]:
        parts = [self._or()]
        while (tok := self._peek()) is not None and tok[0] != ")":
            if tok == ("word", "AND"):
                self.pos += 1
            parts.append(self._or())
        return lambda r: all(p(r) for p in parts)

    def _or(self) -> Callable[[dict], bool]:
        parts = [self._unary()]
        while self._peek() == ("word", "OR"):
            self.pos += 1
            parts.append(self._unary())
        return lambda r: any(p(r) for p in parts)

    def _unary(self) -> Callable[[dict], bool]:
        tok = self._next()
        if tok == ("word", "NOT"):
            inner = self._unary()
            return lambda r: not inner(r)
        if tok[0] == "(":
            inner = self._and()
            if self._next()[0] != ")":
                raise ValueError("missing )")
            return inner
        if tok[0] != "word":
            raise ValueError(f"expected a field name, got {tok[1]!r}")
        path = tok[1]
        op_tok = self._next()
        if op_tok[0] == "op" and op_tok[1] != "~":
            op = op_tok[1]
        elif op_tok in (("word", "eq"), ("word", "ne")):
            op = op_tok[1]
        else:
            raise ValueError(f"expected an operator after {path}")
        literal = self._next()
        if literal[0] not in ("str", "word"):
            raise ValueError(f"expected a value after {path} {op}")
        return lambda r: _compare(_lookup(r, path), op, literal[1])


def compile_filter(text: str) -> Callable[[dict], bool]:
    """A predicate over resource JSON; a filter the API would reject raises ApiError 400."""
    try:
        return _FilterParser(text).parse()
    except (ValueError, re.error) as err:
        raise ApiError(400, "invalid", f"Invalid value for field 'filter': '{text}'. "
                                       f"Invalid list filter expression: {err}.") from None


def page(items: list, query: dict[str, str]) -> tuple[list, str | None]:
    """One page of ``items`` and the token of the next one."""
    size = int_field(query.get("maxResults", MAX_RESULTS), "maxResults")
    size = max(1, min(size, MAX_RESULTS))
    token = query.get("pageToken", "")
    start = 0
    if token:
        if not token.startswith("pg-"):
            raise ApiError(400, "invalid", f"Invalid value for field 'pageToken': '{token}'.")
        start = int_field(token[3:], "pageToken")
    chunk = items[start:start + size]
    nxt = f"pg-{start + size}" if start + size < len(items) else None
    return chunk, nxt
