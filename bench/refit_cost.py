"""CPU per refit of the learned runtime model (expo_executor/learned) at 50,000 observations.

A TSP-LION2015-shaped sweep, synthetic: 4 solvers x 3 sizes x instances x 10 repetitions, one
instance in ten hopeless for its solver, the rest log-normal, cut at 3,600 s. The observations
are fed with refits held back, then timed (process CPU): the first fit (cold, 36 EM rounds), a
scheduled refit (warm, 12 rounds) after the next 10%, and a finish between refits (its group's
posterior, the only work a finish does) with the prediction the scheduler then asks for.

    python bench/refit_cost.py [--observations 50000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from expo_executor.core.runtime_model import ModelSpec, RuntimeObservation  # noqa: E402
from expo_executor.learned.model import LearnedModel  # noqa: E402

DEADLINE = 3600.0


def observations(count: int, seed: int = 0) -> list[RuntimeObservation]:
    rng = random.Random(seed)
    out: list[RuntimeObservation] = []
    instance = 0
    while len(out) < count:
        instance += 1
        for solver, base in (("eax", 4.0), ("eax.restart", 4.2), ("lkh", 4.5),
                             ("lkh.restart", 4.7)):
            for size, grow in (("1000", 0.0), ("1500", 0.6), ("2000", 1.2)):
                hopeless = rng.random() < 0.1
                effect = rng.gauss(0.0, 1.2)
                for rep in range(10):
                    seconds = math.inf if hopeless else math.exp(base + grow + effect
                                                                  + rng.gauss(0.0, 0.1))
                    params = {"algorithm": solver, "n": size, "instance": str(instance),
                              "repetition": str(rep)}
                    out.append(RuntimeObservation(params, min(seconds, DEADLINE),
                                                  seconds < DEADLINE))
    return out[:count]


def cpu(action) -> float:
    began = time.process_time()
    action()
    return time.process_time() - began


def measure(count: int) -> dict[str, float]:
    data = observations(int(count * 1.2) + 1)
    model = LearnedModel(ModelSpec(("instance", "repetition")), first_fit=1 << 62)
    for obs in data[:count]:
        model.observe(obs)
    cold = cpu(model.refit)
    for obs in data[count:-1]:
        model.observe(obs)
    warm = cpu(model.refit)
    last = data[-1]
    finish = cpu(lambda: (model.observe(last), model.predict(last.params, DEADLINE)))
    return {"observations": count, "first_fit_cpu_s": cold, "refit_cpu_s": warm,
            "finish_cpu_ms": finish * 1000, "refits_per_sweep_of_this_size":
            math.ceil(math.log(count / 20) / math.log(1.2))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--observations", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = [measure(args.observations) for _ in range(args.repeat)]
    best = {k: min(r[k] for r in runs) for k in runs[0]}
    print(json.dumps({"best_of": args.repeat, **best}, indent=1))


if __name__ == "__main__":
    main()
