"""A run's settings read outside Snakemake: from a profile's config.yaml and ``--expocloud-*``
flags, as ``snakemake --workflow-profile DIR`` would read them.

Why: ``expocloud doctor --profile profiles/gce-spot`` must check exactly what a run with that
profile would do, so it reads the same keys into the same :class:`ExecutorSettings`, plus what
else of the profile a run's checks need: ``default-storage-prefix`` (the coordination bucket)
and ``set-resources`` and ``set-threads`` (the machines rules name, or need). Other Snakemake
keys are left to Snakemake; an ``expocloud-*`` key that is no setting is an error, as it is for
a run.
"""

from __future__ import annotations

import argparse
import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from expo_executor.coordinator.settings import ExecutorSettings
from expo_executor.coordinator.shapes import THREADS
from expo_executor.core.errors import ExpoError

PREFIX = "expocloud-"


@dataclass(frozen=True)
class Profile:
    """What a profile holds for expocloud: settings (field name -> value), the default storage
    prefix, and ``set-resources`` (rule -> resource -> value), with a rule's ``set-threads`` as
    its resource ``_cores``, as Snakemake names threads among resources."""

    settings: Mapping[str, Any] = field(default_factory=dict)
    default_storage_prefix: str | None = None
    resources: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)


def _fields() -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(ExecutorSettings)}


def _base_type(annotation: object) -> type:
    """``Optional[int]`` -> ``int``; a plain type stays as it is."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    return args[0] if args else annotation  # type: ignore[return-value]


def add_setting_flags(parser: argparse.ArgumentParser) -> None:
    """``--expocloud-<field>`` for every setting, defaulting to None (not given)."""
    group = parser.add_argument_group("settings", "as for 'snakemake --executor expocloud' "
                                      "(they override the profile's)")
    for name, f in _fields().items():
        kind = _base_type(f.type)
        kwargs: dict[str, Any] = {"dest": f"expocloud_{name}", "default": None,
                                  "help": argparse.SUPPRESS}
        if kind is bool:
            kwargs["action"] = "store_const"
            kwargs["const"] = True
        else:
            kwargs["type"] = f.metadata.get("type", kind)
            kwargs["choices"] = f.metadata.get("choices")
        group.add_argument(f"--{PREFIX}{name.replace('_', '-')}", **kwargs)


def read_profile(path: Path) -> Profile:
    """A profile directory (or its config.yaml); ExpoError names the key and the fix."""
    import yaml

    config = path / "config.yaml" if path.is_dir() else path
    try:
        data = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ExpoError("--profile", f"cannot read {config} ({exc})",
                        "give a profile directory holding a config.yaml") from None
    if not isinstance(data, dict):
        raise ExpoError("--profile", f"{config} is not a mapping of keys to values",
                        "write key: value lines, as Snakemake profiles have them")
    fields = _fields()
    settings = {}
    for key, value in data.items():
        if not str(key).startswith(PREFIX):
            continue
        name = str(key)[len(PREFIX):].replace("-", "_")
        if name not in fields:
            raise ExpoError(f"{key} in {config}", "is not an expocloud setting",
                            "remove it or correct its name (snakemake --help lists them)")
        settings[name] = _value(f"{key} in {config}", value, fields[name])
    prefix = data.get("default-storage-prefix")
    resources = _resources(data.get("set-resources"), config)
    for rule, threads in _threads(data.get("set-threads"), config).items():
        resources.setdefault(rule, {})[THREADS] = threads
    return Profile(settings, str(prefix) if prefix else None, resources)


def _value(setting: str, value: Any, f: dataclasses.Field) -> Any:
    """A profile value as its setting's type (ExpoError when it is not one)."""
    kind = _base_type(f.type)
    if value is None or kind is bool:
        if value is not None and not isinstance(value, bool):
            raise ExpoError(setting, f"{value!r} is not true or false", "write true or false")
        return value
    convert = f.metadata.get("type", kind)
    try:
        return convert(str(value)) if convert in (int, float) else str(value)
    except ValueError:
        raise ExpoError(setting, f"{value!r} is not a number", "give a number") from None


def _resources(raw: Any, config: Path) -> dict[str, dict[str, Any]]:
    """``set-resources`` as Snakemake takes it in a profile: a mapping rule -> resource ->
    value, or a list of ``rule:resource=value``."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        return {str(rule): dict(values or {}) for rule, values in raw.items()}
    found: dict[str, dict[str, Any]] = {}
    for item in raw if isinstance(raw, list) else [raw]:
        rule, _, assignment = str(item).partition(":")
        name, equals, value = assignment.partition("=")
        if not equals:
            raise ExpoError(f"set-resources in {config}", f"{item!r} is not rule:resource=value",
                            "write set-resources as Snakemake takes it")
        found.setdefault(rule, {})[name] = int(value) if value.isdigit() else value.strip("'\"")
    return found


def _threads(raw: Any, config: Path) -> dict[str, int]:
    """``set-threads`` as Snakemake takes it in a profile: a mapping rule -> threads, or a list
    of ``rule=threads``; threads that are no number (an expression) are left to the run."""
    if raw is None:
        return {}
    if isinstance(raw, dict):
        pairs = [(str(rule), str(value)) for rule, value in raw.items()]
    else:
        pairs = [(rule, value) for rule, _, value in
                 (str(item).partition("=") for item in (raw if isinstance(raw, list) else [raw]))]
    found = {}
    for rule, value in pairs:
        if not rule or not value.strip():
            raise ExpoError(f"set-threads in {config}", f"{rule}={value!r} is not rule=threads",
                            "write set-threads as Snakemake takes it")
        if value.strip().isdigit():
            found[rule] = int(value)
    return found


def settings_of(profile: Profile, flags: argparse.Namespace) -> ExecutorSettings:
    """The profile's settings with the flags given on top."""
    values = dict(profile.settings)
    for name in _fields():
        given = getattr(flags, f"expocloud_{name}", None)
        if given is not None:
            values[name] = given
    return ExecutorSettings(**values)
