"""The ``--workflow-profile`` trap, said in one line at the start of a run.

Snakemake reads a workflow's ``profiles/default`` only when no ``--workflow-profile`` is
given. ``snakemake --workflow-profile profiles/gce-spot`` therefore runs without the hardness
and deadlines the workflow declares there (and without its ``keep-going``), and nothing fails:
the sweep just runs every hopeless job to the end. The executor cannot read Snakemake's command
line, but it can compare what ``profiles/default`` declares with what the run's rules have, and
name the fix: engine settings belong in ``--profile``, which ``profiles/default`` joins.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

from expo_executor.coordinator.profile_settings import read_profile
from expo_executor.core.errors import ExpoError
from expo_executor.frontends.snakemake.describe import DEADLINE, HARDNESS

ANNOTATIONS = (HARDNESS, DEADLINE)
DEFAULT_PROFILE = Path("profiles") / "default" / "config.yaml"


def default_profile(snakefile: Path, cwd: Path) -> Path | None:
    """The workflow's ``profiles/default/config.yaml`` where Snakemake looks for it (the
    working directory, then the Snakefile's), None when there is none."""
    for base in (cwd, snakefile.parent):
        if (base / DEFAULT_PROFILE).is_file():
            return base / DEFAULT_PROFILE
    return None


def declared(config: Path) -> dict[str, set[str]]:
    """Rule -> the annotations (hardness, deadline) the profile's ``set-resources`` gives it.
    An unreadable profile declares nothing here: Snakemake reports it when it reads it."""
    try:
        resources = read_profile(config).resources
    except ExpoError:
        return {}
    found = {rule: {name for name in ANNOTATIONS if name in values}
             for rule, values in resources.items()}
    return {rule: names for rule, names in found.items() if names}


def lost(declared: Mapping[str, Iterable[str]],
         present: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """Rule -> the declared annotations its resources in this run lack (rules the workflow
    does not have are left out: Snakemake ignores them too)."""
    missing = {}
    for rule, names in declared.items():
        if rule in present:
            gone = [name for name in ANNOTATIONS if name in set(names) - set(present[rule])]
            if gone:
                missing[rule] = gone
    return missing


def warning(config: Path, missing: Mapping[str, list[str]]) -> str | None:
    """The one line that names what was lost and the fix; None when nothing was."""
    if not missing:
        return None
    what = "; ".join(f"rule {rule}: {' and '.join(names)}" for rule, names in
                     sorted(missing.items()))
    return (f"expocloud: warning: {config} declares what this run does not have ({what}), "
            "because a --workflow-profile replaces profiles/default; fix: give engine settings "
            "with --profile (e.g. --profile profiles/gce-spot), so profiles/default is read too")


def check(snakefile: Path, cwd: Path, rules: Mapping[str, Iterable[str]]) -> str | None:
    """The warning for a run whose rules have these resource names, or None."""
    config = default_profile(snakefile, cwd)
    if config is None:
        return None
    shown = config.relative_to(cwd) if config.is_relative_to(cwd) else config
    return warning(shown, lost(declared(config), rules))
