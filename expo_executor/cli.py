"""``expocloud``: the user's command line for runs, their results, their cost and the cloud.

Subcommands: report, status, logs, forget, runs, cleanup, doctor, emulator, prices,
fit-preemption, simulate.

Runs themselves start from ``snakemake --executor expocloud``; this tool reads what they leave in
the state directory (``.expocloud`` by default).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from expo_executor.core.errors import ExpoError
from expo_executor.cost import preemption_fit, prices_command
from expo_executor.simulate import command as simulate

_PLUGGED = (prices_command, preemption_fit, simulate)  # modules that bring their own subcommand


def _add_state_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--state-dir", type=Path, default=Path(".expocloud"),
                        help="the workflow's state directory (default: .expocloud)")


def _csv(text: str | None) -> list[str] | None:
    return [p.strip() for p in text.split(",") if p.strip()] if text else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="expocloud", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _add_report_parser(sub)
    _add_state_parsers(sub)
    _add_cleanup_parser(sub)
    _add_doctor_parser(sub)
    _add_emulator_parser(sub)
    for module in _PLUGGED:
        module.add_parser(sub)
    return parser


def _add_report_parser(sub: Any) -> None:
    rep = sub.add_parser("report", help="results table, CSV and outcome map of a run")
    rep.add_argument("run", nargs="?", help="run id or directory (default: the newest run)")
    _add_state_dir(rep)
    rep.add_argument("--rule", help="report this rule (default: rules with hardness specs)")
    rep.add_argument("--filter", metavar="EXPR", help="keep rows where EXPR holds, "
                     "e.g. 'cost < 100 and n_tasks >= 5'")
    rep.add_argument("--best", nargs=2, metavar=("min|max", "EXPR"),
                     help="print the solved row minimising or maximising EXPR")
    rep.add_argument("--min-group-size", type=int, default=0, metavar="K",
                     help="drop groups with fewer than K solved rows")
    rep.add_argument("--group-by", metavar="COLS",
                     help="comma-separated group columns (default: the hardness dimensions)")
    rep.add_argument("--csv", type=Path, help="CSV path (default: RUN/results.csv)")
    rep.add_argument("--png", type=Path, help="outcome map path (default: RUN/outcomes.png)")
    rep.add_argument("--dims", metavar="X,Y", help="the two dimensions of the outcome map")
    rep.add_argument("--facet", help="one panel per value of this column")


def _add_state_parsers(sub: Any) -> None:
    """status, forget and runs: what the state directory holds."""
    stat = sub.add_parser("status", help="progress of a live (or finished) run")
    stat.add_argument("run", nargs="?", help="run id or directory (default: the newest run)")
    stat.add_argument("--watch", action="store_true",
                      help="print the status again every --interval seconds until the run "
                      "ends (or Ctrl-C)")
    stat.add_argument("--interval", type=float, default=5.0,
                      help="seconds between --watch updates (default: 5)")
    _add_state_dir(stat)

    logs = sub.add_parser("logs", help="print the saved logs of failed and timed-out jobs")
    logs.add_argument("job", metavar="JOB", help="a job id (7, or its key j7a1), a rule name, "
                      "or RULE:key=value,... (rule:key=value,... for any rule)")
    logs.add_argument("--run", help="run id or directory (default: the newest run)")
    logs.add_argument("--list", action="store_true", help="list the files, print nothing else")
    _add_state_dir(logs)

    forget = sub.add_parser("forget", help="drop stored frontiers and placeholder outputs, so "
                            "that a rerun explores them again")
    forget.add_argument("--rule", help="only this rule (default: all)")
    _add_state_dir(forget)

    runs = sub.add_parser("runs", help="list runs")
    _add_state_dir(runs)


def _add_cleanup_parser(sub: Any) -> None:
    clean = sub.add_parser("cleanup", help="list and delete GCE VMs of runs that are gone, "
                           "and the bucket objects of those no rerun can use")
    clean.add_argument("--project", required=True, help="GCE project id")
    clean.add_argument("--zones", required=True, help="zones to search, comma separated")
    clean.add_argument("--run", help="only this run (its id)")
    clean.add_argument("--all", action="store_true",
                       help="also delete VMs of runs this state directory does not know")
    clean.add_argument("--dry-run", action="store_true", help="list, delete nothing")
    clean.add_argument("--endpoint", help="Compute API endpoint (the local fake)")
    _add_state_dir(clean)


def _add_doctor_parser(sub: Any) -> None:
    from expo_executor.coordinator.profile_settings import add_setting_flags

    doc = sub.add_parser("doctor", help="check a GCE project is ready for a run (APIs, "
                         "credentials, permissions, the worker account, the bucket, machine "
                         "types, quotas, Python, NAT), as a run does before its first VM")
    doc.add_argument("--profile", "--workflow-profile", type=Path, metavar="DIR",
                     help="the run's profile (its config.yaml), e.g. profiles/gce-spot")
    doc.add_argument("--default-storage-prefix", metavar="gs://BUCKET/PREFIX",
                     help="as Snakemake's (default: the profile's)")
    doc.add_argument("-v", "--verbose", action="store_true",
                     help="print every check's line, not only failures and warnings")
    add_setting_flags(doc)


def _add_emulator_parser(sub: Any) -> None:
    emu = sub.add_parser("emulator", help="serve a fake Compute Engine and a GCS emulator on "
                         "loopback for profiles/gce-emulated (until Ctrl-C)")
    emu.add_argument("--compute-port", type=int, default=8790)
    emu.add_argument("--storage-port", type=int, default=8791)
    emu.add_argument("--dir", type=Path, default=Path(".expocloud-emulator"),
                     help="the fake VMs' disks")
    emu.add_argument("--boot-delay", type=float, default=1.0, help="seconds a fake VM boots")
    emu.add_argument("--spot-mean-life", type=float, default=None, metavar="S",
                     help="preempt each Spot VM after an exponential life of mean S seconds")
    emu.add_argument("--seed", type=int, default=1,
                     help="seed of the preemptions and of the storage faults")
    emu.add_argument("--storage-fault-rate", type=float, default=0.0, metavar="R",
                     help="answer 503 or 429 or drop the connection, before or after the "
                     "emulator applies it, on a fraction R of the storage calls (e.g. 0.1)")
    emu.add_argument("--bucket", default="expocloud-emulated",
                     help="a bucket to create at start (the one the emulated profiles use)")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except (ExpoError, ValueError) as exc:
        print(f"expocloud {args.command}: {exc}", file=sys.stderr)
        return 2


def _report(args: argparse.Namespace) -> int:
    # matplotlib and friends load only when a report is asked for
    from expo_executor.report import results as report
    from expo_executor.report.run_reader import find_run

    run_dir = find_run(args.state_dir, args.run)
    best = None
    if args.best:
        direction, expr = args.best
        if direction not in ("min", "max"):
            raise ExpoError("--best", f"direction {direction!r} is neither min nor max",
                            "write --best min EXPR or --best max EXPR")
        best = (direction, expr)
    dims = _csv(args.dims)
    if dims is not None and len(dims) != 2:
        raise ExpoError("--dims", f"{args.dims!r} does not name two columns", "write --dims X,Y")
    print(report.report(run_dir, rule=args.rule, filter=args.filter, best=best,
                        min_group_size=args.min_group_size, group_by=_csv(args.group_by),
                        csv_path=args.csv, png_path=args.png, dims=dims, facet=args.facet))
    cost = _cost(run_dir)
    if cost is not None:
        print("\n" + "\n".join(cost.lines()) + "\n\n" + cost.to_markdown())
    return 0


def _cost(run_dir: Path):  # -> CostReport | None
    """The run's cost report, from its own records (None: the run was not priced)."""
    from expo_executor.cost.cost_report import summarize
    from expo_executor.runs.files import COST, RunFiles

    files = RunFiles(run_dir)
    vms = files.vms()
    if not any(vm.get("hourly") for vm in vms):
        return None
    recorded = files.read_json(COST)
    label = recorded.get("prices") if isinstance(recorded, dict) else None
    return summarize(vms, files.final_jobs(), label or "prices as recorded per VM", time.time(),
                     attempts=files.jobs())


def _status(args: argparse.Namespace) -> int:
    """The run's status; with ``--watch``, again every ``--interval`` s until the run ends
    (0), its coordinator seems dead (1), or Ctrl-C (0)."""
    from expo_executor.report.run_reader import find_run

    if args.interval <= 0:
        raise ExpoError("--interval", f"{args.interval:g} is not a positive number of seconds",
                        "pass how often to print the status, e.g. --interval 5")
    run_dir = find_run(args.state_dir, args.run)
    if not args.watch:
        _show_status(run_dir)
        return 0
    try:
        while True:
            if sys.stdout.isatty():
                print("\033[H\033[J", end="")  # a fresh screen for each update
            over = _show_status(run_dir)
            if over is not None:
                return 0 if over == "ended" else 1
            print(flush=True)
            time.sleep(args.interval)
    except KeyboardInterrupt:
        return 0


def _show_status(run_dir: Path) -> str | None:
    """Print the run's status; returns ``ended`` once the run has ended, ``stale`` when its
    coordinator seems to have died, None while it goes on."""
    from expo_executor.core.run_status import RunStatus, text_lines

    info = json.loads((run_dir / "run.json").read_text())
    try:
        status = RunStatus.from_dict(json.loads((run_dir / "status.json").read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        status = None
    ended = bool(info.get("ended")) or (status is not None and status.finished)
    state = f"ended {info['ended']}" if info.get("ended") else "ended" if ended else "running"
    print(f"run {info['run_id']} ({info.get('engine')}), started {info['created']}, {state}")
    page = run_dir / "run.html"
    if page.exists():
        print(f"page: {page.resolve()}")
    if status is None:
        print("no progress recorded yet")
        return "ended" if ended else None
    now = time.time()
    print("\n".join(text_lines(status, now)), flush=True)
    if ended:
        return "ended"
    if status.stale(now):
        print("warning: no progress written for over two minutes: the coordinator may have died; "
              "its workers stop by themselves after the heartbeat grace period", flush=True)
        return "stale"
    return None


def _logs(args: argparse.Namespace) -> int:
    """Print (or list) the logs a run saved of the jobs JOB names, each under a header."""
    from expo_executor.report import saved_logs
    from expo_executor.report.run_reader import find_run

    run_dir = find_run(args.state_dir, args.run)
    for directory in saved_logs.find(run_dir, args.job):
        for path in saved_logs.files(directory):
            shown = path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path
            if args.list:
                print(shown)
                continue
            print(f"==> {shown} <==", flush=True)
            sys.stdout.buffer.write(path.read_bytes())
            sys.stdout.buffer.flush()
            print()
    return 0


def _forget(args: argparse.Namespace) -> int:
    from expo_executor.coordinator.state import StateDir

    frontiers, placeholders = StateDir(args.state_dir).forget(args.rule)
    what = f"rule {args.rule}" if args.rule else "all rules"
    print(f"forgot {frontiers} frontier(s) and deleted {placeholders} placeholder output(s) "
          f"for {what}; a rerun explores them again")
    return 0


def _runs(args: argparse.Namespace) -> int:
    runs = sorted((args.state_dir / "runs").glob("*/run.json"))
    if not runs:
        print(f"no runs under {args.state_dir / 'runs'}")
    for path in runs:
        info = json.loads(path.read_text())
        print(f"{info['run_id']}\t{info['created']}\t{'ended' if info.get('ended') else 'open'}")
    return 0


def _cleanup(args: argparse.Namespace) -> int:
    from expo_executor.engines.gce.listing import find_instances
    from expo_executor.engines.gce.teardown import delete_instances
    from expo_executor.engines.gce.launch import run_label
    from expo_executor.coordinator.dead_runs import clean_objects, runs_here

    zones = _csv(args.zones) or []
    wanted = run_label(args.run) if args.run else None
    found = find_instances(args.project, zones, endpoint=args.endpoint, run_label=wanted)
    known, live = runs_here(args.state_dir)
    doomed, kept = [], []
    for item in found:
        run = item["labels"].get("expocloud-run", "")
        if run in live:
            kept.append((item, "its run is alive"))
        elif run not in known and not args.all and wanted is None:
            kept.append((item, "run unknown here; --all deletes it"))
        else:
            doomed.append(item)
    for item, why in kept:
        print(f"keep   {item['zone']}/{item['name']} ({item['status']}): {why}")
    for item in doomed:
        print(f"{'would delete' if args.dry_run else 'delete'} {item['zone']}/{item['name']} "
              f"({item['status']}, run {item['labels'].get('expocloud-run')})")
    if doomed and not args.dry_run:
        delete_instances(args.project, doomed, endpoint=args.endpoint)
    if not found:
        print("no expocloud VMs found")
    clean_objects(args.state_dir, live, wanted, args.dry_run, print)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    """The checks a GCE run makes before its first VM, for the settings a run with this
    profile (and these flags) would have: 0 when all pass, 1 when one fails."""
    from expo_executor.coordinator.profile_settings import Profile, read_profile, settings_of
    from expo_executor.coordinator.rule_machines import shape_book
    from expo_executor.coordinator.settings import validate
    from expo_executor.coordinator.shapes import named_shapes
    from expo_executor.coordinator.state import StateDir
    from expo_executor.core.records import EngineName
    from expo_executor.engines.gce import doctor
    from expo_executor.engines.gce.launch import coordination_url, doctor_plan
    from expo_executor.settings.values import with_default_slots

    profile = read_profile(args.profile) if args.profile else Profile()
    settings = with_default_slots(settings_of(profile, args))
    if settings.engine != EngineName.GCE:
        raise ExpoError("--expocloud-engine", f"the profile runs on the {settings.engine} "
                        "engine: there is no GCE project to check",
                        "give a GCE profile (--profile profiles/gce-spot) or --expocloud-engine gce")
    validate(settings)
    url = coordination_url(settings, args.default_storage_prefix
                           or profile.default_storage_prefix, "doctor")
    book = shape_book(settings, {}, StateDir(Path(settings.state_dir)), lambda _line: None)
    plan = doctor_plan(settings, named_shapes(book, profile.resources) if book else [], url)
    started = time.monotonic()
    checks = doctor.run_checks(plan, doctor.host_python())
    for check in checks:
        if not check.ok or check.warning or args.verbose:
            word = "ok  " if check.ok and not check.warning else "warn" if check.ok else "FAIL"
            print(f"{word}  {check.line}")
    if all(check.ok for check in checks):
        print(f"expocloud doctor: {doctor.summary(plan, checks, time.monotonic() - started)}")
        return 0
    return 1


def _emulator(args: argparse.Namespace) -> int:
    from expo_executor.emulator.serve import serve

    if not 0.0 <= args.storage_fault_rate <= 1.0:
        print(f"expocloud emulator: --storage-fault-rate {args.storage_fault_rate:g} is not a "
              "fraction; fix: pass a number between 0 and 1 (0.1: one call in ten)",
              file=sys.stderr)
        return 2
    return serve(args.compute_port, args.storage_port, args.dir, args.boot_delay,
                 args.spot_mean_life, args.seed, args.bucket,
                 storage_fault_rate=args.storage_fault_rate)


COMMANDS = {"report": _report, "status": _status, "logs": _logs, "forget": _forget, "runs": _runs,
            "cleanup": _cleanup, "doctor": _doctor, "emulator": _emulator,
            "prices": prices_command.run, "fit-preemption": preemption_fit.run, "simulate": simulate.run}

if __name__ == "__main__":
    sys.exit(main())
