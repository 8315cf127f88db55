"""Where the data disagrees with a rule's declared order: the report's section on it.

The coordinator saves each family's runtime model beside its frontier in the state dir
(``frontiers/<digest>.model.json``). Reading one back refits the learned model from its
observations, which needs numpy and scipy: so ``learned`` is imported here lazily, only when a
saved model exists, and a report of a run without a model never loads it. For each rule of the
report with a saved model, the section lists the cells (the declared dimensions' values) that
ran faster than a cell the order calls easier, by the fitted medians, and says what the run did
about it: beyond such an edge the data orders the queue, and the domino effect spares the
region (``core/model_hooks.py``). A model whose order held gets one line; no model, none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from expo_executor.core.runtime_model import OrderDisagreement
from expo_executor.report.table_output import write_csv
from expo_executor.report.values import Row, format_value

MODELS_GLOB = "frontiers/*.model.json"
CSV_COLUMNS = ("rule", "deadline_s", "dimension", "easier", "harder", "easier_median_s",
               "harder_median_s")


@dataclass(frozen=True)
class RuleOrderCheck:
    """One saved model of a rule (at one deadline) and where its data disagrees with the
    declared order ``spec`` (empty: the order held)."""

    rule: str
    spec: str
    deadline_s: float
    found: tuple[OrderDisagreement, ...]


def check_orders(state_dir: Path | None, rules: Sequence[str]) -> list[RuleOrderCheck]:
    """The saved models of ``rules`` with a declared order, in the state dir, each refitted
    and asked for its disagreements. Unreadable or foreign files are passed over: a report
    must not fail because a model file is broken."""
    if state_dir is None:
        return []
    checks = []
    for path in sorted(Path(state_dir).glob(MODELS_GLOB)):
        saved = _read(path)
        if saved is None or str(saved.get("rule")) not in rules:
            continue
        model = _load(saved["model"])
        if model is not None and model.spec.ordered is not None:
            checks.append(RuleOrderCheck(str(saved["rule"]), str(saved.get("spec") or ""),
                                         float(saved.get("deadline_s") or 0.0),
                                         tuple(model.disagreements())))
    return checks


def to_markdown(checks: Sequence[RuleOrderCheck]) -> str:
    """A short section per rule: one line when the order held, else a table of the cells that
    run slower than a cell declared harder, and what the run did about it."""
    lines: list[str] = []
    for check in checks:
        title = f"rule {check.rule} (order {check.spec!r}, deadline {format_value(check.deadline_s)} s)"
        if not check.found:
            lines += ["", f"{title}: the data agrees with the declared order"]
            continue
        lines += ["", f"{title}: the data disagrees with the declared order",
                  "| dimension | easier (declared) | median s | harder (declared) | median s |"
                  " slower by |", "| --- | --- | ---: | --- | ---: | ---: |"]
        lines += [f"| {d.dimension} | {_cell(d.easier)} | {format_value(d.easier_median_s)} | "
                  f"{_cell(d.harder)} | {format_value(d.harder_median_s)} | "
                  f"{format_value(d.easier_median_s / max(d.harder_median_s, 1e-9))}x |"
                  for d in check.found]
        lines.append("what the run did: from each harder cell on (in its dimension), the data "
                     "ordered the queue and, once the model was trusted, the domino effect "
                     "spared those jobs")
    return "\n".join(lines)


def write_disagreements_csv(checks: Sequence[RuleOrderCheck], path: Path) -> bool:
    """The disagreements at full precision; nothing written (False) when there are none."""
    rows: list[Row] = [{"rule": c.rule, "deadline_s": c.deadline_s, "dimension": d.dimension,
                        "easier": _cell(d.easier), "harder": _cell(d.harder),
                        "easier_median_s": d.easier_median_s,
                        "harder_median_s": d.harder_median_s}
                       for c in checks for d in c.found]
    if rows:
        write_csv(rows, path, CSV_COLUMNS)
    return bool(rows)


def _cell(values: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(values.items()))


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("model"), dict) else None


def _load(saved: Mapping):
    """The learned model refitted from its saved observations, or None when it is not one."""
    from expo_executor.learned.model import model_from_dict  # numpy and scipy: only here

    try:
        return model_from_dict(saved)
    except (KeyError, TypeError, ValueError, IndexError):
        return None
