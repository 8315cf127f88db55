"""Helpers shared by the benchmarks: machine facts, CPU accounting, timed runs, RESULTS.md."""

from __future__ import annotations

import json
import os
import platform
import re
import resource
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
RESULTS = BENCH / "RESULTS.md"
PYTHON = sys.executable
# The snakemake of the environment the benchmark runs in (the scripts run it in-process through
# snakewrap.py with this same interpreter; this path is what the printed commands show).
SNAKEMAKE = Path(sys.executable).parent / "snakemake"
WRAP = BENCH / "snakewrap.py"
CORES = os.cpu_count() or 1
CLK_TCK = os.sysconf("SC_CLK_TCK")


def versions() -> dict:
    def version(module: str) -> str:
        try:
            from importlib.metadata import version as v
            return v(module)
        except Exception:
            return "?"
    try:
        commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"],
                                capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain",
                                "expo_executor"], capture_output=True, text=True).stdout.strip()
    except OSError:
        commit, dirty = "?", ""
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": CORES, "cpu": cpu, "python": platform.python_version(),
        "snakemake": version("snakemake"),
        "cluster_generic": version("snakemake-executor-plugin-cluster-generic"),
        "expocloud": version("snakemake-executor-plugin-expocloud"),
        "commit": commit + (" + uncommitted changes in expo_executor/" if dirty else ""),
        "kernel": platform.release(),
    }


def machine_line(v: dict) -> str:
    return (f"Machine: {v['nproc']} cores ({v['cpu']}), Linux {v['kernel']}, Python {v['python']}, "
            f"snakemake {v['snakemake']}, cluster-generic {v['cluster_generic']}, "
            f"expocloud plugin {v['expocloud']} at git {v['commit']}.")


def proc_stat() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, all cores."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    vals = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
    idle = vals[3] + vals[4]
    total = sum(vals)
    return (total - idle) / CLK_TCK, total / CLK_TCK


def children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_quiet(max_wait: float, threshold: float = 0.15, log=print) -> float:
    """Wait (up to max_wait s) until other processes use < threshold of the machine's CPU.

    Returns the busy fraction of the last 2-second sample. Other people's test suites on a
    shared machine skew every figure here; we wait a little, then measure anyway and report.
    """
    start = time.time()
    while True:
        b0, t0 = proc_stat()
        time.sleep(2.0)
        b1, t1 = proc_stat()
        busy = (b1 - b0) / max(1e-9, t1 - t0)
        if busy < threshold or time.time() - start >= max_wait:
            if busy >= threshold:
                log(f"  machine still {busy:.0%} busy with other work after {max_wait:.0f} s; "
                    "measuring anyway")
            return busy
        time.sleep(3.0)


@dataclass
class Run:
    name: str
    argv: list[str]
    cwd: Path
    exit_code: int = 0
    wall_s: float = 0.0
    children_cpu_s: float = 0.0   # everything we waited for below us, by rusage
    machine_busy_s: float = 0.0   # all cores, all processes, from /proc/stat
    extra_cpu_s: float = 0.0      # our CPU not visible by rusage (e.g. cluster-generic jobs)
    wrap: dict = field(default_factory=dict)

    @property
    def foreign_share(self) -> float:
        """Share of the machine's CPU capacity used by processes that are not ours."""
        ours = self.children_cpu_s + self.extra_cpu_s
        return max(0.0, self.machine_busy_s - ours) / max(1e-9, self.wall_s * CORES)


def run_timed(name: str, argv: list[str], cwd: Path, log_path: Path,
              env: dict | None = None, timeout: float | None = None) -> Run:
    run = Run(name, argv, cwd)
    c0, (b0, _) = children_cpu(), proc_stat()
    w0 = time.perf_counter()
    with open(log_path, "wb") as out:
        try:
            proc = subprocess.run(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                  env=env, timeout=timeout)
            run.exit_code = proc.returncode
        except subprocess.TimeoutExpired:
            run.exit_code = -999
    run.wall_s = time.perf_counter() - w0
    run.children_cpu_s = children_cpu() - c0
    run.machine_busy_s = proc_stat()[0] - b0
    return run


def run_snakemake(name: str, args: list[str], cwd: Path, log_path: Path,
                  env: dict | None = None, timeout: float | None = None) -> Run:
    """Run snakemake in-process under snakewrap.py; fills run.wrap with its report."""
    report = log_path.with_suffix(".json")
    run = run_timed(name, [PYTHON, str(WRAP), str(report), "--", *args], cwd, log_path,
                    env, timeout)
    try:
        run.wrap = json.loads(report.read_text())
    except (OSError, ValueError):
        run.wrap = {}
    return run


def last_json_line(path: Path) -> dict:
    """The last line of a log that is a JSON object (what bench/expocloud_orig.py prints last
    of a run), or {} when there is none."""
    for line in reversed(path.read_text(errors="replace").splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                break
    return {}


def show_cmd(args: list[str]) -> str:
    """The snakemake command line a user would type for a benchmark run."""
    import shlex
    return " ".join(["snakemake", *(shlex.quote(a) for a in args)])


def write_section(name: str, markdown: str, path: Path | None = None) -> None:
    """Replace (or append) the section between <!-- BEGIN name --> and <!-- END name -->
    in ``path`` (default RESULTS.md); the rest of the file is left as it is."""
    path = path or RESULTS
    begin, end = f"<!-- BEGIN {name} -->", f"<!-- END {name} -->"
    block = f"{begin}\n{markdown.rstrip()}\n{end}\n"
    if path.exists():
        text = path.read_text()
    else:
        text = ("# expocloud benchmarks\n\n"
                "Each section below is written by the script named in it; re-run the script to "
                "refresh the section. Figures are from real runs on the machine stated.\n\n")
    pattern = re.compile(re.escape(begin) + r".*?" + re.escape(end) + r"\n?", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n" + block
    path.write_text(text)


def fmt(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"
