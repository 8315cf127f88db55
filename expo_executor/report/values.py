"""How the report sees a cell: outcome words, one parameter value whatever its type ("7" and 7),
the natural order of values, numbers printed short, and the columns the rows have.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from expo_executor.core.records import Outcome
from expo_executor.report.run_reader import ReportError
from expo_executor.report.safe_expr import as_number, is_number


SOLVED, TIMEOUT, FAILED, SKIPPED = (Outcome.SOLVED.value, Outcome.TIMEOUT.value,
                                    Outcome.FAILED.value, Outcome.SKIPPED.value)
MODEL_SKIPPED = Outcome.MODEL_SKIPPED.value
OUTCOMES = (SOLVED, TIMEOUT, FAILED, SKIPPED, MODEL_SKIPPED)
Row = dict[str, object]


def format_value(value: object) -> str:
    """Numbers with about four significant digits (more for big integers), empty for no value."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, float):
        return str(value)
    if math.isnan(value) or math.isinf(value):
        return str(value)
    magnitude = abs(value)
    if magnitude == 0:
        return "0"
    if magnitude >= 1e6 or magnitude < 1e-3:
        return f"{value:.3e}"
    decimals = max(0, 3 - math.floor(math.log10(magnitude)))
    text = f"{value:.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def norm(value: object) -> object:
    """"7" and 7 are the same parameter value (wildcards are strings, JSON numbers are not)."""
    value = as_number(value)
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def natural_key(value: object) -> tuple:
    number = as_number(value)
    return (0, float(number), "") if is_number(number) else (1, 0.0, str(value))


def unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def columns_of(rows: Iterable[Row]) -> list[str]:
    return unique(column for row in rows for column in row)


def check_columns(rows: Sequence[Row], wanted: Iterable[str], setting: str) -> None:
    if not rows:
        return
    columns = columns_of(rows)
    for name in wanted:
        if name not in columns:
            raise ReportError(setting, f"unknown column {name!r}", f"use one of: {', '.join(columns)}")


def is_numeric_column(rows: Sequence[Row], column: str) -> bool:
    values = [row.get(column) for row in rows if row.get(column) is not None]
    return bool(values) and all(is_number(as_number(v)) and not isinstance(v, bool) for v in values)
