"""The ``--default-resources`` and ``--set-resources`` a job's own snakemake is given, in the
units they were given in.

Snakemake keeps a size resource under one normalised name: ``mem_mib=953.67`` becomes
``mem_mb`` whose value converts the given mebibytes to megabytes (``Resource.standardize_size``).
Its remote executors hand those resources to a job's snakemake as ``Resources.args``,
``f"{name}={value.raw}"``: the raw mebibytes under the megabytes' name. The job's snakemake
then reads ``mem_mb=953.67``, its rules see ``mem_mb=954, mem_mib=910`` where the main process
gave them ``mem_mb=1000, mem_mib=954``, and a shell line that formats ``{resources.mem_mb}``
differs from plain Snakemake's (Snakemake's test_default_resources_mebibytes; cluster-generic
fails it the same way). A given ``mem_mib=2000`` (an integer) is passed as ``mem_mb=2000``, and a
size given as an expression in human-readable units (``mem="'2 GB' if attempt == 1 else '4
GB'"``) loses its raw text in normalising and is not passed at all.

So each resource is passed here as it was given: an integer as its normalised value under its
normalised name (``mem_mb=1049`` for ``mem_mib=1000``), an expression under the name it was given
with (``mem_mib=953.67``), which the job's snakemake normalises as the main process did. The
given resource of an expression is the one ``standardize_size`` wrapped: its wrapper's closure
holds it as ``self``. Where that is not found (another Snakemake version), Snakemake's own
rendering is kept.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping

from snakemake_interface_executor_plugins.utils import format_cli_arg


def given(resource: object) -> object:
    """The resource as it was given, before Snakemake normalised its name and unit: what
    ``standardize_size``'s wrapper of its evaluator closes over as ``self`` (the resource
    itself when it was not wrapped)."""
    evaluator = getattr(resource, "_evaluator", None)
    while evaluator is not None:
        wrapped = inspect.getclosurevars(evaluator).nonlocals.get("self")
        if wrapped is None or wrapped is resource or not hasattr(wrapped, "raw"):
            break
        resource = wrapped
        evaluator = getattr(resource, "_evaluator", None)
    return resource


def rendered(name: str, resource: object) -> str | None:
    """``NAME=VALUE`` for one resource, as a job's snakemake parses it to what the main process
    holds; None for one that has no text to give (Snakemake passes none either). A plain value
    (a Snakemake whose resources are not ``Resource`` objects) is passed as it is."""
    if not hasattr(resource, "is_evaluable"):
        return f"{name}={resource}"
    if not resource.is_evaluable():
        value = resource.value
        if isinstance(value, int):
            return f"{name}={value}"  # already in the normalised name's unit
        return None if resource.raw is None else f"{name}={resource.raw}"
    source = given(resource)
    if source.raw is None:
        return None
    return f"{source.name}={source.raw}"


def resource_texts(resources: object) -> list[str]:
    """Every resource of a Snakemake ``Resources`` as ``rendered`` gives it; Snakemake's own
    ``args`` for anything else (a version whose resources are not a mapping of ``Resource``);
    none for None."""
    if resources is None:
        return []
    if not isinstance(resources, Mapping):
        return list(resources.args)
    texts = (rendered(name, resource) for name, resource in resources.items())
    return [text for text in texts if text is not None]


def default_resources_arg(resources: object) -> str:
    """``--default-resources`` for a job's snakemake (base64, as Snakemake encodes it)."""
    return format_cli_arg("--default-resources", resource_texts(resources),
                          base64_encode=True)


def set_resources_arg(per_rule: Mapping[str, object]) -> str:
    """``--set-resources`` for a job's snakemake, every rule's (empty when none is set).
    Given after Snakemake's own, it replaces it: the job's command line keeps the last."""
    texts: Iterable[str] = [f"{rule}:{text}" for rule, resources in per_rule.items()
                            for text in resource_texts(resources)]
    return format_cli_arg("--set-resources", list(texts), skip=not texts,
                          base64_encode=True)
