"""Snakemake's own test workflows, read from the installed version's source distribution.

``tests/snakemake_tests.sh DIR`` (run by .ci/run) unpacks the sdist's ``tests/`` folder; the
environment variable ``EXPOCLOUD_SNAKEMAKE_TESTS`` points at it. Nothing of it is copied into
this repository: each case's arguments are read from Snakemake's own ``tests.py`` (the one
``run(dpath(NAME), ...)`` call of its test function), and its results are compared with its
``expected-results/`` as Snakemake's harness (``tests/common.py``, ``run``) compares them.
"""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers import require

ENV = "EXPOCLOUD_SNAKEMAKE_TESTS"
HARNESS_CORES = 3  # run()'s default in Snakemake's tests/common.py


@dataclass(frozen=True)
class Case:
    """One test of Snakemake's suite: its folder and the keyword arguments of its run()."""

    test: str
    folder: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    def args(self) -> list[str]:
        """The command-line arguments run() would have given Snakemake's API."""
        kw = self.kwargs
        args = ["--cores", str(kw.get("cores", HARNESS_CORES))]
        if "snakefile" in kw:
            args += ["--snakefile", kw["snakefile"]]
        for flag, key in (("--set-resources", "overwrite_resources"),):
            for rule, values in (kw.get(key) or {}).items():
                args += [flag, *(f"{rule}:{k}={v!r}" if isinstance(v, str) else
                                 f"{rule}:{k}={v}" for k, v in values.items())]
        for flag, key in (("--config", "config"), ("--set-scatter", "overwrite_scatter"),
                          ("--groups", "overwrite_groups"),
                          ("--group-components", "group_components"),
                          ("--resources", "resources")):
            pairs = [f"{k}={v}" for k, v in (kw.get(key) or {}).items()]
            args += [flag, *pairs] if pairs else []
        for flag, key in (("--default-resources", "default_resources"), ("--until", "until"),
                          ("--omit-from", "omit_from")):
            args += [flag, *kw[key]] if kw.get(key) else []
        for flag, key in (("--forceall", "forceall"), ("--all-temp", "all_temp"),
                          ("--benchmark-extended", "benchmark_extended")):
            args += [flag] if kw.get(key) else []
        if kw.get("retries"):
            args += ["--retries", str(kw["retries"])]
        if kw.get("shadow_prefix"):
            args += ["--shadow-prefix", kw["shadow_prefix"]]
        targets = kw.get("targets") or []
        return args + (targets.split() if isinstance(targets, str) else list(targets))


def tests_dir() -> Path:
    """The unpacked ``tests/`` of the installed Snakemake's sdist (skips when absent)."""
    value = os.environ.get(ENV)
    if not value or not (Path(value) / "tests.py").is_file():
        require(False, f"{ENV} does not point at Snakemake's tests/: run "
                "tests/snakemake_tests.sh DIR (as .ci/run does) and export it")
    return Path(value)  # type: ignore[arg-type]


def read_cases(tests: Path) -> dict[str, Case]:
    """Every test function of ``tests.py`` that is a single run(dpath("NAME"), literals...)."""
    cases = {}
    for node in ast.parse((tests / "tests.py").read_text()).body:
        if not isinstance(node, ast.FunctionDef) or len(node.body) != 1:
            continue
        call = getattr(node.body[0], "value", None)
        if not (isinstance(call, ast.Call) and ast.unparse(call.func) == "run" and call.args
                and ast.unparse(call.args[0]).startswith("dpath(")):
            continue
        try:
            folder = ast.literal_eval(call.args[0].args[0])  # type: ignore[attr-defined]
            kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords if k.arg}
        except ValueError:
            continue  # an argument that is not a literal: not reproducible from here
        cases[node.name] = Case(node.name, folder, kwargs)
    return cases


def copy_case(tests: Path, case: Case, dest: Path) -> Path:
    """The case's folder as Snakemake's harness prepares it (a copy; the original untouched)."""
    shutil.copytree(tests / case.folder, dest, symlinks=True)
    return dest


def compare_results(tests: Path, case: Case, workdir: Path) -> list[str]:
    """Differences from ``expected-results/`` (Snakemake's rule: stripped bytes, existence
    only when check_md5=False; .gitignore, .gitkeep and *_WIN skipped)."""
    if case.kwargs.get("check_results") is False:
        return []
    expected = tests / case.folder / "expected-results"
    problems = []
    for path in sorted(expected.rglob("*")) if expected.is_dir() else []:
        if not path.is_file() or path.name in (".gitignore", ".gitkeep") \
                or path.name.endswith("_WIN"):
            continue
        relative = path.relative_to(expected)
        produced = workdir / relative
        if not produced.is_file():
            problems.append(f"{relative}: not produced")
        elif case.kwargs.get("check_md5", True) and \
                produced.read_bytes().strip() != path.read_bytes().strip():
            problems.append(f"{relative}: differs")
    return problems


def verdict(tests: Path, case: Case, workdir: Path, proc: subprocess.CompletedProcess) -> str:
    """'' when the run did what Snakemake's own test asks (succeeded with its expected
    results, or failed when it should fail); else what went wrong, with the output's end."""
    if case.kwargs.get("shouldfail"):
        return "" if proc.returncode != 0 else "succeeded, but the test expects a failure"
    if proc.returncode != 0:
        return f"exit code {proc.returncode}:\n{(proc.stdout + proc.stderr)[-3000:]}"
    problems = compare_results(tests, case, workdir)
    return "; ".join(problems)
