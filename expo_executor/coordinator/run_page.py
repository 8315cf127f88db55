"""The run page: ``run.html`` in the run directory, one self-contained static page of the run's
status (progress and the runtime model's estimate of what is left, the outcome map filling in,
the jobs running, the pools and their cost, the recent timeouts and model skips), written again
with ``status.json``.

No server and no open port: a browser opens the file, and a ``<meta http-equiv="refresh">``
reloads it every :data:`REFRESH_S` seconds while the run goes on (a finished run's page stops
refreshing). No script, no external resource: browsers refuse a ``file://`` page's fetches, and
the page must work offline. Every text from the run (job labels, wildcards, worker names) is
escaped.
"""

from __future__ import annotations

import datetime as dt
from html import escape

from expo_executor.core.run_status import (STATES, OutcomeMap, RunStatus, cost_phrase,
                                           counts_line, elapsed_phrase, predicted)

REFRESH_S = 5
COLOURS = {"queued": "#d9d9d9", "running": "#6baed6", "solved": "#31a354",
           "timeout": "#e6550d", "skipped": "#fdae6b", "failed": "#a50f15",
           "model-skipped": "#9e9ac8"}
STYLE = """
body{font-family:sans-serif;margin:1.2em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.2em}
table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left;border-bottom:1px solid #eee}
.bar{display:flex;width:600px;height:18px;border:1px solid #999}
.bar div{height:100%}
table.map td.cell{width:26px;height:22px;text-align:center;font-size:11px;border:1px solid #fff}
.panel{display:inline-block;vertical-align:top;margin-right:1.5em}
.legend span{display:inline-block;padding:1px 6px;margin-right:4px}
.deadline{display:inline-block;width:120px;height:10px;background:#eee}
.deadline div{height:100%;background:#6baed6}
"""


def render(status: RunStatus, run_id: str, now: float) -> str:
    """The whole page for ``status``, as of ``now``."""
    refresh = "" if status.finished else \
        f'<meta http-equiv="refresh" content="{REFRESH_S}">'
    state = "finished" if status.finished else "running"
    when = dt.datetime.fromtimestamp(status.time).strftime("%Y-%m-%d %H:%M:%S")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">', refresh,
        f"<title>ExpoCloud run {escape(run_id)} ({state})</title>",
        f"<style>{STYLE}</style></head><body>",
        f'<h1>ExpoCloud run {escape(run_id)}: <span id="state">{state}</span></h1>',
        f'<p id="updated">as of {when}'
        + ("" if status.finished else f"; this page reloads every {REFRESH_S} s") + "</p>",
        _progress(status), _outcome_map(status.outcome_map), _running(status, now),
        _pools(status), _timeouts(status), _model_skips(status), "</body></html>"]
    return "\n".join(part for part in parts if part)


def _progress(status: RunStatus) -> str:
    total = sum(status.counts.values()) or 1
    segments = "".join(
        f'<div title="{state}" style="width:{100 * status.counts[state] / total:.2f}%;'
        f'background:{COLOURS[state]}"></div>' for state in STATES if status.counts[state])
    cost = cost_phrase(status.cost_usd, status.budget_usd)
    return (f'<h2>Progress</h2><p id="counts">{escape(counts_line(status))}</p>'
            f'<div class="bar">{segments}</div>'
            f'<p id="fleet">{status.workers} workers'
            f"{f' (+{status.booting} booting)' if status.booting else ''}, {status.slots} slots"
            f"{f' | {escape(cost)}' if cost else ''}</p>"
            + (f'<p id="estimate">{escape(status.estimate.line())}</p>'
               if status.estimate is not None and not status.finished else ""))


def _outcome_map(omap: OutcomeMap | None) -> str:
    if omap is None:
        return ""
    legend = "".join(f'<span style="background:{COLOURS[s]}{_ink(s)}">{s}</span>'
                     for s in STATES)
    panels = "".join(_panel(omap, facet) for facet in (omap.facets or ("",)))
    axes = escape(omap.x + (f" (columns) by {omap.y} (rows)" if omap.y else ""))
    per = f", one panel per {escape(omap.facet)}" if omap.facet else ""
    return (f'<h2>Outcome map</h2><p>{axes}{per}</p><p class="legend">{legend}</p>'
            f'<div id="outcome-map">{panels}</div>')


def _panel(omap: OutcomeMap, facet: str) -> str:
    head = "".join(f"<th>{escape(x)}</th>" for x in omap.xs)
    rows = []
    for y in omap.ys or ("",):
        cells = "".join(_cell(omap.cells.get((facet, x, y), {}), facet, x, y)
                        for x in omap.xs)
        rows.append(f"<tr><th>{escape(y)}</th>{cells}</tr>")
    title = f"<p>{escape(omap.facet or '')} = {escape(facet)}</p>" if omap.facet else ""
    return (f'<div class="panel">{title}<table class="map"><tr><th></th>{head}</tr>'
            f'{"".join(rows)}</table></div>')


def _cell(counts: dict[str, int], facet: str, x: str, y: str) -> str:
    """One cell, coloured by its most common state (running, while any job of it runs)."""
    if not counts:
        return '<td class="cell empty"></td>'
    state = "running" if counts.get("running") else \
        max(counts, key=lambda s: (counts[s], -STATES.index(s)))
    title = ", ".join(f"{counts[s]} {s}" for s in STATES if counts.get(s))
    where = " ".join(part for part in (facet, x, y) if part)
    total = sum(counts.values())
    return (f'<td class="cell {state}" data-state="{state}" style="background:'
            f'{COLOURS[state]}{_ink(state)}" title="{escape(where)}: {title}">{total if total > 1 else ""}'
            "</td>")


def _ink(state: str) -> str:
    """White text on the dark colours."""
    return ";color:#fff" if state in ("failed", "timeout") else ""


def _running(status: RunStatus, now: float) -> str:
    if not status.running_jobs:
        return '<h2>Running</h2><p id="running">no job running</p>'
    rows = []
    for job in status.running_jobs:
        share = min(1.0, (now - job.since) / job.deadline_s) if job.deadline_s else 0.0
        rows.append(f"<tr><td>{escape(job.label)}</td><td>{escape(job.worker)}</td>"
                    f"<td>{escape(elapsed_phrase(job, now))}</td><td><span class="
                    f'"deadline"><div style="width:{100 * share:.0f}%"></div></span></td></tr>')
    hidden = status.counts["running"] - len(status.running_jobs)
    more = f"<p>... and {hidden} more</p>" if hidden > 0 else ""
    return (f'<h2>Running ({status.counts["running"]})</h2>'
            + _table("running", ("job", "worker", "elapsed", "of its deadline"), rows) + more)


def _pools(status: RunStatus) -> str:
    if not status.pools:
        return ""
    rows = [f'<tr class="pool"><td>{escape(p.pool)}</td><td>{escape(p.machine_type)}</td>'
            f"<td>{p.ready}</td><td>{p.booting}</td>"
            f"<td>{escape(cost_phrase(p.cost_usd, None)) or '-'}</td></tr>" for p in status.pools]
    budget = f"<p>budget: ${status.budget_usd:g}</p>" if status.budget_usd is not None else ""
    return ("<h2>Pools</h2>"
            + _table("pools", ("pool", "machine type", "ready", "booting", "cost"), rows)
            + budget)


def _timeouts(status: RunStatus) -> str:
    if not status.timeouts:
        return ""
    rows = [f'<tr class="timeout"><td>{escape(n.label)}</td><td>{n.ran_s:.0f} s</td>'
            f"<td>{'-' if n.deadline_s is None else f'{n.deadline_s:g} s'}</td>"
            f"<td>{n.pruned}</td><td>{n.cancelled}</td></tr>" for n in reversed(status.timeouts)]
    return ("<h2>Recent timeouts</h2>"
            + _table("timeouts", ("job", "after", "deadline", "pruned queued",
                                  "cancelled running"), rows))


def _model_skips(status: RunStatus) -> str:
    """The recent model skips, each with the threshold it reached and the setting that set it
    (the run's --expocloud-skip-above, or its CWL tool's hint)."""
    if not status.model_skips:
        return ""
    rows = [f'<tr class="model-skip"><td>{escape(n.label)}</td><td>{n.probability:.1%}</td>'
            f"<td>{escape(f'{n.setting} {n.skip_above:g}')}</td>"
            f"<td>{predicted(n.median_s)}</td>"
            f"<td>{'-' if n.deadline_s is None else f'{n.deadline_s:g} s'}</td></tr>"
            for n in reversed(status.model_skips)]
    return ("<h2>Recent model skips</h2><p>not run: the runtime model gave each at least its "
            "threshold of passing its deadline</p>"
            + _table("model-skips", ("job", "p(past deadline)", "threshold",
                                     "predicted median", "deadline"), rows))


def _table(ident: str, headers: tuple[str, ...], rows: list[str]) -> str:
    """A table of the page: its id, a header row, then ``rows`` (each a whole ``<tr>``)."""
    head = "".join(f"<th>{header}</th>" for header in headers)
    return f'<table id="{ident}"><tr>{head}</tr>{"".join(rows)}</table>'
