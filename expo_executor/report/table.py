"""The results table: one row per job with its parameters, outcome and numbers, and the steps
a report takes over it (filter, minimum group size, best row). Works on plain rows (dicts), so
the command line and the tests can call each step on its own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal

from expo_executor.report.rule_hardness import select_jobs
from expo_executor.report.run_reader import ReportError, read_job_numbers
from expo_executor.report.safe_expr import Expression, ExpressionError, as_number, is_number
from expo_executor.report.safe_expr_compile import compile_expression
from expo_executor.report.values import SOLVED, Row, check_columns, columns_of, norm


FIXED_COLUMNS = ("rule", "outcome", "runtime_s", "worker")
"""Columns every row has; a wildcard with one of these names becomes ``wc_<name>``."""
OUTPUT_PREFIX = "out_"
"""Prefix for a job number whose name clashes with a wildcard or fixed column."""
WILDCARD_PREFIX = "wc_"
TABLE_SUFFIXES = (".json", ".tsv", ".csv")
Direction = Literal["min", "max"]


def build_rows(jobs: Sequence[Mapping], workdir: Path, rule: str | None = None) -> list[Row]:
    """Flat rows: rule, wildcards, outcome, runtime_s, worker, then the numbers a solved job wrote."""
    return [_job_row(job, Path(workdir)) for job in select_jobs(jobs, rule)]


def apply_filter(rows: Sequence[Row], expr: Expression | str) -> list[Row]:
    """Keep the rows where ``expr`` is truthy; rows where it has no value (None, NaN) are dropped."""
    expr = as_expression(expr)
    _check_names(rows, expr)
    return [row for row in rows if _truthy(expr.evaluate(expression_values(row, expr)))]


def apply_min_group_size(rows: Sequence[Row], k: int, group_by: Sequence[str]) -> list[Row]:
    """Drop every row of a group (same values in ``group_by``) that has fewer than ``k`` solved rows.

    The original ExpoCloud counted all rows, so a group of timeouts always passed; only solved ones count here.
    """
    if k <= 0:
        return list(rows)
    check_columns(rows, group_by, "group_by")
    solved = Counter(group_key(row, group_by) for row in rows if row.get("outcome") == SOLVED)
    return [row for row in rows if solved[group_key(row, group_by)] >= k]


def best_row(rows: Sequence[Row], direction: Direction, expr: Expression | str) -> Row | None:
    """The solved row with the smallest (``min``) or largest (``max``) criterion; the first one on ties."""
    if direction not in ("min", "max"):
        raise ReportError("best", f"direction {direction!r} is neither 'min' nor 'max'", "use min or max")
    expr = as_expression(expr)
    _check_names(rows, expr)
    best: Row | None = None
    best_value = math.nan
    for row in rows:
        if row.get("outcome") != SOLVED:
            continue
        value = expr.evaluate(expression_values(row, expr))
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if not is_number(value):
            raise ExpressionError(expr.text, f"the criterion gave {value!r}, not a number", "use a numeric criterion")
        if best is None or (value < best_value if direction == "min" else value > best_value):
            best, best_value = row, value
    return best


def _job_row(job: Mapping, workdir: Path) -> Row:
    row: Row = {"rule": job.get("rule")}
    wildcards = job.get("wildcards")
    for name, value in (wildcards.items() if isinstance(wildcards, dict) else ()):
        row[WILDCARD_PREFIX + name if name in FIXED_COLUMNS else name] = value
    row["outcome"] = job.get("outcome")
    row["runtime_s"] = job.get("runtime_s")
    row["worker"] = job.get("worker")
    for name, value in _job_numbers(job, workdir).items():
        if name in row and as_number(row[name]) == as_number(value):
            continue  # the job echoing its own parameters adds no column
        while name in row:
            name = OUTPUT_PREFIX + name
        row[name] = value
    return row


def _job_numbers(job: Mapping, workdir: Path) -> dict[str, object]:
    """The numbers of a solved job: from its first output that is a .json, .tsv or .csv file."""
    if job.get("outcome") != SOLVED or job.get("placeholder"):
        return {}
    outputs = job.get("outputs")
    for output in outputs if isinstance(outputs, list) else ():
        if isinstance(output, str) and output.lower().endswith(TABLE_SUFFIXES):
            return read_job_numbers(workdir / output)  # an absolute output path replaces workdir
    return {}


def as_expression(expr: Expression | str) -> Expression:
    return expr if isinstance(expr, Expression) else compile_expression(expr)


def _check_names(rows: Sequence[Row], expr: Expression) -> None:
    """Names must be columns of some row; a row merely lacking one (a failed job) evaluates to no value."""
    if not rows:
        return
    columns = set(columns_of(rows))
    unknown = sorted(expr.names - columns)
    if unknown:
        raise ExpressionError(
            expr.text, f"unknown name {unknown[0]!r}", f"use one of the columns: {', '.join(columns_of(rows))}"
        )


def expression_values(row: Row, expr: Expression) -> dict[str, object]:
    return {name: row.get(name) for name in expr.names}


def _truthy(value: object) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(value)


def group_key(row: Row, group_by: Sequence[str]) -> tuple:
    return tuple(norm(row.get(column)) for column in group_by)
