"""The end of a job's log as it may leave the worker (its report's tail, a saved log): its
secrets blanked first, then cut, from a line start.

Blanking must come before any cut: a secret the cut ran through would keep the part on the
kept side, which no longer matches the secret (a token's last characters, the last lines of a
PEM key or a JSON service-account key). Here every secret is blanked whole where it lies whole
in what was read; what was read begins with the part of a secret that began before it, if any
(a piece no blanking can find), and the kept end starts at a line start after that piece and
outside every blank. A file is read with a margin as long as its longest secret before the end
kept, so that a secret reaching into the kept end is read whole.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from expo_executor.protocol.messages import REDACTED

_BLANK = REDACTED.encode()


@dataclass(frozen=True)
class LogEnd:
    """What is kept of a log: ``data`` (blanked, at most the cap's bytes, whole lines unless it
    is the whole file), the file's ``size``, and whether anything before ``data`` was left
    out."""

    data: bytes
    size: int
    cut: bool


def blanked_end(data: bytes, size: int, secrets: Sequence[str], cap: int) -> LogEnd:
    """The last ``data`` of a file of ``size`` bytes as it is kept: every secret blanked, then at
    most ``cap`` bytes from a line start that is past any piece of a secret begun before
    ``data`` and inside no blank."""
    wanted = sorted({s.encode("utf-8", "surrogateescape") for s in secrets if s},
                    key=len, reverse=True)
    spans = _spans(data, wanted)
    skip = _head_piece(data, wanted) if size > len(data) else 0
    growth = [0]  # the blanked text's length minus the original's, before each span
    for start, end in spans:
        growth.append(growth[-1] + len(_BLANK) - (end - start))
    total = len(data) + growth[-1]
    span_at = 0
    for begin in _line_starts(data, skip, from_zero=size == len(data)):
        while span_at < len(spans) and spans[span_at][1] <= begin:
            span_at += 1
        if span_at < len(spans) and spans[span_at][0] < begin:
            continue  # inside a blank
        if total - (begin + growth[span_at]) <= cap:
            return LogEnd(_render(data, spans[span_at:], begin), size,
                          begin > 0 or size > len(data))
    return LogEnd(b"", size, size > 0)


def read_end(path: Path, secrets: Sequence[str], cap: int) -> LogEnd | None:
    """A log file's end as it is kept (see :func:`blanked_end`); None when it is not a regular
    file that can be read (a job that failed before writing its log has none)."""
    margin = max((len(s.encode("utf-8", "surrogateescape")) for s in secrets), default=0)
    try:
        with open(path, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            size = handle.seek(0, os.SEEK_END)
            handle.seek(max(0, size - cap - margin))
            data = handle.read(cap + margin)
    except OSError:
        return None
    return blanked_end(data, size, secrets, cap)


def _spans(data: bytes, secrets: list[bytes]) -> list[tuple[int, int]]:
    """Where the secrets lie in ``data``, longest first (one may hold another), none
    overlapping; in order."""
    taken = bytearray(len(data))
    spans = []
    for secret in secrets:
        at = data.find(secret)
        while at != -1:
            end = at + len(secret)
            if not any(taken[at:end]):
                taken[at:end] = b"\1" * len(secret)
                spans.append((at, end))
                at = data.find(secret, end)
            else:
                at = data.find(secret, at + 1)
    return sorted(spans)


def _head_piece(data: bytes, secrets: list[bytes]) -> int:
    """How many of the first bytes may be the rest of a secret that began before them: the
    longest end of a secret that ``data`` starts with (or all of ``data``, when it is a part of
    one)."""
    longest = 0
    for secret in secrets:
        for i in range(1, len(secret)):
            rest = secret[i:]
            if len(rest) <= longest:
                break
            if data.startswith(rest) or rest.startswith(data):
                longest = min(len(rest), len(data))
                break
    return longest


def _line_starts(data: bytes, skip: int, from_zero: bool) -> Iterator[int]:
    """Where lines begin at or after ``skip``, in order, ending with the end of ``data``; 0
    only when ``from_zero`` (``data`` is the whole file: its first line is whole)."""
    if from_zero:
        yield 0
    at = data.find(b"\n", max(0, skip - 1))
    while at != -1:
        if at + 1 >= skip:
            yield at + 1
        at = data.find(b"\n", at + 1)
    yield len(data)


def _render(data: bytes, spans: list[tuple[int, int]], begin: int) -> bytes:
    parts, at = [], begin
    for start, end in spans:
        parts += [data[at:start], _BLANK]
        at = end
    parts.append(data[at:])
    return b"".join(parts)
