"""A job's Snakemake arguments parsed from those of the job its workflow template loaded:
parsing a job's whole command line was, once its workflow no longer loads, the largest part of
a trivial job's own CPU (Snakemake's parser has some 200 options, and its config-file and
environment layer visits each of them on every parse).

A job's command line differs from the template's first job's only in the job's own options
(worker/loaded_workflow.JOB_ONLY: ``--target-jobs``, ``--attempt``, ...). When everything
else is the same words, in the same order, with the same environment and the same files (the
template checks those), Snakemake would parse everything else to the same values: the job's
arguments are the template's own parse (:class:`Spare`, parsed once in the template and used
once in each fork, never shared) with the job's own options parsed anew. Anything else, an
option in a form not recognised among them included, leaves the job to Snakemake's whole
parse.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any


@dataclass
class Spare:
    """Snakemake's parse of the template's first job, kept for the jobs forked after it."""

    parser: Any  # Snakemake's (configargparse) parser
    args: argparse.Namespace
    rest: list[str]  # that job's words but its own options


def split(argv: list[str], parser: Any, job_only: frozenset[str]
          ) -> tuple[list[str], list[str]] | None:
    """The words of ``job_only`` options (argparse dests) and the rest, in order; None when a
    word of one of them is not one this split can read as argparse would."""
    actions = parser._option_string_actions  # noqa: SLF001 - argparse's own map of options
    own: list[str] = []
    rest: list[str] = []
    i = 0
    while i < len(argv):
        word = argv[i]
        option, explicit = (word.split("=", 1)[0], True) if word.startswith("--") and \
            "=" in word else (word, False)
        action = actions.get(option)
        if action is None or action.dest not in job_only:
            rest.append(word)
            i += 1
            continue
        values = 0 if explicit else _values(action.nargs, argv[i + 1:])
        if values is None:
            return None
        own.extend(argv[i:i + 1 + values])
        i += 1 + values
    return own, rest


def _values(nargs: Any, following: list[str]) -> int | None:
    """How many of the following words argparse gives an option of ``nargs`` (values never
    start with a dash here: one that does leaves the job to the whole parse)."""
    plain = 0
    while plain < len(following) and not following[plain].startswith("-"):
        plain += 1
    if nargs is None:
        return 1 if plain >= 1 else None
    if nargs == 0:
        return 0
    if nargs in ("*", "+"):
        return plain if plain or nargs == "*" else None
    if nargs == "?":
        return min(plain, 1)
    if isinstance(nargs, int):
        return nargs if plain >= nargs else None
    return None


def reparse(spare: Spare, argv: list[str], job_only: frozenset[str]) -> argparse.Namespace | None:
    """The job's arguments from ``spare`` (which this process then no longer has), or None:
    Snakemake must parse them whole."""
    parts = split(argv, spare.parser, job_only)
    if parts is None or parts[1] != spare.rest:
        return None
    args = spare.args
    for dest in job_only:  # the first job's own values go
        if hasattr(args, dest):
            setattr(args, dest, spare.parser.get_default(dest))
    try:
        args, extra = argparse.ArgumentParser.parse_known_args(spare.parser, parts[0], args)
    except SystemExit:  # argparse's own error: the whole parse says it in the job's log
        return None
    return None if extra else args
