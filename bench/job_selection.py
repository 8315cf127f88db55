"""One job selection at sweep scale: Snakemake's ilp and greedy schedulers against expocloud's
one pass (frontends/snakemake/job_selection.py), on the same ready jobs.

The situation of a sweep under ``-j 1000``: N trivial jobs ready at once (one node each, no
inputs), and either the whole ``-j`` free (the run's first selection) or a few nodes freed by
finished jobs (every later one). Each selector is Snakemake's own plugin class, called as
Snakemake's job scheduler calls it; ilp's CBC solve is cut at 10 s by Snakemake, which then
runs greedy as well (counted here, as the run would pay it).

    python bench/job_selection.py [--ready 5000,50000] [--free 1000,2] [--skip greedy@1000]
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from common import fmt, machine_line, versions, write_section  # noqa: E402

from snakemake.scheduling.greedy import SchedulerSettings as GreedySettings  # noqa: E402
from snakemake.scheduling.milp import SchedulerSettings as IlpSettings  # noqa: E402
from snakemake_interface_scheduler_plugins.registry import SchedulerPluginRegistry  # noqa: E402

from expo_executor.frontends.snakemake.job_selection import Selection  # noqa: E402

UNLIMITED = sys.maxsize
LOG = logging.getLogger("bench")


@dataclass(eq=False)
class ReadyJob:
    """What a scheduler reads of a ready job."""

    jobid: int
    priority: int = 0
    input: list = field(default_factory=list)
    scheduler_resources: dict = field(default_factory=lambda: {"_cores": 1, "_nodes": 1})


def timed(select, jobs: list, free: dict) -> tuple[float, int]:
    started = time.perf_counter()
    chosen = select(jobs, free)
    return time.perf_counter() - started, len(chosen)


def selectors() -> dict:
    registry = SchedulerPluginRegistry()
    greedy = registry.get_plugin("greedy").scheduler(None, GreedySettings(), LOG)
    ilp = registry.get_plugin("ilp").scheduler(None, IlpSettings(), LOG)

    def snakemake_ilp(jobs: list, free: dict) -> list:
        chosen = ilp.select_jobs(jobs, jobs, free, {})
        return greedy.select_jobs(jobs, jobs, free, {}) if chosen is None else chosen

    ours = Selection(lambda job: (-job.priority,), lambda line: None, lambda line: None)
    return {"ilp (Snakemake's default)": snakemake_ilp,
            "greedy": lambda jobs, free: greedy.select_jobs(jobs, jobs, free, {}),
            "expocloud": ours.select}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ready", default="5000,50000")
    parser.add_argument("--free", default="1000,2", help="free -j nodes at the selection")
    parser.add_argument("--skip", default="", help="SELECTOR@F,... not run at the largest N "
                        "(greedy@1000 at 50,000 ready would take hours)")
    parser.add_argument("--name", default="job-selection", help="section name in RESULTS.md")
    args = parser.parse_args()
    rows = []
    for ready in (int(n) for n in args.ready.split(",")):
        jobs = [ReadyJob(i) for i in range(ready)]
        for free in (int(n) for n in args.free.split(",")):
            resources = {"_cores": UNLIMITED, "_nodes": free, "_job_count": UNLIMITED}
            for name, select in selectors().items():
                if f"{name.split()[0]}@{free}" in args.skip.split(",") and ready == max(
                        int(n) for n in args.ready.split(",")):
                    rows.append((ready, free, name, None, None))
                    continue
                seconds, chosen = timed(select, jobs, dict(resources))
                rows.append((ready, free, name, seconds, chosen))
                print(rows[-1], flush=True)
    table = "\n".join(f"| {ready} | {free} | {name} | "
                      f"{'not run' if s is None else fmt(s, 3)} | {'' if c is None else c} |"
                      for ready, free, name, s, c in rows)
    write_section(args.name, f"""## One job selection at sweep scale (`bench/job_selection.py`)

({machine_line(versions())}). `python bench/job_selection.py --ready {args.ready} --free
{args.free} --skip {args.skip or '""'}`: Snakemake's scheduler plugins, called as its job
scheduler calls them, on N ready one-node jobs with `-j` leaving F nodes free; ilp includes
its greedy fallback when CBC gives up. Snakemake selects once per finished batch of jobs.

| ready jobs N | free nodes F | selector | seconds | jobs handed over |
|---|---|---|---|---|
{table}
""")
    return 0


if __name__ == "__main__":
    sys.exit(main())
