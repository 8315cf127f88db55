"""Google's rules for resource labels, and the ``key=value,key=value`` text users write them in.

Checked before any VM (a bad label would otherwise be refused by Compute Engine at the first
create call, after staging): a key is 1-63 characters, starting with a lowercase letter
(international ones too), then lowercase letters, digits, '_' and '-'; a value is 0-63 of the
latter; keys and values are under 128 bytes each; a resource has at most 64 labels
(cloud.google.com/compute/docs/labeling-resources#requirements, and the API's
``\\p{Ll}\\p{Lo}[\\p{Ll}\\p{Lo}\\p{N}_-]{0,62}`` / ``[\\p{Ll}\\p{Lo}\\p{N}_-]{0,63}``).
Python's ``re`` has no ``\\p{..}``, so characters are classed by their Unicode category.

``expocloud-*`` keys are the executor's own (run, pool, slots, workflow, machine, rule): a user
label may not take one. Pure: the engine, the per-rule machines and the settings checks read it.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping

MAX_LABELS = 64
MAX_CHARS = 63
MAX_BYTES = 127
RESERVED_PREFIX = "expocloud-"
LABEL_RULES = ("keys start with a lowercase letter; keys and values hold at most 63 lowercase "
               "letters, digits, '_' and '-'")


def _allowed(char: str) -> bool:
    """A character of a label's key (after the first) or value: \\p{Ll}, \\p{Lo}, \\p{N}, _ -."""
    return char in "_-" or unicodedata.category(char) in ("Ll", "Lo") \
        or unicodedata.category(char).startswith("N")


def key_problem(key: str) -> str | None:
    """Why ``key`` is not a valid label key (None: it is)."""
    if not key:
        return "an empty label key"
    if len(key) > MAX_CHARS or len(key.encode()) > MAX_BYTES:
        return f"label key {key!r} is longer than {MAX_CHARS} characters"
    if unicodedata.category(key[0]) not in ("Ll", "Lo"):
        return f"label key {key!r} does not start with a lowercase letter"
    bad = next((c for c in key if not _allowed(c)), None)
    return None if bad is None else f"label key {key!r} holds {bad!r}"


def value_problem(key: str, value: str) -> str | None:
    """Why ``value`` is not a valid value of label ``key`` (None: it is)."""
    if len(value) > MAX_CHARS or len(value.encode()) > MAX_BYTES:
        return f"the value of label {key!r} is longer than {MAX_CHARS} characters"
    bad = next((c for c in value if not _allowed(c)), None)
    return None if bad is None else f"the value {value!r} of label {key!r} holds {bad!r}"


def labels_problem(labels: Mapping[str, str]) -> str | None:
    """Why ``labels`` cannot go on one resource (None: they can)."""
    if len(labels) > MAX_LABELS:
        return f"{len(labels)} labels, more than the {MAX_LABELS} a resource may have"
    for key, value in labels.items():
        problem = key_problem(key) or value_problem(key, value)
        if problem:
            return problem
    return None


def parse_labels(text: str | None) -> dict[str, str]:
    """``key=value,key=value`` (a bare ``key`` has the empty value) as a dict; raises
    ValueError, in one line, on a pair that breaks Google's rules, a repeated key or a reserved
    ``expocloud-`` key. Callers name their setting in the error they raise."""
    labels: dict[str, str] = {}
    for pair in (p.strip() for p in (text or "").split(",")):
        if not pair:
            continue
        key, _, value = (part.strip() for part in pair.partition("="))
        problem = key_problem(key) or value_problem(key, value)
        if problem is None and key.startswith(RESERVED_PREFIX):
            problem = f"label key {key!r} is reserved (expocloud-* keys are the executor's)"
        if problem is None and key in labels:
            problem = f"label key {key!r} is given twice"
        if problem:
            raise ValueError(problem)
        labels[key] = value
    return labels


_NOT_VALUE = re.compile(r"[^a-z0-9_-]+")


def as_value(text: str) -> str:
    """Any text (a rule, a workflow, a machine shape) as a label value: lowercase, each run of
    other characters one '-', at most 63 characters."""
    return _NOT_VALUE.sub("-", text.lower()).strip("-")[:MAX_CHARS].strip("-")
