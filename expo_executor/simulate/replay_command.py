"""``expocloud simulate --workload FILE.csv``'s own arguments and its run: the replay of
recorded runtimes (:mod:`.replay`), printed as a line and written as JSON."""

from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path
from typing import Any

from expo_executor.core.errors import ExpoError
from expo_executor.core.hardness import HardnessSpec, parse_duration
from expo_executor.simulate.replay import ReplayConfig, load_rows, replay


def add_replay_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--deadline", metavar="S", help="with --workload: each job's deadline")
    p.add_argument("--hardness", metavar="SPEC",
                   help="with --workload: the declared order (domino effect), e.g. "
                   "'n; scope: algorithm, instance, repetition'")
    p.add_argument("--hardness-model", choices=("none", "learned"), default="none",
                   help="with --workload: order and skip by the learned runtime model "
                   "(default: none, today's behaviour)")
    p.add_argument("--noise", default="", metavar="COLS",
                   help="with --workload: noise columns, nested in this order, e.g. "
                   "instance,repetition")
    p.add_argument("--skip-above", type=float, metavar="P",
                   help="with --workload: skip jobs the model gives P or more of timing out")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="with --workload: the figures")


def _config(args: argparse.Namespace, columns: set[str]) -> ReplayConfig:
    if args.deadline is None:
        raise ExpoError("--deadline", "--workload needs a deadline", "give e.g. --deadline 3600")
    deadline = parse_duration(args.deadline, "--deadline")
    hardness = _hardness(args.hardness, columns) if args.hardness else None
    if hardness is not None:
        hardness.check_wildcards(columns, "--hardness")
    noise = tuple(n.strip() for n in args.noise.split(",") if n.strip())
    for name in noise:
        if name not in columns:
            raise ExpoError("--noise", f"'{name}' is not a column of the workload",
                            f"name columns of it: {', '.join(sorted(columns))}")
    if args.skip_above is not None:
        if args.hardness_model != "learned":
            raise ExpoError("--skip-above", "skipping needs the learned model",
                            "add --hardness-model learned")
        if not 0.0 < args.skip_above <= 1.0:
            raise ExpoError("--skip-above", f"{args.skip_above:g} is not a probability",
                            "give P with 0 < P <= 1, e.g. 0.99")
    return ReplayConfig(deadline, hardness, args.hardness_model == "learned", noise,
                        args.skip_above, args.vms, args.slots or 8)


def _hardness(text: str, columns: set[str]) -> HardnessSpec:
    """The declared order; a CSV column it cannot name (a space, a dash) is to be renamed in
    the CSV, and the error says so, with the name to give it."""
    try:
        return HardnessSpec.parse(text, "--hardness")
    except ExpoError as exc:
        odd = sorted(c for c in columns if not c.isidentifier() and c in text)
        if not odd:
            raise
        fixed = re.sub(r"\W+", "_", odd[0]).strip("_") or "p"
        raise ExpoError("--hardness", f"{exc.problem}: a declared order names wildcards, and "
                        f"the CSV's column {odd[0]!r} is not one",
                        f"rename the column in the CSV (e.g. to {fixed}) and in --hardness") \
            from None


def run_replay(args: argparse.Namespace) -> int:
    rows = load_rows(args.workload)
    config = _config(args, set(rows[0].params))
    began = time.process_time()
    result = replay(rows, config).to_dict()
    result["replay_cpu_s"] = round(time.process_time() - began, 1)
    result["command"] = _settings(args)
    print(_line(result))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


def _settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"workload": str(args.workload), "deadline": args.deadline,
            "hardness": args.hardness,
            "hardness_model": args.hardness_model, "noise": args.noise,
            "skip_above": args.skip_above, "vms": args.vms, "slots": args.slots or 8}


def _line(r: dict[str, Any]) -> str:
    ratio = r["cpu_vs_oracle"]
    return (f"{r['jobs']} jobs, {r['solvable']} solvable; CPU {r['cpu_s']:.0f} s = "
            f"{ratio:.2f}x the oracle's {r['oracle_cpu_s']:.0f} s; lost "
            f"{r['solvable_lost']} solvable ({100 * r['solvable_lost_share']:.2f}%); domino skips "
            f"{r['domino_skips']}, model skips {r['model_skips']} ({r['model_skips_wrong']} "
            f"would have solved); remaining-cost interval covered: "
            f"{r['remaining_cost_covered']}")
