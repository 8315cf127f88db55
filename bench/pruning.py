#!/usr/bin/env python3
"""Benchmark 2: CPU spent on `solve` jobs of the agent-assignment sweep, with and without pruning.

    /work/venv/bin/python bench/pruning.py            # full run, refreshes bench/RESULTS.md

One invocation, each run in a fresh copy of workflows/agent-assignment (sources only):

  (a) with pruning:    snakemake --executor expocloud --expocloud-on-skip placeholder
                       (the workflow's default profile as is: hardness + deadline for `solve`)
  (b) without pruning: the same command in a copy whose profiles/default/config.yaml has the
                       `hardness` resource removed (same deadline, same everything else)
  (c) oracle, computed from (b)'s jobs.jsonl: the runtimes of the solve jobs that finished
      within the deadline, plus one deadline per minimal timed-out point (minimal under the
      Pareto order of the hardness spec, within its scope).

With ``--orig PATH`` (a checkout of github.com/mgoldenbe/ExpoCloud), the same sweep's solve
jobs also run on the original ExpoCloud (bench/expocloud_orig.py --sweep), same instances,
solver, deadline and hardness order: (d) with its pruning, (e) without, (f) its oracle from (e).

CPU-seconds of a job are approximated by its `runtime_s` (worker wall time from start to end) in
.expocloud/runs/<run>/jobs.jsonl: each solve job is single-threaded and the local engine never
runs more slots than cores.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (BENCH, CORES, PYTHON, REPO, Run, last_json_line, machine_line,  # noqa: E402
                    run_snakemake, run_timed, show_cmd, versions, wait_quiet, write_section)

WORKFLOW = REPO / "workflows" / "agent-assignment"
PROFILE = Path("profiles") / "default" / "config.yaml"
RULE = "solve"
# Generated state that must never be copied into a fresh run directory.
GENERATED = {".snakemake", ".expocloud", "results", "instances", "logs", "benchmarks"}


def copy_workflow(dest: Path) -> Path:
    def ignore(directory: str, names: list[str]) -> set[str]:
        if Path(directory).resolve() == WORKFLOW.resolve():
            return {n for n in names if n in GENERATED}
        return {n for n in names if n == "__pycache__"}
    shutil.copytree(WORKFLOW, dest, ignore=ignore)
    return dest


def load_profile(workdir: Path) -> dict:
    import yaml
    return yaml.safe_load((workdir / PROFILE).read_text()) or {}


def strip_hardness(workdir: Path) -> dict:
    """Remove the hardness resource of every rule from the copy's default profile."""
    import yaml
    profile = load_profile(workdir)
    resources = profile.get("set-resources") or {}
    removed = {}
    if isinstance(resources, dict):
        for rule, res in resources.items():
            if isinstance(res, dict) and "hardness" in res:
                removed[rule] = res.pop("hardness")
    elif isinstance(resources, list):  # "rule:resource=value" strings
        keep = []
        for item in resources:
            rule, _, rest = str(item).partition(":")
            if rest.split("=", 1)[0].strip() == "hardness":
                removed[rule] = rest.split("=", 1)[1]
            else:
                keep.append(item)
        profile["set-resources"] = keep
    if not removed:
        raise SystemExit(f"no hardness resource found in {workdir / PROFILE}")
    (workdir / PROFILE).write_text(yaml.safe_dump(profile, sort_keys=False))
    return removed


def rule_resources(profile: dict, rule: str) -> dict:
    resources = profile.get("set-resources") or {}
    if isinstance(resources, dict):
        return dict(resources.get(rule) or {})
    out = {}
    for item in resources:
        r, _, rest = str(item).partition(":")
        if r == rule and "=" in rest:
            k, v = rest.split("=", 1)
            out[k.strip()] = v.strip().strip('"')
    return out


def records(workdir: Path) -> list[dict]:
    recs = []
    for f in sorted(workdir.glob(".expocloud/runs/*/jobs.jsonl")):
        recs += [json.loads(line) for line in f.read_text().splitlines() if line.strip()]
    return recs


def summarize(recs: list[dict], rule: str) -> dict:
    solve = [r for r in recs if r.get("rule") == rule]
    out = {"jobs": len(solve), "cpu_s": 0.0}
    for name in ("solved", "timeout", "skipped_unrun", "skipped_killed", "failed"):
        out[name] = 0
        out[name + "_cpu_s"] = 0.0
    for r in solve:
        rt = r.get("runtime_s") or 0.0
        oc = r.get("outcome")
        if oc == "skipped":
            oc = "skipped_killed" if r.get("killed") or r.get("runtime_s") else "skipped_unrun"
        if oc not in ("solved", "timeout", "skipped_unrun", "skipped_killed", "failed"):
            oc = "failed"
        out[oc] += 1
        out[oc + "_cpu_s"] += rt
        out["cpu_s"] += rt
    return out


def minimal_points(points: list[tuple[tuple, tuple]]) -> list[tuple[tuple, tuple]]:
    """Minimal elements of (scope, vector) points under the Pareto order within a scope."""
    uniq = sorted(set(points))

    def leq(a, b):
        return a[0] == b[0] and all(x <= y for x, y in zip(a[1], b[1]))
    return [p for p in uniq if not any(q != p and leq(q, p) for q in uniq)]


def oracle(recs_b: list[dict], spec_text: str, deadline_s: float, rule: str) -> dict:
    from expo_executor.core.hardness import HardnessSpec  # read-only use of the spec parser
    spec = HardnessSpec.parse(spec_text)
    solve = [r for r in recs_b if r.get("rule") == rule]
    solved = [r for r in solve if r.get("outcome") == "solved"]
    timed_out = [r for r in solve if r.get("outcome") == "timeout"]
    pts = []
    for r in timed_out:
        p = spec.point(r["wildcards"])
        pts.append((p.scope, p.vector))
    minimal = minimal_points(pts)
    # solved jobs that a perfect pruner would still run: those no timed-out point dominates
    undominated = [r for r in solved
                   if not any(m[0] == spec.point(r["wildcards"]).scope
                              and all(x <= y for x, y in zip(m[1], spec.point(r["wildcards"]).vector))
                              for m in minimal)]
    names = [d.name for d in spec.dimensions]

    def label(p):
        return "{" + ", ".join(f"{n}={_unrank(spec, i, v)}" for i, (n, v) in
                               enumerate(zip(names, p[1]))) + "}"
    return {
        "solved": len(solved), "solved_cpu_s": sum(r["runtime_s"] or 0 for r in solved),
        "timed_out_jobs": len(timed_out), "timed_out_points": len(set(pts)),
        "minimal": [label(p) for p in minimal], "deadline_s": deadline_s,
        "cpu_s": sum(r["runtime_s"] or 0 for r in solved) + deadline_s * len(minimal),
        "solved_dominated": len(solved) - len(undominated),
        "strict_cpu_s": sum(r["runtime_s"] or 0 for r in undominated)
        + deadline_s * len(minimal),
    }


def _unrank(spec, i, v):
    d = spec.dimensions[i]
    if d.order is not None:
        return d.order[int(v)]
    return int(v) if float(v).is_integer() else v


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quiet-wait", type=float, default=5.0,
                    help="seconds to wait for other processes to calm down before each run")
    ap.add_argument("--config", nargs="*", default=[],
                    help="extra --config for both runs (e.g. to shrink the sweep for a test)")
    ap.add_argument("--orig", type=Path,
                    help="checkout of github.com/mgoldenbe/ExpoCloud: runs (d)-(f) too")
    ap.add_argument("--skip-expocloud", action="store_true",
                    help="only the original's runs (needs --orig; RESULTS.md is left alone)")
    ap.add_argument("--no-results", action="store_true", help="do not touch bench/RESULTS.md")
    ap.add_argument("--keep", action="store_true", help="keep the temporary directories")
    args = ap.parse_args()
    if not (WORKFLOW / "Snakefile").exists():
        raise SystemExit(f"{WORKFLOW}/Snakefile does not exist")
    if args.orig is not None:
        from expocloud_orig import check_checkout
        args.orig = args.orig.resolve()
        check_checkout(args.orig)
    elif args.skip_expocloud:
        raise SystemExit("--skip-expocloud: give --orig PATH too (nothing would run)")

    v = versions()
    base = Path(tempfile.mkdtemp(prefix="expo-bench-pruning-"))
    print(f"work dir {base}", flush=True)
    started = time.time()
    cmd = ["--executor", "expocloud", "--expocloud-on-skip", "placeholder"]
    if args.config:
        cmd += ["--config", *args.config]

    with_dir = copy_workflow(base / "with-pruning")
    without_dir = copy_workflow(base / "without-pruning")
    profile = load_profile(with_dir)
    res = rule_resources(profile, RULE)
    spec_text = str(res.get("hardness"))
    from expo_executor.core.hardness import parse_duration
    deadline_s = parse_duration(res.get("deadline"), "deadline")
    removed = strip_hardness(without_dir)
    print(f"hardness {spec_text!r}, deadline {deadline_s:g} s; removed in (b): {removed}",
          flush=True)

    runs: dict[str, Run] = {}
    for name, d in (() if args.skip_expocloud else
                    (("with pruning", with_dir), ("without pruning", without_dir))):
        print(f"[{time.time() - started:5.0f} s] ({'a' if 'with ' in name else 'b'}) {name}: "
              f"{show_cmd(cmd)}", flush=True)
        wait_quiet(args.quiet_wait, log=print)
        r = run_snakemake(name, cmd, d, base / f"{name.replace(' ', '-')}.log", timeout=3600)
        r.wrap["summary"] = summarize(records(d), RULE)
        r.wrap["table_ok"] = (d / "results" / "table.tsv").exists()
        runs[name] = r
        print(f"    wall {r.wall_s:.1f} s, exit {r.exit_code}, {RULE}: {r.wrap['summary']}",
              flush=True)

    orig = run_original(args, base, spec_text, deadline_s, started) if args.orig else None
    if args.skip_expocloud:
        print(json.dumps({"summary": orig["summary"], "oracle": orig["oracle"]}, indent=1))
        return 0 if all(r.exit_code == 0 for r in orig["runs"].values()) else 1
    orc = oracle(records(without_dir), spec_text, deadline_s, RULE)
    md = report(v, args, runs, orc, spec_text, deadline_s, removed, cmd, profile,
                time.time() - started)
    if orig:
        md += "\n\n" + report_original(orig, runs["with pruning"].wrap["summary"],
                                        runs["without pruning"].wrap["summary"], orc)
    print()
    print(md)
    if not args.no_results:
        write_section("pruning", md)
        print("(section 'pruning' of bench/RESULTS.md refreshed)")
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if all(r.exit_code == 0 for r in runs.values()) else 1


def run_original(args, base: Path, spec_text: str, deadline_s: float, started: float) -> dict:
    """(d) and (e): the sweep's solve jobs on the original ExpoCloud; (f) its oracle from (e)."""
    out: dict = {"runs": {}, "summary": {}}
    for name, pruning in (("original with pruning", True), ("original without pruning", False)):
        print(f"[{time.time() - started:5.0f} s] ({'d' if pruning else 'e'}) {name}", flush=True)
        wait_quiet(args.quiet_wait, log=print)
        argv = [PYTHON, str(BENCH / "expocloud_orig.py"), "--orig", str(args.orig), "--sweep",
                str(WORKFLOW / "config.yaml"), "--deadline", f"{deadline_s:g}",
                "--slots", str(CORES), "--workdir", str(base / name.replace(" ", "-"))]
        if not pruning:
            argv.append("--no-pruning")
        log = base / f"{name.replace(' ', '-')}.log"
        r = run_timed(name, argv, base, log, timeout=3600)
        r.wrap = last_json_line(log)
        if r.wrap:
            r.exit_code, r.wall_s = r.wrap["exit_code"], r.wrap["wall_s"]
        else:
            r.exit_code = r.exit_code or -1
        out["runs"][name] = r
        out["summary"][name] = summarize(r.wrap.get("records", []), RULE)
        print(f"    wall {r.wall_s:.1f} s, exit {r.exit_code}, {RULE}: "
              f"{out['summary'][name]}", flush=True)
    out["oracle"] = oracle(out["runs"]["original without pruning"].wrap.get("records", []),
                           spec_text, deadline_s, RULE)
    out["argv"] = argv
    return out


def report_original(orig: dict, ours: dict, ours_without: dict, our_oracle: dict) -> str:
    d = orig["runs"]["original with pruning"]
    e = orig["runs"]["original without pruning"]
    sd = orig["summary"]["original with pruning"]
    se = orig["summary"]["original without pruning"]
    orc = orig["oracle"]
    w = d.wrap
    L = ["### The original ExpoCloud on the same sweep", ""]
    L.append(f"The original ExpoCloud (github.com/mgoldenbe/ExpoCloud at {w.get('checkout')}, "
             f"`bench/expocloud_orig.patch` {w.get('patch')} on a copy) on its local engine, one "
             f"client with {w.get('slots')} worker processes (`max_clients=1`, backup server "
             "off): `python bench/expocloud_orig.py --orig PATH --sweep "
             f"workflows/agent-assignment/config.yaml --deadline {w.get('deadline_s'):g} "
             f"--slots {w.get('slots')}` (and `--no-pruning`). Its tasks "
             "(`bench/expocloud_orig_tasks/agent_assignment.py`) are the same solve jobs: the "
             "same seeded instances (`scripts/generate.py`), the same solver "
             "(`scripts/solve.py`, called in the worker process its client forks per task), "
             "the same deadline, and hardness `(variant rank, n_tasks, n_agents)`, which its "
             "element-wise comparison makes the profile's Pareto order. Without pruning, its "
             "hardness never dominates (tasks still go easiest first). CPU-s are its tasks' "
             "'starting' to 'done'/'timeout'/'domino' events (its client's clock, 0.01 s), "
             "so they hold no Snakemake start-up: each of its tasks is a forked Python process "
             "and its deadline covers the solver only.")
    L.append("")
    L.append("| | (d) original, with pruning | (e) original, without | (f) its oracle |")
    L.append("|---|---|---|---|")
    L.append(f"| **CPU-s on `{RULE}` tasks** | **{sd['cpu_s']:.1f}** | **{se['cpu_s']:.1f}** | "
             f"**{orc['cpu_s']:.1f}** |")
    L.append(f"| solved (CPU-s) | {sd['solved']} ({sd['solved_cpu_s']:.1f}) | {se['solved']} "
             f"({se['solved_cpu_s']:.1f}) | {orc['solved']} ({orc['solved_cpu_s']:.1f}) |")
    L.append(f"| timed out (CPU-s) | {sd['timeout']} ({sd['timeout_cpu_s']:.1f}) | "
             f"{se['timeout']} ({se['timeout_cpu_s']:.1f}) | {len(orc['minimal'])} minimal "
             f"points x {orc['deadline_s']:g} s |")
    L.append(f"| skipped before starting (of which by its server) | {sd['skipped_unrun']} "
             f"({w.get('skipped_by_server')}) | {se['skipped_unrun']} | |")
    L.append(f"| killed by its domino effect while running (CPU-s) | {sd['skipped_killed']} "
             f"({sd['skipped_killed_cpu_s']:.1f}) | {se['skipped_killed']} "
             f"({se['skipped_killed_cpu_s']:.1f}) | |")
    L.append(f"| wall-clock time of the whole run | {d.wall_s:.1f} s | {e.wall_s:.1f} s | |")
    L.append(f"| exit code | {d.exit_code} | {e.exit_code} | |")
    L.append(f"| other processes' share of the machine during the run | {d.foreign_share:.0%} | "
             f"{e.foreign_share:.0%} | |")
    L.append("")
    L.append("| ratio | the original | expocloud (above) |")
    L.append("|---|---|---|")

    def ratio(a: float, b: float) -> str:
        return f"{a / b:.3f}" if b else "n/a"
    L.append(f"| with pruning / its own oracle | {ratio(sd['cpu_s'], orc['cpu_s'])} | "
             f"{ratio(ours['cpu_s'], our_oracle['cpu_s'])} |")
    L.append(f"| with pruning / without pruning | {ratio(sd['cpu_s'], se['cpu_s'])} | "
             f"{ratio(ours['cpu_s'], ours_without['cpu_s'])} |")
    L.append("")
    L.append(f"Its minimal timed-out points in (e) ({len(orc['minimal'])}): "
             f"{', '.join(orc['minimal']) or 'none'}.")
    return "\n".join(L)


def report(v, args, runs, orc, spec_text, deadline_s, removed, cmd, profile, total_s) -> str:
    a, b = runs["with pruning"], runs["without pruning"]
    sa, sb = a.wrap["summary"], b.wrap["summary"]
    L = ["## Benchmark 2: pruning on the agent-assignment sweep", ""]
    L.append("Reproduce: `.venv/bin/python bench/pruning.py"
             + (" --orig PATH` (PATH a checkout of github.com/mgoldenbe/ExpoCloud)"
                if args.orig else "`")
             + (f" (options used: `--config {' '.join(args.config)}`)" if args.config else "")
             + ".")
    L.append("")
    L.append(machine_line(v) + f" Measured {time.strftime('%Y-%m-%d %H:%M')}, whole script "
             f"{total_s:.0f} s.")
    L.append("")
    try:
        import yaml
        cfg = yaml.safe_load((REPO / "workflows/agent-assignment/config.yaml").read_text())
        L.append(f"Sweep (workflows/agent-assignment/config.yaml): `{json.dumps(cfg)}`; "
                 f"{sa['jobs']} `{RULE}` jobs. Profile: hardness `{spec_text}`, deadline "
                 f"{deadline_s:g} s.")
    except Exception:
        pass
    L.append("")
    L.append(f"* (a) with pruning: `{show_cmd(cmd)}` in a fresh copy of the workflow "
             "(default profile as is)")
    L.append(f"* (b) without pruning: the same command in a fresh copy whose default profile has "
             f"the `hardness` resource removed ({', '.join(removed)}), same deadline")
    L.append("* (c) oracle from (b)'s jobs.jsonl: runtimes of the solve jobs that finished within "
             "the deadline + one deadline per minimal timed-out point (Pareto order over "
             "(variant rank, n_tasks, n_agents))")
    L.append("")
    L.append("CPU-seconds of a job are approximated by its `runtime_s` (wall time on the worker, "
             "including the job's own Snakemake start-up) in jobs.jsonl: each solve job is "
             "single-threaded and slots never exceed cores. Strictly this is slot-seconds (what "
             "a cloud bill counts); it equals CPU-seconds on an otherwise idle machine and "
             "exceeds them when other processes compete for the cores (see the last row). "
             "(`getrusage` cannot cross-check it: a timed-out job's solver process is orphaned "
             "when its session is killed, so its CPU is never charged to any of our processes.)")
    L.append("")
    L.append("| | (a) with pruning | (b) without pruning | (c) oracle |")
    L.append("|---|---|---|---|")
    L.append(f"| **CPU-s on `{RULE}` jobs** | **{sa['cpu_s']:.1f}** | **{sb['cpu_s']:.1f}** | "
             f"**{orc['cpu_s']:.1f}** |")
    L.append(f"| solved (CPU-s) | {sa['solved']} ({sa['solved_cpu_s']:.1f}) | {sb['solved']} "
             f"({sb['solved_cpu_s']:.1f}) | {orc['solved']} ({orc['solved_cpu_s']:.1f}) |")
    L.append(f"| timed out (CPU-s) | {sa['timeout']} ({sa['timeout_cpu_s']:.1f}) | "
             f"{sb['timeout']} ({sb['timeout_cpu_s']:.1f}) | {len(orc['minimal'])} minimal points "
             f"x {deadline_s:g} s ({deadline_s * len(orc['minimal']):.1f}) |")
    L.append(f"| skipped before starting | {sa['skipped_unrun']} | {sb['skipped_unrun']} | |")
    L.append(f"| skipped, killed while running (CPU-s) | {sa['skipped_killed']} "
             f"({sa['skipped_killed_cpu_s']:.1f}) | {sb['skipped_killed']} "
             f"({sb['skipped_killed_cpu_s']:.1f}) | |")
    L.append(f"| failed | {sa['failed']} | {sb['failed']} | |")
    L.append(f"| wall-clock time of the whole run | {a.wall_s:.1f} s | {b.wall_s:.1f} s | |")
    L.append(f"| exit code, results/table.tsv written | {a.exit_code}, {a.wrap['table_ok']} | "
             f"{b.exit_code}, {b.wrap['table_ok']} | |")
    L.append(f"| other processes' share of the machine during the run | {a.foreign_share:.0%} | "
             f"{b.foreign_share:.0%} | |")
    L.append("")
    ratio = sa["cpu_s"] / orc["cpu_s"] if orc["cpu_s"] else float("nan")
    saving = 1 - sa["cpu_s"] / sb["cpu_s"] if sb["cpu_s"] else float("nan")
    ok = ratio <= 1.25
    L.append("| ratio | measured | expected | met? |")
    L.append("|---|---|---|---|")
    L.append(f"| with pruning / oracle | {ratio:.3f} | <= 1.25 | {'yes' if ok else 'NO'} |")
    L.append(f"| with pruning / without pruning | {sa['cpu_s'] / sb['cpu_s']:.3f} "
             f"(saves {saving:.0%}) | (reference) | |")
    L.append(f"| wall with / without pruning | {a.wall_s / b.wall_s:.3f} | (reference) | |")
    L.append("")
    L.append(f"Minimal timed-out points in (b) ({len(orc['minimal'])}, of "
             f"{orc['timed_out_points']} timed-out points / {orc['timed_out_jobs']} timed-out "
             f"jobs): {', '.join(orc['minimal']) or 'none'}.")
    if orc["solved_dominated"]:
        L.append("")
        L.append(f"{orc['solved_dominated']} job(s) solved in (b) are nevertheless dominated by a "
                 "minimal timed-out point (another instance of the same or an easier point timed "
                 "out): pruning skips them by design. Counting only undominated solved jobs, the "
                 f"oracle would be {orc['strict_cpu_s']:.1f} CPU-s (ratio "
                 f"{sa['cpu_s'] / orc['strict_cpu_s']:.3f}).")
    lost = sb["solved"] - sa["solved"]
    L.append("")
    L.append(f"Solved results: {sa['solved']} with pruning vs {sb['solved']} without "
             f"({lost} fewer with pruning: jobs that an easier timed-out point dominates, or that "
             "timed out in one run and not the other)." if lost else
             f"Solved results: {sa['solved']} with pruning, the same count as without.")
    L.append("")
    L.append("Expectation met." if ok else
             "Missed expectation: with pruning / oracle > 1.25. See the discussion below.")
    return "\n".join(L)


if __name__ == "__main__":
    sys.exit(main())
