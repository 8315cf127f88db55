"""The results table of a run: one row per job with its parameters, outcome and numbers.

I/O (finding the run, reading ``jobs.jsonl`` and job outputs, writing CSV and PNG) is kept apart from the
table logic, which works on plain lists of dicts so the CLI and the tests can call each step on its own.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from expo_executor.core.errors import ExpoError
from expo_executor.core.records import Outcome
from expo_executor.report.safe_expr import (Expression, ExpressionError, as_number,
                                            compile_expression, is_number)
from expo_executor.runs.files import JOBS as JOBS_FILE
from expo_executor.runs.files import RUN as RUN_FILE
from expo_executor.runs.files import RunFiles

RUNS_DIR = "runs"
CSV_NAME = "results.csv"
PNG_NAME = "outcomes.png"

# the run record's words (core.records.Outcome), as plain strings: rows are read from JSON
SOLVED, TIMEOUT, FAILED, SKIPPED = (Outcome.SOLVED.value, Outcome.TIMEOUT.value,
                                    Outcome.FAILED.value, Outcome.SKIPPED.value)
OUTCOMES = (SOLVED, TIMEOUT, FAILED, SKIPPED)
OUTCOME_COLOURS = {SOLVED: "#2ca02c", TIMEOUT: "#d62728", FAILED: "#1a1a1a", SKIPPED: "#b4b4b4"}
OTHER_COLOUR = "#9467bd"

FIXED_COLUMNS = ("rule", "outcome", "runtime_s", "worker")
"""Columns every row has; a wildcard with one of these names becomes ``wc_<name>``."""
OUTPUT_PREFIX = "out_"
"""Prefix for a job number whose name clashes with a wildcard or fixed column."""
WILDCARD_PREFIX = "wc_"
TABLE_SUFFIXES = (".json", ".tsv", ".csv")
MAX_OUTPUT_BYTES = 64 * 1024 * 1024
"""Outputs larger than this are not read for numbers: a report must not stall on a huge result file."""

Row = dict[str, object]
Direction = Literal["min", "max"]


class ReportError(ExpoError, ValueError):
    """A report request that cannot be met: no run, unknown rule or column, bad option."""


@dataclass(frozen=True)
class HardnessInfo:
    """The hardness spec of the reported rule, as far as the job records tell it."""

    spec: str | None
    dims: tuple[str, ...]
    scope: tuple[str, ...] = ()
    order: dict[str, list[object]] = field(default_factory=dict)
    """Declared order (easiest first) of the values of each categorical dim."""


# --- finding and reading a run -------------------------------------------------------------------------------


def find_run(state_dir: Path, run: str | None = None) -> Path:
    """Return the run directory named by ``run`` (an id, a unique id prefix or a path), or the newest run."""
    runs = Path(state_dir) / RUNS_DIR
    candidates = _run_dirs(runs)
    if run is not None:
        as_path = Path(run).expanduser()
        if _is_run_dir(as_path):
            return as_path
        if _is_run_dir(runs / run):
            return runs / run
        matches = [path for path in candidates if path.name.startswith(run)]
        if len(matches) == 1:
            return matches[0]
        problem = f"{len(matches)} runs start with {run!r}" if matches else f"no run {run!r} in {runs}"
        raise ReportError("run", problem, f"pass a run directory or one of the run ids: {_newest_ids(candidates)}")
    if not candidates:
        raise ReportError(
            "run", f"no runs in {runs}", "run the workflow with the expocloud executor first, or pass a run directory"
        )
    return max(candidates, key=_run_sort_key)


def load_run_info(run_dir: Path) -> dict[str, object]:
    """``run.json``, read by the run files' reader; an unreadable one gives {}."""
    return RunFiles(Path(run_dir)).info()


def load_jobs(run_dir: Path) -> list[dict]:
    """Each job's final record, read by the run files' reader (a live run's half-written last
    line is skipped); ReportError when ``run_dir`` is not a directory."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise ReportError("run", f"{run_dir} is not a directory", "pass a run directory (.expocloud/runs/<run-id>)")
    return RunFiles(run_dir).final_jobs()


def read_job_numbers(path: Path) -> dict[str, object]:
    """Return the top-level scalars of a JSON object file, or the columns of a one-row TSV/CSV file.

    A missing, oversized or malformed file gives {}: a report must not fail because one job wrote garbage.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    try:
        if path.stat().st_size > MAX_OUTPUT_BYTES:
            return {}
        if suffix == ".json":
            return _json_scalars(path.read_text(encoding="utf-8"))
        if suffix in (".tsv", ".csv"):
            with path.open(encoding="utf-8", newline="") as handle:
                head = [handle.readline() for _ in range(64)]  # header + first data row, skipping blank lines
            return _table_scalars("".join(head), "\t" if suffix == ".tsv" else ",")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return {}
    return {}


# --- the table ------------------------------------------------------------------------------------------------


def select_jobs(jobs: Sequence[Mapping], rule: str | None = None) -> list[Mapping]:
    """The jobs of ``rule``; by default those of the rules with a hardness spec, or all jobs if none has one."""
    if rule is not None:
        chosen = [job for job in jobs if job.get("rule") == rule]
        if jobs and not chosen:
            raise ReportError("rule", f"no jobs of rule {rule!r} in this run", f"use one of: {_rules(jobs)}")
        return chosen
    hard_rules = {job.get("rule") for job in jobs if _hardness(job) is not None}
    return [job for job in jobs if job.get("rule") in hard_rules] if hard_rules else list(jobs)


def build_rows(jobs: Sequence[Mapping], workdir: Path, rule: str | None = None) -> list[Row]:
    """Flat rows: rule, wildcards, outcome, runtime_s, worker, then the numbers a solved job wrote."""
    return [_job_row(job, Path(workdir)) for job in select_jobs(jobs, rule)]


def apply_filter(rows: Sequence[Row], expr: Expression | str) -> list[Row]:
    """Keep the rows where ``expr`` is truthy; rows where it has no value (None, NaN) are dropped."""
    expr = _as_expression(expr)
    _check_names(rows, expr)
    return [row for row in rows if _truthy(expr.evaluate(_values(row, expr)))]


def apply_min_group_size(rows: Sequence[Row], k: int, group_by: Sequence[str]) -> list[Row]:
    """Drop every row of a group (same values in ``group_by``) that has fewer than ``k`` solved rows.

    The original ExpoCloud counted all rows, so a group of timeouts always passed; only solved ones count here.
    """
    if k <= 0:
        return list(rows)
    _check_columns(rows, group_by, "group_by")
    solved = Counter(_group_key(row, group_by) for row in rows if row.get("outcome") == SOLVED)
    return [row for row in rows if solved[_group_key(row, group_by)] >= k]


def best_row(rows: Sequence[Row], direction: Direction, expr: Expression | str) -> Row | None:
    """The solved row with the smallest (``min``) or largest (``max``) criterion; the first one on ties."""
    if direction not in ("min", "max"):
        raise ReportError("best", f"direction {direction!r} is neither 'min' nor 'max'", "use min or max")
    expr = _as_expression(expr)
    _check_names(rows, expr)
    best: Row | None = None
    best_value = math.nan
    for row in rows:
        if row.get("outcome") != SOLVED:
            continue
        value = expr.evaluate(_values(row, expr))
        if value is None or (isinstance(value, float) and math.isnan(value)):
            continue
        if not is_number(value):
            raise ExpressionError(expr.text, f"the criterion gave {value!r}, not a number", "use a numeric criterion")
        if best is None or (value < best_value if direction == "min" else value > best_value):
            best, best_value = row, value
    return best


def default_group_by(jobs: Sequence[Mapping], rule: str | None = None) -> list[str]:
    """The "parameter setting" of a job without its instance: hardness dims + scope, else all wildcards but the last."""
    selected = select_jobs(jobs, rule)
    info = hardness_info(selected)
    if info is not None:
        return _unique([*info.dims, *info.scope])
    for job in selected:
        wildcards = job.get("wildcards")
        if isinstance(wildcards, dict) and wildcards:
            return list(wildcards)[:-1]
    return []


def hardness_info(jobs: Sequence[Mapping], rule: str | None = None) -> HardnessInfo | None:
    """The hardness spec of the reported rule, with the declared order of categorical values; None without one."""
    selected = select_jobs(jobs, rule)
    first = next((h for h in map(_hardness, selected) if h is not None), None)
    if first is None:
        return None
    dims = tuple(str(dim) for dim in first["dims"])
    spec = first.get("spec") if isinstance(first.get("spec"), str) else None
    scope = _scope_names(spec, first, selected)
    declared = _declared_orders(spec)
    order = {}
    for index, dim in enumerate(dims):
        ranks = _vector_ranks(selected, dims, index)
        values = set(ranks) | set(declared.get(dim, ()))
        if values and not all(is_number(as_number(value)) for value in values):
            order[dim] = sorted(values, key=lambda v, d=dim: _order_key(v, declared.get(d, []), ranks))
    return HardnessInfo(spec=spec, dims=dims, scope=scope, order=order)


# --- output ---------------------------------------------------------------------------------------------------


def to_markdown(rows: Sequence[Row], columns: Sequence[str] | None = None) -> str:
    """A GitHub Markdown table, then a blank line and a summary line with the count of each outcome."""
    columns = list(columns) if columns is not None else _columns(rows)
    if not rows or not columns:
        return f"(no rows)\n\n{summarize(rows)}"
    cells = [[_escape(format_value(row.get(column))) for column in columns] for row in rows]
    header = [_escape(column) for column in columns]
    widths = [max(3, len(header[i]), *(len(line[i]) for line in cells)) for i in range(len(columns))]
    numeric = [_is_numeric_column(rows, column) for column in columns]

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


def write_csv(rows: Sequence[Row], path: Path, columns: Sequence[str] | None = None) -> None:
    """Write all columns at full precision (the Markdown table rounds; the CSV is for analysis)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = list(columns) if columns is not None else _columns(rows)
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow(["" if row.get(column) is None else row.get(column) for column in columns])
    path.write_text(buffer.getvalue(), encoding="utf-8")


def plot_outcomes(
    rows: Sequence[Row],
    x: str,
    y: str,
    path: Path,
    facet: str | None = None,
    *,
    hardness_dims: Sequence[str] = (),
    order: Mapping[str, Sequence[object]] | None = None,
    title: str | None = None,
) -> None:
    """Write a PNG map of outcomes over two dims: one panel per ``facet`` value, one cell per (x, y).

    A cell is split into coloured bars in proportion to its outcomes and labelled solved/total; it pools the
    jobs that differ only in other dims or instances. ``facet`` defaults to the first of ``hardness_dims``
    other than x and y. Categorical values follow ``order`` (the spec's declared order), numbers sort as numbers.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    grid = _outcome_grid(rows, x, y, facet, hardness_dims, order or {})
    ncols = min(len(grid.panels), 4 if len(grid.xs) <= 8 else 2 if len(grid.xs) <= 20 else 1)
    nrows = math.ceil(len(grid.panels) / ncols)
    panel_w, panel_h = max(2.8, 0.45 * len(grid.xs) + 1.2), max(2.4, 0.38 * len(grid.ys) + 1.0)
    width = max(4.8, ncols * panel_w + 0.4)  # room for the two-line title and the legend
    figure, axes = plt.subplots(
        nrows, ncols, figsize=(width, nrows * panel_h + 1.3), sharex=True, sharey=True,
        squeeze=False, layout="constrained",
    )
    for index, panel in enumerate(grid.panels):
        ax = axes[index // ncols][index % ncols]
        _draw_panel(ax, grid, panel)
        _label_panel(ax, grid, panel, bottom=index // ncols == nrows - 1 or index + ncols >= len(grid.panels),
                     left=index % ncols == 0)
    for index in range(len(grid.panels), nrows * ncols):
        axes[index // ncols][index % ncols].set_visible(False)
    _add_legend_and_title(figure, grid.stack, width, title)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


@dataclass
class _OutcomeGrid:
    """What the outcome map shows: its axes' values, its panels, each cell's outcome counts."""

    x: str
    y: str
    facet: str | None
    xs: list[object]
    ys: list[object]
    panels: list[object]
    cells: dict[tuple, Counter]
    stack: list[str]  # the outcomes in the order their bars are stacked

    def counts(self, panel: object, x_value: object, y_value: object) -> Counter | None:
        return self.cells.get((_norm(panel) if self.facet else None, _norm(x_value), _norm(y_value)))


def _outcome_grid(rows: Sequence[Row], x: str, y: str, facet: str | None, hardness_dims: Sequence[str],
                  order: Mapping[str, Sequence[object]]) -> _OutcomeGrid:
    """Check the dims and count each cell's outcomes."""
    if facet is None:
        facet = next((dim for dim in hardness_dims if dim not in (x, y)), None)
    _check_columns(rows, [c for c in (x, y, facet) if c], "dims")
    if facet in (x, y):
        raise ReportError("facet", f"{facet!r} is already an axis", "facet by a third column")
    plotted = [row for row in rows if row.get(x) is not None and row.get(y) is not None]
    if not plotted:
        raise ReportError("dims", f"no row has values for both {x!r} and {y!r}", "choose other dims")
    cells: dict[tuple, Counter] = defaultdict(Counter)
    for row in plotted:
        key = (_norm(row.get(facet)) if facet else None, _norm(row[x]), _norm(row[y]))
        cells[key][str(row.get("outcome"))] += 1
    present = {outcome for counts in cells.values() for outcome in counts}
    return _OutcomeGrid(
        x, y, facet, xs=_axis_values(plotted, x, order.get(x)), ys=_axis_values(plotted, y, order.get(y)),
        panels=_axis_values(plotted, facet, order.get(facet)) if facet else [None], cells=cells,
        stack=[*OUTCOMES, *sorted(present - set(OUTCOMES))])


def _draw_panel(ax: Any, grid: _OutcomeGrid, panel: object) -> None:
    """One panel's cells: stacked bars per outcome, and solved/total when there is room."""
    ax.set_facecolor("#f5f5f5")
    show_text = len(grid.xs) <= 24 and len(grid.ys) <= 30
    font = 8 if len(grid.xs) <= 12 else 6.5
    for i, x_value in enumerate(grid.xs):
        for j, y_value in enumerate(grid.ys):
            counts = grid.counts(panel, x_value, y_value)
            if not counts:
                continue
            _draw_bars(ax, counts, grid.stack, i, j)
            if show_text:
                ax.text(
                    i, j, f"{counts[SOLVED]}/{sum(counts.values())}", ha="center", va="center", fontsize=font,
                    bbox={"boxstyle": "round,pad=0.15", "facecolor": "white", "alpha": 0.8, "linewidth": 0},
                )


def _draw_bars(ax: Any, counts: Counter, stack: Sequence[str], i: int, j: int) -> None:
    """Cell (i, j) split into one bar per outcome, in proportion to its count."""
    from matplotlib.patches import Rectangle

    total, left = sum(counts.values()), i - 0.46
    for outcome in stack:
        share = 0.92 * counts[outcome] / total
        if share:
            colour = OUTCOME_COLOURS.get(outcome, OTHER_COLOUR)
            ax.add_patch(Rectangle((left, j - 0.46), share, 0.92, facecolor=colour, linewidth=0))
            left += share


def _label_panel(ax: Any, grid: _OutcomeGrid, panel: object, *, bottom: bool, left: bool) -> None:
    """Ticks, the facet's title, and axis labels on the bottom row and the left column."""
    xs, ys = grid.xs, grid.ys
    ax.set_xlim(-0.5, len(xs) - 0.5)
    ax.set_ylim(-0.5, len(ys) - 0.5)
    ax.set_xticks(range(len(xs)), [format_value(as_number(v)) for v in xs], fontsize=8)
    ax.set_yticks(range(len(ys)), [format_value(as_number(v)) for v in ys], fontsize=8)
    ax.tick_params(length=0)
    for spine in ax.spines.values():
        spine.set_visible(False)
    if len(xs) > 12:
        ax.tick_params(axis="x", labelrotation=90)
    if grid.facet:
        ax.set_title(f"{grid.facet} = {format_value(as_number(panel))}", fontsize=10)
    if bottom:
        ax.set_xlabel(grid.x)
        ax.tick_params(axis="x", labelbottom=True)
    if left:
        ax.set_ylabel(grid.y)


def _add_legend_and_title(figure: Any, stack: Sequence[str], width: float, title: str | None) -> None:
    from matplotlib.patches import Patch

    handles = [Patch(facecolor=OUTCOME_COLOURS.get(o, OTHER_COLOUR), label=o) for o in stack]
    legend_columns = max(1, min(len(handles), int(width / 1.2)))  # about 1.2 inch per entry, or it is clipped
    figure.legend(handles=handles, loc="outside lower center", ncol=legend_columns, frameon=False, fontsize=9)
    heading = title or "Outcomes"
    figure.suptitle(f"{heading}\ncells: solved/total, bars: share of each outcome", fontsize=11)


# --- the whole report -----------------------------------------------------------------------------------------


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
    rules = _unique(str(job.get("rule")) for job in selected)
    notes = [_run_line(info, run_dir, rules, len(rows))]

    if filter is not None:
        expr = _as_expression(filter)
        before, rows = len(rows), apply_filter(rows, expr)
        notes.append(f"filter {expr.text!r}: kept {len(rows)} of {before} rows")
    if min_group_size > 0:
        columns = list(group_by) if group_by is not None else default_group_by(selected)
        if len(rules) > 1 and "rule" not in columns:
            columns.insert(0, "rule")
        before, kept = rows, apply_min_group_size(rows, min_group_size, columns)
        dropped_groups = {_group_key(row, columns) for row in before} - {_group_key(row, columns) for row in kept}
        notes.append(
            f"min_group_size {min_group_size} by ({', '.join(columns) or 'all rows'}): dropped {len(before) - len(kept)}"
            f" rows in {len(dropped_groups)} groups with fewer than {min_group_size} solved"
        )
        rows = kept

    lines = [notes[0], "", to_markdown(rows), *notes[1:]]
    if best is not None:
        lines.append(_best_line(rows, best))
    csv_path = Path(csv_path) if csv_path is not None else run_dir / CSV_NAME
    write_csv(rows, csv_path)
    lines.append(f"CSV: {csv_path}")
    png_path = Path(png_path) if png_path is not None else run_dir / PNG_NAME
    lines.append(_plot_line(rows, hardness, dims, facet, png_path, info, rules))
    return "\n".join(lines)


# --- helpers --------------------------------------------------------------------------------------------------


def _is_run_dir(path: Path) -> bool:
    return path.is_dir() and ((path / RUN_FILE).is_file() or (path / JOBS_FILE).is_file())


def _run_dirs(runs: Path) -> list[Path]:
    try:
        return [path for path in runs.iterdir() if _is_run_dir(path)]
    except OSError:
        return []


def _run_sort_key(path: Path) -> tuple[bool, float, str]:
    """Runs with a readable ``created`` sort by it; others (older layouts, broken run.json) by name, before them."""
    created = load_run_info(path).get("created")
    try:
        stamp = datetime.fromisoformat(str(created)).timestamp() if created else None
    except ValueError:
        stamp = None
    return (stamp is not None, stamp or 0.0, path.name)


def _newest_ids(candidates: Sequence[Path], limit: int = 5) -> str:
    ids = [path.name for path in sorted(candidates, key=_run_sort_key, reverse=True)[:limit]]
    if not ids:
        return "(none yet)"
    return ", ".join(ids) + (", ..." if len(candidates) > limit else "")


def _json_scalars(text: str) -> dict[str, object]:
    data = json.loads(text)
    if not isinstance(data, dict):
        return {}
    return {str(k): v for k, v in data.items() if isinstance(v, (bool, int, float, str))}


def _table_scalars(text: str, delimiter: str) -> dict[str, object]:
    records = [record for record in csv.reader(io.StringIO(text), delimiter=delimiter) if any(f.strip() for f in record)]
    if len(records) < 2:
        return {}
    header, data = records[0], records[1]
    return {
        name.strip(): as_number(value.strip())
        for name, value in zip(header, data)
        if name.strip() and value.strip()
    }


def _hardness(job: Mapping) -> dict | None:
    hardness = job.get("hardness")
    if isinstance(hardness, dict) and isinstance(hardness.get("dims"), list) and hardness["dims"]:
        return hardness
    return None


def _rules(jobs: Iterable[Mapping]) -> str:
    return ", ".join(_unique(str(job.get("rule")) for job in jobs)) or "(none)"


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


def _as_expression(expr: Expression | str) -> Expression:
    return expr if isinstance(expr, Expression) else compile_expression(expr)


def _columns(rows: Iterable[Row]) -> list[str]:
    return _unique(column for row in rows for column in row)


def _check_names(rows: Sequence[Row], expr: Expression) -> None:
    """Names must be columns of some row; a row merely lacking one (a failed job) evaluates to no value."""
    if not rows:
        return
    columns = set(_columns(rows))
    unknown = sorted(expr.names - columns)
    if unknown:
        raise ExpressionError(
            expr.text, f"unknown name {unknown[0]!r}", f"use one of the columns: {', '.join(_columns(rows))}"
        )


def _check_columns(rows: Sequence[Row], wanted: Iterable[str], setting: str) -> None:
    if not rows:
        return
    columns = _columns(rows)
    for name in wanted:
        if name not in columns:
            raise ReportError(setting, f"unknown column {name!r}", f"use one of: {', '.join(columns)}")


def _values(row: Row, expr: Expression) -> dict[str, object]:
    return {name: row.get(name) for name in expr.names}


def _truthy(value: object) -> bool:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    return bool(value)


def _group_key(row: Row, group_by: Sequence[str]) -> tuple:
    return tuple(_norm(row.get(column)) for column in group_by)


def _norm(value: object) -> object:
    """"7" and 7 are the same parameter value (wildcards are strings, JSON numbers are not)."""
    value = as_number(value)
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _scope_names(spec: str | None, hardness: Mapping, jobs: Sequence[Mapping]) -> tuple[str, ...]:
    """The scope's wildcard names: from the spec's '; scope: a, b' part.

    The record's "scope" list holds the job's scope values (e.g. ["dataset1"]); it is used only for entries
    that happen to be wildcard names, in case a writer stores names there instead.
    """
    _, _, scope_text = (spec or "").partition(";")
    key, sep, names = scope_text.partition(":")
    if not sep:
        key, sep, names = scope_text.partition("=")
    if sep and key.strip() == "scope":
        return tuple(name.strip() for name in names.split(",") if name.strip())
    wildcard_names = {name for job in jobs if isinstance(job.get("wildcards"), dict) for name in job["wildcards"]}
    return tuple(name for name in hardness.get("scope") or () if isinstance(name, str) and name in wildcard_names)


def _declared_orders(spec: str | None) -> dict[str, list[str]]:
    """Parse 'variant:heuristic<bnb<brute, n_tasks; scope: x' into {'variant': ['heuristic', 'bnb', 'brute']}."""
    orders: dict[str, list[str]] = {}
    dims_text, _, _ = (spec or "").partition(";")
    for entry in dims_text.split(","):
        name, _, values = entry.partition(":")
        if "<" in values:
            orders[name.strip()] = [value.strip() for value in values.split("<")]
        elif ">" in values:
            orders[name.strip()] = [value.strip() for value in reversed(values.split(">"))]
    return orders


def _vector_ranks(jobs: Sequence[Mapping], dims: tuple[str, ...], index: int) -> dict[object, float]:
    """Value of dim ``index`` -> its hardness coordinate, which encodes the declared order of categories."""
    ranks: dict[object, float] = {}
    for job in jobs:
        hardness, wildcards = _hardness(job), job.get("wildcards")
        if hardness is None or tuple(hardness["dims"]) != dims or not isinstance(wildcards, dict):
            continue
        vector = hardness.get("vector")
        value = wildcards.get(dims[index])
        if isinstance(vector, list) and len(vector) == len(dims) and value is not None and is_number(vector[index]):
            ranks.setdefault(value, float(vector[index]))
    return ranks


def _order_key(value: object, declared: Sequence[object], ranks: Mapping[object, float]) -> tuple:
    position = declared.index(value) if value in declared else len(declared)
    return (position, ranks.get(value, math.inf), _natural_key(value))


def _natural_key(value: object) -> tuple:
    number = as_number(value)
    return (0, float(number), "") if is_number(number) else (1, 0.0, str(value))


def _axis_values(rows: Sequence[Row], column: str, declared: Sequence[object] | None) -> list[object]:
    """Distinct values of a column: declared order first, then numbers numerically, then strings."""
    distinct: dict[object, object] = {}
    for row in rows:
        value = row.get(column)
        if value is not None:
            distinct.setdefault(_norm(value), value)
    declared_norm = [_norm(value) for value in declared or ()]
    return sorted(
        distinct.values(),
        key=lambda v: (
            declared_norm.index(_norm(v)) if _norm(v) in declared_norm else len(declared_norm),
            _natural_key(v),
        ),
    )


def _is_numeric_column(rows: Sequence[Row], column: str) -> bool:
    values = [row.get(column) for row in rows if row.get(column) is not None]
    return bool(values) and all(is_number(as_number(v)) and not isinstance(v, bool) for v in values)


def _escape(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


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
    expr = _as_expression(criterion)
    row = best_row(rows, direction, expr)
    label = f"best ({direction} {expr.text})"
    if row is None:
        return f"{label}: no solved row has a value"
    value = expr.evaluate(_values(row, expr))
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
        numeric = [dim for dim in hardness_dims if _is_numeric_column(rows, dim)]
        dims = numeric[:2] if len(numeric) >= 2 else hardness_dims[:2]
        if len(dims) < 2:
            return "PNG skipped: the rule has fewer than two hardness dims; choose two columns with dims (--dims X,Y)"
    if len(dims) != 2:
        raise ReportError("dims", f"expected two columns, got {len(dims)}", "pass exactly two, e.g. n_tasks,n_agents")
    if not rows:
        return "PNG skipped: no rows to plot"
    x, y = dims
    if not any(row.get(x) is not None and row.get(y) is not None for row in rows):
        _check_columns(rows, dims, "dims")
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
