"""A tiny run of bench/coordinator_scale.py (Benchmark 4): the real coordinator against synthetic
workers that speak the real protocol. It checks that the benchmark still drives today's
coordinator end to end (workers come up, jobs finish through signed results, no round fails),
not any figure: figures belong to the benchmark itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def test_the_coordinator_benchmark_runs_today_s_coordinator() -> None:
    argv = [sys.executable, str(REPO / "bench" / "coordinator_scale.py"), "--one",
            "--workers", "20", "--jobs", "300", "--seconds", "6", "--settle", "1",
            "--job-s", "2", "--latency", "0.005", "--warmup-limit", "30"]
    out = subprocess.run(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True,
                         text=True, timeout=120, check=False)
    assert out.returncode == 0, out.stderr[-2000:]
    row = json.loads(out.stdout.strip().splitlines()[-1])
    assert row["ready_workers"] == 20
    assert row["finished"] > 0 and row["rounds"]["n"] > 0
    assert row["errors"] == 0
    assert row["coordinator_ops_per_s"].get("A", 0) > 0 and row["memory"]["traced_mb"] > 0
