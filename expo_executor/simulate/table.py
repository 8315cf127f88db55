"""A comparison of policies for people: a markdown table, the ratios that matter, and a plot
(matplotlib, imported only to draw).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from expo_executor.simulate.simulation import SimResult


def _duration(seconds: float) -> str:
    if seconds >= 3600:
        return f"{seconds / 3600:.2f} h"
    if seconds >= 60:
        return f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def table(results: Sequence[SimResult]) -> str:
    """A markdown table, with cost relative to all on-demand when that policy is present."""
    reference = next((r for r in results if r.policy == "on-demand"), None)
    lines = ["| policy | makespan | cost | cost / on-demand | preemptions | re-queued jobs "
             "| p99 completion | VM-h Spot | VM-h on-demand | VMs | solved / timeout / "
             "skipped / failed |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in results:
        ratio = (f"{r.cost_usd / reference.cost_usd:.3f}x"
                 if reference and reference.cost_usd > 0 else "n/a")
        c = r.counts()
        lines.append(
            f"| {r.policy} | {_duration(r.makespan_s)} | ${r.cost_usd:,.2f} | {ratio} "
            f"| {r.preemptions} | {r.requeues} | {_duration(r.p99_s)} "
            f"| {r.vm_hours.get('spot', 0.0):,.1f} | {r.vm_hours.get('on_demand', 0.0):,.1f} "
            f"| {r.vms} | {c['solved']} / {c['timeout']} / {c['skipped']} / {c['failed']} |")
    return "\n".join(lines)


def ratios(results: Sequence[SimResult]) -> dict[str, float]:
    """The ratios that matter: hybrid's cost and makespan against all on-demand, its p99
    against naive Spot retries, and its makespan against a VM per job."""
    by = {r.policy: r for r in results}
    out: dict[str, float] = {}
    ours = by.get("hybrid")
    if ours is None:
        return out
    pairs = {"cost_vs_on_demand": ("on-demand", "cost_usd"),
             "makespan_vs_on_demand": ("on-demand", "makespan_s"),
             "p99_vs_spot_naive": ("spot-naive", "p99_s"),
             "makespan_vs_vm_per_job": ("vm-per-job", "makespan_s")}
    for name, (other, attr) in pairs.items():
        if other in by and getattr(by[other], attr) > 0:
            out[name] = getattr(ours, attr) / getattr(by[other], attr)
    return out



def plot(results: Sequence[SimResult], path: Path, title: str = "") -> None:
    """Bars per policy: makespan, cost, p99 completion time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.policy for r in results]
    panels = [("makespan (h)", [r.makespan_s / 3600 for r in results]),
              ("cost (USD)", [r.cost_usd for r in results]),
              ("p99 completion (h)", [r.p99_s / 3600 for r in results])]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.8))
    colours = ["#7f7f7f" if n != "hybrid" else "#2ca02c" for n in names]
    for ax, (label, values) in zip(axes, panels):
        ax.bar(range(len(names)), values, color=colours)
        ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
        ax.set_title(label)
        ax.grid(axis="y", alpha=0.3)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
