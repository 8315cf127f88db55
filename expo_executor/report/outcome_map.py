"""The outcome map: a PNG of outcomes over two dims, one panel per value of a third, each cell
split into bars in proportion to its outcomes. matplotlib is imported only when a map is drawn.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from expo_executor.report.run_reader import ReportError
from expo_executor.report.safe_expr import as_number
from expo_executor.report.values import (FAILED, MODEL_SKIPPED, OUTCOMES, SKIPPED, SOLVED,
                                         TIMEOUT, Row,
                                         check_columns, format_value, natural_key, norm)


OUTCOME_COLOURS = {SOLVED: "#2ca02c", TIMEOUT: "#d62728", FAILED: "#1a1a1a", SKIPPED: "#b4b4b4",
                   MODEL_SKIPPED: "#bcbddc"}
OTHER_COLOUR = "#9467bd"


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
        return self.cells.get((norm(panel) if self.facet else None, norm(x_value), norm(y_value)))


def _outcome_grid(rows: Sequence[Row], x: str, y: str, facet: str | None, hardness_dims: Sequence[str],
                  order: Mapping[str, Sequence[object]]) -> _OutcomeGrid:
    """Check the dims and count each cell's outcomes."""
    if facet is None:
        facet = next((dim for dim in hardness_dims if dim not in (x, y)), None)
    check_columns(rows, [c for c in (x, y, facet) if c], "dims")
    if facet in (x, y):
        raise ReportError("facet", f"{facet!r} is already an axis", "facet by a third column")
    plotted = [row for row in rows if row.get(x) is not None and row.get(y) is not None]
    if not plotted:
        raise ReportError("dims", f"no row has values for both {x!r} and {y!r}", "choose other dims")
    cells: dict[tuple, Counter] = defaultdict(Counter)
    for row in plotted:
        key = (norm(row.get(facet)) if facet else None, norm(row[x]), norm(row[y]))
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


def _axis_values(rows: Sequence[Row], column: str, declared: Sequence[object] | None) -> list[object]:
    """Distinct values of a column: declared order first, then numbers numerically, then strings."""
    distinct: dict[object, object] = {}
    for row in rows:
        value = row.get(column)
        if value is not None:
            distinct.setdefault(norm(value), value)
    declared_norm = [norm(value) for value in declared or ()]
    return sorted(
        distinct.values(),
        key=lambda v: (
            declared_norm.index(norm(v)) if norm(v) in declared_norm else len(declared_norm),
            natural_key(v),
        ),
    )
