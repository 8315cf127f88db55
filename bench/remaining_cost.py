"""CPU and peak memory of the live estimate of what is left (expo_executor/learned/remaining.py)
at 50,000 undecided jobs, for 200 draws and fewer.

The model has seen 50,000 finished jobs of a TSP-LION2015-shaped synthetic sweep
(bench/refit_cost.py); 50,000 more are undecided, 400 of them running. Timed (process CPU,
best of ``--repeat``) and traced (tracemalloc's peak, which numpy reports to): ``informed``, what
a run does in its estimate thread (copy the model, add the running jobs as censored, refit cold,
draw), and ``draws``, the drawing alone.

    python bench/remaining_cost.py [--jobs 50000] [--repeat 2]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.refit_cost import DEADLINE, observations  # noqa: E402
from expo_executor.core.runtime_model import ModelSpec, Pending  # noqa: E402
from expo_executor.learned.model import LearnedModel  # noqa: E402
from expo_executor.learned.remaining import informed_draws, remaining_draws  # noqa: E402


def measured(action, repeat: int) -> tuple[float, float]:
    """(best CPU seconds, peak MB) of ``action``."""
    best = float("inf")
    for _ in range(repeat):
        began = time.process_time()
        action()
        best = min(best, time.process_time() - began)
    tracemalloc.start()
    action()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return best, peak / 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args()
    data = observations(2 * args.jobs)
    model = LearnedModel(ModelSpec(("instance", "repetition")), first_fit=1 << 62)
    for obs in data[:args.jobs]:
        model.observe(obs)
    model.refit()
    jobs = [Pending(obs.params, 100.0 if i < 400 else 0.0, i < 400)
            for i, obs in enumerate(data[args.jobs:])]
    out = {}
    for draws in (200, 100, 50):
        cpu, peak = measured(lambda: remaining_draws(model, jobs, DEADLINE, 0.99, draws),
                             args.repeat)
        out[f"draws {draws}"] = {"cpu_s": round(cpu, 3), "peak_mb": round(peak, 1)}
    cpu, peak = measured(lambda: informed_draws(model, jobs, DEADLINE, 0.99, 200), args.repeat)
    out["informed, 200 draws"] = {"cpu_s": round(cpu, 3), "peak_mb": round(peak, 1)}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
