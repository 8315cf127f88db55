"""The user's own Python packages for the workers (``--expocloud-worker-requirements``): the
file's grammar, its typed pins, and what may clash with the workers' own software.

A worker installs these with ``pip install --no-deps`` from exact pins, as it installs its own
software: no resolver runs on a VM, so a sweep's workers cannot drift apart. The grammar is
therefore the strict subset of pip's requirements format that says exactly what to install:
``name==version`` lines, each optionally followed by ``--hash=sha256:<64 hex digits>``
(several allowed), comments, blank lines and backslash continuations (as
``pip-compile --generate-hashes`` writes them). Anything else (a range, an unpinned name, an
option such as ``-r`` or ``--index-url``, a URL, an environment marker, extras) is refused with
the line, before any VM: each would let a VM choose what it installs.

Pure: the caller reads the file; this module only parses text.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from expo_executor.core.errors import ExpoError

SETTING = "--expocloud-worker-requirements"
PIN_FIX = ("write exact pins, one per line: name==version, optionally followed by "
           "--hash=sha256:<64 hex digits> (pip-compile --generate-hashes writes such files)")
_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_VERSION = r"[A-Za-z0-9][A-Za-z0-9.+!_-]*"
_LINE = re.compile(rf"({_NAME})\s*==\s*({_VERSION})((?:\s+--hash=sha256:[0-9a-fA-F]{{64}})*)")
_HASH = re.compile(r"--hash=sha256:([0-9a-fA-F]{64})")
_COMMENT = re.compile(r"(^|\s)#.*$")
_SHOWN = 100  # characters of a bad line quoted in the error


@dataclass(frozen=True)
class UserPin:
    """One exact requirement of the user's: ``name==version`` and its allowed sha256 digests
    (empty: not hashed)."""

    name: str
    version: str
    hashes: tuple[str, ...] = ()

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"

    def line(self) -> str:
        """The requirement as pip reads it from a requirements file."""
        return " ".join([self.pin, *(f"--hash=sha256:{h}" for h in self.hashes)])


def canonical_name(name: str) -> str:
    """PEP 503's normal form: ``Foo.Bar_baz`` and ``foo-bar-baz`` are one distribution."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """(first physical line number, the line with its continuations joined, comment removed)."""
    start, parts = 0, []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not parts:
            start = number
        line = _COMMENT.sub("", raw)
        if line.endswith("\\"):
            parts.append(line[:-1])
            continue
        parts.append(line)
        yield start, " ".join(parts).strip()
        parts = []
    if parts:
        yield start, " ".join(parts).strip()


def _bad(where: str, number: int, line: str, problem: str, fix: str = PIN_FIX) -> ExpoError:
    line = " ".join(line.split())  # a continued line's indentation, collapsed
    shown = line if len(line) <= _SHOWN else line[:_SHOWN] + "..."
    return ExpoError(SETTING, f"line {number} of {where}: {shown!r} {problem}", fix)


def parse_requirements(text: str, where: str) -> tuple[UserPin, ...]:
    """The pins of a requirements file's ``text`` (``where`` names it in errors), in file order.

    Raises ExpoError naming the setting, the line and the fix for a line that is not an exact
    pin, a distribution pinned twice, hashes on some lines but not others (pip then refuses
    the unhashed ones on the VM), or a file without a single pin.
    """
    pins: list[UserPin] = []
    seen: dict[str, int] = {}
    for number, line in _logical_lines(text):
        if not line:
            continue
        match = _LINE.fullmatch(line)
        if match is None:
            raise _bad(where, number, line, "is not an exact pin")
        name, version, hashes = match.groups()
        key = canonical_name(name)
        if key in seen:
            raise _bad(where, number, line, f"pins {name} again (line {seen[key]} did)",
                       "keep one line per distribution")
        seen[key] = number
        pins.append(UserPin(name, version, tuple(h.lower() for h in _HASH.findall(hashes))))
    if not pins:
        raise ExpoError(SETTING, f"{where} holds no name==version line",
                        "list your pins in it, or drop the setting")
    hashed = [p for p in pins if p.hashes]
    if hashed and len(hashed) != len(pins):
        first = next(p for p in pins if not p.hashes)
        raise ExpoError(SETTING, f"{where} gives --hash for {hashed[0].name} but not for "
                        f"{first.name}, and pip then refuses the unhashed lines",
                        "hash every line (pip-compile --generate-hashes) or none")
    return tuple(pins)


def requirements_text(pins: Iterable[UserPin]) -> str:
    """The pins as the requirements file a worker installs: one canonical line each."""
    return "".join(pin.line() + "\n" for pin in pins)


def worker_clashes(pins: Sequence[UserPin], worker_pins: Iterable[str],
                   worker_dist: str) -> list[str]:
    """How ``pins`` disagree with the workers' own ``name==version`` pins (empty: they do
    not). The same version twice is no clash: pip finds it installed. ``worker_dist``, the
    package the workers get as a wheel, may not be pinned at all."""
    ours = {canonical_name(p.partition("==")[0]): p for p in worker_pins}
    clashes = []
    for pin in pins:
        key = canonical_name(pin.name)
        if key == canonical_name(worker_dist):
            clashes.append(f"{pin.pin} (the workers get their own copy of {worker_dist})")
        elif key in ours and ours[key].partition("==")[2] != pin.version:
            clashes.append(f"{pin.pin} (the workers run {ours[key]}, the version this host "
                           "runs)")
    return clashes
