"""The whole report of a run: its table (printed and as CSV), its outcome map, and the lines
that say what was kept, what is best and where the files went.

Each step lives in a module of its own (``run_reader``: finding and reading a run;
``rule_hardness``: which jobs and their rule's hardness; ``table``: the rows and the steps over
them; ``table_output``: Markdown and CSV; ``outcome_map``: the PNG; ``predictions``: the
runtime model against the truth; ``order_disagreements``: where the data disagrees with a
declared order); this one strings them together for ``expocloud report``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from expo_executor.report.order_disagreements import check_orders, write_disagreements_csv
from expo_executor.report.order_disagreements import to_markdown as disagreements_markdown
from expo_executor.report.outcome_map import plot_outcomes
from expo_executor.report.predictions import compare
from expo_executor.report.predictions import to_markdown as predictions_markdown
from expo_executor.report.rule_hardness import (HardnessInfo, default_group_by, hardness_info,
                                                select_jobs)
from expo_executor.report.run_reader import (RUNS_DIR, ReportError, load_jobs, load_run_info,
                                              state_dir_of)
from expo_executor.report.safe_expr import Expression
from expo_executor.report.table import (Direction, apply_filter, apply_min_group_size,
                                        as_expression, best_row, build_rows, expression_values,
                                        group_key)
from expo_executor.report.table_output import to_markdown, write_csv
from expo_executor.report.values import (Row, check_columns, format_value, is_numeric_column,
                                         unique)


CSV_NAME = "results.csv"
DISAGREEMENTS_CSV_NAME = "order_disagreements.csv"
PNG_NAME = "outcomes.png"


def report(
    run_dir: Path,
    *,
    rule: str | None = None,
    filter: Expression | str | None = None,  # noqa: A002 - the CLI option's name
    best: tuple[Direction, Expression | str] | None = None,
    min_group_size: int = 0,
    group_by: Sequence[str] | None = None,
    csv_path: Path | None = None,
    png_path: Path | None = None,
    dims: Sequence[str] | None = None,
    facet: str | None = None,
) -> str:
    """Build the table of a run, write its CSV and outcome map, and return the text to print.

    Order: rule selection, ``filter``, ``min_group_size`` (over the filtered rows), then ``best`` over the result.
    """
    run_dir = Path(run_dir)
    info = load_run_info(run_dir)
    workdir = Path(str(info["workdir"])) if info.get("workdir") else _guess_workdir(run_dir)
    jobs = load_jobs(run_dir)
    selected = select_jobs(jobs, rule)
    hardness = hardness_info(selected)
    rows = build_rows(selected, workdir)
    rules = unique(str(job.get("rule")) for job in selected)
    notes = [_run_line(info, run_dir, rules, len(rows))]

    if filter is not None:
        expr = as_expression(filter)
        before, rows = len(rows), apply_filter(rows, expr)
        notes.append(f"filter {expr.text!r}: kept {len(rows)} of {before} rows")
    if min_group_size > 0:
        columns = list(group_by) if group_by is not None else default_group_by(selected)
        if len(rules) > 1 and "rule" not in columns:
            columns.insert(0, "rule")
        before, kept = rows, apply_min_group_size(rows, min_group_size, columns)
        dropped_groups = {group_key(row, columns) for row in before} - {group_key(row, columns) for row in kept}
        notes.append(
            f"min_group_size {min_group_size} by ({', '.join(columns) or 'all rows'}): dropped {len(before) - len(kept)}"
            f" rows in {len(dropped_groups)} groups with fewer than {min_group_size} solved"
        )
        rows = kept

    lines = [notes[0], "", to_markdown(rows), *notes[1:]]
    predicted = compare(selected)
    if predicted:  # the run had a runtime model: how it did
        lines += ["", "runtime model, predicted against actual:", predictions_markdown(predicted)]
    if best is not None:
        lines.append(_best_line(rows, best))
    csv_path = Path(csv_path) if csv_path is not None else run_dir / CSV_NAME
    write_csv(rows, csv_path)
    lines.append(f"CSV: {csv_path}")
    lines += _order_lines(state_dir_of(run_dir), rules, csv_path.with_name(DISAGREEMENTS_CSV_NAME))
    png_path = Path(png_path) if png_path is not None else run_dir / PNG_NAME
    lines.append(_plot_line(rows, hardness, dims, facet, png_path, info, rules))
    return "\n".join(lines)


def _order_lines(state_dir: Path | None, rules: Sequence[str], csv_path: Path) -> list[str]:
    """The section on where the data disagrees with a declared order (none without a saved
    model), and its CSV beside the results' when there is a disagreement."""
    checks = check_orders(state_dir, rules)
    if not checks:
        return []
    lines = [disagreements_markdown(checks)]
    if write_disagreements_csv(checks, csv_path):
        lines.append(f"CSV: {csv_path}")
    return lines


def _guess_workdir(run_dir: Path) -> Path:
    """Without run.json: the run lives in <workdir>/.expocloud/runs/<id>, else use the current directory."""
    resolved = run_dir.resolve()
    return resolved.parents[2] if resolved.parent.name == RUNS_DIR and len(resolved.parents) > 2 else Path.cwd()


def _run_line(info: Mapping, run_dir: Path, rules: Sequence[str], n_rows: int) -> str:
    run_id = info.get("run_id") or run_dir.name
    state = f"ended {info['ended']}" if info.get("ended") else "no end time: live or interrupted"
    rule_text = ", ".join(rules) if rules else "(no jobs yet)"
    return f"run {run_id} ({state}); rule {rule_text}: {n_rows} jobs"


def _best_line(rows: Sequence[Row], best: tuple[Direction, Expression | str]) -> str:
    direction, criterion = best
    expr = as_expression(criterion)
    row = best_row(rows, direction, expr)
    label = f"best ({direction} {expr.text})"
    if row is None:
        return f"{label}: no solved row has a value"
    value = expr.evaluate(expression_values(row, expr))
    described = ", ".join(f"{k}={format_value(v)}" for k, v in row.items() if v is not None and k != "outcome")
    return f"{label}: {format_value(value)} at {described}"


def _plot_line(
    rows: Sequence[Row],
    hardness: HardnessInfo | None,
    dims: Sequence[str] | None,
    facet: str | None,
    png_path: Path,
    info: Mapping,
    rules: Sequence[str],
) -> str:
    hardness_dims = list(hardness.dims) if hardness else []
    if dims is None:
        numeric = [dim for dim in hardness_dims if is_numeric_column(rows, dim)]
        dims = numeric[:2] if len(numeric) >= 2 else hardness_dims[:2]
        if len(dims) < 2:
            return "PNG skipped: the rule has fewer than two hardness dims; choose two columns with dims (--dims X,Y)"
    if len(dims) != 2:
        raise ReportError("dims", f"expected two columns, got {len(dims)}", "pass exactly two, e.g. n_tasks,n_agents")
    if not rows:
        return "PNG skipped: no rows to plot"
    x, y = dims
    if not any(row.get(x) is not None and row.get(y) is not None for row in rows):
        check_columns(rows, dims, "dims")
        return f"PNG skipped: no row has values for both {x} and {y}"
    run_id = info.get("run_id")
    title = f"Outcomes of rule {', '.join(rules)}" + (f" in run {run_id}" if run_id else "")
    try:
        plot_outcomes(
            rows, x, y, png_path, facet, hardness_dims=hardness_dims,
            order=hardness.order if hardness else None, title=title,
        )
    except ImportError:
        return "PNG skipped: matplotlib is not installed (pip install matplotlib)"
    return f"PNG: {png_path}"
