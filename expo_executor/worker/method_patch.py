"""One of Snakemake's methods, wrapped once per process, or left as it is.

Why one place: a few of our wrappers of Snakemake's private methods (``local_copies``,
``checkpoint_copies``, ``staged_bytes``) are installed by the plugin's settings, by the zygote
that forks jobs and by each job's command clock, so one process may install the same wrapper
twice; and what they wrap is Snakemake's internals, which may move in any release. Every such
install must therefore wrap at most once (a mark on the wrapper says it is ours), and must
change nothing, saying why, when Snakemake is not what the wrapper expects: the run then goes
on with Snakemake's own behaviour, never a broken job.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

Method = Callable[..., Any]


@dataclass(frozen=True)
class Wrap:
    """``owner.name`` to be replaced by ``wrap(owner.name)``."""

    owner: type
    name: str
    wrap: Callable[[Method], Method]


def not_found(what: str, exc: Exception) -> str:
    """Why nothing was wrapped: importing Snakemake's ``what`` failed."""
    return f"cannot find Snakemake's {what} ({type(exc).__name__}: {exc})"


def wrap_once(wraps: Sequence[Wrap], mark: str, what: str, expected: bool = True) -> str | None:
    """Replace each method by its wrapper, marked ``mark``; None when done, now or before (the
    first method already carries the mark). ``expected``: what the wrappers rely on besides
    the methods is there. When it is not, or a method is not callable, nothing changes and
    the reason names ``what``."""
    if getattr(getattr(wraps[0].owner, wraps[0].name, None), mark, False):
        return None
    originals = [getattr(w.owner, w.name, None) for w in wraps]
    if not expected or not all(callable(method) for method in originals):
        return f"Snakemake's {what}: not the expected methods"
    for w, original in zip(wraps, originals):
        wrapper = w.wrap(original)
        setattr(wrapper, mark, True)
        setattr(w.owner, w.name, wrapper)
    return None
