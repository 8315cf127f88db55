"""A job's own snakemake, given the default and set resources as expocloud passes them
(frontends/snakemake/resource_args.py), gives every job the resources the main process gave it:
checked on Snakemake's own DAGs, built once from the given resources and once from the text
passed on, parsed by Snakemake's own command-line parsers."""

from __future__ import annotations

import base64
import shlex
from pathlib import Path

import pytest
from snakemake.cli import parse_set_resources
from snakemake.resources import Resources

from expo_executor.frontends.snakemake.resource_args import (default_resources_arg,
                                                             set_resources_arg)

from tests.helpers import snakemake_dag

# Snakemake's test_default_resources, with an input of 3 MB so that expressions over the input's
# size are told apart from constants
SNAKEFILE = """
rule all:
    input: "test.out"

rule a:
    input: "test.in"
    output: "test.out"
    group: "test"
    shell: "touch {output}"

rule b:
    output: "test.in"
    group: "test"
    shell: "touch {output}"
"""

PARSE = Resources.parser_factory(defaults="full", allow_expressions=True)  # --default-resources
SIZES = ("mem_mb", "mem_mib", "mem", "disk_mb", "disk_mib", "disk")


def _decoded(arg: str) -> list[str]:
    """The values of one ``--flag v1 v2...`` as the job's snakemake decodes them (base64)."""
    words = shlex.split(arg)[1:]
    return [base64.b64decode(word.removeprefix("base64//")).decode() for word in words]


def _resources(root: Path, defaults: Resources, set_resources: dict) -> dict[str, dict]:
    """Every job's size resources, by rule, in a DAG built with these resources."""
    with snakemake_dag(root, default_resources=defaults) as workflow:
        workflow.resource_settings.overwrite_resources = set_resources
        for rule in workflow.rules:  # as Workflow.rule applies --set-resources to a rule
            if rule.name in set_resources:
                rule.resources.update(set_resources[rule.name])
        return {job.rule.name: {name: job.resources.get(name) for name in SIZES}
                for job in workflow.dag.jobs}


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resource-args")
    (root / "Snakefile").write_text(SNAKEFILE)
    (root / "test.in").write_bytes(b"x" * 3_000_000)
    return root


@pytest.mark.parametrize("given", [
    ["mem_mib=953.67", "disk_mib=953.6743"],  # Snakemake's test_default_resources_mebibytes
    ["mem_mib=1000", "disk_mib=2*input.size_mb"],  # an integer; an expression in MiB
    ["mem='2 GB' if attempt == 1 else '4 GB'"],  # human-readable, from an expression
    ["mem_mb=max(2*input.size, 1000.1)", "disk_mb=max(2*input.size, 1000.2)"],
    [],  # Snakemake's full defaults
])
def test_a_job_gets_the_default_resources_the_main_process_gave_it(
        root: Path, given: list[str]) -> None:
    main = PARSE(given)
    passed = PARSE(_decoded(default_resources_arg(main)))
    assert _resources(root, passed, {}) == _resources(root, main, {})


def test_a_job_gets_the_set_resources_the_main_process_gave_it(root: Path) -> None:
    main = parse_set_resources(["a:mem_mib=1000", "b:disk_mib=953.67", "b:mem='3 GB'"])
    passed = parse_set_resources(_decoded(set_resources_arg(main)))
    assert _resources(root, PARSE([]), passed) == _resources(root, PARSE([]), main)
    assert _resources(root, PARSE([]), main)["a"]["mem_mb"] == 1048  # the case is not vacuous


def test_no_set_resources_no_argument() -> None:
    assert set_resources_arg({}) == ""
