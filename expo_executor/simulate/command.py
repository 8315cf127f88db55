"""The ``expocloud simulate`` command: its arguments, and a run of every policy on a workload
(a past run's or a synthetic one), printed as a table and drawn as a plot; with ``--regions``,
once in the first region alone and once across all of them (``regions``).

Its defaults are a GCE run's (the ``settings`` leaf: machine type, poll, idle timeout, the size
of the on-demand pool), read in :func:`_base_config`, so that what is simulated is what a run
would do.
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path
from typing import Any

from expo_executor.core.errors import ExpoError
from expo_executor.core.records import EngineName
from expo_executor.settings.engine_defaults import GCE
from expo_executor.settings.fields import Settings
from expo_executor.settings.values import max_on_demand
from expo_executor.simulate.policies import POLICIES, SimConfig
from expo_executor.simulate.regions import RegionSet, SimRegion
from expo_executor.simulate.simulation import compare
from expo_executor.simulate.replay_command import add_replay_arguments, run_replay
from expo_executor.simulate.table import plot, table
from expo_executor.simulate.workload import BootDelay, Workload, load_run, synthetic


def _boot(text: str) -> BootDelay:
    mean, _, sd = text.partition(",")
    return BootDelay(float(mean), float(sd) if sd else 0.0)


def add_parser(sub: Any) -> argparse.ArgumentParser:
    """Adds ``simulate`` to the ``expocloud`` subcommands."""
    p = sub.add_parser("simulate", help="compare Spot/on-demand policies on a workload under "
                       "simulated time (the real scheduler and fleet code)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run", metavar="RUN_ID|DIR",
                        help="the workload of a past run (its jobs.jsonl)")
    source.add_argument("--synthetic", type=int, metavar="N", help="a synthetic sweep of N jobs")
    source.add_argument("--workload", type=Path, metavar="FILE.csv",
                        help="recorded runtimes (parameter columns, runtime_s, status) replayed "
                        "under the real scheduler on --vms x --slots slots (replay.py)")
    p.add_argument("--state-dir", type=Path, default=Path(".expocloud"),
                   help="the workflow's state directory (default: .expocloud)")
    p.add_argument("--rule", help="with --run: this rule's jobs (default: rules with hardness)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="with --run: multiply runtimes and deadlines (default: 1)")
    p.add_argument("--vms", type=int, default=10, help="Spot (main pool) VMs at most")
    p.add_argument("--slots", type=int, help="slots per VM (default: the machine's vCPUs)")
    p.add_argument("--machine-type", default=None, help="default: the executor's default")
    p.add_argument("--region", default="us-central1", help="prices of this region")
    p.add_argument("--regions", metavar="A,B,...", help="compare the first region alone with "
                   "all of them together: each its own prices, a create call tries the "
                   "cheapest with capacity (replaces --region)")
    p.add_argument("--region-stockouts", metavar="P1,P2,...", help="with --regions: each "
                   "region's probability that a Spot create call finds no capacity there "
                   "(default: --stockout in each)")
    p.add_argument("--spot-attempts", type=int, default=2,
                   help="preemptions before a job moves to on-demand")
    p.add_argument("--on-demand-min", type=int, default=0, help="hybrid's reliable core")
    p.add_argument("--max-on-demand", type=int, default=None,
                   help="on-demand VMs at most (default: as a run would: a quarter of --vms, "
                   "rounded up, at least 1 and at least --on-demand-min)")
    p.add_argument("--boot-s", default=None, metavar="MEAN[,SD]",
                   help="VM boot delay in seconds (default: a --run's recorded boots if it "
                        "has them, else 60,15)")
    p.add_argument("--stockout", type=float, default=0.0, metavar="P",
                   help="probability that a Spot create call finds no capacity")
    p.add_argument("--poll", type=float, default=None, help="coordinator tick (default: GCE's)")
    p.add_argument("--dispatch-s", type=float, default=None,
                   help="assignment to job start (default: the poll)")
    p.add_argument("--idle-timeout", type=float, default=None,
                   help="idle seconds before a VM is deleted (default: the executor's)")
    p.add_argument("--policies", default=",".join(POLICIES), help="comma-separated")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--png", type=Path, default=Path("simulate.png"))
    p.add_argument("--md", type=Path, help="also write the table here")
    add_replay_arguments(p)
    return p


def run(args: argparse.Namespace) -> int:
    """Build the workload and the configuration, run every policy, print and plot."""
    from expo_executor.cost import prices as prices_module
    from expo_executor.cost.preemption_fit import load_models

    _check(args)
    if args.workload is not None:
        return run_replay(args)
    workload, recorded = _workload(args)
    base = _base_config(args, recorded)
    machine_type = base.machine_type
    models = load_models(args.state_dir)
    names = [p.strip() for p in args.policies.split(",") if p.strip()]
    cases: list[tuple[Any, str]] = [(prices_module.load(args.region), "")]
    if args.regions:
        regions = _regions(args, prices_module.load)
        cases = [(RegionSet(tuple(regions[:1])), f"in {regions[0].name} alone"),
                 (RegionSet(tuple(regions)), f"in {', '.join(r.name for r in regions)}")]
    results = []
    lines = [f"workload: {workload.note}",
             f"{args.vms} VMs x {base.slots} slots ({machine_type}), up to "
             f"{base.max_on_demand} on-demand; boot {base.boot.text()}; poll {base.poll:g} s; "
             f"stockout p={args.region_stockouts or f'{args.stockout:g}'}; seed {args.seed}",
             f"preemption model ({machine_type}): {models.source(machine_type)}"]
    for price_table, title in cases:
        found = compare(workload, base, price_table, models.for_type(machine_type), names,
                        args.seed)
        results += [dataclasses.replace(r, policy=f"{r.policy} ({title})") for r in found] \
            if title else found
        lines += ["", *([f"### {title}"] if title else []), price_table.label(), "",
                  table(found)]
    text = "\n".join([*lines, ""])
    print(text)
    if args.md:
        Path(args.md).write_text(text)
    plot(results, args.png, workload.name)
    print(f"plot: {args.png}")
    return 0


def _regions(args: argparse.Namespace, load: Any) -> list[SimRegion]:
    """``--regions`` with their prices and ``--region-stockouts`` (one line errors)."""
    names = [r.strip() for r in args.regions.split(",") if r.strip()]
    given = [p.strip() for p in (args.region_stockouts or "").split(",") if p.strip()]
    if not names:
        raise ExpoError("--regions", "no region given", "give regions, e.g. us-central1,"
                        "europe-west4")
    if given and len(given) != len(names):
        raise ExpoError("--region-stockouts", f"{len(given)} probabilities for {len(names)} "
                        "regions", "give one per region of --regions, comma separated")
    try:
        chances = [float(p) for p in given] or [args.stockout] * len(names)
    except ValueError:
        raise ExpoError("--region-stockouts", f"{args.region_stockouts!r} is not a list of "
                        "numbers", "give probabilities like 0.9,0.1") from None
    if any(not 0 <= p < 1 for p in chances):
        raise ExpoError("--region-stockouts", "a probability is not in [0, 1)",
                        "give each P with 0 <= P < 1")
    return [SimRegion(name, load(name), chance) for name, chance in zip(names, chances)]


def _check(args: argparse.Namespace) -> None:
    """Bad arguments, each as one line naming the setting and the fix."""
    for name, value, low in (("--synthetic", args.synthetic, 1), ("--vms", args.vms, 1),
                             ("--slots", args.slots, 1), ("--spot-attempts", args.spot_attempts, 0),
                             ("--on-demand-min", args.on_demand_min, 0),
                             ("--max-on-demand", args.max_on_demand, 0)):
        if value is not None and value < low:
            raise ExpoError(name, f"{value} is below {low}", f"give {low} or more")
    for name, value in (("--scale", args.scale), ("--poll", args.poll)):
        if value is not None and not value > 0:
            raise ExpoError(name, f"{value:g} is not positive", "give a positive number")
    if not 0 <= args.stockout < 1:
        raise ExpoError("--stockout", f"{args.stockout:g} is not a probability below 1",
                        "give P with 0 <= P < 1")


def _workload(args: argparse.Namespace) -> tuple[Workload, BootDelay | None]:
    """A past run's workload and recorded boots, or a synthetic sweep (no recorded boots)."""
    from expo_executor.report.run_reader import find_run

    if args.run:
        return load_run(find_run(args.state_dir, args.run), args.scale, args.rule)
    return synthetic(args.synthetic, args.seed), None


def _base_config(args: argparse.Namespace, recorded: BootDelay | None) -> SimConfig:
    """The configuration every policy edits: the arguments, else what a run would use."""
    from expo_executor.cost.preemption import vcpus

    machine_type = args.machine_type or GCE.machine_type
    boot = _boot(args.boot_s) if args.boot_s else recorded or BootDelay(60.0, 15.0)
    poll = args.poll if args.poll is not None else GCE.poll
    as_run = Settings(engine=EngineName.GCE.value, max_on_demand=args.max_on_demand,
                      on_demand_min=args.on_demand_min)
    idle = args.idle_timeout if args.idle_timeout is not None else as_run.idle_timeout
    max_od = max_on_demand(as_run, args.vms)
    return SimConfig(max_workers=args.vms, slots=args.slots or vcpus(machine_type),
                     machine_type=machine_type, max_on_demand=max_od,
                     on_demand_min=args.on_demand_min, spot_attempts=args.spot_attempts,
                     poll=poll, idle_timeout=idle,
                     dispatch_s=args.dispatch_s if args.dispatch_s is not None else poll,
                     boot=boot, stockout=args.stockout)
