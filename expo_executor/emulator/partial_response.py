"""Google's partial responses (the ``fields`` parameter, or the ``X-Goog-FieldMask`` header),
for the emulators: a response cut to the fields a request names, as the real services cut it,
so a client that asks for less is tested against what it would really get.

The selector syntax: fields separated by commas, a path through nested objects written with
``/`` or ``.``, a sub-selection in parentheses, and ``*`` for every key of an object (a map such
as ``instances.aggregatedList``'s ``items``): ``items/*/instances(name,status),nextPageToken``.
A selector that does not parse is refused (the services answer 400).
"""

from __future__ import annotations

from typing import Any

_SPECIAL = ",()/."


def field_tree(fields: str) -> dict:
    """The selector as a tree: ``items(name,generation),nextPageToken`` is
    ``{"items": {"name": {}, "generation": {}}, "nextPageToken": {}}`` ({} keeps all below)."""
    tree: dict = {}
    end = _parse(fields, 0, tree)
    if end != len(fields):
        raise ValueError(f"bad fields selector {fields!r} at {end}")
    return tree


def _parse(text: str, i: int, tree: dict) -> int:
    """Parse a comma-separated list of paths into ``tree``; returns where it stopped."""
    while True:
        name, i = _name(text, i)
        node = tree.setdefault(name, {})
        while i < len(text) and text[i] in "/.":
            name, i = _name(text, i + 1)
            node = node.setdefault(name, {})
        if i < len(text) and text[i] == "(":
            i = _parse(text, i + 1, node)
            if i >= len(text) or text[i] != ")":
                raise ValueError(f"bad fields selector {text!r}: unclosed '('")
            i += 1
        if i < len(text) and text[i] == ",":
            i += 1
            continue
        return i


def _name(text: str, i: int) -> tuple[str, int]:
    start = i
    while i < len(text) and text[i] not in _SPECIAL:
        i += 1
    name = text[start:i].strip()
    if not name:
        raise ValueError(f"bad fields selector {text!r}: a field name is missing at {start}")
    return name, i


def partial_response(body: Any, tree: dict) -> Any:
    """Only the fields of ``tree`` of a JSON ``body``; a list keeps its items, each cut the
    same way; ``*`` keeps every key of an object, each cut by what follows it."""
    if not tree:
        return body
    if isinstance(body, list):
        return [partial_response(item, tree) for item in body]
    if not isinstance(body, dict):
        return body
    out: dict = {}
    for key, sub in tree.items():
        if key == "*":
            for name, value in body.items():
                out[name] = partial_response(value, sub)
        elif key in body:
            out[key] = partial_response(body[key], sub)
    return out
