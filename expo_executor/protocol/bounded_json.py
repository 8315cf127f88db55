"""One bounded JSON decode for every object read from the bucket, whoever wrote it.

Anyone who can write to the bucket (any job, through the worker's service account) can plant
any bytes at any key, so a decode must end in a value or in one line saying why not, never in
another exception that stops the coordinator or a harvest (issue 30). Bounded:

- size: at most ``max_bytes``, checked before anything is parsed;
- encoding: UTF-8 only (``json.loads`` of bytes would also take UTF-16 and UTF-32);
- depth: at most ``MAX_DEPTH`` nested arrays and objects. Nesting deep enough to exhaust the
  parser's recursion raises ``RecursionError`` inside ``json.loads``, caught here; shallower
  nesting past the limit is found by an iterative walk after the parse;
- numbers: integers within 64 bits (a 4,000-digit integer parses, then overflows ``float()``
  further on) and finite floats (JSON parsers accept ``NaN``, ``Infinity`` and ``1e999``).

Types are the caller's to check (``messages.check`` for messages): this returns plain JSON
values.
"""

from __future__ import annotations

import json
import math
from typing import Any

MAX_DEPTH = 32  # a message nests 8 deep (envelope, body, jobs, job, stage, inputs, entry)
INT_LIMIT = 2**63  # integers are 64-bit on every side of the wire


class JsonRefused(ValueError):
    """Bytes that are not a bounded JSON document; its text is one line."""


def _int(text: str) -> int:
    value = int(text)  # more than 4,300 digits raise ValueError (Python's own limit)
    if not -INT_LIMIT <= value < INT_LIMIT:
        raise JsonRefused(f"integer of {len(text)} digits out of 64-bit range")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise JsonRefused(f"number {text[:20]} out of range")
    return value


def _constant(text: str) -> Any:
    raise JsonRefused(f"{text} is not a JSON number")


def loads(data: bytes, what: str, max_bytes: int) -> Any:
    """``data`` parsed, or :class:`JsonRefused` naming ``what`` and the reason in one line."""
    if len(data) > max_bytes:
        raise JsonRefused(f"{what}: {len(data)} bytes exceeds the {max_bytes} byte limit")
    try:
        text = bytes(data).decode("utf-8")
        value = json.loads(text, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise JsonRefused(f"{what}: nested deeper than {MAX_DEPTH}") from None
    except JsonRefused as exc:
        raise JsonRefused(f"{what}: {exc}") from None
    except ValueError as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        reason = " ".join(str(exc).split())[:200]
        raise JsonRefused(f"{what}: not JSON in UTF-8 ({reason})") from None
    if _depth(value) > MAX_DEPTH:
        raise JsonRefused(f"{what}: nested deeper than {MAX_DEPTH}")
    return value


def _depth(value: Any) -> int:
    """How deep arrays and objects nest in ``value`` (a scalar: 0), without recursion."""
    deepest = 0
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if deepest > MAX_DEPTH:
            break
        children = node.values() if isinstance(node, dict) else node
        stack.extend((child, depth + 1) for child in children
                     if isinstance(child, (dict, list)))
    return deepest
