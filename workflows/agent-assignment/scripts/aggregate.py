#!/usr/bin/env python3
"""Collect solve results into one TSV table.

Usage: python scripts/aggregate.py OUTPUT.tsv RESULT.json [RESULT.json ...]

Each input is expected at results/{variant}/{n_tasks}/{n_agents}/{instance}.json
and holds either
  * a real result written by solve.py            -> status "solved"
  * a placeholder {"expocloud_outcome": "..."}   -> status = that outcome
    (written by the executor for skipped / timed-out jobs; extra keys allowed)
  * anything else (missing, not JSON, wrong shape) -> status "unreadable"
Placeholders and unreadable files get empty cost/nodes/solve_seconds. The
script never fails because of an input's content.
"""
import json
import os
import sys

COLUMNS = ("variant", "n_tasks", "n_agents", "instance", "status", "cost", "nodes", "solve_seconds")
VARIANT_ORDER = {"heuristic": 0, "bnb": 1, "brute": 2}
KEYS = ("variant", "n_tasks", "n_agents", "instance")


def ids_from_path(path):
    """(variant, n_tasks, n_agents, instance) from .../variant/t/a/i.json, else {}."""
    parts = os.path.normpath(path).split(os.sep)
    if len(parts) < 4:
        return {}
    variant, t, a, leaf = parts[-4:]
    inst = leaf[:-5] if leaf.endswith(".json") else leaf
    if not (t.isdigit() and a.isdigit() and inst.isdigit()):
        return {}
    return {"variant": variant, "n_tasks": t, "n_agents": a, "instance": inst}


def clean(value):
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float) and value != value:  # NaN
        return ""
    text = str(value)
    return " ".join(text.split())  # no tabs/newlines inside a cell


def read_row(path):
    row = dict.fromkeys(COLUMNS, "")
    row.update(ids_from_path(path))
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except Exception:  # missing, unreadable, not JSON, bad encoding ...
        data = None
    if isinstance(data, dict) and "expocloud_outcome" in data:
        row["status"] = clean(data["expocloud_outcome"]) or "unknown"
        for k in KEYS:  # a placeholder may carry the wildcards too
            if not row[k] and k in data:
                row[k] = clean(data[k])
    elif isinstance(data, dict) and "cost" in data:
        row["status"] = "solved"
        for k in KEYS:
            if not row[k] and k in data:
                row[k] = clean(data[k])
        for k in ("cost", "nodes", "solve_seconds"):
            row[k] = clean(data.get(k))
    else:
        row["status"] = "unreadable"
    if not any(row[k] for k in KEYS):
        row["variant"] = clean(path)  # keep the row identifiable
    return row


def sort_key(row):
    def num(x):
        try:
            return (0, int(x))
        except (TypeError, ValueError):
            return (1, 0)
    return (VARIANT_ORDER.get(row["variant"], len(VARIANT_ORDER)), row["variant"],
            num(row["n_tasks"]), num(row["n_agents"]), num(row["instance"]))


def aggregate(paths):
    return sorted((read_row(p) for p in paths), key=sort_key)


def to_tsv(rows):
    lines = ["\t".join(COLUMNS)]
    lines += ["\t".join(row[c] for c in COLUMNS) for row in rows]
    return "\n".join(lines) + "\n"


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        sys.exit("usage: aggregate.py OUTPUT.tsv [RESULT.json ...]")
    out, inputs = argv[0], argv[1:]
    rows = aggregate(inputs)
    d = os.path.dirname(out)
    if d:
        os.makedirs(d, exist_ok=True)
    tmp = f"{out}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(to_tsv(rows))
    os.replace(tmp, out)
    counts = {}
    for r in rows:
        counts.setdefault(r["variant"], {}).setdefault(r["status"], 0)
        counts[r["variant"]][r["status"]] += 1
    for v, c in counts.items():
        print(f"{v}: " + ", ".join(f"{n} {s}" for s, n in sorted(c.items())), file=sys.stderr)


if __name__ == "__main__":
    main()
