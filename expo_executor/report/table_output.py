"""The results table as text: a Markdown table with a summary of outcomes (rounded, for people)
and a CSV file (full precision, for analysis).
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from expo_executor.report.values import (OUTCOMES, Row, columns_of, format_value,
                                         is_numeric_column)


def to_markdown(rows: Sequence[Row], columns: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table, then a blank line and a summary line with the count of each outcome."""
    columns = list(columns) if columns is not None else columns_of(rows)
    if not rows or not columns:
        return f"(no rows)\n\n{summarize(rows)}"
    cells = [[_escape(format_value(row.get(column))) for column in columns] for row in rows]
    header = [_escape(column) for column in columns]
    widths = [max(3, len(header[i]), *(len(line[i]) for line in cells)) for i in range(len(columns))]
    numeric = [is_numeric_column(rows, column) for column in columns]

    def line(values: Sequence[str]) -> str:
        padded = [v.rjust(w) if right else v.ljust(w) for v, w, right in zip(values, widths, numeric)]
        return "| " + " | ".join(padded) + " |"

    rule = ["-" * (w - 1) + ":" if right else "-" * w for w, right in zip(widths, numeric)]
    table = [line(header), "| " + " | ".join(rule) + " |", *(line(values) for values in cells)]
    return "\n".join(table) + "\n\n" + summarize(rows)


def summarize(rows: Sequence[Row]) -> str:
    """'12 rows: 8 solved, 2 timeout, 1 failed, 1 skipped' (known outcomes first, then any others)."""
    counts = Counter(str(row.get("outcome")) for row in rows)
    names = [*[o for o in OUTCOMES if counts[o]], *sorted(o for o in counts if o not in OUTCOMES)]
    parts = ", ".join(f"{counts[name]} {name}" for name in names)
    noun = "row" if len(rows) == 1 else "rows"
    return f"{len(rows)} {noun}" + (f": {parts}" if parts else "")


def write_csv(rows: Sequence[Row], path: Path, columns: Sequence[str] | None = None) -> None:
    """Write all columns at full precision (the Markdown table rounds; the CSV is for analysis)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(columns) if columns is not None else columns_of(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(column) is None else row.get(column) for column in columns])
    path.write_text(buffer.getvalue(), encoding="utf-8")


def _escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")
